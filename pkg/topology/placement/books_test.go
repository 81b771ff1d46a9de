package placement

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
