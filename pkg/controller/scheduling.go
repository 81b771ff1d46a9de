package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Reasons of the Scheduled condition.
const (
	ReasonGangScheduled         = "GangScheduled"
	ReasonUnknownTopologyLevel  = "UnknownTopologyLevel"
	ReasonGangLargerThanCluster = "GangLargerThanCluster"
	ReasonUnschedulable         = "Unschedulable"
)

// schedulingProblem is why a gang cannot be placed now.
type schedulingProblem struct {
	reason, message string
}

// topologyLevelProblem checks the job's topology level against the cluster's
// topology configuration, the one the scheduler plans with: a level it does
// not have can never be met.
func topologyLevelProblem(job *v1alpha1.TrainingJob, cfg lockstep.TopologyConfig) *schedulingProblem {
	if job.Spec.Topology == nil {
		if _, _, err := kueueConstraint(job, cfg); err != nil {
			return &schedulingProblem{ReasonUnknownTopologyLevel, err.Error()}
		}
		return nil
	}
	if cfg.HasLevel(job.Spec.Topology.Level) {
		return nil
	}
	return &schedulingProblem{ReasonUnknownTopologyLevel, fmt.Sprintf(
		"spec.topology.level %q is not a level of the cluster's topology; use one of %s",
		job.Spec.Topology.Level, strings.Join(cfg.LevelNames(), ", "))}
}

// capacityProblem compares the GPUs the gang needs with those of every node
// of the cluster together.
func capacityProblem(job *v1alpha1.TrainingJob, clusterGPUs int64) *schedulingProblem {
	need := jobGPUs(job)
	if need == 0 || need <= clusterGPUs {
		return nil
	}
	return &schedulingProblem{ReasonGangLargerThanCluster, fmt.Sprintf(
		"the gang needs %d %s but all of the cluster's nodes together have %d: lower the replicas or the GPUs per pod, or add nodes",
		need, lockstep.GPUResource, clusterGPUs)}
}

// jobGPUs is the GPUs every pod of the job requests together.
func jobGPUs(job *v1alpha1.TrainingJob) int64 {
	var n int64
	for _, spec := range job.Spec.ReplicaSpecs {
		n += int64(spec.DesiredReplicas()) * podGPUs(&spec.Template.Spec)
	}
	return n
}

// podGPUs is what a pod requests of the GPU resource: an extended resource's
// request equals its limit, and either may be given. It is what node
// allocatable is compared with; whether and how many GPUs a pod asks for
// at all, DRA claims included, is claimGPUs.podGPUs.
func podGPUs(spec *corev1.PodSpec) int64 {
	var n int64
	for i := range spec.Containers {
		n += containerGPUs(&spec.Containers[i])
	}
	return n
}

// containerGPUs is the GPUs one container asks for: its limit, else its
// request.
func containerGPUs(c *corev1.Container) int64 {
	q, ok := c.Resources.Limits[lockstep.GPUResource]
	if !ok {
		q = c.Resources.Requests[lockstep.GPUResource]
	}
	return q.Value()
}

// claimGPUs are the GPUs the ResourceClaimTemplates and ResourceClaims a
// job's pod templates name ask for, as gpuclaim.Count reads their specs:
// the way TopologyPlacement sizes the gang. They are read once a pass
// (readClaimGPUs) so that the decisions made on them stay pure. The zero
// value is a job whose templates name no claims.
type claimGPUs struct {
	// templates and claims are by name, in the job's namespace.
	templates, claims map[string]int64
	// missing names the templates and claims the cache does not hold (yet),
	// "ResourceClaimTemplate ml/gpus": what they ask for is unknown.
	missing []string
}

// of is what one pod claim asks for; a claim the job's templates do not
// name (the ComputeDomain channel the controller adds) asks for none.
func (c claimGPUs) of(pc *corev1.PodResourceClaim) int64 {
	switch {
	case pc.ResourceClaimTemplateName != nil:
		return c.templates[*pc.ResourceClaimTemplateName]
	case pc.ResourceClaimName != nil:
		return c.claims[*pc.ResourceClaimName]
	}
	return 0
}

// withCopies adds to c each of the job's copies of a template (gpuclaims.go),
// asking for what the template does: the copy rewrites how GPUs are chosen,
// not how many, and the job's pods name the copies.
func (c claimGPUs) withCopies(copies claimTemplates) claimGPUs {
	for src, name := range copies {
		if n, ok := c.templates[src]; ok {
			c.templates[name] = n
		}
	}
	return c
}

