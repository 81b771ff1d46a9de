package topologyplacement

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// fakeDRA is a draSource over fixed objects.
type fakeDRA struct {
	claims    map[string]*resourcev1.ResourceClaim
	templates map[string]*resourcev1.ResourceClaimTemplate
	gpuSlices []*resourcev1.ResourceSlice
	devices   sets.Set[structured.DeviceID]
}

func (f *fakeDRA) claim(ns, name string) (*resourcev1.ResourceClaim, error) {
	if c, ok := f.claims[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("resourceclaims"), name)
}

func (f *fakeDRA) template(ns, name string) (*resourcev1.ResourceClaimTemplate, error) {
	if t, ok := f.templates[ns+"/"+name]; ok {
		return t, nil
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("resourceclaimtemplates"), name)
}

func (f *fakeDRA) slices() ([]*resourcev1.ResourceSlice, error) { return f.gpuSlices, nil }

func (f *fakeDRA) allocated() (sets.Set[structured.DeviceID], error) { return f.devices, nil }

// gpuRequest is a claim request of n GPUs.
func gpuRequest(name string, n int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n}}
}

// claimSpec is a claim spec of requests.
func claimSpec(requests ...resourcev1.DeviceRequest) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests}}
}

// claimPod is a gang member of PodGroup g whose pod claim "gpus" comes from
// template tmpl.
func claimPod(name, tmpl string) *v1.Pod {
	pod := utiltesting.MakePod(name, "ns").PodGroup("g").Obj()
	pod.UID = types.UID("uid-" + name)
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(tmpl)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpus"}}
	return pod
}

func TestPodRequestFromClaims(t *testing.T) {
	dra := &fakeDRA{
		templates: map[string]*resourcev1.ResourceClaimTemplate{
			"ns/four": {Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec(gpuRequest("gpus", 4))}},
			"ns/all": {Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec(resourcev1.DeviceRequest{Name: "gpus",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeAll}})}},
		},
		claims: map[string]*resourcev1.ResourceClaim{
			// Generated from "four" and edited since: the claim is what
			// will be allocated.
			"ns/m-gpus-x": {Spec: claimSpec(gpuRequest("gpus", 2))},
			"ns/shared":   {Spec: claimSpec(gpuRequest("gpus", 8))},
		},
	}
	withStatus := func(pod *v1.Pod, claim *string) *v1.Pod {
		pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: claim}}
		return pod
	}
	type result struct {
		GPUs         int
		Claimed      bool
		Problem      bool
		Unresolvable bool
	}
	tests := []struct {
		name string
		dra  draSource
		pod  *v1.Pod
		want result
	}{
		{name: "template before its claim exists", dra: dra, pod: claimPod("m", "four"), want: result{GPUs: 4, Claimed: true}},
		{name: "the claim generated for the pod", dra: dra, pod: withStatus(claimPod("m", "four"), ptr.To("m-gpus-x")), want: result{GPUs: 2, Claimed: true}},
		{name: "no claim was needed", dra: dra, pod: withStatus(claimPod("m", "four"), nil), want: result{}},
		{name: "the generated claim is gone", dra: dra, pod: withStatus(claimPod("m", "four"), ptr.To("m-gpus-deleted")), want: result{GPUs: 4, Claimed: true}},
		{
			name: "a claim by name",
			dra:  dra,
			pod: func() *v1.Pod {
				pod := claimPod("m", "four")
				pod.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "gpus", ResourceClaimName: ptr.To("shared")}
				return pod
			}(),
			want: result{GPUs: 8, Claimed: true},
		},
		{name: "template not in the cache yet", dra: dra, pod: claimPod("m", "missing"), want: result{Problem: true}},
		{name: "all of a node's GPUs", dra: dra, pod: claimPod("m", "all"), want: result{Problem: true, Unresolvable: true}},
		{
			name: "nvidia.com/gpu and claims",
			dra:  dra,
			pod: func() *v1.Pod {
				pod := claimPod("m", "four")
				pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{lockstep.GPUResource: resource.MustParse("4")}
				pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{lockstep.GPUResource: resource.MustParse("4")}
				return pod
			}(),
			want: result{GPUs: 4, Problem: true, Unresolvable: true},
		},
		{name: "nvidia.com/gpu only", dra: dra, pod: utiltesting.MakePod("m", "ns").GPUs(8).Obj(), want: result{GPUs: 8}},
		{name: "a scheduler without DRA leaves claims alone", dra: nil, pod: claimPod("m", "four"), want: result{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPlugin(t)
			p.dra = tc.dra
			req := p.podRequest(tc.pod)
			got := result{GPUs: req.gpus, Claimed: req.claimed, Problem: req.claimProblem != "", Unresolvable: req.claimUnresolvable}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("podRequest (-want,+got):\n%s\nproblem: %s", diff, req.claimProblem)
			}
		})
	}
}

