package topologyplacement

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// TestRankSlots: rank r takes the slot after the lower ranks among the
// members a plan was made for, whatever ranks are missing or repeated; a
// rank past the plan's slots has none.
func TestRankSlots(t *testing.T) {
	tests := []struct {
		name  string
		ranks []int // ascending, as pendingRanks returns them
		slots int
		// want maps a rank asked about to its slot.
		want map[int]int
	}{
		{name: "every rank", ranks: []int{0, 1, 2, 3}, slots: 4, want: map[int]int{0: 0, 1: 1, 2: 2, 3: 3}},
		{name: "the running ranks 0 and 1 are not pending", ranks: []int{2, 3}, slots: 2, want: map[int]int{2: 0, 3: 1}},
		{name: "gaps", ranks: []int{1, 5, 9}, slots: 3, want: map[int]int{1: 0, 5: 1, 9: 2}},
		{name: "a repeated rank shares a slot", ranks: []int{0, 1, 1, 2}, slots: 4, want: map[int]int{0: 0, 1: 1, 2: 3}},
		{name: "ranks not pending at planning", ranks: []int{0, 4}, slots: 3, want: map[int]int{2: 1, 7: 2}},
		{name: "more ranks than slots", ranks: []int{0, 1, 2, 3}, slots: 2, want: map[int]int{0: 0, 1: 1, 2: -1, 3: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks()
			g := b.add("ns/g#8", &placement.Plan{Members: make([]placement.Assignment, tc.slots)}, time.Unix(0, 0))
			r := b.setRankSlots(g, tc.ranks)
			got := map[int]int{}
			for rank := range tc.want {
				got[rank] = r.slot(rank)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("slots by rank (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRankSlotsKeptWithThePlan: the ranks are read when the gang is
// planned and kept with its plan; a member bound since keeps counting, so
// the ranks after it keep their slots; the ranks go with the plan.
func TestRankSlotsKeptWithThePlan(t *testing.T) {
	ctx := context.Background()
	p := rankedPlugin(t, 0, 1, 2, 3)
	if _, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], p.nodes); !status.IsSuccess() {
		t.Fatal(status)
	}
	key := planKey(p.pods[0])
	g, _ := p.books.get(key)
	r, ok := p.books.rankSlots(g)
	if !ok {
		t.Fatal("no rank slots kept with the plan")
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3}, r.ranks); diff != "" {
		t.Errorf("ranks (-want,+got):\n%s", diff)
	}
	// Rank 0 bound meanwhile (an elastic gang's minMember reached): rank 3
	// still takes slot 3, not the slot rank 0 holds.
	bound := p.pods[0].DeepCopy()
	bound.Spec.NodeName = g.Plan().Members[0].Node
	fh := p.handle.(*fakeHandle)
	if err := fh.informers.Core().V1().Pods().Informer().GetIndexer().Update(bound); err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	result, status := p.PreFilter(ctx, state, p.pods[3], p.nodes)
	if !status.IsSuccess() {
		t.Fatal(status)
	}
	if want := g.Plan().Members[3].Node; result.NodeNames.Len() != 1 || !result.NodeNames.Has(want) {
		t.Errorf("rank 3 sent to %v, want its slot's node %s", result.NodeNames.UnsortedList(), want)
	}
	p.invalidate(key, dropExpired)
	if _, kept := p.books.ranks[key]; kept {
		t.Error("rank slots kept after the plan was dropped")
	}
}

// TestRankSlotsForgottenWithTheLastMember: forgetting the last member of
// a complete plan forgets the plan, and its ranks with it.
func TestRankSlotsForgottenWithTheLastMember(t *testing.T) {
	b := newBooks()
	g := b.add("ns/g#8", &placement.Plan{Members: []placement.Assignment{{Node: "a"}}}, time.Unix(0, 0))
	b.setRankSlots(g, []int{0})
	pod := &v1.Pod{}
	pod.UID = "m-0"
	if _, ok := b.reserveSlot("ns/g#8", pod.UID, "a", 0); !ok {
		t.Fatal("reserving the only slot failed")
	}
	b.forgetPod(pod.UID)
	if _, ok := b.core.Get("ns/g#8"); ok {
		t.Fatal("the complete plan outlived its last member")
	}
	if _, kept := b.ranks["ns/g#8"]; kept {
		t.Error("rank slots kept after the plan was forgotten")
	}
}
