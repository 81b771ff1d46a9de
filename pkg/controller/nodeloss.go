package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// The node-loss path (docs/controller.md, "A node goes dark"). A node that
// stops answering is not deleted: the node lifecycle controller marks it
// Ready Unknown and taints it node.kubernetes.io/unreachable:NoExecute, and
// its pods, once deleted, stay Terminating for good, since no kubelet
// confirms. A gang cannot use a dead rank, so the controller gives such a
// member runPolicy.unreachableToleranceSeconds from the taint, then restarts
// the gang whole on healthy nodes (reason NodeUnreachable); and it
// force-deletes the job's terminating pods on nodes confirmed unreachable,
// so the pod names (fixed: <job>-<role>-<index>) are free again.

// ReasonNodeUnreachable is the reason of the restart condition and event
// when a member's node stopped answering.
const ReasonNodeUnreachable = "NodeUnreachable"

// podNodeNameField indexes the cached pods by spec.nodeName, so that a node
// event finds its pods without listing every pod.
const podNodeNameField = "spec.nodeName"

// nodeOutage says a node is unavailable and since when.
type nodeOutage struct {
	// since is when the node was marked unavailable: the taint's timeAdded.
	since time.Time
	// silent says the kubelet stopped posting status (Ready Unknown with
	// the unreachable taint): nobody confirms a pod deletion there, but the
	// node may only be cut off from the API server and still run its
	// containers. fenced says an operator tainted it out-of-service: proof
	// that nothing runs there. A node that is neither has a kubelet that
	// answers but reports NotReady.
	silent, fenced bool
}

// tolerance is how long a live member may sit on the node before it is
// lost: the job's bound, or at least NotReadyToleranceSeconds on a node
// whose kubelet still answers, since that kubelet still reports the
// member's containers and fails the pod when they stop.
func (o nodeOutage) tolerance(bound time.Duration) time.Duration {
	if o.silent || o.fenced {
		return bound
	}
	return max(bound, time.Duration(v1alpha1.NotReadyToleranceSeconds)*time.Second)
}

// forceDeleteAt is when the job's pods being deleted there may be
// force-deleted: at once on a fenced node, forceBound after the node went
// silent, never while a kubelet answers (it confirms the deletion itself).
func (o nodeOutage) forceDeleteAt(forceBound time.Duration) (time.Time, bool) {
	switch {
	case o.fenced:
		return o.since, true
	case o.silent:
		return o.since.Add(forceBound), true
	}
	return time.Time{}, false
}

// outageOf says whether a node is unavailable to a running member: Ready
// False or Unknown with the unreachable or not-ready NoExecute taint (set by
// the node lifecycle controller once node-monitor-grace-period passed
// without a heartbeat, or when the kubelet reports NotReady), or tainted
// out-of-service by an operator. A Ready node that still carries a taint is
// recovering, not unavailable.
func outageOf(n *corev1.Node) (nodeOutage, bool) {
	ready := corev1.ConditionUnknown
	var readySince time.Time
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready, readySince = c.Status, c.LastTransitionTime.Time
		}
	}
	var (
		out   nodeOutage
		found bool
	)
	for _, t := range n.Spec.Taints {
		switch {
		case t.Key == corev1.TaintNodeOutOfService:
			out.fenced = true
		case t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute && ready != corev1.ConditionTrue:
			out.silent = out.silent || ready == corev1.ConditionUnknown
		case t.Key == corev1.TaintNodeNotReady && t.Effect == corev1.TaintEffectNoExecute && ready != corev1.ConditionTrue:
		default:
			continue
		}
		// The apiserver stamps NoExecute taints; a NoSchedule out-of-service
		// taint may have no stamp, and then the Ready transition is the best
		// estimate (zero, "long ago", when there is none either).
		since := readySince
		if t.TimeAdded != nil {
			since = t.TimeAdded.Time
		}
		if !found || since.Before(out.since) {
			out.since = since
		}
		found = true
	}
	return out, found
}

// darkMember is a pod of the job on an unavailable node.
type darkMember struct {
	pod  *corev1.Pod
	node string
}

// nodeLoss is what unavailable nodes mean for a job's current incarnation.
type nodeLoss struct {
	// lost are the live members whose node has been unavailable for the
	// bound or longer; evicted are the members being deleted (by the taint
	// manager, usually) whose node is unavailable. Either restarts the job
	// with reason NodeUnreachable.
	lost    []darkMember
	evicted []darkMember
	// requeueAfter is when the next member under the bound reaches it; 0
	// when none is waiting.
	requeueAfter time.Duration
	// bound is runPolicy.unreachableToleranceSeconds, for the message.
	bound time.Duration
}

