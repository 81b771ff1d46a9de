package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// placedPod is what the placement summary needs of a bound pod: its name
// and node, the GPU indices it holds ("0,1"; empty for a pod without GPUs or
// whose GPUs are not known yet), whether it asks for no GPUs at all, and
// the DRA devices its claims were allocated.
type placedPod struct {
	Name string
	Node string
	GPUs string
	// Devices are "<driver>/<pool>/<device>", sorted; none for a pod that
	// holds no DRA device.
	Devices []string
	// NoGPUs: the pod asks for no GPUs (an MPI launcher, a parameter
	// server). The scheduler leaves such pods out of its plans and their
	// rating, and so does the summary; their nodes, CPU-only ones often,
	// need no NodeTopology.
	NoGPUs bool
}

// placementNode is what the placement summary needs of a node of the gang:
// its NodeTopology spec, nil when it has none.
type placementNode struct {
	Topology *v1alpha1.NodeTopologySpec
}

// placementCluster is the cluster as the placement summary sees it: the
// domain tree of every node and the topology.Rater on it, which places the
// reference where the cluster has room, as the scheduler's does.
type placementCluster struct {
	tree  *topology.Tree
	rater *topology.Rater
}

// newPlacementCluster builds the tree of nodes with cfg's levels and its
// Rater, naming node profiles from their labels.
func newPlacementCluster(cfg lockstep.TopologyConfig, nodes []topology.NodeLabels) (*placementCluster, error) {
	tree, err := topology.NewTree(cfg.Levels, nodes)
	if err != nil {
		return nil, fmt.Errorf("building the domain tree: %w", err)
	}
	profiles := make(map[string]string, len(nodes))
	for _, n := range nodes {
		if p, ok := topology.ProfileFromLabels(n.Labels); ok {
			profiles[n.Name] = p.Name
		}
	}
	rater, err := topology.NewRater(cfg, tree, func(n string) string { return profiles[n] }, topology.DefaultMessageBytes)
	if err != nil {
		return nil, err
	}
	return &placementCluster{tree: tree, rater: rater}, nil
}

// placementCache keeps the placementCluster between reconciles: the tree
// and the Rater's references cost O(nodes) to build, and a running job is
// summarized on each of its reconciles. The cluster is checked again only
// when the node set may have changed: watchNodeSet bumps generation when a
// node comes, goes, or changes a label the cluster is built from, so the
// reconcile of a running job neither lists nor copies a Node. Without that
// watch (a reconciler not set up with a manager, as in unit tests) every
// get lists the nodes. Either way the cluster is rebuilt only when its
// fingerprint (node names and those labels) changed.
type placementCache struct {
	// watched says watchNodeSet keeps generation current.
	watched    atomic.Bool
	generation atomic.Uint64

	mu sync.Mutex
	// checked is the generation the cluster was last checked at.
	checked     uint64
	fingerprint uint64
	cluster     *placementCluster
}

// get returns the cluster of the nodes r lists, from the cache when the
// node set has not changed since it was built.
func (c *placementCache) get(ctx context.Context, r client.Reader, cfg lockstep.TopologyConfig) (*placementCluster, error) {
	// Read before the nodes are: a node event after this read leaves the
	// generation ahead of checked, and the next get looks again.
	gen := c.generation.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cluster != nil && c.watched.Load() && c.checked == gen {
		return c.cluster, nil
	}
	var nodes corev1.NodeList
	// Read only, so no copies: the names and labels are hashed, and the
	// tree keeps strings, never the cached Nodes or their label maps.
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	keys := placementLabelKeys(cfg)
	h := fnv.New64a()
	for i := range nodes.Items {
		h.Write([]byte(nodes.Items[i].Name))
		h.Write([]byte{0})
		for _, k := range keys {
			h.Write([]byte(nodes.Items[i].Labels[k]))
			h.Write([]byte{0})
		}
	}
	fp := h.Sum64()
	if c.cluster == nil || c.fingerprint != fp {
		labelled := make([]topology.NodeLabels, len(nodes.Items))
		for i := range nodes.Items {
			labelled[i] = topology.NodeLabels{Name: nodes.Items[i].Name, Labels: nodes.Items[i].Labels}
		}
		cluster, err := newPlacementCluster(cfg, labelled)
		if err != nil {
			return nil, err
		}
		c.fingerprint, c.cluster = fp, cluster
	}
	c.checked = gen
	return c.cluster, nil
}

// placementLabelKeys are the node labels the cluster is built from: the
// levels' and those naming the node's profile.
func placementLabelKeys(cfg lockstep.TopologyConfig) []string {
	keys := []string{lockstep.LabelProfile, lockstep.LabelGPUProduct, lockstep.LabelNVIDIAGPUProduct}
	for _, l := range cfg.Levels {
		keys = append(keys, l.LabelKey)
	}
	return keys
}

