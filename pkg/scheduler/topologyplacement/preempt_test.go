package topologyplacement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/scheduler/backend/cache"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	internalqueue "k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangpreemption"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// preemptionEnv is a plugin on four 8-GPU HGX nodes in two leaves of spine
// s0 (n0 and n1 in l0, n2 and n3 in l1) with the given pods and PodGroups
// known to the informers, the clientset and the controller-runtime client;
// bound pods run on their nodes.
type preemptionEnv struct {
	*TopologyPlacement
	reg       metrics.KubeRegistry
	clientset *clientsetfake.Clientset
	handle    *fakeHandle
	pods      map[string]*v1.Pod
}

// member is a pod of 8 GPUs in PodGroup group ("" for none) with the given
// priority, running on node since started ago, or pending when node is "".
func member(name, group, node string, priority int32, now time.Time, started time.Duration) *v1.Pod {
	pod := utiltesting.MakePod(name, "ns").GPUs(8).Obj()
	if group != "" {
		pod.Labels[schedv1alpha1.PodGroupLabel] = group
	}
	pod.UID = types.UID("uid-" + name)
	pod.Spec.Priority = ptr.To(priority)
	pod.Spec.SchedulerName = lockstep.SchedulerName
	if node != "" {
		pod.Spec.NodeName = node
		pod.Status.Phase = v1.PodRunning
		pod.Status.StartTime = &metav1.Time{Time: now.Add(-started)}
	} else {
		pod.Status.Phase = v1.PodPending
	}
	return pod
}

func newPreemptionEnv(t *testing.T, pods []*v1.Pod, groups ...*schedv1alpha1.PodGroup) *preemptionEnv {
	t.Helper()
	p, _ := newTestPlugin(t)
	reg := ownMetrics(t, p)
	var objs []runtime.Object
	for _, pod := range pods {
		objs = append(objs, pod)
	}
	clientset := clientsetfake.NewClientset(objs...)
	h := &fakeHandle{clientset: clientset, informers: podInformers(t, clientset, pods)}
	p.handle = h
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var pgs []client.Object
	for _, pg := range groups {
		pgs = append(pgs, pg)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pgs...).Build()
	p.reader, p.client = c, c
	env := &preemptionEnv{TopologyPlacement: p, reg: reg, clientset: clientset, handle: h, pods: map[string]*v1.Pod{}}
	for _, pod := range pods {
		env.pods[pod.Name] = pod
	}
	return env
}

// nodes returns the cycle's NodeInfos with the bound pods of env that are
// not in gone.
func (env *preemptionEnv) nodes(t *testing.T, gone ...string) []fwk.NodeInfo {
	t.Helper()
	var out []fwk.NodeInfo
	for i, name := range []string{"n0", "n1", "n2", "n3"} {
		node := gpuNode(name, 8)
		node.Labels = map[string]string{lockstep.LabelFabricTier0: fmt.Sprintf("l%d", i/2), lockstep.LabelFabricTier1: "s0"}
		var pods []*v1.Pod
		for _, pod := range env.pods {
			if pod.Spec.NodeName == name && !slices.Contains(gone, pod.Name) {
				pods = append(pods, pod)
			}
		}
		out = append(out, nodeInfo(node, pods...))
	}
	return out
}

// report has the node's agent report the GPUs of its pods in env.
func (env *preemptionEnv) report(t *testing.T, node string, pods ...string) {
	t.Helper()
	nt := hgxNodeTopology(t, node)
	for i, name := range pods {
		var gpus []int32
		for g := range 8 {
			gpus = append(gpus, int32(8*i+g))
		}
		nt.Status.Allocations = append(nt.Status.Allocations, v1alpha1.GPUAllocation{Namespace: "ns", Pod: name, PodUID: string(env.pods[name].UID), GPUs: gpus})
	}
	env.view.Set(nil, nt)
}

// evicted waits until the eviction goroutine is done with want pods, then
// returns the pods deleted, sorted, and the DisruptionTarget condition each
// was patched with.
func (env *preemptionEnv) evicted(t *testing.T, want int) ([]string, map[string]v1.PodCondition) {
	t.Helper()
	var deleted []string
	conditions := map[string]v1.PodCondition{}
	collect := func() {
		deleted, conditions = nil, map[string]v1.PodCondition{}
		for _, a := range env.clientset.Actions() {
			switch a := a.(type) {
			case clienttesting.DeleteAction:
				if a.GetResource().Resource == "pods" {
					deleted = append(deleted, a.GetName())
				}
			case clienttesting.PatchAction:
				if a.GetSubresource() != "status" {
					continue
				}
				var pod v1.Pod
				if err := json.Unmarshal(a.GetPatch(), &pod); err != nil {
					t.Fatal(err)
				}
				for _, c := range pod.Status.Conditions {
					if c.Type == v1.DisruptionTarget {
						conditions[a.GetName()] = c
					}
				}
			}
		}
		slices.Sort(deleted)
	}
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		collect()
		return len(deleted) >= want, nil
	})
	// Nothing more comes: the eviction of a preemption is one batch.
	time.Sleep(50 * time.Millisecond)
	collect()
	return deleted, conditions
}

