package discovery_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery/discoverytest"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// hcaLayout is an L40S server's first socket (GPUs 0 and 1 behind one
// switch, 2 and 3 behind another, on different host bridges) with the RDMA
// devices a real node mixes: an active NDR compute NIC per switch, a second
// port that is down, a RoCE NIC on a host bridge of its own, and more NICs
// than ten so that naming order matters.
func hcaLayout() discoverytest.Layout {
	ndr := discoverytest.Port{Rate: "400 Gb/sec (4X NDR)", State: "4: ACTIVE", LinkLayer: "InfiniBand"}
	down := discoverytest.Port{Rate: "10 Gb/sec (4X SDR)", State: "1: DOWN", LinkLayer: "InfiniBand"}
	roce := discoverytest.Port{Rate: "200 Gb/sec (2X HDR)", State: "4: ACTIVE", LinkLayer: "Ethernet"}
	return discoverytest.Layout{HostBridges: []discoverytest.HostBridge{
		{Domain: 0, Bus: 0x18, NUMANode: 0, Switches: []discoverytest.Switch{{Endpoints: []discoverytest.Endpoint{
			{Address: "0000:1b:00.0"},
			{Address: "0000:1c:00.0"},
			{Address: "0000:1d:00.0", HCA: &discoverytest.HCA{Name: "mlx5_0", NodeGUID: "b83f:d203:00a1:0000", Ports: []discoverytest.Port{ndr, down}}},
		}}}},
		{Domain: 0, Bus: 0x3a, NUMANode: 0, Switches: []discoverytest.Switch{{Endpoints: []discoverytest.Endpoint{
			{Address: "0000:3d:00.0"},
			{Address: "0000:3e:00.0"},
			{Address: "0000:3f:00.0", HCA: &discoverytest.HCA{Name: "mlx5_10", NodeGUID: "b83f:d203:00a1:000a", Ports: []discoverytest.Port{ndr}}},
		}}}},
		{Domain: 0, Bus: 0x50, NUMANode: 0, Switches: []discoverytest.Switch{{Endpoints: []discoverytest.Endpoint{
			{Address: "0000:51:00.0", HCA: &discoverytest.HCA{Name: "mlx5_2", NodeGUID: "b83f:d203:00a1:0002", Ports: []discoverytest.Port{roce}}},
			{Address: "0000:52:00.0", HCA: &discoverytest.HCA{Name: "mlx5_3", NodeGUID: "b83f:d203:00a1:0003", Ports: []discoverytest.Port{down}}},
		}}}},
	}}
}

// fourGPUNode is the first socket of the L40S profile.
func fourGPUNode(t *testing.T) (*discoverytest.NVML, *topology.NodeTopology) {
	t.Helper()
	node := profileNode(t, "l40s-pcie")
	node.GPUs = node.GPUs[:4]
	node.Links = node.Links[:4]
	for i := range node.Links {
		node.Links[i] = node.Links[i][:4]
	}
	node.NICs = nil
	lib, err := discoverytest.NewNVML(node, profileHardware(t, "l40s-pcie"))
	if err != nil {
		t.Fatalf("fake NVML: %v", err)
	}
	return lib, node
}

