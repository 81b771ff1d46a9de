package controller

import (
	"context"
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// desiredAutoscaler is the HorizontalPodAutoscaler of an elastic job with
// metrics, or nil: it scales the Worker replicas through the job's /scale
// subresource within the elastic bounds, as Kubeflow's training-operator
// does for a PyTorchJob with elasticPolicy.metrics. The controller keeps
// the HPA; the HPA writes only the job's Worker replicas, and the CRD's
// rules keep those within minReplicas..maxReplicas.
func desiredAutoscaler(job *v1alpha1.TrainingJob) *autoscalingv2.HorizontalPodAutoscaler {
	e := job.Spec.ElasticPolicy
	if e == nil || len(e.Metrics) == 0 || e.MinReplicas == nil || e.MaxReplicas == nil {
		return nil
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{
				APIVersion: v1alpha1.GroupVersion.String(),
				Kind:       "TrainingJob",
				Name:       job.Name,
			},
			MinReplicas: e.MinReplicas,
			MaxReplicas: *e.MaxReplicas,
			Metrics:     e.Metrics,
		},
	}
}

// ensureAutoscaler creates or updates the job's HorizontalPodAutoscaler,
// and deletes the one it made when the job no longer asks for one.
func (r *TrainingJobReconciler) ensureAutoscaler(ctx context.Context, job *v1alpha1.TrainingJob) error {
	if want := desiredAutoscaler(job); want != nil {
		return r.ensureObject(ctx, job, want, false)
	}
	return r.deleteAutoscaler(ctx, job)
}

// deleteAutoscaler deletes the job's HorizontalPodAutoscaler if the job
// controls one: a finished job is not scaled, and one without metrics has
// none.
func (r *TrainingJobReconciler) deleteAutoscaler(ctx context.Context, job *v1alpha1.TrainingJob) error {
	var have autoscalingv2.HorizontalPodAutoscaler
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: job.Name}, &have)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("getting HorizontalPodAutoscaler %s/%s: %w", job.Namespace, job.Name, err)
	case !metav1.IsControlledBy(&have, job):
		return nil
	}
	if err := r.Client.Delete(ctx, &have, client.Preconditions{UID: &have.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting HorizontalPodAutoscaler %s: %w", klog.KObj(&have), err)
	}
	return nil
}

// roleSelector is the label selector of a role's pods in string form, the
// /scale subresource's selector (ReplicaStatus.Selector).
func roleSelector(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType) string {
	return labels.SelectorFromSet(labels.Set{
		lockstep.LabelJobName:     job.Name,
		lockstep.LabelReplicaType: string(role),
	}).String()
}