// draNodeTopology is an HGX node's NodeTopology whose GPUs have the UUIDs
// the fake agent gives them.
func draNodeTopology(t testing.TB, name string) *v1alpha1.NodeTopology {
	t.Helper()
	nt := hgxNodeTopology(t, name)
	for i := range nt.Spec.GPUs {
		nt.Spec.GPUs[i].UUID = fmt.Sprintf("GPU-fake-%s-%d", name, i)
	}
	return nt
}

// gpuSlice is node's gpu.nvidia.com ResourceSlice: device gpu-<i> with the
// UUID of GPU i, for each i in gpus.
func gpuSlice(node string, gpus ...int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu"},
		Spec: resourcev1.ResourceSliceSpec{Driver: lockstep.DRAGPUDriver, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}},
	}
	for _, i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				lockstep.DRAUUIDAttribute: {StringValue: ptr.To(fmt.Sprintf("GPU-fake-%s-%d", node, i))},
			}})
	}
	return s
}

// draPlugin is a test plugin on DRA HGX nodes "d1" and "d2" (no
// nvidia.com/gpu) and device-plugin HGX node "p", with PodGroup g of
// members members claiming 4 GPUs each, whose pods it returns.
func draPlugin(t testing.TB, members int) (*metricsPlugin, *fakeDRA) {
	t.Helper()
	p := newMetricsPlugin(t, 0, false, nil)
	specs := newSpecTable()
	p.gpus = newGPUIndex(specs)
	dra := &fakeDRA{
		templates: map[string]*resourcev1.ResourceClaimTemplate{"ns/four": {Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec(gpuRequest("gpus", 4))}}},
		gpuSlices: []*resourcev1.ResourceSlice{gpuSlice("d1", 0, 1, 2, 3, 4, 5, 6, 7), gpuSlice("d2", 0, 1, 2, 3, 4, 5, 6, 7)},
		devices:   sets.New[structured.DeviceID](),
	}
	// No deviceView: each plan reads the fake's objects as they are then.
	p.dra = dra
	p.nodes = nil
	for _, name := range []string{"d1", "d2", "p"} {
		nt := draNodeTopology(t, name)
		if _, err := specs.slim(nt); err != nil {
			t.Fatal(err)
		}
		p.gpus.set(nt)
		gpus := int64(0)
		if name == "p" {
			gpus = 8
		}
		p.nodes = append(p.nodes, nodeInfo(gpuNode(name, gpus)))
	}
	pg := utiltesting.MakePodGroup("g", "ns", int32(members)).Obj()
	if err := p.client.Create(context.Background(), pg); err != nil {
		t.Fatal(err)
	}
	p.pods = nil
	for i := range members {
		pod := claimPod(fmt.Sprintf("m-%d", i), "four")
		p.addPod(t, pod)
		p.pods = append(p.pods, pod)
	}
	return p, dra
}

// addPod makes pod known to the plugin's pod informer.
func (p *metricsPlugin) addPod(t testing.TB, pod *v1.Pod) {
	t.Helper()
	if err := p.handle.SharedInformerFactory().Core().V1().Pods().Informer().GetIndexer().Add(pod); err != nil {
		t.Fatal(err)
	}
}

// freeBy returns each snapshot node's free GPUs for pod.
func freeBy(t *testing.T, p *metricsPlugin, pod *v1.Pod) map[string]string {
	t.Helper()
	snap, err := p.snapshot(pod, p.podPlanKey(pod), p.nodes)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range snap.Nodes {
		out[n.Name] = n.FreeGPUs.List()
	}
	return out
}