// podGPUs is how many GPUs a pod spec asks for, as TopologyPlacement counts
// them: its nvidia.com/gpu limits and the GPUs of every pod claim. A claim
// counts once however many containers use it, as it is allocated once.
func (c claimGPUs) podGPUs(spec *corev1.PodSpec) int64 {
	n := podGPUs(spec)
	for i := range spec.ResourceClaims {
		n += c.of(&spec.ResourceClaims[i])
	}
	return n
}

// containerAsksGPUs says whether a container of spec uses GPUs: it has an
// nvidia.com/gpu limit or uses a pod claim that asks for GPUs.
func (c claimGPUs) containerAsksGPUs(spec *corev1.PodSpec, ctr *corev1.Container) bool {
	if containerGPUs(ctr) > 0 {
		return true
	}
	for _, used := range ctr.Resources.Claims {
		for i := range spec.ResourceClaims {
			if pc := &spec.ResourceClaims[i]; pc.Name == used.Name && c.of(pc) > 0 {
				return true
			}
		}
	}
	return false
}

// readClaimGPUs reads what the claims named by job's pod templates ask for
// from the cache. A job that names none reads nothing. A template or claim
// not found is noted in missing, not an error: it may be created after the
// job (the user's manifests applied in any order). A claim whose shape
// TopologyPlacement cannot plan (gpuclaim.Count's problem) counts as no
// GPUs here: the scheduler refuses the gang and says why on its pods.
//
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates;resourceclaims,verbs=get;list;watch
func (r *TrainingJobReconciler) readClaimGPUs(ctx context.Context, job *v1alpha1.TrainingJob) (claimGPUs, error) {
	// Most jobs name no claim: nothing to read, nor to allocate.
	named := false
	for role := range job.Spec.ReplicaSpecs {
		named = named || len(job.Spec.ReplicaSpecs[role].Template.Spec.ResourceClaims) > 0
	}
	if !named {
		return claimGPUs{}, nil
	}
	out := claimGPUs{templates: map[string]int64{}, claims: map[string]int64{}}
	// count reads obj, a template or claim of that name whose claim spec is
	// spec, into counted, once.
	count := func(kind, name string, obj client.Object, spec *resourcev1.ResourceClaimSpec, counted map[string]int64) error {
		if _, ok := counted[name]; ok {
			return nil
		}
		key := client.ObjectKey{Namespace: job.Namespace, Name: name}
		// Read only: the spec is counted, never changed.
		switch err := r.Client.Get(ctx, key, obj, client.UnsafeDisableDeepCopy); {
		case apierrors.IsNotFound(err):
			if what := kind + " " + key.String(); !slices.Contains(out.missing, what) {
				out.missing = append(out.missing, what)
			}
			return nil
		case err != nil:
			return fmt.Errorf("getting %s %s: %w", kind, key, err)
		}
		n, _ := gpuclaim.Count(spec)
		counted[name] = int64(n)
		return nil
	}
	for _, role := range slices.Sorted(maps.Keys(job.Spec.ReplicaSpecs)) {
		for _, pc := range job.Spec.ReplicaSpecs[role].Template.Spec.ResourceClaims {
			var err error
			switch {
			case pc.ResourceClaimTemplateName != nil:
				t := &resourcev1.ResourceClaimTemplate{}
				err = count("ResourceClaimTemplate", *pc.ResourceClaimTemplateName, t, &t.Spec.Spec, out.templates)
			case pc.ResourceClaimName != nil:
				c := &resourcev1.ResourceClaim{}
				err = count("ResourceClaim", *pc.ResourceClaimName, c, &c.Spec, out.claims)
			}
			if err != nil {
				return claimGPUs{}, err
			}
		}
	}
	return out, nil
}

// unschedulablePod is the scheduler's word on the first pod it could not
// place: its PodScheduled condition.
func unschedulablePod(obs observation) *schedulingProblem {
	names := make([]string, 0, len(obs.live))
	for name := range obs.live {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := obs.live[name]
		if p.Spec.NodeName != "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return &schedulingProblem{ReasonUnschedulable, fmt.Sprintf("pod %s: %s", name, c.Message)}
			}
		}
	}
	return nil
}

