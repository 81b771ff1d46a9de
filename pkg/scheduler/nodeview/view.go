// Package nodeview is the TopologyPlacement plugin's view of the nodes:
// what their NodeTopology objects and the DRA driver's ResourceSlices and
// ResourceClaims say, kept by informer events (one handler per informer),
// and the planner's snapshot built from it and the scheduler's NodeInfos
// (View.Snapshot). It answers what a pod asks for (View.Request), which
// GPUs of a node are free and how well they connect, and which nodes are
// left out of planning (stale or invalid NodeTopology).
//
// Capacity held for gangs is the gang manager's: the view reads it through
// Held, two methods, and never writes it. It imports neither the plugin
// nor the gang manager (internal/arch), so either can be replaced, and the
// view tested, alone.
package nodeview

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Held is the capacity the gang manager's books hold for gangs, read once
// per snapshot under one lock: LockCore returns the books locked, UnlockCore
// releases them. The view only reads them.
type Held interface {
	LockCore() *placement.Books
	UnlockCore()
}

// Config is what a View is given.
type Config struct {
	// Topology is the levels the domain tree is built on and the
	// oversubscription the cost model rates plans with.
	Topology lockstep.TopologyConfig
	// MaxAge is how old a NodeTopology's heartbeat may be before its node
	// is left out of planning; 0 never judges staleness.
	MaxAge time.Duration
	// Held is the gang manager's books.
	Held Held
	// Clock judges staleness; nil is the real clock.
	Clock clock.Clock
	// Recorder, when set, says each node leaving or rejoining planning in
	// an event on its NodeTopology.
	Recorder events.EventRecorder
	Logger   klog.Logger
	// Excluded is the nodes_excluded gauge (by reason) and Unjoined the
	// count of DRA devices that join no GPU; either may be nil.
	Excluded *metrics.GaugeVec
	Unjoined *metrics.Gauge
	// Freed, when set, is called after a NodeTopology change that can make
	// room: a node indexed anew or with other hardware, or GPUs free that
	// were not (a heartbeat changes none of these); and after a
	// ResourceClaim let go of GPU devices it held, when FollowDevices
	// feeds the DRA view.
	Freed func()
	// Rejoined, when set, is called after a refresh in which some node
	// became usable again.
	Rejoined func()
	// Changed, when set, is called with every NodeTopology added (old nil)
	// or updated, after the view took it: the plugin's books take the
	// allocations the agent reports from it.
	Changed func(old, nt *v1alpha1.NodeTopology)
	// DRA reads claims, templates, ResourceSlices and allocated devices;
	// nil (a scheduler without DRA) leaves claims to whoever serves them.
	// Without WatchDevices, each plan of a pod that claims GPUs builds the
	// devices from it.
	DRA Source
}

// View is the node view; see the package doc. Its methods are safe for
// concurrent use.
type View struct {
	logger  klog.Logger
	config  lockstep.TopologyConfig
	held    Held
	specs   *specTable
	gpus    *gpuIndex
	trees   *treeCache
	rows    *snapshotRows
	health  *topologyHealth
	dra     Source
	devices *deviceView
	// unjoined is Config.Unjoined, never nil.
	unjoined *metrics.Gauge
	changed  func(old, nt *v1alpha1.NodeTopology)
}

// New returns an empty view.
func New(c Config) *View {
	specs := newSpecTable()
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	excluded := c.Excluded
	if excluded == nil {
		excluded = metrics.NewGaugeVec(&metrics.GaugeOpts{Name: "unregistered_nodes_excluded"}, []string{"reason"})
	}
	unjoined := c.Unjoined
	if unjoined == nil {
		unjoined = metrics.NewGauge(&metrics.GaugeOpts{Name: "unregistered_dra_unjoined_devices"})
	}
	v := &View{
		logger: c.Logger, config: c.Topology, held: c.Held, specs: specs,
		gpus: newGPUIndex(specs), trees: &treeCache{}, rows: &snapshotRows{},
		health: newTopologyHealth(c.MaxAge, c.Clock, c.Recorder, excluded, c.Logger),
		dra:    c.DRA, unjoined: unjoined, changed: c.Changed,
	}
	v.gpus.freed = c.Freed
	v.health.specs = specs
	v.health.rejoined = c.Rejoined
	return v
}

// Handler is the NodeTopology informer's one handler: it keeps the GPU
// index, the health records and the GPU UUIDs in step, in that order, and
// then tells Config.Changed.
func (v *View) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				v.Set(nil, nt)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			old, _ := oldObj.(*v1alpha1.NodeTopology)
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				v.Set(old, nt)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				v.Delete(nt.Name)
			}
		},
	}
}

// Set takes a NodeTopology added (old nil) or updated, as the informer
// delivers it (slimmed by the informer's transform, NewInformer).
func (v *View) Set(old, nt *v1alpha1.NodeTopology) {
	v.gpus.set(nt)
	v.health.set(nt)
	if v.changed != nil {
		v.changed(old, nt)
	}
}

