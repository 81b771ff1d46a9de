package placement

import (
	"fmt"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
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
		if rating, err := p.rate(members); err == nil {
			plan.Estimate = rating.Actual
			plan.Efficiency = rating.Efficiency
			plan.Explanation = rating.Reason
		}
	}
	return plan, nil
}

// rate rates the plan with the snapshot's Rater, or with one built from the
// snapshot when it has none (or one for another message size).
func (p *planner) rate(members []topology.Member) (topology.Rating, error) {
	r := p.s.Rater
	if r == nil || r.MessageBytes() != p.req.messageBytes {
		var err error
		r, err = NewRater(p.s, p.req.messageBytes)
		if err != nil {
			return topology.Rating{}, err
		}
	}
	return r.Rate(members)
}

// NewRater returns the Rater of a snapshot: its tree, levels and fabric, and
// the profiles of the nodes that have a topology. Callers that plan often
// build it once per tree and set Snapshot.Rater.
func NewRater(s *Snapshot, messageBytes int64) (*topology.Rater, error) {
	levels, _, err := configuredLevels(s.Levels, s.Tree.LevelNames())
	if err != nil {
		return nil, err
	}
	profiles := make(map[string]string, len(s.Nodes))
	for _, n := range s.Nodes {
		if p, ok := topology.NodeProfile(n.Topology); ok {
			profiles[n.Name] = p.Name
		}
	}
	cfg := lockstep.TopologyConfig{Levels: levels, Oversubscription: s.Fabric.Oversubscription}
	return topology.NewRater(cfg, s.Tree, func(node string) string { return profiles[node] }, messageBytes)
}

// ringMembers returns the plan as cost-model members, one per node; false
// when it cannot be modelled (CPU-only members, nodes without topology).
func (p *planner) ringMembers() ([]topology.Member, bool) {
	if p.req.gpus == 0 {
		return nil, false
	}
	for _, u := range p.used {
		if p.s.Nodes[u.node].Topology == nil {
			return nil, false
		}
	}
	members := make([]topology.Member, len(p.used))
	// Every member's Path (Tree.Path: host up to the root) in one array.
	levels := len(p.req.levelNames)
	paths := make([]*topology.Domain, 0, len(p.used)*levels)
	at := 0
	for i, u := range p.used {
		var set topology.GPUSet
		for _, a := range p.out[at : at+u.members] {
			set |= a.GPUs
		}
		at += u.members
		start := len(paths)
		for d := p.doms[u.host].d; d != nil; d = d.Parent {
			paths = append(paths, d)
		}
		members[i] = topology.Member{Node: p.s.Nodes[u.node].Topology, GPUs: set, Path: paths[start:len(paths):len(paths)]}
	}
	return members, true
}
