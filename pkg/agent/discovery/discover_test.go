package discovery_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery/discoverytest"
)

// TestDiscoverFails covers the failures that leave nothing to report: each
// must come back as an error that says which step failed, and NVML must be
// shut down whenever it was initialized.
func TestDiscoverFails(t *testing.T) {
	tests := []struct {
		name      string
		breakNVML func(*discoverytest.NVML)
		opts      discovery.Options
		wantIs    []error
		wantText  string
		// wantShutdowns is 1 when Init succeeded.
		wantShutdowns int
	}{
		{
			name:      "NVML library missing",
			breakNVML: func(n *discoverytest.NVML) { n.InitErr = discovery.NVMLErrorLibraryNotFound },
			wantIs:    []error{discovery.ErrNVMLNotFound, discovery.NVMLErrorLibraryNotFound},
			wantText:  "--mode=fake",
		},
		{
			name:      "driver not loaded",
			breakNVML: func(n *discoverytest.NVML) { n.InitErr = discovery.NVMLErrorDriverNotLoaded },
			wantIs:    []error{discovery.NVMLErrorDriverNotLoaded},
			wantText:  "nvmlInit: NVML_ERROR_DRIVER_NOT_LOADED",
		},
		{
			name:          "device count fails",
			breakNVML:     func(n *discoverytest.NVML) { n.CountErr = discovery.NVMLErrorUnknown },
			wantIs:        []error{discovery.NVMLErrorUnknown},
			wantText:      "nvmlDeviceGetCount: NVML_ERROR_UNKNOWN",
			wantShutdowns: 1,
		},
		{
			name:          "no GPUs",
			breakNVML:     func(n *discoverytest.NVML) { n.Devices = nil },
			wantIs:        []error{discovery.ErrNoGPUs},
			wantShutdowns: 1,
		},
		{
			name:     "bad HCA pattern",
			opts:     discovery.Options{HCAs: []string{"mlx5_["}},
			wantText: `HCA pattern "mlx5_["`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib, _ := profileNVML(t, "l40s-pcie")
			if tc.breakNVML != nil {
				tc.breakNVML(lib)
			}
			opts := tc.opts
			opts.NVML, opts.SysfsRoot = lib, t.TempDir()
			report, err := discovery.Discover(context.Background(), opts)
			if err == nil {
				t.Fatalf("Discover succeeded with %d GPUs, want an error", len(report.Topology.GPUs))
			}
			for _, target := range tc.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("error %q is not %q", err, target)
				}
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q does not say %q", err, tc.wantText)
			}
			if lib.Shutdowns != tc.wantShutdowns {
				t.Errorf("NVML shut down %d times, want %d", lib.Shutdowns, tc.wantShutdowns)
			}
		})
	}
}

func TestDiscoverRequiresNVML(t *testing.T) {
	if _, err := discovery.Discover(context.Background(), discovery.Options{}); err == nil {
		t.Fatal("Discover without an NVML library succeeded")
	}
}

func TestDiscoverStopsWhenCancelled(t *testing.T) {
	lib, _ := profileNVML(t, "hgx-h100")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := discovery.Discover(ctx, discovery.Options{NVML: lib, SysfsRoot: t.TempDir()}); !errors.Is(err, context.Canceled) {
		t.Errorf("Discover with a cancelled context: got %v, want %v", err, context.Canceled)
	}
	if lib.Shutdowns != 1 {
		t.Errorf("NVML shut down %d times, want 1", lib.Shutdowns)
	}
}

func TestDiscoverReportsShutdownFailure(t *testing.T) {
	lib, _ := profileNVML(t, "l40s-pcie")
	lib.ShutdownErr = discovery.NVMLErrorUnknown
	report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if diff := cmp.Diff([]string{"nvmlShutdown: NVML_ERROR_UNKNOWN"}, report.Warnings); diff != "" {
		t.Errorf("warnings (-want,+got):\n%s", diff)
	}
}

// TestDiscoverReportsUnreadableSysfs checks that a sysfs whose RDMA class
// cannot be listed costs the node its NICs, not its report, and is named
// among the unavailable sources.
func TestDiscoverReportsUnreadableSysfs(t *testing.T) {
	lib, _ := profileNVML(t, "hgx-h100")
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "class"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A file where the directory should be: ReadDir fails, not with ENOENT.
	if err := os.WriteFile(filepath.Join(root, "class", "infiniband"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: root})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if diff := cmp.Diff([]discovery.Source{discovery.SourceSysfs}, report.Unavailable); diff != "" {
		t.Errorf("unavailable sources (-want,+got):\n%s", diff)
	}
}