// Delete forgets a node's NodeTopology.
func (v *View) Delete(node string) {
	v.gpus.remove(node)
	v.health.remove(node)
	v.specs.forgetUUIDs(node)
}

// Slim is the NodeTopology informer's transform (NewInformer), for callers
// that feed Set objects of their own.
func (v *View) Slim(nt *v1alpha1.NodeTopology) *v1alpha1.NodeTopology {
	// slim changes the object in place and never fails for a NodeTopology.
	_, _ = v.specs.slim(nt)
	return nt
}

// Request is what one pod asks for.
type Request struct {
	// GPUs counts the GPUs the pod asks for, through nvidia.com/gpu or
	// through ResourceClaims of the GPU DeviceClass (Claimed).
	GPUs     int
	MilliCPU int64
	Memory   int64
	// Claimed says the GPUs are asked for through ResourceClaims;
	// ClaimProblem why those claims cannot be planned, and
	// ClaimUnresolvable whether only the user can fix that.
	Claimed           bool
	ClaimProblem      string
	ClaimUnresolvable bool
	// OneRoot says the claim asks for one PCIe root first.
	OneRoot bool
	// Channels says the pod's own claims take a ComputeDomain channel of
	// its node.
	Channels bool
}

// ResourceGPUs is the nvidia.com/gpu count of the request: its GPUs unless
// they are claimed.
func (r Request) ResourceGPUs() int {
	if r.Claimed {
		return 0
	}
	return r.GPUs
}

// Request is what pod asks for: its containers' requests, with the GPUs
// it asks for through claims of the GPU DeviceClass when the scheduler
// serves DRA. A pod asks for GPUs one way: asking both ways is a problem,
// as is a claim the planner cannot predict.
func (v *View) Request(pod *v1.Pod) Request {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	gpus := reqs[lockstep.GPUResource]
	req := Request{GPUs: int(gpus.Value()), MilliCPU: reqs.Cpu().MilliValue(), Memory: reqs.Memory().Value()}
	if v.dra == nil || len(pod.Spec.ResourceClaims) == 0 {
		return req
	}
	c := claimedGPUsOf(v.dra, pod)
	switch {
	case c.problem != "":
		req.ClaimProblem, req.ClaimUnresolvable = c.problem, c.unresolvable
	case c.gpus > 0 && req.GPUs > 0:
		req.ClaimProblem, req.ClaimUnresolvable = fmt.Sprintf("the pod asks for %d %s and for %d GPUs through ResourceClaims of DeviceClass %s; ask one way", req.GPUs, lockstep.GPUResource, c.gpus, lockstep.DRAGPUDeviceClass), true
	case c.gpus > 0:
		req.GPUs, req.Claimed, req.OneRoot = c.gpus, true, c.oneRoot
	}
	req.Channels = c.problem == "" && c.channels > 0
	return req
}

// HasDRA reports whether the view reads DRA objects.
func (v *View) HasDRA() bool { return v.dra != nil }

// GPUCount returns how many GPUs node's NodeTopology lists.
func (v *View) GPUCount(node string) (int, bool) {
	n, ok := v.gpus.get(node)
	if !ok || n.topology == nil {
		return 0, false
	}
	return n.topology.NumGPUs(), true
}

// AllocatedTo returns the GPUs node's agent reports pod (by UID) holding.
func (v *View) AllocatedTo(node, pod string) (topology.GPUSet, bool) {
	return v.gpus.allocatedTo(node, pod)
}

// BestFree returns the NVLink-best set of k of node's GPUs that the agent
// reports free and no gang holds, and its quality; false for a node
// without a NodeTopology or without k such GPUs.
func (v *View) BestFree(node string, k int) (topology.GPUSet, topology.SetQuality, bool) {
	gpus, ok := v.gpus.get(node)
	if !ok {
		return 0, topology.SetQuality{}, false
	}
	return gpus.selector.Best(gpus.free&^v.heldOn(node, ""), k)
}

// heldOn is what the books hold on node for gangs other than except.
func (v *View) heldOn(node, except string) topology.GPUSet {
	core := v.held.LockCore()
	defer v.held.UnlockCore()
	return core.HeldOn(node, except)
}

// Exclusion says why a node is left out of gang planning.
type Exclusion = exclusion

// Excluded judges the nodes whose NodeTopology may have turned stale or
// changed validity since the last call, says each change once, and returns
// the nodes planning leaves out (nil when none are). The map is shared:
// callers only read it.
func (v *View) Excluded() map[string]Exclusion { return v.health.refresh() }

// Tree returns the domain tree of nodeInfos' nodes on the view's levels,
// kept between calls while the nodes and their labels stay the same.
func (v *View) Tree(nodeInfos []fwk.NodeInfo) (*topology.Tree, error) {
	return v.trees.get(nodeInfos, v.config.Levels, false)
}

// Recycle gives snap's node arrays to the next snapshot: the caller is done
// with snap and everything it holds (a Decision names nodes by name and
// domains of the tree, never a snapshot node).
func (v *View) Recycle(snap *placement.Snapshot) { v.rows.recycle(snap) }
