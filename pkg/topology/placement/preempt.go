package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Victim is running work a higher-priority gang may evict to make room: a
// gang, evicted whole (every pod of its PodGroup, wherever they run), or a
// pod outside gangs.
type Victim struct {
	// Key names it: "namespace/podgroup" for a gang, "namespace/name" for
	// a single pod.
	Key      string
	Priority int32
	// Started is when it last started running whole (its last member
	// started); zero when it has not, which counts as starting at
	// Preemptor.Now: no work lost, and protected by MinRuntime.
	Started time.Time
	// Checkpointed is when the victim last reported a checkpoint it can
	// resume from (lockstep.Checkpoint.Time); zero when it never did in
	// the incarnation that runs. Evicting it loses the work since then,
	// not since Started (LostWork).
	Checkpointed time.Time
	// RestartOverhead is the time the victim says a restart costs it
	// before it makes progress again (loading a checkpoint, warming up):
	// lost on every eviction, whenever it checkpointed.
	RestartOverhead time.Duration
	Pods            []VictimPod
	// PDBViolations counts the victim's pods whose eviction no
	// PodDisruptionBudget allows now (upstream's "violating" victims): a
	// set of victims that violates none is preferred to any that does, so
	// a budget is broken only when nothing else makes room.
	PDBViolations int
}

// GangStarted is when a gang whose running members started at starts
// (any order) started running whole: when its minMember-th member started,
// the moment it became a gang that runs. Members that have not started
// (an elastic job below its maximum, a scale-up, minMember below the
// replicas) neither make it new nor protect it: the work the gang would
// lose is its running members', from then. Zero when fewer than minMember
// (at least 1) members run, which Victim.Started reads as never started.
func GangStarted(starts []time.Time, minMember int) time.Time {
	minMember = max(minMember, 1)
	if len(starts) < minMember {
		return time.Time{}
	}
	sorted := slices.Clone(starts)
	slices.SortFunc(sorted, time.Time.Compare)
	return sorted[minMember-1]
}

// VictimPod is one pod of a Victim and what evicting it frees.
type VictimPod struct {
	Node string
	// GPUs are the GPUs the pod holds on Node: what its node's agent
	// reported, else what the scheduler gave it.
	GPUs     topology.GPUSet
	MilliCPU int64
	Memory   int64
	// Channels are the ComputeDomain channels the pod's claims hold on
	// Node (Node.FreeChannels).
	Channels int
}

// LostWork is how much of its GPUs' time evicting the victim at now
// throws away: the time since it last started or checkpointed, whichever
// is later, plus its restart overhead. A victim that never started whole
// has lost nothing but the overhead; a checkpoint time after now (a
// clock ahead of the scheduler's) counts as now.
func (v *Victim) LostWork(now time.Time) time.Duration {
	since := v.Started
	if v.Checkpointed.After(since) {
		since = v.Checkpointed
	}
	if since.IsZero() || since.After(now) {
		since = now
	}
	return now.Sub(since) + max(v.RestartOverhead, 0)
}

// LostWorkNoticed is LostWork at evicted for a victim that was given
// notice at noticed (zero: none). A checkpoint reported at or after the
// notice answers it and holds the state the victim had when told, so the
// time it spent saving is lost work too: an answer ten seconds after the
// notice loses those ten seconds, not nothing. A victim that did not
// answer loses the work since its last checkpoint or start, as without
// notice.
func (v *Victim) LostWorkNoticed(noticed, evicted time.Time) time.Duration {
	w := *v
	if !noticed.IsZero() && !w.Checkpointed.Before(noticed) {
		w.Checkpointed = noticed
	}
	return w.LostWork(evicted)
}

// GPUs counts the victim's GPUs.
func (v *Victim) GPUs() int {
	n := 0
	for _, p := range v.Pods {
		n += p.GPUs.Len()
	}
	return n
}

