package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// The summary lists the DRA devices of every pod that holds some, by pod,
// whether or not the placement can be rated.
func TestSummarizePlacementDevices(t *testing.T) {
	cluster, err := newPlacementCluster(lockstep.DefaultTopologyConfig(), []topology.NodeLabels{
		{Name: "n1", Labels: hgxLabels("leaf-1", "spine-1")}, {Name: "n2", Labels: hgxLabels("leaf-1", "spine-1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	pods := []placedPod{
		{Name: "pt-worker-0", Node: "n2", Devices: []string{"gpu.nvidia.com/n2/gpu-0", "gpu.nvidia.com/n2/gpu-1"}},
		{Name: "pt-master-0", Node: "n1", Devices: []string{"compute-domain.nvidia.com/n1/channel-0", "gpu.nvidia.com/n1/gpu-4"}},
		{Name: "launcher", Node: "n1", NoGPUs: true},
	}
	got, err := summarizePlacement(pods, nil, cluster)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.PodDevices{
		{Pod: "pt-master-0", Node: "n1", Devices: []string{"compute-domain.nvidia.com/n1/channel-0", "gpu.nvidia.com/n1/gpu-4"}},
		{Pod: "pt-worker-0", Node: "n2", Devices: []string{"gpu.nvidia.com/n2/gpu-0", "gpu.nvidia.com/n2/gpu-1"}},
	}
	if diff := cmp.Diff(want, got.Devices); diff != "" {
		t.Errorf("devices (-want,+got):\n%s", diff)
	}
	if got.Efficiency != "" {
		t.Errorf("efficiency %q without node topologies, want none", got.Efficiency)
	}
}

func TestAllocatedGPUs(t *testing.T) {
	allocs := []v1alpha1.GPUAllocation{
		{Pod: "a", PodUID: "old-uid", GPUs: []int32{0, 1}},
		{Pod: "a", PodUID: "new-uid", GPUs: []int32{4, 5, 6}},
	}
	cases := []struct {
		uid    types.UID
		want   string
		wantOK bool
	}{{uid: "new-uid", want: "4,5,6", wantOK: true}, {uid: "old-uid", want: "0,1", wantOK: true}, {uid: "other"}}
	for _, tc := range cases {
		got, ok := allocatedGPUs(allocs, tc.uid)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("allocatedGPUs(%s) = %q, %v; want %q, %v", tc.uid, got, ok, tc.want, tc.wantOK)
		}
	}
}

// A DRA gang's placement is rated on the GPUs its claims were allocated,
// as the agent joins them to GPU indices (status.allocations), and lists
// each member's devices; until the agent reports them the placement is
// not rated, and the agent's report wakes the job. A device-plugin pod's
// GPUs are the agent's too where it reports them, over the annotation.
func TestPlacementOfClaimedGPUs(t *testing.T) {
	for _, dra := range []bool{true, false} {
		t.Run(fmt.Sprintf("dra=%v", dra), func(t *testing.T) { testPlacementOfAllocatedGPUs(t, dra) })
	}
}

// testPlacementOfAllocatedGPUs runs a gang of two 4-GPU pods, through DRA
// claims or nvidia.com/gpu, whose GPUs are 4-7 of their nodes; the
// device-plugin pods' annotation says 0-3.
func testPlacementOfAllocatedGPUs(t *testing.T, dra bool) {
	ctx := context.Background()
	tpl := draTemplate("four")
	if !dra {
		tpl = envtestTemplate(4)
	}
	job := utiltesting.MakeTrainingJob("pt", "ns").Framework(v1alpha1.FrameworkPyTorch).UID("job-uid").
		Role(v1alpha1.ReplicaMaster, 1, tpl).Role(v1alpha1.ReplicaWorker, 1, tpl).Obj()
	job.Default()
	objs := []client.Object{job, utiltesting.MakeGPUClaimTemplate("four", "ns", 4)}
	nodeOf := map[string]string{"pt-master-0": "gpu-1", "pt-worker-0": "gpu-2"}
	for _, n := range []string{"gpu-1", "gpu-2"} {
		objs = append(objs, placementNodeObj(n, "leaf-1", "spine-1", true),
			&v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: n, Generation: 1}, Spec: *hgxSpec(t)})
	}
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithStatusSubresource(&v1alpha1.TrainingJob{}, &v1alpha1.NodeTopology{}).
		WithIndex(&corev1.Pod{}, podNodeNameField, podNodeName).WithObjects(objs...).Build()
	r := fakeReconciler(c)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pt"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}

	// Bind and run each pod, as the scheduler, the claim controller and
	// the kubelet do: its claim is allocated GPUs 4-7 of its node.
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("%d pods, want 2", len(pods.Items))
	}
	uids := map[string]types.UID{}
	for i := range pods.Items {
		p := &pods.Items[i]
		uids[p.Name] = p.UID
		node := nodeOf[p.Name]
		p.Spec.NodeName = node
		if !dra {
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, lockstep.AnnotationGPUs, "0,1,2,3")
		}
		if err := c.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		if !dra {
			continue
		}
		claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-gpus-x1", Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true)}}}}
		claim.Status.Allocation = &resourcev1.AllocationResult{}
		for g := 4; g < 8; g++ {
			claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
				Request: "gpus", Driver: lockstep.DRAGPUDriver, Pool: node, Device: fmt.Sprintf("gpu-%d", g)})
		}
		if err := c.Create(ctx, claim); err != nil {
			t.Fatal(err)
		}
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To(claim.Name)}}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	devices := []v1alpha1.PodDevices{
		{Pod: "pt-master-0", Node: "gpu-1", Devices: []string{"gpu.nvidia.com/gpu-1/gpu-4", "gpu.nvidia.com/gpu-1/gpu-5", "gpu.nvidia.com/gpu-1/gpu-6", "gpu.nvidia.com/gpu-1/gpu-7"}},
		{Pod: "pt-worker-0", Node: "gpu-2", Devices: []string{"gpu.nvidia.com/gpu-2/gpu-4", "gpu.nvidia.com/gpu-2/gpu-5", "gpu.nvidia.com/gpu-2/gpu-6", "gpu.nvidia.com/gpu-2/gpu-7"}},
	}
	unrated := &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"gpu-1", "gpu-2"}, Devices: devices}
	rated := unrated.DeepCopy()
	rated.BusBandwidthMBps, rated.Efficiency = 50000, "0.111"
	rated.Reason = "on 2 nodes in leaf leaf-1; GPUs 4,5,6,7 of node gpu-1 get 50.0 GB/s each of NIC bandwidth, against 450.0 GB/s for the best placement"
	before := unrated
	if !dra {
		// Rated on the annotation until the agents report.
		before = rated.DeepCopy()
		before.Devices = nil
		before.Reason = "on 2 nodes in leaf leaf-1; GPUs 0,1,2,3 of node gpu-1 get 50.0 GB/s each of NIC bandwidth, against 450.0 GB/s for the best placement"
		rated.Devices = nil
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, placementOf(t, c, req)); diff != "" {
		t.Errorf("status.placement before the agents report the GPUs (-want,+got):\n%s", diff)
	}

	// The agents report the GPUs; a device-plugin pod's annotation, which
	// its device plugin did not follow, does not count.
	for name, node := range nodeOf {
		var nt v1alpha1.NodeTopology
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &nt); err != nil {
			t.Fatal(err)
		}
		old := nt.DeepCopy()
		nt.Status.Allocations = []v1alpha1.GPUAllocation{{Namespace: "ns", Pod: name, PodUID: string(uids[name]), GPUs: []int32{4, 5, 6, 7}}}
		if !nodeTopologyPublished.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: &nt}) {
			t.Errorf("the agent's report of pod %s's GPUs is filtered out", name)
		}
		if err := c.Status().Update(ctx, &nt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rated, placementOf(t, c, req)); diff != "" {
		t.Errorf("status.placement once the agent reports the claims' GPUs (-want,+got):\n%s", diff)
	}
}

