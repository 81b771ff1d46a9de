package placement

import (
	"fmt"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// plan assembles the Plan from the placed members.
func (p *planner) plan() (*Plan, error) {
	names := make([]string, len(p.used))
	for i, u := range p.used {
		names[i] = p.s.Nodes[u.node].Name
	}
	dom, err := p.s.Tree.LowestCommonDomain(names)
	if err != nil {
		return nil, fmt.Errorf("placed members outside the tree: %w", err)
	}
	plan := &Plan{Members: p.out, Domain: dom, LevelName: dom.LevelName}
	if members, ok := p.ringMembers(); ok {
		if est, err := topology.EstimateAllReduce(members, p.req.messageBytes, p.s.Fabric); err == nil {
			plan.Estimate = est
			plan.Efficiency = p.efficiency(members, est)
		}
	}
	return plan, nil
}

// ringMembers returns the plan as cost-model members, one per node; false
// when it cannot be modelled (CPU-only members, nodes without topology).
func (p *planner) ringMembers() ([]topology.Member, bool) {
	if p.req.gpus == 0 {
		return nil, false
	}
	members := make([]topology.Member, len(p.used))
	at := 0
	for i, u := range p.used {
		node := p.s.Nodes[u.node]
		if node.Topology == nil {
			return nil, false
		}
		var set topology.GPUSet
		for _, a := range p.out[at : at+u.members] {
			set |= a.GPUs
		}
		at += u.members
		members[i] = topology.Member{Node: node.Topology, GPUs: set, Path: p.s.Tree.Path(node.Name)}
	}
	return members, true
}

// efficiency rates est against the best placement of as many GPUs on an
// empty cluster of the profile holding most of the plan's GPUs (ties: the
// first by name); 0 when no node matches a built-in profile.
func (p *planner) efficiency(members []topology.Member, est topology.Estimate) float64 {
	profiles := topology.Profiles()
	gpus := make([]int, len(profiles))
	for _, m := range members {
		if len(m.Node.GPUs) == 0 {
			continue
		}
		product := productLabel(m.Node.GPUs[0].Product)
		for j, prof := range profiles {
			if prof.GPUProduct == product {
				gpus[j] += m.GPUs.Len()
			}
		}
	}
	dominant := 0
	for j := range gpus {
		if gpus[j] > gpus[dominant] {
			dominant = j
		}
	}
	if gpus[dominant] == 0 {
		return 0
	}
	best, err := topology.BestAllReduce(profiles[dominant], est.GPUs, p.req.messageBytes, p.req.levels, p.s.Fabric)
	if err != nil {
		return 0
	}
	return topology.Efficiency(best, est)
}

// productLabel writes an NVML product name the way GPU feature discovery's
// nvidia.com/gpu.product label and the profiles do: "NVIDIA H100 80GB HBM3"
// becomes "NVIDIA-H100-80GB-HBM3".
func productLabel(name string) string {
	return strings.Join(strings.Fields(name), "-")
}
