package topologyplacement

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// activations records the pods handed to Activate.
type activations struct {
	*fakeHandle
	ch chan []string
}

func (h *activations) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	var names []string
	for name := range pods {
		names = append(names, name)
	}
	slices.Sort(names)
	h.ch <- names
}

// nextActivation steps the plugin's fake clock a retry delay at a time,
// for at most within of its time, and returns the first activation; nil
// when none came. The gang manager runs its retries within the clock's
// Step, so one that is due has run when Step returns.
func nextActivation(p *TopologyPlacement, ch chan []string, within time.Duration) []string {
	clock := p.clock.(*clocktesting.FakeClock)
	for waited := time.Duration(0); ; waited += gangmanager.RetryDelay {
		select {
		case names := <-ch:
			return names
		default:
		}
		if waited >= within {
			return nil
		}
		clock.Step(gangmanager.RetryDelay)
	}
}

// awaitActivation is nextActivation for a retry that something running
// on its own goroutine schedules: it steps the fake clock until the
// activation comes, for at most 30 s of wall time, and fails the test when
// none does.
func awaitActivation(t *testing.T, p *TopologyPlacement, ch chan []string, what string) []string {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = nextActivation(p, ch, gangmanager.RetryDelay)
		return got != nil, nil
	})
	if err != nil {
		t.Fatalf("%s: no activation: %v", what, err)
	}
	return got
}

