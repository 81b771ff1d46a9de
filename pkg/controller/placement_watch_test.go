package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// placementNodeObj is a node under leaf and spine: an hgx-h100 with 8
// allocatable GPUs, or a CPU-only node without GPU labels or GPUs.
func placementNodeObj(name, leaf, spine string, gpus bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{lockstep.LabelFabricTier0: leaf, lockstep.LabelFabricTier1: spine}}}
	if gpus {
		n.Labels = hgxLabels(leaf, spine)
		n.Status.Allocatable = corev1.ResourceList{lockstep.GPUResource: resource.MustParse("8")}
	}
	return n
}

// Node events that leave the node set and its placement labels as they
// were, a kubelet's status updates above all, do not invalidate the
// placement cache; a node added, removed or relabelled does.
func TestWatchNodeSet(t *testing.T) {
	ctx := context.Background()
	informers := &informertest.FakeInformers{Scheme: fakeScheme(t)}
	r := &TrainingJobReconciler{Topology: lockstep.DefaultTopologyConfig()}
	if err := r.watchNodeSet(ctx, informers); err != nil {
		t.Fatal(err)
	}
	if !r.placements.watched.Load() {
		t.Fatal("the placement cache is not marked watched")
	}
	inf, err := informers.FakeInformerFor(ctx, &corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	n1 := placementNodeObj("n1", "leaf-1", "spine-1", true)
	heartbeat := n1.DeepCopy()
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	heartbeat.ResourceVersion = "2"
	unrelated := n1.DeepCopy()
	unrelated.Labels["team"] = "a"
	moved := n1.DeepCopy()
	moved.Labels[lockstep.LabelFabricTier0] = "leaf-2"
	product := n1.DeepCopy()
	product.Labels[lockstep.LabelNVIDIAGPUProduct] = "NVIDIA-B200"

	steps := []struct {
		name   string
		event  func()
		bumped bool
	}{
		{"node added", func() { inf.Add(n1) }, true},
		{"heartbeat", func() { inf.Update(n1, heartbeat) }, false},
		{"unrelated label", func() { inf.Update(n1, unrelated) }, false},
		{"moved to another leaf", func() { inf.Update(n1, moved) }, true},
		{"GPU product relabelled", func() { inf.Update(n1, product) }, true},
		{"node deleted", func() { inf.Delete(n1) }, true},
	}
	for _, s := range steps {
		before := r.placements.generation.Load()
		s.event()
		if got := r.placements.generation.Load() != before; got != s.bumped {
			t.Errorf("%s: generation bumped %t, want %t", s.name, got, s.bumped)
		}
	}
}

// nodeListCounter counts the Node lists that reach the cache.
type nodeListCounter struct {
	client.Client
	lists int
}

func (c *nodeListCounter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.NodeList); ok {
		c.lists++
	}
	return c.Client.List(ctx, list, opts...)
}

