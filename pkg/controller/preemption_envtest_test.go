package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// preemptPod does what the scheduler does to a victim: the DisruptionTarget
// condition first, then a delete with the pod's own grace period.
func preemptPod(t *testing.T, p corev1.Pod, msg string) {
	t.Helper()
	ctx := context.Background()
	gone := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var now corev1.Pod
		err := harness.api.Get(ctx, client.ObjectKeyFromObject(&p), &now)
		if apierrors.IsNotFound(err) || err == nil && now.UID != p.UID {
			// Deleted by the controller's restart meanwhile.
			gone = true
			return nil
		}
		if err != nil {
			return err
		}
		preemptedBy(&now, msg)
		err = harness.api.Status().Update(ctx, &now)
		if apierrors.IsNotFound(err) {
			// Deleted between the read and the write.
			gone = true
			return nil
		}
		return err
	})
	if gone {
		return
	}
	if err != nil {
		t.Fatalf("marking pod %s preempted: %v", p.Name, err)
	}
	if err := harness.api.Delete(ctx, &p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
		t.Fatalf("deleting preempted pod %s: %v", p.Name, err)
	}
}

// waitForEvent waits for an event of the job with reason; returns its
// message.
func waitForEvent(t *testing.T, job *v1alpha1.TrainingJob, reason string) string {
	t.Helper()
	var msg string
	eventually(t, fmt.Sprintf("event %s of %s", reason, job.Name), func(ctx context.Context) (bool, string, error) {
		var list corev1.EventList
		if err := harness.api.List(ctx, &list, client.InNamespace(job.Namespace)); err != nil {
			return false, "", err
		}
		var seen []string
		for _, e := range list.Items {
			seen = append(seen, e.Reason)
			if e.InvolvedObject.Name == job.Name && e.Reason == reason {
				msg = e.Message
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("events %v", seen), nil
	})
	return msg
}

func preemptedGang(t *testing.T, name string, grace int64) (*v1alpha1.TrainingJob, []corev1.Pod, []string) {
	t.Helper()
	return runningGang(t, name, 0, grace)
}

// runningGang creates a PyTorch job of one Master and three Workers with
// backoffLimit and its pods' termination grace period, binds its pods and
// runs them, and returns the job, the pods and their names.
func runningGang(t *testing.T, name string, backoffLimit int32, grace int64) (*v1alpha1.TrainingJob, []corev1.Pod, []string) {
	t.Helper()
	ns := envtestNamespace(t)
	job := createJob(t, pyTorchJob(ns, name, withBackoffLimit(backoffLimit), func(j *v1alpha1.TrainingJob) {
		for role, s := range j.Spec.ReplicaSpecs {
			s.Template.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
			j.Spec.ReplicaSpecs[role] = s
		}
	}))
	names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
	pods := waitForPods(t, job, names, nil)
	for i := range pods {
		bindPod(t, &pods[i], fmt.Sprintf("node-%d", i))
	}
	runGang(t, job, pods)
	return job, pods, names
}

// checkPreempted checks the job after one preemption by releaseRun.
func checkPreempted(t *testing.T, j *v1alpha1.TrainingJob, pod string) {
	t.Helper()
	if j.Status.RestartCount != 1 || j.Status.Preemptions != 1 || isFinished(&j.Status) {
		t.Errorf("after one preemption: %s preemptions %d; want restartCount 1, preemptions 1, running on (backoffLimit 0)",
			describeJob(j), j.Status.Preemptions)
	}
	if b := j.Status.RestartBackoff; b != nil {
		t.Errorf("restartBackoff %+v after a preemption, want none", b)
	}
	c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionPreempted)
	want := "pod " + pod + " was preempted by team-a/release (priority 1000) in spine=s1/leaf=l2"
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonPreemptedByScheduler || c.Message != want {
		t.Errorf("Preempted condition %+v, want True/%s %q", c, v1alpha1.ReasonPreemptedByScheduler, want)
	}
}

// A running gang the scheduler preempts restarts whole: counted once as a
// preemption however many of its pods the scheduler goes on marking and
// deleting, not against backoffLimit 0, without backoff; the controller
// deletes the survivors with their own grace period, so trainers checkpoint
// on SIGTERM; the job says who preempted it until it runs whole again.
func TestEnvtestPreemptedGangRestartsWhole(t *testing.T) {
	ctx := context.Background()
	job, pods, names := preemptedGang(t, "victim", 30)
	before := podUIDs(pods)
	// The scheduler's first victim pod; the controller restarts the gang.
	preemptPod(t, pods[1], releaseRun.Message())
	j := waitForJob(t, job, "the preemption", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount >= 1 })
	checkPreempted(t, j, pods[1].Name)
	if c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobRestarting)); c == nil || c.Reason != v1alpha1.ReasonPreemptedByScheduler {
		t.Errorf("Restarting condition %+v, want reason %s", c, v1alpha1.ReasonPreemptedByScheduler)
	}
	if msg := waitForEvent(t, job, ReasonPreempted); !strings.Contains(msg, "team-a/release (priority 1000)") {
		t.Errorf("Preempted event %q, want it to name the preemptor and its priority", msg)
	}
	// The survivors terminate with the grace period their template asks.
	eventually(t, "the survivors terminating", func(ctx context.Context) (bool, string, error) {
		var saw []string
		done := true
		for _, p := range pods {
			var now corev1.Pod
			if err := harness.api.Get(ctx, client.ObjectKeyFromObject(&p), &now); err != nil {
				return false, "", err
			}
			g := "-"
			if now.DeletionGracePeriodSeconds != nil {
				g = fmt.Sprint(*now.DeletionGracePeriodSeconds)
			}
			saw = append(saw, now.Name+":"+g)
			done = done && now.DeletionGracePeriodSeconds != nil
			if now.DeletionGracePeriodSeconds != nil && *now.DeletionGracePeriodSeconds != 30 {
				return false, "", fmt.Errorf("pod %s deleted with a grace period of %d s, want its own 30 s", now.Name, *now.DeletionGracePeriodSeconds)
			}
		}
		return done, fmt.Sprint(saw), nil
	})
	// The scheduler goes on with the rest of the gang: nothing more counts.
	for _, p := range pods {
		preemptPod(t, p, releaseRun.Message())
	}
	// The kubelets confirm; the gang comes back at once.
	for _, p := range pods {
		if err := harness.api.Delete(ctx, &p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	pods = waitForPods(t, job, names, before, names...)
	for _, p := range pods {
		if p.Labels[lockstep.LabelIncarnation] != "1" {
			t.Errorf("pod %s of incarnation %q, want 1", p.Name, p.Labels[lockstep.LabelIncarnation])
		}
	}
	for i := range pods {
		bindPod(t, &pods[i], fmt.Sprintf("node-%d", i))
	}
	runGang(t, job, pods)
	j = waitForJob(t, job, "the end of the preemption", func(j *v1alpha1.TrainingJob) bool {
		return meta.IsStatusConditionFalse(j.Status.Conditions, v1alpha1.ConditionPreempted)
	})
	if j.Status.RestartCount != 1 || j.Status.Preemptions != 1 {
		t.Errorf("after the gang ran again: %s preemptions %d; want 1 and 1", describeJob(j), j.Status.Preemptions)
	}
	if c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionPreempted); c.Reason != ReasonGangRunning || !strings.Contains(c.Message, "team-a/release") {
		t.Errorf("Preempted condition %+v, want False/%s keeping who preempted the gang", c, ReasonGangRunning)
	}
}

