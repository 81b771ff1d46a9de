// Package coscheduling is LockstepCoscheduling: scheduler-plugins'
// Coscheduling (v0.34.7) unchanged at every extension point but one
// (PreFilter lets a PodGroup of one member through: Filter checks its one
// pod more strictly than upstream's cluster-wide minResources sum, which
// costs a scan of every node), registered under its own name with
// EventsToRegister that carry QueueingHints, and counting the gang members
// a previous leader bound (countLateBindings).
//
// Why a wrapper. Coscheduling rejects a gang at PreFilter when its PodGroup's
// minResources do not fit the cluster's free capacity (TrainingJob PodGroups
// and those of other operators, such as Kubeflow's training-operator, set
// them). PreFilter stops at the first UnschedulableAndUnresolvable status, so
// the pod's unschedulable plugins are then {Coscheduling} alone, and the
// queue retries it only on events Coscheduling registered: upstream that is
// pod additions and PodGroup changes, never the pod deletions and node
// changes that free capacity. The gang then waited for the queue's 5-minute
// flush of unschedulable pods. Having TopologyPlacement reject first instead
// does not cover this path: it runs after Coscheduling, and planning a gang
// before Coscheduling has counted its pods would hold capacity for gangs
// still missing members. Coscheduling itself is not ours to edit, so this
// plugin delegates to it and registers the capacity events of package
// requeue, with hints.
//
// The upstream plugin stays registered as "Coscheduling" for the benchmark's
// stock baseline (cmd/lockstep-bench).
package coscheduling

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/scheduler-plugins/apis/config"
	pluginsscheme "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	configv1 "sigs.k8s.io/scheduler-plugins/apis/config/v1"
	upstream "sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/requeue"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "LockstepCoscheduling"

// Coscheduling is upstream Coscheduling under Name, with hinted events.
type Coscheduling struct {
	*upstream.Coscheduling
	// mgr is upstream's PodGroupManager, for the PodGroup lookup PreFilter
	// makes before it delegates.
	mgr *core.PodGroupManager
}

var (
	_ framework.QueueSortPlugin   = &Coscheduling{}
	_ framework.PreFilterPlugin   = &Coscheduling{}
	_ framework.PostFilterPlugin  = &Coscheduling{}
	_ framework.PermitPlugin      = &Coscheduling{}
	_ framework.ReservePlugin     = &Coscheduling{}
	_ framework.EnqueueExtensions = &Coscheduling{}
)

// New builds upstream Coscheduling from CoschedulingArgs (the pluginConfig
// args of Name take the same fields) and wraps it.
func New(ctx context.Context, obj runtime.Object, h framework.Handle) (framework.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	if err := podgroupindex.Register(h.SharedInformerFactory().Core().V1().Pods().Informer()); err != nil {
		klog.FromContext(ctx).Error(err, "Listing gangs' pods without the PodGroup index", "plugin", Name)
	}
	p, err := upstream.New(ctx, args, renamingHandle{Handle: h, rows: &listRows{}})
	if err != nil {
		return nil, err
	}
	cs := p.(*upstream.Coscheduling)
	mgr, err := podGroupManager(cs)
	if err != nil {
		return nil, err
	}
	if err := countLateBindings(mgr, h); err != nil {
		return nil, err
	}
	return &Coscheduling{Coscheduling: cs, mgr: mgr}, nil
}

// PreFilter is upstream's, except for a PodGroup of one member, which it
// lets through. For one member upstream's checks come down to the pod's
// own PodGroup existing (it does: the lookup found it), the pod itself as
// the quorum, and minResources summed over the whole cluster's free
// capacity, which NodeResourcesFit's Filter checks more strictly on each
// node for the one pod. That sum is a scan of every node and its pods
// (CheckClusterResource), and a cluster of many single-pod jobs (each with
// a PodGroup, as the TrainingJob controller writes them) paid it once per
// job: the largest CPU cost of the 100k-GPU scale run (docs/benchmarks.md).
// Backoff of such a group (podGroupBackoffSeconds) is the queue's own pod
// backoff then.
func (c *Coscheduling) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*framework.PreFilterResult, *fwk.Status) {
	if _, pg := c.mgr.GetPodGroup(ctx, pod); pg != nil && pg.Spec.MinMember <= 1 {
		return nil, nil
	}
	return c.Coscheduling.PreFilter(ctx, state, pod, nodes)
}

// Name returns Name: the framework records rejections and looks up hints
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

// decodeArgs turns the configured args into internal CoschedulingArgs with
// upstream's defaults. The scheduler decodes pluginConfig args by kind
// <Name>Args, which no scheme registers for this name, so they arrive raw
// (runtime.Unknown), or nil when none are configured.
func decodeArgs(obj runtime.Object) (*config.CoschedulingArgs, error) {
	versioned := &configv1.CoschedulingArgs{}
	switch raw := obj.(type) {
	case nil:
	case *runtime.Unknown:
		data, err := yaml.YAMLToJSON(raw.Raw)
		if err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
		strictErrs, err := kjson.UnmarshalStrict(data, versioned, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
		if err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
		if len(strictErrs) > 0 {
			return nil, fmt.Errorf("decoding %s args: %v", Name, strictErrs)
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

// renamingHandle gives upstream Coscheduling waiting pods that answer to
// Name: it allows and rejects them under its own name ("Coscheduling"),
// while the framework made them wait under the name of the plugin it
// called, this one. It also gives it a pod lister that lists a PodGroup's
// pods from podgroupindex, not by walking the namespace (upstream lists them
// on every PreFilter, Permit and PostFilter), and the scheduler's snapshot
// with copy-on-write node snapshots (lazySnapshotLister).
type renamingHandle struct {
	framework.Handle
	// rows keeps what the node lists judged between PreFilters.
	rows *listRows
}

func (h renamingHandle) SharedInformerFactory() informers.SharedInformerFactory {
	return podgroupindex.WrapFactory(h.Handle.SharedInformerFactory())
}

func (h renamingHandle) SnapshotSharedLister() framework.SharedLister {
	return lazySnapshotLister{h.Handle.SnapshotSharedLister(), h.rows}
}

func (h renamingHandle) IterateOverWaitingPods(callback func(framework.WaitingPod)) {
	h.Handle.IterateOverWaitingPods(func(wp framework.WaitingPod) { callback(renamedWaitingPod{wp}) })
}

func (h renamingHandle) GetWaitingPod(uid types.UID) framework.WaitingPod {
	wp := h.Handle.GetWaitingPod(uid)
	if wp == nil {
		return nil
	}
	return renamedWaitingPod{wp}
}

// renamedWaitingPod allows and rejects as Name whatever name it is given.
type renamedWaitingPod struct{ framework.WaitingPod }

func (w renamedWaitingPod) GetPod() *v1.Pod { return w.WaitingPod.GetPod() }

func (w renamedWaitingPod) Allow(string) { w.WaitingPod.Allow(Name) }

func (w renamedWaitingPod) Reject(_, msg string) { w.WaitingPod.Reject(Name, msg) }
