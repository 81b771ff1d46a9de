package placement

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Books are the books of held capacity: every gang's plan, which member
// slots pods have taken, the GPUs plans hold for open slots, and the GPUs
// given to reserved pods. Capacity a plan holds is invisible to a
// scheduler's own resource accounting until members are reserved, so the
// books are what keeps concurrent gangs (and single pods) from planning into
// it: net HeldOn out of a node's free GPUs before calling Place.
//
// Books are a plain state machine in the style of etcd's raft: events go in
// (Add, Reserve, Assign, ForgetPod, Drop, an explicit now), decisions come
// out (HeldOn, Expired, Fits); they do no I/O, keep no clock and start no
// goroutine. Gangs are keyed by any string (the plugin uses
// "namespace/podgroup#gpus") and pods by their UID as a string. Books are not
// safe for concurrent use: the scheduler plugin wraps them in a mutex.
type Books struct {
	gangs map[string]*Held
	// held[node] are the GPUs plans hold there for open slots.
	held map[string]topology.GPUSet
	// pods are the GPUs of pods reserved through a plan or assigned outside
	// gangs, until the pod is forgotten: the node's reported topology may
	// not show them yet. podsOn is their union per node, so lookups stay
	// O(1) however many pods run.
	pods   map[string]Reservation
	podsOn map[string]topology.GPUSet
	// podsAt are the pods of pods by node, so forgetting one recomputes
	// its node's union from that node's pods only: a gang restart in a
	// cluster of tens of thousands of pods costs its own pods, not theirs.
	podsAt map[string]map[string]struct{}
	// holders are the live plans (gangs) with a slot each pod took, so
	// that a pod coming or going updates their Held.booked in O(1).
	holders map[string][]*Held
	// drains are the domains drained for gangs waiting for their base
	// level (Drain), by gang; drainedFor names the gang per drained node.
	drains     map[string]drain
	drainedFor map[string]string
	// victimOf names the gang each pending victim pod was evicted for.
	victimOf map[string]string
	// stalled are when the gangs whose last drain ended on a stall
	// (ExpireDrain), and that were not planned or dropped since, stalled.
	stalled map[string]time.Time
	// journal names, in order, each node whose Booked or DrainedFor
	// changed (Changes); journalStart is the position of its first entry
	// since the books were made.
	journal      []string
	journalStart uint64
}

// Held is one gang's plan in the books and which member slots pods have
// taken. Read it through its methods; only Books change it.
type Held struct {
	key     string
	plan    *Plan
	created time.Time
	// slots[i] is the pod that reserved member i, or "" while open.
	slots []string
	// published is set once the placement was recorded (MarkPublished).
	published bool

	// The indexes below keep the slot queries Filter and Score make per
	// node O(slots on that node) and free of allocation, however large
	// the plan. They are built once by Books.Add and kept by reserve.
	//
	// slotOf is the slot of each pod in slots.
	slotOf map[string]int
	// on indexes nodes by name; nodes[on[n]].open are node n's open slots,
	// ascending.
	on    map[string]int32
	nodes []heldNode
	// openNodes are the nodes with an open slot, ordered by their lowest
	// open slot (which are distinct), so plan order.
	openNodes []string
	// open counts the open slots.
	open int
	// booked counts the slots whose pod the books still hold
	// (Books.pods): a complete plan with none left is forgotten.
	booked int
}

// heldNode is one node of a plan.
type heldNode struct {
	// open are the node's open slots, ascending, in a share of one array
	// for the whole plan.
	open []int
}

// Reservation is the GPUs a pod was given: slot Slot of gang Gang's plan,
// or GPUs chosen outside gangs (Gang "", Slot -1).
type Reservation struct {
	Gang string
	Node string
	GPUs topology.GPUSet
	// Slot is the member index in the plan; the plugin orders plans by
	// topology (RankOrder), so it is the member's place in the ring.
	Slot int
	// Reported is set once the node's agent reported the pod's allocation
	// (Report): GPUs are then the ones the device plugin gave it, not the
	// scheduler's choice, which the stock device plugin does not read.
	Reported bool
}

// NewBooks returns empty books.
func NewBooks() *Books {
	return &Books{
		gangs:      map[string]*Held{},
		held:       map[string]topology.GPUSet{},
		pods:       map[string]Reservation{},
		podsOn:     map[string]topology.GPUSet{},
		podsAt:     map[string]map[string]struct{}{},
		holders:    map[string][]*Held{},
		drains:     map[string]drain{},
		stalled:    map[string]time.Time{},
		drainedFor: map[string]string{},
		victimOf:   map[string]string{},
	}
}