// assessNodeLoss sorts the pods of the current incarnation on unavailable
// nodes: a live member whose node has been out for at least bound is lost;
// one under the bound is waited for, until its bound runs out.
func assessNodeLoss(obs observation, pods []*corev1.Pod, outages map[string]nodeOutage, bound time.Duration, now time.Time) nodeLoss {
	nl := nodeLoss{bound: bound}
	for _, name := range slices.Sorted(maps.Keys(obs.live)) {
		p := obs.live[name]
		out, ok := outages[p.Spec.NodeName]
		if !ok || p.Spec.NodeName == "" {
			continue
		}
		if left := out.since.Add(out.tolerance(bound)).Sub(now); left > 0 {
			if nl.requeueAfter == 0 || left < nl.requeueAfter {
				nl.requeueAfter = left
			}
			continue
		}
		nl.lost = append(nl.lost, darkMember{pod: p.Pod, node: p.Spec.NodeName})
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil || !slices.Contains(obs.lost, p.Name) {
			continue
		}
		if _, ok := outages[p.Spec.NodeName]; ok && p.Spec.NodeName != "" {
			nl.evicted = append(nl.evicted, darkMember{pod: p, node: p.Spec.NodeName})
		}
	}
	slices.SortFunc(nl.evicted, func(a, b darkMember) int { return strings.Compare(a.pod.Name, b.pod.Name) })
	return nl
}

// markLost moves the lost members out of the live pods and into the lost
// ones, as if they were gone: under a gang scope, decide then restarts the
// gang once, an infrastructure restart (not counted against backoffLimit).
// The adapters see them Pending, as a missing pod.
func (nl nodeLoss) markLost(obs *observation) {
	for _, m := range nl.evicted {
		if _, ok := obs.disrupted[m.pod.Name]; !ok {
			obs.disrupted[m.pod.Name] = ReasonNodeUnreachable
		}
	}
	for _, m := range nl.lost {
		jp, ok := obs.live[m.pod.Name]
		if !ok {
			continue
		}
		delete(obs.live, m.pod.Name)
		delete(obs.slots, slot{jp.role, jp.index})
		obs.disrupted[m.pod.Name] = ReasonNodeUnreachable
		obs.lost = append(obs.lost, m.pod.Name)
		if phases := obs.phases[jp.role]; int(jp.index) < len(phases) {
			if phases[jp.index] == corev1.PodRunning {
				obs.running--
			}
			phases[jp.index] = corev1.PodPending
		}
	}
	slices.Sort(obs.lost)
}

// amend folds the node loss into the decision: the lost members, which are
// no longer live, are deleted with the gang, and the restart says which
// node went dark. A restart for any other reason is left as it is.
func (nl nodeLoss) amend(d decision) decision {
	dark := append(slices.Clone(nl.lost), nl.evicted...)
	if len(dark) == 0 || !d.gangRestart {
		return d
	}
	for _, m := range nl.lost {
		d.restart = append(d.restart, jobPod{Pod: m.pod})
	}
	slices.SortFunc(d.restart, func(a, b jobPod) int { return strings.Compare(a.Name, b.Name) })
	byNode := map[string][]string{}
	for _, m := range dark {
		byNode[m.node] = append(byNode[m.node], m.pod.Name)
	}
	var parts []string
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		parts = append(parts, fmt.Sprintf("node %s is unreachable (pods %s)", node, strings.Join(byNode[node], ", ")))
	}
	d.reason = ReasonNodeUnreachable
	d.incident = fmt.Sprintf("%s; runPolicy.unreachableToleranceSeconds is %ds", strings.Join(parts, "; "), int(nl.bound/time.Second))
	return d
}

// unreachableTolerations adds the pod's NoExecute tolerations of the
// unreachable and not-ready taints, so the taint manager evicts the pod
// when the job's bound runs out (at least NotReadyToleranceSeconds on a
// NotReady node, whose kubelet still answers: nodeOutage.tolerance) rather
// than after the cluster's default 300 s (DefaultTolerationSeconds), and a
// bound above 300 s holds. A template that tolerates a key itself (or
// every taint) keeps its own.
func unreachableTolerations(spec *corev1.PodSpec, bound int32) {
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		if tolerates(spec.Tolerations, key) {
			continue
		}
		seconds := int64(bound)
		if key == corev1.TaintNodeNotReady {
			seconds = int64(max(bound, v1alpha1.NotReadyToleranceSeconds))
		}
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds,
		})
	}
}