// gangsOf returns the standard scene: gangs "old" (running 10h on l0) and
// "young" (running 1h on l1) of two 8-GPU pods at priority 10, and gang
// "high" of two pending 8-GPU pods at priority 100 that requires a leaf.
func gangsOf(now time.Time, highOpts ...func(*v1.Pod)) ([]*v1.Pod, []*schedv1alpha1.PodGroup) {
	pods := []*v1.Pod{
		member("old-0", "old", "n0", 10, now, 10*time.Hour),
		member("old-1", "old", "n1", 10, now, 10*time.Hour),
		member("young-0", "young", "n2", 10, now, time.Hour),
		member("young-1", "young", "n3", 10, now, time.Hour),
		member("high-0", "high", "", 100, now, 0),
		member("high-1", "high", "", 100, now, 0),
	}
	for _, pod := range pods[4:] {
		for _, o := range highOpts {
			o(pod)
		}
	}
	high := utiltesting.MakePodGroup("high", "ns", 2).Obj()
	high.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: "leaf", lockstep.AnnotationTopologyMode: "Required"}
	return pods, []*schedv1alpha1.PodGroup{utiltesting.MakePodGroup("old", "ns", 2).Obj(), utiltesting.MakePodGroup("young", "ns", 2).Obj(), high}
}

// preFilterThenPostFilter runs a member's PreFilter, which must find no
// room, then its PostFilter.
func (env *preemptionEnv) preFilterThenPostFilter(t *testing.T, pod *v1.Pod, nodes []fwk.NodeInfo) (*framework.PostFilterResult, *fwk.Status) {
	t.Helper()
	ctx := context.Background()
	state := framework.NewCycleState()
	if _, status := env.PreFilter(ctx, state, pod, nodes); status.IsSuccess() {
		t.Fatalf("PreFilter %s found room: the scene needs a gang that does not fit", pod.Name)
	}
	return env.PostFilter(ctx, state, pod, framework.NewDefaultNodeToStatus())
}

func nominatedNode(r *framework.PostFilterResult) string {
	if r == nil || r.NominatingInfo == nil {
		return ""
	}
	if r.NominatingInfo.NominatingMode != framework.ModeOverride {
		return "mode is not override"
	}
	return r.NominatingInfo.NominatedNodeName
}