// Key returns the gang's key.
func (h *Held) Key() string { return h.key }

// Plan returns the gang's plan. It must not be changed.
func (h *Held) Plan() *Plan { return h.plan }

// Created returns when the plan was added.
func (h *Held) Created() time.Time { return h.created }

// Slot returns the pod holding member i, or "" while it is open.
func (h *Held) Slot(i int) string { return h.slots[i] }

// OpenSlotsOn returns the indices of open slots on node, ascending. The
// slice is the plan's own: it must not be changed, and is valid until the
// next slot is reserved.
func (h *Held) OpenSlotsOn(node string) []int {
	if k, ok := h.on[node]; ok {
		return h.nodes[k].open
	}
	return nil
}

// OpenNodes returns the nodes with open slots, in plan order, each once.
// The slice is the plan's own: it must not be changed, and is valid until
// the next slot is reserved.
func (h *Held) OpenNodes() []string { return h.openNodes }

// SlotOf returns the member slot pod holds, false when it holds none.
func (h *Held) SlotOf(pod string) (int, bool) {
	i, ok := h.slotOf[pod]
	return i, ok
}

// Complete reports whether every slot is taken.
func (h *Held) Complete() bool { return h.open == 0 }

// newHeld returns plan's entry in the books with every slot open, and its
// node index.
func newHeld(key string, plan *Plan, now time.Time) *Held {
	n := len(plan.Members)
	h := &Held{key: key, plan: plan, created: now, slots: make([]string, n), slotOf: map[string]int{}, on: map[string]int32{}, open: n}
	var counts []int
	for _, m := range plan.Members {
		k, ok := h.on[m.Node]
		if !ok {
			k = int32(len(counts))
			h.on[m.Node] = k
			counts = append(counts, 0)
			h.openNodes = append(h.openNodes, m.Node)
		}
		counts[k]++
	}
	h.nodes = make([]heldNode, len(counts))
	all := make([]int, n)
	at := 0
	for k, c := range counts {
		h.nodes[k].open = all[at : at : at+c]
		at += c
	}
	for i, m := range plan.Members {
		hn := &h.nodes[h.on[m.Node]]
		hn.open = append(hn.open, i)
	}
	return h
}

// take gives open slot i, on node, to pod.
func (h *Held) take(i int, pod, node string) {
	hn := &h.nodes[h.on[node]]
	j := slices.Index(hn.open, i)
	// openNodes is sorted by each node's lowest open slot; only a node
	// losing its lowest moves, later or out.
	pos := -1
	if j == 0 {
		pos, _ = slices.BinarySearchFunc(h.openNodes, i, h.byLowestOpen)
	}
	hn.open = slices.Delete(hn.open, j, j+1)
	h.slots[i], h.slotOf[pod] = pod, i
	h.open--
	switch {
	case pos < 0:
	case len(hn.open) == 0:
		h.openNodes = slices.Delete(h.openNodes, pos, pos+1)
	default:
		rest := h.openNodes[pos+1:]
		moved, _ := slices.BinarySearchFunc(rest, hn.open[0], h.byLowestOpen)
		copy(h.openNodes[pos:], rest[:moved])
		h.openNodes[pos+moved] = node
	}
}

// byLowestOpen compares node's lowest open slot with slot.
func (h *Held) byLowestOpen(node string, slot int) int {
	return cmp.Compare(h.nodes[h.on[node]].open[0], slot)
}

// Fits reports whether every open slot's node still exists and still has
// the slot's GPUs free by count. free returns a node's free GPU count and
// false when the node is gone or no longer takes pods. A plan that no
// longer fits is to be dropped and the gang planned afresh.
func (h *Held) Fits(free func(node string) (gpus int, ok bool)) bool {
	for _, node := range h.openNodes {
		gpus := 0
		for _, i := range h.OpenSlotsOn(node) {
			gpus += h.plan.Members[i].GPUs.Len()
		}
		if have, ok := free(node); !ok || have < gpus {
			return false
		}
	}
	return true
}

// Get returns a gang's plan.
func (b *Books) Get(key string) (*Held, bool) {
	h, ok := b.gangs[key]
	return h, ok
}

