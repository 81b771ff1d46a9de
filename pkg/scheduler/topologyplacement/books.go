package topologyplacement

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// gangPlan is one gang's plan in the books and which member slots pods have
// taken.
type gangPlan = placement.Held

// assignment is the GPUs a reserved pod was given.
type assignment = placement.Reservation

// books adapts the planner's books of held capacity (placement.Books, where
// the logic and its data-driven tests live) to the plugin: a mutex, since
// the scheduling cycle, binding goroutines, informer handlers and the sweep
// all use them, and pod UIDs as strings.
type books struct {
	mu   sync.Mutex
	core *placement.Books
	// preempted are the plans of the gangs holding a domain freed by their
	// preemption (placement.Books.Hold, Preempted): every member that
	// fails again meanwhile is nominated to its node of it, and nothing
	// more is evicted. A plan goes when its hold ends: the gang is
	// planned or gone, or the domain stalled (pruneHolds).
	preempted map[string]*placement.Plan
	// ranks are the rank slots of each gang's plan (rankSlot), kept with
	// it and forgotten with it.
	ranks map[string]*rankSlots
}

func newBooks() *books {
	return &books{core: placement.NewBooks(), preempted: map[string]*placement.Plan{}, ranks: map[string]*rankSlots{}}
}

// rankSlots gives each rank of a gang's pending members its slot of the
// gang's plan: the slot after those of the lower ranks (rankSlot).
type rankSlots struct {
	plan *gangPlan
	// ranks are the pending members' ranks, ascending; slots maps each to
	// the count of lower ones.
	ranks []int
	slots map[int]int
}

// slot returns the slot of rank, -1 when the plan has none for it.
func (r *rankSlots) slot(rank int) int {
	slot, ok := r.slots[rank]
	if !ok {
		// A member that was not pending when the plan was made.
		slot, _ = slices.BinarySearch(r.ranks, rank)
	}
	if slot >= len(r.plan.Plan().Members) {
		return -1
	}
	return slot
}

// setRankSlots records the slots of g's ranks, given the ranks of the
// members it was made for, ascending, and returns them.
func (b *books) setRankSlots(g *gangPlan, ranks []int) *rankSlots {
	r := &rankSlots{plan: g, ranks: ranks, slots: make(map[int]int, len(ranks))}
	for i := len(ranks) - 1; i >= 0; i-- {
		r.slots[ranks[i]] = i // the first of equal ranks
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.core.Get(g.Key()); ok && cur == g {
		b.ranks[g.Key()] = r
	}
	return r
}

// rankSlots returns the rank slots recorded for plan g.
func (b *books) rankSlots(g *gangPlan) (*rankSlots, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.ranks[g.Key()]
	return r, ok && r.plan == g
}

// pruneRanks forgets the rank slots of gang key unless its plan is still
// in the books. The caller holds b.mu.
func (b *books) pruneRanks(key string) {
	if r, ok := b.ranks[key]; ok {
		if cur, held := b.core.Get(key); !held || cur != r.plan {
			delete(b.ranks, key)
		}
	}
}

// pruneHolds forgets the preemption plans of gangs whose hold ended. The
// caller holds b.mu.
func (b *books) pruneHolds() {
	for key := range b.preempted {
		if !b.core.Preempted(key) {
			delete(b.preempted, key)
		}
	}
}

// hold drains plan's domain for gang key, of the given priority, until the
// pods evicted for it are gone (placement.Books.Hold), and remembers the
// plan for the nominations of its members. It returns the lower-priority
// gangs whose drains it released, and false, changing nothing, when the
// domain is drained for a gang of equal or higher priority.
func (b *books) hold(key string, plan *placement.Plan, priority int32, victims []string, now time.Time) ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	released, ok := b.core.Hold(key, plan.Domain, priority, victims, now)
	if !ok {
		return nil, false
	}
	b.preempted[key] = plan
	b.pruneHolds()
	return released, true
}

// preemption returns the plan of gang key's preemption while it holds the
// domain (placement.Books.Preempted).
func (b *books) preemption(key string) (*placement.Plan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	plan, ok := b.preempted[key]
	return plan, ok && b.core.Preempted(key)
}

// heldForOthers returns the nodes among nodes that other gangs'
// preemptions hold and gang key, of the given priority, outranks, with
// those gangs' priorities (placement.Preemptor.Held).
func (b *books) heldForOthers(nodes []*placement.Node, key string, priority int32) map[string]int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out map[string]int32
	for _, n := range nodes {
		if by, q := b.core.PreemptedFor(n.Name); by != "" && by != key && q < priority {
			if out == nil {
				out = map[string]int32{}
			}
			out[n.Name] = q
		}
	}
	return out
}

// pendingVictims counts gang key's victims not gone yet
// (placement.Books.Victims).
func (b *books) pendingVictims(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Victims(key)
}

// victimGone records that pod, evicted for a gang's hold, is gone, and
// returns the gang when it was its last pending victim
// (placement.Books.VictimGone).
func (b *books) victimGone(pod types.UID, now time.Time) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key, last := b.core.VictimGone(string(pod), now)
	b.pruneHolds()
	return key, last
}

// evictedFor reports whether pod was evicted for a gang's hold and is not
// gone yet (placement.Books.EvictedFor).
func (b *books) evictedFor(pod types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.core.EvictedFor(string(pod))
	return ok
}

