package gangmanager

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Plan is one gang's plan in the books and which member slots pods have
// taken.
type Plan = placement.Held

// Assignment is the GPUs a reserved pod was given.
type Assignment = placement.Reservation

// Books adapts the planner's books of held capacity (placement.Books, where
// the logic and its data-driven tests live) to the plugin: a mutex, since
// the scheduling cycle, binding goroutines, informer handlers and the sweep
// all use them, and pod UIDs as strings.
type Books struct {
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
	ranks map[string]*RankSlots
}

// NewBooks returns empty books.
func NewBooks() *Books {
	return &Books{core: placement.NewBooks(), preempted: map[string]*placement.Plan{}, ranks: map[string]*RankSlots{}}
}

// RankSlots gives each rank of a gang's pending members its slot of the
// gang's plan: the slot after those of the lower ranks (rankSlot).
type RankSlots struct {
	plan *Plan
	// ranks are the pending members' ranks, ascending; slots maps each to
	// the count of lower ones.
	ranks []int
	slots map[int]int
}

// RankSlot is the slot of rank among the ranks of a gang's other pending
// members, ascending: the count of lower ones, so equal ranks share the
// first. It is the one rule of rank → slot: Reserve's (RankSlots) and the
// nominations of a preemptor's members.
func RankSlot(ranks []int, rank int) int {
	slot, _ := slices.BinarySearch(ranks, rank)
	return slot
}

// Slot returns the slot of rank, -1 when the plan has none for it.
func (r *RankSlots) Slot(rank int) int {
	slot, ok := r.slots[rank]
	if !ok {
		// A member that was not pending when the plan was made.
		slot = RankSlot(r.ranks, rank)
	}
	if slot >= len(r.plan.Plan().Members) {
		return -1
	}
	return slot
}