// Add records a new plan for a gang, replacing any it had, and holds the
// plan's capacity.
func (b *Books) Add(key string, plan *Plan, now time.Time) *Held {
	b.Drop(key)
	b.Undrain(key)
	h := newHeld(key, plan, now)
	b.gangs[key] = h
	for _, m := range plan.Members {
		b.held[m.Node] |= m.GPUs
		b.touch(m.Node)
	}
	return h
}

// Drop forgets a gang's plan and releases the capacity its open slots
// hold. It reports whether there was a plan.
//
// Members that reserved a slot keep their GPUs until ForgetPod: one may be
// bound already, or binding, and its GPUs must not look free until its
// NodeTopology shows them or the pod is gone; the ones still waiting are
// rejected and unreserved by the scheduler, which forgets each.
func (b *Books) Drop(key string) bool {
	h, ok := b.gangs[key]
	if !ok {
		return false
	}
	for i, m := range h.plan.Members {
		if h.slots[i] == "" {
			b.release(m.Node, m.GPUs)
		}
	}
	b.forgetPlan(h)
	return true
}

// forgetPlan deletes plan h from the books, and from its pods' holders.
func (b *Books) forgetPlan(h *Held) {
	delete(b.gangs, h.key)
	for _, pod := range h.slots {
		if pod == "" {
			continue
		}
		rest := slices.DeleteFunc(b.holders[pod], func(o *Held) bool { return o == h })
		if len(rest) == 0 {
			delete(b.holders, pod)
		} else {
			b.holders[pod] = rest
		}
	}
}

func (b *Books) release(node string, gpus topology.GPUSet) {
	b.touch(node)
	if rest := b.held[node] &^ gpus; rest != 0 {
		b.held[node] = rest
	} else {
		delete(b.held, node)
	}
}

// Reserve gives pod an open slot of its gang's plan on node, the lowest
// open member there. It returns the member's GPUs, or false when the plan
// has no open slot there. A pod reserving again gets its slot back, and
// false when that slot is on another node.
func (b *Books) Reserve(key, pod, node string) (topology.GPUSet, bool) {
	r, ok := b.reserve(key, pod, node, -1, false)
	return r.GPUs, ok
}

// ReserveSlot is Reserve for a pod that wants slot want of the plan (its
// rank's slot): it gets that slot when it is open and on node. Otherwise,
// or with want < 0, it gets an open slot on node: the lowest for a pod that
// wanted one (a rank that lost its slot stays as close to it as the node
// allows), the highest for a pod that wanted none, so that pods without a
// rank take the slots after the ranked ones. It returns the reservation,
// or false when the plan has no open slot on node.
func (b *Books) ReserveSlot(key, pod, node string, want int) (Reservation, bool) {
	return b.reserve(key, pod, node, want, want < 0)
}

// reserve takes slot want when it is open on node, else the lowest open
// slot there, or the highest with last.
func (b *Books) reserve(key, pod, node string, want int, last bool) (Reservation, bool) {
	h, ok := b.gangs[key]
	if !ok {
		return Reservation{}, false
	}
	if i, ok := h.slotOf[pod]; ok {
		m := h.plan.Members[i]
		return Reservation{Gang: key, Node: m.Node, GPUs: m.GPUs, Slot: i}, m.Node == node
	}
	open := h.OpenSlotsOn(node)
	if len(open) == 0 {
		return Reservation{}, false
	}
	i := open[0]
	switch {
	case want >= 0 && slices.Contains(open, want):
		i = want
	case last:
		i = open[len(open)-1]
	}
	h.take(i, pod, node)
	m := h.plan.Members[i]
	b.release(node, m.GPUs)
	r := Reservation{Gang: key, Node: node, GPUs: m.GPUs, Slot: i}
	b.assign(pod, r)
	// After assign, which counts the pod for the plans it held slots of
	// before: this one counts it here.
	b.holders[pod] = append(b.holders[pod], h)
	h.booked++
	return r, true
}

// Assign records the GPUs chosen for a pod outside gangs.
func (b *Books) Assign(pod, node string, gpus topology.GPUSet) {
	b.assign(pod, Reservation{Node: node, GPUs: gpus, Slot: -1})
}

