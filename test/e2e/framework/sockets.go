package framework

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ListeningAddrs returns the local addresses of the TCP sockets in LISTEN
// state that process pid holds, read from /proc (Linux only).
func ListeningAddrs(pid int) ([]net.TCPAddr, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return nil, err
	}
	var addrs []net.TCPAddr
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listening, err := readListeners(table)
		if err != nil {
			return nil, err
		}
		for inode, addr := range listening {
			if inodes[inode] {
				addrs = append(addrs, addr)
			}
		}
	}
	return addrs, nil
}

// socketInodes returns the inodes of the sockets among pid's open files.
func socketInodes(pid int) (map[string]bool, error) {
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("listing fds of pid %d: %w", pid, err)
	}
	inodes := map[string]bool{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	return inodes, nil
}

// tcpListen is the LISTEN state in /proc/net/tcp's "st" column.
const tcpListen = "0A"

// readListeners parses a /proc/net/tcp{,6} table into inode -> address for
// sockets in LISTEN state.
func readListeners(path string) (map[string]net.TCPAddr, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]net.TCPAddr{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != tcpListen {
			continue
		}
		addr, err := parseProcAddr(fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out[fields[9]] = addr
	}
	return out, sc.Err()
}

// parseProcAddr decodes "0100007F:1F90": an IP in host byte order, 32-bit
// word by word, and a big-endian hex port.
func parseProcAddr(s string) (net.TCPAddr, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return net.TCPAddr{}, fmt.Errorf("bad address %q", s)
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return net.TCPAddr{}, fmt.Errorf("bad address %q", s)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return net.TCPAddr{}, fmt.Errorf("bad port in %q", s)
	}
	return net.TCPAddr{IP: ip, Port: int(port)}, nil
}