// tolerates says whether a toleration covers the key's NoExecute taint.
func tolerates(tolerations []corev1.Toleration, key string) bool {
	for _, t := range tolerations {
		if (t.Key == key || t.Key == "" && t.Operator == corev1.TolerationOpExists) &&
			(t.Effect == "" || t.Effect == corev1.TaintEffectNoExecute) {
			return true
		}
	}
	return false
}

// forceDeletable are the pods being deleted on nodes where no kubelet will
// confirm it and the job's proof holds (nodeOutage.forceDeleteAt): fenced,
// or silent for forceBound. wait is when the next pod reaches its time, 0
// when none waits.
func forceDeletable(pods []*corev1.Pod, outages map[string]nodeOutage, forceBound time.Duration, now time.Time) (doomed []*corev1.Pod, wait time.Duration) {
	for _, p := range pods {
		if p.DeletionTimestamp == nil || p.Spec.NodeName == "" {
			continue
		}
		o, ok := outages[p.Spec.NodeName]
		if !ok {
			continue
		}
		at, ok := o.forceDeleteAt(forceBound)
		if !ok {
			continue
		}
		if left := at.Sub(now); left > 0 {
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		doomed = append(doomed, p)
	}
	return doomed, wait
}

// outages reads, from the cache, the nodes the pods are bound to, and
// returns those unavailable. A node the cache lacks is gone: the pod
// garbage collector deals with its pods.
func (r *TrainingJobReconciler) outages(ctx context.Context, pods []*corev1.Pod) (map[string]nodeOutage, error) {
	out := map[string]nodeOutage{}
	seen := map[string]bool{}
	for _, p := range pods {
		name := p.Spec.NodeName
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		var n corev1.Node
		// Read only (outageOf): a Node, its images and conditions, is
		// large, and this runs on every reconcile of a gang-scoped job.
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &n, client.UnsafeDisableDeepCopy); err != nil {
			if client.IgnoreNotFound(err) == nil {
				continue
			}
			return nil, fmt.Errorf("getting node %s: %w", name, err)
		}
		if o, ok := outageOf(&n); ok {
			out[name] = o
		}
	}
	return out, nil
}

// ensureUnreachableReleased force-deletes (grace period 0) the job's pods
// that are being deleted on nodes where the proof holds (forceDeletable),
// whoever deleted them (a gang restart, the taint manager, a user), and
// says when to look again for those still waiting for it.
func (r *TrainingJobReconciler) ensureUnreachableReleased(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod, outages map[string]nodeOutage) (time.Duration, error) {
	bound := time.Duration(unreachableForceDelete(job)) * time.Second
	doomed, wait := forceDeletable(pods, outages, bound, r.Clock.Now())
	if wait > 0 {
		ctrl.LoggerFrom(ctx).V(4).Info("Pods on silent nodes wait for their kubelet before a force-delete", "timeLeft", wait, "unreachableForceDeleteSeconds", bound)
	}
	if len(doomed) == 0 {
		return wait, nil
	}
	_, _, err := r.forEach(doomed, func(p *corev1.Pod) error {
		err := r.Client.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID})
		if err == nil {
			ctrl.LoggerFrom(ctx).V(2).Info("Force-deleted a pod on an unreachable node", "pod", klog.KObj(p), "node", p.Spec.NodeName)
		}
		return client.IgnoreNotFound(err)
	})
	if err != nil {
		return 0, fmt.Errorf("force-deleting pods of %s on unreachable nodes: %w", klog.KObj(job), err)
	}
	return wait, nil
}

// nodeAvailability is what of a node the node-loss path reads: a node
// event that leaves it unchanged (a heartbeat, a label) wakes no job.
func nodeAvailability(n *corev1.Node) string {
	var b strings.Builder
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			b.WriteString(string(c.Status))
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService || t.Effect == corev1.TaintEffectNoExecute &&
			(t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) {
			fmt.Fprintf(&b, "|%s:%s", t.Key, t.Effect)
		}
	}
	return b.String()
}