// ensureScheduledCondition says on the job whether its gang is placed and,
// when it cannot be, why: first what the controller can tell itself (a
// topology level the cluster lacks, more GPUs than the cluster has), then
// what the scheduler wrote on the pods. A change of reason or message is
// also an event, so `kubectl describe` shows it.
func (r *TrainingJobReconciler) ensureScheduledCondition(ctx context.Context, job *v1alpha1.TrainingJob, obs observation) {
	bound := int32(0)
	for _, p := range obs.live {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	old := meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionScheduled)
	placed := bound >= minMember(job)
	if placed && old != nil && old.Status == metav1.ConditionTrue {
		// A placed gang needs no second look: the checks below list every
		// node, which is not work to repeat on each reconcile of a running
		// job.
		return
	}
	problem := topologyLevelProblem(job, r.Topology)
	if problem == nil && !placed {
		gpus, err := r.clusterGPUs(ctx)
		if err != nil {
			ctrl.LoggerFrom(ctx).V(2).Info("Cluster capacity not checked", "err", err)
		} else {
			problem = capacityProblem(job, gpus)
		}
	}
	if problem == nil {
		problem = unschedulablePod(obs)
	}
	if problem == nil {
		if !placed {
			return
		}
		meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionScheduled, Status: metav1.ConditionTrue,
			Reason: ReasonGangScheduled, Message: fmt.Sprintf("%d pods are bound", bound), ObservedGeneration: job.Generation})
		return
	}
	msg := truncateMessage(problem.message)
	if old != nil && old.Status == metav1.ConditionFalse && old.Reason == problem.reason && old.Message == msg {
		return
	}
	meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionScheduled, Status: metav1.ConditionFalse,
		Reason: problem.reason, Message: msg, ObservedGeneration: job.Generation})
	r.Recorder.Event(job, corev1.EventTypeWarning, problem.reason, msg)
}

// clusterGPUs adds up the GPUs every node of the cluster can allocate: from
// r.capacity once it follows the Node informer, else by listing the nodes.
func (r *TrainingJobReconciler) clusterGPUs(ctx context.Context) (int64, error) {
	if n, ok := r.capacity.get(); ok {
		return n, nil
	}
	var nodes corev1.NodeList
	// Read only: no need for the cache to copy every node.
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	var n int64
	for i := range nodes.Items {
		n += allocatableGPUs(&nodes.Items[i])
	}
	return n, nil
}

// allocatableGPUs is the GPUs node can allocate.
func allocatableGPUs(node *corev1.Node) int64 {
	q := node.Status.Allocatable[lockstep.GPUResource]
	return q.Value()
}

// gpuCapacity is the GPUs every node of the cluster can allocate, kept up
// to date from the Node informer's events (watchNodeSet). A pending gang is
// checked against the cluster's size on every reconcile, one per event of
// any of its pods; summing every node each time cost a list of the whole
// cluster per reconcile, the controller's largest cost while a burst of
// gangs was being bound on 5,000 nodes. Each event carries what the node
// had before (an update's old object, a deletion's last state, tombstones
// included), so the total moves by the difference and nothing is kept per
// node.
type gpuCapacity struct {
	total atomic.Int64
	// synced says the handler has handled the informer's first list; nil
	// (no watch: a reconciler not set up with a manager) or false, get
	// declines and the caller lists the nodes.
	synced atomic.Pointer[func() bool]
}

// add moves the total by gpus, negative for GPUs a node no longer has.
func (c *gpuCapacity) add(gpus int64) {
	c.total.Add(gpus)
}

// follow makes get answer once synced says the first list was handled.
func (c *gpuCapacity) follow(synced func() bool) {
	c.synced.Store(&synced)
}

// get returns the cluster's GPUs, and false while the handler has not
// caught up with the informer: a sum of only the nodes seen so far would
// call a gang larger than the cluster.
func (c *gpuCapacity) get() (int64, bool) {
	if synced := c.synced.Load(); synced == nil || !(*synced)() {
		return 0, false
	}
	return c.total.Load(), true
}

// kueueConstraint is the gang's topology constraint from Kueue TAS's
// annotations on the replica templates (kueue.x-k8s.io/podset-required- or
// -preferred-topology), mapped to a configured level by
// lockstep.KueueTopologyConstraint; level is "" when no template has one.
// It applies only to a job without spec.topology, which wins. The gang has
// one constraint, so templates that name different ones are an error.
func kueueConstraint(job *v1alpha1.TrainingJob, cfg lockstep.TopologyConfig) (string, lockstep.ConstraintMode, error) {
	var level, from string
	var mode lockstep.ConstraintMode
	for _, role := range slices.Sorted(maps.Keys(job.Spec.ReplicaSpecs)) {
		rs := job.Spec.ReplicaSpecs[role]
		l, m, ok, err := lockstep.KueueTopologyConstraint(rs.Template.Annotations, cfg)
		path := fmt.Sprintf("spec.replicaSpecs[%s].template.metadata.annotations", role)
		switch {
		case err != nil:
			return "", "", fmt.Errorf("%s: %w", path, err)
		case !ok:
			continue
		case from != "" && (l != level || m != mode):
			return "", "", fmt.Errorf("%s names %s/%s but %s names %s/%s: a gang has one topology constraint; annotate every role alike, or set spec.topology",
				path, l, m, from, level, mode)
		}
		level, mode, from = l, m, path
	}
	return level, mode, nil
}
