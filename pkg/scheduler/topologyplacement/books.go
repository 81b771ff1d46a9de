package topologyplacement

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// gangPlan is one gang's plan and which member slots pods have taken.
type gangPlan struct {
	key     string // namespace/podgroup
	plan    *placement.Plan
	created time.Time
	// slots[i] is the pod that reserved member i, or "" while open.
	slots []types.UID
	// published is set once the placement was written to the PodGroup.
	published bool
}

// openSlotsOn returns the indices of open slots on node.
func (g *gangPlan) openSlotsOn(node string) []int {
	var out []int
	for i, m := range g.plan.Members {
		if m.Node == node && g.slots[i] == "" {
			out = append(out, i)
		}
	}
	return out
}

func (g *gangPlan) complete() bool {
	for _, s := range g.slots {
		if s == "" {
			return false
		}
	}
	return true
}

// books holds every gang's plan. Capacity held by a plan is invisible to the
// scheduler's own resource accounting until members are reserved, so the
// books are what keeps concurrent gangs (and single pods) from planning into
// it.
type books struct {
	mu    sync.Mutex
	gangs map[string]*gangPlan
	// held[node] are the GPUs plans hold there for open slots.
	held map[string]topology.GPUSet
	// assigned are the GPUs of pods reserved through a plan, until the pod is
	// gone: the node's NodeTopology may not show them yet. assignedOn is
	// their union per node, so lookups stay O(1) however many pods run.
	assigned   map[types.UID]assignment
	assignedOn map[string]topology.GPUSet
}

type assignment struct {
	gang string
	node string
	gpus topology.GPUSet
}

func newBooks() *books {
	return &books{
		gangs:      map[string]*gangPlan{},
		held:       map[string]topology.GPUSet{},
		assigned:   map[types.UID]assignment{},
		assignedOn: map[string]topology.GPUSet{},
	}
}

// get returns a gang's plan.
func (b *books) get(key string) (*gangPlan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.gangs[key]
	return g, ok
}

// add records a new plan and holds its capacity.
func (b *books) add(key string, plan *placement.Plan, now time.Time) *gangPlan {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(key)
	g := &gangPlan{key: key, plan: plan, created: now, slots: make([]types.UID, len(plan.Members))}
	b.gangs[key] = g
	for _, m := range plan.Members {
		b.held[m.Node] |= m.GPUs
	}
	return g
}

// drop forgets a gang's plan and releases what it holds, including the slots
// of members already reserved (they are being rejected). It reports whether
// there was a plan.
func (b *books) drop(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropLocked(key)
}

func (b *books) dropLocked(key string) bool {
	g, ok := b.gangs[key]
	if !ok {
		return false
	}
	for i, m := range g.plan.Members {
		if g.slots[i] == "" {
			b.releaseHeldLocked(m.Node, m.GPUs)
		} else {
			b.unassignLocked(g.slots[i])
		}
	}
	delete(b.gangs, key)
	return true
}

func (b *books) releaseHeldLocked(node string, gpus topology.GPUSet) {
	if rest := b.held[node] &^ gpus; rest != 0 {
		b.held[node] = rest
	} else {
		delete(b.held, node)
	}
}

// reserve gives pod an open slot of its gang's plan on node. It returns the
// member's GPUs, or false when the plan has no open slot there.
func (b *books) reserve(key string, pod types.UID, node string) (topology.GPUSet, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.gangs[key]
	if !ok {
		return 0, false
	}
	for i, m := range g.plan.Members {
		if g.slots[i] == pod {
			return m.GPUs, m.Node == node
		}
	}
	open := g.openSlotsOn(node)
	if len(open) == 0 {
		return 0, false
	}
	i := open[0]
	g.slots[i] = pod
	m := g.plan.Members[i]
	b.releaseHeldLocked(node, m.GPUs)
	b.assignLocked(pod, assignment{gang: key, node: node, gpus: m.GPUs})
	return m.GPUs, true
}

// assign records the GPUs chosen for a pod outside gangs.
func (b *books) assign(pod types.UID, node string, gpus topology.GPUSet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.assignLocked(pod, assignment{node: node, gpus: gpus})
}

func (b *books) assignLocked(pod types.UID, a assignment) {
	b.unassignLocked(pod)
	b.assigned[pod] = a
	b.assignedOn[a.node] |= a.gpus
}

// unassignLocked forgets a pod's GPUs and recomputes its node's union from
// the pods still there.
func (b *books) unassignLocked(pod types.UID) {
	a, ok := b.assigned[pod]
	if !ok {
		return
	}
	delete(b.assigned, pod)
	var rest topology.GPUSet
	for _, other := range b.assigned {
		if other.node == a.node {
			rest |= other.gpus
		}
	}
	if rest == 0 {
		delete(b.assignedOn, a.node)
	} else {
		b.assignedOn[a.node] = rest
	}
}

// assignmentOf returns the GPUs a reserved pod was given.
func (b *books) assignmentOf(pod types.UID) (assignment, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.assigned[pod]
	return a, ok
}

// forgetPod drops a pod's assignment once the pod is gone or its GPUs show in
// its node's NodeTopology. A complete plan whose pods are all forgotten is
// dropped too.
func (b *books) forgetPod(pod types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.assigned[pod]
	if !ok {
		return
	}
	b.unassignLocked(pod)
	if g, ok := b.gangs[a.gang]; ok && g.complete() {
		for _, s := range g.slots {
			if _, still := b.assigned[s]; still {
				return
			}
		}
		delete(b.gangs, a.gang)
	}
}

// heldOn returns the GPUs on node held by plans other than except's, plus
// GPUs given to reserved pods that NodeTopology may not show yet.
func (b *books) heldOn(node, except string) topology.GPUSet {
	b.mu.Lock()
	defer b.mu.Unlock()
	held := b.held[node]
	if g, ok := b.gangs[except]; ok {
		for i, m := range g.plan.Members {
			if m.Node == node && g.slots[i] == "" {
				held &^= m.GPUs
			}
		}
	}
	return held | b.assignedOn[node]
}

// heldOpen counts the GPUs on node held for plans' open slots: capacity the
// scheduler's own accounting does not see yet. Reserved pods are left out;
// the scheduler already counts them.
func (b *books) heldOpen(node string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[node].Len()
}

// holding counts the incomplete plans and the GPUs they hold for open slots.
func (b *books) holding() (plans, gpus int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, g := range b.gangs {
		if !g.complete() {
			plans++
		}
	}
	for _, held := range b.held {
		gpus += held.Len()
	}
	return plans, gpus
}

// expired returns the keys of incomplete plans older than ttl.
func (b *books) expired(now time.Time, ttl time.Duration) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for key, g := range b.gangs {
		if !g.complete() && now.Sub(g.created) > ttl {
			out = append(out, key)
		}
	}
	return out
}

// markPublished reports whether the gang's placement still has to be written
// to its PodGroup, and marks it written.
func (b *books) markPublished(key string) (*gangPlan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.gangs[key]
	if !ok || g.published {
		return nil, false
	}
	g.published = true
	return g, true
}