// nodeSetChanged says whether a node event may change the cluster: a node
// added or removed, or one of keys changed. Heartbeats and other status
// updates, most Node events by far, do not.
func nodeSetChanged(keys []string, old, updated *corev1.Node) bool {
	if old == nil || updated == nil || old.Name != updated.Name {
		return true
	}
	for _, k := range keys {
		if old.Labels[k] != updated.Labels[k] {
			return true
		}
	}
	return false
}

// watchNodeSet keeps the placement cache's generation and the cluster's
// GPU capacity current from the informer's Node events, so that neither a
// running job's summary nor a pending job's capacity check lists the nodes.
func (r *TrainingJobReconciler) watchNodeSet(ctx context.Context, informers cache.Informers) error {
	inf, err := informers.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return fmt.Errorf("getting the Node informer: %w", err)
	}
	keys := placementLabelKeys(r.Topology)
	bump := func() { r.placements.generation.Add(1) }
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				r.capacity.add(allocatableGPUs(n))
			}
			bump()
		},
		UpdateFunc: func(o, n any) {
			old, _ := o.(*corev1.Node)
			updated, _ := n.(*corev1.Node)
			if old != nil && updated != nil {
				r.capacity.add(allocatableGPUs(updated) - allocatableGPUs(old))
			}
			if nodeSetChanged(keys, old, updated) {
				bump()
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				// The node's last state the informer knew.
				obj = tombstone.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				r.capacity.add(-allocatableGPUs(n))
			}
			bump()
		},
	})
	if err != nil {
		return fmt.Errorf("watching the node set: %w", err)
	}
	if reg != nil {
		// Test informers return none: the capacity is then listed.
		r.capacity.follow(reg.HasSynced)
	}
	r.placements.watched.Store(true)
	return nil
}

// maxReason is the CRD's bound on status.placement.reason.
const maxReason = 1024

// summarizePlacement describes where a gang runs: the lowest common domain
// of its nodes in the cluster's tree, the levels it spans, and, when every
// pod that asks for GPUs has a GPU set and each of their nodes a topology,
// the placement's topology.Rating of those pods: the modelled all-reduce
// bus bandwidth, the efficiency and its reason, as the scheduler rates its
// plans (which leave out the pods that ask for no GPUs). Bandwidth,
// efficiency and reason are left empty when they cannot be modelled.
func summarizePlacement(pods []placedPod, nodes map[string]placementNode, cluster *placementCluster) (*v1alpha1.Placement, error) {
	if len(pods) == 0 {
		return nil, nil
	}
	// gpus are the GPUs of the rated pods by node; all, every node.
	gpus := map[string]topology.GPUSet{}
	all := map[string]bool{}
	modelled := true
	for _, p := range pods {
		set, err := parseGPUSet(p.GPUs)
		if err != nil {
			return nil, fmt.Errorf("pod on node %s: %w", p.Node, err)
		}
		all[p.Node] = true
		if p.NoGPUs {
			continue
		}
		if set == 0 {
			modelled = false
		}
		gpus[p.Node] |= set
	}
	names := slices.Sorted(maps.Keys(all))

	dom, err := cluster.tree.LowestCommonDomain(names)
	if err != nil {
		return nil, err
	}
	spanned, err := cluster.tree.LevelsSpanned(names)
	if err != nil {
		return nil, err
	}
	out := &v1alpha1.Placement{Domain: dom.DisplayID(), LevelName: dom.LevelName, LevelsSpanned: int32(spanned), Nodes: names}
	for _, p := range pods {
		if len(p.Devices) > 0 {
			out.Devices = append(out.Devices, v1alpha1.PodDevices{Pod: p.Name, Node: p.Node, Devices: p.Devices})
		}
	}
	slices.SortFunc(out.Devices, func(a, b v1alpha1.PodDevices) int { return strings.Compare(a.Pod, b.Pod) })
	if !modelled || len(gpus) == 0 {
		return out, nil
	}

	rated := slices.Sorted(maps.Keys(gpus))
	members := make([]topology.Member, len(rated))
	for i, n := range rated {
		spec := nodes[n].Topology
		if spec == nil {
			return out, nil
		}
		hw, err := spec.ToTopology()
		if err != nil {
			return out, fmt.Errorf("NodeTopology %s: %w", n, err)
		}
		members[i] = topology.Member{Node: hw, GPUs: gpus[n], Path: cluster.tree.Path(n)}
	}
	rating, err := cluster.rater.Rate(members)
	if err != nil {
		return out, fmt.Errorf("rating the placement: %w", err)
	}
	out.BusBandwidthMBps = int64(rating.Actual.BottleneckGBps * 1000)
	out.Efficiency = lockstep.FormatEfficiency(rating.Efficiency)
	out.Reason = rating.Reason
	if len(out.Reason) > maxReason {
		out.Reason = strings.ToValidUTF8(out.Reason[:maxReason-len("…")], "") + "…"
	}
	return out, nil
}

