package agent

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

const (
	// podNodeNameIndex indexes pods by the node they are bound to.
	podNodeNameIndex = "spec.nodeName"
)

// FakeReconciler serves many simulated nodes from one process: for every node
// matching NodeSelector it publishes the NodeTopology of the node's hardware
// profile, and emulates the NVIDIA device plugin by assigning GPUs to the pods
// bound there, so the scheduler and controller see real occupancy. On a node
// whose GPUs NVIDIA's DRA driver serves (IsDRANode) it emulates the driver's
// kubelet plugin instead: it publishes the node's gpu.nvidia.com
// ResourceSlice and records the GPUs the pods' allocated claims name.
//
// Reconcile is keyed by node name. The allocation lives in the
// NodeTopology's status, which makes the agent restartable: a restarted agent
// keeps every pod on the GPUs it had.
type FakeReconciler struct {
	Client       client.Client
	Publisher    *Publisher
	Recorder     record.EventRecorder
	NodeSelector labels.Selector
	// Workers is the number of nodes reconciled in parallel.
	Workers int
	// Metrics, when set, count unknown profiles and forget the last
	// publish of nodes no longer served.
	Metrics *Metrics
	// Allocation is the emulated device plugin's mode: "" or
	// lockstep.FakeAllocationScheduler honour the scheduler's
	// lockstep.dev/gpus; lockstep.FakeAllocationDevicePlugin ignores it, as
	// the stock NVIDIA device plugin does.
	Allocation string
	// Topology is the cluster's topology configuration: its multi-node
	// NVLink level's label names a simulated node's NVLink domain. Default:
	// lockstep.DefaultTopologyConfig().
	Topology lockstep.TopologyConfig
	// ResyncInterval is how often the real agent reads a node's GPU
	// allocation (its --resync-interval): a change of the pods' GPUs is
	// reported at the node's first read after it, as the real agent
	// reports it, not the moment the pod is bound or gone. Zero reports
	// at once. The scheduler must live with a NodeTopology that lags its
	// own books by up to this long, as it does on a real cluster.
	ResyncInterval time.Duration

	// selectors caches one GPU-set selector per profile: its table depends
	// only on the node's shape.
	mu        sync.Mutex
	selectors map[string]*topology.Selector
	// unreported is when a node's allocation was first seen to differ
	// from what its NodeTopology reports.
	unreported map[string]time.Time
}

// SetupWithManager registers the reconciler: it follows nodes, the pods bound
// to them and their NodeTopology objects.
func (r *FakeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podNodeNameIndex,
		func(obj client.Object) []string {
			if node := obj.(*corev1.Pod).Spec.NodeName; node != "" {
				return []string{node}
			}
			return nil
		}); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	selected := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return r.NodeSelector.Matches(labels.Set(obj.GetLabels()))
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("fake-topology-agent").
		For(&corev1.Node{}, builder.WithPredicates(selected)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			pod := obj.(*corev1.Pod)
			if pod.Spec.NodeName == "" || (GPURequest(pod) == 0 && len(pod.Spec.ResourceClaims) == 0) {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: pod.Spec.NodeName}}}
		})).
		Watches(&resourcev1.ResourceClaim{}, handler.EnqueueRequestsFromMapFunc(claimNodes)).
		Watches(&resourcev1.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(sliceNode)).
		Watches(&v1alpha1.NodeTopology{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: obj.GetName()}}}
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Complete(r)
}

