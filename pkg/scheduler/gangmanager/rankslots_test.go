package gangmanager

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

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
			b := NewBooks()
			g := b.Add("ns/g#8", &placement.Plan{Members: make([]placement.Assignment, tc.slots)}, time.Unix(0, 0))
			r := b.SetRankSlots(g, tc.ranks)
			got := map[int]int{}
			for rank := range tc.want {
				got[rank] = r.Slot(rank)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("slots by rank (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRankSlotsForgottenWithTheLastMember: forgetting the last member of
// a complete plan forgets the plan, and its ranks with it.
func TestRankSlotsForgottenWithTheLastMember(t *testing.T) {
	b := NewBooks()
	g := b.Add("ns/g#8", &placement.Plan{Members: []placement.Assignment{{Node: "a"}}}, time.Unix(0, 0))
	b.SetRankSlots(g, []int{0})
	pod := &v1.Pod{}
	pod.UID = "m-0"
	if _, ok := b.ReserveSlot("ns/g#8", pod.UID, "a", 0); !ok {
		t.Fatal("reserving the only slot failed")
	}
	b.ForgetPod(pod.UID)
	if _, ok := b.core.Get("ns/g#8"); ok {
		t.Fatal("the complete plan outlived its last member")
	}
	if _, kept := b.ranks["ns/g#8"]; kept {
		t.Error("rank slots kept after the plan was forgotten")
	}
}
