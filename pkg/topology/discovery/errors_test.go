package discovery_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/discovery"
	"github.com/lockstep-dev/lockstep/pkg/topology/discovery/discoverytest"
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

// unqueriedLink is the link discovery gives a GPU it could not query: the
// slowest path, at a token bandwidth.
var unqueriedLink = topology.Link{Class: topology.LinkCrossNUMA, GBps: 0.001}

// withUnqueriedGPU returns node with GPU i reduced to what discovery
// learned of it before it failed, and its links replaced.
func withUnqueriedGPU(node *topology.NodeTopology, gpu topology.GPU) *topology.NodeTopology {
	out := *withoutNICs(node)
	out.GPUs = append([]topology.GPU(nil), node.GPUs...)
	out.GPUs[gpu.Index] = gpu
	out.Links = nil
	for i, row := range node.Links {
		row = append([]topology.Link(nil), row...)
		if i == gpu.Index {
			for j := range row {
				if j != i {
					row[j] = unqueriedLink
				}
			}
		} else {
			row[gpu.Index] = unqueriedLink
		}
		out.Links = append(out.Links, row)
	}
	return &out
}

// TestDiscoverUnqueriableGPU makes one GPU of an HGX H100 fail a query.
// Discovery must report it, lost when NVML says the GPU is lost, keep it at
// its index with what it learned before the failure, and discover the
// other GPUs as usual.
func TestDiscoverUnqueriableGPU(t *testing.T) {
	const bad = 3
	tests := []struct {
		name string
		fail func(*discoverytest.Device)
		// known is what discovery learned of the GPU before it failed.
		known      func(g topology.GPU) topology.GPU
		wantHealth func(g topology.GPU) discovery.GPUHealth
	}{
		{
			name:  "lost before its handle",
			fail:  func(d *discoverytest.Device) { d.HandleErr = discovery.NVMLErrorGPUIsLost },
			known: func(g topology.GPU) topology.GPU { return topology.GPU{Index: g.Index, NUMANode: -1} },
			wantHealth: func(g topology.GPU) discovery.GPUHealth {
				return discovery.GPUHealth{Index: g.Index, State: discovery.GPULost,
					Reason: "GPU 3: nvmlDeviceGetHandleByIndex: NVML_ERROR_GPU_IS_LOST"}
			},
		},
		{
			name: "lost at its UUID",
			fail: func(d *discoverytest.Device) { d.Errs["UUID"] = discovery.NVMLErrorGPUIsLost },
			known: func(g topology.GPU) topology.GPU {
				return topology.GPU{Index: g.Index, PCIBusID: g.PCIBusID, NUMANode: -1}
			},
			wantHealth: func(g topology.GPU) discovery.GPUHealth {
				return discovery.GPUHealth{Index: g.Index, State: discovery.GPULost,
					Reason: "GPU 3: nvmlDeviceGetUUID: NVML_ERROR_GPU_IS_LOST"}
			},
		},
		{
			name:  "lost at its NVLinks",
			fail:  func(d *discoverytest.Device) { d.Errs["NVLinkState"] = discovery.NVMLErrorGPUIsLost },
			known: func(g topology.GPU) topology.GPU { return g },
			wantHealth: func(g topology.GPU) discovery.GPUHealth {
				return discovery.GPUHealth{Index: g.Index, UUID: g.UUID, State: discovery.GPULost,
					Reason: "GPU 3: nvmlDeviceGetNvLinkState: NVML_ERROR_GPU_IS_LOST"}
			},
		},
		{
			name:  "lost at its fabric info",
			fail:  func(d *discoverytest.Device) { d.Errs["FabricInfo"] = discovery.NVMLErrorGPUIsLost },
			known: func(g topology.GPU) topology.GPU { return g },
			wantHealth: func(g topology.GPU) discovery.GPUHealth {
				return discovery.GPUHealth{Index: g.Index, UUID: g.UUID, State: discovery.GPULost,
					Reason: "GPU 3: nvmlDeviceGetGpuFabricInfoV: NVML_ERROR_GPU_IS_LOST"}
			},
		},
		{
			name: "name fails",
			fail: func(d *discoverytest.Device) { d.Errs["Name"] = discovery.NVMLErrorUnknown },
			known: func(g topology.GPU) topology.GPU {
				return topology.GPU{Index: g.Index, UUID: g.UUID, PCIBusID: g.PCIBusID, NUMANode: -1}
			},
			wantHealth: func(g topology.GPU) discovery.GPUHealth {
				return discovery.GPUHealth{Index: g.Index, UUID: g.UUID, State: discovery.GPUUnknown,
					Reason: "GPU 3: nvmlDeviceGetName: NVML_ERROR_UNKNOWN"}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib, node := profileNVML(t, "hgx-h100")
			tc.fail(lib.Devices[bad])
			report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			want := withUnqueriedGPU(node, tc.known(node.GPUs[bad]))
			if diff := cmp.Diff(want, &report.Topology); diff != "" {
				t.Errorf("topology (-want,+got):\n%s", diff)
			}
			wantHealth := healthy(node)
			wantHealth[bad] = tc.wantHealth(node.GPUs[bad])
			if diff := cmp.Diff(wantHealth, report.GPUHealth); diff != "" {
				t.Errorf("GPU health (-want,+got):\n%s", diff)
			}
			if got, want := report.UsableGPUs(), node.AllGPUs()&^topology.NewGPUSet(bad); got != want {
				t.Errorf("usable GPUs = %v, want %v", got, want)
			}
			if len(report.Warnings) > 0 {
				t.Errorf("warnings: %q", report.Warnings)
			}
		})
	}
}