// A higher-priority gang that does not fit evicts the cheapest whole
// lower-priority gang (the one that ran least), gets a node nominated and
// the freed leaf held; its second member evicts nothing more and is
// nominated to the other node of the leaf; once the victims are gone the
// gang is retried at once, its hold is a plain drain, and it is planned in
// the leaf it freed.
func TestPostFilterPreemptsCheapestGangWhole(t *testing.T) {
	ctx := context.Background()
	pods, groups := gangsOf(time.Unix(1000, 0))
	env := newPreemptionEnv(t, pods, groups...)
	recorder := events.NewFakeRecorder(100)
	env.handle.recorder = recorder
	env.report(t, "n0", "old-0")
	env.report(t, "n1", "old-1")
	const key = "ns/high#8"

	r0, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t))
	if !status.IsSuccess() {
		t.Fatalf("PostFilter high-0: %v", status)
	}
	deleted, conditions := env.evicted(t, 2)
	if diff := cmp.Diff([]string{"young-0", "young-1"}, deleted); diff != "" {
		t.Errorf("deleted pods (-want,+got):\n%s", diff)
	}
	for _, name := range []string{"young-0", "young-1"} {
		c := conditions[name]
		got, ok := lockstep.ParsePreemption(c.Message)
		if !ok || c.Reason != v1.PodReasonPreemptionByScheduler || c.Status != v1.ConditionTrue {
			t.Errorf("%s's DisruptionTarget condition %+v: want reason %s and a preemption message", name, c, v1.PodReasonPreemptionByScheduler)
			continue
		}
		if got.Preemptor != "ns/high" || got.Priority != 100 || !strings.Contains(got.Domain, "leaf=l1") {
			t.Errorf("%s preempted by %+v; want ns/high at priority 100 in leaf l1", name, got)
		}
	}
	if _, held := env.gangs.Books.Preemption(key); !held || env.gangs.Books.DrainedFor("n2") != key || env.gangs.Books.DrainedFor("n3") != key {
		t.Errorf("no hold of leaf l1 for the gang:\n%s", env.gangs.Books)
	}
	var got []string
	for len(recorder.Events) > 0 {
		got = append(got, strings.SplitN(<-recorder.Events, " ", 3)[1])
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{gangpreemption.EventPreempted, gangpreemption.EventPreempted, gangpreemption.EventPreempting}, got); diff != "" {
		t.Errorf("event reasons (-want,+got):\n%s", diff)
	}

	// The second member: the victims are still there; it is nominated to
	// the leaf's other node and evicts nothing.
	r1, status := env.preFilterThenPostFilter(t, env.pods["high-1"], env.nodes(t))
	if !status.IsSuccess() {
		t.Fatalf("PostFilter high-1: %v", status)
	}
	nominated := []string{nominatedNode(r0), nominatedNode(r1)}
	slices.Sort(nominated)
	if diff := cmp.Diff([]string{"n2", "n3"}, nominated); diff != "" {
		t.Errorf("nominated nodes (-want,+got):\n%s", diff)
	}
	if deleted, _ := env.evicted(t, 2); len(deleted) != 2 {
		t.Errorf("the second member's PostFilter deleted more: %v", deleted)
	}
	if diff := cmp.Diff(map[string]float64{
		"lockstep_scheduler_preemption_attempts_total{result=preempted}":           1,
		"lockstep_scheduler_preemption_attempts_total{result=waiting_for_victims}": 1,
		"lockstep_scheduler_preemption_attempts_total{result=no_room}":             0,
		"lockstep_scheduler_preemption_attempts_total{result=not_eligible}":        0,
		"lockstep_scheduler_preemption_victims_total{kind=gang}":                   1,
		"lockstep_scheduler_preemption_victims_total{kind=pod}":                    0,
		// 16 GPUs for the hour young ran.
		"lockstep_scheduler_preemption_lost_gpu_hours_total{}":  16,
		"lockstep_scheduler_preemption_eviction_errors_total{}": 0,
	}, observed(t, env.reg, "lockstep_scheduler_preemption_attempts_total", "lockstep_scheduler_preemption_victims_total",
		"lockstep_scheduler_preemption_lost_gpu_hours_total", "lockstep_scheduler_preemption_eviction_errors_total")); diff != "" {
		t.Errorf("metrics (-want,+got):\n%s", diff)
	}

	// The victims go: the last one retries the gang at once.
	rec := &activations{fakeHandle: env.handle, ch: make(chan []string, 4)}
	env.TopologyPlacement.handle = rec
	events := env.podEvents(ctx)
	events.OnDelete(env.pods["young-0"])
	if _, held := env.gangs.Books.Preemption(key); !held {
		t.Error("the hold ended with a victim left")
	}
	events.OnDelete(env.pods["young-1"])
	select {
	case names := <-rec.ch:
		if diff := cmp.Diff([]string{"ns/high-0", "ns/high-1"}, names); diff != "" {
			t.Errorf("activated (-want,+got):\n%s", diff)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gang was not retried when its last victim went")
	}
	if _, held := env.gangs.Books.Preemption(key); !held || env.gangs.Books.PendingVictims(key) != 0 || env.gangs.Books.DrainedFor("n2") != key {
		t.Errorf("want leaf l1 still held for the gang, waiting for no victim, once its victims are gone:\n%s", env.gangs.Books)
	}
	// The scheduler's cache may not have seen the victims go when the gang
	// is retried: it finds no room, and is nominated again, evicting
	// nothing more.
	before := len(env.clientset.Actions())
	if r, status := env.preFilterThenPostFilter(t, env.pods["high-1"], env.nodes(t)); !status.IsSuccess() || nominatedNode(r) == "" {
		t.Errorf("PostFilter with the victims still in the cache: %v, nominated %q; want a nomination", status, nominatedNode(r))
	}
	if extra := env.clientset.Actions()[before:]; len(extra) != 0 {
		t.Errorf("a gang holding its domain evicted again: %v", extra)
	}
	// Work that outranks the gang took one node of the freed leaf, and the
	// cache shows the victims gone: the hold is spent, and the gang makes
	// room again, in l0.
	{
		env := newPreemptionEnv(t, append(slices.Clone(pods), member("intruder", "", "n2", 1000, time.Unix(1000, 0), time.Minute)), groups...)
		env.report(t, "n0", "old-0")
		env.report(t, "n1", "old-1")
		if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
			t.Fatalf("first PostFilter: %v", status)
		}
		env.evicted(t, 2)
		// It landed after the hold was made: it took the freed room.
		env.pods["intruder"].Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(env.TopologyPlacement.clock.Now().Add(time.Second))}}
		events := env.podEvents(ctx)
		events.OnDelete(env.pods["young-0"])
		events.OnDelete(env.pods["young-1"])
		before := len(env.clientset.Actions())
		if _, status := env.preFilterThenPostFilter(t, env.pods["high-1"], env.nodes(t, "young-0", "young-1")); !status.IsSuccess() {
			t.Fatalf("PostFilter once the held leaf was taken: %v", status)
		}
		again := env.deletedSince(before, 2)
		if diff := cmp.Diff([]string{"old-0", "old-1"}, again); diff != "" {
			t.Errorf("evicted once the held leaf was taken (-want,+got):\n%s", diff)
		}
	}
	// The scheduler's cache has seen the victims go: before it retries the
	// gang, the queue runs the plugin's hint for their deletion, which
	// retires the verdict made on the cache that still held them.
	onDelete := hintOf(t, env.TopologyPlacement, fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete})
	for _, victim := range []string{"young-0", "young-1"} {
		if _, err := onDelete(klog.Background(), env.pods["high-0"], env.pods[victim], nil); err != nil {
			t.Fatal(err)
		}
	}
	state := framework.NewCycleState()
	if _, status := env.PreFilter(ctx, state, env.pods["high-0"], env.nodes(t, "young-0", "young-1")); !status.IsSuccess() {
		t.Fatalf("PreFilter after the victims went: %v", status)
	}
	g, ok := env.gangs.Books.Get(key)
	if !ok || !strings.Contains(g.Plan().Domain.ID, "l1") {
		t.Errorf("gang planned in %v, want leaf l1", g)
	}
	if env.gangs.Books.Drains(key) {
		t.Errorf("the gang's drain outlived its plan:\n%s", env.gangs.Books)
	}
}