// Pods without a grace period vanish the moment the scheduler deletes
// them: the controller sees them terminating for an instant at most, and
// otherwise learns of the preemption from the pod events (which of the two
// depends on timing; TestDecidePreemption and TestPodEventsNoteBeforeEnqueue
// cover the events alone). Upstream's DefaultPreemption names no preemptor.
func TestEnvtestPreemptedGangVanishes(t *testing.T) {
	job, pods, names := preemptedGang(t, "vanish", 0)
	before := podUIDs(pods)
	for _, p := range pods {
		preemptPod(t, p, upstreamMessage)
	}
	pods = waitForPods(t, job, names, before, names...)
	j := waitForJob(t, job, "the preemption", func(j *v1alpha1.TrainingJob) bool { return j.Status.Preemptions >= 1 })
	if j.Status.RestartCount != 1 || j.Status.Preemptions != 1 || isFinished(&j.Status) {
		t.Errorf("after one preemption: %s preemptions %d; want restartCount 1, preemptions 1, running on (backoffLimit 0)",
			describeJob(j), j.Status.Preemptions)
	}
	c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionPreempted)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.HasSuffix(c.Message, "was preempted by a higher-priority pod") {
		t.Errorf("Preempted condition %+v, want True naming a higher-priority pod", c)
	}
	for _, p := range pods {
		if p.Labels[lockstep.LabelIncarnation] != "1" {
			t.Errorf("pod %s of incarnation %q, want 1", p.Name, p.Labels[lockstep.LabelIncarnation])
		}
	}
}

// A job naming a PriorityClass that does not exist gets no pods and says
// why; creating the class starts it, woken by the class's event.
func TestEnvtestMissingPriorityClass(t *testing.T) {
	ctx := context.Background()
	ns := envtestNamespace(t)
	class := ns + "-high"
	job := createJob(t, pyTorchJob(ns, "prio", func(j *v1alpha1.TrainingJob) {
		runPolicy(j).SchedulingPolicy = &v1alpha1.SchedulingPolicy{PriorityClass: class}
	}))
	j := waitForJob(t, job, "the missing class", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionScheduled)
		return c != nil && c.Reason == ReasonPriorityClassNotFound
	})
	c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionScheduled)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "spec.runPolicy.schedulingPolicy.priorityClass") || !strings.Contains(c.Message, class) {
		t.Errorf("Scheduled condition %+v, want False naming the field and %s", c, class)
	}
	if msg := waitForEvent(t, job, ReasonPriorityClassNotFound); !strings.Contains(msg, class) {
		t.Errorf("event %q, want it to name %s", msg, class)
	}
	if pods, err := jobPods(ctx, job); err != nil || len(pods) != 0 {
		t.Fatalf("pods %v (%v) of a job whose PriorityClass is missing, want none", podNames(pods), err)
	}

	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Value: 1000}
	if err := harness.api.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = harness.api.Delete(context.Background(), pc) })
	names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
	pods := waitForPods(t, job, names, nil)
	if pods[0].Spec.PriorityClassName != class {
		t.Errorf("pod %s has priorityClassName %q, want %s", pods[0].Name, pods[0].Spec.PriorityClassName, class)
	}
	waitForJob(t, job, "the condition gone", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionScheduled)
		return c == nil || c.Reason != ReasonPriorityClassNotFound
	})
}
