package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// GPU claims. With DRA the scheduler's DynamicResources plugin, not
// TopologyPlacement, picks a node's devices, and it takes the first free
// ones in the driver's order: a 4-GPU claim on a DGX-1 whose GPU 0 is
// taken gets 1-4, two NVLink quads' worth of PCIe. So that the allocator
// picks an NVLink-connected set, a job's pods do not claim from the user's
// ResourceClaimTemplate but from a copy the job owns whose GPU requests ask
// for one PCIe root first and any GPUs after (gpuclaim.OneRootFirst); the
// scheduler plans with the same prediction. The copy is made before the
// pods, once (a template's spec is immutable), made again if it is deleted,
// and replaced when the user's template is (a new UID under the name).
// Templates with nothing to rewrite are claimed from as written, and so is
// every template of a job with spec.topology.gpuClaims: AsWritten. A
// template the pods name that does not exist holds the job's missing pods
// (GPUClaimTemplatesReady False): they would wait unscheduled for a claim
// that cannot be made.
//
// RBAC (deploy/default/controller.yaml): ResourceClaimTemplates get, list,
// watch, create, delete.
//
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=get;list;watch;create;delete

// Reasons of the GPUClaimTemplatesReady condition (and its events).
const (
	ReasonGPUClaimTemplatesReady   = "GPUClaimTemplatesReady"
	ReasonGPUClaimTemplateMissing  = "GPUClaimTemplateMissing"
	ReasonGPUClaimTemplateConflict = "GPUClaimTemplateConflict"
	ReasonGPUClaimTemplateDeleting = "GPUClaimTemplateDeleting"
	// ReasonGPUClaimTemplateCreated is the event of a copy created.
	ReasonGPUClaimTemplateCreated = "GPUClaimTemplateCreated"
)

// jobClaimTemplateField and jobClaimField index TrainingJobs by the
// ResourceClaimTemplates and the ResourceClaims their pod templates name.
const (
	jobClaimTemplateField = "lockstep.dev/claim-templates"
	jobClaimField         = "lockstep.dev/claims"
)

// watchClaimTemplates indexes jobs by the claim templates and claims they
// name and wakes the jobs naming a template that changed, or a claim
// created or deleted: created, most of all, as a template or claim
// applied beside its job may reach the cache after it, and a job held for
// it (GPUClaimTemplateMissing, GPUClaimsUnknown) would otherwise wait for
// a poll. The template informer is the one Owns starts for the job's
// copies; the claim informer is watchClaims' too.
func (r *TrainingJobReconciler) watchClaimTemplates(mgr ctrl.Manager, b *ctrl.Builder) (*ctrl.Builder, error) {
	for field, index := range claimIndexes {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.TrainingJob{}, field, index); err != nil {
			return nil, fmt.Errorf("indexing TrainingJobs by %s: %w", field, err)
		}
	}
	b = b.Watches(&resourcev1.ResourceClaimTemplate{}, handler.EnqueueRequestsFromMapFunc(r.jobsNaming(jobClaimTemplateField)))
	// A claim's other changes are watchClaims' (its allocation).
	return b.Watches(&resourcev1.ResourceClaim{}, handler.EnqueueRequestsFromMapFunc(r.jobsNaming(jobClaimField)),
		builder.WithPredicates(predicate.Funcs{
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})), nil
}

// claimIndexes are the index functions of jobClaimTemplateField and
// jobClaimField.
var claimIndexes = map[string]client.IndexerFunc{
	jobClaimTemplateField: namedClaims(func(pc *corev1.PodResourceClaim) *string { return pc.ResourceClaimTemplateName }),
	jobClaimField:         namedClaims(func(pc *corev1.PodResourceClaim) *string { return pc.ResourceClaimName }),
}

// namedClaims indexes a job by the names name reads from its pod
// templates' claims, each once.
func namedClaims(name func(*corev1.PodResourceClaim) *string) client.IndexerFunc {
	return func(o client.Object) []string {
		j, ok := o.(*v1alpha1.TrainingJob)
		if !ok {
			return nil
		}
		var names []string
		for _, rs := range j.Spec.ReplicaSpecs {
			for i := range rs.Template.Spec.ResourceClaims {
				if n := name(&rs.Template.Spec.ResourceClaims[i]); n != nil && !slices.Contains(names, *n) {
					names = append(names, *n)
				}
			}
		}
		return names
	}
}