// nodeAvailabilityChanged passes node updates that change its Ready status
// or the taints that mark it unavailable.
var nodeAvailabilityChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		return ok1 && ok2 && nodeAvailability(o) != nodeAvailability(n)
	},
}

// jobsOnNode maps a node to the jobs with pods on it, through the cache's
// spec.nodeName index.
func (r *TrainingJobReconciler) jobsOnNode(ctx context.Context, obj client.Object) []reconcile.Request {
	var pods corev1.PodList
	// Read only: the owners are all it needs.
	if err := r.Client.List(ctx, &pods, client.MatchingFields{podNodeNameField: obj.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the pods of a node", "node", obj.GetName())
		return nil
	}
	seen := map[types.NamespacedName]bool{}
	var reqs []reconcile.Request
	for _, p := range pods.Items {
		ref := jobOwner(&p)
		if ref == nil {
			continue
		}
		key := types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}
		if !seen[key] {
			seen[key] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: key})
		}
	}
	return reqs
}

// podNodeName is the podNodeNameField index: a bound pod's node.
func podNodeName(o client.Object) []string {
	if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}
	}
	return nil
}

// watchNodes indexes pods by node and enqueues the jobs on a node whose
// availability changed.
func (r *TrainingJobReconciler) watchNodes(mgr ctrl.Manager, b *ctrl.Builder) (*ctrl.Builder, error) {
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podNodeNameField, podNodeName)
	if err != nil {
		return nil, fmt.Errorf("indexing pods by node: %w", err)
	}
	return b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.jobsOnNode),
		builder.WithPredicates(nodeAvailabilityChanged)), nil
}

// observeNodeLoss assesses the job's members on unavailable nodes and,
// under a gang scope, marks those past the bound as lost in obs. Other
// scopes leave dark members to the taint manager, which evicts them when
// the pods' tolerations (the same bound) run out, and to
// ensureUnreachableReleased: the member is then recreated like any other
// that went missing.
func (r *TrainingJobReconciler) observeNodeLoss(ctx context.Context, job *v1alpha1.TrainingJob, obs *observation, pods []*corev1.Pod, scope v1alpha1.RestartScope) (nodeLoss, error) {
	if scope != v1alpha1.RestartScopeGang {
		return nodeLoss{}, nil
	}
	outages, err := r.outages(ctx, pods)
	if err != nil || len(outages) == 0 {
		return nodeLoss{}, err
	}
	// Pods of an earlier incarnation left there are not waited for.
	obs.abandon(job, outages)
	if len(obs.abandoned) > 0 {
		ctrl.LoggerFrom(ctx).V(2).Info("Not waiting for pods of an earlier incarnation on unavailable nodes", "pods", obs.abandoned)
	}
	bound := time.Duration(unreachableTolerance(job)) * time.Second
	nl := assessNodeLoss(*obs, pods, outages, bound, r.Clock.Now())
	if nl.requeueAfter > 0 {
		ctrl.LoggerFrom(ctx).V(2).Info("Members on unavailable nodes, within the tolerance", "timeLeft", nl.requeueAfter, "tolerance", bound)
	}
	nl.markLost(obs)
	return nl, nil
}

// unreachableTolerance is runPolicy.unreachableToleranceSeconds, defaulted.
func unreachableTolerance(job *v1alpha1.TrainingJob) int32 {
	if rp := job.Spec.RunPolicy; rp != nil && rp.UnreachableToleranceSeconds != nil {
		return *rp.UnreachableToleranceSeconds
	}
	return v1alpha1.DefaultUnreachableToleranceSeconds
}

// unreachableForceDelete is runPolicy.unreachableForceDeleteSeconds,
// defaulted.
func unreachableForceDelete(job *v1alpha1.TrainingJob) int32 {
	if rp := job.Spec.RunPolicy; rp != nil && rp.UnreachableForceDeleteSeconds != nil {
		return *rp.UnreachableForceDeleteSeconds
	}
	return v1alpha1.DefaultUnreachableForceDeleteSeconds
}

// releaseUnreachable is ensureUnreachableReleased on the nodes the job's
// pods are bound to.
func (r *TrainingJobReconciler) releaseUnreachable(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod) (time.Duration, error) {
	var terminating []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			terminating = append(terminating, p)
		}
	}
	if len(terminating) == 0 {
		return 0, nil
	}
	outages, err := r.outages(ctx, terminating)
	if err != nil {
		return 0, err
	}
	return r.ensureUnreachableReleased(ctx, job, terminating, outages)
}
