package controller

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// desiredService is the job's headless Service. It selects the pods by the
// job-name label alone: a Service only selects pods of its own namespace,
// where the job's name is unique, and the reconciler sets the label on every
// pod it creates, overriding the template's.
func desiredService(job *v1alpha1.TrainingJob) *corev1.Service {
	return framework.NewHeadlessService(job, map[string]string{lockstep.LabelJobName: job.Name})
}

// ensureService creates the job's headless Service or brings the fields the
// controller owns up to date: the selector and publishNotReadyAddresses. A
// Service made by an older controller has no selector, hence no endpoints
// and no DNS names for the pods. The API server defaults the rest of the
// spec, so only those fields are compared and written; clusterIP None
// cannot change, and every controller version has set it.
func (r *TrainingJobReconciler) ensureService(ctx context.Context, job *v1alpha1.TrainingJob) error {
	want := desiredService(job)
	var have corev1.Service
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		return r.ensureObject(ctx, job, want, true)
	case err != nil:
		return fmt.Errorf("getting Service %s: %w", klog.KObj(want), err)
	}
	if maps.Equal(have.Spec.Selector, want.Spec.Selector) && have.Spec.PublishNotReadyAddresses == want.Spec.PublishNotReadyAddresses {
		return nil
	}
	if !metav1.IsControlledBy(&have, job) {
		return fmt.Errorf("headless Service %s exists and is not the job's", klog.KObj(&have))
	}
	have.Spec.Selector = want.Spec.Selector
	have.Spec.PublishNotReadyAddresses = want.Spec.PublishNotReadyAddresses
	if err := r.Client.Update(ctx, &have); err != nil {
		return fmt.Errorf("updating Service %s: %w", klog.KObj(&have), err)
	}
	r.Recorder.Eventf(job, corev1.EventTypeNormal, "UpdatedService", "Updated Service %s to select the job's pods", have.Name)
	return nil
}