// A claim wakes the jobs of the pods it is for: the pod that owns it and
// those it is reserved for, each job once; pods no job controls, and pods
// not in the cache, wake none.
func TestJobsOfClaim(t *testing.T) {
	pod := func(name string, owner *metav1.OwnerReference) *corev1.Pod {
		p := utiltesting.MakePod(name, "ns").Obj()
		if owner != nil {
			p.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return p
	}
	jobRef := func(job string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob", Name: job, UID: types.UID("uid-" + job), Controller: ptr.To(true)}
	}
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(
		pod("a-worker-0", jobRef("a")), pod("a-worker-1", jobRef("a")), pod("b-worker-0", jobRef("b")),
		pod("plain", nil),
		pod("of-a-jobset", &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "a", UID: "uid-batch", Controller: ptr.To(true)}),
	).Build()
	r := fakeReconciler(c)
	ownedBy := func(pod string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod, UID: "uid", Controller: ptr.To(true)}}
	}
	reserved := func(pods ...string) []resourcev1.ResourceClaimConsumerReference {
		var refs []resourcev1.ResourceClaimConsumerReference
		for _, p := range pods {
			refs = append(refs, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: "uid"})
		}
		return refs
	}
	tests := []struct {
		name     string
		owners   []metav1.OwnerReference
		reserved []resourcev1.ResourceClaimConsumerReference
		want     []string
	}{
		{name: "from a pod's template", owners: ownedBy("a-worker-0"), want: []string{"a"}},
		{name: "allocated for its owner", owners: ownedBy("a-worker-0"), reserved: reserved("a-worker-0"), want: []string{"a"}},
		{name: "shared by two jobs", reserved: reserved("a-worker-0", "a-worker-1", "b-worker-0"), want: []string{"a", "b"}},
		{name: "of pods no job controls", owners: ownedBy("plain"), reserved: reserved("of-a-jobset"), want: nil},
		{name: "of a pod gone", owners: ownedBy("gone"), reserved: reserved("gone"), want: nil},
		{name: "reserved for no pod", reserved: []resourcev1.ResourceClaimConsumerReference{{APIGroup: "example.com", Resource: "pods", Name: "a-worker-0", UID: "uid"}}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "ns", OwnerReferences: tc.owners}}
			claim.Status.ReservedFor = tc.reserved
			var got []string
			for _, req := range r.jobsOfClaim(context.Background(), claim) {
				if req.Namespace != "ns" {
					t.Errorf("request %v, want namespace ns", req)
				}
				got = append(got, req.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("jobs (-want,+got):\n%s", diff)
			}
		})
	}
}

