package topologyplacement

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangpreemption"
)

// singlePod is a pod outside gangs asking for gpus, running for ran on node
// (pending when node is "").
func singlePod(name, node string, gpus int, priority int32, now time.Time, ran time.Duration) *v1.Pod {
	pod := utiltesting.MakePod(name, "ns").GPUs(int64(gpus)).Obj()
	pod.UID = types.UID("uid-" + name)
	pod.Spec.Priority = ptr.To(priority)
	pod.Spec.SchedulerName = lockstep.SchedulerName
	if node != "" {
		pod.Spec.NodeName = node
		pod.Status.Phase = v1.PodRunning
		pod.Status.StartTime = &metav1.Time{Time: now.Add(-ran)}
	}
	return pod
}

// A pod outside gangs that no pod outside gangs makes room for evicts the
// cheapest whole gang, or a pod alone when one suffices and costs less;
// never a lone member of a gang.
func TestPodOutsideGangsPreemptsWholeGangs(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name  string
		extra []*v1.Pod
		// gpus asked by the high-priority pod.
		gpus        int
		wantEvicted []string
		wantNode    []string
	}{
		{
			// Both gangs fill their nodes; "young" lost less work.
			name: "the cheapest gang goes whole", gpus: 1,
			wantEvicted: []string{"young-0", "young-1"}, wantNode: []string{"n2", "n3"},
		},
		{
			// A pod alone that lost less work than any gang is enough.
			name: "a single pod where it suffices", gpus: 8,
			extra:       []*v1.Pod{singlePod("solo", "n4", 8, 10, now, 30*time.Minute)},
			wantEvicted: []string{"solo"}, wantNode: []string{"n4"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, groups := gangsOf(now)
			pods = append(pods[:4], tc.extra...)
			high := singlePod("urgent", "", tc.gpus, 100, now, 0)
			pods = append(pods, high)
			env := newPreemptionEnv(t, pods, groups...)
			var nodes []*v1.Node
			var bound []*v1.Pod
			for _, ni := range env.nodes(t) {
				nodes = append(nodes, ni.Node())
			}
			if len(tc.extra) > 0 {
				nodes = append(nodes, gpuNode("n4", 8))
			}
			for _, pod := range pods {
				if pod.Spec.NodeName != "" {
					bound = append(bound, pod)
				}
			}
			env.handle.snapshot = internalcache.NewSnapshot(bound, nodes)
			statuses := map[string]*fwk.Status{}
			for _, n := range nodes {
				statuses[n.Name] = fwk.NewStatus(fwk.Unschedulable, "Insufficient nvidia.com/gpu")
			}
			m := framework.NewNodeToStatus(statuses, fwk.NewStatus(fwk.UnschedulableAndUnresolvable))
			pr := env.preemptGangsForPod(context.Background(), high, m)
			if pr.err != nil || pr.outcome != preemptionPreempted {
				t.Fatalf("preemptGangsForPod: %+v", pr)
			}
			deleted, conditions := env.evicted(t, len(tc.wantEvicted))
			if diff := cmp.Diff(tc.wantEvicted, deleted); diff != "" {
				t.Errorf("evicted (-want,+got):\n%s", diff)
			}
			for _, name := range deleted {
				p, ok := lockstep.ParsePreemption(conditions[name].Message)
				if !ok || p.Preemptor != "ns/urgent" || p.Plan != "" {
					t.Errorf("%s's DisruptionTarget %q does not name the pod as its preemptor", name, conditions[name].Message)
				}
			}
			found := false
			for _, n := range tc.wantNode {
				found = found || pr.node == n
			}
			if !found {
				t.Errorf("nominated %q, want one of %v", pr.node, tc.wantNode)
			}
		})
	}
}

// Upstream's pod-by-pod preemption never takes a gang member, a pod
// already evicted for a hold, or a pod younger than preemptionMinRuntime.
func TestEligibleAlone(t *testing.T) {
	now := time.Unix(1000, 0)
	pods, groups := gangsOf(now)
	loner := singlePod("loner", "n0", 1, 10, now, 2*time.Hour)
	fresh := singlePod("fresh", "n0", 1, 10, now, time.Minute)
	env := newPreemptionEnv(t, append(pods, loner, fresh), groups...)
	env.args.PreemptionMinRuntime = metav1.Duration{Duration: 10 * time.Minute}
	eligible := func(pod *v1.Pod) bool {
		pi, err := framework.NewPodInfo(pod)
		if err != nil {
			t.Fatal(err)
		}
		return env.eligibleAlone(nil, pi, nil)
	}
	got := map[string]bool{}
	for _, pod := range []*v1.Pod{env.pods["old-0"], loner, fresh} {
		got[pod.Name] = eligible(pod)
	}
	want := map[string]bool{"old-0": false, "loner": true, "fresh": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("eligible (-want,+got):\n%s", diff)
	}
}