// get returns a gang's plan.
func (b *books) get(key string) (*gangPlan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Get(key)
}

// add records a new plan and holds its capacity.
func (b *books) add(key string, plan *placement.Plan, now time.Time) *gangPlan {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	g := b.core.Add(key, plan, now)
	b.pruneRanks(key)
	return g
}

// drop forgets a gang's plan and releases what it holds; it reports whether
// there was a plan.
func (b *books) drop(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneRanks(key)
	return b.core.Drop(key)
}

// reserveSlot gives pod slot want of its gang's plan when it is open on
// node, else another open slot there (placement.Books.ReserveSlot).
func (b *books) reserveSlot(key string, pod types.UID, node string, want int) (assignment, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.ReserveSlot(key, string(pod), node, want)
}

// assign records the GPUs chosen for a pod outside gangs.
func (b *books) assign(pod types.UID, node string, gpus topology.GPUSet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.core.Assign(string(pod), node, gpus)
}

// adoptBound records the GPUs of a pod found bound with them (its
// lockstep.dev/gpus annotation) that the books do not know: bound by a
// previous leader, or by a Binding whose answer was lost, so that Unreserve
// forgot it. Until its NodeTopology shows the allocation, these GPUs would
// otherwise look free. A pod the books know is left as it is.
func (b *books) adoptBound(pod types.UID, node string, gpus topology.GPUSet) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, known := b.core.Reservation(string(pod)); known {
		return false
	}
	b.core.Assign(string(pod), node, gpus)
	return true
}

// report records the GPUs the node's agent reports pod holding; they
// replace the scheduler's choice (placement.Books.Report).
func (b *books) report(pod types.UID, node string, gpus topology.GPUSet) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Report(string(pod), node, gpus)
}

// drains reports whether gang key has a drain.
func (b *books) drains(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.core.Drained(key)
	return ok
}

// draining returns the gangs with a drain.
func (b *books) draining() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Draining()
}

// assignmentOf returns the GPUs a reserved pod was given.
func (b *books) assignmentOf(pod types.UID) (assignment, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Reservation(string(pod))
}

// forgetPod drops a pod's assignment once the pod is gone or finished.
func (b *books) forgetPod(pod types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.core.Reservation(string(pod))
	b.core.ForgetPod(string(pod))
	if ok && r.Gang != "" {
		// Forgetting the last member of a complete plan forgets the plan.
		b.pruneRanks(r.Gang)
	}
}

// heldOn returns the GPUs on node held by plans other than except's, plus
// GPUs given to reserved pods that NodeTopology may not show yet.
func (b *books) heldOn(node, except string) topology.GPUSet {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.HeldOn(node, except)
}

// offLimits returns what keeps a GPU pod outside gangs, of the given
// priority, off node's free GPUs: the gang whose drain keeps it off ("" when
// none; placement.Books.KeptOff) and the GPUs held for plans' open slots.
// One lock for both, as Filter asks per node.
func (b *books) offLimits(node string, priority int32) (drainedFor string, heldOpen int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.KeptOff(node, "", priority), b.core.HeldOpen(node)
}

// drainedNodes counts the nodes drained for gangs.
func (b *books) drainedNodes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.DrainedNodes()
}

// holding counts the incomplete plans and the GPUs they hold.
func (b *books) holding() (plans, gpus int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Holding()
}

// expired returns the keys of incomplete plans older than ttl.
func (b *books) expired(now time.Time, ttl time.Duration) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Expired(now, ttl)
}

// markPublished reports whether the gang's placement still has to be written
// to its PodGroup, and marks it written.
func (b *books) markPublished(key string) (*gangPlan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.MarkPublished(key)
}

// drain holds domain d, with free GPUs free now, for gang key of the given
// priority
// (placement.Books.Drain). It reports whether the gang drains d now, and
// whether another domain it drained before was released.
func (b *books) drain(key string, d *topology.Domain, priority int32, free int, now time.Time) (draining, released bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, had := b.core.Drained(key)
	if !b.core.Drain(key, d, priority, free, now) {
		return false, false
	}
	return true, had && old.ID != d.ID
}

// undrain drops gang key's drain and reports whether it had one.
func (b *books) undrain(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	return b.core.Undrain(key)
}

// drainedFor returns the gang node is drained for, "" when none.
func (b *books) drainedFor(node string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.DrainedFor(node)
}

// expireDrain ends gang key's drain when it no longer holds at now
// (placement.Books.ExpireDrain) and reports whether it did.
func (b *books) expireDrain(key string, now time.Time, stall time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	return b.core.ExpireDrain(key, now, stall)
}

// stalled reports whether gang key's last drain stalled less than stall
// before now (placement.Books.Stalled).
func (b *books) stalled(key string, now time.Time, stall time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Stalled(key, now, stall)
}

// expireDrains ends the drains that freed no GPU for stall at now and
// returns their gangs (placement.Books.ExpireDrains).
func (b *books) expireDrains(now time.Time, stall time.Duration) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	return b.core.ExpireDrains(now, stall)
}

// drainHeld reports whether gang key's drain still holds at now, and
// until when (placement.Books.DrainHeld).
func (b *books) drainHeld(key string, now time.Time, stall time.Duration) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.DrainHeld(key, now, stall)
}
