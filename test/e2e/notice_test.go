package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// noticedJob is checkpointingJob with runPolicy.preemptionNoticeSeconds.
func noticedJob(ns, name string, class string, notice int32) *v1alpha1.TrainingJob {
	job := checkpointingJob(ns, name, 0, 8, class, false)
	job.Spec.RunPolicy.PreemptionNoticeSeconds = ptr.To(notice)
	return job
}

// waitNotice waits until every pod of want carries a notice by by, and,
// for the scheduler's, the preemption condition, and none is being
// deleted yet; it returns the notice.
func waitNotice(t *testing.T, ns string, want map[string]types.UID, by string, condition bool) lockstep.Notice {
	t.Helper()
	var n lockstep.Notice
	err := localcluster.Poll(context.Background(), 50*time.Millisecond, time.Minute, "the victim's pods given notice", func(ctx context.Context) (bool, error) {
		pods, err := cluster.Pods(ctx, ns)
		if err != nil {
			return false, nil
		}
		given := 0
		for _, p := range pods {
			if !slices.Contains(uidsOf(want), p.UID) {
				continue
			}
			on, ok := lockstep.NoticeOn(p.Annotations)
			if !ok || on.By != by {
				continue
			}
			if p.DeletionTimestamp != nil {
				t.Fatalf("pod %s is being deleted as soon as it was given notice", p.Name)
			}
			if _, marked := preemptionOn(p); marked != condition {
				continue
			}
			n = on
			given++
		}
		return given == len(want), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func uidsOf(pods map[string]types.UID) []types.UID {
	var out []types.UID
	for _, uid := range pods {
		out = append(out, uid)
	}
	return out
}

// preemptionOn reads the scheduler's preemption condition off p.
func preemptionOn(p corev1.Pod) (lockstep.Preemption, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler {
			return lockstep.ParsePreemption(c.Message)
		}
	}
	return lockstep.Preemption{}, false
}

// evictionOf waits for the scheduler's Preempted event on pod and returns
// the GPU-seconds it says the victim lost, why it was evicted then, and
// when.
func evictionOf(t *testing.T, ns, pod string) (lost float64, why string, at time.Time) {
	t.Helper()
	re := regexp.MustCompile(`lost (\d+) GPU-seconds of work \(([^)]*)\)`)
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, 30*time.Second, "a Preempted event on "+pod, func(ctx context.Context) (bool, error) {
		events, err := cluster.Events(ctx, ns, "Pod", pod)
		if err != nil {
			return false, nil
		}
		for _, e := range events {
			m := re.FindStringSubmatch(e.Message)
			if e.Reason != "Preempted" || m == nil {
				continue
			}
			lost, _ = strconv.ParseFloat(m[1], 64)
			why, at = m[2], e.EventTime.Time
			if at.IsZero() {
				at = e.FirstTimestamp.Time
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lost, why, at
}

// TestPreemptionNotice: two low-priority gangs that asked for notice, the
// rest of the cluster held at the preemptor's priority. A high-priority
// gang preempts A (notice 60 s): A's pods show the notice (annotation and
// condition) and are not deleted; its rank takes 10 s to checkpoint and
// reports, and A is evicted right then, not at 60 s, having lost about
// 10 s of its 8 GPUs; the preemptor runs, and A's next incarnation resumes
// from the report. A second preemptor takes B (notice 15 s), whose rank
// never answers: it is evicted when the notice runs out, not before.
func TestPreemptionNotice(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	createJob(t, noticedJob(ns, "a", low, 60))
	aPods := waitPods(t, ns, "a", 1, time.Minute)
	createJob(t, noticedJob(ns, "b", low, 15))
	bPods := waitPods(t, ns, "b", 1, time.Minute)
	// B has run longer: A is the cheaper victim, preempted first.
	backdateStart(t, bPods, 2*time.Hour)
	fillRest(t, ns, high)
	a := onlyPod(t, aPods)
	rank := rankClient(t, a)

	createJob(t, checkpointingJob(ns, "urgent", 0, 8, high, false))
	n := waitNotice(t, ns, podUIDs(aPods), ns+"/urgent", true)
	if left := n.Deadline.Sub(n.Time); left != time.Minute {
		t.Errorf("notice of %s, want the job's 60s", left)
	}
	// The trainer spends 10 s writing its checkpoint: the notice is 10 s
	// old by the scheduler's own stamp, and at every look until then the
	// victim's pods are still there, none being deleted.
	saved := n.Time.Add(10 * time.Second)
	if err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "the rank's 10 s of saving, its pods left running", func(ctx context.Context) (bool, error) {
		checkUntouched(t, ns, "a", podUIDs(aPods))
		return !time.Now().Before(saved) || t.Failed(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if err := reportCheckpoint(ctx, rank, ns, a.Name, 4200, time.Now(), "s3://ckpt/a/4200"); err != nil {
		t.Fatalf("rank of a answering the notice: %v", err)
	}
	waitPreempted(t, ns, podUIDs(aPods), ns+"/urgent", highPriority)
	lost, why, at := evictionOf(t, ns, a.Name)
	if why != "it reported a checkpoint" || !at.Before(n.Deadline) {
		t.Errorf("a evicted at %s (%s), want when its rank answered, before the notice's deadline %s", at, why, n.Deadline)
	}
	// 8 GPUs x the 10 s the rank spent answering, and the moments the
	// report took to reach the scheduler.
	if lost < 80 || lost > 8*20 {
		t.Errorf("a lost %.0f GPU-seconds, want about 80 (10 s x 8 GPUs)", lost)
	}
	waitPods(t, ns, "urgent", 1, time.Minute)
	waitJob(t, ns, "a", time.Minute, "a preempted", preempted(ns+"/urgent", highPriority))
	checkUntouched(t, ns, "b", podUIDs(bPods))
	waitResume(t, ns, "a", a.UID, 1, "s3://ckpt/a/4200", 4200)

	// B never answers.
	createJob(t, checkpointingJob(ns, "urgent-2", 0, 8, high, false))
	nb := waitNotice(t, ns, podUIDs(bPods), ns+"/urgent-2", true)
	waitPreempted(t, ns, podUIDs(bPods), ns+"/urgent-2", highPriority)
	_, why, at = evictionOf(t, ns, onlyPod(t, bPods).Name)
	// Event times are whole microseconds; the notice's nanoseconds.
	if why != "its notice ran out" || at.Before(nb.Deadline.Add(-time.Millisecond)) {
		t.Errorf("b evicted at %s (%s), want when its notice ran out at %s", at, why, nb.Deadline)
	}
	waitPods(t, ns, "urgent-2", 1, time.Minute)
}

// waitResume waits for job's next incarnation (a pod other than old) and
// checks it is incarnation and resumes from location at step.
func waitResume(t *testing.T, ns, job string, old types.UID, incarnation int, location string, step int64) {
	t.Helper()
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, time.Minute, job+"'s next incarnation created", func(ctx context.Context) (bool, error) {
		pods, err := jobPodsOf(ctx, ns, job)
		if err != nil {
			return false, nil
		}
		for _, p := range pods {
			if p.UID == old {
				continue
			}
			env := envOf(p)
			if env[lockstep.EnvResumeFrom] != location || env[lockstep.EnvResumeStep] != fmt.Sprint(step) || env[lockstep.EnvIncarnation] != fmt.Sprint(incarnation) {
				t.Errorf("%s's new pod %s: %s=%q %s=%q %s=%q, want %s, %d, %d", job, p.Name,
					lockstep.EnvResumeFrom, env[lockstep.EnvResumeFrom], lockstep.EnvResumeStep, env[lockstep.EnvResumeStep],
					lockstep.EnvIncarnation, env[lockstep.EnvIncarnation], location, step, incarnation)
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSuspendGivesNotice: suspending a job that asked for notice, as Kueue
// does when it evicts one, gives its pods the same notice before the
// controller deletes them: they are annotated and left running until a
// rank reports a checkpoint, then deleted; the job is Suspended, and
// resumed, its pods resume from the report.
func TestSuspendGivesNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "s", 1)
	job.Spec.RunPolicy.PreemptionNoticeSeconds = ptr.To[int32](600)
	createJob(t, job)
	pods := waitPods(t, ns, "s", 2, time.Minute)
	setSuspend(t, job, true)
	n := waitNotice(t, ns, podUIDs(pods), lockstep.NoticeBySuspend, false)
	if left := n.Deadline.Sub(n.Time); left != 10*time.Minute {
		t.Errorf("notice of %s, want the job's 600s", left)
	}
	if err := localcluster.Poll(ctx, 100*time.Millisecond, 30*time.Second, "a notice event on the job", func(ctx context.Context) (bool, error) {
		events, err := cluster.Events(ctx, ns, "TrainingJob", "s")
		return err == nil && slices.ContainsFunc(events, func(e corev1.Event) bool { return e.Reason == controller.ReasonNoticeGiven }), nil
	}); err != nil {
		t.Fatal(err)
	}
	checkUntouched(t, ns, "s", podUIDs(pods))
	var master corev1.Pod
	for _, p := range pods {
		if p.Labels[lockstep.LabelReplicaType] == string(v1alpha1.ReplicaMaster) {
			master = p
		}
	}
	if err := reportCheckpoint(ctx, rankClient(t, master), ns, master.Name, 77, time.Now(), "s3://ckpt/s/77"); err != nil {
		t.Fatalf("rank answering the notice: %v", err)
	}
	err := localcluster.Poll(ctx, 100*time.Millisecond, time.Minute, "the suspended job's pods gone", func(ctx context.Context) (bool, error) {
		left, err := jobPodsOf(ctx, ns, "s")
		return err == nil && len(left) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, "s", 30*time.Second, "Suspended", hasCondition(v1alpha1.JobSuspended, controller.ReasonSuspended))
	// The controller writes the answer before it deletes the pods.
	var after v1alpha1.TrainingJob
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, &after); err != nil {
		t.Fatal(err)
	}
	if c := after.Status.Checkpoint; c == nil || c.Step != 77 {
		t.Errorf("status.checkpoint %+v once the pods went, want the answer at step 77", c)
	}
	setSuspend(t, job, false)
	for _, p := range waitPods(t, ns, "s", 2, time.Minute) {
		if env := envOf(p); env[lockstep.EnvResumeFrom] != "s3://ckpt/s/77" || env[lockstep.EnvResumeStep] != "77" {
			t.Errorf("resumed pod %s: %s=%q %s=%q, want s3://ckpt/s/77, 77", p.Name, lockstep.EnvResumeFrom, env[lockstep.EnvResumeFrom], lockstep.EnvResumeStep, env[lockstep.EnvResumeStep])
		}
		if _, ok := p.Annotations[lockstep.AnnotationPreemptionNotice]; ok {
			t.Errorf("resumed pod %s carries the suspension's notice", p.Name)
		}
	}
}

// TestSchedulerFailoverMidNotice: two lockstep-scheduler replicas with
// leader election. A high-priority gang preempts a low-priority one that
// asked for 20 s of notice, and the leader is killed as soon as the
// victim's pods carry it. The standby takes the notice over from the pods
// (the annotation's deadline, the condition's preemptor and plan): it
// evicts nothing else, evicts the victim when the notice the first leader
// gave runs out, not later and not anew, and the preemptor runs.
func TestSchedulerFailoverMidNotice(t *testing.T) {
	rs := replicaSet{names: []string{"scheduler-a", "scheduler-b"}, describe: func(name string) (localcluster.Component, error) {
		return cluster.SchedulerReplicaComponent(name, framework.FastLeaderElection())
	}}
	runReplicas(t, "scheduler", cluster.SchedulerComponent, rs)
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	createJob(t, noticedJob(ns, "low", low, 20))
	pods := waitPods(t, ns, "low", 1, time.Minute)
	fillRest(t, ns, high)

	leader := rs.leader(t)
	createJob(t, checkpointingJob(ns, "urgent", 0, 8, high, false))
	n := waitNotice(t, ns, podUIDs(pods), ns+"/urgent", true)
	if err := cluster.KillComponent(leader); err != nil {
		t.Fatal(err)
	}
	restarted := rs.restartAsync(leader)

	waitPreempted(t, ns, podUIDs(pods), ns+"/urgent", highPriority)
	_, why, at := evictionOf(t, ns, onlyPod(t, pods).Name)
	if why != "its notice ran out" || at.Before(n.Deadline.Add(-time.Millisecond)) {
		t.Errorf("evicted at %s (%s), want when the first leader's notice ran out at %s", at, why, n.Deadline)
	}
	waitPods(t, ns, "urgent", 1, 2*time.Minute)
	waitJob(t, ns, "low", time.Minute, "low preempted once", preempted(ns+"/urgent", highPriority))
	if err := restarted(); err != nil {
		t.Fatalf("restarting %s: %v", leader, err)
	}
}
