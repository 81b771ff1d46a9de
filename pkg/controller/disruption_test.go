package controller

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func disruptionTarget(p *corev1.Pod, reason string) *corev1.Pod {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason})
	return p
}

func TestPodDisruption(t *testing.T) {
	evicted := testPod(v1alpha1.ReplicaWorker, 0, corev1.PodFailed, 137)
	evicted.Status.Reason = "Evicted"
	cases := []struct {
		name   string
		pod    *corev1.Pod
		reason string
	}{
		{"no condition: a failure", testPod(v1alpha1.ReplicaWorker, 0, corev1.PodFailed, 1), ""},
		{"node pressure", disruptionTarget(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodFailed, 137), "TerminationByKubelet"), "TerminationByKubelet"},
		{"a kubelet before DisruptionTarget", evicted, "TerminationByKubelet"},
		{"taint manager", disruptionTarget(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), "DeletionByTaintManager"), "DeletionByTaintManager"},
		{"node deleted", disruptionTarget(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), "DeletionByPodGC"), "DeletionByPodGC"},
		{"a drain", disruptionTarget(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), "EvictionByEvictionAPI"), "EvictionByEvictionAPI"},
		{"preemption is the preemption path's", disruptionTarget(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), "PreemptionByScheduler"), ""},
		{"an unknown reason is no excuse", disruptionTarget(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), "SomethingElse"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := podDisruption(tc.pod)
			if got != tc.reason || ok != (tc.reason != "") {
				t.Errorf("podDisruption = %q, %v; want %q", got, ok, tc.reason)
			}
		})
	}
}

