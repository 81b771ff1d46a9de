package agent

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	lsenvtest "github.com/lockstep-dev/lockstep/pkg/util/envtest"
)

const mixedModel = `
apiVersion: lockstep.dev/v1alpha1
kind: ClusterModel
levels:
  - {name: leaf, nodeLabel: fabric.topograph.run/tier-0}
pools:
  - {name: dgx1, profile: dgx1-v100, gpuDriver: DRA, nodes: 1, nodesPerDomain: {leaf: 1}}
  - {name: h100, profile: hgx-h100, nodes: 1, nodesPerDomain: {leaf: 1}}
`

// startAPIServer starts envtest's apiserver for one test and returns an
// administrator's client that reads the apiserver directly.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	root, err := lsenvtest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	scheme := agentScheme(t)
	env, cfg, err := lsenvtest.Start(root, scheme)
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFakeReconcilerDRAEnvtest runs the fake agent on a DRA node and a
// device-plugin node of one model against a real apiserver: the DRA node
// gets the driver's ResourceSlice whose UUIDs join its NodeTopology, no
// nvidia.com/gpu, and its pods the GPUs their claims were allocated; the
// device-plugin node gets neither slice nor change; a restarted agent
// writes nothing; a node moved to the device plugin loses its slice.
func TestFakeReconcilerDRAEnvtest(t *testing.T) {
	c := startAPIServer(t)
	ctx := context.Background()
	model, err := clustermodel.Parse([]byte(mixedModel))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range model.Nodes() {
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	selector, err := labels.Parse(lockstep.LabelProfile)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	newAgent := func() *FakeReconciler {
		return &FakeReconciler{
			Client:       c,
			Publisher:    &Publisher{Client: c, Clock: clock, HeartbeatInterval: time.Hour, Mode: "fake"},
			Recorder:     record.NewFakeRecorder(100),
			NodeSelector: selector,
		}
	}
	r := newAgent()
	reconcileAll := func(r *FakeReconciler) {
		t.Helper()
		for _, name := range []string{"dgx1-0", "h100-0"} {
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
				t.Fatalf("Reconcile %s: %v", name, err)
			}
		}
	}
	reconcileAll(r)

	// The DRA node: its slice is the driver's, its GPUs are not an
	// extended resource, and the slice's UUIDs are its NodeTopology's.
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: "dgx1-0"}, node); err != nil {
		t.Fatal(err)
	}
	if q, ok := node.Status.Allocatable[lockstep.GPUResource]; ok {
		t.Errorf("DRA node advertises %s=%s", lockstep.GPUResource, q.String())
	}
	plugin := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: "h100-0"}, plugin); err != nil {
		t.Fatal(err)
	}
	if q := plugin.Status.Allocatable[lockstep.GPUResource]; q.Value() != 8 {
		t.Errorf("device-plugin node advertises %s=%s, want 8", lockstep.GPUResource, q.String())
	}
	var slices resourcev1.ResourceSliceList
	if err := c.List(ctx, &slices); err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 1 {
		t.Fatalf("%d ResourceSlices, want the DRA node's one", len(slices.Items))
	}
	slice := &slices.Items[0]
	hw, id := profileHardware(t, node)
	want := GPUResourceSlice(node, hw, id)
	if diff := cmp.Diff(want.Spec, slice.Spec, quantityEqual); diff != "" {
		t.Errorf("published slice (-want,+got):\n%s", diff)
	}
	nt := &v1alpha1.NodeTopology{}
	if err := c.Get(ctx, client.ObjectKey{Name: "dgx1-0"}, nt); err != nil {
		t.Fatal(err)
	}
	published, err := nt.Spec.ToTopology()
	if err != nil {
		t.Fatal(err)
	}
	var devices []topology.DRADevice
	for _, d := range slice.Spec.Devices {
		devices = append(devices, topology.DRADevice{Driver: slice.Spec.Driver, Name: d.Name, UUID: *d.Attributes["uuid"].StringValue})
	}
	join := topology.JoinDRADevices(published, lockstep.DRAGPUDriver, devices)
	wantJoin := topology.DRAJoin{GPUs: map[string]int{"gpu-0": 0, "gpu-1": 1, "gpu-2": 2, "gpu-3": 3, "gpu-4": 4, "gpu-5": 5, "gpu-6": 6, "gpu-7": 7}}
	if diff := cmp.Diff(wantJoin, join); diff != "" {
		t.Errorf("slice joined to the published NodeTopology (-want,+got):\n%s", diff)
	}

	// Pods: one on each node. The DRA pod's claim was allocated gpu-3 and
	// gpu-6 of its node's pool (and a device of another driver); the
	// device-plugin pod asks for nvidia.com/gpu.
	draPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dra", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:       "dgx1-0",
			Containers:     []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr("two-gpus")}},
		},
	}
	pluginPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: "h100-0",
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{lockstep.GPUResource: resource.MustParse("2")},
			}}},
		},
	}
	for _, p := range []*corev1.Pod{draPod, pluginPod} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "two-gpus", Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name:    "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2},
		}}}},
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	claim.Status = resourcev1.ResourceClaimStatus{
		Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: lockstep.DRAGPUDriver, Pool: "dgx1-0", Device: "gpu-3"},
			{Request: "gpu", Driver: lockstep.DRAGPUDriver, Pool: "dgx1-0", Device: "gpu-6"},
			{Request: "gpu", Driver: "compute-domain.nvidia.com", Pool: "dgx1-0", Device: "channel-0"},
		}}},
		ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: draPod.Name, UID: draPod.UID}},
	}
	if err := c.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	reconcileAll(r)

	type nodeState struct {
		Free        int32
		Allocations []v1alpha1.GPUAllocation
	}
	got := map[string]nodeState{}
	for _, name := range []string{"dgx1-0", "h100-0"} {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, nt); err != nil {
			t.Fatal(err)
		}
		got[name] = nodeState{nt.Status.FreeGPUs, nt.Status.Allocations}
	}
	wantState := map[string]nodeState{
		"dgx1-0": {6, []v1alpha1.GPUAllocation{{Namespace: "default", Pod: "dra", PodUID: string(draPod.UID), GPUs: []int32{3, 6}}}},
		"h100-0": {6, []v1alpha1.GPUAllocation{{Namespace: "default", Pod: "plugin", PodUID: string(pluginPod.UID), GPUs: []int32{0, 1}}}},
	}
	if diff := cmp.Diff(wantState, got); diff != "" {
		t.Errorf("allocations (-want,+got):\n%s", diff)
	}

	// A restarted agent finds everything as it should be and writes
	// nothing.
	before := resourceVersions(t, c)
	reconcileAll(newAgent())
	if diff := cmp.Diff(before, resourceVersions(t, c)); diff != "" {
		t.Errorf("a restarted agent wrote (-before,+after):\n%s", diff)
	}

	// A slice someone else changed is put back in place, under its
	// generation.
	slice.Spec.Devices = slice.Spec.Devices[:7]
	if err := c.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	reconcileAll(r)
	if err := c.Get(ctx, client.ObjectKey{Name: slice.Name}, slice); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Spec, slice.Spec, quantityEqual); diff != "" {
		t.Errorf("slice after an edit (-want,+got):\n%s", diff)
	}

	// The DRA node moves to the device plugin: its slice goes.
	if err := c.Get(ctx, client.ObjectKey{Name: "dgx1-0"}, node); err != nil {
		t.Fatal(err)
	}
	delete(node.Labels, lockstep.LabelGPUDriver)
	if err := c.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	reconcileAll(r)
	if err := c.List(ctx, &slices); err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 0 {
		t.Errorf("%d ResourceSlices left after the node moved to the device plugin", len(slices.Items))
	}

	// Back on DRA, then deleted: envtest runs no garbage collector, so the
	// slice going shows the agent deleted it.
	node.Labels[lockstep.LabelGPUDriver] = lockstep.GPUDriverDRA
	if err := c.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	reconcileAll(r)
	if err := c.Get(ctx, client.ObjectKey{Name: GPUSliceName("dgx1-0")}, &resourcev1.ResourceSlice{}); err != nil {
		t.Fatalf("no slice after the node came back to DRA: %v", err)
	}
	if err := c.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	reconcileAll(r)
	if err := c.List(ctx, &slices); err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 0 {
		t.Errorf("%d ResourceSlices left after the node was deleted", len(slices.Items))
	}
}

// resourceVersions are the versions of every object the fake agent writes.
func resourceVersions(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	var slices resourcev1.ResourceSliceList
	var nts v1alpha1.NodeTopologyList
	var nodes corev1.NodeList
	for _, l := range []client.ObjectList{&slices, &nts, &nodes} {
		if err := c.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range slices.Items {
		out["slice/"+s.Name] = s.ResourceVersion
	}
	for _, n := range nts.Items {
		out["nodetopology/"+n.Name] = n.ResourceVersion
	}
	for _, n := range nodes.Items {
		out["node/"+n.Name] = n.ResourceVersion
	}
	return out
}
