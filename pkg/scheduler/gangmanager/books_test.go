package gangmanager

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

func twoNodePlan() *placement.Plan {
	return &placement.Plan{Members: []placement.Assignment{
		{Node: "a", GPUs: topology.NewGPUSet(0, 1, 2, 3)},
		{Node: "a", GPUs: topology.NewGPUSet(4, 5, 6, 7)},
		{Node: "b", GPUs: topology.NewGPUSet(0, 1, 2, 3)},
	}}
}

// TestBooksHoldUntilReservedThenTrackPods walks a gang through planning,
// reservation and completion, checking what other gangs see as held.
func TestBooksHoldUntilReservedThenTrackPods(t *testing.T) {
	b := NewBooks()
	now := time.Unix(0, 0)
	b.Add("ns/g", twoNodePlan(), now)

	if got := b.HeldOn("a", "ns/other"); got != topology.AllGPUs(8) {
		t.Errorf("held on a = %v, want all 8 GPUs for the plan", got)
	}
	if got := b.HeldOn("a", "ns/g"); got != 0 {
		t.Errorf("the gang's own plan counts as held for it: %v", got)
	}
	if _, ok := b.ReserveSlot("ns/g", "p1", "c", -1); ok {
		t.Error("reserved a slot on a node outside the plan")
	}
	r, ok := b.ReserveSlot("ns/g", "p1", "a", 0)
	if gpus := r.GPUs; !ok || gpus != topology.NewGPUSet(0, 1, 2, 3) {
		t.Fatalf("reserve p1 on a = %v, %v", gpus, ok)
	}
	if again, ok := b.ReserveSlot("ns/g", "p1", "a", -1); !ok || again != r {
		t.Errorf("reserving again = %v, %v, want the same slot", again, ok)
	}
	if got := b.HeldOn("a", "ns/other"); got != topology.AllGPUs(8) {
		t.Errorf("held on a after one reservation = %v, want the reserved pod's GPUs plus the open slot", got)
	}
	b.ReserveSlot("ns/g", "p2", "a", -1)
	b.ReserveSlot("ns/g", "p3", "b", -1)
	if _, ok := b.ReserveSlot("ns/g", "p4", "a", -1); ok {
		t.Error("a fourth pod got a slot of a three-member plan")
	}
	if len(b.Expired(now.Add(time.Hour), time.Minute)) != 0 {
		t.Error("a complete plan expired")
	}
	for _, pod := range []string{"p1", "p2", "p3"} {
		b.ForgetPod(types.UID(pod))
	}
	if _, ok := b.Get("ns/g"); ok {
		t.Error("plan kept after every member's pod was forgotten")
	}
	if got := b.HeldOn("a", ""); got != 0 {
		t.Errorf("held on a at the end = %v, want nothing", got)
	}
}

func TestBooksDropReleasesOpenSlots(t *testing.T) {
	b := NewBooks()
	now := time.Unix(0, 0)
	b.Add("ns/g", twoNodePlan(), now)
	b.ReserveSlot("ns/g", "p1", "b", -1)
	if got := b.Expired(now.Add(2*time.Minute), time.Minute); len(got) != 1 || got[0] != "ns/g" {
		t.Errorf("expired = %v, want the incomplete plan", got)
	}
	b.Drop("ns/g")
	if got := b.HeldOn("a", ""); got != 0 {
		t.Errorf("held on a (an open slot) after drop = %v", got)
	}
	// A reserved member keeps its GPUs (it may be bound) until it is
	// unreserved or gone.
	p1, ok := b.AssignmentOf("p1")
	if !ok {
		t.Fatal("a dropped plan's reserved pod lost its assignment")
	}
	if got := b.HeldOn("b", ""); got != p1.GPUs {
		t.Errorf("held on b after drop = %v, want the reserved member's %v", got, p1.GPUs)
	}
	b.ForgetPod("p1")
	if got := b.HeldOn("b", ""); got != 0 {
		t.Errorf("held on b after the member was forgotten = %v", got)
	}
}