// parseGPUSet reads the scheduler's lockstep.dev/gpus annotation, "0,1,5";
// empty for a pod without one.
func parseGPUSet(s string) (topology.GPUSet, error) {
	if s == "" {
		return 0, nil
	}
	return topology.ParseGPUList(s)
}

// ensurePlacement summarizes where the gang runs once every pod is bound.
// It runs on every reconcile of a running job, so it copies nothing of the
// cluster: the tree and references come from r.placements, and the
// NodeTopologies of the gang's GPU nodes and the pods' ResourceClaims are
// read from the cache without a copy (read only: the spec is converted,
// never changed). A GPU node whose agent has not published its
// NodeTopology yet leaves the rating out until it does: its creation wakes
// the job (watchNodeTopologies), so nothing is retried on a timer. waiting
// are those nodes. Likewise a claim whose allocation the cache does not
// show yet lists no devices until its event wakes the job (watchClaims).
//
// Whether a pod asks for GPUs counts its GPU claims (claims), so a DRA gang
// is rated as the scheduler planned it. The GPUs a pod holds are those its
// node's agent reports for the pod's UID (status.allocations) where it
// reports them, else the scheduler's lockstep.dev/gpus: the agent reports
// what the node really gave the pod, the claims' devices joined to GPU
// indices by UUID for a DRA pod (which has no annotation), and the device
// plugin's own choice where that plugin ignores the annotation.
func (r *TrainingJobReconciler) ensurePlacement(ctx context.Context, job *v1alpha1.TrainingJob, obs observation, claims claimGPUs) (waiting []string, err error) {
	placed := make([]placedPod, 0, len(obs.live))
	nodes := map[string]placementNode{}
	// allocations are the GPUs each node's agent reports pods holding; made
	// once some node reports any.
	var allocations map[string][]v1alpha1.GPUAllocation
	for _, p := range obs.live {
		node := p.Spec.NodeName
		if node == "" {
			return nil, nil
		}
		pp := placedPod{Name: p.Name, Node: node, GPUs: p.Annotations[lockstep.AnnotationGPUs], NoGPUs: claims.podGPUs(&p.Spec) == 0}
		if pp.Devices, err = r.podDevices(ctx, p.Pod); err != nil {
			return nil, err
		}
		if pp.NoGPUs {
			placed = append(placed, pp)
			continue
		}
		if _, ok := nodes[node]; !ok {
			var nt v1alpha1.NodeTopology
			switch err := r.Client.Get(ctx, client.ObjectKey{Name: node}, &nt, client.UnsafeDisableDeepCopy); {
			case err == nil:
				nodes[node] = placementNode{Topology: &nt.Spec}
				if len(nt.Status.Allocations) > 0 {
					if allocations == nil {
						allocations = map[string][]v1alpha1.GPUAllocation{}
					}
					allocations[node] = nt.Status.Allocations
				}
			case apierrors.IsNotFound(err):
				nodes[node] = placementNode{}
				waiting = append(waiting, node)
			default:
				return nil, fmt.Errorf("getting NodeTopology %s: %w", node, err)
			}
		}
		if held, ok := allocatedGPUs(allocations[node], p.UID); ok {
			pp.GPUs = held
		}
		placed = append(placed, pp)
	}
	// The reference placement of the rating is the best the empty cluster
	// allows: the cluster is every node.
	cluster, err := r.placements.get(ctx, r.Client, r.Topology)
	if err != nil {
		return nil, err
	}
	// Recomputed on every pass (the cluster's tree and references are
	// cached); the status is only written when the summary changes.
	pl, err := summarizePlacement(placed, nodes, cluster)
	if pl != nil {
		job.Status.Placement = pl
	}
	slices.Sort(waiting)
	return waiting, err
}

// allocatedGPUs is the GPU list ("0,1") allocs report for the pod of uid,
// by UID: after a gang restart the agent may still list the old pod of the
// same name.
func allocatedGPUs(allocs []v1alpha1.GPUAllocation, uid types.UID) (string, bool) {
	for _, a := range allocs {
		if a.PodUID != string(uid) {
			continue
		}
		list := make([]string, len(a.GPUs))
		for i, g := range a.GPUs {
			list[i] = strconv.Itoa(int(g))
		}
		return strings.Join(list, ","), true
	}
	return "", false
}

