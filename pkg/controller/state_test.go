package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testJob(restart v1alpha1.RestartPolicy, mutate ...func(*v1alpha1.TrainingJob)) *v1alpha1.TrainingJob {
	tpl := utiltesting.MakePodTemplate("pytorch").Image("img").Obj()
	return utiltesting.MakeTrainingJob("j", "ns").UID("job-uid").Framework(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaMaster, 1, tpl).RestartPolicy(v1alpha1.ReplicaMaster, restart).
		Role(v1alpha1.ReplicaWorker, 2, tpl).RestartPolicy(v1alpha1.ReplicaWorker, restart).
		WithStatus(v1alpha1.TrainingJobStatus{StartTime: &metav1.Time{Time: t0}}).
		With(mutate...).DefaultedObj()
}

func testPod(role v1alpha1.ReplicaType, index int32, phase corev1.PodPhase, exitCode int32) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: framework.PodName("j", role, index, 0), Namespace: "ns",
			UID:    types.UID(framework.PodName("j", role, index, 0)),
			Labels: map[string]string{lockstep.LabelReplicaType: string(role), lockstep.LabelReplicaIndex: string(rune('0' + index))},
		},
		Status: corev1.PodStatus{Phase: phase},
	}
	if phase != corev1.PodPending {
		p.Spec.NodeName = "node-" + p.Name
	}
	if exitCode != 0 {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode}}}}
	}
	return p
}

func testGang(phases ...corev1.PodPhase) []*corev1.Pod {
	return []*corev1.Pod{
		testPod(v1alpha1.ReplicaMaster, 0, phases[0], 0),
		testPod(v1alpha1.ReplicaWorker, 0, phases[1], 0),
		testPod(v1alpha1.ReplicaWorker, 1, phases[2], 0),
	}
}