// jobsNaming maps an object to the jobs in its namespace whose pod
// templates name it, by the index field.
func (r *TrainingJobReconciler) jobsNaming(field string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var jobs v1alpha1.TrainingJobList
		if err := r.Client.List(ctx, &jobs, client.InNamespace(o.GetNamespace()), client.MatchingFields{field: o.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the TrainingJobs naming an object", "field", field, "object", klog.KObj(o))
			return nil
		}
		reqs := make([]reconcile.Request, len(jobs.Items))
		for i, j := range jobs.Items {
			reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: j.Namespace, Name: j.Name}}
		}
		return reqs
	}
}

// gpuClaimTemplateName is the name of job's copy of the user's template.
func gpuClaimTemplateName(job *v1alpha1.TrainingJob, template string) string {
	return job.Name + "-" + template + "-one-root"
}

// claimTemplateRef is a ResourceClaimTemplate a pod template of the job
// names, with the first field that names it (for messages).
type claimTemplateRef struct {
	name string
	path *field.Path
}

// claimTemplateRefs lists the templates job's pods claim from, each once,
// by role then claim order. Nil when the job opted out.
func claimTemplateRefs(job *v1alpha1.TrainingJob) []claimTemplateRef {
	if t := job.Spec.Topology; t != nil && t.GPUClaims == v1alpha1.GPUClaimsAsWritten {
		return nil
	}
	roles := make([]v1alpha1.ReplicaType, 0, len(job.Spec.ReplicaSpecs))
	for role := range job.Spec.ReplicaSpecs {
		roles = append(roles, role)
	}
	slices.Sort(roles)
	var refs []claimTemplateRef
	for _, role := range roles {
		claims := job.Spec.ReplicaSpecs[role].Template.Spec.ResourceClaims
		for i, pc := range claims {
			if pc.ResourceClaimTemplateName == nil || slices.ContainsFunc(refs, func(r claimTemplateRef) bool { return r.name == *pc.ResourceClaimTemplateName }) {
				continue
			}
			refs = append(refs, claimTemplateRef{name: *pc.ResourceClaimTemplateName,
				path: field.NewPath("spec", "replicaSpecs").Key(string(role)).Child("template", "spec", "resourceClaims").Index(i).Child("resourceClaimTemplateName")})
		}
	}
	return refs
}

// gpuClaimTemplate returns job's copy of the user's template src when its
// claims have GPU requests to rewrite; false when the pods claim from src as
// written. Pure: the copy is owned by the job and names src's UID. A
// template whose copy's name would be too long for the API (job and
// template names over 253 characters together) is claimed from as written.
func gpuClaimTemplate(job *v1alpha1.TrainingJob, src *resourcev1.ResourceClaimTemplate) (*resourcev1.ResourceClaimTemplate, bool) {
	spec, changed := gpuclaim.OneRootFirst(src.Spec.Spec)
	name := gpuClaimTemplateName(job, src.Name)
	if !changed || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return nil, false
	}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: name,
			Labels:          map[string]string{lockstep.LabelJobName: job.Name},
			Annotations:     map[string]string{lockstep.AnnotationClaimTemplateSource: string(src.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, v1alpha1.GroupVersion.WithKind("TrainingJob"))}},
		// The claims' own metadata is the user's: the copy changes only
		// how the devices are chosen.
		Spec: resourcev1.ResourceClaimTemplateSpec{ObjectMeta: *src.Spec.ObjectMeta.DeepCopy(), Spec: spec},
	}, true
}

// claimTemplates maps the user's templates to the job's copies the pods
// claim from instead.
type claimTemplates map[string]string

// apply makes spec's pod claims name the copies.
func (t claimTemplates) apply(spec *corev1.PodSpec) {
	for i := range spec.ResourceClaims {
		pc := &spec.ResourceClaims[i]
		if pc.ResourceClaimTemplateName == nil {
			continue
		}
		if name, ok := t[*pc.ResourceClaimTemplateName]; ok {
			pc.ResourceClaimTemplateName = &name
		}
	}
}

