package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// A job naming a PriorityClass that does not exist would have every pod
// refused by the Priority admission plugin, so the controller creates none
// and says why on the job, rather than fail the creates one by one or run
// the job at a default priority. PriorityClasses are cluster-scoped and
// few: the manager caches them, and a class's creation wakes the jobs
// that name it (jobsOfPriorityClass), so a held job starts without a resync.

// ReasonPriorityClassNotFound is the reason of the Scheduled condition, and
// of the Warning event, of a job held for a missing PriorityClass.
const ReasonPriorityClassNotFound = "PriorityClassNotFound"

// jobPriorityClassField indexes the cached TrainingJobs by the
// PriorityClass they name.
const jobPriorityClassField = "spec.runPolicy.schedulingPolicy.priorityClass"

// priorityClassOf is the PriorityClass the job names, or "".
func priorityClassOf(job *v1alpha1.TrainingJob) string {
	if rp := job.Spec.RunPolicy; rp != nil && rp.SchedulingPolicy != nil {
		return rp.SchedulingPolicy.PriorityClass
	}
	return ""
}

// ensurePriorityClass holds a job whose PriorityClass does not exist:
// Scheduled=False with reason PriorityClassNotFound and a Warning event
// (once per message). Once the class exists the condition is removed, for
// the scheduler's word on the gang to take its place. Called before the
// job's pods are created; a class deleted under running pods is left to
// the apiserver, which refuses the pods of the next restart.
func (r *TrainingJobReconciler) ensurePriorityClass(ctx context.Context, job *v1alpha1.TrainingJob) (held bool, err error) {
	old := meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionScheduled)
	name := priorityClassOf(job)
	if name != "" {
		err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &schedulingv1.PriorityClass{})
		switch {
		case apierrors.IsNotFound(err):
			msg := fmt.Sprintf("%s: PriorityClass %q does not exist; no pods are created until it does: create it, or name an existing one",
				jobPriorityClassField, name)
			if old == nil || old.Status != metav1.ConditionFalse || old.Reason != ReasonPriorityClassNotFound || old.Message != msg {
				r.Recorder.Event(job, corev1.EventTypeWarning, ReasonPriorityClassNotFound, msg)
				ctrl.LoggerFrom(ctx).V(2).Info("Holding a job for its PriorityClass", "priorityClass", name)
			}
			meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionScheduled, Status: metav1.ConditionFalse,
				Reason: ReasonPriorityClassNotFound, Message: msg, ObservedGeneration: job.Generation})
			return true, nil
		case err != nil:
			return false, fmt.Errorf("getting PriorityClass %s of TrainingJob %s/%s: %w", name, job.Namespace, job.Name, err)
		}
	}
	if old != nil && old.Reason == ReasonPriorityClassNotFound {
		meta.RemoveStatusCondition(&job.Status.Conditions, v1alpha1.ConditionScheduled)
	}
	return false, nil
}

// jobsOfPriorityClass maps a PriorityClass to the jobs naming it, through
// the cache's index.
func (r *TrainingJobReconciler) jobsOfPriorityClass(ctx context.Context, obj client.Object) []reconcile.Request {
	var jobs v1alpha1.TrainingJobList
	if err := r.Client.List(ctx, &jobs, client.MatchingFields{jobPriorityClassField: obj.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the TrainingJobs of a PriorityClass", "priorityClass", obj.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, len(jobs.Items))
	for i, j := range jobs.Items {
		reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: j.Namespace, Name: j.Name}}
	}
	return reqs
}

// watchPriorityClasses indexes jobs by PriorityClass and wakes the jobs
// naming a class that changed: created, most of all.
func (r *TrainingJobReconciler) watchPriorityClasses(mgr ctrl.Manager, b *ctrl.Builder) (*ctrl.Builder, error) {
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.TrainingJob{}, jobPriorityClassField, func(o client.Object) []string {
		if j, ok := o.(*v1alpha1.TrainingJob); ok && priorityClassOf(j) != "" {
			return []string{priorityClassOf(j)}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("indexing TrainingJobs by PriorityClass: %w", err)
	}
	return b.Watches(&schedulingv1.PriorityClass{}, handler.EnqueueRequestsFromMapFunc(r.jobsOfPriorityClass)), nil
}