// Preemptor is the gang that does not fit and what it may evict.
type Preemptor struct {
	// Gang is the gang as Policy.Gang made it. Its Widen is ignored: room
	// is made in the tightest domain the constraint allows (see Preempt).
	Gang     Gang
	Priority int32
	// Now and MinRuntime protect victims that started less than MinRuntime
	// before Now (the scheduler's minimum run time; 0 protects none).
	Now        time.Time
	MinRuntime time.Duration
	// Held are the nodes of domains held for other gangs' preemptions
	// that this gang outranks (Books.PreemptedFor), with those gangs'
	// priorities. Taking such a domain over sends its gang to preempt
	// again, so it costs as one more victim of that priority.
	Held map[string]int32
}

// Cost is what a set of victims loses, compared in field order: the pods
// evicted against a PodDisruptionBudget (as upstream's DefaultPreemption
// picks the node with fewest), then the highest priority evicted, then the
// GPU time the victims lose (Victim.LostWork: since their last checkpoint
// or start, plus their restart overhead), then how many gangs and pods are
// hit.
type Cost struct {
	PDBViolations int
	MaxPriority   int32
	GPUSeconds    float64
	Victims       int
}

// Compare orders costs, cheapest first.
func (c Cost) Compare(o Cost) int {
	return cmp.Or(
		cmp.Compare(c.PDBViolations, o.PDBViolations),
		cmp.Compare(c.MaxPriority, o.MaxPriority),
		cmp.Compare(c.GPUSeconds, o.GPUSeconds),
		cmp.Compare(c.Victims, o.Victims),
	)
}

// Preemption is the cheapest way to make room for a gang.
type Preemption struct {
	// Victims are what to evict, sorted by Key.
	Victims []Victim
	// Plan is where the gang fits once they are gone, in topology order
	// (RankOrder); its Domain is the domain freed for it.
	Plan *Plan
	Cost Cost
}

// NoPreemption says why no eviction makes room for the gang: then nothing
// should be evicted.
type NoPreemption struct {
	Reason string
}

func (e *NoPreemption) Error() string { return e.Reason }

// Preempt finds the cheapest set of whole victims whose eviction lets the
// gang be planned in the tightest domain its constraint allows. Levels are
// tried narrowest first, from the host up to the gang's level for a
// Required gang and up to the cluster otherwise; the first level where
// evicting lower-priority work makes room wins, and there the domain whose
// victims cost least (Cost, then the domain ID). Tightness comes first
// because a gang that preempts is the one the cluster values most: it should
// get the placement it would have on an empty cluster, not merely a place.
//
// Only candidates of lower priority than the preemptor, not protected by
// MinRuntime, are evicted; a gang is evicted whole or not at all. Within a
// domain, candidates are added cheapest first until the gang fits, and then
// each, most expensive first, is spared if the gang still fits without it
// (upstream's reprieve), so no victim is evicted that the plan does not
// need.
//
// Nodes drained for a gang the preemptor does not outrank (Node.Drained)
// are off limits: a domain holding one is skipped. It returns
// *NoPreemption when no set of candidates makes room, or the gang already
// fits without evicting anything, and a plain error for bad input.
func Preempt(s *Snapshot, p Preemptor, candidates []Victim) (*Preemption, error) {
	g := p.Gang
	req, err := newRequest(s, g, Options{})
	if err != nil {
		return nil, err
	}
	limit := req.limit
	if g.Level == "" || req.mode != lockstep.Required {
		limit = len(req.levelNames) - 1
	}
	eligible, why := p.eligible(candidates)
	if len(eligible) == 0 {
		return nil, &NoPreemption{Reason: "no lower-priority work to preempt" + why}
	}
	byName := make(map[string]*Node, len(s.Nodes))
	for _, n := range s.Nodes {
		byName[n.Name] = n
	}
	// on[node] indexes the eligible victims with pods on node, ascending.
	on := map[string][]int{}
	for i, c := range eligible {
		for _, pod := range c.v.Pods {
			if l := on[pod.Node]; len(l) == 0 || l[len(l)-1] != i {
				on[pod.Node] = append(l, i)
			}
		}
	}
	if pre, err := p.preempt(s, g, req, limit, eligible, byName, on); pre != nil || err != nil {
		return pre, err
	}
	where := "any domain"
	if limit < len(req.levelNames)-1 {
		where = "one " + req.levelNames[limit]
	}
	return nil, &NoPreemption{Reason: fmt.Sprintf("evicting every lower-priority job that may be preempted would not make room for %s in %s%s",
		describeGang(g.Members, g.GPUsPerMember), where, why)}
}

