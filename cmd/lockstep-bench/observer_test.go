package main

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangpreemption"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestPreemptedBy(t *testing.T) {
	cond := func(reason, msg string, status corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.DisruptionTarget, Status: status, Reason: reason, Message: msg}
	}
	ours := lockstep.Preemption{Preemptor: "bench/high-000", Priority: 1000, Domain: "spine=s0/leaf=l1"}.Message()
	tests := []struct {
		name          string
		conditions    []corev1.PodCondition
		wantPreempted bool
		wantPreemptor string
	}{
		{"no condition", nil, false, ""},
		{"upstream DefaultPreemption", []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			cond(corev1.PodReasonPreemptionByScheduler, "default-scheduler: preempting to accommodate a higher priority pod", corev1.ConditionTrue)}, true, ""},
		{"Lockstep names the preemptor", []corev1.PodCondition{cond(corev1.PodReasonPreemptionByScheduler, ours, corev1.ConditionTrue)}, true, "bench/high-000"},
		{"another disruption", []corev1.PodCondition{cond("DeletionByTaintManager", "", corev1.ConditionTrue)}, false, ""},
		{"condition not true", []corev1.PodCondition{cond(corev1.PodReasonPreemptionByScheduler, ours, corev1.ConditionFalse)}, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Status: corev1.PodStatus{Conditions: tc.conditions}}
			preempted, preemptor := preemptedBy(pod)
			if preempted != tc.wantPreempted || preemptor != tc.wantPreemptor {
				t.Errorf("preemptedBy = %v, %q; want %v, %q", preempted, preemptor, tc.wantPreempted, tc.wantPreemptor)
			}
		})
	}
}

// podEvent is one informer event of the observer test.
type podEvent struct {
	name        string
	uid         string
	incarnation int
	node        string
	phase       corev1.PodPhase
	deleting    bool
	preempted   bool
	gone        bool
	tombstone   bool
}

func (e podEvent) pod() *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: benchNamespace, UID: types.UID(e.uid), Labels: map[string]string{
			lockstep.LabelJobName: "g", lockstep.LabelIncarnation: strconv.Itoa(e.incarnation),
		}},
		Spec:   corev1.PodSpec{NodeName: e.node},
		Status: corev1.PodStatus{Phase: e.phase},
	}
	if e.deleting {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	if e.preempted {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: corev1.PodReasonPreemptionByScheduler, Message: "preempted"}}
	}
	return p
}

// observedPod is what the test compares of a bench.PodRun: times only as
// whether they are set.
type observedPod struct {
	Name, Node      string
	Bound, Finished bool
}

type observedRun struct {
	Pods        []observedPod
	EvictedPods int
	Evicted     bool
}

func observe(pods []bench.PodRun) []observedPod {
	var out []observedPod
	for _, p := range pods {
		out = append(out, observedPod{Name: p.Name, Node: p.Node, Bound: !p.Bound.IsZero(), Finished: !p.Finished.IsZero()})
	}
	return out
}