// SetRankSlots records the slots of g's ranks, given the ranks of the
// members it was made for, ascending, and returns them.
func (b *Books) SetRankSlots(g *Plan, ranks []int) *RankSlots {
	r := &RankSlots{plan: g, ranks: ranks, slots: make(map[int]int, len(ranks))}
	for _, rank := range ranks {
		r.slots[rank] = RankSlot(ranks, rank)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.core.Get(g.Key()); ok && cur == g {
		b.ranks[g.Key()] = r
	}
	return r
}

// Ranks returns the ranks the slots were given by, ascending.
func (r *RankSlots) Ranks() []int { return slices.Clone(r.ranks) }

// RankSlotsOf returns the rank slots recorded for plan g.
func (b *Books) RankSlotsOf(g *Plan) (*RankSlots, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.ranks[g.Key()]
	return r, ok && r.plan == g
}

// pruneRanks forgets the rank slots of gang key unless its plan is still
// in the books. The caller holds b.mu.
func (b *Books) pruneRanks(key string) {
	if r, ok := b.ranks[key]; ok {
		if cur, held := b.core.Get(key); !held || cur != r.plan {
			delete(b.ranks, key)
		}
	}
}

// pruneHolds forgets the preemption plans of gangs whose hold ended. The
// caller holds b.mu.
func (b *Books) pruneHolds() {
	for key := range b.preempted {
		if !b.core.Preempted(key) {
			delete(b.preempted, key)
		}
	}
}

// Hold drains plan's domain for gang key, of the given priority, until the
// pods evicted for it are gone (placement.Books.Hold), and remembers the
// plan for the nominations of its members. It returns the lower-priority
// gangs whose drains it released, and false, changing nothing, when the
// domain is drained for a gang of equal or higher priority.
func (b *Books) Hold(key string, plan *placement.Plan, priority int32, victims []string, now time.Time) ([]string, bool) {
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

// Preemption returns the plan of gang key's preemption while it holds the
// domain (placement.Books.Preempted).
//
// The plan is nil for a hold rebuilt from its victims (Manager.AdoptPending):
// only the scheduler that preempted knew the plan's GPUs; the domain and
// the members' nominations are what survive it.
func (b *Books) Preemption(key string) (*placement.Plan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.core.Preempted(key) {
		return nil, false
	}
	return b.preempted[key], true
}

// HeldForOthers returns the nodes among nodes that other gangs'
// preemptions hold and gang key, of the given priority, outranks, with
// those gangs' priorities (placement.Preemptor.Held).
func (b *Books) HeldForOthers(nodes []*placement.Node, key string, priority int32) map[string]int32 {
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

// BoundHold sets when gang key's hold stops waiting for its victims
// (placement.Books.BoundHold).
func (b *Books) BoundHold(key string, until time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.BoundHold(key, until)
}

// VictimsOf returns the UIDs of the victims gang key's hold waits for,
// sorted.
func (b *Books) VictimsOf(key string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.VictimsOf(key)
}

// HeldSince returns when gang key's hold was made.
func (b *Books) HeldSince(key string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.HeldSince(key)
}

// Overdue returns the victims gang key's hold waits for past its bound
// (placement.Books.Overdue).
func (b *Books) Overdue(key string, now time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Overdue(key, now)
}

// PendingVictims counts gang key's victims not gone yet
// (placement.Books.Victims).
func (b *Books) PendingVictims(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Victims(key)
}

// VictimGone records that pod, evicted for a gang's hold, is gone, and
// returns the gang when it was its last pending victim
// (placement.Books.VictimGone).
func (b *Books) VictimGone(pod types.UID, now time.Time) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key, last := b.core.VictimGone(string(pod), now)
	b.pruneHolds()
	return key, last
}

// EvictedFor reports whether pod was evicted for a gang's hold and is not
// gone yet (placement.Books.EvictedFor).
func (b *Books) EvictedFor(pod types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.core.EvictedFor(string(pod))
	return ok
}

// Get returns a gang's plan.
func (b *Books) Get(key string) (*Plan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Get(key)
}

// Add records a new plan and holds its capacity.
func (b *Books) Add(key string, plan *placement.Plan, now time.Time) *Plan {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	g := b.core.Add(key, plan, now)
	b.pruneRanks(key)
	return g
}

// Drop forgets a gang's plan and releases what it holds; it reports whether
// there was a plan.
func (b *Books) Drop(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneRanks(key)
	return b.core.Drop(key)
}

// OpenPlansOf returns the keys of gang's plans (every size class) that
// still have open slots.
func (b *Books) OpenPlansOf(gang string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, key := range b.core.Keys() {
		if GangOf(key) != gang {
			continue
		}
		if h, ok := b.core.Get(key); ok && !h.Complete() {
			out = append(out, key)
		}
	}
	return out
}

// ReserveSlot gives pod slot want of its gang's plan when it is open on
// node, else another open slot there (placement.Books.ReserveSlot).
func (b *Books) ReserveSlot(key string, pod types.UID, node string, want int) (Assignment, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.ReserveSlot(key, string(pod), node, want)
}

// Assign records the GPUs chosen for a pod outside gangs.
func (b *Books) Assign(pod types.UID, node string, gpus topology.GPUSet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.core.Assign(string(pod), node, gpus)
}

// AdoptBound records the GPUs of a pod found bound with them (its
// lockstep.dev/gpus annotation) that the books do not know: bound by a
// previous leader, or by a Binding whose answer was lost, so that Unreserve
// forgot it. Until its NodeTopology shows the allocation, these GPUs would
// otherwise look free. A pod the books know is left as it is.
func (b *Books) AdoptBound(pod types.UID, node string, gpus topology.GPUSet) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, known := b.core.Reservation(string(pod)); known {
		return false
	}
	b.core.Assign(string(pod), node, gpus)
	return true
}

// Report records the GPUs the node's agent reports pod holding; they
// replace the scheduler's choice (placement.Books.Report).
func (b *Books) Report(pod types.UID, node string, gpus topology.GPUSet) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Report(string(pod), node, gpus)
}

// Drains reports whether gang key has a drain.
func (b *Books) Drains(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.core.Drained(key)
	return ok
}

// Draining returns the gangs with a drain.
func (b *Books) Draining() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Draining()
}

// AssignmentOf returns the GPUs a reserved pod was given.
func (b *Books) AssignmentOf(pod types.UID) (Assignment, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Reservation(string(pod))
}

// ForgetPod drops a pod's assignment once the pod is gone or finished.
func (b *Books) ForgetPod(pod types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.core.Reservation(string(pod))
	b.core.ForgetPod(string(pod))
	if ok && r.Gang != "" {
		// Forgetting the last member of a complete plan forgets the plan.
		b.pruneRanks(r.Gang)
	}
}

