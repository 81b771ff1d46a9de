// Package requeue holds the QueueingHints that retry a gang rejected for lack
// of capacity as soon as an event could make it fit.
//
// The scheduling queue (kube-scheduler 1.34, SchedulerQueueingHints is GA)
// moves an unschedulable pod back to the active or backoff queue only when an
// event arrives that the plugin which rejected it registered in
// EventsToRegister, and that plugin's hint for the event says Queue. A pod
// rejected by a plugin that did not register the event waits for the
// periodic flush (podMaxInUnschedulablePodsDuration, 5 minutes). Both
// plugins that reject gangs, LockstepCoscheduling (pkg/scheduler/
// coscheduling) and TopologyPlacement, register their events with these
// hints.
//
// Each hint is precise where that is cheap and certain, and says Queue when
// unsure: a needless retry costs one scheduling cycle per member, a missed
// one up to five minutes.
package requeue

import (
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Event resources of the custom resources, as the scheduler names the
// dynamic informers it starts for them (<plural>.<version>.<group>).
const (
	PodGroupResource     fwk.EventResource = "podgroups.v1alpha1.scheduling.x-k8s.io"
	NodeTopologyResource fwk.EventResource = "nodetopologies.v1alpha1.lockstep.dev"
)

// NodeActions are the node changes NodeChanged looks at.
const NodeActions = fwk.Add | fwk.UpdateNodeAllocatable | fwk.UpdateNodeLabel | fwk.UpdateNodeTaint

// CapacityEvents are the events that can free capacity or change what a gang
// asks for, with their hints: a bound pod deleted or finished (the
// scheduler's pod informer drops Succeeded and Failed pods, so a pod that
// finishes arrives as a delete), a bound pod scaled down in place, a node
// added or grown, and the gang's own PodGroup created or changed.
func CapacityEvents() []fwk.ClusterEventWithHint {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: PodDeleted},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.UpdatePodScaleDown}, QueueingHintFn: PodScaledDown},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: NodeActions}, QueueingHintFn: NodeChanged},
		{Event: fwk.ClusterEvent{Resource: PodGroupResource, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: PodGroupChanged},
	}
}

// DRAEvents are the events that free or add DRA devices, for the plugin
// that turns away gangs whose GPUs come through ResourceClaims
// (TopologyPlacement): a claim's devices freed (its allocation removed, or
// an allocated claim deleted) and a ResourceSlice published or changed. The
// pod informer sees a finished pod before its claim is deallocated, so a
// retry on the pod's deletion alone can come too early for the devices.
func DRAEvents() []fwk.ClusterEventWithHint {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Update | fwk.Delete}, QueueingHintFn: ClaimFreed},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: SliceChanged},
	}
}

