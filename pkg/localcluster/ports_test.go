package localcluster

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	seen := map[int]bool{}
	for range 100 {
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
			case seen[port]:
				t.Errorf("port %d handed out twice", port)
			}
			seen[port] = true
		}
	}
	// 800 ports are free and 500 given: what is left still runs out.
	if _, err := p.pick(400); err == nil {
		t.Error("pick(400) of 300 ports left: no error")
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
	got, err := freePorts(3)
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