// preempt is Preempt's search. It returns nil and no error when no domain
// can be freed.
func (p Preemptor) preempt(s *Snapshot, g Gang, req request, limit int, eligible []scored, byName map[string]*Node, on map[string][]int) (*Preemption, error) {
	for level := 0; level <= limit; level++ {
		if level < limit && s.Tree.LevelAbsent(level) {
			// Its domains hold the same nodes as those of the level
			// above, tried next.
			continue
		}
		// Within one domain the gang is placed as Place would at this
		// level: tightest first, up to the domain.
		at := g
		at.Level, at.Mode, at.Widen, at.Implicit, at.NoDrain = req.levelNames[level], lockstep.Required, len(req.levelNames), false, true
		var best *Preemption
		for _, d := range s.Tree.Domains(level) {
			c, ok := preemptIn(s, d, at, req, byName, eligible, on, p.Held)
			if ok && len(c.Victims) == 0 {
				return nil, &NoPreemption{Reason: "the gang fits without preempting anything"}
			}
			if ok && (best == nil || c.Cost.Compare(best.Cost) < 0) {
				best = c
			}
		}
		if best != nil {
			RankOrder(s.Tree, best.Plan, s.NodeTopology)
			slices.SortFunc(best.Victims, func(a, b Victim) int { return strings.Compare(a.Key, b.Key) })
			return best, nil
		}
	}
	return nil, nil
}

// eligible returns the candidates the preemptor may evict, cheapest first,
// and what kept the others out, for the message.
func (p Preemptor) eligible(candidates []Victim) ([]scored, string) {
	var out []scored
	higher, protected := 0, 0
	for i := range candidates {
		v := &candidates[i]
		started := v.Started
		if started.IsZero() || started.After(p.Now) {
			started = p.Now
		}
		switch {
		case v.Priority >= p.Priority:
			higher++
		case p.MinRuntime > 0 && p.Now.Sub(started) < p.MinRuntime:
			protected++
		default:
			out = append(out, scored{v: v, gpuSeconds: float64(v.GPUs()) * v.LostWork(p.Now).Seconds()})
		}
	}
	// Cheapest first, and a victim that would break a budget after every
	// one that would not: within a domain, victims are added in this
	// order until the gang fits.
	slices.SortFunc(out, func(a, b scored) int {
		return cmp.Or(cmp.Compare(min(a.v.PDBViolations, 1), min(b.v.PDBViolations, 1)),
			cmp.Compare(a.v.Priority, b.v.Priority), cmp.Compare(a.gpuSeconds, b.gpuSeconds), strings.Compare(a.v.Key, b.v.Key))
	})
	var why []string
	if higher > 0 {
		why = append(why, plural(higher, "job")+" of equal or higher priority")
	}
	if protected > 0 {
		why = append(why, fmt.Sprintf("%s protected for their first %s", plural(protected, "job"), p.MinRuntime))
	}
	if len(why) == 0 {
		return out, ""
	}
	return out, " (" + strings.Join(why, ", ") + " left alone)"
}

// scored is an eligible victim with the GPU time evicting it loses.
type scored struct {
	v          *Victim
	gpuSeconds float64
}