// TestDecideInfrastructure: a gang whose member the cluster took restarts
// whole as an infrastructure restart, which backoffLimit does not count;
// the job's own failure still does.
func TestDecideInfrastructure(t *testing.T) {
	run := corev1.PodRunning
	limit := func(restarts, preemptions, infra int32) func(*v1alpha1.TrainingJob) {
		return func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{BackoffLimit: ptr.To[int32](0)}
			j.Status.RestartCount, j.Status.Preemptions, j.Status.InfrastructureRestarts = restarts, preemptions, infra
		}
	}
	at := func(n int32, pods []*corev1.Pod) []*corev1.Pod {
		for _, p := range pods {
			p.Labels[lockstep.LabelIncarnation] = strconv.Itoa(int(n))
		}
		return pods
	}
	drained := func() []*corev1.Pod {
		pods := testGang(run, run, run)
		disruptionTarget(pods[2], "EvictionByEvictionAPI").DeletionTimestamp = &metav1.Time{Time: t0}
		return pods
	}
	pressured := func() []*corev1.Pod {
		pods := testGang(run, run, run)
		pods[2] = disruptionTarget(testPod(v1alpha1.ReplicaWorker, 1, corev1.PodFailed, 137), "TerminationByKubelet")
		return pods
	}
	crashed := func() []*corev1.Pod {
		pods := testGang(run, run, run)
		pods[2] = testPod(v1alpha1.ReplicaWorker, 1, corev1.PodFailed, 1)
		return pods
	}
	type want struct {
		Result     framework.Result
		Reason     string
		Disruption string
		Gang       bool
	}
	cases := []struct {
		name string
		job  *v1alpha1.TrainingJob
		pods []*corev1.Pod
		want want
	}{
		{name: "a drain with backoffLimit 0: restart", job: testJob(v1alpha1.RestartOnFailure, limit(0, 0, 0)), pods: drained(),
			want: want{Result: framework.Running, Reason: "EvictionByEvictionAPI", Disruption: "EvictionByEvictionAPI", Gang: true}},
		{name: "node pressure with backoffLimit 0: restart", job: testJob(v1alpha1.RestartOnFailure, limit(0, 0, 0)), pods: pressured(),
			want: want{Result: framework.Running, Reason: "TerminationByKubelet", Disruption: "TerminationByKubelet", Gang: true}},
		{name: "five infrastructure restarts and a preemption use up nothing", job: testJob(v1alpha1.RestartOnFailure, limit(6, 1, 5)),
			pods: at(6, pressured()),
			want: want{Result: framework.Running, Reason: "TerminationByKubelet", Disruption: "TerminationByKubelet", Gang: true}},
		{name: "a crash after infrastructure restarts: the first failure fails the job", job: testJob(v1alpha1.RestartOnFailure, limit(5, 0, 5)),
			pods: at(5, crashed()),
			want: want{Result: framework.Failed}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := mustAdapter(t, tc.job)
			obs := observe(tc.job, tc.pods, framework.EffectiveRestartScope(a, tc.job))
			d := decide(tc.job, a, obs, t0)
			got := want{Result: d.outcome.Result, Reason: d.reason, Gang: d.gangRestart}
			if d.outcome.Result == framework.Failed {
				got.Reason = ""
			}
			if d.disruption != nil {
				got.Disruption = d.disruption.reason
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestAbandonStaleOnDarkNodes: after a gang restart the new incarnation
// waits for the old pods to go, except those Terminating on a node that
// is unavailable, whose names the new incarnation does not reuse; under a
// pod scope (names reused) they are waited for.
func TestAbandonStaleOnDarkNodes(t *testing.T) {
	run := corev1.PodRunning
	old := func() []*corev1.Pod {
		pods := testGang(run, run, run)
		for _, p := range pods {
			p.Labels[lockstep.LabelIncarnation] = "0"
			p.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		return pods
	}
	dark := map[string]nodeOutage{"node-j-worker-1": {since: t0, silent: true}}
	restarted := func(j *v1alpha1.TrainingJob) { j.Status.RestartCount = 1 }
	cases := []struct {
		name      string
		job       *v1alpha1.TrainingJob
		pods      []*corev1.Pod
		outages   map[string]nodeOutage
		abandoned []string
		wait      int
	}{
		{name: "healthy nodes: every old pod is waited for", job: testJob("", restarted), pods: old(), wait: 3},
		{name: "the one on the dark node is not", job: testJob("", restarted), pods: old(), outages: dark,
			abandoned: []string{"j-worker-1"}, wait: 2},
		{name: "every old pod on the dark node", job: testJob("", restarted), pods: old()[2:], outages: dark,
			abandoned: []string{"j-worker-1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := mustAdapter(t, tc.job)
			obs := observe(tc.job, tc.pods, framework.EffectiveRestartScope(a, tc.job))
			obs.abandon(tc.job, tc.outages)
			if diff := cmp.Diff(tc.abandoned, obs.abandoned); diff != "" {
				t.Errorf("abandoned (-want,+got):\n%s", diff)
			}
			if obs.staleTerminating != tc.wait {
				t.Errorf("waiting for %d old pods, want %d", obs.staleTerminating, tc.wait)
			}
			d := decide(tc.job, a, obs, t0)
			if d.waitStale != (tc.wait > 0) {
				t.Errorf("waitStale = %v with %d old pods to wait for", d.waitStale, tc.wait)
			}
		})
	}
	// Pods that keep their names across a suspension are waited for even
	// there: the name is not free.
	job := testJob("", func(j *v1alpha1.TrainingJob) { j.Status.Suspensions = 1 })
	obs := observe(job, old(), v1alpha1.RestartScopeGang)
	obs.abandon(job, dark)
	if len(obs.abandoned) > 0 || obs.staleTerminating != 3 {
		t.Errorf("suspended run: abandoned %v, waiting for %d; want none abandoned, 3 waited for", obs.abandoned, obs.staleTerminating)
	}
}

// TestNewIncarnationNames: the pods of incarnation 2 are named for it, a
// live member of the incarnation made by an older controller (named for
// incarnation 0) is still a member, and the missing one is created under
// its new name.
func TestNewIncarnationNames(t *testing.T) {
	job := testJob("", func(j *v1alpha1.TrainingJob) { j.Status.RestartCount = 2 })
	legacy := testPod(v1alpha1.ReplicaMaster, 0, corev1.PodRunning, 0)
	legacy.Labels[lockstep.LabelIncarnation] = "2"
	named := testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0)
	named.Name = framework.PodName("j", v1alpha1.ReplicaWorker, 0, 2)
	named.Labels[lockstep.LabelIncarnation] = "2"
	wrong := testPod(v1alpha1.ReplicaWorker, 1, corev1.PodRunning, 0)
	wrong.Name = framework.PodName("j", v1alpha1.ReplicaWorker, 1, 1) // named for another incarnation
	wrong.Labels[lockstep.LabelIncarnation] = "2"
	obs := observe(job, []*corev1.Pod{legacy, named, wrong}, v1alpha1.RestartScopeGang)
	if diff := cmp.Diff([]string{"j-worker-r2-1"}, obs.lost); diff != "" {
		t.Errorf("lost (-want,+got):\n%s", diff)
	}
	if len(obs.excess) != 1 || obs.excess[0].Name != "j-worker-r1-1" {
		t.Errorf("excess %v, want the pod named for another incarnation", obs.excess)
	}
	if _, ok := obs.live["j-master-0"]; !ok {
		t.Error("the member named by an older controller is not live")
	}
}

func TestRecordRestart(t *testing.T) {
	var st v1alpha1.TrainingJobStatus
	for i := range int32(13) {
		st.RestartCount = i + 1
		recordRestart(&st, v1alpha1.RestartInfrastructure, ReasonNodeUnreachable, metav1.NewTime(t0.Add(time.Duration(i)*time.Minute)))
	}
	if len(st.Restarts) != v1alpha1.MaxRestartRecords || st.Restarts[0].RestartCount != 4 || st.Restarts[9].RestartCount != 13 {
		t.Errorf("restarts %+v, want the latest %d, 4 to 13", st.Restarts, v1alpha1.MaxRestartRecords)
	}
}
