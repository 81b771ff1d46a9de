package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// TestCrashLoopingRankBacksOff: the Workers of a job crash a second after
// every start (KWOK's lockstep-pod-failed stage, exit code 1), which their
// restart policy (OnFailure) retries. With the default restart backoff
// each gang restart waits 10 s, then 20 s, then 40 s before the pods are
// created again, the status says when, and backoffLimit ends the job.
func TestCrashLoopingRankBacksOff(t *testing.T) {
	t.Parallel()
	ns := cluster.NewNamespace(t)
	creations := watchPodUIDs(t, ns)
	job := pytorchJob(ns, "crashloop", 2)
	w := job.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
	w.Template.Annotations = map[string]string{
		lockstep.AnnotationSimulatedRuntime:  "1s",
		lockstep.AnnotationSimulatedExitCode: "1",
	}
	job.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker] = w
	const limit = 3
	job.Spec.RunPolicy.BackoffLimit = ptr.To[int32](limit)
	createJob(t, job)

	// Every restart as the status recorded it, read at each poll: each
	// restart stays in the status for at least its backoff (10 s or more).
	restarts := map[int32]v1alpha1.RestartBackoffStatus{}
	var messages []string
	failed := waitJob(t, ns, job.Name, 4*time.Minute, "job Failed with BackoffLimitExceeded", func(j *v1alpha1.TrainingJob) bool {
		if b := j.Status.RestartBackoff; b != nil && b.NextAttemptTime != nil {
			if _, ok := restarts[j.Status.RestartCount]; !ok {
				restarts[j.Status.RestartCount] = *b.DeepCopy()
				if c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobRestarting)); c != nil {
					messages = append(messages, c.Message)
				}
			}
		}
		return hasCondition(v1alpha1.JobFailed, controller.ReasonBackoffLimitExceeded)(j)
	})
	if failed.Status.RestartCount != limit {
		t.Errorf("restartCount = %d, want %d (backoffLimit)", failed.Status.RestartCount, limit)
	}
	first, _ := creations.earliest(0)
	var at []time.Duration
	for n := int32(1); n <= limit; n++ {
		b, ok := restarts[n]
		if !ok {
			t.Errorf("restart %d never showed a next attempt in the status", n)
			continue
		}
		want := time.Duration(10<<(n-1)) * time.Second
		if got := b.NextAttemptTime.Sub(b.LastRestartTime.Time); got != want || b.ConsecutiveRestarts != n {
			t.Errorf("restart %d: backoff %s after %d in a row, want %s after %d", n, got, b.ConsecutiveRestarts, want, n)
		}
		created, ok := creations.earliest(n)
		if !ok {
			t.Errorf("no pod of incarnation %d was created", n)
			continue
		}
		// Timestamps have one-second resolution.
		if created.Before(b.NextAttemptTime.Add(-time.Second)) {
			t.Errorf("incarnation %d created at %s, before its next attempt %s", n, created.Format(time.RFC3339), b.NextAttemptTime.Format(time.RFC3339))
		}
		at = append(at, b.LastRestartTime.Sub(first).Round(time.Second))
	}
	for _, m := range messages {
		if !strings.Contains(m, "Worker") || !strings.Contains(m, "created again at") {
			t.Errorf("Restarting message %q should say which member failed and when the pods come back", m)
		}
	}
	t.Logf("restarts recorded at %v after the first pods were created; job failed %s after them",
		at, failed.Status.CompletionTime.Sub(first).Round(time.Second))
}

// TestQuotaBlockedMemberIsNoLoss: a job of three pods with minAvailable 2
// in a namespace whose ResourceQuota admits two pods. The gang starts with
// two; the third, refused on every create, was never a member that was
// lost: the job runs, says why the pod is missing, and never restarts.
// Once the quota allows it, the third pod joins.
func TestQuotaBlockedMemberIsNoLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "pods", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}},
	}
	if err := cluster.Client.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// The quota admission plugin refuses pods only once the quota
	// controller has published its usage.
	err := localcluster.Poll(ctx, 100*time.Millisecond, time.Minute, "quota usage published", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(quota), quota)
		return err == nil && quota.Status.Used != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	job := pytorchJob(ns, "quota", 2)
	job.Spec.RunPolicy.SchedulingPolicy = &v1alpha1.SchedulingPolicy{MinAvailable: ptr.To[int32](2)}
	createJob(t, job)

	running := waitJob(t, ns, job.Name, time.Minute, "Running with two pods and Created=False FailedCreatePod", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobCreated))
		return hasCondition(v1alpha1.JobRunning, "")(j) && c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonFailedCreatePod
	})
	if c := meta.FindStatusCondition(running.Status.Conditions, string(v1alpha1.JobCreated)); !strings.Contains(c.Message, "quota") {
		t.Errorf("Created condition %q should carry the API server's quota message", c.Message)
	}
	before := waitPods(t, ns, job.Name, 2, time.Minute)
	// The controller keeps trying: wait for several refused creates, each
	// a pass in which the missing member could have been taken for lost.
	err = localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "three refused creates", func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := cluster.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		n := int32(0)
		for _, e := range events.Items {
			if e.InvolvedObject.Name == job.Name && e.Reason == controller.ReasonFailedCreatePod {
				n += max(e.Count, 1)
			}
		}
		return n >= 3, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The quota controller writes the quota's status as pods come and go.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
			return err
		}
		quota.Spec.Hard[corev1.ResourcePods] = resource.MustParse("3")
		return cluster.Client.Update(ctx, quota)
	})
	if err != nil {
		t.Fatal(err)
	}
	after := waitPods(t, ns, job.Name, 3, 2*time.Minute)
	for name, p := range before {
		if after[name].UID != p.UID {
			t.Errorf("pod %s was recreated: the gang restarted", name)
		}
	}
	final := waitJob(t, ns, job.Name, 30*time.Second, "Created=True", hasCondition(v1alpha1.JobCreated, ""))
	if final.Status.RestartCount != 0 || hasCondition(v1alpha1.JobRestarting, "")(final) {
		t.Errorf("restartCount %d (Restarting %v), want 0: a member that was never created was not lost",
			final.Status.RestartCount, hasCondition(v1alpha1.JobRestarting, "")(final))
	}
}

