package discovery_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// TestDiscoverProfiles checks discovery against every built-in profile:
// NVML and sysfs built from a profile's topology must be discovered back
// into that topology, GPUs, link classes, NVLink counts, bandwidths, NICs
// and NVLink domain alike, with every GPU healthy and nothing worked
// around.
func TestDiscoverProfiles(t *testing.T) {
	for _, p := range topology.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			lib, node := profileNVML(t, p.Name)
			sysfsRoot := profileSysfs(t, node)
			want := node
			if p.Name == "gb200-nvl72" {
				want = gb200DiscoveredNICs(node)
			}
			report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: sysfsRoot})
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(want, &report.Topology); diff != "" {
				t.Errorf("topology (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(healthy(want), report.GPUHealth); diff != "" {
				t.Errorf("GPU health (-want,+got):\n%s", diff)
			}
			if len(report.Warnings) > 0 {
				t.Errorf("warnings: %q", report.Warnings)
			}
			if lib.Shutdowns != 1 {
				t.Errorf("NVML shut down %d times, want 1", lib.Shutdowns)
			}
		})
	}
}

// TestDiscoverProfilesFromNVMLOnly discovers each profile with an empty
// sysfs, as in a container that does not mount the host's: the GPUs and
// links come from NVML alone (NUMA nodes from its memory affinity) and the
// node has no NICs.
func TestDiscoverProfilesFromNVMLOnly(t *testing.T) {
	for _, p := range topology.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			lib, node := profileNVML(t, p.Name)
			report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(withoutNICs(node), &report.Topology); diff != "" {
				t.Errorf("topology (-want,+got):\n%s", diff)
			}
			if len(report.Warnings) > 0 {
				t.Errorf("warnings: %q", report.Warnings)
			}
		})
	}
}

// gb200DiscoveredNICs is the GB200 tray as discovery models its NICs. The
// profile pairs NIC k with GPU k and, as nvidia-smi does there, puts every
// GPU-to-NIC path at SYS. In sysfs a Grace tray's GPUs and NICs each have a
// PCI root of their own, so discovery can only tell the NICs of a GPU's
// own Grace (NODE) from the other Grace's (SYS), and makes both GPUs of a
// Grace nearest to both its NICs: the same bandwidth per GPU, spread over
// two NICs instead of one.
func gb200DiscoveredNICs(node *topology.NodeTopology) *topology.NodeTopology {
	out := *node
	out.NICs = nil
	for _, nic := range node.NICs {
		nic.NearestGPUs = nil
		nic.GPUPaths = make([]topology.LinkClass, len(node.GPUs))
		for g, gpu := range node.GPUs {
			nic.GPUPaths[g] = topology.LinkCrossNUMA
			if gpu.NUMANode == nic.NUMANode {
				nic.GPUPaths[g] = topology.LinkSameNUMA
				nic.NearestGPUs = append(nic.NearestGPUs, g)
			}
		}
		out.NICs = append(out.NICs, nic)
	}
	return &out
}