// TestDiscoverLostGPUWithSysfs checks NIC placement around a lost GPU: it is
// at the far end of every NIC, and the NIC that shared its switch is paired
// with the next closest GPUs instead.
func TestDiscoverLostGPUWithSysfs(t *testing.T) {
	lib, node := profileNVML(t, "hgx-h100")
	lib.Devices[3].Errs["UUID"] = discovery.NVMLErrorGPUIsLost
	report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: profileSysfs(t, node)})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	want := topology.NIC{
		Name: "mlx5_3", RateGbps: 400, NUMANode: 0, NearestGPUs: []int{0, 1, 2},
		GPUPaths: []topology.LinkClass{
			topology.LinkSameNUMA, topology.LinkSameNUMA, topology.LinkSameNUMA, topology.LinkCrossNUMA,
			topology.LinkCrossNUMA, topology.LinkCrossNUMA, topology.LinkCrossNUMA, topology.LinkCrossNUMA,
		},
	}
	if diff := cmp.Diff(want, report.Topology.NICs[3]); diff != "" {
		t.Errorf("NIC of the lost GPU (-want,+got):\n%s", diff)
	}
	other := node.NICs[2]
	other.GPUPaths = append([]topology.LinkClass(nil), other.GPUPaths...)
	other.GPUPaths[3] = topology.LinkCrossNUMA
	if diff := cmp.Diff(other, report.Topology.NICs[2]); diff != "" {
		t.Errorf("another NIC (-want,+got):\n%s", diff)
	}
}

// TestDiscoverMIG checks that a GPU with MIG enabled keeps its place in the
// topology but is not offered as a whole GPU, and that a pending MIG change
// is reported.
func TestDiscoverMIG(t *testing.T) {
	lib, node := profileNVML(t, "hgx-h100")
	lib.Devices[1].MIGEnabled, lib.Devices[1].MIGPending = true, true
	lib.Devices[2].MIGPending = true
	report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if diff := cmp.Diff(withoutNICs(node), &report.Topology); diff != "" {
		t.Errorf("topology (-want,+got):\n%s", diff)
	}
	wantHealth := healthy(node)
	wantHealth[1].State = discovery.GPUMIGEnabled
	wantHealth[1].Reason = "MIG mode is enabled: the GPU is offered as MIG instances, not as a whole GPU"
	if diff := cmp.Diff(wantHealth, report.GPUHealth); diff != "" {
		t.Errorf("GPU health (-want,+got):\n%s", diff)
	}
	if got, want := report.UsableGPUs(), node.AllGPUs()&^topology.NewGPUSet(1); got != want {
		t.Errorf("usable GPUs = %v, want %v", got, want)
	}
	if diff := cmp.Diff([]string{"GPU 2: MIG mode becomes enabled at the next GPU reset"}, report.Warnings); diff != "" {
		t.Errorf("warnings (-want,+got):\n%s", diff)
	}
}

// pcieOnly returns node with every GPU pair on the PCIe path its NUMA nodes
// give, at the Gen5 x16 peer-to-peer bandwidths.
func pcieOnly(node *topology.NodeTopology) *topology.NodeTopology {
	out := *withoutNICs(node)
	out.Links = make([][]topology.Link, len(node.GPUs))
	for i := range node.GPUs {
		out.Links[i] = make([]topology.Link, len(node.GPUs))
		for j := range node.GPUs {
			switch {
			case i == j:
			case node.GPUs[i].NUMANode == node.GPUs[j].NUMANode:
				out.Links[i][j] = topology.Link{Class: topology.LinkSameNUMA, GBps: 40}
			default:
				out.Links[i][j] = topology.Link{Class: topology.LinkCrossNUMA, GBps: 28}
			}
		}
	}
	return &out
}