// TestResumeWithinGracePeriodIsNoRestart: a job whose pods take 15 s to
// exit after SIGTERM (KWOK's lockstep-pod-shutdown stage, as a process
// that checkpoints would) is suspended and resumed while its pods still
// terminate. The old pods are waited for and the job runs again with no
// restart counted, even with backoffLimit 0.
func TestResumeWithinGracePeriodIsNoRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "resume", 2)
	for role, r := range job.Spec.ReplicaSpecs {
		r.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		r.Template.Annotations = map[string]string{lockstep.AnnotationSimulatedShutdown: "15s"}
		job.Spec.ReplicaSpecs[role] = r
	}
	job.Spec.RunPolicy.BackoffLimit = ptr.To[int32](0)
	createJob(t, job)
	before := waitPods(t, ns, job.Name, 3, time.Minute)

	setSuspend(t, job, true)
	waitJob(t, ns, job.Name, 20*time.Second, "job Suspended", hasCondition(v1alpha1.JobSuspended, ""))
	terminating := func(ctx context.Context) (int, error) {
		list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				n++
			}
		}
		return n, nil
	}
	err := localcluster.Poll(ctx, 100*time.Millisecond, 10*time.Second, "old pods terminating", func(ctx context.Context) (bool, error) {
		n, err := terminating(ctx)
		return err == nil && n == 3, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	setSuspend(t, job, false)
	if n, err := terminating(ctx); err != nil || n == 0 {
		t.Fatalf("resumed with %d pods terminating (%v): the scenario needs them still there", n, err)
	}
	after := waitPods(t, ns, job.Name, 3, time.Minute)
	for name, p := range after {
		if before[name].UID == p.UID {
			t.Errorf("pod %s survived the suspension", name)
		}
	}
	final := waitJob(t, ns, job.Name, 30*time.Second, "job Running, not Suspended", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && !hasCondition(v1alpha1.JobSuspended, "")(j)
	})
	if final.Status.RestartCount != 0 || hasCondition(v1alpha1.JobFailed, "")(final) {
		t.Errorf("restartCount %d, Failed %v after a resume: a suspension is no failure", final.Status.RestartCount, hasCondition(v1alpha1.JobFailed, "")(final))
	}
	if final.Status.Suspensions != 1 {
		t.Errorf("status.suspensions = %d, want 1", final.Status.Suspensions)
	}
	for name, p := range after {
		if p.Labels[lockstep.LabelSuspensions] != "1" {
			t.Errorf("pod %s labelled %s=%q, want 1", name, lockstep.LabelSuspensions, p.Labels[lockstep.LabelSuspensions])
		}
	}
}

func setSuspend(t *testing.T, job *v1alpha1.TrainingJob, v bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"runPolicy":{"suspend":%t}}}`, v)
	if err := cluster.Client.Patch(context.Background(), job, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// TestNonElasticScaleRefused: scaling a running job that is not elastic is
// refused with the field and what to do instead (its pods were started with
// the old WORLD_SIZE); suspended, it scales, and resumes whole at the new
// size without a restart. A job of no pods is refused outright.
func TestNonElasticScaleRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "fixed", 1)
	createJob(t, job)
	before := waitPods(t, ns, job.Name, 2, time.Minute)

	err := scaleJob(ctx, ns, job.Name, 3)
	if err == nil || !strings.Contains(err.Error(), "spec.replicaSpecs") || !strings.Contains(err.Error(), "replicas can change only while the job is suspended") {
		t.Fatalf("scaling a running non-elastic job: got %v, want a refusal naming spec.replicaSpecs", err)
	}
	now := waitPods(t, ns, job.Name, 2, time.Minute)
	for name, p := range before {
		if now[name].UID != p.UID {
			t.Errorf("pod %s was recreated by a refused scale", name)
		}
	}

	setSuspend(t, job, true)
	waitJob(t, ns, job.Name, 20*time.Second, "job Suspended", hasCondition(v1alpha1.JobSuspended, ""))
	if err := scaleJob(ctx, ns, job.Name, 3); err != nil {
		t.Fatalf("scaling a suspended job: %v", err)
	}
	setSuspend(t, job, false)
	after := waitPods(t, ns, job.Name, 4, time.Minute)
	for name, p := range after {
		if got := envOf(p)["WORLD_SIZE"]; got != "4" {
			t.Errorf("pod %s WORLD_SIZE %q, want 4", name, got)
		}
	}
	final := waitJob(t, ns, job.Name, 30*time.Second, "job Running", hasCondition(v1alpha1.JobRunning, ""))
	if final.Status.RestartCount != 0 {
		t.Errorf("restartCount %d after a resize while suspended, want 0", final.Status.RestartCount)
	}

	empty := pytorchJob(ns, "empty", 0)
	delete(empty.Spec.ReplicaSpecs, v1alpha1.ReplicaMaster)
	empty.Spec.Framework = v1alpha1.FrameworkJAX
	err = cluster.Client.Create(ctx, empty)
	if err == nil || !strings.Contains(err.Error(), "spec.replicaSpecs") || !strings.Contains(err.Error(), "the job has no pods") {
		t.Errorf("a job of no pods: got %v, want a refusal naming spec.replicaSpecs", err)
	}
}
