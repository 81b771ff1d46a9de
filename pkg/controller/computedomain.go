package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/computedomain"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// ComputeDomains. Pods of one gang on different nodes of a multi-node
// NVLink domain (an NVL72 clique) reach each other over NVLink only through
// IMEX channels, which NVIDIA's DRA driver hands out per ComputeDomain. A
// job constrained to an NVLink level whose gang has more than one GPU pod
// therefore gets a ComputeDomain of its own, created before its pods and
// owned by the job (deleted with it by the garbage collector). Every GPU
// container of its pods claims the domain's channel through the claim
// template the driver's controller makes for the domain; the driver
// prepares the channel once the scheduler's DynamicResources plugin has
// allocated it on the pod's node. The domain is kept across gang restarts,
// and made again if it was deleted.
//
// The ComputeDomain API is optional, as Kueue's is (queueing.go): the
// controller watches ComputeDomains once discovery serves them, and until
// then holds the jobs that need one (no pods; ComputeDomainReady False,
// reason ComputeDomainAPIMissing), looking at them again every
// computeDomainRetry, so installing the driver needs no restart.
//
// The domain is sized for the gang's GPU pods (gpuGangPods) and, its spec
// being immutable, deleted and created again between incarnations when the
// size the job wants changes (a job resized while suspended): only while
// the job has no pod at all, so no pod ever holds a channel of a domain
// on its way out.
//
// RBAC (deploy/default/controller.yaml): ComputeDomains get, list, watch,
// create, delete (its own only: deploy/default/controller-policy.yaml).
//
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomains,verbs=get;list;watch;create;delete

// Reasons of the ComputeDomainReady condition (and its events).
const (
	ReasonComputeDomainReady      = "ComputeDomainReady"
	ReasonComputeDomainNotReady   = "ComputeDomainNotReady"
	ReasonComputeDomainAPIMissing = "ComputeDomainAPIMissing"
	ReasonComputeDomainConflict   = "ComputeDomainConflict"
	ReasonComputeDomainDeleting   = "ComputeDomainDeleting"
	// ReasonGPUClaimsUnknown: a claim template or claim the pods name does
	// not exist yet, so which pods ask for GPUs, and how many nodes the
	// domain spans, is unknown.
	ReasonGPUClaimsUnknown = "GPUClaimsUnknown"
	// ReasonComputeDomainCreated is the event of a domain created, or
	// created again after it was deleted under the job.
	ReasonComputeDomainCreated = "ComputeDomainCreated"
	// ReasonComputeDomainResized is the event and condition reason of a
	// domain deleted to be created again for another size.
	ReasonComputeDomainResized = "ComputeDomainResized"
)

// computeDomainRetry is how often a job held for its ComputeDomain (the
// API not served, a foreign domain in the way) is looked at again, and how
// often discovery is asked for the API.
const computeDomainRetry = 10 * time.Second

// computeDomainClaim is the name of the channel claim in the pods' spec.
const computeDomainClaim = lockstep.ComputeDomainChannelClaim

// computeDomainPlan is the ComputeDomain a job wants.
type computeDomainPlan struct {
	// name is the ComputeDomain's; template that of the channel claim
	// template the driver makes for it.
	name, template string
	// numNodes is how many nodes the domain waits for: the GPU pods the
	// job's gang needs (gpuGangPods), one per node, as each node offers the
	// domain one default channel.
	numNodes int
}

// gpuGangPods is how many of the job's pods that ask for GPUs will run
// when its gang runs: those of its GPU roles the gang needs (an elastic
// job's minReplicas Workers), and with schedulingPolicy.minAvailable at
// least minAvailable less the pods without GPUs (which of the gang's pods
// start is the scheduler's choice).
//
// NVIDIA's driver holds every pod claiming a domain's channel until
// numNodes of the domain's IMEX daemons are ready, and lets more join
// (numNodes acts as a minimum: kubernetes-sigs/dra-driver-nvidia-gpu
// #368). A domain sized for the full replica count hangs a gang that runs
// with fewer: an elastic job below maxReplicas, a job whose minAvailable
// is below its replicas, a slice scaled down then restarted.
func gpuGangPods(job *v1alpha1.TrainingJob, claims claimGPUs) (all, gang int) {
	other := 0
	for role, rs := range job.Spec.ReplicaSpecs {
		if claims.podGPUs(&rs.Template.Spec) > 0 {
			all += int(rs.DesiredReplicas())
			gang += int(gangReplicas(job, role))
		} else {
			other += int(rs.DesiredReplicas())
		}
	}
	if sp := job.Spec.RunPolicy; sp != nil && sp.SchedulingPolicy != nil && sp.SchedulingPolicy.MinAvailable != nil {
		gang = min(gang, max(int(*sp.SchedulingPolicy.MinAvailable)-other, 0))
	}
	return all, max(gang, 1)
}