// ensureGPUClaimTemplates makes sure the claim templates the job's pods
// name exist, with the job's copies made, before any pod, and says which
// copies the pods claim from. held says the missing pods must not be
// created yet.
func (r *TrainingJobReconciler) ensureGPUClaimTemplates(ctx context.Context, job *v1alpha1.TrainingJob) (claimTemplates, bool, error) {
	refs := claimTemplateRefs(job)
	if len(refs) == 0 {
		if meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionGPUClaimTemplatesReady) != nil {
			meta.RemoveStatusCondition(&job.Status.Conditions, v1alpha1.ConditionGPUClaimTemplatesReady)
		}
		return nil, false, nil
	}
	copies := claimTemplates{}
	for _, ref := range refs {
		src := &resourcev1.ResourceClaimTemplate{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: ref.name}, src)
		switch {
		case apierrors.IsNotFound(err):
			r.setGPUClaimCondition(ctx, job, metav1.ConditionFalse, ReasonGPUClaimTemplateMissing,
				fmt.Sprintf("%s: ResourceClaimTemplate %q not found in namespace %s: no pods are created until it exists", ref.path, ref.name, job.Namespace))
			return nil, true, nil
		case err != nil:
			return nil, false, fmt.Errorf("getting ResourceClaimTemplate %s/%s: %w", job.Namespace, ref.name, err)
		}
		want, ok := gpuClaimTemplate(job, src)
		if !ok {
			continue
		}
		held, err := r.ensureGPUClaimCopy(ctx, job, ref, src, want)
		if held || err != nil {
			return nil, held, err
		}
		copies[ref.name] = want.Name
	}
	names := make([]string, 0, len(copies))
	for src, c := range copies {
		names = append(names, c+" (of "+src+")")
	}
	slices.Sort(names)
	msg := "the pods claim GPUs from the templates as written"
	if len(names) > 0 {
		msg = "the pods claim GPUs of one PCIe root first from " + strings.Join(names, ", ")
	}
	r.setGPUClaimCondition(ctx, job, metav1.ConditionTrue, ReasonGPUClaimTemplatesReady, msg)
	return copies, false, nil
}

// ensureGPUClaimCopy makes sure the job's copy want of src exists; held
// says the pods must wait for it.
func (r *TrainingJobReconciler) ensureGPUClaimCopy(ctx context.Context, job *v1alpha1.TrainingJob, ref claimTemplateRef, src, want *resourcev1.ResourceClaimTemplate) (bool, error) {
	got := &resourcev1.ResourceClaimTemplate{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating ResourceClaimTemplate %s: %w", klog.KObj(want), err)
		}
		r.Recorder.Eventf(job, corev1.EventTypeNormal, ReasonGPUClaimTemplateCreated, "Created ResourceClaimTemplate %s from %s: GPUs of one PCIe root first", want.Name, src.Name)
		ctrl.LoggerFrom(ctx).V(2).Info("Created GPU claim template", "template", klog.KObj(want), "source", klog.KObj(src))
		return false, nil
	case err != nil:
		return false, fmt.Errorf("getting ResourceClaimTemplate %s: %w", klog.KObj(want), err)
	case !metav1.IsControlledBy(got, job):
		r.setGPUClaimCondition(ctx, job, metav1.ConditionFalse, ReasonGPUClaimTemplateConflict,
			fmt.Sprintf("%s: ResourceClaimTemplate %s, the job's copy of %s, exists and is not this job's: no pods are created until it is deleted", ref.path, want.Name, src.Name))
		return true, nil
	case got.DeletionTimestamp != nil:
		r.setGPUClaimCondition(ctx, job, metav1.ConditionFalse, ReasonGPUClaimTemplateDeleting,
			fmt.Sprintf("ResourceClaimTemplate %s is being deleted; it is created again once it is gone", want.Name))
		return true, nil
	case got.Annotations[lockstep.AnnotationClaimTemplateSource] != string(src.UID):
		// The user's template was replaced: its spec may differ, and a
		// template's spec cannot be updated. Claims made from the old copy
		// stay as they are; pods created from now on claim from the new.
		uid := got.UID
		if err := r.Client.Delete(ctx, got, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting ResourceClaimTemplate %s, a copy of a replaced template: %w", klog.KObj(got), err)
		}
		ctrl.LoggerFrom(ctx).V(2).Info("Deleted the GPU claim template of a replaced template", "template", klog.KObj(got), "source", klog.KObj(src))
		r.setGPUClaimCondition(ctx, job, metav1.ConditionFalse, ReasonGPUClaimTemplateDeleting,
			fmt.Sprintf("ResourceClaimTemplate %s was replaced: its copy %s is made again", src.Name, want.Name))
		return true, nil
	}
	return false, nil
}

// setGPUClaimCondition sets the condition, with an event when its reason
// changes to one that holds the job.
func (r *TrainingJobReconciler) setGPUClaimCondition(ctx context.Context, job *v1alpha1.TrainingJob, status metav1.ConditionStatus, reason, msg string) {
	old := meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionGPUClaimTemplatesReady)
	if old == nil || old.Reason != reason {
		if reason == ReasonGPUClaimTemplateMissing || reason == ReasonGPUClaimTemplateConflict {
			r.Recorder.Event(job, corev1.EventTypeWarning, reason, msg)
		}
		ctrl.LoggerFrom(ctx).V(2).Info("GPU claim templates condition", "reason", reason, "message", msg)
	}
	meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionGPUClaimTemplatesReady, Status: status,
		Reason: reason, Message: truncateMessage(msg), ObservedGeneration: job.Generation})
}