// Reconcile publishes one fake node's topology and GPU allocation.
func (r *FakeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		// A deleted node takes its NodeTopology with it (owner reference).
		if apierrors.IsNotFound(err) {
			r.Metrics.forgetNode(req.Name)
			return reconcile.Result{}, r.deleteGPUSlice(ctx, req.Name)
		}
		return reconcile.Result{}, err
	}
	if !r.NodeSelector.Matches(labels.Set(node.Labels)) || !node.DeletionTimestamp.IsZero() {
		r.Metrics.forgetNode(node.Name)
		return reconcile.Result{}, r.deleteGPUSlice(ctx, node.Name)
	}
	profileName := node.Labels[lockstep.LabelProfile]
	profile, ok := topology.LookupProfile(profileName)
	if !ok {
		// Not retried: only a label change can fix it, and that is an event.
		r.Metrics.discoveryFailed(SourceProfile)
		r.Recorder.Eventf(node, corev1.EventTypeWarning, "UnknownProfile",
			"label %s=%q names no built-in hardware profile; use one of %s",
			lockstep.LabelProfile, profileName, strings.Join(topology.ProfileNames(), ", "))
		return reconcile.Result{}, nil
	}
	backend := discovery.ProfileBackend{Profile: profile, NodeName: node.Name, Clique: node.Labels[r.cliqueLabel()]}
	report, err := backend.Discover(ctx)
	if err != nil {
		r.Metrics.discoveryFailed(SourceProfile)
		return reconcile.Result{}, err
	}
	hw := &report.Topology
	sel, err := r.selector(profile.Name, hw)
	if err != nil {
		r.Metrics.discoveryFailed(SourceProfile)
		return reconcile.Result{}, err
	}

	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{podNodeNameIndex: node.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pods on %s: %w", node.Name, err)
	}
	podPtrs := make([]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		podPtrs[i] = &pods.Items[i]
	}
	var (
		status   v1alpha1.NodeTopologyStatus
		problems []AllocationProblem
	)
	current := &v1alpha1.NodeTopology{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: node.Name}, current); apierrors.IsNotFound(err) {
		current = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if IsDRANode(node) {
		status, problems, err = r.draStatus(ctx, node, profile, hw, podPtrs)
	} else {
		status, problems, err = r.devicePluginStatus(ctx, node, hw, sel, podPtrs, current)
	}
	if err == nil {
		status.Conditions = []metav1.Condition{DynamicResourcesCondition(pods.Items, simulatedKubeletListing(node, podPtrs))}
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	status, wait := r.lag(node.Name, current, status)
	for _, p := range problems {
		logger.V(2).Info("GPU allocation differs from the request", "pod", klog.KObj(p.Pod), "node", node.Name, "reason", p.Reason)
		r.Recorder.Eventf(p.Pod, corev1.EventTypeWarning, "GPUAllocation", "node %s: %s", node.Name, p.Reason)
	}
	next, err := r.Publisher.Publish(ctx, node, v1alpha1.SpecFromTopology(hw, profile.Name), status)
	if err != nil {
		return reconcile.Result{}, err
	}
	if wait > 0 {
		next = min(next, wait)
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

// lag holds back an allocation change until the node's next read (see
// ResyncInterval): it returns the status to publish now and, when a change
// is held back, how long until it is due. A node's reads fall every
// ResyncInterval at a phase of its own, as the agents of a real cluster,
// started at different moments, read at different moments; the lag of a
// change is between zero and ResyncInterval. A NodeTopology not yet
// published gets the allocation at once: that is the agent's first read.
func (r *FakeReconciler) lag(node string, current *v1alpha1.NodeTopology, status v1alpha1.NodeTopologyStatus) (v1alpha1.NodeTopologyStatus, time.Duration) {
	if r.ResyncInterval <= 0 || current == nil {
		return status, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reported := current.Status
	if apiequality.Semantic.DeepEqual(reported.Allocations, status.Allocations) && reported.FreeGPUs == status.FreeGPUs {
		delete(r.unreported, node)
		return status, 0
	}
	now := r.Publisher.Clock.Now()
	seen, ok := r.unreported[node]
	if !ok {
		if r.unreported == nil {
			r.unreported = map[string]time.Time{}
		}
		seen = now
		r.unreported[node] = seen
	}
	due := NextRead(node, seen, r.ResyncInterval)
	if !now.Before(due) {
		delete(r.unreported, node)
		return status, 0
	}
	status.Allocations, status.FreeGPUs = reported.Allocations, reported.FreeGPUs
	return status, due.Sub(now)
}

// NextRead is the first read of node's agent after t, for agents that read
// every interval at a phase set by the node's name.
func NextRead(node string, t time.Time, interval time.Duration) time.Time {
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	phase := time.Duration(h.Sum64() % uint64(interval))
	since := (t.Sub(time.Unix(0, 0)) - phase) % interval
	if since < 0 {
		since += interval
	}
	return t.Add(interval - since)
}

// devicePluginStatus emulates NVIDIA's device plugin on a node: the pods
// bound there get GPUs as Allocator decides, keeping those they had.
func (r *FakeReconciler) devicePluginStatus(ctx context.Context, node *corev1.Node, hw *topology.NodeTopology, sel *topology.Selector, pods []*corev1.Pod, current *v1alpha1.NodeTopology) (v1alpha1.NodeTopologyStatus, []AllocationProblem, error) {
	// A node moved off DRA leaves no slice behind.
	if err := r.deleteGPUSlice(ctx, node.Name); err != nil {
		return v1alpha1.NodeTopologyStatus{}, nil, err
	}
	var prior []v1alpha1.GPUAllocation
	if current != nil {
		prior = current.Status.Allocations
	}
	allocator := &Allocator{Node: hw, Selector: sel, IgnoreAnnotation: r.Allocation == lockstep.FakeAllocationDevicePlugin}
	allocs, problems := allocator.Allocate(prior, pods)
	return v1alpha1.NodeTopologyStatus{Allocations: allocs, FreeGPUs: int32(hw.NumGPUs() - allocatedGPUs(allocs))}, problems, nil
}

// draStatus emulates NVIDIA's DRA GPU kubelet plugin on a node: it
// publishes the node's ResourceSlice, and the pods bound there hold the
// GPUs their allocated claims name, nothing else: the scheduler chose them.
func (r *FakeReconciler) draStatus(ctx context.Context, node *corev1.Node, profile topology.Profile, hw *topology.NodeTopology, pods []*corev1.Pod) (v1alpha1.NodeTopologyStatus, []AllocationProblem, error) {
	id, ok := profile.GPUIdentity()
	if !ok {
		return v1alpha1.NodeTopologyStatus{}, nil, reconcile.TerminalError(fmt.Errorf("profile %s has no GPU identity to publish", profile.Name))
	}
	slice := GPUResourceSlice(node, hw, id)
	if err := r.ensureGPUSlice(ctx, slice); err != nil {
		return v1alpha1.NodeTopologyStatus{}, nil, err
	}
	allocs, problems, err := r.claimAllocations(ctx, node.Name, hw, slice, pods)
	if err != nil {
		return v1alpha1.NodeTopologyStatus{}, nil, err
	}
	if !simulatedKubeletServesDynamicResources(node) {
		// The plugin prepared the claims; the kubelet does not say so.
		allocs = nil
	}
	return v1alpha1.NodeTopologyStatus{Allocations: allocs, FreeGPUs: int32(freeGPUs(hw, allocs))}, problems, nil
}

// Ready is the fake agent's readiness check: ready once it published a
// node, or when no node matches its selector and there is nothing to
// publish. Add it beside a check that the cache has synced, which the
// listing here assumes.
func (r *FakeReconciler) Ready(req *http.Request) error {
	if r.Publisher.Ready(req) == nil {
		return nil
	}
	var nodes corev1.NodeList
	if err := r.Client.List(req.Context(), &nodes, client.MatchingLabelsSelector{Selector: r.NodeSelector}); err != nil {
		return fmt.Errorf("listing served nodes: %w", err)
	}
	if len(nodes.Items) > 0 {
		return fmt.Errorf("none of %d served nodes published yet", len(nodes.Items))
	}
	return nil
}

// selector returns the cached selector of a profile, building it on first
// use.
func (r *FakeReconciler) selector(profile string, hw *topology.NodeTopology) (*topology.Selector, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sel, ok := r.selectors[profile]; ok {
		return sel, nil
	}
	sel, err := topology.NewSelector(hw)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", profile, err)
	}
	if r.selectors == nil {
		r.selectors = map[string]*topology.Selector{}
	}
	r.selectors[profile] = sel
	return sel, nil
}

// cliqueLabel is the node label of the configured multi-node NVLink level.
func (r *FakeReconciler) cliqueLabel() string {
	cfg := r.Topology
	if len(cfg.Levels) == 0 {
		cfg = lockstep.DefaultTopologyConfig()
	}
	if l, ok := cfg.NVLinkLevel(); ok {
		return l.LabelKey
	}
	return lockstep.LabelGPUClique
}

func allocatedGPUs(allocs []v1alpha1.GPUAllocation) int {
	n := 0
	for _, a := range allocs {
		n += len(a.GPUs)
	}
	return n
}

// simulatedKubeletServesDynamicResources reports whether the kubelet the
// fake agent plays on node lists the devices it prepared for claims: as a
// 1.34 kubelet does by default, unless the node is annotated otherwise
// (lockstep.AnnotationSimulatedKubeletWithoutDynamicResources).
func simulatedKubeletServesDynamicResources(node *corev1.Node) bool {
	return node.Annotations[lockstep.AnnotationSimulatedKubeletWithoutDynamicResources] != "true"
}

// simulatedKubeletListing is the containers the played kubelet's
// pod-resources answer lists (discovery.PodResources.DynamicResources):
// every container of its running pods, with the devices of a container's
// claims when it serves them.
func simulatedKubeletListing(node *corev1.Node, pods []*corev1.Pod) map[string]bool {
	serves := simulatedKubeletServesDynamicResources(node)
	listed := map[string]bool{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			listed[p.Namespace+"/"+p.Name+"/"+c.Name] = serves && len(c.Resources.Claims) > 0
		}
	}
	return listed
}