// planComputeDomain decides whether job gets a ComputeDomain under topo:
// its constraint names a multi-node NVLink level, it did not opt out, and
// more than one of its pods asks for GPUs, through nvidia.com/gpu or GPU
// claims (a gang on one node needs no IMEX channel). Pure, so the pods'
// claims follow the same decision.
func planComputeDomain(job *v1alpha1.TrainingJob, topo lockstep.TopologyConfig, claims claimGPUs) (computeDomainPlan, bool) {
	if !nvlinkJob(job, topo) {
		return computeDomainPlan{}, false
	}
	gpuPods, gang := gpuGangPods(job, claims)
	if gpuPods < 2 {
		return computeDomainPlan{}, false
	}
	return computeDomainPlan{name: job.Name + "-compute-domain", template: job.Name + "-channel", numNodes: gang}, true
}

// nvlinkJob says whether job may get a ComputeDomain: its constraint names
// a multi-node NVLink level of topo and it did not opt out.
func nvlinkJob(job *v1alpha1.TrainingJob, topo lockstep.TopologyConfig) bool {
	t := job.Spec.Topology
	if t == nil || t.ComputeDomain == v1alpha1.ComputeDomainDisabled {
		return false
	}
	return slices.ContainsFunc(topo.Levels, func(l lockstep.Level) bool { return l.Name == t.Level && l.NVLink })
}

// addChannelClaim makes every GPU container of spec (an nvidia.com/gpu
// limit, or a GPU claim) claim the domain's channel from template.
// Containers without GPUs do not join the domain; nor does a pod without
// any.
func addChannelClaim(spec *corev1.PodSpec, template string, claims claimGPUs) {
	joined := false
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if !claims.containerAsksGPUs(spec, c) {
			continue
		}
		joined = true
		if !slices.ContainsFunc(c.Resources.Claims, func(rc corev1.ResourceClaim) bool { return rc.Name == computeDomainClaim }) {
			c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: computeDomainClaim})
		}
	}
	if joined && !slices.ContainsFunc(spec.ResourceClaims, func(rc corev1.PodResourceClaim) bool { return rc.Name == computeDomainClaim }) {
		spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: computeDomainClaim, ResourceClaimTemplateName: &template})
	}
}

// computeDomainAPI tracks whether the ComputeDomain API is served.
type computeDomainAPI struct {
	served atomic.Bool
}

// watchComputeDomainAPI waits for the ComputeDomain API, then watches the
// ComputeDomains jobs own. A Runnable of the manager.
func (r *TrainingJobReconciler) watchComputeDomainAPI(mgr manager.Manager, c controller.Controller) manager.RunnableFunc {
	return watchWhenServed(mgr, c, optionalAPI{
		gv: computedomain.GroupVersion, resource: computedomain.Resource, object: computedomain.NewObject(),
		served: &r.computeDomains.served, poll: computeDomainRetry,
		announce: "NVIDIA's ComputeDomain API is served: multi-node NVLink jobs get ComputeDomains",
	})
}

