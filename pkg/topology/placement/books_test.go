package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func booksPlan() *Plan {
	return &Plan{Members: []Assignment{
		assign("a", 0, 1, 2, 3),
		assign("a", 4, 5, 6, 7),
		assign("b", 0, 1, 2, 3),
	}}
}

// TestBooksSlotsAndValidity covers what the data-driven scripts do not
// print: open nodes, Fits and MarkPublished.
func TestBooksSlotsAndValidity(t *testing.T) {
	b := NewBooks()
	h := b.Add("ns/g", booksPlan(), time.Unix(0, 0))
	if got := h.OpenNodes(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("open nodes = %v, want [a b]", got)
	}
	free := map[string]int{"a": 8, "b": 4}
	fits := func(node string) (int, bool) { n, ok := free[node]; return n, ok }
	if !h.Fits(fits) {
		t.Error("plan does not fit the capacity it was made for")
	}
	b.Reserve("ns/g", "p1", "a")
	b.Reserve("ns/g", "p2", "a")
	free["a"] = 0 // the reserved pods use a's GPUs now
	if !h.Fits(fits) {
		t.Error("reserved slots count against a plan's validity")
	}
	if got := h.OpenNodes(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("open nodes after reserving a = %v, want [b]", got)
	}
	delete(free, "b")
	if h.Fits(fits) {
		t.Error("plan fits with an open slot's node gone")
	}
	if _, first := b.MarkPublished("ns/g"); !first {
		t.Error("first MarkPublished = false")
	}
	if _, again := b.MarkPublished("ns/g"); again {
		t.Error("second MarkPublished = true")
	}
	if r, ok := b.Reservation("p2"); !ok || r != (Reservation{Gang: "ns/g", Node: "a", GPUs: topology.NewGPUSet(4, 5, 6, 7), Slot: 1}) {
		t.Errorf("reservation of p2 = %+v, %v", r, ok)
	}
	b.Drop("ns/g")
	// The reserved members keep their GPUs until they are forgotten: one may
	// be bound already.
	if _, ok := b.Reservation("p1"); !ok {
		t.Error("p1 lost its GPUs when its plan was dropped")
	}
	b.ForgetPod("p1")
	b.ForgetPod("p2")
	if !b.Empty() {
		t.Errorf("books after drop and forgetting the members:\n%s", b)
	}
}

// TestBooksReserveSlot: a ranked pod takes its rank's slot when it is open
// on the node, else the lowest open slot there; a pod without a rank takes
// the highest, leaving the low (ranked) slots to their ranks.
func TestBooksReserveSlot(t *testing.T) {
	plan := func() *Plan {
		return &Plan{Members: []Assignment{
			assign("a", 0, 1), assign("a", 2, 3), assign("a", 4, 5), assign("b", 0, 1),
		}}
	}
	type step struct {
		pod, node string
		want      int
	}
	for _, tc := range []struct {
		name  string
		steps []step
		// slots[i] is the slot step i got, -1 when refused.
		slots []int
	}{
		{"rank's slot", []step{{"r2", "a", 2}, {"r0", "a", 0}}, []int{2, 0}},
		{"slot taken: lowest open on the node", []step{{"x", "a", 1}, {"y", "a", 1}}, []int{1, 0}},
		{"slot on another node: lowest open on this one", []step{{"r3", "a", 3}}, []int{0}},
		{"no rank: highest open", []step{{"u", "a", -1}, {"v", "a", -1}}, []int{2, 1}},
		{"again: its own slot", []step{{"r1", "a", 1}, {"r1", "a", 0}}, []int{1, 1}},
		{"no open slot on the node", []step{{"r3", "b", 3}, {"r4", "b", 3}}, []int{3, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBooks()
			b.Add("ns/g", plan(), time.Unix(0, 0))
			var got []int
			for _, s := range tc.steps {
				r, ok := b.ReserveSlot("ns/g", s.pod, s.node, s.want)
				if !ok {
					got = append(got, -1)
					continue
				}
				if m := plan().Members[r.Slot]; r.Node != m.Node || r.GPUs != m.GPUs {
					t.Errorf("%s: reservation %+v does not match slot %d %+v", s.pod, r, r.Slot, m)
				}
				got = append(got, r.Slot)
			}
			if d := diff(tc.slots, got); d != "" {
				t.Errorf("slots (-want,+got):\n%s", d)
			}
		})
	}
}

