package discovery_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
)

// TestGoNVML runs the real go-nvml adapter. On a machine without the NVIDIA
// driver, where tests usually run, loading libnvidia-ml.so.1 fails and
// Discover must say so with ErrNVMLNotFound. On a GPU node the node's NVML
// is recorded and replayed, and the replay must discover what the driver
// did: the check behind the committed recordings of testdata/nvml (made
// there with `lockstep-topology-agent --once --sanitize --record-nvml`).
func TestGoNVML(t *testing.T) {
	sysfs := t.TempDir()
	report, err := discovery.Discover(context.Background(), discovery.Options{NVML: discovery.NewNVML(), SysfsRoot: sysfs})
	if err != nil {
		if !errors.Is(err, discovery.ErrNVMLNotFound) || !errors.Is(err, discovery.NVMLErrorLibraryNotFound) {
			t.Fatalf("Discover = %v, want %v wrapping %v", err, discovery.ErrNVMLNotFound, discovery.NVMLErrorLibraryNotFound)
		}
		t.Logf("Discover without a driver: %v", err)
		return
	}
	t.Logf("NVML lists %d GPUs (warnings %q)", len(report.Topology.GPUs), report.Warnings)
	rec, err := discovery.Record(discovery.NewNVML(), "this node")
	if err != nil {
		t.Fatalf("Record: %v", err)
	}
	replayed, err := discovery.Discover(context.Background(), discovery.Options{NVML: rec.Library(), SysfsRoot: sysfs})
	if err != nil {
		t.Fatalf("Discover on the replay: %v", err)
	}
	if diff := cmp.Diff(report, replayed); diff != "" {
		t.Errorf("replayed report (-driver,+replay):\n%s", diff)
	}
}
