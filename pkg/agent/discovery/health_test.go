package discovery_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery/discoverytest"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

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