// TestBooksReportTruth is the truth rule: a pod's GPUs are the scheduler's
// choice only until the node's agent reports the pod's allocation, which
// then replaces the choice; reports for pods the books do not know, or on
// other nodes, change nothing.
func TestBooksReportTruth(t *testing.T) {
	type report struct {
		pod, node string
		gpus      topology.GPUSet
	}
	tests := []struct {
		name    string
		reports []report
		// wantHeld is HeldOn("a", ""): what planners take out of a's free
		// GPUs.
		wantHeld    topology.GPUSet
		wantPod     Reservation
		wantChanged []bool
	}{{
		name:     "unknown until reported: the choice stands in",
		wantHeld: topology.NewGPUSet(0, 1, 2, 3),
		wantPod:  Reservation{Node: "a", GPUs: topology.NewGPUSet(0, 1, 2, 3), Slot: -1},
	}, {
		name:        "the device plugin gave the chosen GPUs",
		reports:     []report{{"p", "a", topology.NewGPUSet(0, 1, 2, 3)}},
		wantHeld:    topology.NewGPUSet(0, 1, 2, 3),
		wantPod:     Reservation{Node: "a", GPUs: topology.NewGPUSet(0, 1, 2, 3), Slot: -1, Reported: true},
		wantChanged: []bool{true},
	}, {
		name:        "the device plugin gave others: they replace the choice",
		reports:     []report{{"p", "a", topology.NewGPUSet(4, 5, 6, 7)}},
		wantHeld:    topology.NewGPUSet(4, 5, 6, 7),
		wantPod:     Reservation{Node: "a", GPUs: topology.NewGPUSet(4, 5, 6, 7), Slot: -1, Reported: true},
		wantChanged: []bool{true},
	}, {
		name:        "the same report twice changes the books once",
		reports:     []report{{"p", "a", topology.NewGPUSet(4, 5, 6, 7)}, {"p", "a", topology.NewGPUSet(4, 5, 6, 7)}},
		wantHeld:    topology.NewGPUSet(4, 5, 6, 7),
		wantPod:     Reservation{Node: "a", GPUs: topology.NewGPUSet(4, 5, 6, 7), Slot: -1, Reported: true},
		wantChanged: []bool{true, false},
	}, {
		name: "reports of other nodes, unknown pods and no GPUs are ignored",
		reports: []report{
			{"p", "b", topology.NewGPUSet(4, 5, 6, 7)},
			{"stranger", "a", topology.NewGPUSet(4, 5, 6, 7)},
			{"p", "a", 0},
		},
		wantHeld:    topology.NewGPUSet(0, 1, 2, 3),
		wantPod:     Reservation{Node: "a", GPUs: topology.NewGPUSet(0, 1, 2, 3), Slot: -1},
		wantChanged: []bool{false, false, false},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBooks()
			b.Assign("p", "a", topology.NewGPUSet(0, 1, 2, 3))
			var changed []bool
			for _, r := range tc.reports {
				changed = append(changed, b.Report(r.pod, r.node, r.gpus))
			}
			if diff := cmp.Diff(tc.wantChanged, changed); diff != "" {
				t.Errorf("Report changed the books (-want,+got):\n%s", diff)
			}
			got, _ := b.Reservation("p")
			if diff := cmp.Diff(tc.wantPod, got); diff != "" {
				t.Errorf("reservation (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantHeld, b.HeldOn("a", "")); diff != "" {
				t.Errorf("HeldOn(a) (-want,+got):\n%s", diff)
			}
			b.ForgetPod("p")
			if !b.Empty() {
				t.Errorf("books after the pod is gone:\n%s", b.String())
			}
		})
	}
}

// TestHeldOpenSlotsInterleaved: a plan whose nodes' members are not
// adjacent (RankOrder keeps them adjacent, but the books take any plan)
// lists its open nodes by their lowest open slot, as they come in the plan.
func TestHeldOpenSlotsInterleaved(t *testing.T) {
	plan := &Plan{Members: []Assignment{
		assign("a", 0), assign("b", 0), assign("a", 1), assign("c", 0), assign("b", 1),
	}}
	type want struct {
		nodes []string
		slots map[string][]int
	}
	for _, tc := range []struct {
		name    string
		reserve [][2]string // pod, node
		want    want
	}{
		{"fresh", nil, want{[]string{"a", "b", "c"}, map[string][]int{"a": {0, 2}, "b": {1, 4}, "c": {3}}}},
		{"a's lowest taken: a moves after b", [][2]string{{"p", "a"}}, want{[]string{"b", "a", "c"}, map[string][]int{"a": {2}, "b": {1, 4}, "c": {3}}}},
		{"b's lowest taken: b moves after c", [][2]string{{"p", "b"}}, want{[]string{"a", "c", "b"}, map[string][]int{"a": {0, 2}, "b": {4}, "c": {3}}}},
		{"c full: c leaves", [][2]string{{"p", "c"}}, want{[]string{"a", "b"}, map[string][]int{"a": {0, 2}, "b": {1, 4}}}},
		{"all but b's last", [][2]string{{"p", "a"}, {"q", "b"}, {"r", "a"}, {"s", "c"}}, want{[]string{"b"}, map[string][]int{"b": {4}}}},
		{"every slot", [][2]string{{"p", "a"}, {"q", "b"}, {"r", "a"}, {"s", "c"}, {"u", "b"}}, want{nil, map[string][]int{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBooks()
			h := b.Add("ns/g", plan, time.Unix(0, 0))
			for _, r := range tc.reserve {
				if _, ok := b.Reserve("ns/g", r[0], r[1]); !ok {
					t.Fatalf("%s did not reserve on %s", r[0], r[1])
				}
			}
			got := want{nodes: h.OpenNodes(), slots: map[string][]int{}}
			for _, node := range []string{"a", "b", "c", "d"} {
				if open := h.OpenSlotsOn(node); len(open) > 0 {
					got.slots[node] = open
				}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("open slots (-want,+got):\n%s", diff)
			}
			if gotComplete := h.Complete(); gotComplete != (len(tc.want.nodes) == 0) {
				t.Errorf("Complete() = %v with open nodes %v", gotComplete, tc.want.nodes)
			}
		})
	}
}

// TestBooksIndexesMatchScans drives books through random reservations,
// reports, forgets and drops of plans whose members interleave nodes, and
// checks after every step that each index answers as a scan of the books
// would: a plan's open slots per node and open nodes in plan order, its
// slots by pod, its count of booked pods, and every node's union of
// booked GPUs.
func TestBooksIndexesMatchScans(t *testing.T) {
	nodes := []string{"a", "b", "c", "d"}
	gangs := []string{"ns/x", "ns/y"}
	now := time.Unix(0, 0)
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 27))
		b := NewBooks()
		randomPlan := func() *Plan {
			plan := &Plan{}
			for range 1 + rng.IntN(12) {
				plan.Members = append(plan.Members, assign(nodes[rng.IntN(len(nodes))], rng.IntN(8)))
			}
			return plan
		}
		for step := range 60 {
			pod := fmt.Sprintf("p%d", rng.IntN(16))
			gang, node := gangs[rng.IntN(len(gangs))], nodes[rng.IntN(len(nodes))]
			op := applyBooksOp(b, rng, rng.IntN(booksOps), gang, pod, node, randomPlan, 14, now)
			if err := checkIndexes(b); err != "" {
				t.Fatalf("seed %d step %d (%s): %s\n%s", seed, step, op, err, b)
			}
		}
	}
}