// TestObserverRuns replays pod events of one 2-pod job through the
// observer and checks the runs it records: a gang restart after a
// preemption starts a new run, and only pods deleted while they held GPUs
// with the preemption condition count as evicted.
func TestObserverRuns(t *testing.T) {
	running := func(name, uid string, inc int, node string) []podEvent {
		return []podEvent{
			{name: name, uid: uid, incarnation: inc, phase: corev1.PodPending},
			{name: name, uid: uid, incarnation: inc, node: node, phase: corev1.PodPending},
			{name: name, uid: uid, incarnation: inc, node: node, phase: corev1.PodRunning},
		}
	}
	concat := func(seqs ...[]podEvent) []podEvent {
		var out []podEvent
		for _, s := range seqs {
			out = append(out, s...)
		}
		return out
	}
	tests := []struct {
		name         string
		events       []podEvent
		wantReleases int
		wantFinished bool
		wantEarlier  []observedRun
		wantLast     []observedPod
	}{
		{
			name: "preempted once, restarted, finished",
			events: concat(running("g-0", "a0", 0, "n1"), running("g-1", "a1", 0, "n2"),
				[]podEvent{
					// The scheduler writes the condition, then deletes.
					{name: "g-1", uid: "a1", node: "n2", phase: corev1.PodRunning, preempted: true},
					{name: "g-1", uid: "a1", node: "n2", phase: corev1.PodRunning, preempted: true, deleting: true},
					{name: "g-1", uid: "a1", node: "n2", phase: corev1.PodRunning, preempted: true, deleting: true, gone: true},
					// The gang restart deletes the other pod.
					{name: "g-0", uid: "a0", node: "n1", phase: corev1.PodRunning, gone: true, tombstone: true},
				},
				running("g-0", "b0", 1, "n3"), running("g-1", "b1", 1, "n4"),
				[]podEvent{
					{name: "g-0", uid: "b0", incarnation: 1, node: "n3", phase: corev1.PodSucceeded},
					{name: "g-1", uid: "b1", incarnation: 1, node: "n4", phase: corev1.PodSucceeded},
				}),
			wantReleases: 2,
			wantFinished: true,
			wantEarlier:  []observedRun{{Pods: []observedPod{{"g-0", "n1", true, true}, {"g-1", "n2", true, true}}, EvictedPods: 1, Evicted: true}},
			wantLast:     []observedPod{{"g-0", "n3", true, true}, {"g-1", "n4", true, true}},
		},
		{
			name: "a late event of the old run does not touch the new one; an unbound pod deleted is not evicted",
			events: concat(running("g-0", "a0", 0, "n1"), []podEvent{{name: "g-1", uid: "a1", phase: corev1.PodPending}},
				[]podEvent{
					{name: "g-0", uid: "a0", node: "n1", phase: corev1.PodRunning, preempted: true, deleting: true},
					{name: "g-1", uid: "a1", phase: corev1.PodPending, gone: true},
				},
				running("g-0", "b0", 1, "n3"),
				[]podEvent{{name: "g-0", uid: "a0", node: "n1", phase: corev1.PodRunning, preempted: true, deleting: true, gone: true}}),
			wantEarlier: []observedRun{{Pods: []observedPod{{"g-0", "n1", true, true}, {Name: "g-1", Finished: true}}, EvictedPods: 1, Evicted: true}},
			wantLast:    []observedPod{{"g-0", "n3", true, false}},
		},
		{
			name: "a pod deleted after it finished, or without the condition, is no eviction",
			events: concat(running("g-0", "a0", 0, "n1"), running("g-1", "a1", 0, "n2"),
				[]podEvent{
					{name: "g-0", uid: "a0", node: "n1", phase: corev1.PodSucceeded},
					{name: "g-0", uid: "a0", node: "n1", phase: corev1.PodSucceeded, preempted: true, gone: true},
					{name: "g-1", uid: "a1", node: "n2", phase: corev1.PodRunning, gone: true},
				},
				running("g-0", "b0", 1, "n3")),
			wantReleases: 1,
			wantEarlier:  []observedRun{{Pods: []observedPod{{"g-0", "n1", true, true}, {"g-1", "n2", true, true}}}},
			wantLast:     []observedPod{{"g-0", "n3", true, false}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Room for every release of the test, so none waits in a
			// goroutine (queueRelease) and draining is deterministic.
			o := newObserver(nil, nil, benchNamespace, 4, true, nil)
			done := make(chan struct{})
			defer close(done)
			o.done = done
			start := time.Now()
			o.submitted(bench.Job{ID: "g", Replicas: 2, GPUsPerReplica: 8, Duration: time.Minute}, start)
			for _, e := range tc.events {
				var obj any = e.pod()
				if e.tombstone {
					obj = cache.DeletedFinalStateUnknown{Key: benchNamespace + "/" + e.name, Obj: obj}
				}
				o.onPod(obj, e.gone)
			}
			releases := 0
		drain:
			for {
				select {
				case <-o.releases:
					releases++
				default:
					break drain
				}
			}
			if releases != tc.wantReleases {
				t.Errorf("%d releases, want %d", releases, tc.wantReleases)
			}
			run := o.run("test", start, time.Now(), nil)
			jr := run.Jobs[0]
			if got := !jr.Finished.IsZero(); got != tc.wantFinished {
				t.Errorf("finished = %v, want %v", got, tc.wantFinished)
			}
			var earlier []observedRun
			for _, er := range jr.EarlierRuns {
				earlier = append(earlier, observedRun{Pods: observe(er.Pods), EvictedPods: er.EvictedPods, Evicted: !er.Evicted.IsZero()})
			}
			if diff := cmp.Diff(tc.wantEarlier, earlier); diff != "" {
				t.Errorf("earlier runs (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLast, observe(jr.Pods)); diff != "" {
				t.Errorf("last run's pods (-want,+got):\n%s", diff)
			}
			if _, err := bench.Summarize(bench.Cluster{Nodes: []bench.Node{{Name: "n1", Profile: "hgx-h100"}, {Name: "n2", Profile: "hgx-h100"}, {Name: "n3", Profile: "hgx-h100"}, {Name: "n4", Profile: "hgx-h100"}}}, run); err != nil {
				t.Errorf("Summarize: %v", err)
			}
		})
	}
}

// TestObserverNamesPreemptors: an earlier run's preemptor is the job
// Lockstep's condition names (a gang, by its PodGroup), else the job of the
// pod the victim's Preempted event relates to (upstream's DefaultPreemption
// names nobody in its condition), else nobody.
func TestObserverNamesPreemptors(t *testing.T) {
	ours := lockstep.Preemption{Preemptor: benchNamespace + "/high", Priority: 1000, Domain: "spine=s0/leaf=l1"}.Message()
	pod := func(job, name, uid string, inc int, msg string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace, UID: types.UID(uid), Labels: map[string]string{
				lockstep.LabelJobName: job, lockstep.LabelIncarnation: strconv.Itoa(inc),
			}},
			Spec:   corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
		if msg != "" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: corev1.PodReasonPreemptionByScheduler, Message: msg}}
		}
		return p
	}
	event := func(victimUID string, related *corev1.ObjectReference, note string) *eventsv1.Event {
		return &eventsv1.Event{Reason: gangpreemption.EventPreempted, Note: note,
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: benchNamespace, UID: types.UID(victimUID)}, Related: related}
	}
	tests := []struct {
		name  string
		msg   string
		event *eventsv1.Event
		want  string
	}{
		{name: "Lockstep's condition names the gang", msg: ours, want: "high"},
		{name: "upstream's event relates the preemptor pod", msg: "preempted",
			event: event("v0", &corev1.ObjectReference{Kind: "Pod", Namespace: benchNamespace, Name: "single-0"}, "Preempted by pod 1234 on node n1"), want: "single"},
		{name: "an event with Lockstep's note and no related object", msg: "preempted", event: event("v0", nil, ours), want: "high"},
		{name: "another reason names nobody", msg: "preempted",
			event: &eventsv1.Event{Reason: "Scheduled", Regarding: corev1.ObjectReference{Kind: "Pod", UID: "v0"}, Related: &corev1.ObjectReference{Kind: "Pod", Name: "single-0"}}},
		{name: "a preemptor outside the trace is nobody", msg: "preempted",
			event: event("v0", &corev1.ObjectReference{Kind: "Pod", Namespace: benchNamespace, Name: "stranger"}, "")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newObserver(nil, nil, benchNamespace, 4, false, nil)
			start := time.Now()
			for _, id := range []string{"low", "high", "single"} {
				o.submitted(bench.Job{ID: id, Replicas: 1, GPUsPerReplica: 8, Duration: time.Minute}, start)
			}
			o.onPod(pod("single", "single-0", "s0", 0, ""), false)
			if tc.event != nil {
				o.onEvent(tc.event)
			}
			victim := pod("low", "low-0", "v0", 0, tc.msg)
			o.onPod(victim, false)
			o.onPod(victim, true)
			o.onPod(pod("low", "low-0", "v1", 1, ""), false)
			run := o.run("test", start, time.Now(), nil)
			i := slices.IndexFunc(run.Jobs, func(j bench.JobRun) bool { return j.Job.ID == "low" })
			if ers := run.Jobs[i].EarlierRuns; len(ers) != 1 || !ers[0].Preempted() {
				t.Fatalf("earlier runs %+v, want one preempted", ers)
			} else if ers[0].Preemptor != tc.want {
				t.Errorf("preemptor %q, want %q", ers[0].Preemptor, tc.want)
			}
		})
	}
}

