package topologyplacement

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/requeue"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// verdictPlugin is a metricsPlugin whose gang ns/g of three 8-GPU members
// does not fit its two HGX nodes, with verdicts remembered and node health
// judged as in the scheduler (a node rejoining retries the gangs turned
// away).
func verdictPlugin(t *testing.T) *metricsPlugin {
	t.Helper()
	p := newMetricsPlugin(t, 3, true, nil)
	for _, name := range []string{"a", "b"} {
		p.view.Set(nil, topologyAt(t, name, p.TopologyPlacement.clock.Now()))
	}
	return p
}

// lookups returns the verdict cache's hits and misses so far.
func (p *metricsPlugin) lookups(t *testing.T) (hits, misses int) {
	t.Helper()
	h, err := testutil.GetCounterMetricValue(p.metrics.verdictLookups.WithLabelValues(verdictHit))
	if err != nil {
		t.Fatal(err)
	}
	m, err := testutil.GetCounterMetricValue(p.metrics.verdictLookups.WithLabelValues(verdictMiss))
	if err != nil {
		t.Fatal(err)
	}
	return int(h), int(m)
}

// preFilter runs PreFilter for pod and wants the gang turned away.
func (p *metricsPlugin) preFilterTurnedAway(t *testing.T, pod *v1.Pod) *cycleState {
	t.Helper()
	state := framework.NewCycleState()
	if _, status := p.PreFilter(context.Background(), state, pod, p.nodes); status.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("PreFilter %s: %v, want the gang turned away", pod.Name, status)
	}
	s, err := stateOf(state)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hintOf(t *testing.T, p *TopologyPlacement, event fwk.ClusterEvent) fwk.QueueingHintFn {
	t.Helper()
	events, err := p.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Event.Label() == event.Label() {
			return e.QueueingHintFn
		}
	}
	t.Fatalf("no hint registered for %s", event.Label())
	return nil
}

