package discovery_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
)

// fixtureEnv names a file to write this node's sanitized report to, when
// the test runs on a GPU node: how real machines become fixtures.
const fixtureEnv = "LOCKSTEP_DISCOVERY_FIXTURE"

// TestGoNVML runs the real go-nvml adapter. On a machine without the NVIDIA
// driver, where tests usually run, loading libnvidia-ml.so.1 fails and
// Discover must say so with ErrNVMLNotFound. On a GPU node there is nothing
// to check about that; the test then only saves the node's report when
// asked to.
func TestGoNVML(t *testing.T) {
	report, err := discovery.Discover(context.Background(), discovery.Options{NVML: discovery.NewNVML()})
	if err == nil {
		if path := os.Getenv(fixtureEnv); path != "" {
			b, err := report.SanitizedJSON()
			if err != nil {
				t.Fatalf("SanitizedJSON: %v", err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatalf("writing fixture: %v", err)
			}
		}
		t.Skipf("NVML is present on this machine (%d GPUs, warnings %q)", len(report.Topology.GPUs), report.Warnings)
	}
	if !errors.Is(err, discovery.ErrNVMLNotFound) || !errors.Is(err, discovery.NVMLErrorLibraryNotFound) {
		t.Fatalf("Discover = %v, want %v wrapping %v", err, discovery.ErrNVMLNotFound, discovery.NVMLErrorLibraryNotFound)
	}
	t.Logf("Discover without a driver: %v", err)
}