// A watched placement cache lists the nodes only after a node event, and
// rebuilds the cluster only when the nodes' names or placement labels
// changed; an unwatched one (a reconciler without a manager) lists them on
// every get.
func TestPlacementCacheFollowsTheNodeSet(t *testing.T) {
	ctx := context.Background()
	cfg := lockstep.DefaultTopologyConfig()
	api := fake.NewClientBuilder().WithScheme(fakeScheme(t)).
		WithObjects(placementNodeObj("n1", "leaf-1", "spine-1", true), placementNodeObj("n2", "leaf-1", "spine-1", true)).Build()
	reader := &nodeListCounter{Client: api}
	leafOfN2 := func(c *placementCluster) string {
		d, err := c.tree.LowestCommonDomain([]string{"n1", "n2"})
		if err != nil {
			t.Fatal(err)
		}
		return d.DisplayID()
	}

	var watched placementCache
	watched.watched.Store(true)
	first, err := watched.get(ctx, reader, cfg)
	if err != nil {
		t.Fatal(err)
	}
	type state struct {
		Lists   int
		Rebuilt bool
		Domain  string
	}
	check := func(step string, want state, prev *placementCluster) *placementCluster {
		t.Helper()
		got, err := watched.get(ctx, reader, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, state{reader.lists, got != prev, leafOfN2(got)}); diff != "" {
			t.Errorf("%s (-want,+got):\n%s", step, diff)
		}
		return got
	}
	c := check("no node event", state{Lists: 1, Domain: "spine=spine-1/leaf=leaf-1"}, first)
	watched.generation.Add(1)
	c = check("a node event that changed nothing the cluster is built from", state{Lists: 2, Domain: "spine=spine-1/leaf=leaf-1"}, c)
	var n2 corev1.Node
	if err := api.Get(ctx, client.ObjectKey{Name: "n2"}, &n2); err != nil {
		t.Fatal(err)
	}
	n2.Labels[lockstep.LabelFabricTier0] = "leaf-2"
	if err := api.Update(ctx, &n2); err != nil {
		t.Fatal(err)
	}
	c = check("relabelled before its event is seen", state{Lists: 2, Domain: "spine=spine-1/leaf=leaf-1"}, c)
	watched.generation.Add(1)
	check("relabelled", state{Lists: 3, Rebuilt: true, Domain: "spine=spine-1"}, c)

	var unwatched placementCache
	reader.lists = 0
	for range 3 {
		if _, err := unwatched.get(ctx, reader, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if reader.lists != 3 {
		t.Errorf("an unwatched cache listed the nodes %d times in 3 gets, want 3", reader.lists)
	}
}

// A running job whose placement summary lacks a NodeTopology is not
// requeued on a timer: a pod that asks for no GPUs needs none for its node
// (an MPI launcher on a CPU-only node), and a GPU node's NodeTopology,
// once published, wakes the jobs on the node.
func TestPlacementSummaryWithoutTimedRetries(t *testing.T) {
	full := "0,1,2,3,4,5,6,7"
	oneLeaf := func(n int) string {
		return fmt.Sprintf("on %d nodes in leaf leaf-1; as fast as the best placement (bus bandwidth 50.0 GB/s)", n)
	}
	cases := []struct {
		name string
		job  *v1alpha1.TrainingJob
		// nodes are the GPU nodes and, with cpu, a CPU-only one; unpublished
		// are the GPU nodes without a NodeTopology.
		nodes       []string
		cpu         string
		unpublished []string
		// nodeOf binds each pod.
		nodeOf map[string]string
		want   *v1alpha1.Placement
		// wantRated is the placement once every NodeTopology is published.
		wantRated *v1alpha1.Placement
	}{{
		name:  "MPI launcher on a CPU-only node",
		job:   mpiJob("ns", "mpi"),
		nodes: []string{"gpu-1", "gpu-2"},
		cpu:   "cpu-1",
		nodeOf: map[string]string{
			"mpi-launcher-0": "cpu-1", "mpi-worker-0": "gpu-1", "mpi-worker-1": "gpu-2",
		},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"cpu-1", "gpu-1", "gpu-2"},
			BusBandwidthMBps: 50000, Efficiency: "1.000", Reason: oneLeaf(2)},
	}, {
		name:        "GPU node whose agent has not published yet",
		job:         pyTorchJob("ns", "pt"),
		nodes:       []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"},
		unpublished: []string{"gpu-4"},
		nodeOf: map[string]string{
			"pt-master-0": "gpu-1", "pt-worker-0": "gpu-2", "pt-worker-1": "gpu-3", "pt-worker-2": "gpu-4",
		},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"}},
		wantRated: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"},
			BusBandwidthMBps: 50000, Efficiency: "1.000", Reason: oneLeaf(4)},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			job := tc.job
			job.UID = "job-uid"
			job.Default()
			objs := []client.Object{job}
			topologyOf := func(node string) *v1alpha1.NodeTopology {
				return &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: node, Generation: 1}, Spec: *hgxSpec(t)}
			}
			for _, n := range tc.nodes {
				objs = append(objs, placementNodeObj(n, "leaf-1", "spine-1", true))
				if !slices.Contains(tc.unpublished, n) {
					objs = append(objs, topologyOf(n))
				}
			}
			if tc.cpu != "" {
				objs = append(objs, placementNodeObj(tc.cpu, "leaf-1", "spine-1", false))
			}
			c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithStatusSubresource(&v1alpha1.TrainingJob{}).
				WithIndex(&corev1.Pod{}, podNodeNameField, podNodeName).WithObjects(objs...).Build()
			r := fakeReconciler(c)
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: job.Namespace, Name: job.Name}}

			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			bindAndRun(t, c, tc.nodeOf, full)
			res, err := r.Reconcile(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != 0 {
				t.Errorf("RequeueAfter = %v, want none: nothing about a running job is timed", res.RequeueAfter)
			}
			if diff := cmp.Diff(tc.want, placementOf(t, c, req)); diff != "" {
				t.Errorf("status.placement (-want,+got):\n%s", diff)
			}
			if len(tc.unpublished) == 0 {
				return
			}

			// The agent publishes: the event maps to the job, and its
			// reconcile rates the placement.
			published := topologyOf(tc.unpublished[0])
			if !nodeTopologyPublished.Create(event.CreateEvent{Object: published}) {
				t.Error("a NodeTopology's creation is filtered out")
			}
			heartbeat := published.DeepCopy()
			heartbeat.Status.FreeGPUs = 4
			if nodeTopologyPublished.Update(event.UpdateEvent{ObjectOld: published, ObjectNew: heartbeat}) {
				t.Error("a NodeTopology heartbeat (status only) passes the filter")
			}
			changed := published.DeepCopy()
			changed.Generation++
			if !nodeTopologyPublished.Update(event.UpdateEvent{ObjectOld: published, ObjectNew: changed}) {
				t.Error("a NodeTopology spec change is filtered out")
			}
			if diff := cmp.Diff([]reconcile.Request{req}, r.jobsOnNode(ctx, published)); diff != "" {
				t.Errorf("jobs woken by NodeTopology %s (-want,+got):\n%s", published.Name, diff)
			}
			if err := c.Create(ctx, published); err != nil {
				t.Fatal(err)
			}
			if res, err = r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != 0 {
				t.Errorf("RequeueAfter = %v once published, want none", res.RequeueAfter)
			}
			if diff := cmp.Diff(tc.wantRated, placementOf(t, c, req)); diff != "" {
				t.Errorf("status.placement once published (-want,+got):\n%s", diff)
			}
		})
	}
}