// A gang Coscheduling turned away at PreFilter, before ours ran, because
// its PodGroup's minResources exceed the free capacity (every TrainingJob's
// PodGroup states them), still preempts: PostFilter decides what PreFilter
// would have.
func TestPostFilterPreemptsForGangCoschedulingTurnedAway(t *testing.T) {
	pods, groups := gangsOf(time.Unix(1000, 0))
	env := newPreemptionEnv(t, pods, groups...)
	env.report(t, "n0", "old-0")
	env.report(t, "n1", "old-1")
	env.handle.snapshot = cache.NewSnapshot(podsOf(env.pods), nodesOf(env.nodes(t)))
	r, status := env.PostFilter(context.Background(), framework.NewCycleState(), env.pods["high-0"], framework.NewDefaultNodeToStatus())
	if !status.IsSuccess() {
		t.Fatalf("PostFilter: %v", status)
	}
	if node := nominatedNode(r); node != "n2" && node != "n3" {
		t.Errorf("nominated %q, want a node of leaf l1", node)
	}
	deleted, _ := env.evicted(t, 2)
	if diff := cmp.Diff([]string{"young-0", "young-1"}, deleted); diff != "" {
		t.Errorf("deleted pods (-want,+got):\n%s", diff)
	}
}

// nodesOf returns the nodes of infos.
func nodesOf(infos []fwk.NodeInfo) []*v1.Node {
	out := make([]*v1.Node, len(infos))
	for i, ni := range infos {
		out[i] = ni.Node()
	}
	return out
}

// podsOf returns the bound pods of env.
func podsOf(pods map[string]*v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			out = append(out, p)
		}
	}
	return out
}