// Only what changes the devices a summary lists passes: an allocation
// made, changed or dropped, a claim deleted, an allocated claim listed.
// Reservations and metadata alone do not.
func TestClaimAllocationChanged(t *testing.T) {
	allocated := func(device string) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
		if device != "" {
			c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
				{Request: "gpus", Driver: lockstep.DRAGPUDriver, Pool: "n1", Device: device}}}}
		}
		return c
	}
	reservedToo := allocated("gpu-0")
	reservedToo.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "uid"}}
	relabelled := allocated("gpu-0")
	relabelled.Labels = map[string]string{"a": "b"}
	updates := []struct {
		name     string
		old, new *resourcev1.ResourceClaim
		want     bool
	}{
		{name: "allocated", old: allocated(""), new: allocated("gpu-0"), want: true},
		{name: "another device", old: allocated("gpu-0"), new: allocated("gpu-1"), want: true},
		{name: "deallocated", old: allocated("gpu-0"), new: allocated(""), want: true},
		{name: "reserved", old: allocated("gpu-0"), new: reservedToo},
		{name: "labelled", old: allocated("gpu-0"), new: relabelled},
	}
	for _, tc := range updates {
		if got := claimAllocationChanged.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("update %s: passed %v, want %v", tc.name, got, tc.want)
		}
	}
	if !claimAllocationChanged.Create(event.CreateEvent{Object: allocated("gpu-0")}) {
		t.Error("an allocated claim listed is filtered out")
	}
	if claimAllocationChanged.Create(event.CreateEvent{Object: allocated("")}) {
		t.Error("a claim created unallocated passes")
	}
	if !claimAllocationChanged.Delete(event.DeleteEvent{Object: allocated("gpu-0")}) {
		t.Error("a deleted claim is filtered out")
	}
}