// ensureComputeDomain makes sure the job's ComputeDomain exists, before any
// of its pods, and reports its readiness as the ComputeDomainReady
// condition. held says the job's missing pods must not be created yet: the
// API is not served, a domain of that name is not the job's, the job's
// old domain is still being deleted, or a claim template the pods name
// does not exist yet, so whether they need a domain is unknown. Pods that
// run are left alone.
func (r *TrainingJobReconciler) ensureComputeDomain(ctx context.Context, job *v1alpha1.TrainingJob, claims claimGPUs, pods []*corev1.Pod) (held bool, err error) {
	if len(claims.missing) > 0 && nvlinkJob(job, r.Topology) {
		// Not a failure: the template is usually applied beside the job,
		// and may come a moment later. Created without it, the pods could
		// not be given the channel claim they turn out to need.
		r.setComputeDomainCondition(ctx, job, metav1.ConditionFalse, ReasonGPUClaimsUnknown,
			fmt.Sprintf("the pods name %s, which does not exist: whether they ask for GPUs, and so the ComputeDomain the job needs, is unknown; no pods are created until it exists",
				strings.Join(claims.missing, ", ")))
		return true, nil
	}
	plan, ok := planComputeDomain(job, r.Topology, claims)
	if !ok {
		// Looked up first: removing copies the conditions, on every pass
		// of every job without a domain.
		if meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionComputeDomainReady) != nil {
			meta.RemoveStatusCondition(&job.Status.Conditions, v1alpha1.ConditionComputeDomainReady)
		}
		return false, nil
	}
	if !r.computeDomains.served.Load() {
		r.setComputeDomainCondition(ctx, job, metav1.ConditionFalse, ReasonComputeDomainAPIMissing,
			fmt.Sprintf("the job spans nodes of the multi-node NVLink level %q and needs a ComputeDomain, but the cluster serves no %s %s: no pods are created until NVIDIA's DRA driver is installed, or set spec.topology.computeDomain: Disabled",
				job.Spec.Topology.Level, computedomain.GroupVersion, computedomain.GVK.Kind))
		return true, nil
	}
	u := computedomain.NewObject()
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: plan.name}, u)
	switch {
	case apierrors.IsNotFound(err):
		// The claim template of a domain deleted to be resized goes after
		// it, with the garbage collector: created beside it, the new
		// domain's template would be taken for the old one's and go too.
		old := &resourcev1.ResourceClaimTemplate{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: plan.template}, old)
		switch {
		case err == nil && slices.ContainsFunc(old.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == computedomain.GVK.Kind }):
			r.setComputeDomainCondition(ctx, job, metav1.ConditionFalse, ReasonComputeDomainDeleting,
				fmt.Sprintf("the claim template %s of the job's previous ComputeDomain is being deleted; the domain is created again once it is gone", plan.template))
			return true, nil
		case client.IgnoreNotFound(err) != nil:
			return false, fmt.Errorf("getting ResourceClaimTemplate %s/%s: %w", job.Namespace, plan.template, err)
		}
		return false, r.createComputeDomain(ctx, job, plan)
	case err != nil:
		return false, fmt.Errorf("getting ComputeDomain %s/%s: %w", job.Namespace, plan.name, err)
	}
	cd, err := computedomain.FromUnstructured(u)
	if err != nil {
		return false, err
	}
	switch {
	case !metav1.IsControlledBy(cd, job):
		r.setComputeDomainCondition(ctx, job, metav1.ConditionFalse, ReasonComputeDomainConflict,
			fmt.Sprintf("ComputeDomain %s exists and is not this job's: no pods are created until it is deleted", plan.name))
		return true, nil
	case cd.DeletionTimestamp != nil:
		// Its claim template goes with it: pods created now would claim
		// a channel of a domain on its way out.
		r.setComputeDomainCondition(ctx, job, metav1.ConditionFalse, ReasonComputeDomainDeleting,
			fmt.Sprintf("ComputeDomain %s is being deleted; it is created again once it is gone", plan.name))
		return true, nil
	case cd.Spec.NumNodes != plan.numNodes && len(pods) == 0:
		// Between incarnations, with no pod to hold a channel of it.
		if err := r.Client.Delete(ctx, u, client.Preconditions{UID: &cd.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting ComputeDomain %s/%s to resize it: %w", job.Namespace, plan.name, err)
		}
		msg := fmt.Sprintf("ComputeDomain %s waits for %d nodes and the job's gang now runs %d GPU pods: it is deleted and created again for %d",
			plan.name, cd.Spec.NumNodes, plan.numNodes, plan.numNodes)
		r.Recorder.Event(job, corev1.EventTypeNormal, ReasonComputeDomainResized, msg)
		r.setComputeDomainCondition(ctx, job, metav1.ConditionFalse, ReasonComputeDomainResized, msg)
		return true, nil
	case cd.Ready():
		r.setComputeDomainCondition(ctx, job, metav1.ConditionTrue, ReasonComputeDomainReady,
			fmt.Sprintf("ComputeDomain %s is ready on %d nodes", plan.name, cd.ReadyNodes()))
	default:
		msg := fmt.Sprintf("ComputeDomain %s: %d of %d nodes ready", plan.name, cd.ReadyNodes(), cd.Spec.NumNodes)
		if waiting := podsWaitingForChannel(pods); waiting > 0 {
			// NVIDIA's driver holds them in ContainerCreating until
			// numNodes daemons are ready: say so, with the numbers.
			msg += fmt.Sprintf("; %d bound pods wait for its IMEX channel (ContainerCreating) until %d more nodes join",
				waiting, max(cd.Spec.NumNodes-cd.ReadyNodes(), 0))
		}
		r.setComputeDomainCondition(ctx, job, metav1.ConditionFalse, ReasonComputeDomainNotReady, msg)
	}
	return false, nil
}