// bindAndRun binds each pod of nodeOf to its node, as the scheduler does (a
// pod that asks for GPUs gets all 8 of gpus), and runs it, as its kubelet.
func bindAndRun(t *testing.T, c client.Client, nodeOf map[string]string, gpus string) {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != len(nodeOf) {
		t.Fatalf("%d pods, want %d", len(pods.Items), len(nodeOf))
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		node, ok := nodeOf[p.Name]
		if !ok {
			t.Fatalf("pod %s not expected", p.Name)
		}
		p.Spec.NodeName = node
		if podGPUs(&p.Spec) > 0 {
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, lockstep.AnnotationGPUs, gpus)
		}
		if err := c.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

func placementOf(t *testing.T, c client.Client, req ctrl.Request) *v1alpha1.Placement {
	t.Helper()
	var j v1alpha1.TrainingJob
	if err := c.Get(context.Background(), req.NamespacedName, &j); err != nil {
		t.Fatal(err)
	}
	return j.Status.Placement
}

// syncedInformers are FakeInformers whose handler registrations report
// synced as *synced says (the fake's own registrations are nil), and which
// keep the handlers, for events the fake cannot send (tombstones).
type syncedInformers struct {
	*informertest.FakeInformers
	synced   *bool
	handlers *[]toolscache.ResourceEventHandler
}

func (s syncedInformers) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := s.FakeInformers.GetInformer(ctx, obj, opts...)
	return syncedInformer{Informer: inf, from: s}, err
}

