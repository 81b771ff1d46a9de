package topologyplacement

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// TestRankSlotsKeptWithThePlan: the ranks are read when the gang is
// planned and kept with its plan; a member bound since keeps counting, so
// the ranks after it keep their slots; the ranks go with the plan.
func TestRankSlotsKeptWithThePlan(t *testing.T) {
	ctx := context.Background()
	p := rankedPlugin(t, 0, 1, 2, 3)
	if _, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], p.nodes); !status.IsSuccess() {
		t.Fatal(status)
	}
	key := p.planKey(p.pods[0])
	g, _ := p.gangs.Books.Get(key)
	r, ok := p.gangs.Books.RankSlotsOf(g)
	if !ok {
		t.Fatal("no rank slots kept with the plan")
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3}, r.Ranks()); diff != "" {
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
	if _, kept := p.gangs.Books.RankSlotsOf(g); kept {
		t.Error("rank slots kept after the plan was dropped")
	}
}