// podsWaitingForChannel counts the pods bound to a node, not being deleted
// and not running yet, that claim the domain's channel.
func podsWaitingForChannel(pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
			continue
		}
		if slices.ContainsFunc(p.Spec.ResourceClaims, func(rc corev1.PodResourceClaim) bool { return rc.Name == computeDomainClaim }) {
			n++
		}
	}
	return n
}

// createComputeDomain creates the job's ComputeDomain, owned by the job.
func (r *TrainingJobReconciler) createComputeDomain(ctx context.Context, job *v1alpha1.TrainingJob, plan computeDomainPlan) error {
	cd := &computedomain.ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: plan.name, Labels: map[string]string{lockstep.LabelJobName: job.Name}},
		Spec: computedomain.Spec{
			NumNodes: plan.numNodes,
			Channel: &computedomain.ChannelSpec{
				ResourceClaimTemplate: computedomain.ResourceClaimTemplateRef{Name: plan.template},
				AllocationMode:        computedomain.AllocationModeSingle,
			},
		},
	}
	if err := controllerutil.SetControllerReference(job, cd, r.Client.Scheme()); err != nil {
		return err
	}
	u, err := computedomain.ToUnstructured(cd)
	if err != nil {
		return err
	}
	if err := r.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ComputeDomain %s/%s: %w", job.Namespace, plan.name, err)
	}
	again := ""
	if meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionComputeDomainReady) != nil {
		again = " again"
	}
	r.Recorder.Eventf(job, corev1.EventTypeNormal, ReasonComputeDomainCreated, "Created ComputeDomain %s%s for %d nodes", plan.name, again, plan.numNodes)
	ctrl.LoggerFrom(ctx).V(2).Info("Created ComputeDomain", "computeDomain", klog.KObj(cd), "numNodes", plan.numNodes, "again", again != "")
	r.setComputeDomainCondition(ctx, job, metav1.ConditionFalse, ReasonComputeDomainNotReady,
		fmt.Sprintf("ComputeDomain %s: 0 of %d nodes ready", plan.name, plan.numNodes))
	return nil
}

// setComputeDomainCondition sets the condition, with an event when its
// reason changes to one that holds the job or says it is ready.
func (r *TrainingJobReconciler) setComputeDomainCondition(ctx context.Context, job *v1alpha1.TrainingJob, status metav1.ConditionStatus, reason, msg string) {
	old := meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionComputeDomainReady)
	if old == nil || old.Reason != reason {
		switch reason {
		case ReasonComputeDomainAPIMissing, ReasonComputeDomainConflict, ReasonGPUClaimsUnknown:
			r.Recorder.Event(job, corev1.EventTypeWarning, reason, msg)
		case ReasonComputeDomainReady:
			r.Recorder.Event(job, corev1.EventTypeNormal, reason, msg)
		}
		ctrl.LoggerFrom(ctx).V(2).Info("ComputeDomain condition", "reason", reason, "message", msg)
	}
	meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionComputeDomainReady, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: job.Generation})
}

// placementComputeDomain is the job's ComputeDomain as status.placement
// shows it, from the condition this pass set; nil without one.
func placementComputeDomain(job *v1alpha1.TrainingJob, topo lockstep.TopologyConfig, claims claimGPUs) *v1alpha1.PlacementComputeDomain {
	plan, ok := planComputeDomain(job, topo, claims)
	if !ok {
		return nil
	}
	return &v1alpha1.PlacementComputeDomain{Name: plan.name,
		Ready: meta.IsStatusConditionTrue(job.Status.Conditions, v1alpha1.ConditionComputeDomainReady)}
}