// preemptIn finds the cheapest victims whose eviction lets gang g (already
// bound to d's level) fit in domain d, or reports false. Place runs only
// once d's nodes have room for every member (request.room summed, which
// Place needs too), so a domain costs O(its nodes + its victims' pods) per
// victim tried, and Place a handful of times.
func preemptIn(s *Snapshot, d *topology.Domain, g Gang, req request, byName map[string]*Node, eligible []scored, on map[string][]int, held map[string]int32) (*Preemption, bool) {
	for _, near := range g.Near {
		if !slices.Contains(d.Nodes, near) {
			return nil, false
		}
	}
	// cur are copies of d's nodes in the snapshot, freed of the victims
	// chosen so far; room is how many members each can take.
	cur := make(map[string]*Node, len(d.Nodes))
	var nodes []*Node
	room := map[string]int{}
	total := 0
	for _, name := range d.Nodes {
		n, ok := byName[name]
		if !ok {
			continue
		}
		if n.Drained {
			return nil, false
		}
		c := *n
		cur[name] = &c
		nodes = append(nodes, &c)
		room[name] = req.room(&c, usableGPUs(&c, c.FreeGPUs))
		total += room[name]
	}
	if len(nodes) == 0 {
		return nil, false
	}
	// The victims with pods in d, cheapest first.
	var idx []int
	for _, name := range d.Nodes {
		idx = append(idx, on[name]...)
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	touching := make([]scored, len(idx))
	for i, j := range idx {
		touching[i] = eligible[j]
	}
	// apply frees (sign 1) or takes back (-1) victim i's resources in d.
	apply := func(i, sign int) {
		for _, pod := range touching[i].v.Pods {
			n, ok := cur[pod.Node]
			if !ok {
				continue
			}
			if sign > 0 {
				n.FreeGPUs |= pod.GPUs
			} else {
				n.FreeGPUs &^= pod.GPUs
			}
			n.FreeMilliCPU = max(n.FreeMilliCPU, 0) + int64(sign)*pod.MilliCPU
			n.FreeMemory = max(n.FreeMemory, 0) + int64(sign)*pod.Memory
			n.FreePods = max(n.FreePods, 0) + sign
			n.FreeChannels = max(n.FreeChannels, 0) + sign*pod.Channels
			total -= room[pod.Node]
			room[pod.Node] = req.room(n, usableGPUs(n, n.FreeGPUs))
			total += room[pod.Node]
		}
	}
	fits := func() (*Plan, bool) {
		if total < g.Members {
			return nil, false
		}
		sub := &Snapshot{Tree: s.Tree, Fabric: s.Fabric, Levels: s.Levels, Rater: s.Rater, Nodes: nodes}
		plan, err := Place(sub, g, Options{})
		return plan, err == nil
	}
	chosen := make([]bool, len(touching))
	plan, ok := fits()
	for i := 0; !ok && i < len(touching); i++ {
		chosen[i] = true
		apply(i, 1)
		plan, ok = fits()
	}
	if !ok {
		return nil, false
	}
	// Spare every victim the plan can do without, most expensive first.
	for i := len(touching) - 1; i >= 0; i-- {
		if !chosen[i] {
			continue
		}
		apply(i, -1)
		if p, ok := fits(); ok {
			chosen[i], plan = false, p
		} else {
			apply(i, 1)
		}
	}
	out := &Preemption{Plan: plan}
	for i, c := range touching {
		if !chosen[i] {
			continue
		}
		out.Victims = append(out.Victims, *c.v)
		if out.Cost.Victims == 0 || c.v.Priority > out.Cost.MaxPriority {
			out.Cost.MaxPriority = c.v.Priority
		}
		out.Cost.GPUSeconds += c.gpuSeconds
		out.Cost.PDBViolations += c.v.PDBViolations
		out.Cost.Victims++
	}
	// A hold taken over: its gang must make room again elsewhere.
	takeover, taken := int32(0), false
	for _, name := range d.Nodes {
		if q, ok := held[name]; ok && (!taken || q > takeover) {
			takeover, taken = q, true
		}
	}
	if taken {
		if out.Cost.Victims == 0 || takeover > out.Cost.MaxPriority {
			out.Cost.MaxPriority = takeover
		}
		out.Cost.Victims++
	}
	return out, true
}

// IsNoPreemption reports whether err is a *NoPreemption.
func IsNoPreemption(err error) bool {
	var np *NoPreemption
	return errors.As(err, &np)
}