// HeldOn returns the GPUs on node held by plans other than except's, plus
// GPUs given to reserved pods that NodeTopology may not show yet.
func (b *Books) HeldOn(node, except string) topology.GPUSet {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.HeldOn(node, except)
}

// OffLimits returns what keeps a GPU pod outside gangs, of the given
// priority, off node's free GPUs: the gang whose drain keeps it off ("" when
// none; placement.Books.KeptOff) and the GPUs held for plans' open slots.
// One lock for both, as Filter asks per node.
func (b *Books) OffLimits(node string, priority int32) (drainedFor string, heldOpen int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.KeptOff(node, "", priority), b.core.HeldOpen(node)
}

// DrainedNodes counts the nodes drained for gangs.
func (b *Books) DrainedNodes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.DrainedNodes()
}

// Holding counts the incomplete plans and the GPUs they hold.
func (b *Books) Holding() (plans, gpus int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Holding()
}

// Expired returns the keys of incomplete plans older than ttl.
func (b *Books) Expired(now time.Time, ttl time.Duration) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Expired(now, ttl)
}

// MarkPublished reports whether the gang's placement still has to be written
// to its PodGroup, and marks it written.
func (b *Books) MarkPublished(key string) (*Plan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.MarkPublished(key)
}

// Drain holds domain d, with free GPUs free now, for gang key of the given
// priority
// (placement.Books.Drain). It reports whether the gang drains d now, and
// whether another domain it drained before was released.
func (b *Books) Drain(key string, d *topology.Domain, priority int32, free int, now time.Time) (draining, released bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, had := b.core.Drained(key)
	if !b.core.Drain(key, d, priority, free, now) {
		return false, false
	}
	return true, had && old.ID != d.ID
}

// Undrain drops gang key's drain and reports whether it had one.
func (b *Books) Undrain(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	return b.core.Undrain(key)
}

// DrainedFor returns the gang node is drained for, "" when none.
func (b *Books) DrainedFor(node string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.DrainedFor(node)
}

// ExpireDrain ends gang key's drain when it no longer holds at now
// (placement.Books.ExpireDrain) and reports whether it did.
func (b *Books) ExpireDrain(key string, now time.Time, stall time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	return b.core.ExpireDrain(key, now, stall)
}

// Stalled reports whether gang key's last drain stalled less than stall
// before now (placement.Books.Stalled).
func (b *Books) Stalled(key string, now time.Time, stall time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Stalled(key, now, stall)
}

// ExpireDrains ends the drains that freed no GPU for stall at now and
// returns their gangs (placement.Books.ExpireDrains).
func (b *Books) ExpireDrains(now time.Time, stall time.Duration) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	return b.core.ExpireDrains(now, stall)
}

// DrainHeld reports whether gang key's drain still holds at now, and
// until when (placement.Books.DrainHeld).
func (b *Books) DrainHeld(key string, now time.Time, stall time.Duration) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.DrainHeld(key, now, stall)
}

// LockCore locks the books for a pass over many nodes and returns the
// planner's books, to read until UnlockCore: a snapshot of 25,000 nodes
// takes the lock once, not twice per node.
func (b *Books) LockCore() *placement.Books {
	b.mu.Lock()
	return b.core
}

// UnlockCore ends a LockCore.
func (b *Books) UnlockCore() { b.mu.Unlock() }

// Core returns the planner's books to a caller that holds LockCore.
func (b *Books) Core() *placement.Books { return b.core }

// String describes the books, for test failures and debugging.
func (b *Books) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.String()
}

// AdoptVictim records pod as a victim of gang key's preemption of d, made
// by a scheduler before this one (placement.Books.AdoptVictim).
func (b *Books) AdoptVictim(key string, d *topology.Domain, priority int32, pod types.UID, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.pruneHolds()
	return b.core.AdoptVictim(key, d, priority, string(pod), now)
}

// Holds returns the holds the books keep (placement.Books.Holds).
func (b *Books) Holds() []placement.HoldState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Holds()
}

// PreemptionPlans counts the plans of preemptions kept for nominations:
// one per hold the books made, none once the hold ends.
func (b *Books) PreemptionPlans() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.preempted)
}
