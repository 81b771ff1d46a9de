package localcluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPeakRSS(t *testing.T) {
	tests := []struct {
		name    string
		status  string
		want    uint64
		wantErr bool
	}{
		{"VmHWM in kB", "Name:\tkube-scheduler\nVmPeak:\t  900000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t  100000 kB\n", 123456 << 10, false},
		{"no VmHWM", "Name:\tx\nVmRSS:\t 1 kB\n", 0, true},
		{"garbled", "VmHWM:\tlots kB\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "status")
			if err := os.WriteFile(path, []byte(tc.status), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := peakRSS(path)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("peakRSS = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	// This test's own process has a peak.
	if rss, err := peakRSS("/proc/self/status"); err != nil || rss == 0 {
		t.Errorf("peakRSS(/proc/self/status) = %d, %v; want a peak", rss, err)
	}
}