// A gang PreFilter turned away while another gang's plan held the room is
// retried when that plan is dropped: the released capacity is in the books
// only, and no cluster event would requeue it.
func TestDroppedPlanRetriesGangsTurnedAway(t *testing.T) {
	mp := newMetricsPlugin(t, 2, true, nil)
	p := mp.TopologyPlacement
	waiting := utiltesting.MakePod("w-0", "ns").GPUs(8).PodGroup("waiting").Obj()
	fh := p.handle.(*fakeHandle)
	if err := fh.informers.Core().V1().Pods().Informer().GetIndexer().Add(waiting); err != nil {
		t.Fatal(err)
	}
	rec := &activations{fakeHandle: fh, ch: make(chan []string, 4)}
	p.handle = rec

	key := p.planKey(mp.pods[0])
	p.gangs.Books.Add(key, &placement.Plan{Members: []placement.Assignment{{Node: "a"}, {Node: "b"}}}, p.clock.Now())
	p.gangs.TurnedAway(p.planKey(waiting))
	p.gangs.TurnedAway(key)
	p.invalidate(key, dropExpired)

	var got [][]string
	for len(got) < 2 {
		names := nextActivation(p, rec.ch, 30*time.Second)
		if names == nil {
			t.Fatalf("activated %v; want the dropped gang and the one turned away", got)
		}
		got = append(got, names)
	}
	slices.SortFunc(got, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	want := [][]string{{"ns/m-0", "ns/m-1"}, {"ns/w-0"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("activated (-want,+got):\n%s", diff)
	}
	if left := p.gangs.TurnedAwayGangs(); len(left) != 0 {
		t.Errorf("gangs still remembered as turned away: %v", left)
	}
}

// Unreserving the last member of a complete plan (a Permit timeout after a
// scheduler restart, with the rest of the gang bound by the previous one)
// still drops the plan and retries the gang: forgetting the member first
// would forget the plan with it, and nothing would retry the gang.
func TestUnreserveLastMemberRetriesTheGang(t *testing.T) {
	ctx := context.Background()
	mp := newMetricsPlugin(t, 1, true, nil)
	p := mp.TopologyPlacement
	rec := &activations{fakeHandle: p.handle.(*fakeHandle), ch: make(chan []string, 4)}
	p.handle = rec
	state := framework.NewCycleState()
	if _, status := p.PreFilter(ctx, state, mp.pods[0], mp.nodes); !status.IsSuccess() {
		t.Fatal(status)
	}
	if status := p.Reserve(ctx, state, mp.pods[0], "a"); !status.IsSuccess() {
		t.Fatal(status)
	}
	p.Unreserve(ctx, state, mp.pods[0], "a")
	if _, ok := p.gangs.Books.AssignmentOf(mp.pods[0].UID); ok {
		t.Error("the unreserved member kept its GPUs")
	}
	names := nextActivation(p, rec.ch, 30*time.Second)
	if names == nil {
		t.Fatal("the gang was not retried after its only member was unreserved")
	}
	if diff := cmp.Diff([]string{"ns/m-0"}, names); diff != "" {
		t.Errorf("activated (-want,+got):\n%s", diff)
	}
}

// A NodeTopology that reports GPUs freed retries the gangs PreFilter turned
// away, in place of a NodeTopology cluster event (EventsToRegister); one
// that only heartbeats or allocates does not.
func TestFreedGPUsRetryGangsTurnedAway(t *testing.T) {
	mp := newMetricsPlugin(t, 2, true, nil)
	p := mp.TopologyPlacement
	waiting := utiltesting.MakePod("w-0", "ns").GPUs(8).PodGroup("waiting").Obj()
	fh := p.handle.(*fakeHandle)
	if err := fh.informers.Core().V1().Pods().Informer().GetIndexer().Add(waiting); err != nil {
		t.Fatal(err)
	}
	rec := &activations{fakeHandle: fh, ch: make(chan []string, 4)}
	p.handle = rec
	handler := p.view.Handler()

	busy := hgxNodeTopology(t, "a")
	busy.Status.Allocations = []v1alpha1.GPUAllocation{{Namespace: "other", Pod: "x", GPUs: []int32{0, 1}}}
	heartbeat := busy.DeepCopy()
	heartbeat.Status.HeartbeatTime = metav1.Unix(2000, 0)
	freed := busy.DeepCopy()
	freed.Status.Allocations = nil

	p.gangs.TurnedAway(p.planKey(waiting))
	handler.OnUpdate(busy, heartbeat)
	if names := nextActivation(p, rec.ch, 2*gangmanager.RetryDelay); names != nil {
		t.Fatalf("a heartbeat activated %v", names)
	}
	handler.OnUpdate(heartbeat, freed)
	names := nextActivation(p, rec.ch, 30*time.Second)
	if names == nil {
		t.Fatal("freed GPUs did not retry the gang turned away")
	}
	if diff := cmp.Diff([]string{"ns/w-0"}, names); diff != "" {
		t.Errorf("activated (-want,+got):\n%s", diff)
	}
}

// TestPreFilterWaitsForHandlersToCatchUp: until the plugin's informer
// handlers have handled their first lists, PreFilter turns a gang away
// without planning it, saying why, and PostFilter does not preempt for
// it; once they have, the gang is retried (no cluster event would do it)
// and planned.
func TestPreFilterWaitsForHandlersToCatchUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mp := newMetricsPlugin(t, 2, true, nil)
	p := mp.TopologyPlacement
	rec := &activations{fakeHandle: p.handle.(*fakeHandle), ch: make(chan []string, 4)}
	p.handle = rec
	var synced atomic.Bool
	p.behind.Store(true)
	go p.catchUp(ctx, synced.Load)

	for _, pod := range mp.pods {
		state := framework.NewCycleState()
		result, status := p.PreFilter(ctx, state, pod, mp.nodes)
		if status.Code() != fwk.Unschedulable || status.Message() != notCaughtUp {
			t.Fatalf("PreFilter %s before the handlers caught up = %v, %v; want Unschedulable: %s", pod.Name, result, status, notCaughtUp)
		}
		if _, status := p.PostFilter(ctx, framework.NewCycleState(), pod, nil); status.IsSuccess() {
			t.Errorf("PostFilter %s before the handlers caught up: %v, want no preemption", pod.Name, status)
		}
	}
	if _, planned := p.gangs.Books.Get(p.planKey(mp.pods[0])); planned {
		t.Fatal("the gang was planned before the handlers caught up")
	}
	select {
	case names := <-rec.ch:
		t.Fatalf("activated %v before the handlers caught up", names)
	case <-time.After(2 * gangmanager.RetryDelay):
	}
	if names := nextActivation(p, rec.ch, 2*gangmanager.RetryDelay); names != nil {
		t.Fatalf("activated %v before the handlers caught up", names)
	}

	synced.Store(true)
	names := awaitActivation(t, p, rec.ch, "the gang turned away was not retried once the handlers caught up")
	if diff := cmp.Diff([]string{"ns/m-0", "ns/m-1"}, names); diff != "" {
		t.Errorf("activated (-want,+got):\n%s", diff)
	}
	if _, status := p.PreFilter(ctx, framework.NewCycleState(), mp.pods[0], mp.nodes); !status.IsSuccess() {
		t.Fatalf("PreFilter once caught up: %v", status)
	}
	if _, planned := p.gangs.Books.Get(p.planKey(mp.pods[0])); !planned {
		t.Error("the gang was not planned once the handlers caught up")
	}
}