// booksOps is how many operations applyBooksOp picks from.
const booksOps = 7

// applyBooksOp applies to b the plan and pod operation op picks (0: add a
// plan of randomPlan, 1-2: reserve a slot of up to reserveRange-3 GPUs,
// possibly negative, 3: assign, 4: report, 5: forget, 6: drop), drawing its
// GPUs from rng, and says what it did.
func applyBooksOp(b *Books, rng *rand.Rand, op int, gang, pod, node string, randomPlan func() *Plan, reserveRange int, now time.Time) string {
	switch op {
	case 0:
		b.Add(gang, randomPlan(), now)
		return "add " + gang
	case 1, 2:
		b.ReserveSlot(gang, pod, node, rng.IntN(reserveRange)-2)
		return fmt.Sprintf("reserve %s %s on %s", gang, pod, node)
	case 3:
		b.Assign(pod, node, topology.NewGPUSet(rng.IntN(8)))
		return "assign " + pod
	case 4:
		if r, ok := b.Reservation(pod); ok {
			b.Report(pod, r.Node, topology.NewGPUSet(rng.IntN(8)))
		}
		return "report " + pod
	case 5:
		b.ForgetPod(pod)
		return "forget " + pod
	default:
		b.Drop(gang)
		return "drop " + gang
	}
}

// checkIndexes returns how b's indexes differ from scans of its books, ""
// when they agree.
func checkIndexes(b *Books) string {
	union := map[string]topology.GPUSet{}
	for _, r := range b.pods {
		union[r.Node] |= r.GPUs
	}
	for node := range union {
		if union[node] == 0 {
			delete(union, node)
		}
	}
	if diff := cmp.Diff(union, b.podsOn, cmpopts.EquateEmpty()); diff != "" {
		return "booked GPUs by node (-scan,+index):\n" + diff
	}
	for key, h := range b.gangs {
		var openNodes []string
		slots := map[string][]int{}
		slotOf := map[string]int{}
		booked := 0
		for i, m := range h.plan.Members {
			if pod := h.Slot(i); pod != "" {
				slotOf[pod] = i
				if _, ok := b.pods[pod]; ok {
					booked++
				}
				continue
			}
			if !slices.Contains(openNodes, m.Node) {
				openNodes = append(openNodes, m.Node)
			}
			slots[m.Node] = append(slots[m.Node], i)
		}
		gotSlots := map[string][]int{}
		for _, m := range h.plan.Members {
			if open := h.OpenSlotsOn(m.Node); len(open) > 0 {
				gotSlots[m.Node] = open
			}
		}
		if diff := cmp.Diff(openNodes, h.OpenNodes(), cmpopts.EquateEmpty()); diff != "" {
			return key + ": open nodes (-scan,+index):\n" + diff
		}
		if diff := cmp.Diff(slots, gotSlots, cmpopts.EquateEmpty()); diff != "" {
			return key + ": open slots (-scan,+index):\n" + diff
		}
		if diff := cmp.Diff(slotOf, h.slotOf, cmpopts.EquateEmpty()); diff != "" {
			return key + ": slots by pod (-scan,+index):\n" + diff
		}
		if booked != h.booked {
			return fmt.Sprintf("%s: %d booked pods, index says %d", key, booked, h.booked)
		}
		if h.Complete() != (len(openNodes) == 0) {
			return fmt.Sprintf("%s: Complete() = %v with open nodes %v", key, h.Complete(), openNodes)
		}
	}
	return ""
}
