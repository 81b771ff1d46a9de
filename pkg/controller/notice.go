package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// ReasonNoticeGiven is the reason of the event a suspension with notice
// records on the job.
const ReasonNoticeGiven = "PreemptionNoticeGiven"

// suspendNotice gives live, the pods of a job being suspended (by its spec
// or by Kueue's eviction), the notice its runPolicy.preemptionNoticeSeconds
// asks for, as the scheduler gives the victims of a preemption
// (lockstep.Notice): every pod is annotated with the same notice, and the
// pods are deleted once a rank reports a checkpoint that answers it, one
// of them finishes, or the notice runs out. It returns how long is left
// to wait, 0 when the pods are due for deletion now. The notice lives on
// the pods, so a controller that restarts keeps its deadline.
func (r *TrainingJobReconciler) suspendNotice(ctx context.Context, job *v1alpha1.TrainingJob, live []*corev1.Pod) (time.Duration, error) {
	d := job.Spec.RunPolicy.PreemptionNoticeSeconds
	if d == nil || *d <= 0 {
		return 0, nil
	}
	now := r.Clock.Now()
	n := lockstep.Notice{By: lockstep.NoticeBySuspend, Time: now, Deadline: now.Add(min(time.Duration(*d)*time.Second, lockstep.MaxPreemptionNotice))}
	// A notice from before this suspension (one the job was resumed from
	// in time) is not this one's. Condition times are whole seconds.
	var since time.Time
	if c := meta.FindStatusCondition(job.Status.Conditions, string(v1alpha1.JobSuspended)); c != nil {
		since = c.LastTransitionTime.Truncate(time.Second)
	}
	var unmarked []*corev1.Pod
	given := false
	for _, p := range live {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			// One went: the job stops anyway.
			return 0, nil
		}
		if on, ok := lockstep.NoticeOn(p.Annotations); ok && on.By == lockstep.NoticeBySuspend && !on.Time.Truncate(time.Second).Before(since) {
			if !given || on.Time.Before(n.Time) {
				n = on
			}
			given = true
			continue
		}
		unmarked = append(unmarked, p)
	}
	for _, p := range live {
		if given && n.Answered(p.Annotations, now) {
			// The answer is in status.checkpoint (folded before any
			// decision) before a pod that carries it goes: a controller
			// that dies between the deletion and the status write would
			// otherwise lose the checkpoint the notice was for.
			return 0, r.recordAnswer(ctx, job)
		}
	}
	if left := n.Deadline.Sub(now); !given || left > 0 {
		if !given {
			r.Recorder.Eventf(job, corev1.EventTypeNormal, ReasonNoticeGiven, "Gave the pods %ds notice before deleting them (runPolicy.preemptionNoticeSeconds): they go once a rank reports a checkpoint, or at %s", *d, n.Deadline.UTC().Format(time.RFC3339))
		}
		if _, _, err := r.forEach(unmarked, func(p *corev1.Pod) error { return r.annotateNotice(ctx, p, n) }); err != nil {
			return 0, fmt.Errorf("giving the pods of %s notice: %w", client.ObjectKeyFromObject(job), err)
		}
		return max(left, time.Second), nil
	}
	return 0, nil
}

// recordAnswer writes the job's status, which holds the checkpoint that
// answered its notice.
func (r *TrainingJobReconciler) recordAnswer(ctx context.Context, job *v1alpha1.TrainingJob) error {
	if err := r.Client.Status().Update(ctx, job); err != nil {
		if apierrors.IsConflict(err) {
			return errStaleJob
		}
		return fmt.Errorf("recording the checkpoint that answered the notice of %s: %w", client.ObjectKeyFromObject(job), err)
	}
	return nil
}

// clearSuspendNotices takes the notice of a suspension off the pods of a
// job resumed before its pods were deleted: they run on, and a trainer
// that watches the notice must not take it for a new one.
func (r *TrainingJobReconciler) clearSuspendNotices(ctx context.Context, pods []*corev1.Pod) error {
	var noticed []*corev1.Pod
	for _, p := range pods {
		if on, ok := lockstep.NoticeOn(p.Annotations); ok && on.By == lockstep.NoticeBySuspend && p.DeletionTimestamp == nil {
			noticed = append(noticed, p)
		}
	}
	_, _, err := r.forEach(noticed, func(p *corev1.Pod) error {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid":         p.UID,
			"annotations": map[string]any{lockstep.AnnotationPreemptionNotice: nil},
		}})
		if err != nil {
			return err
		}
		return client.IgnoreNotFound(r.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)))
	})
	if err != nil {
		return fmt.Errorf("clearing the suspension's notice: %w", err)
	}
	return nil
}

// annotateNotice puts n on pod, fenced by its UID: the patch carries it,
// and the apiserver refuses to change it.
func (r *TrainingJobReconciler) annotateNotice(ctx context.Context, pod *corev1.Pod, n lockstep.Notice) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{lockstep.AnnotationPreemptionNotice: n.Format()},
	}})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)))
}