func TestDiscoverHCAs(t *testing.T) {
	root := t.TempDir()
	if err := discoverytest.WriteSysfs(root, hcaLayout()); err != nil {
		t.Fatalf("writing sysfs: %v", err)
	}
	// A soft-RoCE device: no PCI function, no node GUID file, and a kernel
	// old enough to have no link_layer file.
	rxe := filepath.Join(root, "class", "infiniband", "rxe0", "ports", "1")
	for name, content := range map[string]string{"rate": "10 Gb/sec (1X QDR)", "state": "4: ACTIVE"} {
		if err := os.MkdirAll(rxe, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rxe, name), []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	pix, node, sys := topology.LinkSameSwitch, topology.LinkSameNUMA, topology.LinkCrossNUMA
	tests := []struct {
		name     string
		patterns []string
		wantNICs []topology.NIC
	}{
		{
			name: "every device with an active port",
			wantNICs: []topology.NIC{
				{Name: "mlx5_0", RateGbps: 400, NUMANode: 0, NearestGPUs: []int{0, 1}, GPUPaths: []topology.LinkClass{pix, pix, node, node}},
				{Name: "mlx5_2", RateGbps: 200, NUMANode: 0, NearestGPUs: []int{0, 1, 2, 3}, GPUPaths: []topology.LinkClass{node, node, node, node}},
				{Name: "mlx5_10", RateGbps: 400, NUMANode: 0, NearestGPUs: []int{2, 3}, GPUPaths: []topology.LinkClass{node, node, pix, pix}},
				// Without a PCI location the NIC is placed by NUMA node,
				// and sysfs gives it none.
				{Name: "rxe0", RateGbps: 10, NUMANode: -1, NearestGPUs: []int{0, 1, 2, 3}, GPUPaths: []topology.LinkClass{sys, sys, sys, sys}},
			},
		},
		{
			name:     "compute NICs selected by pattern",
			patterns: []string{"mlx5_[01]*"},
			wantNICs: []topology.NIC{
				{Name: "mlx5_0", RateGbps: 400, NUMANode: 0, NearestGPUs: []int{0, 1}, GPUPaths: []topology.LinkClass{pix, pix, node, node}},
				{Name: "mlx5_10", RateGbps: 400, NUMANode: 0, NearestGPUs: []int{2, 3}, GPUPaths: []topology.LinkClass{node, node, pix, pix}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib, _ := fourGPUNode(t)
			report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: root, HCAs: tc.patterns})
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(tc.wantNICs, report.Topology.NICs); diff != "" {
				t.Errorf("NICs (-want,+got):\n%s", diff)
			}
			if len(report.Warnings) > 0 {
				t.Errorf("warnings: %q", report.Warnings)
			}
		})
	}

	t.Run("HCAs", func(t *testing.T) {
		lib, _ := fourGPUNode(t)
		report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: root})
		if err != nil {
			t.Fatalf("Discover: %v", err)
		}
		active := discovery.HCAPort{Number: 1, State: "ACTIVE", RateGbps: 400, LinkLayer: "InfiniBand"}
		want := []discovery.HCA{
			{Name: "mlx5_0", NodeGUID: "b83f:d203:00a1:0000", PCIAddress: "0000:1d:00.0", NUMANode: 0, Ports: []discovery.HCAPort{
				active, {Number: 2, State: "DOWN", RateGbps: 10, LinkLayer: "InfiniBand"},
			}},
			{Name: "mlx5_2", NodeGUID: "b83f:d203:00a1:0002", PCIAddress: "0000:51:00.0", NUMANode: 0, Ports: []discovery.HCAPort{
				{Number: 1, State: "ACTIVE", RateGbps: 200, LinkLayer: "Ethernet"},
			}},
			{Name: "mlx5_3", NodeGUID: "b83f:d203:00a1:0003", PCIAddress: "0000:52:00.0", NUMANode: 0, Ports: []discovery.HCAPort{
				{Number: 1, State: "DOWN", RateGbps: 10, LinkLayer: "InfiniBand"},
			}},
			{Name: "mlx5_10", NodeGUID: "b83f:d203:00a1:000a", PCIAddress: "0000:3f:00.0", NUMANode: 0, Ports: []discovery.HCAPort{active}},
			{Name: "rxe0", NUMANode: -1, Ports: []discovery.HCAPort{
				{Number: 1, State: "ACTIVE", RateGbps: 10, LinkLayer: "InfiniBand"},
			}},
		}
		if diff := cmp.Diff(want, report.HCAs); diff != "" {
			t.Errorf("HCAs (-want,+got):\n%s", diff)
		}
	})
}
