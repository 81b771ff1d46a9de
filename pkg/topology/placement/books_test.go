package placement

import (
	"slices"
	"testing"
	"time"

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
// print: open nodes, Fits, OnNode and MarkPublished.
func TestBooksSlotsAndValidity(t *testing.T) {
	b := NewBooks()
	h := b.Add("ns/g", booksPlan(), time.Unix(0, 0))
	if got := h.OpenNodes(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("open nodes = %v, want [a b]", got)
	}
	if got := b.OnNode("a"); !slices.Equal(got, []string{"ns/g"}) {
		t.Errorf("plans on a = %v", got)
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
	if len(b.OnNode("a")) != 0 {
		t.Error("a plan without open slots on a is listed for a")
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