// podDevices are the devices allocated to pod's claims, from the cache,
// "<driver>/<pool>/<device>", sorted. A claim not created or not allocated
// yet, or no longer the pod's, has none.
//
// RBAC: resourceclaims get, list, watch (readClaimGPUs).
func (r *TrainingJobReconciler) podDevices(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	var devices []string
	for i := range pod.Spec.ResourceClaims {
		name, mustCheckOwner, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			// Its template's claim is not in the pod's status yet, or
			// there is none.
			continue
		}
		var claim resourcev1.ResourceClaim
		switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: *name}, &claim, client.UnsafeDisableDeepCopy); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("getting ResourceClaim %s/%s of pod %s: %w", pod.Namespace, *name, pod.Name, err)
		}
		if claim.Status.Allocation == nil || (mustCheckOwner && resourceclaim.IsForPod(pod, &claim) != nil) {
			continue
		}
		for _, res := range claim.Status.Allocation.Devices.Results {
			devices = append(devices, res.Driver+"/"+res.Pool+"/"+res.Device)
		}
	}
	slices.Sort(devices)
	return slices.Compact(devices), nil
}

// claimAllocationChanged passes the ResourceClaim events that can change a
// summary's devices: a claim allocated or deallocated, or deleted. The
// claim's write comes before its pod's binding at the apiserver, but the
// claim and pod watches are separate streams: the pod's last event may
// reach the controller before the claim's, and the summary made then
// would keep the devices the cache knew, with nothing left to wake the
// job. A claim already allocated when the informer lists it passes too.
var claimAllocationChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool {
		c, ok := e.Object.(*resourcev1.ResourceClaim)
		return !ok || c.Status.Allocation != nil
	},
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, _ := e.ObjectOld.(*resourcev1.ResourceClaim)
		updated, _ := e.ObjectNew.(*resourcev1.ResourceClaim)
		return old == nil || updated == nil || !equality.Semantic.DeepEqual(old.Status.Allocation, updated.Status.Allocation)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// watchClaims wakes the jobs whose pods a ResourceClaim is for when its
// allocation changes (claimAllocationChanged).
func (r *TrainingJobReconciler) watchClaims(b *ctrl.Builder) *ctrl.Builder {
	return b.Watches(&resourcev1.ResourceClaim{}, handler.EnqueueRequestsFromMapFunc(r.jobsOfClaim),
		builder.WithPredicates(claimAllocationChanged))
}

// jobsOfClaim are the jobs of the pods claim o is for: the pod that owns
// it (a claim made from a pod's template) and those it is reserved for (a
// claim the pods share, or any claim once allocated), read from the cache.
// A pod that is not in the cache is no gang pod of ours.
func (r *TrainingJobReconciler) jobsOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	claim, ok := o.(*resourcev1.ResourceClaim)
	if !ok {
		return nil
	}
	var pods []string
	for _, ref := range claim.OwnerReferences {
		if ref.Kind == "Pod" && ref.APIVersion == "v1" {
			pods = append(pods, ref.Name)
		}
	}
	for _, c := range claim.Status.ReservedFor {
		if c.Resource == "pods" && c.APIGroup == "" {
			pods = append(pods, c.Name)
		}
	}
	var reqs []reconcile.Request
	for _, name := range pods {
		var p corev1.Pod
		// Read only: the owner is all it needs.
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: name}, &p, client.UnsafeDisableDeepCopy); err != nil {
			if !apierrors.IsNotFound(err) {
				ctrl.LoggerFrom(ctx).Error(err, "Getting a pod of a ResourceClaim", "claim", klog.KObj(claim), "pod", name)
			}
			continue
		}
		ref := jobOwner(&p)
		if ref == nil {
			continue
		}
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}}
		if !slices.Contains(reqs, req) {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// nodeTopologyPublished passes the NodeTopology events that can complete a
// summary: a NodeTopology published (created), its spec changed, or the
// GPUs it reports pods holding changed (a DRA pod's GPU set is known once
// its agent has joined its claims to GPU indices, which may come after the
// pod runs). Status writes that change nothing else, the agent's
// heartbeats, do not pass.
var nodeTopologyPublished = predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, _ := e.ObjectOld.(*v1alpha1.NodeTopology)
		updated, _ := e.ObjectNew.(*v1alpha1.NodeTopology)
		return old == nil || updated == nil || !equality.Semantic.DeepEqual(old.Status.Allocations, updated.Status.Allocations)
	},
})

// watchNodeTopologies wakes the jobs with pods on a node whose NodeTopology
// was published or changed, through the pod-by-node index of watchNodes.
func (r *TrainingJobReconciler) watchNodeTopologies(b *ctrl.Builder) *ctrl.Builder {
	return b.Watches(&v1alpha1.NodeTopology{}, handler.EnqueueRequestsFromMapFunc(r.jobsOnNode),
		builder.WithPredicates(nodeTopologyPublished))
}