func TestDecide(t *testing.T) {
	run, ok, bad := corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed
	failedWith := func(code int32) []*corev1.Pod {
		pods := testGang(run, run, run)
		pods[2] = testPod(v1alpha1.ReplicaWorker, 1, bad, code)
		return pods
	}
	gone := func(pods []*corev1.Pod, i int) []*corev1.Pod { return append(pods[:i:i], pods[i+1:]...) }
	deleting := func(pods []*corev1.Pod, i int) []*corev1.Pod {
		pods[i].DeletionTimestamp = &metav1.Time{Time: t0}
		return pods
	}
	incarnation := func(n string, pods []*corev1.Pod) []*corev1.Pod {
		for _, p := range pods {
			p.Labels[lockstep.LabelIncarnation] = n
		}
		return pods
	}
	suspensions := func(n string, pods []*corev1.Pod) []*corev1.Pod {
		for _, p := range pods {
			p.Labels[lockstep.LabelSuspensions] = n
		}
		return pods
	}
	restarted := func(count int32) func(*v1alpha1.TrainingJob) {
		return func(j *v1alpha1.TrainingJob) { j.Status.RestartCount = count }
	}
	type want struct {
		Result       framework.Result
		Reason       string
		Restart      []string
		Incident     string
		Gang         bool
		Stale        []string
		WaitStale    bool
		RequeueAfter time.Duration
	}
	cases := []struct {
		name string
		job  *v1alpha1.TrainingJob
		pods []*corev1.Pod
		now  time.Time
		want want
	}{{
		name: "running",
		job:  testJob(""),
		pods: testGang(run, run, run),
		want: want{Result: framework.Running, Reason: "Running"},
	}, {
		name: "master succeeded",
		job:  testJob(""),
		pods: testGang(ok, run, run),
		want: want{Result: framework.Succeeded, Reason: "MasterSucceeded"},
	}, {
		name: "retryable exit code restarts the gang",
		job:  testJob(v1alpha1.RestartExitCode),
		pods: failedWith(137),
		want: want{Result: framework.Running, Reason: "Running", Restart: []string{"j-master-0", "j-worker-0", "j-worker-1"}, Incident: "Worker 1 failed", Gang: true},
	}, {
		name: "pod scope restarts the failed pod",
		job: testJob(v1alpha1.RestartExitCode, func(j *v1alpha1.TrainingJob) {
			j.Spec.FailurePolicy = &v1alpha1.FailurePolicy{Restart: v1alpha1.RestartScopePod}
		}),
		pods: failedWith(137),
		want: want{Result: framework.Running, Reason: "Running", Restart: []string{"j-worker-1"}, Incident: "Worker 1 failed"},
	}, {
		name: "non-retryable exit code fails",
		job:  testJob(v1alpha1.RestartExitCode),
		pods: failedWith(1),
		want: want{Result: framework.Failed, Reason: "WorkerFailed"},
	}, {
		name: "restart policy Never fails",
		job:  testJob(v1alpha1.RestartNever),
		pods: failedWith(137),
		want: want{Result: framework.Failed, Reason: "WorkerFailed"},
	}, {
		name: "OnFailure retries any exit code",
		job:  testJob(v1alpha1.RestartOnFailure),
		pods: failedWith(1),
		want: want{Result: framework.Running, Reason: "Running", Restart: []string{"j-master-0", "j-worker-0", "j-worker-1"}, Incident: "Worker 1 failed", Gang: true},
	}, {
		name: "a member deleted after the gang started restarts the gang",
		job:  testJob(""),
		pods: gone(testGang(run, run, run), 2),
		want: want{Result: framework.Running, Reason: "Running", Restart: []string{"j-master-0", "j-worker-0"}, Gang: true,
			Incident: "pod j-worker-1 was lost (deleted, evicted, preempted or its node gone)"},
	}, {
		name: "a member being deleted by someone else is lost too",
		job:  testJob(""),
		pods: deleting(testGang(run, run, run), 1),
		want: want{Result: framework.Running, Reason: "Running", Restart: []string{"j-master-0", "j-worker-1"}, Gang: true,
			Incident: "pod j-worker-0 was lost (deleted, evicted, preempted or its node gone)"},
	}, {
		name: "two members lost at once are one incident",
		job:  testJob(""),
		pods: gone(gone(testGang(run, run, run), 2), 1),
		want: want{Result: framework.Running, Reason: "Running", Restart: []string{"j-master-0"}, Gang: true,
			Incident: "pods j-worker-0, j-worker-1 were lost (deleted, evicted, preempted or their node gone)"},
	}, {
		name: "a member missing before any is bound is created, not a loss",
		job:  testJob(""),
		pods: gone(testGang(corev1.PodPending, corev1.PodPending, corev1.PodPending), 2),
		want: want{Result: framework.Running, Reason: "Running"},
	}, {
		name: "pod scope recreates a lost member without a restart",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.FailurePolicy = &v1alpha1.FailurePolicy{Restart: v1alpha1.RestartScopePod}
		}),
		pods: gone(testGang(run, run, run), 2),
		want: want{Result: framework.Running, Reason: "Running"},
	}, {
		name: "losses count against the backoff limit",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{BackoffLimit: ptr.To[int32](2)}
		}, restarted(2)),
		pods: incarnation("2", gone(testGang(run, run, run), 2)),
		want: want{Result: framework.Failed, Reason: ReasonBackoffLimitExceeded},
	}, {
		name: "a restart under way deletes the earlier incarnation without counting again",
		job:  testJob("", restarted(1)),
		pods: incarnation("0", gone(testGang(run, run, run), 2)),
		want: want{Result: framework.Running, Stale: []string{"j-master-0", "j-worker-0"}, WaitStale: true},
	}, {
		name: "the new gang waits while the earlier incarnation terminates",
		job:  testJob("", restarted(1)),
		pods: incarnation("0", deleting(gone(testGang(run, run, run), 2), 0)[:1]),
		want: want{Result: framework.Running, WaitStale: true},
	}, {
		name: "the restarted gang runs",
		job:  testJob("", restarted(1)),
		pods: incarnation("1", testGang(run, run, run)),
		want: want{Result: framework.Running, Reason: "Running"},
	}, {
		name: "pods of a suspended run still terminating at resume are waited for, not lost",
		job:  testJob("", func(j *v1alpha1.TrainingJob) { j.Status.Suspensions = 1 }),
		pods: suspensions("0", deleting(deleting(deleting(testGang(run, run, run), 0), 1), 2)),
		want: want{Result: framework.Running, WaitStale: true},
	}, {
		name: "so are they under a pod restart scope, and live ones are deleted",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Status.Suspensions = 2
			j.Spec.FailurePolicy = &v1alpha1.FailurePolicy{Restart: v1alpha1.RestartScopePod}
		}),
		pods: suspensions("1", deleting(testGang(run, run, run), 0)),
		want: want{Result: framework.Running, Stale: []string{"j-worker-0", "j-worker-1"}, WaitStale: true},
	}, {
		name: "pods of the current run are members",
		job:  testJob("", func(j *v1alpha1.TrainingJob) { j.Status.Suspensions = 1 }),
		pods: suspensions("1", gone(testGang(run, run, run), 2)),
		want: want{Result: framework.Running, Reason: "Running", Restart: []string{"j-master-0", "j-worker-0"}, Gang: true,
			Incident: "pod j-worker-1 was lost (deleted, evicted, preempted or its node gone)"},
	}, {
		name: "pods from before the incarnation label count as current",
		job:  testJob("", restarted(3)),
		pods: testGang(run, run, run),
		want: want{Result: framework.Running, Reason: "Running"},
	}, {
		name: "an elastic gang above its minimum rides out a loss",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.ElasticPolicy = &v1alpha1.ElasticPolicy{MinReplicas: ptr.To[int32](1), MaxReplicas: ptr.To[int32](2)}
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{SchedulingPolicy: &v1alpha1.SchedulingPolicy{MinAvailable: ptr.To[int32](2)}}
		}),
		pods: gone(testGang(run, run, run), 2),
		want: want{Result: framework.Running, Reason: "Running"},
	}, {
		name: "backoff limit exceeded",
		job: testJob(v1alpha1.RestartExitCode, func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{BackoffLimit: ptr.To[int32](1)}
			j.Status.RestartCount = 1
		}),
		pods: failedWith(137),
		want: want{Result: framework.Failed, Reason: ReasonBackoffLimitExceeded},
	}, {
		name: "deadline ahead: requeue",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](5)}
		}),
		pods: testGang(run, run, run),
		now:  t0.Add(2 * time.Second),
		want: want{Result: framework.Running, Reason: "Running", RequeueAfter: 3 * time.Second},
	}, {
		name: "deadline passed",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](5)}
		}),
		pods: testGang(run, run, run),
		now:  t0.Add(5 * time.Second),
		want: want{Result: framework.Failed, Reason: ReasonDeadlineExceeded},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = t0
			}
			a := mustAdapter(t, tc.job)
			d := decide(tc.job, a, observe(tc.job, tc.pods, framework.EffectiveRestartScope(a, tc.job)), now)
			got := want{Result: d.outcome.Result, Reason: d.outcome.Reason, RequeueAfter: d.requeueAfter,
				Incident: d.incident, Gang: d.gangRestart, WaitStale: d.waitStale}
			for _, p := range d.restart {
				got.Restart = append(got.Restart, p.Name)
			}
			for _, p := range d.removeStale {
				got.Stale = append(got.Stale, p.Name)
			}
			if diff := cmp.Diff(tc.want, got, cmpSortStrings); diff != "" {
				t.Errorf("decision (-want,+got):\n%s", diff)
			}
		})
	}
}