// TestDiscoverNVLinkDegraded covers an HGX H100 whose NVLinks cannot be
// used: either NVML does not offer them or the NVSwitch fabric does not let
// GPUs reach each other (no fabric manager). Pairs fall back to their PCIe
// paths.
func TestDiscoverNVLinkDegraded(t *testing.T) {
	tests := []struct {
		name         string
		degrade      func(*discoverytest.Device)
		wantWarnings int
		wantWarning  string
	}{
		{
			name:    "NVLink not supported",
			degrade: func(d *discoverytest.Device) { d.Errs["NVLinkState"] = discovery.NVMLErrorNotSupported },
		},
		{
			name: "NVLink peer-to-peer not available",
			degrade: func(d *discoverytest.Device) {
				for j := range d.NVLinkP2P {
					d.NVLinkP2P[j] = discovery.P2PStatusNotSupported
				}
			},
			wantWarnings: 28,
			wantWarning:  "GPUs 0 and 1 are both attached to NVSwitches but NVLink peer-to-peer is not supported (is nvidia-fabricmanager running?); using the PCIe path",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib, node := profileNVML(t, "hgx-h100")
			for _, d := range lib.Devices {
				tc.degrade(d)
			}
			report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(pcieOnly(node), &report.Topology); diff != "" {
				t.Errorf("topology (-want,+got):\n%s", diff)
			}
			if len(report.Warnings) != tc.wantWarnings {
				t.Errorf("%d warnings, want %d: %q", len(report.Warnings), tc.wantWarnings, report.Warnings)
			}
			if tc.wantWarning != "" && (len(report.Warnings) == 0 || report.Warnings[0] != tc.wantWarning) {
				t.Errorf("first warning %q, want %q", report.Warnings, tc.wantWarning)
			}
		})
	}
}

// TestDiscoverOlderDrivers covers answers real drivers give that the
// profiles' fixtures do not: no remote device type (drivers before it
// existed) and an NVLink version above what the GPU has. The topology must
// not change.
func TestDiscoverOlderDrivers(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		change  func(*discoverytest.Device)
	}{
		{
			name:    "no remote device type, NVSwitch",
			profile: "hgx-h100",
			change: func(d *discoverytest.Device) {
				d.Errs["NVLinkRemoteDeviceType"] = discovery.NVMLErrorFunctionNotFound
			},
		},
		{
			name:    "no remote device type, direct NVLink",
			profile: "dgx1-v100",
			change: func(d *discoverytest.Device) {
				d.Errs["NVLinkRemoteDeviceType"] = discovery.NVMLErrorNotSupported
			},
		},
		{
			name:    "NVLink 5.0 reported on Hopper",
			profile: "hgx-h100",
			change:  func(d *discoverytest.Device) { d.NVLinkVer = discovery.NVLinkVersion5_0 },
		},
		{
			name:    "no PCIe link information",
			profile: "l40s-pcie",
			// Gen4 x16 is what an unknown link is taken for.
			change: func(d *discoverytest.Device) { d.Errs["MaxPCIeLink"] = discovery.NVMLErrorNotSupported },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib, node := profileNVML(t, tc.profile)
			for _, d := range lib.Devices {
				tc.change(d)
			}
			report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(withoutNICs(node), &report.Topology); diff != "" {
				t.Errorf("topology (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestDiscoverTopologyAncestorFails falls back to the NUMA nodes for the
// PCIe class of pairs NVML cannot place, and says so.
func TestDiscoverTopologyAncestorFails(t *testing.T) {
	lib, node := profileNVML(t, "l40s-pcie")
	lib.Devices[0].Errs["TopologyCommonAncestor"] = discovery.NVMLErrorUnknown
	report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	want := withoutNICs(node)
	want.Links = append([][]topology.Link(nil), node.Links...)
	want.Links[0] = append([]topology.Link(nil), node.Links[0]...)
	want.Links[1] = append([]topology.Link(nil), node.Links[1]...)
	// GPUs 0 and 1 share a switch, but all discovery can tell is their NUMA
	// node; the other pairs already are NODE or SYS.
	want.Links[0][1] = topology.Link{Class: topology.LinkSameNUMA, GBps: 20}
	want.Links[1][0] = want.Links[0][1]
	if diff := cmp.Diff(want, &report.Topology); diff != "" {
		t.Errorf("topology (-want,+got):\n%s", diff)
	}
	if len(report.Warnings) != 7 || !strings.Contains(report.Warnings[0], "GPU 0: nvmlDeviceGetTopologyCommonAncestor: NVML_ERROR_UNKNOWN; assuming NODE") {
		t.Errorf("want 7 warnings about the topology query, got %q", report.Warnings)
	}
}

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