// ClaimFreed queues a pod that claims devices when another claim's devices
// are freed: its allocation removed, or the claim deleted while allocated.
// Pods without claims cannot use DRA devices.
func ClaimFreed(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if len(pod.Spec.ResourceClaims) == 0 || oldObj == nil {
		return fwk.QueueSkip, nil
	}
	old, err := as[resourcev1.ResourceClaim](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	if old.Status.Allocation == nil {
		return fwk.QueueSkip, nil
	}
	if newObj != nil {
		claim, err := as[resourcev1.ResourceClaim](newObj)
		if err != nil {
			return fwk.Queue, err
		}
		if claim.Status.Allocation != nil {
			return fwk.QueueSkip, nil
		}
	}
	logger.V(5).Info("Claim's devices freed", "pod", klog.KObj(pod), "claim", klog.KObj(old))
	return fwk.Queue, nil
}

// SliceChanged queues a pod that claims devices when a ResourceSlice is
// published or changes: devices may have been added or become healthy.
func SliceChanged(_ klog.Logger, pod *v1.Pod, _, _ any) (fwk.QueueingHint, error) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// PodDeleted queues when the deleted pod held room on a node: it was bound
// (or assumed: forgetting a pod reserved at Permit is reported as a delete
// of the assumed copy, which carries the node), or it was nominated for a
// node after preemption. Any bound pod counts, whatever it requested: it
// also freed a pod slot, and Coscheduling's minResources include `pods`.
// An unbound, unnominated pod held nothing.
func PodDeleted(logger klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	deleted, err := as[v1.Pod](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	if deleted.UID == pod.UID {
		return fwk.QueueSkip, nil
	}
	if deleted.Spec.NodeName == "" && deleted.Status.NominatedNodeName == "" {
		logger.V(5).Info("Deleted pod held no node", "pod", klog.KObj(pod), "deleted", klog.KObj(deleted))
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("Deleted pod freed room on a node", "pod", klog.KObj(pod), "deleted", klog.KObj(deleted), "node", deleted.Spec.NodeName)
	return fwk.Queue, nil
}

// PodScaledDown queues when a bound pod's requests shrank in place (the
// event itself says some request went down).
func PodScaledDown(_ klog.Logger, pod *v1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	updated, err := as[v1.Pod](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if updated.UID == pod.UID || updated.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// NodeChanged queues when a node was added schedulable, or changed so that
// it may take more: it became schedulable, some allocatable resource grew or
// appeared, a taint was removed, or its labels changed (topology domains and
// node affinity are read from labels). A node added unschedulable is
// skipped: the update that makes it schedulable queues. Shrinking nodes,
// added taints and condition or annotation changes are skipped.
func NodeChanged(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	node, err := as[v1.Node](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if oldObj == nil {
		if node.Spec.Unschedulable {
			return fwk.QueueSkip, nil
		}
		return fwk.Queue, nil
	}
	old, err := as[v1.Node](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	switch {
	case node.Spec.Unschedulable:
		return fwk.QueueSkip, nil
	case old.Spec.Unschedulable:
		return fwk.Queue, nil
	case grew(old.Status.Allocatable, node.Status.Allocatable):
		return fwk.Queue, nil
	case taintRemoved(old.Spec.Taints, node.Spec.Taints):
		return fwk.Queue, nil
	case !maps.Equal(old.Labels, node.Labels):
		return fwk.Queue, nil
	}
	logger.V(5).Info("Node change frees nothing", "pod", klog.KObj(pod), "node", klog.KObj(node))
	return fwk.QueueSkip, nil
}

// grew reports whether some resource of after is larger than in before, or
// new.
func grew(before, after v1.ResourceList) bool {
	for name, q := range after {
		b, ok := before[name]
		if !ok {
			if !q.IsZero() {
				return true
			}
			continue
		}
		if q.Cmp(b) > 0 {
			return true
		}
	}
	return false
}

// taintRemoved reports whether some taint of before is not in after.
func taintRemoved(before, after []v1.Taint) bool {
	for i := range before {
		if !slices.ContainsFunc(after, func(t v1.Taint) bool { return before[i].MatchTaint(&t) }) {
			return true
		}
	}
	return false
}

// PodGroupChanged queues when the pod's own PodGroup was created, or its
// spec (minMember, minResources, timeout) or topology constraint
// annotations changed. Status updates and other gangs' PodGroups are
// skipped.
func PodGroupChanged(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	pg, err := as[schedv1alpha1.PodGroup](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if pg.Namespace != pod.Namespace || pg.Name == "" || pg.Name != pod.Labels[schedv1alpha1.PodGroupLabel] {
		return fwk.QueueSkip, nil
	}
	if oldObj == nil {
		return fwk.Queue, nil
	}
	old, err := as[schedv1alpha1.PodGroup](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	if !equality.Semantic.DeepEqual(old.Spec, pg.Spec) {
		return fwk.Queue, nil
	}
	for _, key := range []string{lockstep.AnnotationTopologyLevel, lockstep.AnnotationTopologyMode} {
		if old.Annotations[key] != pg.Annotations[key] {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

// SiblingChanged queues when a pod of the same PodGroup was added or lost
// its scheduling gates: Coscheduling turns a gang away while it has fewer
// than minMember pods, or gated ones. kube-scheduler 1.34 shows the creation
// of an unscheduled pod only to pods in a scheduling cycle at that moment
// (the creation of a bound pod to all): members parked before their last
// sibling arrived are retried by Coscheduling's Permit activating siblings,
// or with the rest of the gang by the capacity events.
func SiblingChanged(_ klog.Logger, pod *v1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	other, err := as[v1.Pod](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	gang := pod.Labels[schedv1alpha1.PodGroupLabel]
	if other.UID == pod.UID || gang == "" || other.Namespace != pod.Namespace || other.Labels[schedv1alpha1.PodGroupLabel] != gang {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// NodeTopologyChanged queues when NodeTopologyFreesGPUs says the change
// can make room.
func NodeTopologyChanged(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	frees, err := NodeTopologyFreesGPUs(oldObj, newObj)
	if err != nil || frees {
		return fwk.Queue, err
	}
	logger.V(5).Info("NodeTopology change frees no GPU", "pod", klog.KObj(pod))
	return fwk.QueueSkip, nil
}

// NodeTopologyFreesGPUs reports whether a NodeTopology change can make room
// for GPU pods: the object was created, its hardware description changed,
// or it reports more free GPUs (a GPU healthy and unallocated now that was
// not before: health improved or a pod's GPUs were released; or a larger
// freeGPUs count). Heartbeats and new allocations make none. oldObj is nil
// for a creation; an object that is no NodeTopology is an error.
func NodeTopologyFreesGPUs(oldObj, newObj any) (bool, error) {
	nt, err := as[v1alpha1.NodeTopology](newObj)
	if err != nil {
		return true, err
	}
	if oldObj == nil {
		return true, nil
	}
	old, err := as[v1alpha1.NodeTopology](oldObj)
	if err != nil {
		return true, err
	}
	if !equality.Semantic.DeepEqual(old.Spec, nt.Spec) || nt.Status.FreeGPUs > old.Status.FreeGPUs {
		return true, nil
	}
	before := freeGPUs(old)
	for gpu := range freeGPUs(nt) {
		if !before[gpu] {
			return true, nil
		}
	}
	return false, nil
}

// freeGPUs are the indices of the node's GPUs that are healthy and held by
// no pod.
func freeGPUs(nt *v1alpha1.NodeTopology) map[int32]bool {
	free := map[int32]bool{}
	if len(nt.Spec.GPUs) > 0 {
		for _, g := range nt.Spec.GPUs {
			free[g.Index] = true
		}
	} else {
		for i := range nt.Spec.GPUCount {
			free[i] = true
		}
	}
	for _, h := range nt.Status.GPUHealth {
		delete(free, h.Index)
	}
	for _, a := range nt.Status.Allocations {
		for _, g := range a.GPUs {
			delete(free, g)
		}
	}
	return free
}

// as returns obj as a *T: typed objects come from the scheduler's own
// informers, unstructured ones from the dynamic informers it starts for
// custom resources, and tombstones from deletes it missed.
func as[T any](obj any) (*T, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	switch o := obj.(type) {
	case *T:
		if o == nil {
			return nil, fmt.Errorf("nil %T", o)
		}
		return o, nil
	case *unstructured.Unstructured:
		out := new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			return nil, fmt.Errorf("converting %s %s to %T: %w", o.GetKind(), o.GetName(), out, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want %T, got %T", new(T), obj)
}
