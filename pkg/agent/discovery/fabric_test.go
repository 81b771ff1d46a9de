package discovery_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery/discoverytest"
)

// TestDiscoverNVLinkDomain covers the fabric states of a GB200 tray: only a
// completed, successful registration that every GPU agrees on puts the
// node in the rack's NVLink domain.
func TestDiscoverNVLinkDomain(t *testing.T) {
	tests := []struct {
		name        string
		change      func([]*discoverytest.Device)
		wantDomain  bool
		wantWarning string
	}{
		{
			name:       "registered",
			change:     func([]*discoverytest.Device) {},
			wantDomain: true,
		},
		{
			name: "fabric info not supported",
			change: func(ds []*discoverytest.Device) {
				for _, d := range ds {
					d.FabricErr = discovery.NVMLErrorNotSupported
				}
			},
		},
		{
			name: "registration in progress",
			change: func(ds []*discoverytest.Device) {
				ds[0].Fabric.State = discovery.FabricStateInProgress
			},
			wantWarning: "GPU 0: NVLink fabric registration is in progress; the node is left out of any multi-node NVLink domain",
		},
		{
			name: "registration failed",
			change: func(ds []*discoverytest.Device) {
				ds[2].Fabric.Status = discovery.NVMLErrorUnknown
			},
			wantWarning: "GPU 2: NVLink fabric registration failed: NVML_ERROR_UNKNOWN; the node is left out of any multi-node NVLink domain",
		},
		{
			name: "fabric info fails",
			change: func(ds []*discoverytest.Device) {
				ds[1].FabricErr = discovery.NVMLErrorUnknown
			},
			wantWarning: "GPU 1: GPU 1: nvmlDeviceGetGpuFabricInfoV: NVML_ERROR_UNKNOWN; the node is left out of any multi-node NVLink domain",
		},
		{
			name: "GPUs in different cliques",
			change: func(ds []*discoverytest.Device) {
				ds[3].Fabric.CliqueID = testCliqueID + 1
			},
			wantWarning: "GPU 0 is in NVLink domain " + testClusterUUID + ".7 but GPU 3 is in " + testClusterUUID + ".8; the node is left out of any multi-node NVLink domain",
		},
		{
			name: "one GPU in no domain",
			change: func(ds []*discoverytest.Device) {
				ds[3].Fabric.ClusterUUID = [16]byte{}
			},
			wantWarning: "3 GPUs are in NVLink domain " + testClusterUUID + ".7 and 1 are in none; the node is left out of it",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib, node := profileNVML(t, "gb200-nvl72")
			tc.change(lib.Devices)
			report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			want := withoutNICs(node)
			if !tc.wantDomain {
				want.NVLinkDomain = nil
			}
			if diff := cmp.Diff(want, &report.Topology); diff != "" {
				t.Errorf("topology (-want,+got):\n%s", diff)
			}
			var wantWarnings []string
			if tc.wantWarning != "" {
				wantWarnings = []string{tc.wantWarning}
			}
			if diff := cmp.Diff(wantWarnings, report.Warnings); diff != "" {
				t.Errorf("warnings (-want,+got):\n%s", diff)
			}
		})
	}
}