type syncedInformer struct {
	cache.Informer
	from syncedInformers
}

func (s syncedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if _, err := s.Informer.AddEventHandler(h); err != nil {
		return nil, err
	}
	*s.from.handlers = append(*s.from.handlers, h)
	return syncedRegistration{s.from.synced}, nil
}

type syncedRegistration struct{ synced *bool }

func (s syncedRegistration) HasSynced() bool { return *s.synced }

// The cluster's GPU capacity, which a pending gang is checked against on
// every reconcile, follows the Node events without listing the nodes once
// the handler has seen the informer's first list: GPUs a device plugin
// registers late, a node drained to zero, deletions seen directly and as
// tombstones. Before that, a sum of the nodes seen so far would call a
// gang larger than the cluster, so the nodes are listed.
func TestClusterGPUsFollowsTheNodes(t *testing.T) {
	ctx := context.Background()
	fakeInformers := &informertest.FakeInformers{Scheme: fakeScheme(t)}
	synced := false
	var handlers []toolscache.ResourceEventHandler
	api := fake.NewClientBuilder().WithScheme(fakeScheme(t)).
		WithObjects(placementNodeObj("n1", "leaf-1", "spine-1", true), placementNodeObj("n2", "leaf-1", "spine-1", true)).Build()
	reader := &nodeListCounter{Client: api}
	r := &TrainingJobReconciler{Client: reader, Topology: lockstep.DefaultTopologyConfig()}
	if err := r.watchNodeSet(ctx, syncedInformers{FakeInformers: fakeInformers, synced: &synced, handlers: &handlers}); err != nil {
		t.Fatal(err)
	}
	inf, err := fakeInformers.FakeInformerFor(ctx, &corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	withGPUs := func(n *corev1.Node, gpus string) *corev1.Node {
		n = n.DeepCopy()
		n.Status.Allocatable = corev1.ResourceList{lockstep.GPUResource: resource.MustParse(gpus)}
		return n
	}
	n1 := placementNodeObj("n1", "leaf-1", "spine-1", true)
	n2 := placementNodeObj("n2", "leaf-1", "spine-1", true)
	// n3 joins before its device plugin registers its GPUs.
	n3 := placementNodeObj("n3", "leaf-2", "spine-1", false)

	type state struct {
		GPUs  int64
		Lists int
	}
	steps := []struct {
		name  string
		event func()
		want  state
	}{
		{"first list half handled: the nodes are listed", func() { inf.Add(n1) }, state{GPUs: 16, Lists: 1}},
		{"first list handled", func() { inf.Add(n2); synced = true }, state{GPUs: 16, Lists: 1}},
		{"a node without GPUs joins", func() { inf.Add(n3) }, state{GPUs: 16, Lists: 1}},
		{"its device plugin registers 4", func() { inf.Update(n3, withGPUs(n3, "4")) }, state{GPUs: 20, Lists: 1}},
		{"a heartbeat changes nothing", func() { inf.Update(withGPUs(n3, "4"), withGPUs(n3, "4")) }, state{GPUs: 20, Lists: 1}},
		{"n1 loses its GPUs", func() { inf.Update(n1, withGPUs(n1, "0")) }, state{GPUs: 12, Lists: 1}},
		{"n2 deleted", func() { inf.Delete(n2) }, state{GPUs: 4, Lists: 1}},
		{"n3 deleted, seen as a tombstone", func() {
			for _, h := range handlers {
				h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "n3", Obj: withGPUs(n3, "4")})
			}
		}, state{GPUs: 0, Lists: 1}},
	}
	for _, s := range steps {
		s.event()
		gpus, err := r.clusterGPUs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(s.want, state{gpus, reader.lists}); diff != "" {
			t.Errorf("%s (-want,+got):\n%s", s.name, diff)
		}
	}
}