var cmpSortStrings = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

func mustAdapter(t *testing.T, job *v1alpha1.TrainingJob) framework.Adapter {
	t.Helper()
	a, err := framework.NewBuiltinRegistry(nil).For(job.Spec.Framework)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestExpectations(t *testing.T) {
	clk := &fakeClock{now: t0}
	e := newExpectations(clk)
	const job = types.UID("job")
	pod := func(name string, uid types.UID, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		return p
	}
	if !e.Satisfied(job, nil) {
		t.Fatal("no expectations: want satisfied")
	}
	e.ExpectCreations(job, "a", "b")
	if e.Satisfied(job, []*corev1.Pod{pod("a", "1", false)}) {
		t.Error("b not seen yet: want unsatisfied")
	}
	if !e.Satisfied(job, []*corev1.Pod{pod("a", "1", false), pod("b", "2", false)}) {
		t.Error("a and b seen: want satisfied")
	}
	e.ExpectDeletions(job, "1", "2")
	if e.Satisfied(job, []*corev1.Pod{pod("a", "1", true), pod("b", "2", false)}) {
		t.Error("2 still live: want unsatisfied")
	}
	if !e.Satisfied(job, []*corev1.Pod{pod("a", "1", true)}) {
		t.Error("1 deleting, 2 gone: want satisfied")
	}
	e.ExpectCreations(job, "c")
	e.CreationFailed(job, "c")
	if !e.Satisfied(job, nil) {
		t.Error("failed creation: want satisfied")
	}
	e.ExpectCreations(job, "d")
	clk.now = t0.Add(expectationsTTL + time.Second)
	if !e.Satisfied(job, nil) {
		t.Error("expired: want satisfied")
	}
}

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time                  { return c.now }
func (c *fakeClock) Since(t time.Time) time.Duration { return c.now.Sub(t) }

// TestExcuseNeverCreated: with minAvailable below the replica count the gang
// starts without a member whose creation keeps failing (a ResourceQuota);
// that member was never lost, so no restart follows, while a member that
// existed and went is still an incident.
func TestExcuseNeverCreated(t *testing.T) {
	run := corev1.PodRunning
	job := testJob("", func(j *v1alpha1.TrainingJob) {
		j.Spec.RunPolicy = &v1alpha1.RunPolicy{SchedulingPolicy: &v1alpha1.SchedulingPolicy{MinAvailable: ptr.To[int32](2)}}
	})
	pods := testGang(run, run, run)[:2]
	var f failedCreates
	f.record(job, "j-worker-1", true)
	a := mustAdapter(t, job)
	obs := observe(job, pods, framework.EffectiveRestartScope(a, job))
	if diff := cmp.Diff([]string{"j-worker-1"}, obs.lost); diff != "" {
		t.Fatalf("lost before excuse (-want,+got):\n%s", diff)
	}
	obs.excuse(f.neverCreated(job))
	if d := decide(job, a, obs, t0); d.incident != "" {
		t.Errorf("a member that was never created restarted the job: %q", d.incident)
	}

	// Created at last, then lost: an incident again.
	f.record(job, "j-worker-1", false)
	obs = observe(job, pods, framework.EffectiveRestartScope(a, job))
	obs.excuse(f.neverCreated(job))
	if d := decide(job, a, obs, t0); !d.gangRestart {
		t.Errorf("a member that existed and is gone: want a gang restart, got %+v", d)
	}

	// What was remembered belongs to one incarnation.
	f.record(job, "j-worker-1", true)
	job.Status.RestartCount++
	if f.neverCreated(job)("j-worker-1") {
		t.Error("a failed create of an earlier incarnation excused a member of the next")
	}
}