// Nothing is evicted when the gang may not preempt or no eviction makes
// room.
func TestPostFilterEvictsNothing(t *testing.T) {
	now := time.Unix(1000, 0)
	never := func(pod *v1.Pod) { pod.Spec.PreemptionPolicy = ptr.To(v1.PreemptNever) }
	tests := []struct {
		name string
		// scene returns the pods and PodGroups.
		scene func() ([]*v1.Pod, []*schedv1alpha1.PodGroup)
		// noState skips PreFilter, as when Coscheduling rejected the gang.
		noState     bool
		wantMessage string
		wantResult  string
		// wantCleared: the member's nomination is cleared, as it is when
		// no preemption can help.
		wantCleared bool
	}{
		{
			name:        "preemptionPolicy Never",
			scene:       func() ([]*v1.Pod, []*schedv1alpha1.PodGroup) { return gangsOf(now, never) },
			wantMessage: "preemptionPolicy is Never",
			wantResult:  preemptionNotEligible,
		},
		{
			// Coscheduling turned the gang away for too few members: it
			// must not preempt, as the rest may never come.
			name: "PreFilter did not run and the gang lacks members",
			scene: func() ([]*v1.Pod, []*schedv1alpha1.PodGroup) {
				pods, groups := gangsOf(now)
				groups[2].Spec.MinMember = 3
				return pods, groups
			},
			noState:     true,
			wantMessage: "not waiting for room",
			wantResult:  preemptionNotEligible,
		},
		{
			// Three members of 8 GPUs; only young (16 GPUs) has lower
			// priority than the gang.
			name: "the gang is bigger than all lower-priority work",
			scene: func() ([]*v1.Pod, []*schedv1alpha1.PodGroup) {
				pods, groups := gangsOf(now)
				pods[0].Spec.Priority, pods[1].Spec.Priority = ptr.To[int32](1000), ptr.To[int32](1000)
				pods = append(pods, member("high-2", "high", "", 100, now, 0))
				groups[2].Spec.MinMember = 3
				groups[2].Annotations = nil
				return pods, groups
			},
			wantMessage: "would not make room",
			wantResult:  preemptionNoRoom,
			wantCleared: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, groups := tc.scene()
			env := newPreemptionEnv(t, pods, groups...)
			var r *framework.PostFilterResult
			var status *fwk.Status
			if tc.noState {
				env.handle.snapshot = cache.NewSnapshot(nil, nodesOf(env.nodes(t)))
				r, status = env.PostFilter(context.Background(), framework.NewCycleState(), env.pods["high-0"], framework.NewDefaultNodeToStatus())
			} else {
				r, status = env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t))
			}
			if status.Code() != fwk.Unschedulable || !strings.Contains(status.Message(), tc.wantMessage) {
				t.Errorf("PostFilter: %v, want Unschedulable saying %q", status, tc.wantMessage)
			}
			if node := nominatedNode(r); node != "" {
				t.Errorf("nominated %s", node)
			}
			if cleared := r != nil && r.NominatingInfo != nil && r.NominatingInfo.NominatingMode == framework.ModeOverride; cleared != tc.wantCleared {
				t.Errorf("nomination cleared = %v, want %v (result %+v)", cleared, tc.wantCleared, r)
			}
			if deleted, _ := env.evicted(t, 0); len(deleted) != 0 {
				t.Errorf("deleted %v", deleted)
			}
			if plan, held := env.gangs.Books.Preemption("ns/high#8"); held {
				t.Errorf("held %v", plan.Domain.ID)
			}
			series := "lockstep_scheduler_preemption_attempts_total{result=" + tc.wantResult + "}"
			if got := observed(t, env.reg, "lockstep_scheduler_preemption_attempts_total")[series]; got != 1 {
				t.Errorf("%s = %v, want 1", series, got)
			}
		})
	}
}

// A pod outside gangs is preempted for by upstream's DefaultPreemption, as
// the stock scheduler would: on a full node it evicts a lower-priority pod
// and is nominated there.
func TestPostFilterDelegatesPodsOutsideGangs(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	now := time.Unix(1000, 0)
	node := gpuNode("full", 8)
	low := member("low", "", "full", 0, now, time.Hour)
	single := member("single", "", "", 100, now, 0)
	// The scheduler's own series, which its queue and DefaultPreemption
	// observe.
	schedmetrics.Register()
	p, _ := newTestPlugin(t)
	clientset := clientsetfake.NewClientset(node, low, single)
	factory := informers.NewSharedInformerFactory(clientset, 0)
	queue := internalqueue.NewSchedulingQueue(nil, factory)
	f, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensions(noderesources.Name, frameworkruntime.FactoryAdapter(plfeature.Features{}, noderesources.NewFit), "Filter", "PreFilter"),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
	}, "",
		frameworkruntime.WithClientSet(clientset),
		frameworkruntime.WithEventRecorder(&events.FakeRecorder{}),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithPodNominator(queue),
		frameworkruntime.WithPodActivator(queue),
		frameworkruntime.WithSnapshotSharedLister(internalcache.NewSnapshot([]*v1.Pod{low}, []*v1.Node{node})),
		frameworkruntime.WithLogger(logger),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
	)
	if err != nil {
		t.Fatal(err)
	}
	if p.defaultPreemption, err = newDefaultPreemption(ctx, f, p.eligibleAlone); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	state := framework.NewCycleState()
	if _, status, _ := f.RunPreFilterPlugins(ctx, state, single); !status.IsSuccess() {
		t.Fatal(status)
	}
	m := framework.NewNodeToStatus(map[string]*fwk.Status{"full": fwk.NewStatus(fwk.Unschedulable, "Insufficient nvidia.com/gpu")}, fwk.NewStatus(fwk.UnschedulableAndUnresolvable))
	r, status := p.PostFilter(ctx, state, single, m)
	if !status.IsSuccess() || r == nil || r.NominatingInfo == nil || r.NominatedNodeName != "full" {
		t.Fatalf("PostFilter: %+v, %v; want full nominated", r, status)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, a := range clientset.Actions() {
			if d, ok := a.(clienttesting.DeleteAction); ok && d.GetResource().Resource == "pods" && d.GetName() == "low" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the lower-priority pod was not deleted: %v", err)
	}
}

