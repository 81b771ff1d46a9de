package controller

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// releaseRun is the preemptor of the tests: a gang at priority 1000 given a
// leaf.
var releaseRun = lockstep.Preemption{Preemptor: "team-a/release", Priority: 1000, Domain: "spine=s1/leaf=l2"}

// upstreamMessage is what upstream's DefaultPreemption writes.
const upstreamMessage = "Preempted by pod 6f1c0a52-1b7e-4a4b-8d0e-0a1b2c3d4e5f on node node-7"

// preemptedBy marks a pod as the scheduler does before deleting it.
func preemptedBy(p *corev1.Pod, msg string) *corev1.Pod {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: corev1.PodReasonPreemptionByScheduler, Message: msg})
	return p
}

func TestPreemptionCauseMessage(t *testing.T) {
	cases := map[string]struct {
		pod  *corev1.Pod
		want string
		ok   bool
	}{
		"Lockstep's gang preemption": {
			pod:  preemptedBy(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), releaseRun.Message()),
			want: "pod j-worker-0 was preempted by team-a/release (priority 1000) in spine=s1/leaf=l2", ok: true,
		},
		"no domain": {
			pod:  preemptedBy(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), lockstep.Preemption{Preemptor: "ns/p", Priority: 5}.Message()),
			want: "pod j-worker-0 was preempted by ns/p (priority 5)", ok: true,
		},
		"upstream DefaultPreemption": {
			pod:  preemptedBy(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), upstreamMessage),
			want: "pod j-worker-0 was preempted by a higher-priority pod", ok: true,
		},
		"another disruption": {
			pod: func() *corev1.Pod {
				p := testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0)
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
					Reason: "EvictionByEvictionAPI", Message: releaseRun.Message()}}
				return p
			}(),
		},
		"no condition": {pod: testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, ok := podPreemption(tc.pod)
			got := ""
			if ok {
				got = c.message()
			}
			if ok != tc.ok || got != tc.want {
				t.Errorf("podPreemption = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestDecidePreemption: a gang whose members the scheduler preempted
// restarts whole as a preemption, whichever members the controller still
// sees, and not against backoffLimit.
func TestDecidePreemption(t *testing.T) {
	run, bad := corev1.PodRunning, corev1.PodFailed
	lockstepMsg := releaseRun.Message()
	deleting := func(pods []*corev1.Pod, msg string, idx ...int) []*corev1.Pod {
		for _, i := range idx {
			pods[i].DeletionTimestamp = &metav1.Time{Time: t0}
			if msg != "" {
				preemptedBy(pods[i], msg)
			}
		}
		return pods
	}
	backoffLimit := func(n, restarts, preemptions int32) func(*v1alpha1.TrainingJob) {
		return func(j *v1alpha1.TrainingJob) {
			runPolicy(j).BackoffLimit = ptr.To(n)
			j.Status.RestartCount, j.Status.Preemptions = restarts, preemptions
		}
	}
	incarnation := func(n string, pods []*corev1.Pod) []*corev1.Pod {
		for _, p := range pods {
			p.Labels[lockstep.LabelIncarnation] = n
		}
		return pods
	}
	type want struct {
		Result    framework.Result
		Reason    string
		Restart   []string
		Incident  string
		Preempted bool
		WaitStale bool
	}
	const byRelease = "pod j-worker-0 was preempted by team-a/release (priority 1000) in spine=s1/leaf=l2"
	cases := []struct {
		name     string
		job      *v1alpha1.TrainingJob
		pods     []*corev1.Pod
		vanished map[string]vanishedPod
		want     want
	}{{
		name: "members terminating with the scheduler's condition",
		job:  testJob("", backoffLimit(0, 0, 0)),
		pods: deleting(testGang(run, run, run), lockstepMsg, 1, 2),
		want: want{Result: framework.Running, Reason: v1alpha1.ReasonPreemptedByScheduler, Restart: []string{"j-master-0"}, Incident: byRelease, Preempted: true},
	}, {
		name: "every member gone at once, seen only by the pod events",
		job:  testJob("", backoffLimit(0, 0, 0)),
		pods: nil,
		vanished: map[string]vanishedPod{
			"j-master-0": {bound: true, preempted: true, cause: preemptionCause{pod: "j-master-0", by: releaseRun, known: true}},
			"j-worker-0": {bound: true, preempted: true, cause: preemptionCause{pod: "j-worker-0", by: releaseRun, known: true}},
		},
		want: want{Result: framework.Running, Reason: v1alpha1.ReasonPreemptedByScheduler,
			Incident: "pod j-master-0 was preempted by team-a/release (priority 1000) in spine=s1/leaf=l2", Preempted: true},
	}, {
		name: "a member gone, seen by its event, the rest not yet marked",
		job:  testJob(""),
		pods: testGang(run, run, run)[:2],
		vanished: map[string]vanishedPod{
			"j-worker-1": {bound: true, preempted: true, cause: preemptionCause{pod: "j-worker-1", by: releaseRun, known: true}},
		},
		want: want{Result: framework.Running, Reason: v1alpha1.ReasonPreemptedByScheduler, Restart: []string{"j-master-0", "j-worker-0"},
			Incident: "pod j-worker-1 was preempted by team-a/release (priority 1000) in spine=s1/leaf=l2", Preempted: true},
	}, {
		name: "upstream DefaultPreemption names no preemptor",
		job:  testJob(""),
		pods: deleting(testGang(run, run, run), upstreamMessage, 1),
		want: want{Result: framework.Running, Reason: v1alpha1.ReasonPreemptedByScheduler, Restart: []string{"j-master-0", "j-worker-1"},
			Incident: "pod j-worker-0 was preempted by a higher-priority pod", Preempted: true},
	}, {
		name: "a member that failed once marked is preempted, not failed, even under restartPolicy Never",
		job:  testJob(v1alpha1.RestartNever, backoffLimit(0, 0, 0)),
		pods: func() []*corev1.Pod {
			pods := testGang(run, run, run)
			pods[1] = preemptedBy(testPod(v1alpha1.ReplicaWorker, 0, bad, 143), lockstepMsg)
			return pods
		}(),
		want: want{Result: framework.Running, Reason: v1alpha1.ReasonPreemptedByScheduler, Restart: []string{"j-master-0", "j-worker-1"}, Incident: byRelease, Preempted: true},
	}, {
		name: "a member lost for another reason is a failure",
		job:  testJob("", backoffLimit(0, 0, 0)),
		pods: deleting(testGang(run, run, run), "", 1),
		want: want{Result: framework.Failed, Reason: ReasonBackoffLimitExceeded},
	}, {
		name: "preemptions do not use up backoffLimit",
		job:  testJob("", backoffLimit(1, 3, 3)),
		pods: incarnation("3", deleting(testGang(run, run, run), "", 1)),
		want: want{Result: framework.Running, Reason: "Running", Restart: []string{"j-master-0", "j-worker-1"},
			Incident: "pod j-worker-0 was lost (deleted, evicted, preempted or its node gone)"},
	}, {
		name: "failures do",
		job:  testJob("", backoffLimit(1, 3, 2)),
		pods: incarnation("3", deleting(testGang(run, run, run), "", 1)),
		want: want{Result: framework.Failed, Reason: ReasonBackoffLimitExceeded},
	}, {
		name: "a preemption past the failures' limit still restarts",
		job:  testJob("", backoffLimit(1, 1, 0)),
		pods: incarnation("1", deleting(testGang(run, run, run), lockstepMsg, 1)),
		want: want{Result: framework.Running, Reason: v1alpha1.ReasonPreemptedByScheduler, Restart: []string{"j-master-0", "j-worker-1"}, Incident: byRelease, Preempted: true},
	}, {
		name: "the preempted gang's pods still going after the restart are not a second preemption",
		job:  testJob("", backoffLimit(0, 1, 1)),
		pods: incarnation("0", deleting(testGang(run, run, run), lockstepMsg, 0, 1, 2)),
		want: want{Result: framework.Running, WaitStale: true},
	}, {
		name: "a live member the scheduler marked but did not delete is no loss",
		job:  testJob(""),
		pods: func() []*corev1.Pod {
			pods := testGang(run, run, run)
			preemptedBy(pods[1], lockstepMsg)
			return pods
		}(),
		vanished: map[string]vanishedPod{"j-worker-0": {bound: true, preempted: true, cause: preemptionCause{pod: "j-worker-0", by: releaseRun, known: true}}},
		want:     want{Result: framework.Running, Reason: "Running"},
	}, {
		name: "pod scope recreates preempted members without a restart",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.FailurePolicy = &v1alpha1.FailurePolicy{Restart: v1alpha1.RestartScopePod}
		}),
		pods: deleting(testGang(run, run, run), lockstepMsg, 1),
		want: want{Result: framework.Running, Reason: "Running"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := mustAdapter(t, tc.job)
			obs := observe(tc.job, tc.pods, framework.EffectiveRestartScope(a, tc.job))
			obs.noteVanished(tc.job, tc.vanished)
			d := decide(tc.job, a, obs, t0)
			got := want{Result: d.outcome.Result, Reason: d.outcome.Reason, Incident: d.incident, Preempted: d.preemption != nil, WaitStale: d.waitStale}
			if d.reason != "" {
				got.Reason = d.reason
			}
			for _, p := range d.restart {
				got.Restart = append(got.Restart, p.Name)
			}
			if diff := cmp.Diff(tc.want, got, cmpSortStrings); diff != "" {
				t.Errorf("decision (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestVanishedPods: the pod events remember the preempted members of the
// current incarnation of jobs, nothing else.
func TestVanishedPods(t *testing.T) {
	job := testJob("")
	owned := func(p *corev1.Pod, incarnation string) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob", Name: job.Name,
			UID: job.UID, Controller: ptr.To(true)}}
		p.Labels[lockstep.LabelIncarnation] = incarnation
		return p
	}
	var v vanishedPods
	v.note(owned(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), "0"))                        // not preempted
	v.note(preemptedBy(testPod(v1alpha1.ReplicaWorker, 1, corev1.PodRunning, 0), releaseRun.Message())) // not a job's
	v.note(owned(preemptedBy(testPod(v1alpha1.ReplicaMaster, 0, corev1.PodRunning, 0), releaseRun.Message()), "0"))
	want := map[string]vanishedPod{"j-master-0": {bound: true, preempted: true, cause: preemptionCause{pod: "j-master-0", by: releaseRun, known: true}}}
	if diff := cmp.Diff(want, v.of(job), cmp.AllowUnexported(vanishedPod{}, preemptionCause{})); diff != "" {
		t.Errorf("noted (-want,+got):\n%s", diff)
	}
	// The gang restarted: what was noted of the earlier one is no use.
	job.Status.RestartCount = 1
	if got := v.of(job); len(got) != 0 {
		t.Errorf("noted for incarnation 1: %v, want nothing", got)
	}
	v.note(owned(preemptedBy(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), upstreamMessage), "1"))
	all, _ := v.jobs.Load(job.UID) // every incarnation's, not only the current one's
	if got := v.of(job); len(got) != 1 || got["j-worker-0"].cause.known || len(all) != 1 {
		t.Errorf("noted for incarnation 1: %v (all: %v), want j-worker-0 alone, preemptor unknown", got, all)
	}
	v.forget(job.UID)
	if got := v.of(job); len(got) != 0 {
		t.Errorf("noted after forget: %v", got)
	}
}

// TestPreemptionCountedOnce: a gang preempted once is counted once, whether
// the status write that records it conflicts, the controller restarts
// (its memory gone) or further events show the same pods; the restart
// costs no backoff, keeps the pods' grace period, and backoffLimit 0 does
// not fail the job.
func TestPreemptionCountedOnce(t *testing.T) {
	scheme := fakeScheme(t)
	job := pyTorchJob("ns", "j", withBackoffLimit(0), func(j *v1alpha1.TrainingJob) { j.UID = "job-uid" })
	job.Default()
	// The controller deletes pods in parallel.
	var mu sync.Mutex
	var deletes []client.DeleteOption
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.TrainingJob{}, &corev1.Pod{}).WithObjects(job).
		WithInterceptorFuncs(interceptor.Funcs{
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if _, ok := obj.(*corev1.Pod); ok {
					mu.Lock()
					deletes = append(deletes, opts...)
					mu.Unlock()
				}
				return c.Delete(ctx, obj, opts...)
			},
		}).Build()
	r := fakeReconciler(c)
	ctx := context.Background()
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "j"}}
	reconcileOK := func(what string) ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return res
	}
	reconcileOK("creating the gang")
	pods := listFakePods(t, c)
	if len(pods) != 4 {
		t.Fatalf("%d pods, want 4", len(pods))
	}
	for i := range pods {
		p := &pods[i]
		p.Spec.NodeName = "node-" + p.Name
		// Kept while terminating, as a kubelet's pod is.
		p.Finalizers = []string{"test/kubelet"}
		if err := c.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	reconcileOK("running the gang")
	before := preemptionsCounted()

	// The scheduler preempts the gang: marks two members, deletes one.
	for _, name := range []string{"j-worker-0", "j-worker-1"} {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		preemptedBy(&p, releaseRun.Message())
		if err := c.Status().Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j-worker-0"}}); err != nil {
		t.Fatal(err)
	}
	deletes = nil

	// The first pass decides on a stale job (the cache lags a change of
	// its labels), so its writes conflict: nothing is counted, and the job
	// is looked at again soon.
	stale := fakeJob(t, c)
	fresh := stale.DeepCopy()
	fresh.Labels = map[string]string{"team": "a"}
	if err := c.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	r.Client = &staleJobClient{Client: c, stale: stale}
	if res := reconcileOK("the conflicting pass"); res.RequeueAfter == 0 {
		t.Errorf("a conflicting restart was not requeued: %+v", res)
	}
	r.Client = c
	if j := fakeJob(t, c); j.Status.RestartCount != 0 || j.Status.Preemptions != 0 {
		t.Fatalf("after a conflicting write: %s preemptions %d; want nothing counted", describeJob(j), j.Status.Preemptions)
	}
	reconcileOK("the restart")
	const msg = "pod j-worker-0 was preempted by team-a/release (priority 1000) in spine=s1/leaf=l2"
	if diff := cmp.Diff([]string{"Warning Preempted " + msg}, preemptedEvents(r.Recorder)); diff != "" {
		t.Errorf("Preempted events (-want,+got):\n%s", diff)
	}
	// The scheduler deletes the member it marked; a new controller, which
	// noted nothing, sees the rest.
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j-worker-1"}}); err != nil {
		t.Fatal(err)
	}
	r = fakeReconciler(c)
	for range 3 {
		reconcileOK("later passes")
	}
	if got := preemptedEvents(r.Recorder); len(got) != 0 {
		t.Errorf("Preempted events after the restart was recorded: %v", got)
	}

	j := fakeJob(t, c)
	if j.Status.RestartCount != 1 || j.Status.Preemptions != 1 || isFinished(&j.Status) {
		t.Errorf("after one preemption: %s preemptions %d; want restartCount 1, preemptions 1, not finished", describeJob(j), j.Status.Preemptions)
	}
	if got := preemptionsCounted() - before; got != 1 {
		t.Errorf("lockstep_controller_preemptions_total rose by %v, want 1", got)
	}
	if b := j.Status.RestartBackoff; b != nil {
		t.Errorf("restartBackoff %+v after a preemption; want none", b)
	}
	want := metav1.Condition{Type: v1alpha1.ConditionPreempted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPreemptedByScheduler, Message: msg}
	if diff := cmp.Diff(&want, meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionPreempted), ignoreConditionTimes); diff != "" {
		t.Errorf("Preempted condition (-want,+got):\n%s", diff)
	}
	if c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobRestarting)); c == nil || c.Reason != v1alpha1.ReasonPreemptedByScheduler {
		t.Errorf("Restarting condition %+v, want reason %s", c, v1alpha1.ReasonPreemptedByScheduler)
	}
	// The controller deleted the survivors with their own grace period.
	for _, o := range deletes {
		do := &client.DeleteOptions{}
		o.ApplyToDelete(do)
		if do.GracePeriodSeconds != nil {
			t.Errorf("the restart deleted a pod with a grace period of %d s, want the pod's own", *do.GracePeriodSeconds)
		}
	}
	if len(deletes) == 0 {
		t.Error("the restart deleted no pod")
	}

	// The old pods go; the new gang is created at once and runs: the
	// condition ends, keeping who preempted it.
	for _, p := range listFakePods(t, c) {
		p.Finalizers = nil
		if err := c.Update(ctx, &p); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	reconcileOK("recreating the gang")
	pods = listFakePods(t, c)
	if len(pods) != 4 {
		t.Fatalf("%d pods after the preempted gang went, want 4 created at once", len(pods))
	}
	for i := range pods {
		pods[i].Status.Phase = corev1.PodRunning
		if err := c.Status().Update(ctx, &pods[i]); err != nil {
			t.Fatal(err)
		}
	}
	reconcileOK("running again")
	j = fakeJob(t, c)
	got := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionPreempted)
	if got == nil || got.Status != metav1.ConditionFalse || got.Reason != ReasonGangRunning || !strings.Contains(got.Message, msg) {
		t.Errorf("Preempted condition %+v once the gang runs again, want False/%s keeping %q", got, ReasonGangRunning, msg)
	}
}

