package topologyplacement

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// rankedPlugin is a plugin with a gang of 8-GPU members and five nodes in
// two leaves: l1 holds d and a, l2 c, b and e. A gang of four fills the
// roomier l2 first and puts its fourth member in l1 (on a), so the planner's
// own order is b, c, e, a, and the topology order is a, b, c, e. ranks
// gives pod i its lockstep.dev/rank; -1 leaves it without one.
func rankedPlugin(t *testing.T, ranks ...int) *metricsPlugin {
	t.Helper()
	p := newMetricsPlugin(t, len(ranks), true, nil)
	for i, r := range ranks {
		if r >= 0 {
			p.pods[i].Annotations = map[string]string{lockstep.AnnotationRank: strconv.Itoa(r)}
		}
	}
	p.nodes = nil
	for _, n := range []struct{ name, leaf string }{{"d", "l1"}, {"a", "l1"}, {"c", "l2"}, {"b", "l2"}, {"e", "l2"}} {
		p.view.Set(nil, hgxNodeTopology(t, n.name))
		node := gpuNode(n.name, 8)
		node.Labels = map[string]string{lockstep.LabelFabricTier0: n.leaf}
		p.nodes = append(p.nodes, nodeInfo(node))
	}
	return p
}

// TestRanksFollowTopology schedules a gang wider than a leaf, its members
// arriving in the given order, and checks that PreFilter sends each ranked
// member to its rank's slot (ranks in topology order: a, then b, c, e),
// that Reserve gives it that slot, and that Bind writes the rank: the one
// the pod carries, or its slot's place for a pod without one.
func TestRanksFollowTopology(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ranks []int
		// order is the order the pods (by index) are scheduled in.
		order []int
		// want[i] is where pod i goes and the rank it is bound with.
		wantNode []string
		wantRank []string
	}{{
		name:     "ranked, in rank order",
		ranks:    []int{0, 1, 2, 3},
		order:    []int{0, 1, 2, 3},
		wantNode: []string{"a", "b", "c", "e"},
		wantRank: []string{"0", "1", "2", "3"},
	}, {
		name:     "ranked, arriving backwards",
		ranks:    []int{0, 1, 2, 3},
		order:    []int{3, 2, 1, 0},
		wantNode: []string{"a", "b", "c", "e"},
		wantRank: []string{"0", "1", "2", "3"},
	}, {
		name:     "ranks not in pod order",
		ranks:    []int{3, 0, 2, 1},
		order:    []int{2, 0, 3, 1},
		wantNode: []string{"e", "a", "c", "b"},
		wantRank: []string{"3", "0", "2", "1"},
	}, {
		// Unranked pods take the highest open slot of whichever node the
		// framework picks; here the node each is sent to is its only slot.
		name:     "no ranks: the slot's place is the rank",
		ranks:    []int{-1, -1, -1, -1},
		order:    []int{0, 1, 2, 3},
		wantNode: []string{"e", "c", "a", "b"},
		wantRank: []string{"3", "2", "0", "1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			p := rankedPlugin(t, tc.ranks...)
			var bound []*v1.Binding
			cs := p.handle.ClientSet().(*clientsetfake.Clientset)
			cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				bound = append(bound, action.(k8stesting.CreateAction).GetObject().(*v1.Binding))
				return true, nil, nil
			})
			states := make([]fwk.CycleState, len(p.pods))
			gotNode := make([]string, len(p.pods))
			for _, i := range tc.order {
				pod := p.pods[i]
				states[i] = framework.NewCycleState()
				result, status := p.PreFilter(ctx, states[i], pod, p.nodes)
				if !status.IsSuccess() {
					t.Fatalf("PreFilter %s: %v", pod.Name, status)
				}
				node := tc.wantNode[i]
				if tc.ranks[i] >= 0 {
					if result.NodeNames.Len() != 1 {
						t.Fatalf("PreFilter %s (rank %d) allows %v, want only its rank's node %s", pod.Name, tc.ranks[i], result.NodeNames.UnsortedList(), node)
					}
					node = result.NodeNames.UnsortedList()[0]
				} else if !result.NodeNames.Has(node) {
					t.Fatalf("PreFilter %s allows %v, want %s among them", pod.Name, result.NodeNames.UnsortedList(), node)
				}
				if status := p.Reserve(ctx, states[i], pod, node); !status.IsSuccess() {
					t.Fatalf("Reserve %s on %s: %v", pod.Name, node, status)
				}
				gotNode[i] = node
			}
			if diff := cmp.Diff(tc.wantNode, gotNode); diff != "" {
				t.Errorf("nodes by pod (-want,+got):\n%s", diff)
			}
			gotRank := make([]string, len(p.pods))
			for i, pod := range p.pods {
				if status := p.Bind(ctx, states[i], pod, gotNode[i]); !status.IsSuccess() {
					t.Fatalf("Bind %s: %v", pod.Name, status)
				}
				gotRank[i] = bound[len(bound)-1].Annotations[lockstep.AnnotationRank]
			}
			if diff := cmp.Diff(tc.wantRank, gotRank); diff != "" {
				t.Errorf("bound ranks by pod (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRankFallsBackWhenItsNodeRefuses: a ranked member sent to its rank's
// node that comes back unreserved (another filter refused the node) is
// offered every open slot the next time, rather than waiting forever for a
// node that will not take it; it keeps its rank.
func TestRankFallsBackWhenItsNodeRefuses(t *testing.T) {
	ctx := context.Background()
	p := rankedPlugin(t, 0, 1, 2, 3)
	pod := p.pods[0]
	first, status := p.PreFilter(ctx, framework.NewCycleState(), pod, p.nodes)
	if !status.IsSuccess() || first.NodeNames.Len() != 1 || !first.NodeNames.Has("a") {
		t.Fatalf("first PreFilter: %v, %v; want only node a", first, status)
	}
	state := framework.NewCycleState()
	again, status := p.PreFilter(ctx, state, pod, p.nodes)
	if diff := cmp.Diff([]string{"a", "b", "c", "e"}, sets.List(again.NodeNames)); !status.IsSuccess() || diff != "" {
		t.Fatalf("second PreFilter: %v; nodes (-want,+got):\n%s", status, diff)
	}
	if status := p.Reserve(ctx, state, pod, "e"); !status.IsSuccess() {
		t.Fatalf("Reserve on e: %v", status)
	}
	if a, _ := p.gangs.Books.AssignmentOf(pod.UID); a.Node != "e" || a.Slot != 3 {
		t.Errorf("fallback reservation %+v, want e's slot 3", a)
	}
	if got := bindRank(pod, mustAssignment(t, p, pod)); got != "0" {
		t.Errorf("bound rank %q, want the pod's own 0", got)
	}
	// Rank 3, whose slot rank 0 took, may take any slot left.
	next, _ := p.PreFilter(ctx, framework.NewCycleState(), p.pods[3], p.nodes)
	if diff := cmp.Diff([]string{"a", "b", "c"}, sets.List(next.NodeNames)); diff != "" {
		t.Errorf("rank 3 PreFilter nodes (-want,+got):\n%s", diff)
	}
}

func mustAssignment(t *testing.T, p *metricsPlugin, pod *v1.Pod) assignment {
	t.Helper()
	a, ok := p.gangs.Books.AssignmentOf(pod.UID)
	if !ok {
		t.Fatalf("%s has no assignment", pod.Name)
	}
	return a
}
