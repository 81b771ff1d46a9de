package discovery_test

import (
	"fmt"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery/discoverytest"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// profileHardware is what NVML says about each built-in profile's machine
// beyond its topology: GPU generation, NVLink ports and PCIe link.
func profileHardware(t *testing.T, profile string) discoverytest.Hardware {
	t.Helper()
	switch profile {
	case "hgx-h100":
		return discoverytest.Hardware{
			Architecture: discovery.ArchHopper, NVLinkVersion: discovery.NVLinkVersion4_0, NVLinksPerGPU: 18,
			PCIe: discovery.PCIeLink{Generation: 5, Width: 16}, FabricSingleNode: true,
		}
	case "dgx1-v100":
		return discoverytest.Hardware{
			Architecture: discovery.ArchVolta, NVLinkVersion: discovery.NVLinkVersion2_0, NVLinksPerGPU: 6,
			PCIe: discovery.PCIeLink{Generation: 3, Width: 16},
		}
	case "l40s-pcie":
		return discoverytest.Hardware{
			Architecture: discovery.ArchAda, PCIe: discovery.PCIeLink{Generation: 4, Width: 16},
		}
	case "a100-pcie-nvlink":
		return discoverytest.Hardware{
			Architecture: discovery.ArchAmpere, NVLinkVersion: discovery.NVLinkVersion3_0, NVLinksPerGPU: 12,
			PCIe: discovery.PCIeLink{Generation: 4, Width: 16},
		}
	case "gb200-nvl72":
		return discoverytest.Hardware{
			Architecture: discovery.ArchBlackwell, NVLinkVersion: discovery.NVLinkVersion5_0, NVLinksPerGPU: 18,
			PCIe: discovery.PCIeLink{Generation: 5, Width: 16},
		}
	}
	t.Fatalf("no hardware facts for profile %q: add them to profileHardware", profile)
	return discoverytest.Hardware{}
}

// testClusterUUID and testCliqueID stand in for a real NVL72 rack's identity,
// which the profiles leave as a zero placeholder. A zero cluster UUID means
// "no multi-node domain" to NVML consumers, so a fixture must set one.
const (
	testClusterUUID = "5c8a1b52-7e0a-4c3b-9d3f-2a6b8e1f0c11"
	testCliqueID    = 7
)

// profileNode is the node topology of a built-in profile with the identity
// a real machine has and the profile leaves out: GPU UUIDs and, in a
// multi-node NVLink domain, the rack's cluster UUID and clique.
func profileNode(t *testing.T, profile string) *topology.NodeTopology {
	t.Helper()
	p, ok := topology.LookupProfile(profile)
	if !ok {
		t.Fatalf("no profile %q", profile)
	}
	node, err := p.Node()
	if err != nil {
		t.Fatalf("profile %q: %v", profile, err)
	}
	for i := range node.GPUs {
		node.GPUs[i].UUID = fmt.Sprintf("GPU-%08x-1111-2222-3333-%012x", i, 0xabcdef000+i)
	}
	if node.NVLinkDomain != nil {
		node.NVLinkDomain.ClusterUUID = testClusterUUID
		node.NVLinkDomain.CliqueID = testCliqueID
	}
	return node
}

// profileNVML is the fake NVML of a profile's machine.
func profileNVML(t *testing.T, profile string) (*discoverytest.NVML, *topology.NodeTopology) {
	t.Helper()
	node := profileNode(t, profile)
	lib, err := discoverytest.NewNVML(node, profileHardware(t, profile))
	if err != nil {
		t.Fatalf("fake NVML for %q: %v", profile, err)
	}
	return lib, node
}

// profileSysfs writes the sysfs tree of a profile's machine and returns its
// root.
func profileSysfs(t *testing.T, node *topology.NodeTopology) string {
	t.Helper()
	layout, err := discoverytest.LayoutFromTopology(node)
	if err != nil {
		t.Fatalf("PCIe layout: %v", err)
	}
	root := t.TempDir()
	if err := discoverytest.WriteSysfs(root, layout); err != nil {
		t.Fatalf("writing sysfs: %v", err)
	}
	return root
}

// withoutNICs returns node without its NICs, what discovery finds when
// sysfs shows no RDMA device.
func withoutNICs(node *topology.NodeTopology) *topology.NodeTopology {
	out := *node
	out.NICs = nil
	return &out
}

// healthy is the health of n GPUs that all answered, with the UUIDs of node.
func healthy(node *topology.NodeTopology) []discovery.GPUHealth {
	var h []discovery.GPUHealth
	for _, g := range node.GPUs {
		h = append(h, discovery.GPUHealth{Index: g.Index, UUID: g.UUID, State: discovery.GPUHealthy})
	}
	return h
}
