package discovery_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery/discoverytest"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

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