// While a victim evicted for the pod terminates on its nominated node
// (within its grace period and a drain stall), the pod waits; a victim
// stuck past that no longer holds it.
func TestPodWaitsForItsVictims(t *testing.T) {
	now := time.Unix(1000, 0)
	victim := member("old-0", "old", "n0", 10, now, time.Hour)
	victim.DeletionTimestamp = &metav1.Time{Time: now.Add(30 * time.Second)}
	victim.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler}}
	high := singlePod("urgent", "", 1, 100, now, 0)
	high.Status.NominatedNodeName = "n0"
	env := newPreemptionEnv(t, []*v1.Pod{victim, high})
	env.handle.snapshot = internalcache.NewSnapshot([]*v1.Pod{victim}, []*v1.Node{gpuNode("n0", 8)})
	if got := env.victimsGoing(high); got != "ns/old-0" {
		t.Errorf("victimsGoing = %q, want ns/old-0", got)
	}
	env.clock.(interface{ SetTime(time.Time) }).SetTime(now.Add(30*time.Second + env.gangs.DrainStall()))
	if got := env.victimsGoing(high); got != "" {
		t.Errorf("victimsGoing past the bound = %q, want none", got)
	}
}

// Of two leaves a gang could free, the one whose eviction breaks no
// PodDisruptionBudget is taken, though its gang lost more work; a budget
// is broken only when nothing else makes room, and then the metric counts
// it and the Preempting event names it.
func TestPreemptionBreaksBudgetsLast(t *testing.T) {
	for _, tc := range []struct {
		name string
		// protected are the gangs a budget allowing no disruption covers.
		protected   []string
		wantEvicted []string
		wantBroken  float64
	}{
		{name: "the unprotected gang goes", protected: []string{"young"}, wantEvicted: []string{"old-0", "old-1"}},
		{name: "every gang protected: the cheapest breaks its budget", protected: []string{"young", "old"}, wantEvicted: []string{"young-0", "young-1"}, wantBroken: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods, groups := gangsOf(time.Unix(1000, 0))
			env := newPreemptionEnv(t, pods, groups...)
			recorder := events.NewFakeRecorder(100)
			env.handle.recorder = recorder
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for _, gang := range tc.protected {
				pdb := &policyv1.PodDisruptionBudget{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: gang + "-budget"},
					Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{schedv1alpha1.PodGroupLabel: gang}}},
					Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
				}
				if err := indexer.Add(pdb); err != nil {
					t.Fatal(err)
				}
			}
			env.pdbs = policylisters.NewPodDisruptionBudgetLister(indexer)
			if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
				t.Fatalf("PostFilter: %v", status)
			}
			deleted, _ := env.evicted(t, 2)
			if diff := cmp.Diff(tc.wantEvicted, deleted); diff != "" {
				t.Errorf("evicted (-want,+got):\n%s", diff)
			}
			series := "lockstep_scheduler_preemption_pdb_violations_total{}"
			if got := observed(t, env.reg, "lockstep_scheduler_preemption_pdb_violations_total")[series]; got != tc.wantBroken {
				t.Errorf("%s = %v, want %v", series, got, tc.wantBroken)
			}
			named := false
			for len(recorder.Events) > 0 {
				e := <-recorder.Events
				named = named || (strings.Contains(e, gangpreemption.EventPreempting) && strings.Contains(e, "PodDisruptionBudget ns/young-budget"))
			}
			if named != (tc.wantBroken > 0) {
				t.Errorf("Preempting event names the broken budget: %v, want %v", named, tc.wantBroken > 0)
			}
		})
	}
}

// A victim waiting out its notice on the pod's nominated node is going
// too: the pod waits for it (until the notice, its grace period and a
// drain stall have passed) rather than preempt a second set, and neither
// upstream's preemption nor a gang's counts its room again.
func TestPodWaitsForANoticedVictim(t *testing.T) {
	now := time.Unix(1000, 0)
	victim := singlePod("noticed", "n0", 8, 10, now, time.Hour)
	victim.Annotations = map[string]string{lockstep.AnnotationPreemptionNotice: lockstep.Notice{By: "ns/urgent", Time: now, Deadline: now.Add(time.Minute)}.Format()}
	victim.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler}}
	high := singlePod("urgent", "", 1, 100, now, 0)
	high.Status.NominatedNodeName = "n0"
	env := newPreemptionEnv(t, []*v1.Pod{victim, high})
	env.handle.snapshot = internalcache.NewSnapshot([]*v1.Pod{victim}, []*v1.Node{gpuNode("n0", 8)})
	if got := env.victimsGoing(high); got != "ns/noticed" {
		t.Errorf("victimsGoing = %q, want ns/noticed", got)
	}
	pi, err := framework.NewPodInfo(victim)
	if err != nil {
		t.Fatal(err)
	}
	if env.eligibleAlone(nil, pi, nil) {
		t.Error("a victim waiting out its notice is eligible for upstream's preemption")
	}
	// The notice, the default 30 s grace period and a drain stall.
	env.clock.(interface{ SetTime(time.Time) }).SetTime(now.Add(time.Minute + 30*time.Second + env.gangs.DrainStall()))
	if got := env.victimsGoing(high); got != "" {
		t.Errorf("victimsGoing past the bound = %q, want none", got)
	}
}