// A victim that cannot be evicted is counted and no longer waited for: the
// hold waits only for the victims that are going, and a victim found gone
// already (its deletion event may have come before the hold) is not
// waited for either.
func TestEvictionFailureIsNotWaitedFor(t *testing.T) {
	pods, groups := gangsOf(time.Unix(1000, 0))
	env := newPreemptionEnv(t, pods, groups...)
	env.clientset.PrependReactor("delete", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		switch a.(clienttesting.DeleteAction).GetName() {
		case "young-0":
			return true, nil, apierrors.NewInternalError(errors.New("etcd is down"))
		case "young-1":
			return true, nil, apierrors.NewNotFound(v1.Resource("pods"), "young-1")
		}
		return false, nil, nil
	})
	const key = "ns/high#8"
	if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
		t.Fatalf("PostFilter: %v", status)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return env.gangs.Books.PendingVictims(key) == 0, nil
	})
	if err != nil {
		t.Errorf("the hold still waits for victims that are not going:\n%s", env.gangs.Books)
	}
	if env.gangs.Books.DrainedFor("n2") != key {
		t.Errorf("want leaf l1 drained for the gang once it waits for no victim:\n%s", env.gangs.Books)
	}
	series := "lockstep_scheduler_preemption_eviction_errors_total{}"
	if got := observed(t, env.reg, "lockstep_scheduler_preemption_eviction_errors_total")[series]; got != 1 {
		t.Errorf("%s = %v, want 1 (the pod found gone is no error)", series, got)
	}
}

// The hold ends, and its plan is forgotten, when the preemptor no longer
// waits: its PodGroup is deleted, or its last pending pod is.
func TestHoldEndsWhenThePreemptorGoes(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		end  func(env *preemptionEnv)
	}{
		{
			name: "PodGroup deleted",
			end:  func(env *preemptionEnv) { env.releaseDrainsOf(ctx, "ns/high", "its PodGroup was deleted") },
		},
		{
			name: "pending pods deleted",
			end: func(env *preemptionEnv) {
				indexer := env.handle.informers.Core().V1().Pods().Informer().GetIndexer()
				for _, name := range []string{"high-0", "high-1"} {
					if err := indexer.Delete(env.pods[name]); err != nil {
						t.Fatal(err)
					}
					env.podEvents(ctx).OnDelete(env.pods[name])
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, groups := gangsOf(time.Unix(1000, 0))
			env := newPreemptionEnv(t, pods, groups...)
			const key = "ns/high#8"
			if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
				t.Fatalf("PostFilter: %v", status)
			}
			if _, held := env.gangs.Books.Preemption(key); !held {
				t.Fatalf("no hold:\n%s", env.gangs.Books)
			}
			tc.end(env)
			if _, held := env.gangs.Books.Preemption(key); held || env.gangs.Books.Drains(key) || env.gangs.Books.PreemptionPlans() != 0 {
				t.Errorf("the hold outlived its gang:\n%s", env.gangs.Books)
			}
		})
	}
}

