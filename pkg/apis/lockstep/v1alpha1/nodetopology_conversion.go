package v1alpha1

import (
	"fmt"
	"math"
	"unique"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// mbpsPerGBps converts between the API's integer MB/s and the model's GB/s.
const mbpsPerGBps = 1000

// SpecFromTopology describes a node's hardware as a NodeTopology spec.
// profile names the built-in profile the node matches, or is empty.
func SpecFromTopology(node *topology.NodeTopology, profile string) NodeTopologySpec {
	spec := NodeTopologySpec{
		Profile:  profile,
		GPUCount: int32(len(node.GPUs)),
		GPUs:     make([]GPU, len(node.GPUs)),
		Links:    []GPULink{},
	}
	for i, g := range node.GPUs {
		spec.GPUs[i] = GPU{
			Index:     int32(g.Index),
			UUID:      g.UUID,
			Product:   g.Product,
			MemoryMiB: int64(g.MemoryMiB),
			PCIBusID:  g.PCIBusID,
			NUMANode:  int32(g.NUMANode),
		}
		if spec.GPUProduct == "" {
			spec.GPUProduct = g.Product
		}
	}
	for a := range node.GPUs {
		for b := a + 1; b < len(node.GPUs); b++ {
			l := node.Links[a][b]
			spec.Links = append(spec.Links, GPULink{
				A: int32(a), B: int32(b),
				Class:         LinkClass(l.Class.String()),
				NVLinks:       int32(l.NVLinks),
				BandwidthMBps: toMBps(l.GBps),
			})
		}
	}
	for _, n := range node.NICs {
		nic := NIC{
			Name:        n.Name,
			RateGbps:    int32(n.RateGbps),
			NUMANode:    int32(n.NUMANode),
			NearestGPUs: toInt32s(n.NearestGPUs),
		}
		for _, c := range n.GPUPaths {
			nic.GPUPaths = append(nic.GPUPaths, LinkClass(c.String()))
		}
		spec.NICs = append(spec.NICs, nic)
	}
	if d := node.NVLinkDomain; d != nil {
		spec.NVLinkDomain = &NVLinkDomain{
			ClusterUUID:   d.ClusterUUID,
			CliqueID:      int64(d.CliqueID),
			BandwidthMBps: toMBps(d.GBps),
		}
	}
	return spec
}

// ToTopology converts the spec into the placement model and validates it, so
// callers never reason about a malformed node.
func (s *NodeTopologySpec) ToTopology() (*topology.NodeTopology, error) {
	n := len(s.GPUs)
	if n > topology.MaxGPUs {
		return nil, fmt.Errorf("gpus: %d GPUs, at most %d supported", n, topology.MaxGPUs)
	}
	node := &topology.NodeTopology{GPUs: make([]topology.GPU, n), Links: make([][]topology.Link, n)}
	for i := range node.Links {
		node.Links[i] = make([]topology.Link, n)
	}
	for _, g := range s.GPUs {
		if g.Index < 0 || int(g.Index) >= n {
			return nil, fmt.Errorf("gpus: index %d out of range for %d GPUs", g.Index, n)
		}
		node.GPUs[g.Index] = topology.GPU{
			Index:     int(g.Index),
			UUID:      g.UUID,
			Product:   g.Product,
			MemoryMiB: int(g.MemoryMiB),
			PCIBusID:  g.PCIBusID,
			NUMANode:  int(g.NUMANode),
		}
	}
	for i, l := range s.Links {
		a, b := int(l.A), int(l.B)
		if a < 0 || b < 0 || a >= n || b >= n || a == b {
			return nil, fmt.Errorf("links[%d]: GPUs %d and %d out of range for %d GPUs", i, a, b, n)
		}
		class, err := topology.ParseLinkClass(string(l.Class))
		if err != nil {
			return nil, fmt.Errorf("links[%d]: %w", i, err)
		}
		link := topology.Link{Class: class, NVLinks: int(l.NVLinks), GBps: fromMBps(l.BandwidthMBps)}
		node.Links[a][b], node.Links[b][a] = link, link
	}
	for i, nic := range s.NICs {
		out := topology.NIC{
			Name:        nic.Name,
			RateGbps:    int(nic.RateGbps),
			NUMANode:    int(nic.NUMANode),
			NearestGPUs: toInts(nic.NearestGPUs),
		}
		for _, c := range nic.GPUPaths {
			class, err := topology.ParseLinkClass(string(c))
			if err != nil {
				return nil, fmt.Errorf("nics[%d].gpuPaths: %w", i, err)
			}
			out.GPUPaths = append(out.GPUPaths, class)
		}
		node.NICs = append(node.NICs, out)
	}
	if d := s.NVLinkDomain; d != nil {
		if d.CliqueID < 0 || d.CliqueID > math.MaxUint32 {
			return nil, fmt.Errorf("nvlinkDomain.cliqueID %d out of range", d.CliqueID)
		}
		node.NVLinkDomain = &topology.NVLinkDomain{
			// One copy per rack: the planner compares the UUIDs of
			// neighbouring nodes on every plan, which for the same
			// string is a pointer comparison, not a read of each
			// node's copy.
			ClusterUUID: unique.Make(d.ClusterUUID).Value(),
			CliqueID:    uint32(d.CliqueID),
			GBps:        fromMBps(d.BandwidthMBps),
		}
	}
	if err := node.Validate(); err != nil {
		return nil, err
	}
	return node, nil
}

func toMBps(gbps float64) int64   { return int64(math.Round(gbps * mbpsPerGBps)) }
func fromMBps(mbps int64) float64 { return float64(mbps) / mbpsPerGBps }

func toInt32s(in []int) []int32 {
	if in == nil {
		return nil
	}
	out := make([]int32, len(in))
	for i, v := range in {
		out[i] = int32(v)
	}
	return out
}

func toInts(in []int32) []int {
	if in == nil {
		return nil
	}
	out := make([]int, len(in))
	for i, v := range in {
		out[i] = int(v)
	}
	return out
}