// TestVerdictRetiredByEvents: a gang that does not fit is planned once and
// then answered from its remembered verdict, until an event that can make
// it fit; each case below is one such event (the retry must plan again) or
// one that cannot (the retry must not). A case that plans again where it
// need not costs a plan; one that does not where it must would keep a
// gang that fits waiting, so the list is meant to grow with every input a
// plan reads.
func TestVerdictRetiredByEvents(t *testing.T) {
	ctx := context.Background()
	member := func(p *metricsPlugin, i int) *v1.Pod { return p.pods[i] }
	updatedPodGroup := func(p *metricsPlugin, mutate func(*schedv1alpha1.PodGroup)) {
		old := utiltesting.MakePodGroup("g", "ns", 3).Obj()
		old.Generation = 1
		pg := old.DeepCopy()
		mutate(pg)
		p.podGroupEvents(ctx).OnUpdate(old, pg)
	}
	hint := func(p *metricsPlugin, event fwk.ClusterEvent, oldObj, newObj any) {
		logger, _ := ktesting.NewTestContext(t)
		if _, err := hintOf(t, p.TopologyPlacement, event)(logger, member(p, 0), oldObj, newObj); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		// before sets the cluster up before the gang is first planned.
		before func(p *metricsPlugin)
		event  func(p *metricsPlugin)
		// replan says the retry after the event must plan the gang again.
		replan bool
	}{
		{
			name:  "nothing happened",
			event: func(*metricsPlugin) {},
		},
		{
			name:   "bound pod deleted",
			event:  func(p *metricsPlugin) { p.podEvents(ctx).OnDelete(boundPod("x", "a", 4, "")) },
			replan: true,
		},
		{
			name: "bound pod deleted, seen as a tombstone",
			event: func(p *metricsPlugin) {
				p.podEvents(ctx).OnDelete(cache.DeletedFinalStateUnknown{Key: "other/x", Obj: boundPod("x", "a", 4, "")})
			},
			replan: true,
		},
		{
			name: "bound pod finished",
			event: func(p *metricsPlugin) {
				done := boundPod("x", "a", 4, "")
				done.Status.Phase = v1.PodSucceeded
				p.podEvents(ctx).OnUpdate(boundPod("x", "a", 4, ""), done)
			},
			replan: true,
		},
		{
			name: "pod outside the gang bound: it only takes room",
			event: func(p *metricsPlugin) {
				unbound := boundPod("x", "", 4, "")
				p.podEvents(ctx).OnAdd(unbound, false)
				p.podEvents(ctx).OnUpdate(unbound, boundPod("x", "a", 4, ""))
			},
		},
		{
			name: "pod outside the gang reserved and unreserved",
			event: func(p *metricsPlugin) {
				pod := boundPod("x", "", 4, "")
				state := framework.NewCycleState()
				state.Write(stateKey, &cycleState{req: p.view.Request(pod), slot: -1})
				p.gangs.Books.Assign(pod.UID, "a", topology.NewGPUSet(0, 1, 2, 3))
				p.Unreserve(ctx, state, pod, "a")
			},
			replan: true,
		},
		{
			name: "gang member added",
			event: func(p *metricsPlugin) {
				pod := utiltesting.MakePod("m-3", "ns").GPUs(8).PodGroup("g").Obj()
				p.podEvents(ctx).OnAdd(pod, false)
			},
			replan: true,
		},
		{
			name: "gang member deleted before it was bound",
			event: func(p *metricsPlugin) {
				p.podEvents(ctx).OnDelete(member(p, 2))
			},
			replan: true,
		},
		{
			name: "gang member's spec changed (new generation)",
			event: func(p *metricsPlugin) {
				changed := member(p, 2).DeepCopy()
				changed.Generation++
				changed.Spec.Tolerations = []v1.Toleration{{Key: "gpu", Operator: v1.TolerationOpExists}}
				p.podEvents(ctx).OnUpdate(member(p, 2), changed)
			},
			replan: true,
		},
		{
			name: "gang member's status written",
			event: func(p *metricsPlugin) {
				changed := member(p, 2).DeepCopy()
				changed.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse}}
				p.podEvents(ctx).OnUpdate(member(p, 2), changed)
			},
		},
		{
			name: "gang member of another size class reserved",
			event: func(p *metricsPlugin) {
				pod := utiltesting.MakePod("ps-0", "ns").GPUs(2).PodGroup("g").Obj()
				pod.UID = "uid-ps-0"
				key := p.planKey(pod)
				p.gangs.Books.Add(key, &placement.Plan{Members: []placement.Assignment{{Node: "a", GPUs: topology.NewGPUSet(0, 1)}}}, p.TopologyPlacement.clock.Now())
				state := framework.NewCycleState()
				state.Write(stateKey, &cycleState{gang: key, req: p.view.Request(pod), plan: &placement.Held{}, slot: -1})
				if status := p.Reserve(ctx, state, pod, "a"); !status.IsSuccess() {
					t.Fatalf("Reserve: %v", status)
				}
			},
			replan: true,
		},
		{
			name: "PodGroup minMember changed",
			event: func(p *metricsPlugin) {
				updatedPodGroup(p, func(pg *schedv1alpha1.PodGroup) { pg.Spec.MinMember = 2; pg.Generation++ })
			},
			replan: true,
		},
		{
			name: "PodGroup constraint annotation changed",
			event: func(p *metricsPlugin) {
				updatedPodGroup(p, func(pg *schedv1alpha1.PodGroup) {
					pg.Annotations = map[string]string{"lockstep.dev/topology-level": "leaf"}
				})
			},
			replan: true,
		},
		{
			name: "PodGroup status written",
			event: func(p *metricsPlugin) {
				updatedPodGroup(p, func(pg *schedv1alpha1.PodGroup) { pg.Status.Phase = schedv1alpha1.PodGroupPending })
			},
		},
		{
			name: "PodGroup created again",
			event: func(p *metricsPlugin) {
				p.podGroupEvents(ctx).OnAdd(utiltesting.MakePodGroup("g", "ns", 3).Obj(), false)
			},
			replan: true,
		},
		{
			name:   "NodeTopology reports GPUs released",
			before: func(p *metricsPlugin) { p.view.Set(nil, withAllocation(t, "a")) },
			event:  func(p *metricsPlugin) { p.view.Set(nil, hgxNodeTopology(t, "a")) },
			replan: true,
		},
		{
			name:   "NodeTopology of a new node",
			event:  func(p *metricsPlugin) { p.view.Set(nil, hgxNodeTopology(t, "c")) },
			replan: true,
		},
		{
			name: "NodeTopology heartbeat",
			event: func(p *metricsPlugin) {
				old := topologyAt(t, "a", p.TopologyPlacement.clock.Now())
				p.clock.Step(time.Second)
				nt := topologyAt(t, "a", p.TopologyPlacement.clock.Now())
				p.view.Set(old, nt)
				p.view.Excluded()
			},
		},
		{
			name: "NodeTopology reports a new allocation: it only takes room",
			event: func(p *metricsPlugin) {
				p.view.Set(topologyAt(t, "a", p.TopologyPlacement.clock.Now()), withAllocation(t, "a"))
			},
			replan: false,
		},
		{
			name: "node usable again: its NodeTopology is fresh",
			before: func(p *metricsPlugin) {
				p.view.Set(nil, topologyAt(t, "a", p.TopologyPlacement.clock.Now().Add(-2*DefaultTopologyMaxAge)))
				p.view.Excluded()
			},
			event: func(p *metricsPlugin) {
				p.clock.Step(time.Second)
				p.view.Set(nil, topologyAt(t, "a", p.TopologyPlacement.clock.Now()))
			},
			replan: true,
		},
		{
			name: "another gang's plan dropped",
			event: func(p *metricsPlugin) {
				p.gangs.Books.Add("ns/other#8", &placement.Plan{Members: []placement.Assignment{{Node: "a", GPUs: topology.NewGPUSet(0)}}}, p.TopologyPlacement.clock.Now())
				p.invalidate("ns/other#8", dropExpired)
			},
			replan: true,
		},
		{
			name: "another gang's drain released",
			event: func(p *metricsPlugin) {
				tree, err := p.view.Tree(p.nodes)
				if err != nil {
					t.Fatal(err)
				}
				host, _ := tree.Host("a")
				p.gangs.Apply("ns/other#8", gangmanager.Decision{Drain: host, Priority: 100}, p.TopologyPlacement.clock.Now())
				p.releaseDrain(ctx, "ns/other#8")
			},
			replan: true,
		},
		{
			name: "node added (hint queues)",
			event: func(p *metricsPlugin) {
				hint(p, fwk.ClusterEvent{Resource: fwk.Node, ActionType: requeue.NodeActions}, nil, gpuNode("c", 8))
			},
			replan: true,
		},
		{
			name: "node shrank (hint skips)",
			event: func(p *metricsPlugin) {
				hint(p, fwk.ClusterEvent{Resource: fwk.Node, ActionType: requeue.NodeActions}, gpuNode("a", 8), gpuNode("a", 4))
			},
		},
		{
			name: "bound pod deleted (hint queues)",
			event: func(p *metricsPlugin) {
				hint(p, fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, boundPod("x", "a", 4, ""), nil)
			},
			replan: true,
		},
		{
			name:   "the gang may widen",
			event:  func(p *metricsPlugin) { p.clock.Step(p.args.PreferredWait.Duration) },
			replan: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := verdictPlugin(t)
			if tc.before != nil {
				tc.before(p)
			}
			p.preFilterTurnedAway(t, member(p, 0))
			p.preFilterTurnedAway(t, member(p, 1))
			if hits, misses := p.lookups(t); hits != 1 || misses != 1 {
				t.Fatalf("before the event: %d hits, %d misses; want the second member answered from the first's verdict", hits, misses)
			}
			tc.event(p)
			p.preFilterTurnedAway(t, member(p, 0))
			want := map[string]int{verdictHit: 2, verdictMiss: 1}
			if tc.replan {
				want = map[string]int{verdictHit: 1, verdictMiss: 2}
			}
			hits, misses := p.lookups(t)
			if diff := cmp.Diff(want, map[string]int{verdictHit: hits, verdictMiss: misses}); diff != "" {
				t.Errorf("lookups after the event (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestVerdictHit: a remembered verdict answers with the status the plan
// returned and sets PostFilter up as the plan did; a member that asks
// otherwise is planned for itself.
func TestVerdictHit(t *testing.T) {
	p := verdictPlugin(t)
	planned := p.preFilterTurnedAway(t, p.pods[0])
	var want *fwk.Status
	{
		state := framework.NewCycleState()
		p.gangs.Verdicts.MayFit()
		_, want = p.PreFilter(context.Background(), state, p.pods[1], p.nodes)
	}
	state := framework.NewCycleState()
	_, got := p.PreFilter(context.Background(), state, p.pods[2], p.nodes)
	if diff := cmp.Diff(want.Code(), got.Code()); diff != "" {
		t.Errorf("code (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Reasons(), got.Reasons()); diff != "" {
		t.Errorf("reasons (-want,+got):\n%s", diff)
	}
	s, err := stateOf(state)
	if err != nil {
		t.Fatal(err)
	}
	if s.waiting == nil {
		t.Fatal("a remembered verdict left PostFilter no waiting gang")
	}
	if diff := cmp.Diff(planned.waiting.gang, s.waiting.gang); diff != "" {
		t.Errorf("waiting gang (-planned,+remembered):\n%s", diff)
	}
	if hits, misses := p.lookups(t); hits != 1 || misses != 2 {
		t.Fatalf("%d hits, %d misses; want 1 and 2", hits, misses)
	}

	tolerant := p.pods[2].DeepCopy()
	tolerant.Spec.Tolerations = []v1.Toleration{{Key: "gpu", Operator: v1.TolerationOpExists}}
	// A member that tolerates more is planned for itself, and so is the
	// next member unlike it; a member like that one is answered.
	p.preFilterTurnedAway(t, tolerant)
	p.preFilterTurnedAway(t, p.pods[0])
	p.preFilterTurnedAway(t, p.pods[1])
	if hits, misses := p.lookups(t); hits != 2 || misses != 4 {
		t.Errorf("%d hits, %d misses; want 2 and 4", hits, misses)
	}
}

// TestVerdictForgottenWithPodGroup: a deleted PodGroup's verdicts go.
func TestVerdictForgottenWithPodGroup(t *testing.T) {
	p := verdictPlugin(t)
	p.preFilterTurnedAway(t, p.pods[0])
	p.podGroupEvents(context.Background()).OnDelete(utiltesting.MakePodGroup("g", "ns", 3).Obj())
	if diff := cmp.Diff(0, p.gangs.Verdicts.Len()); diff != "" {
		t.Errorf("entries left (-want,+got):\n%s", diff)
	}
}