// A hold is not spent by what every real node runs or by the agents' lag
// (issue 40): the victims are gone from the books and the scheduler's
// cache, but their nodes' agents still report their GPUs (they read
// allocations on a resync interval), so the gang does not fit yet, while
// pods that outrank it run in the domain. Only GPU work that landed there
// after the hold was made spends it; anything else nominates the gang
// again and evicts nothing more.
func TestHoldNotSpentByWhatWasThereOrTakesNoGPUs(t *testing.T) {
	nodeCritical := func(name, node string) *v1.Pod {
		pod := utiltesting.MakePod(name, "kube-system").Obj()
		pod.UID = types.UID("uid-" + name)
		pod.Spec.NodeName = node
		pod.Spec.Priority = ptr.To(int32(2000001000)) // system-node-critical
		pod.Status.Phase = v1.PodRunning
		return pod
	}
	tests := []struct {
		name string
		// others run beside the gangs; landed says they came after the hold.
		others []*v1.Pod
		landed bool
		spent  bool
	}{
		{name: "node-critical pods without GPUs, there before", others: []*v1.Pod{nodeCritical("proxy-n2", "n2"), nodeCritical("proxy-n3", "n3")}},
		{name: "node-critical pods without GPUs, landed since", others: []*v1.Pod{nodeCritical("proxy-n2", "n2"), nodeCritical("proxy-n3", "n3")}, landed: true},
		{name: "GPU work that outranks the gang, there before", others: []*v1.Pod{member("monitor", "", "n2", 1000, time.Unix(1000, 0), time.Hour)}},
		{name: "GPU work that outranks the gang, landed since", others: []*v1.Pod{member("monitor", "", "n2", 1000, time.Unix(1000, 0), time.Hour)}, landed: true, spent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pods, groups := gangsOf(time.Unix(1000, 0))
			env := newPreemptionEnv(t, append(pods, tc.others...), groups...)
			env.report(t, "n0", "old-0")
			env.report(t, "n1", "old-1")
			if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
				t.Fatalf("first PostFilter: %v", status)
			}
			if deleted, _ := env.evicted(t, 2); !slices.Equal(deleted, []string{"young-0", "young-1"}) {
				t.Fatalf("first preemption evicted %v, want young", deleted)
			}
			// The agents still report the victims' GPUs after they went.
			env.report(t, "n2", "young-0")
			env.report(t, "n3", "young-1")
			if tc.landed {
				for _, pod := range tc.others {
					pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue,
						LastTransitionTime: metav1.NewTime(env.TopologyPlacement.clock.Now().Add(time.Second))}}
				}
			}
			events := env.podEvents(ctx)
			events.OnDelete(env.pods["young-0"])
			events.OnDelete(env.pods["young-1"])
			before := len(env.clientset.Actions())
			r, status := env.preFilterThenPostFilter(t, env.pods["high-1"], env.nodes(t, "young-0", "young-1"))
			if !status.IsSuccess() {
				t.Fatalf("PostFilter after the victims went: %v", status)
			}
			if !tc.spent {
				if node := nominatedNode(r); node != "n2" && node != "n3" {
					t.Errorf("nominated %q, want a node of the held leaf l1", node)
				}
				if extra := env.clientset.Actions()[before:]; len(extra) != 0 {
					t.Errorf("the hold was spent and more was evicted: %v", extra)
				}
				return
			}
			again := env.deletedSince(before, 2)
			if diff := cmp.Diff([]string{"old-0", "old-1"}, again); diff != "" {
				t.Errorf("evicted once the held leaf was taken (-want,+got):\n%s", diff)
			}
		})
	}
}

// A victim stuck terminating (its node dark, a finalizer) holds the
// preemptor's domain no longer than the victims' grace period and a drain
// stall (issue 40): the gang's answer names the victim it waits for, and
// past the bound the sweep releases the domain, says so in an event on
// the preemptor's PodGroup and counts it.
func TestHoldBoundedWhenAVictimIsStuck(t *testing.T) {
	// The hold ends in the plugin's sweep, or in a member's PreFilter when
	// it is tried first (the hold ends there as a drain that stalled):
	// either way it is said once.
	for _, preFilterFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("preFilterFirst=%v", preFilterFirst), func(t *testing.T) { testHoldBoundedWhenAVictimIsStuck(t, preFilterFirst) })
	}
}

func testHoldBoundedWhenAVictimIsStuck(t *testing.T, preFilterFirst bool) {
	ctx := context.Background()
	pods, groups := gangsOf(time.Unix(1000, 0))
	const grace = 45 * time.Second
	for _, pod := range pods {
		pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(grace / time.Second))
	}
	env := newPreemptionEnv(t, pods, groups...)
	recorder := events.NewFakeRecorder(100)
	env.handle.recorder = recorder
	env.report(t, "n0", "old-0")
	env.report(t, "n1", "old-1")
	const key = "ns/high#8"
	if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
		t.Fatalf("first PostFilter: %v", status)
	}
	env.evicted(t, 2)
	env.podEvents(ctx).OnDelete(env.pods["young-0"])
	// young-1 never goes.
	_, status := env.PreFilter(ctx, framework.NewCycleState(), env.pods["high-1"], env.nodes(t, "young-0"))
	if !strings.Contains(status.Message(), "waits for ns/young-1 to terminate") {
		t.Errorf("PreFilter while young-1 terminates: %q, want it to name ns/young-1", status.Message())
	}
	env.clock.(*clocktesting.FakeClock).Step(grace + env.gangs.DrainStall() - time.Second)
	env.sweep(ctx)
	if _, held := env.gangs.Books.Preemption(key); !held {
		t.Fatal("the hold ended before its bound")
	}
	env.clock.(*clocktesting.FakeClock).Step(2 * time.Second)
	if preFilterFirst {
		env.PreFilter(ctx, framework.NewCycleState(), env.pods["high-1"], env.nodes(t, "young-0"))
	}
	env.sweep(ctx)
	if _, held := env.gangs.Books.Preemption(key); held {
		t.Errorf("the hold outlived its bound with young-1 stuck:\n%s", env.gangs.Books)
	}
	if !env.gangs.Books.EvictedFor(env.pods["young-1"].UID) {
		t.Error("the stuck victim may be evicted again for another gang")
	}
	var expired []string
	for _, e := range schedtesting.Events(recorder) {
		if strings.Contains(e, gangpreemption.EventHoldExpired) {
			expired = append(expired, e)
		}
	}
	if len(expired) != 1 || !strings.Contains(expired[0], "ns/young-1") {
		t.Errorf("events of the hold's end %q, want one naming ns/young-1", expired)
	}
	if got := observed(t, env.reg, "lockstep_scheduler_preemption_holds_expired_total"); got["lockstep_scheduler_preemption_holds_expired_total{}"] != 1 {
		t.Errorf("preemption_holds_expired_total = %v, want 1", got)
	}
}

