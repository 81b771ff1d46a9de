package placement

import (
	"fmt"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// unschedulable explains why choose found no domain: the cluster cannot
// hold the gang at all, or it can but not within the constraint. A gang in
// widens is given a domain of its base level to drain.
func (p *planner) unschedulable() error {
	u := p.why()
	if i := p.drainable(); i >= 0 {
		u.Drain, u.DrainFree = labelled(p.doms[i].d), p.doms[i].free
		u.Reason += fmt.Sprintf("; draining %s %s for it: no other pod takes GPUs there while it waits", p.noun(u.Drain.Level), u.Drain.DisplayID())
	}
	return u
}

// why is unschedulable without the drain.
func (p *planner) why() *Unschedulable {
	r := &p.req
	gang := describeGang(r.members, r.gpus)
	root := &p.doms[0]
	if root.room < r.members {
		switch {
		case len(p.s.Nodes) == 0:
			return &Unschedulable{Reason: gang + ": no eligible nodes"}
		case root.free < r.members*r.gpus:
			return &Unschedulable{Reason: fmt.Sprintf("%s needs %d GPUs, %d free in the cluster", gang, r.members*r.gpus, root.free)}
		}
		return &Unschedulable{Reason: fmt.Sprintf("%s does not fit in the cluster: it has room for %s", gang, p.roomOf(0))}
	}

	// The cluster holds the gang; the constraint keeps it narrower.
	u := &Unschedulable{}
	for level := r.stop + 1; level < len(r.levelNames) && u.WiderLevel == ""; level++ {
		if i := p.roomiest(level); i >= 0 && p.doms[i].room >= r.members {
			u.WiderLevel = labelled(p.doms[i].d).LevelName
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s does not fit %s", gang, p.where(r.stop))
	if i := p.roomiest(r.stop); i >= 0 {
		fmt.Fprintf(&b, ": the best %s has room for %s", p.noun(r.stop), p.roomOf(i))
	}
	if r.mode == lockstep.Required {
		b.WriteString("; Required constraint")
		switch {
		case r.stop < r.want && r.stop == r.base:
			fmt.Fprintf(&b, " on %s, tightest first: kept to %s, the narrowest level that could ever hold it, for its first wait", r.levelNames[r.want], r.levelNames[r.stop])
		case r.stop < r.want:
			fmt.Fprintf(&b, " on %s, tightest first: from %s, the narrowest level that could ever hold it, widened so far to %s", r.levelNames[r.want], r.levelNames[r.base], r.levelNames[r.stop])
		}
	} else {
		switch {
		case r.implicit:
			fmt.Fprintf(&b, "; no topology constraint, so the tightest domain first: from %s, the narrowest level that could ever hold it", r.levelNames[r.base])
		default:
			fmt.Fprintf(&b, "; Preferred constraint on %s", r.levelNames[r.want])
		}
		if r.base > r.want && !r.implicit {
			fmt.Fprintf(&b, ", skipped to %s as no %s could hold it even with every GPU free", r.levelNames[r.base], p.noun(r.base-1))
		}
		if r.stop > r.base {
			fmt.Fprintf(&b, ", widened so far to %s", r.levelNames[r.stop])
		}
	}
	if u.WiderLevel != "" {
		fmt.Fprintf(&b, "; it would fit %s", p.within(u.WiderLevel))
	}
	if p.nearLo >= 0 {
		fmt.Fprintf(&b, "; kept beside the gang's %d members placed before", len(r.near))
	}
	u.Reason = b.String()
	return u
}

// drainable returns the domain a waiting gang that widens, whose last
// drain did not stall (Gang.NoDrain) and that has no members placed before
// (Gang.Near), should drain (Unschedulable.Drain), or -1: at the base level, a domain
// short of the whole cluster that could ever hold the gang, holds its Near
// nodes and no node drained for another gang, with room for the most
// members now, then the most free GPUs; the first in tree order (lowest
// ID) on ties.
func (p *planner) drainable() int32 {
	r := &p.req
	// A gang with members placed before (Near: an elastic gang growing, the
	// rest of a gang after a scheduler failover) drains nothing. Its base is
	// the narrowest domain holding those members, whose GPUs they keep for
	// as long as the gang runs: a drain there waits for pods that are not
	// ending (an elastic job whose first Worker fills its node would hold
	// its other Workers for a whole drain stall), while widening one level
	// per preferredWait places them beside the running ones.
	if !r.widens || r.noDrain || r.gpus == 0 || r.base > r.limit || p.nearLo >= 0 {
		return -1
	}
	// A domain holding every node (the root, or the one spine of a small
	// cluster) is never drained: a gang only it could hold has no tighter
	// domain to wait for, and draining it would stop every other pod.
	all := len(p.doms[0].d.Nodes)
	best := int32(-1)
	for i := range p.doms {
		d := &p.doms[i]
		if d.d.Level != r.base || len(d.d.Nodes) == all || d.ever < r.members || d.drained > 0 || !p.holdsNear(int32(i)) {
			continue
		}
		if best < 0 || d.room > p.doms[best].room || (d.room == p.doms[best].room && d.free > p.doms[best].free) {
			best = int32(i)
		}
	}
	return best
}

// labelled returns d or, when d stands for a level no node is labelled for,
// the ancestor it passes through to: the domain a user would recognise.
func labelled(d *topology.Domain) *topology.Domain {
	for d.Synthetic && d.Value == "" && d.Parent != nil {
		d = d.Parent
	}
	return d
}

// roomiest returns the domain of a level with the most room (the first in
// tree order on ties), or -1 when the level has none.
func (p *planner) roomiest(level int) int32 {
	best := int32(-1)
	for i := range p.doms {
		if d := &p.doms[i]; d.d.Level == level && p.holdsNear(int32(i)) && (best < 0 || d.room > p.doms[best].room) {
			best = int32(i)
		}
	}
	return best
}

// roomOf describes how many members domain i can take and what limits it,
// so the user knows which request to shrink or which resource to free.
func (p *planner) roomOf(i int32) string {
	r := &p.req
	m := r.members
	var gpuRoom, cpuRoom, memRoom, podRoom, channelRoom int
	for _, d := range p.doms[i:p.doms[i].end] {
		if d.node < 0 {
			continue
		}
		node := p.s.Nodes[d.node]
		if r.gpus > 0 {
			gpuRoom += min(m, d.free/r.gpus)
		}
		cpuRoom += min(m, share(node.FreeMilliCPU, r.milliCPU))
		memRoom += min(m, share(node.FreeMemory, r.memory))
		podRoom += min(m, max(node.FreePods, 0))
		channelRoom += min(m, max(node.FreeChannels, 0))
	}
	var limits []string
	if r.gpus > 0 && gpuRoom < m {
		if free := p.doms[i].free; free >= m*r.gpus {
			limits = append(limits, fmt.Sprintf("its %d free GPUs hold only %d sets of %d on one node", free, gpuRoom, r.gpus))
		} else {
			limits = append(limits, fmt.Sprintf("%d of %d GPUs free", free, m*r.gpus))
		}
	}
	for _, l := range []struct {
		room int
		what string
		skip bool
	}{{cpuRoom, "CPU allows", false}, {memRoom, "memory allows", false}, {podRoom, "pod slots allow", false},
		{channelRoom, "free ComputeDomain channels allow", !r.channels}} {
		if !l.skip && l.room < m {
			limits = append(limits, fmt.Sprintf("%s %s", l.what, plural(l.room, "member")))
		}
	}
	if len(limits) == 0 {
		limits = append(limits, "free GPUs, CPU, memory and pod slots are on different nodes")
	}
	return fmt.Sprintf("%s (%s)", plural(p.doms[i].room, "member"), strings.Join(limits, ", "))
}

// where phrases "in every domain of level i": "on any single node", "in any
// leaf (fabric.topograph.run/tier-0)".
func (p *planner) where(level int) string {
	switch {
	case level == 0:
		return "on any single node"
	case level == len(p.req.levelNames)-1:
		return "in the cluster"
	}
	s := "in any " + p.req.levelNames[level]
	if key := p.req.labelKeys[level]; key != "" {
		s += " (" + key + ")"
	}
	return s
}

func (p *planner) within(name string) string {
	switch name {
	case p.req.levelNames[0]:
		return "on one node"
	case p.req.levelNames[len(p.req.levelNames)-1]:
		return "in the cluster"
	}
	return "in one " + name
}

func (p *planner) noun(level int) string {
	if level == 0 {
		return "node"
	}
	return p.req.levelNames[level]
}

func describeGang(members, gpus int) string {
	if gpus == 0 {
		return fmt.Sprintf("gang of %s", plural(members, "CPU-only member"))
	}
	return fmt.Sprintf("gang of %d x %s", members, plural(gpus, "GPU"))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
