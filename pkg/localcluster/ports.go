package localcluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Ports for the cluster's listeners (apiserver, etcd, our components'
// metrics and health servers) are picked by the harness, which passes them
// on the command line, and bound a moment later by the child process.
//
// The usual pick, listening on port 0 and closing, draws from the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), the same range every
// outgoing connection on the machine takes its local port from. Between
// the pick and the child's bind, any client socket (and a test cluster has
// hundreds) can take the port; the child then fails to listen and exits,
// possibly after its health endpoint already answered. So ports come from
// below the ephemeral range, which connections never use, and none is
// handed out twice in one process, so components started one after another
// cannot be given a port a stopped one is still closing.

// lowestPort bounds the picks from below, clear of the well-known and
// commonly configured service ports.
const lowestPort = 10000

// Several harness processes may run on one machine at once (the e2e suite's
// shards, a demo started by a test, make cluster-up beside a test run), each
// with its own picker. Random draws make it rare, not impossible, that two
// pick the same free port in the moment before either child binds it; a
// lost race is a component that fails to start. So each process also
// claims every port it hands out: an exclusive flock on a per-port file
// under portLockDir, held until the process exits (the kernel drops it
// then, so a killed run never leaves a port claimed).
var portLockDir = filepath.Join(os.TempDir(), "lockstep-ports")

// ephemeralRangeFile holds the kernel's ephemeral port range, "low high".
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// portPicker hands out loopback ports in [lo, hi).
type portPicker struct {
	mu     sync.Mutex
	lo, hi int
	given  map[int]bool
	// free reports whether a port can be listened on now.
	free func(port int) bool
	// claim reserves a port against other processes' pickers; false when
	// another process holds it.
	claim func(port int) bool
}

var ports = newPortPicker(ephemeralStart(ephemeralRangeFile))

// newPortPicker picks below hi, the ephemeral range's start.
func newPortPicker(hi int) *portPicker {
	return &portPicker{lo: lowestPort, hi: hi, given: map[int]bool{}, free: canListen, claim: claimPort}
}

// ephemeralStart reads the start of the ephemeral port range from path,
// Linux's default (32768) when it cannot: other systems start theirs higher
// still (IANA's 49152), so ports below 32768 are clear of them too.
func ephemeralStart(path string) int {
	const linuxDefault = 32768
	data, err := os.ReadFile(path)
	if err != nil {
		return linuxDefault
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return linuxDefault
	}
	lo, err := strconv.Atoi(fields[0])
	if err != nil || lo <= 0 || lo > 65535 {
		return linuxDefault
	}
	return lo
}

// canListen reports whether port is free on 127.0.0.1, where every
// component binds.
func canListen(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// claimed keeps the claimed ports' lock files open: closing one would drop
// its flock.
var claimed struct {
	sync.Mutex
	files []*os.File
}

// claimPort takes an exclusive, non-blocking flock on port's file in
// portLockDir for the rest of the process's life. When the directory cannot
// be used (a read-only temp dir), it claims nothing and says yes: the random
// draw alone is what the harness had before.
func claimPort(port int) bool {
	if err := os.MkdirAll(portLockDir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	claimed.Lock()
	claimed.files = append(claimed.files, f)
	claimed.Unlock()
	return true
}

// errNoPortRange says the ephemeral range leaves too few ports below it.
var errNoPortRange = errors.New("no ports below the ephemeral range")

// pick returns n distinct ports that are free now and were never handed out
// before.
func (p *portPicker) pick(n int) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	span := p.hi - p.lo
	if span < 1000 {
		return nil, fmt.Errorf("%w: [%d, %d) is too narrow; lower net.ipv4.ip_local_port_range's start", errNoPortRange, p.lo, p.hi)
	}
	out := make([]int, 0, n)
	// Random draws rather than a scan: parallel test processes (each with its
	// own picker) then rarely try the same port first.
	for tries := 0; len(out) < n; tries++ {
		if tries == span {
			return nil, fmt.Errorf("no free port in [%d, %d) after %d tries (%d handed out)", p.lo, p.hi, tries, len(p.given))
		}
		port := p.lo + rand.IntN(span)
		if p.given[port] || !p.free(port) || !p.claim(port) {
			continue
		}
		p.given[port] = true
		out = append(out, port)
	}
	return out, nil
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1 for listeners
// the harness's children will bind. Exported for the e2e suite's peers
// (test/e2e/framework): every port of a process must come from this one
// picker, or two components could be handed the same port.
func FreePorts(n int) ([]int, error) {
	return ports.pick(n)
}
