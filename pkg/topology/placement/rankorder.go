package placement

import (
	"cmp"
	"slices"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// RankOrder puts a plan's members in topology order, the order ranks are to
// be given in: depth-first over the domain tree, so every domain's members
// are contiguous at every level (all of one NVLink clique or leaf before the
// next, one spine's leaves before the next spine's), sibling domains by ID,
// and on a node with several members their GPU sets in NVLink order, each
// next set the one best linked to the set before it. A ring all-reduce over
// members in this order then leaves each domain once and comes back once,
// which is the fewest crossings a ring over them can make.
//
// It reorders plan.Members in place and returns them. Nodes the tree does
// not know (it must hold every planned node; Place guarantees it) sort
// after the known ones, by name. topo returns a node's GPU topology, or nil
// where none is known (its members keep lowest-index order); it is only
// called for nodes with three or more members, where the order of the sets
// can matter.
func RankOrder(tree *topology.Tree, plan *Plan, topo func(node string) *topology.NodeTopology) []Assignment {
	members := plan.Members
	slices.SortStableFunc(members, func(a, b Assignment) int {
		if a.Node == b.Node {
			return cmp.Compare(lowestGPU(a.GPUs), lowestGPU(b.GPUs))
		}
		return compareNodes(tree, a.Node, b.Node)
	})
	for start := 0; start < len(members); {
		end := start + 1
		for end < len(members) && members[end].Node == members[start].Node {
			end++
		}
		if end-start >= 3 && topo != nil {
			if t := topo(members[start].Node); t != nil {
				nvlinkChain(t, members[start:end])
			}
		}
		start = end
	}
	return members
}

// compareNodes orders two distinct nodes depth-first: by the IDs of their
// ancestors just below their lowest common domain. It climbs the tree in
// step and allocates nothing.
func compareNodes(tree *topology.Tree, a, b string) int {
	da, okA := tree.Host(a)
	db, okB := tree.Host(b)
	switch {
	case !okA && !okB:
		return cmp.Compare(a, b)
	case !okA:
		return 1
	case !okB:
		return -1
	}
	// Every host is at level 0 and every path has the same length, so the
	// parents meet at the lowest common domain.
	for da.Parent != nil && db.Parent != nil && da.Parent != db.Parent {
		da, db = da.Parent, db.Parent
	}
	return cmp.Compare(da.ID, db.ID)
}

// nvlinkChain orders the GPU sets of one node's members so that each set
// follows the one it is best linked to: it starts from the set holding the
// lowest GPU and greedily takes the remaining set with the highest link
// bandwidth to the last one taken (ties: the lower GPU). On an NVSwitch node
// every pair is equal and the sets stay in index order; on a DGX-1 cube-mesh
// or A100 bridge pairs, neighbours in the ring share NVLinks.
func nvlinkChain(t *topology.NodeTopology, members []Assignment) {
	for i := 1; i < len(members); i++ {
		best, bestGBps := i, -1.0
		for j := i; j < len(members); j++ {
			gbps := setLinkGBps(t, members[i-1].GPUs, members[j].GPUs)
			if gbps > bestGBps || (gbps == bestGBps && lowestGPU(members[j].GPUs) < lowestGPU(members[best].GPUs)) {
				best, bestGBps = j, gbps
			}
		}
		members[i], members[best] = members[best], members[i]
	}
}

// setLinkGBps is the best link bandwidth between a GPU of a and a GPU of b:
// what a ring step from one member to the next can use.
func setLinkGBps(t *topology.NodeTopology, a, b topology.GPUSet) float64 {
	best := 0.0
	n := t.NumGPUs()
	for i := range n {
		if !a.Has(i) {
			continue
		}
		for j := range n {
			if b.Has(j) && i != j {
				best = max(best, t.Link(i, j).GBps)
			}
		}
	}
	return best
}

// lowestGPU is the lowest index in set, or topology.MaxGPUs when it is empty
// (CPU-only members).
func lowestGPU(set topology.GPUSet) int {
	for i := range topology.MaxGPUs {
		if set.Has(i) {
			return i
		}
	}
	return topology.MaxGPUs
}