// TestQueueReleaseOverflows: a job restarted while its release is queued
// is queued again without blocking the pod handler, and both arrive.
func TestQueueReleaseOverflows(t *testing.T) {
	o := newObserver(nil, nil, benchNamespace, 1, true, nil)
	done := make(chan struct{})
	defer close(done)
	o.done = done
	o.queueRelease(release{job: "g", incarnation: 0})
	o.queueRelease(release{job: "g", incarnation: 1}) // must not block
	var got []release
	for range 2 {
		select {
		case r := <-o.releases:
			got = append(got, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("got releases %v, want two", got)
		}
	}
	if diff := cmp.Diff([]release{{"g", 0}, {"g", 1}}, got, cmp.AllowUnexported(release{})); diff != "" {
		t.Errorf("releases (-want,+got):\n%s", diff)
	}
}

// TestObserverGPUSets checks where a pod's GPU set is read from: the
// scheduler's annotation first with the device plugin, the agent's
// allocation (from the pod's allocated claims) alone with DRA, where the
// annotation is the plan the allocator need not follow.
func TestObserverGPUSets(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	nt := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	nt.Status.Allocations = []v1alpha1.GPUAllocation{
		{Namespace: benchNamespace, Pod: "g-0", PodUID: "a0", GPUs: []int32{4, 5}},
		{Namespace: "elsewhere", Pod: "g-1", PodUID: "a1", GPUs: []int32{6}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nt).Build()
	tests := []struct {
		name        string
		claimedGPUs bool
		annotated   bool
		want        map[string]topology.GPUSet
	}{
		{"device plugin: the scheduler's annotation", false, true, map[string]topology.GPUSet{"g-0": topology.NewGPUSet(0, 1), "g-1": topology.NewGPUSet(0, 1)}},
		{"device plugin without annotation: the agent's allocation", false, false, map[string]topology.GPUSet{"g-0": topology.NewGPUSet(4, 5), "g-1": 0}},
		{"DRA: the claims' allocation, never the plan", true, true, map[string]topology.GPUSet{"g-0": topology.NewGPUSet(4, 5), "g-1": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newObserver(nil, nil, benchNamespace, 1, false, nil)
			o.claimedGPUs = tc.claimedGPUs
			o.submitted(bench.Job{ID: "g", Replicas: 2, GPUsPerReplica: 2, Duration: time.Minute}, time.Now())
			for i, name := range []string{"g-0", "g-1"} {
				p := podEvent{name: name, uid: "a" + strconv.Itoa(i), node: "n1", phase: corev1.PodRunning}.pod()
				if tc.annotated {
					p.Annotations = map[string]string{lockstep.AnnotationGPUs: "0,1"}
				}
				o.onPod(p, false)
			}
			if err := o.fillGPUs(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			got := map[string]topology.GPUSet{}
			for name, ps := range o.jobs["g"].current().pods {
				got[name] = ps.gpus
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GPU sets (-want,+got):\n%s", diff)
			}
		})
	}
}