var ignoreConditionTimes = cmp.FilterPath(func(p cmp.Path) bool {
	f := p.Last().String()
	return f == ".LastTransitionTime" || f == ".ObservedGeneration"
}, cmp.Ignore())

func listFakePods(t *testing.T, c client.Client) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func fakeJob(t *testing.T, c client.Client) *v1alpha1.TrainingJob {
	t.Helper()
	var j v1alpha1.TrainingJob
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j"}, &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

func preemptionsCounted() float64 {
	return testutil.ToFloat64(preemptionsTotal.WithLabelValues(string(v1alpha1.FrameworkPyTorch)))
}

// preemptedEvents takes the events a fake recorder holds and returns the
// Preempted ones.
func preemptedEvents(r record.EventRecorder) []string {
	events := r.(*record.FakeRecorder).Events
	var out []string
	for {
		select {
		case ev := <-events:
			if strings.HasPrefix(ev, corev1.EventTypeWarning+" "+ReasonPreempted+" ") {
				out = append(out, ev)
			}
		default:
			return out
		}
	}
}

// TestPodEventsNoteBeforeEnqueue: the handler notes a preempted pod before
// it enqueues the job, so the reconcile the event causes knows why the pod
// went even when the cache no longer holds it.
func TestPodEventsNoteBeforeEnqueue(t *testing.T) {
	job := testJob("")
	p := preemptedBy(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), releaseRun.Message())
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob", Name: job.Name,
		UID: job.UID, Controller: ptr.To(true)}}
	var v vanishedPods
	var noted []int
	h := podEvents{vanished: &v, EventHandler: handler.Funcs{
		UpdateFunc: func(context.Context, event.UpdateEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			noted = append(noted, len(v.of(job)))
		},
		DeleteFunc: func(context.Context, event.DeleteEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			noted = append(noted, len(v.of(job)))
		},
	}}
	h.Update(context.Background(), event.UpdateEvent{ObjectOld: testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), ObjectNew: p}, nil)
	v.forget(job.UID)
	h.Delete(context.Background(), event.DeleteEvent{Object: p, DeleteStateUnknown: true}, nil)
	if diff := cmp.Diff([]int{1, 1}, noted); diff != "" {
		t.Errorf("pods noted when the job was enqueued (-want,+got):\n%s", diff)
	}
}