func (b *Books) assign(pod string, r Reservation) {
	if !b.unassign(pod) {
		// Booked again after it was forgotten: the plans it holds a
		// slot of count it again.
		for _, h := range b.holders[pod] {
			h.booked++
		}
	}
	b.pods[pod] = r
	b.podsOn[r.Node] |= r.GPUs
	b.touch(r.Node)
	at := b.podsAt[r.Node]
	if at == nil {
		at = map[string]struct{}{}
		b.podsAt[r.Node] = at
	}
	at[pod] = struct{}{}
}

// unassign forgets a pod's GPUs and recomputes its node's union from the
// pods still there. It reports whether the pod was booked.
func (b *Books) unassign(pod string) bool {
	r, ok := b.pods[pod]
	if !ok {
		return false
	}
	delete(b.pods, pod)
	b.touch(r.Node)
	at := b.podsAt[r.Node]
	delete(at, pod)
	var rest topology.GPUSet
	for other := range at {
		rest |= b.pods[other].GPUs
	}
	if rest == 0 {
		delete(b.podsOn, r.Node)
	} else {
		b.podsOn[r.Node] = rest
	}
	if len(at) == 0 {
		delete(b.podsAt, r.Node)
	}
	return true
}

// Report records the GPUs the node's agent reports pod holding (its
// NodeTopology allocation, read from the kubelet's pod-resources API): the
// node's truth, which replaces the scheduler's choice in the books from then
// on. Until reported, a pod's GPUs are known by count only; the scheduler's
// choice stands in for them, as the GPUs it asked the device plugin for.
// A pod the books do not know, or know on another node, is left alone: the
// report alone already keeps its GPUs from planners. It reports whether the
// books changed.
func (b *Books) Report(pod, node string, gpus topology.GPUSet) bool {
	r, ok := b.pods[pod]
	if !ok || r.Node != node || gpus == 0 || (r.Reported && r.GPUs == gpus) {
		return false
	}
	r.GPUs, r.Reported = gpus, true
	b.assign(pod, r)
	return true
}

// Reservation returns the GPUs a reserved or assigned pod was given.
func (b *Books) Reservation(pod string) (Reservation, bool) {
	r, ok := b.pods[pod]
	return r, ok
}

// ForgetPod drops a pod's reservation once the pod is gone or its GPUs show
// in its node's reported topology. A complete plan whose pods are all
// forgotten is dropped too.
func (b *Books) ForgetPod(pod string) {
	r, ok := b.pods[pod]
	if !ok {
		return
	}
	b.unassign(pod)
	for _, h := range b.holders[pod] {
		h.booked--
	}
	if h, ok := b.gangs[r.Gang]; ok && h.Complete() && h.booked == 0 {
		b.forgetPlan(h)
	}
}

// HeldOn returns the GPUs on node held by plans other than except's, plus
// GPUs given to reserved pods that the node's topology may not show yet:
// what to take out of the node's free GPUs before planning gang except.
func (b *Books) HeldOn(node, except string) topology.GPUSet {
	held := b.held[node]
	if h, ok := b.gangs[except]; ok {
		for _, i := range h.OpenSlotsOn(node) {
			held &^= h.plan.Members[i].GPUs
		}
	}
	return held | b.podsOn[node]
}

// OpenHeldOn is HeldOn without the reserved and assigned pods: the GPUs on
// node that plans other than except's hold for open slots. Where claims say
// which GPUs pods hold (DRA, where the allocator's choice may not be the
// plan's), the pods' GPUs are their claims', and the books' record of them
// would count the same pod twice: its claim's devices and its slot's.
func (b *Books) OpenHeldOn(node, except string) topology.GPUSet {
	held := b.held[node]
	if h, ok := b.gangs[except]; ok {
		for _, i := range h.OpenSlotsOn(node) {
			held &^= h.plan.Members[i].GPUs
		}
	}
	return held
}

// Booked is HeldOn for a gang without open slots: every GPU on node that
// plans hold or reserved and assigned pods were given.
func (b *Books) Booked(node string) topology.GPUSet {
	return b.held[node] | b.podsOn[node]
}

// HeldOpen counts the GPUs on node held for plans' open slots: capacity a
// scheduler's own accounting does not see yet. Reserved pods are left out;
// the scheduler already counts them.
func (b *Books) HeldOpen(node string) int {
	return b.held[node].Len()
}

// Holding counts the incomplete plans and the GPUs they hold for open slots.
func (b *Books) Holding() (plans, gpus int) {
	for _, h := range b.gangs {
		if !h.Complete() {
			plans++
		}
	}
	for _, held := range b.held {
		gpus += held.Len()
	}
	return plans, gpus
}

