// Package coscheduling is LockstepCoscheduling: scheduler-plugins'
// Coscheduling (v0.34.7) as a plugin of our own over its exported PodGroup
// manager (core.NewPodGroupManager, core.Manager), with upstream's PodGroup
// semantics at every extension point and four differences:
//
//   - EventsToRegister carry QueueingHints and include the events that free
//     capacity (package requeue);
//   - the manager counts the gang members another leader bound, and no
//     longer counts a bound member once it is being deleted
//     (countLateBindings); PreFilter counts no such member as a sibling;
//   - PreFilter lets a PodGroup of one member through, and sums the
//     cluster's free capacity for minResources without copying every node
//     (prefilter.go);
//   - the manager lists a gang's pods from the PodGroup index
//     (podgroupindex.Informer).
//
// Why events of our own. Coscheduling rejects a gang at PreFilter when its
// PodGroup's minResources do not fit the cluster's free capacity (TrainingJob
// PodGroups and those of other operators, such as Kubeflow's
// training-operator, set them). PreFilter stops at the first
// UnschedulableAndUnresolvable status, so the pod's unschedulable plugins
// are then {LockstepCoscheduling} alone, and the queue retries it only on
// events this plugin registered: upstream registers pod additions and
// PodGroup changes, never the pod deletions and node changes that free
// capacity, and the gang waited for the queue's 5-minute flush of
// unschedulable pods.
//
// The upstream plugin stays registered as "Coscheduling" for the benchmark's
// stock baseline (cmd/lockstep-bench).
package coscheduling

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/scheduler-plugins/apis/config"
	pluginsscheme "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	configv1 "sigs.k8s.io/scheduler-plugins/apis/config/v1"
	"sigs.k8s.io/scheduler-plugins/apis/config/validation"
	"sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"
	"sigs.k8s.io/scheduler-plugins/pkg/util"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/pluginargs"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/requeue"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "LockstepCoscheduling"

// Coscheduling orders the queue by PodGroup, turns away gangs that cannot
// be scheduled yet at PreFilter, and holds reserved members at Permit until
// minMember of the gang are reserved. The gang's assigned members and
// failures are the manager's; its backoff and minResources admissions,
// which the manager keeps unexported, are the plugin's (prefilter.go).
type Coscheduling struct {
	handle framework.Handle
	mgr    core.Manager
	// pods lists a gang's members (podgroupindex.Members).
	pods corev1informers.PodInformer
	// scheduleTimeout is how long members wait at Permit, unless the
	// PodGroup says otherwise (scheduleTimeoutSeconds).
	scheduleTimeout time.Duration
	// rejectThreshold is the share of minMember a gang may lack at
	// PostFilter and still keep its waiting members (podGroupRejectPercentage).
	rejectThreshold float64
	// backoff turns a gang away at PreFilter for a while after it failed
	// (podGroupBackoffSeconds); nil when that is 0.
	backoff *expiring
	// admitted are the PodGroups whose minResources PreFilter found to fit,
	// not checked again for scheduleTimeout.
	admitted *expiring
	// free keeps the cluster's free capacity summed for the minResources
	// check (clusterfree.go).
	free *clusterFree
}

var (
	_ framework.QueueSortPlugin   = &Coscheduling{}
	_ framework.PreFilterPlugin   = &Coscheduling{}
	_ framework.PostFilterPlugin  = &Coscheduling{}
	_ framework.PermitPlugin      = &Coscheduling{}
	_ framework.ReservePlugin     = &Coscheduling{}
	_ framework.EnqueueExtensions = &Coscheduling{}
)

