package framework

import (
	"net"
	"os"
	"testing"
)

func TestParseProcAddr(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"0100007F:1F90", "127.0.0.1:8080"},
		{"00000000:0016", "0.0.0.0:22"},
		{"00000000000000000000000001000000:2382", "[::1]:9090"},
		{"00000000000000000000000000000000:0050", "[::]:80"},
	}
	for _, tc := range tests {
		got, err := parseProcAddr(tc.in)
		if err != nil {
			t.Errorf("parseProcAddr(%q): %v", tc.in, err)
			continue
		}
		if got.String() != tc.want {
			t.Errorf("parseProcAddr(%q) = %s, want %s", tc.in, got.String(), tc.want)
		}
	}
	for _, bad := range []string{"", "zz:0050", "0100007F", "0100007F:XYZ", "01007F:0050"} {
		if _, err := parseProcAddr(bad); err == nil {
			t.Errorf("parseProcAddr(%q) succeeded, want an error", bad)
		}
	}
}

func TestListeningAddrsOfThisProcess(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addrs, err := ListeningAddrs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := l.Addr().(*net.TCPAddr)
	for _, a := range addrs {
		if a.IP.Equal(want.IP) && a.Port == want.Port {
			return
		}
	}
	t.Errorf("ListeningAddrs = %v, want it to include %v", addrs, want)
}
