package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestEphemeralStart(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" for no file
		want    int
	}{
		{"linux default range", "32768\t60999\n", 32768},
		{"lowered range", "15000 65000", 15000},
		{"no file", "", 32768},
		{"one field", "32768\n", 32768},
		{"garbled", "low high", 32768},
		{"out of range", "70000 80000", 32768},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ip_local_port_range")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := ephemeralStart(path); got != tc.want {
				t.Errorf("ephemeralStart = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestPortPickerStaysBelowEphemeralRange: every port is below the range
// outgoing connections draw from, free when picked, and handed out once.
func TestPortPickerStaysBelowEphemeralRange(t *testing.T) {
	p := newPortPicker(lowestPort + 1200)
	busy := map[int]bool{}
	for port := lowestPort; port < lowestPort+1200; port += 3 {
		busy[port] = true
	}
	p.free = func(port int) bool { return !busy[port] }
	// Every third port is claimed by another process.
	p.claim = func(port int) bool { return port%3 != 2 }
	seen := map[int]bool{}
	for range 60 {
		got, err := p.pick(5)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 {
			t.Fatalf("pick(5) = %v", got)
		}
		for _, port := range got {
			switch {
			case port < lowestPort || port >= lowestPort+1200:
				t.Errorf("port %d outside [%d, %d)", port, lowestPort, lowestPort+1200)
			case busy[port]:
				t.Errorf("port %d was busy", port)
			case port%3 == 2:
				t.Errorf("port %d is another process's", port)
			case seen[port]:
				t.Errorf("port %d handed out twice", port)
			}
			seen[port] = true
		}
	}
	// 400 ports are free and unclaimed, 300 given: what is left runs out.
	if _, err := p.pick(200); err == nil {
		t.Error("pick(200) of 100 ports left: no error")
	}
}

func TestPortPickerNarrowRange(t *testing.T) {
	p := newPortPicker(lowestPort + 10)
	if _, err := p.pick(1); !errors.Is(err, errNoPortRange) {
		t.Errorf("pick below a range starting at %d: %v, want %v", lowestPort+10, err, errNoPortRange)
	}
}

// TestFreePortsCanBeBound: the real picker's ports can be listened on.
func TestFreePortsCanBeBound(t *testing.T) {
	got, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range got {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Errorf("listening on picked port %d: %v", port, err)
			continue
		}
		l.Close()
		if port >= ports.hi {
			t.Errorf("port %d is in the ephemeral range (from %d)", port, ports.hi)
		}
	}
}

// TestPortClaimedByAnotherProcessIsSkipped: a port another process's picker
// claimed cannot be claimed here, even though nothing listens on it yet.
// The other process is this test binary run again, holding the claim until
// its stdin closes.
func TestPortClaimedByAnotherProcessIsSkipped(t *testing.T) {
	if port := os.Getenv("LOCKSTEP_TEST_HOLD_PORT"); port != "" {
		n, _ := strconv.Atoi(port)
		if !claimPort(n) {
			os.Exit(3)
		}
		fmt.Println("claimed")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	// The child derives its lock dir from TMPDIR, as every process does.
	tmp := t.TempDir()
	saved := portLockDir
	portLockDir = filepath.Join(tmp, "lockstep-ports")
	t.Cleanup(func() { portLockDir = saved })
	const port = lowestPort + 7
	holder := exec.Command(os.Args[0], "-test.run=^TestPortClaimedByAnotherProcessIsSkipped$")
	holder.Env = append(os.Environ(), "LOCKSTEP_TEST_HOLD_PORT="+strconv.Itoa(port), "TMPDIR="+tmp)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = holder.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "claimed") {
		t.Fatalf("holder did not claim port %d: %q %v", port, line, err)
	}
	if claimPort(port) {
		t.Fatalf("port %d claimed here while another process holds it", port)
	}
	if !claimPort(port + 1) {
		t.Errorf("port %d, which nobody holds, was refused", port+1)
	}
}