// deletedSince waits until the clientset recorded want pod deletions after
// its first before actions (the evictions run off the scheduling thread),
// or 10 s, and returns the deleted pods' names, sorted.
func (env *preemptionEnv) deletedSince(before, want int) []string {
	var deleted []string
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		deleted = nil
		for _, a := range env.clientset.Actions()[before:] {
			if d, ok := a.(clienttesting.DeleteAction); ok {
				deleted = append(deleted, d.GetName())
			}
		}
		return len(deleted) >= want, nil
	})
	slices.Sort(deleted)
	return deleted
}

// A gang with a pending member (an elastic job below its maximum, a
// scale-up, minMember below the replicas) is costed by the work of its
// running members since minMember of them ran, not as a gang that never
// started: old, 10 hours running with a third member pending, is spared
// for young, one hour old; and with preemptionMinRuntime of 5 hours, young
// is protected and old, past it, is evicted.
func TestPendingMembersCostTheirRunningWork(t *testing.T) {
	for _, tc := range []struct {
		name       string
		minRuntime time.Duration
		want       []string
	}{
		{name: "the cheapest is the younger gang", want: []string{"young-0", "young-1"}},
		// Whole: its pending member is deleted with it.
		{name: "the younger gang is protected by minRuntime", minRuntime: 5 * time.Hour, want: []string{"old-0", "old-1", "old-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			pods, groups := gangsOf(now)
			pods = append(pods, member("old-2", "old", "", 10, now, 0))
			env := newPreemptionEnv(t, pods, groups...)
			env.args.PreemptionMinRuntime.Duration = tc.minRuntime
			env.clock.(*clocktesting.FakeClock).SetTime(now)
			if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
				t.Fatalf("PostFilter: %v", status)
			}
			deleted, _ := env.evicted(t, len(tc.want))
			if diff := cmp.Diff(tc.want, deleted); diff != "" {
				t.Errorf("deleted pods (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestPreemptionCostsWorkSinceCheckpoint: of two gangs, old (run 10 h) and
// young (run 1 h), the one whose eviction loses less work since its last
// checkpoint report is evicted; a report that does not parse or is ahead
// of the clock is not believed, and a stated restart overhead is added.
func TestPreemptionCostsWorkSinceCheckpoint(t *testing.T) {
	now := time.Unix(100000, 0)
	report := func(ago time.Duration) string {
		return lockstep.Checkpoint{Step: 1, Time: now.Add(-ago), Location: "s3://b/1"}.Format()
	}
	old, young := []string{"old-0", "old-1"}, []string{"young-0", "young-1"}
	for _, tc := range []struct {
		name string
		// annotations of old-1 and young-0.
		old, young map[string]string
		want       []string
	}{
		{name: "no reports: the younger gang", want: young},
		{name: "old checkpointed a minute ago", old: map[string]string{lockstep.AnnotationCheckpoint: report(time.Minute)}, want: old},
		{name: "old checkpointed a minute ago, but a restart costs it two hours",
			old: map[string]string{lockstep.AnnotationCheckpoint: report(time.Minute), lockstep.AnnotationRestartOverhead: "7200"}, want: young},
		{name: "old's clock is ahead: not believed", old: map[string]string{lockstep.AnnotationCheckpoint: report(-5 * time.Minute)}, want: young},
		{name: "old's report does not parse", old: map[string]string{lockstep.AnnotationCheckpoint: `{"step": 1}`}, want: young},
		{name: "young's checkpoint predates its start; old's is 30 minutes old",
			old: map[string]string{lockstep.AnnotationCheckpoint: report(30 * time.Minute)}, young: map[string]string{lockstep.AnnotationCheckpoint: report(5 * time.Hour)}, want: old},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods, groups := gangsOf(now)
			for _, p := range pods {
				switch p.Name {
				case "old-1":
					p.Annotations = tc.old
				case "young-0":
					p.Annotations = tc.young
				}
			}
			env := newPreemptionEnv(t, pods, groups...)
			env.clock.(*clocktesting.FakeClock).SetTime(now)
			if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
				t.Fatalf("PostFilter: %v", status)
			}
			deleted, _ := env.evicted(t, len(tc.want))
			if diff := cmp.Diff(tc.want, deleted); diff != "" {
				t.Errorf("deleted pods (-want,+got):\n%s", diff)
			}
		})
	}
}