// Keys returns the keys of every plan, sorted.
func (b *Books) Keys() []string {
	return slices.Sorted(maps.Keys(b.gangs))
}

// Expired returns the keys of incomplete plans older than ttl at now,
// sorted. The caller drops them (and rejects their waiting members).
func (b *Books) Expired(now time.Time, ttl time.Duration) []string {
	var out []string
	for key, h := range b.gangs {
		if !h.Complete() && now.Sub(h.created) > ttl {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// MarkPublished reports whether the gang's placement still has to be
// recorded, and marks it recorded.
func (b *Books) MarkPublished(key string) (*Held, bool) {
	h, ok := b.gangs[key]
	if !ok || h.published {
		return nil, false
	}
	h.published = true
	return h, true
}

// Empty reports whether the books hold nothing: no plan, no held GPU, no
// reserved pod, no drain and no gang marked Stalled.
func (b *Books) Empty() bool {
	return len(b.gangs) == 0 && len(b.held) == 0 && len(b.pods) == 0 && len(b.podsOn) == 0 && len(b.drains) == 0 && len(b.stalled) == 0 && len(b.victimOf) == 0
}

// String dumps the books deterministically, for tests and debugging: the
// plans by key with their slots, then the held GPUs and the reserved pods'
// GPUs by node.
func (b *Books) String() string {
	if b.Empty() {
		return "books: empty\n"
	}
	var s strings.Builder
	for _, key := range slices.Sorted(maps.Keys(b.gangs)) {
		h := b.gangs[key]
		state := "open"
		if h.Complete() {
			state = "complete"
		}
		fmt.Fprintf(&s, "plan %s: %s, created %s, %s\n", key, domainName(h.plan), h.created.UTC().Format(time.TimeOnly), state)
		for i, m := range h.plan.Members {
			slot := "open"
			if h.slots[i] != "" {
				slot = "pod " + h.slots[i]
			}
			fmt.Fprintf(&s, "  member %d: %s gpus %s (%s)\n", i, m.Node, gpuList(m.GPUs), slot)
		}
	}
	for _, node := range slices.Sorted(maps.Keys(b.held)) {
		fmt.Fprintf(&s, "held %s: %s\n", node, gpuList(b.held[node]))
	}
	for _, pod := range slices.Sorted(maps.Keys(b.pods)) {
		r := b.pods[pod]
		gang := r.Gang
		if gang == "" {
			gang = "no gang"
		}
		if r.Reported {
			gang += ", reported"
		}
		fmt.Fprintf(&s, "pod %s: %s gpus %s (%s)\n", pod, r.Node, gpuList(r.GPUs), gang)
	}
	for _, key := range slices.Sorted(maps.Keys(b.drains)) {
		dr := b.drains[key]
		if len(dr.victims) > 0 {
			fmt.Fprintf(&s, "hold %s: %s (%s), priority %d, waiting for %s\n", key, dr.domain.DisplayID(), plural(len(dr.domain.Nodes), "node"),
				dr.priority, strings.Join(slices.Sorted(maps.Keys(dr.victims)), ","))
			continue
		}
		fmt.Fprintf(&s, "drain %s: %s (%s), %s free since %s\n", key, dr.domain.DisplayID(), plural(len(dr.domain.Nodes), "node"),
			plural(dr.free, "GPU"), dr.progressed.UTC().Format(time.TimeOnly))
	}
	for _, key := range slices.Sorted(maps.Keys(b.stalled)) {
		fmt.Fprintf(&s, "stalled %s: at %s\n", key, b.stalled[key].UTC().Format(time.TimeOnly))
	}
	plans, gpus := b.Holding()
	fmt.Fprintf(&s, "holding: %s, %s\n", plural(plans, "open plan"), plural(gpus, "GPU"))
	return s.String()
}

// domainName names a plan's domain as every report does
// (topology.Domain.DisplayID).
func domainName(plan *Plan) string {
	if plan.Domain == nil {
		return lockstep.LevelCluster
	}
	return plan.Domain.DisplayID()
}

// gpuList writes a GPU set compactly, ranges joined: "0-3,6"; "none" when
// empty.
func gpuList(set topology.GPUSet) string {
	idx := set.Indices()
	if len(idx) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		} else {
			parts = append(parts, fmt.Sprint(idx[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