func TestDRASnapshot(t *testing.T) {
	gpuPod := utiltesting.MakePod("x", "ns").GPUs(8).PodGroup("other").Obj()
	tests := []struct {
		name string
		// change changes the world of draPlugin before the snapshot.
		change func(t *testing.T, p *metricsPlugin, dra *fakeDRA)
		pod    func(p *metricsPlugin) *v1.Pod
		want   map[string]string
	}{
		{
			name: "a DRA pod sees the published devices of DRA nodes only",
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "an nvidia.com/gpu pod sees no free GPU on DRA nodes",
			pod:  func(*metricsPlugin) *v1.Pod { return gpuPod },
			want: map[string]string{"d1": "", "d2": "", "p": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "devices allocated to claims, in flight or written",
			change: func(_ *testing.T, _ *metricsPlugin, dra *fakeDRA) {
				dra.devices.Insert(structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-0"), structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-5"))
				// Another driver's device of the same name frees nothing.
				dra.devices.Insert(structured.MakeDeviceID("other.example.com", "d2", "gpu-1"))
			},
			want: map[string]string{"d1": "1,2,3,4,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "GPUs the books hold for another gang",
			change: func(_ *testing.T, p *metricsPlugin, _ *fakeDRA) {
				p.gangs.Books.Assign("other", "d2", topology.NewGPUSet(4, 5, 6, 7))
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1,2,3"},
		},
		{
			name: "GPUs the agent reports allocated or unhealthy",
			change: func(t *testing.T, p *metricsPlugin, _ *fakeDRA) {
				nt := draNodeTopology(t, "d1")
				nt.Status.Allocations = []v1alpha1.GPUAllocation{{Namespace: "ns", Pod: "y", PodUID: "y", GPUs: []int32{2}}}
				nt.Status.GPUHealth = []v1alpha1.GPUHealth{{Index: 3, State: v1alpha1.GPULost}}
				p.gpus.set(nt)
			},
			want: map[string]string{"d1": "0,1,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "devices that join no GPU, and GPUs with no device",
			change: func(_ *testing.T, _ *metricsPlugin, dra *fakeDRA) {
				s := gpuSlice("d2", 0, 1)
				// A device whose UUID is another node's GPU's.
				bad := gpuSlice("d1", 2).Spec.Devices[0]
				bad.Name = "gpu-2"
				s.Spec.Devices = append(s.Spec.Devices, bad)
				dra.gpuSlices[1] = s
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1"},
		},
		{
			name: "only a pool's newest generation counts",
			change: func(_ *testing.T, _ *metricsPlugin, dra *fakeDRA) {
				newer := gpuSlice("d2", 6, 7)
				newer.Spec.Pool.Generation = 2
				dra.gpuSlices = append(dra.gpuSlices, newer)
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "6,7"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, dra := draPlugin(t, 2)
			if tc.change != nil {
				tc.change(t, p, dra)
			}
			pod := p.pods[0]
			if tc.pod != nil {
				pod = tc.pod(p)
			}
			if diff := cmp.Diff(tc.want, freeBy(t, p, pod)); diff != "" {
				t.Errorf("free GPUs by node (-want,+got):\n%s", diff)
			}
		})
	}
}

// followedDevices gives p a deviceView fed the fake's slices and the
// spec table's UUIDs, as the informers feed the plugin's.
func followedDevices(p *metricsPlugin, dra *fakeDRA) *deviceView {
	p.devices = newDeviceView(klog.Background())
	p.gpus.specs.watchUUIDs(p.devices.OnUUIDs)
	for _, s := range dra.gpuSlices {
		p.devices.OnSlice(nil, s)
	}
	return p.devices
}

// TestDRAJoinsFollowChanges plans repeatedly with the joins kept between
// plans by the deviceView: a new slice, new UUIDs and a deleted slice each
// show in the next snapshot.
func TestDRAJoinsFollowChanges(t *testing.T) {
	p, dra := draPlugin(t, 2)
	devices := followedDevices(p, dra)
	pod := p.pods[0]
	steps := []struct {
		name   string
		change func(t *testing.T)
		want   map[string]string
	}{
		{name: "start", change: func(*testing.T) {}, want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"}},
		{
			name: "d2's slice republished with two devices",
			change: func(*testing.T) {
				old := dra.gpuSlices[1]
				dra.gpuSlices[1] = gpuSlice("d2", 0, 1)
				devices.OnSlice(old, dra.gpuSlices[1])
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1"},
		},
		{
			name: "d1's GPUs reported under other UUIDs",
			change: func(t *testing.T) {
				nt := draNodeTopology(t, "d1")
				for i := range nt.Spec.GPUs {
					nt.Spec.GPUs[i].UUID += "-new"
				}
				nt.Generation = 2
				if _, err := p.gpus.specs.slim(nt); err != nil {
					t.Fatal(err)
				}
				p.gpus.set(nt)
			},
			want: map[string]string{"d1": "", "d2": "0,1"},
		},
		{
			name: "d2's slice deleted",
			change: func(*testing.T) {
				devices.OnSliceDelete(cache.DeletedFinalStateUnknown{Key: dra.gpuSlices[1].Name, Obj: dra.gpuSlices[1]})
				dra.gpuSlices = dra.gpuSlices[:1]
			},
			want: map[string]string{"d1": ""},
		},
	}
	for _, step := range steps {
		step.change(t)
		if diff := cmp.Diff(step.want, freeBy(t, p, pod)); diff != "" {
			t.Errorf("%s: free GPUs by node (-want,+got):\n%s", step.name, diff)
		}
	}
	if _, kept := devices.pools["d2"]; kept {
		t.Error("the join of d2, whose slice is gone, is still kept")
	}
}

func TestDRAUnjoinedDevicesMetric(t *testing.T) {
	p, dra := draPlugin(t, 2)
	dra.gpuSlices[1].Spec.Devices[3].Attributes = nil
	freeBy(t, p, p.pods[0])
	if got := observed(t, p.reg, "lockstep_scheduler_dra_unjoined_devices"); got["lockstep_scheduler_dra_unjoined_devices{}"] != 1 {
		t.Errorf("dra_unjoined_devices = %v, want 1", got)
	}
}

// TestDRAGangPlansAndReleases plans a gang of two 4-GPU DRA members: both
// go to one DRA node, Filter agrees with the plan, and a gang rejected at
// Permit (a member unreserved) leaves the books holding nothing, so no GPU
// of a claim DynamicResources never writes stays hidden.
func TestDRAGangPlansAndReleases(t *testing.T) {
	ctx := context.Background()
	p, _ := draPlugin(t, 2)
	states := make([]fwk.CycleState, len(p.pods))
	var node string
	for i, pod := range p.pods {
		states[i] = framework.NewCycleState()
		res, status := p.PreFilter(ctx, states[i], pod, p.nodes)
		if !status.IsSuccess() {
			t.Fatalf("PreFilter %s: %v", pod.Name, status)
		}
		if res == nil || res.NodeNames.Len() != 1 {
			t.Fatalf("PreFilter %s narrowed to %v, want one node", pod.Name, res)
		}
		node = res.NodeNames.UnsortedList()[0]
		if node == "p" {
			t.Fatalf("DRA member planned on device-plugin node %s", node)
		}
		for _, ni := range p.nodes {
			got := p.Filter(ctx, states[i], pod, ni).IsSuccess()
			if want := ni.Node().Name == node; got != want {
				t.Errorf("Filter %s on %s = %v, want %v", pod.Name, ni.Node().Name, got, want)
			}
		}
		if status := p.Reserve(ctx, states[i], pod, node); !status.IsSuccess() {
			t.Fatalf("Reserve %s: %v", pod.Name, status)
		}
	}
	// The second member found the plan still fitting its DRA node.
	for series, n := range observed(t, p.reg, "lockstep_scheduler_plans_invalidated_total") {
		if n != 0 {
			t.Errorf("%s = %v before the gang was rejected, want 0", series, n)
		}
	}
	if held := p.gangs.Books.HeldOn(node, "").Len(); held != 8 {
		t.Errorf("books hold %d GPUs on %s after both members reserved, want 8", held, node)
	}
	// Permit rejects the gang: the framework unreserves every member.
	for i, pod := range p.pods {
		p.Unreserve(ctx, states[i], pod, node)
	}
	for _, ni := range p.nodes {
		if held := p.gangs.Books.HeldOn(ni.Node().Name, ""); held != 0 {
			t.Errorf("books hold GPUs %s on %s after the gang was rejected", held, ni.Node().Name)
		}
	}
	if plans, gpus := p.gangs.Books.Holding(); plans != 0 || gpus != 0 {
		t.Errorf("books hold %d plans and %d GPUs, want none", plans, gpus)
	}
}

func TestDRAGangRefusals(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// change changes draPlugin's world before its first member's
		// PreFilter.
		change func(t *testing.T, p *metricsPlugin)
		want   fwk.Code
	}{
		{
			name: "a member asking for all of a node's GPUs",
			change: func(t *testing.T, p *metricsPlugin) {
				p.dra.(*fakeDRA).templates["ns/four"].Spec.Spec.Devices.Requests[0].Exactly.AllocationMode = resourcev1.DeviceAllocationModeAll
			},
			want: fwk.UnschedulableAndUnresolvable,
		},
		{
			name: "members asking for GPUs both ways",
			change: func(t *testing.T, p *metricsPlugin) {
				other := utiltesting.MakePod("plugin", "ns").GPUs(4).PodGroup("g").Obj()
				other.UID = "uid-plugin"
				p.addPod(t, other)
			},
			want: fwk.UnschedulableAndUnresolvable,
		},
		{
			name: "more GPUs than any DRA node has",
			change: func(t *testing.T, p *metricsPlugin) {
				p.dra.(*fakeDRA).gpuSlices[0] = gpuSlice("d1", 0, 1, 2)
				p.dra.(*fakeDRA).gpuSlices[1] = gpuSlice("d2", 0, 1, 2)
			},
			want: fwk.UnschedulableAndUnresolvable,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := draPlugin(t, 2)
			tc.change(t, p)
			_, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], p.nodes)
			if status.Code() != tc.want {
				t.Errorf("PreFilter = %v, want code %v", status, tc.want)
			}
			if plans, gpus := p.gangs.Books.Holding(); plans != 0 || gpus != 0 {
				t.Errorf("books hold %d plans and %d GPUs after a refusal, want none", plans, gpus)
			}
		})
	}
}

// BenchmarkPlanGangDRA is BenchmarkPlanGang's idle cluster with every
// node's GPUs served by DRA: the snapshot lists 5,000 ResourceSlices and
// joins each node's devices to its GPUs.
func BenchmarkPlanGangDRA(b *testing.B) {
	const nodes = 5000
	for _, gpus := range []int{64, 512} {
		b.Run(fmt.Sprintf("nodes=%d/gpus=%d/idle", nodes, gpus), func(b *testing.B) {
			p, dra := draPlugin(b, 2)
			dra.gpuSlices = nil
			p.nodes = make([]fwk.NodeInfo, nodes)
			for i := range p.nodes {
				node := gpuNode(fmt.Sprintf("node-%04d", i), 0)
				node.Labels = map[string]string{
					lockstep.LabelFabricTier0:      fmt.Sprintf("leaf-%d", i/32),
					lockstep.LabelFabricTier1:      fmt.Sprintf("spine-%d", i/512),
					lockstep.LabelNVIDIAGPUProduct: "NVIDIA-H100-80GB-HBM3",
				}
				nt := draNodeTopology(b, node.Name)
				if _, err := p.gpus.specs.slim(nt); err != nil {
					b.Fatal(err)
				}
				p.gpus.set(nt)
				dra.gpuSlices = append(dra.gpuSlices, gpuSlice(node.Name, 0, 1, 2, 3, 4, 5, 6, 7))
				p.nodes[i] = nodeInfo(node)
			}
			// As the plugin follows the informers: the view is kept
			// between plans.
			followedDevices(p, dra)
			pod := p.pods[0]
			gang := placement.Gang{Members: gpus / 8, GPUsPerMember: 8, MilliCPUPerMember: 1000, MemoryPerMember: 1 << 30}
			plan := func() *placement.Plan {
				snap, err := p.snapshot(pod, p.podPlanKey(pod), p.nodes)
				if err != nil {
					b.Fatal(err)
				}
				plan, err := placement.Place(snap, gang, placement.Options{})
				if err != nil {
					b.Fatal(err)
				}
				// As BenchmarkPlanGang, which this one is measured
				// against, and the plugin once a plan is decided.
				placement.RankOrder(snap.Tree, plan, snap.NodeTopology)
				p.rows.recycle(snap)
				return plan
			}
			if first := plan(); len(first.Members) != gang.Members {
				b.Fatalf("planned %d members, want %d: %s", len(first.Members), gang.Members, first.Explanation)
			}
			b.ReportAllocs()
			for b.Loop() {
				plan()
			}
		})
	}
}
