package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// ensureAuxObjects applies the adapter's auxiliary objects.
func (r *TrainingJobReconciler) ensureAuxObjects(ctx context.Context, job *v1alpha1.TrainingJob, a framework.Adapter) error {
	aux, err := a.AuxObjects(job)
	if err != nil {
		return fmt.Errorf("auxiliary objects of %s: %w", klog.KObj(job), err)
	}
	for _, o := range aux {
		if err := r.ensureObject(ctx, job, o.Object, o.CreateOnly); err != nil {
			return err
		}
	}
	return nil
}

// ensureObject creates obj, owned by the job and labelled with it, or
// updates it when its content hash changed, unless it is create-only.
//
// A create-only object (the MPI SSH key Secret) is never read: it is
// created, and an existing one is left as it is, so the controller needs
// no read access to its kind (RBAC grants it only create on Secrets). Which
// were created is remembered per job, so that not every reconcile tries.
func (r *TrainingJobReconciler) ensureObject(ctx context.Context, job *v1alpha1.TrainingJob, obj client.Object, createOnly bool) error {
	kind := fmt.Sprintf("%T", obj)
	hash, err := contentHash(obj)
	if err != nil {
		return fmt.Errorf("hashing %s %s: %w", kind, klog.KObj(obj), err)
	}
	create := func() error {
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[lockstep.LabelJobName] = job.Name
		obj.SetLabels(labels)
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[lockstep.AnnotationSpecHash] = hash
		obj.SetAnnotations(ann)
		if err := controllerutil.SetControllerReference(job, obj, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", kind, klog.KObj(obj), err)
		}
		return nil
	}
	if createOnly {
		key := createdKey{job: job.UID, kind: kind, name: obj.GetName()}
		if _, done := r.created.Load(key); done {
			return nil
		}
		if err := create(); err != nil {
			return err
		}
		r.created.Store(key, struct{}{})
		return nil
	}
	existing, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%s is not a client.Object", kind)
	}
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	switch {
	case apierrors.IsNotFound(err):
		return create()
	case err != nil:
		return fmt.Errorf("getting %s %s: %w", kind, klog.KObj(obj), err)
	case existing.GetAnnotations()[lockstep.AnnotationSpecHash] == hash:
		return nil
	}
	if !metav1.IsControlledBy(existing, job) {
		return fmt.Errorf("%s %s exists and is not the job's", kind, klog.KObj(obj))
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	obj.SetOwnerReferences(existing.GetOwnerReferences())
	labels := existing.GetLabels()
	obj.SetLabels(labels)
	ann := existing.GetAnnotations()
	ann[lockstep.AnnotationSpecHash] = hash
	obj.SetAnnotations(ann)
	if err := r.Client.Update(ctx, obj); err != nil {
		return fmt.Errorf("updating %s %s: %w", kind, klog.KObj(obj), err)
	}
	return nil
}

// createdKey names a create-only object made for a job.
type createdKey struct {
	job        types.UID
	kind, name string
}

// forgetCreated drops what was remembered of a job's create-only objects.
func (r *TrainingJobReconciler) forgetCreated(uid types.UID) {
	r.created.Range(func(k, _ any) bool {
		if k.(createdKey).job == uid {
			r.created.Delete(k)
		}
		return true
	})
}

// contentHash hashes an object as the adapter built it, metadata aside.
func contentHash(obj client.Object) (string, error) {
	c, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return "", errors.New("not a client.Object")
	}
	c.SetName("")
	c.SetNamespace("")
	c.SetLabels(nil)
	c.SetAnnotations(nil)
	data, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}