// New builds the plugin from CoschedulingArgs (the pluginConfig args of
// Name take the same fields) and a PodGroup manager of its own.
func New(ctx context.Context, obj runtime.Object, h framework.Handle) (framework.Plugin, error) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name)
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	if err := validation.ValidateCoschedulingArgs(args, nil); err != nil {
		return nil, err
	}
	if args.PodGroupBackoffSeconds < 0 {
		return nil, fmt.Errorf("%s args: podGroupBackoffSeconds %d is negative", Name, args.PodGroupBackoffSeconds)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// The PodGroups are read from a cache of their own, as upstream reads
	// them.
	c, _, err := util.NewClientWithCachedReader(ctx, h.KubeConfig(), scheme)
	if err != nil {
		return nil, err
	}
	pods := h.SharedInformerFactory().Core().V1().Pods()
	// Upstream adds the namespace index, and then never checks the error:
	// the other Coscheduling of the process (the stock one, or another
	// profile's) may have added it first.
	_ = pods.Informer().AddIndexers(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := podgroupindex.Register(pods.Informer()); err != nil {
		logger.Error(err, "Listing gangs' pods without the PodGroup index")
	}
	p := newPlugin(h, args, pods)
	mgr := core.NewPodGroupManager(c, h.SnapshotSharedLister(), &p.scheduleTimeout, podgroupindex.Informer(pods))
	if err := countLateBindings(mgr, pods.Informer()); err != nil {
		return nil, err
	}
	p.mgr = mgr
	return p, nil
}

// newPlugin is the plugin of args without its manager.
func newPlugin(h framework.Handle, args *config.CoschedulingArgs, pods corev1informers.PodInformer) *Coscheduling {
	p := &Coscheduling{
		handle:          h,
		pods:            pods,
		scheduleTimeout: time.Duration(args.PermitWaitingTimeSeconds) * time.Second,
		rejectThreshold: float64(args.PodGroupRejectPercentage) / 100,
		free:            &clusterFree{},
	}
	p.admitted = newExpiring(p.scheduleTimeout, time.Now)
	if args.PodGroupBackoffSeconds > 0 {
		p.backoff = newExpiring(time.Duration(args.PodGroupBackoffSeconds)*time.Second, time.Now)
	}
	return p
}

// Name returns Name: the framework records rejections and waiting pods
// under it.
func (c *Coscheduling) Name() string { return Name }

// EventsToRegister are the capacity events of package requeue plus what
// upstream registers for its sibling count: a pod of the gang added (or,
// new here, its scheduling gates removed: Coscheduling also waits for gated
// members). NodeTopology is not registered: Coscheduling reads node
// allocatable, which the device plugin updates, never NodeTopology.
func (c *Coscheduling) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return append(requeue.CapacityEvents(),
		fwk.ClusterEventWithHint{
			Event:          fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add | fwk.UpdatePodSchedulingGatesEliminated},
			QueueingHintFn: requeue.SiblingChanged,
		},
	), nil
}

// Less orders the queue by priority, then by the creation of the pod's
// PodGroup (or of the pod outside gangs; the last failure of a PodGroup
// that failed recently, so a gang that cannot fit does not block the queue
// head), then by name, so a gang's members come one after another.
func (c *Coscheduling) Less(a, b fwk.QueuedPodInfo) bool {
	podA, podB := a.GetPodInfo().GetPod(), b.GetPodInfo().GetPod()
	if pa, pb := corev1helpers.PodPriority(podA), corev1helpers.PodPriority(podB); pa != pb {
		return pa > pb
	}
	// Less has no context; the manager reads its PodGroup cache.
	ctx := context.Background()
	ta := c.mgr.GetCreationTimestamp(ctx, podA, *a.GetInitialAttemptTimestamp())
	tb := c.mgr.GetCreationTimestamp(ctx, podB, *b.GetInitialAttemptTimestamp())
	if ta.Equal(tb) {
		return core.GetNamespacedName(podA) < core.GetNamespacedName(podB)
	}
	return ta.Before(tb)
}

// PreFilterExtensions returns nil: PreFilter keeps no per-node state.
func (c *Coscheduling) PreFilterExtensions() framework.PreFilterExtensions { return nil }

// PostFilter gives up on the pod's whole gang when the pod fits nowhere and
// too much of the gang is unassigned to expect the rest to make up for it:
// it rejects the gang's waiting members, backs the gang off and drops its
// admission, so the gang is tried again as a whole.
func (c *Coscheduling) PostFilter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ framework.NodeToStatusReader) (*framework.PostFilterResult, *fwk.Status) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "pod", klog.KObj(pod))
	pgName, pg := c.mgr.GetPodGroup(ctx, pod)
	if pg == nil {
		logger.V(4).Info("Pod does not belong to any group")
		return &framework.PostFilterResult{}, fwk.NewStatus(fwk.Unschedulable, "can not find pod group")
	}
	// Enough members are assigned already: the gang does not hang on this
	// one.
	assigned := c.mgr.GetAssignedPodCount(pgName)
	if assigned >= int(pg.Spec.MinMember) {
		logger.V(4).Info("Assigned pods", "podGroup", klog.KObj(pg), "assigned", assigned)
		return &framework.PostFilterResult{}, fwk.NewStatus(fwk.Unschedulable)
	}
	// A small gap: the members after this one may still close it.
	if missing := float64(int(pg.Spec.MinMember)-assigned) / float64(pg.Spec.MinMember); missing <= c.rejectThreshold {
		logger.V(4).Info("A small gap of pods to reach the quorum", "podGroup", klog.KObj(pg), "percentage", missing)
		return &framework.PostFilterResult{}, fwk.NewStatus(fwk.Unschedulable)
	}
	// One member fitting nowhere says its siblings likely do not either.
	c.rejectWaiting(ctx, pod.Namespace, pg.Name, "optimistic rejection in PostFilter")
	if c.backoff != nil {
		if members, err := liveMembers(c.pods, pod.Namespace, pg.Name); err == nil && len(members) >= int(pg.Spec.MinMember) {
			c.backoff.add(pgName)
		}
	}
	c.admitted.delete(pgName)
	c.mgr.MarkPodGroupScheduleFailure(pgName)
	return &framework.PostFilterResult{}, fwk.NewStatus(fwk.Unschedulable,
		fmt.Sprintf("PodGroup %v gets rejected due to Pod %v is unschedulable even after PostFilter", pgName, pod.Name))
}

// Permit lets the pod through once minMember of its gang are assigned,
// releasing the gang's waiting members with it, and makes it wait for the
// rest otherwise (the PodGroup's scheduleTimeoutSeconds, or
// permitWaitingTimeSeconds).
func (c *Coscheduling) Permit(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) (*fwk.Status, time.Duration) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "pod", klog.KObj(pod))
	switch c.mgr.Permit(ctx, state, pod) {
	case core.PodGroupNotSpecified:
		return nil, 0
	case core.PodGroupNotFound:
		return fwk.NewStatus(fwk.Unschedulable, "PodGroup not found"), 0
	case core.Wait:
		logger.V(2).Info("Pod is waiting for its gang", "node", nodeName)
		wait := c.scheduleTimeout
		_, pg := c.mgr.GetPodGroup(ctx, pod)
		if d := util.GetWaitTimeDuration(pg, &c.scheduleTimeout); d != 0 {
			wait = d
		}
		// The first member to wait asks for its siblings to be tried now.
		c.mgr.ActivateSiblings(ctx, pod, state)
		return fwk.NewStatus(fwk.Wait), wait
	case core.Success:
		gang := util.GetPodGroupFullName(pod)
		c.mgr.ClearPodGroupScheduleFailure(gang)
		c.handle.IterateOverWaitingPods(func(wp framework.WaitingPod) {
			if util.GetPodGroupFullName(wp.GetPod()) == gang {
				logger.V(3).Info("Permit allows", "member", klog.KObj(wp.GetPod()))
				wp.Allow(c.Name())
			}
		})
		logger.V(3).Info("Permit allows")
		return nil, 0
	}
	// The manager has no other outcome.
	return fwk.AsStatus(fmt.Errorf("%s: unknown Permit outcome for pod %s", Name, klog.KObj(pod))), 0
}

// Reserve does nothing: the manager counts a member as assigned at Permit.
func (c *Coscheduling) Reserve(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status {
	return nil
}

// Unreserve fails the pod's whole gang when one member fails after Permit
// (its wait timed out, or a later plugin refused it): the waiting members
// are rejected, and the gang is tried again as a whole.
func (c *Coscheduling) Unreserve(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) {
	pgName, pg := c.mgr.GetPodGroup(ctx, pod)
	if pg == nil {
		return
	}
	c.mgr.Unreserve(ctx, pod)
	c.rejectWaiting(ctx, pod.Namespace, pg.Name, "rejection in Unreserve")
	c.admitted.delete(pgName)
	c.mgr.MarkPodGroupScheduleFailure(pgName)
}

// rejectWaiting rejects the waiting members of PodGroup ns/name.
func (c *Coscheduling) rejectWaiting(ctx context.Context, ns, name, msg string) {
	logger := klog.FromContext(ctx)
	c.handle.IterateOverWaitingPods(func(wp framework.WaitingPod) {
		if p := wp.GetPod(); p.Namespace == ns && util.GetPodGroupLabel(p) == name {
			logger.V(3).Info("Rejecting a waiting gang member", "plugin", Name, "member", klog.KObj(p), "podGroup", klog.KRef(ns, name), "reason", msg)
			wp.Reject(c.Name(), msg)
		}
	})
}

// decodeArgs turns the configured args into internal CoschedulingArgs with
// upstream's defaults. The scheduler decodes pluginConfig args by kind
// <Name>Args, which no scheme registers for this name, so they arrive raw
// (runtime.Unknown), or nil when none are configured.
func decodeArgs(obj runtime.Object) (*config.CoschedulingArgs, error) {
	versioned := &configv1.CoschedulingArgs{}
	switch raw := obj.(type) {
	case nil:
	case *runtime.Unknown:
		if err := pluginargs.DecodeStrict(raw.Raw, versioned); err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
	case *config.CoschedulingArgs:
		return raw, nil
	default:
		return nil, fmt.Errorf("%s args: want CoschedulingArgs fields, got %T", Name, obj)
	}
	pluginsscheme.Scheme.Default(versioned)
	args := &config.CoschedulingArgs{}
	if err := pluginsscheme.Scheme.Convert(versioned, args, nil); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	return args, nil
}
