package topologyplacement

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

func gpuRequest(name string, n int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n}}
}

// claimSpec is a claim spec of requests.
func claimSpec(requests ...resourcev1.DeviceRequest) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests}}
}

func TestPodRequestFromClaims(t *testing.T) {
	dra := &schedtesting.FakeDRA{
		Templates: map[string]*resourcev1.ResourceClaimTemplate{
			"ns/four": {Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec(gpuRequest("gpus", 4))}},
			"ns/all": {Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec(resourcev1.DeviceRequest{Name: "gpus",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeAll}})}},
		},
		Claims: map[string]*resourcev1.ResourceClaim{
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
		dra  nodeview.Source
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
			p.view = p.newNodeView(tc.dra, nil)
			req := p.view.Request(tc.pod)
			got := result{GPUs: req.GPUs, Claimed: req.Claimed, Problem: req.ClaimProblem != "", Unresolvable: req.ClaimUnresolvable}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Request (-want,+got):\n%s\nproblem: %s", diff, req.ClaimProblem)
			}
		})
	}
}

// draPlugin is a test plugin on DRA HGX nodes "d1" and "d2" (no
// nvidia.com/gpu) and device-plugin HGX node "p", with PodGroup g of
// members members claiming 4 GPUs each, whose pods it returns.
func draPlugin(t testing.TB, members int) (*metricsPlugin, *schedtesting.FakeDRA) {
	t.Helper()
	p := newMetricsPlugin(t, 0, false, nil)
	dra := &schedtesting.FakeDRA{
		Templates: map[string]*resourcev1.ResourceClaimTemplate{"ns/four": {Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec(gpuRequest("gpus", 4))}}},
		GPUSlices: []*resourcev1.ResourceSlice{gpuSlice("d1", 0, 1, 2, 3, 4, 5, 6, 7), gpuSlice("d2", 0, 1, 2, 3, 4, 5, 6, 7)},
		Devices:   sets.New[structured.DeviceID](),
	}
	// No followed devices: each plan reads the fake's objects as they are
	// then.
	p.view = p.newNodeView(dra, nil)
	p.nodes = nil
	for _, name := range []string{"d1", "d2", "p"} {
		p.view.Set(nil, p.view.Slim(draNodeTopology(t, name)))
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

// followDevices has p's view follow dra's slices by informer events
// (nodeview.View.FollowDevices), as the plugin's informers feed it.
func followDevices(p *metricsPlugin, dra *schedtesting.FakeDRA) {
	slices, _ := p.view.FollowDevices()
	for _, s := range dra.GPUSlices {
		slices.OnAdd(s, true)
	}
}

// addPod makes pod known to the plugin's pod informer.
func (p *metricsPlugin) addPod(t testing.TB, pod *v1.Pod) {
	t.Helper()
	if err := p.handle.SharedInformerFactory().Core().V1().Pods().Informer().GetIndexer().Add(pod); err != nil {
		t.Fatal(err)
	}
}

func TestDRAUnjoinedDevicesMetric(t *testing.T) {
	p, dra := draPlugin(t, 2)
	dra.GPUSlices[1].Spec.Devices[3].Attributes = nil
	if _, err := p.view.Snapshot(p.pods[0], p.planKey(p.pods[0]), p.view.Request(p.pods[0]), p.nodes); err != nil {
		t.Fatal(err)
	}
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
		change func(t *testing.T, p *metricsPlugin, dra *schedtesting.FakeDRA)
		want   fwk.Code
	}{
		{
			name: "a member asking for all of a node's GPUs",
			change: func(t *testing.T, p *metricsPlugin, dra *schedtesting.FakeDRA) {
				dra.Templates["ns/four"].Spec.Spec.Devices.Requests[0].Exactly.AllocationMode = resourcev1.DeviceAllocationModeAll
			},
			want: fwk.UnschedulableAndUnresolvable,
		},
		{
			name: "members asking for GPUs both ways",
			change: func(t *testing.T, p *metricsPlugin, dra *schedtesting.FakeDRA) {
				other := utiltesting.MakePod("plugin", "ns").GPUs(4).PodGroup("g").Obj()
				other.UID = "uid-plugin"
				p.addPod(t, other)
			},
			want: fwk.UnschedulableAndUnresolvable,
		},
		{
			name: "more GPUs than any DRA node has",
			change: func(t *testing.T, p *metricsPlugin, dra *schedtesting.FakeDRA) {
				dra.GPUSlices[0] = gpuSlice("d1", 0, 1, 2)
				dra.GPUSlices[1] = gpuSlice("d2", 0, 1, 2)
			},
			want: fwk.UnschedulableAndUnresolvable,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, dra := draPlugin(t, 2)
			tc.change(t, p, dra)
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
			dra.GPUSlices = nil
			p.nodes = make([]fwk.NodeInfo, nodes)
			for i := range p.nodes {
				node := gpuNode(fmt.Sprintf("node-%04d", i), 0)
				node.Labels = map[string]string{
					lockstep.LabelFabricTier0:      fmt.Sprintf("leaf-%d", i/32),
					lockstep.LabelFabricTier1:      fmt.Sprintf("spine-%d", i/512),
					lockstep.LabelNVIDIAGPUProduct: "NVIDIA-H100-80GB-HBM3",
				}
				p.view.Set(nil, p.view.Slim(draNodeTopology(b, node.Name)))
				dra.GPUSlices = append(dra.GPUSlices, gpuSlice(node.Name, 0, 1, 2, 3, 4, 5, 6, 7))
				p.nodes[i] = nodeInfo(node)
			}
			// As the plugin follows the informers: the view is kept
			// between plans.
			followDevices(p, dra)
			pod := p.pods[0]
			gang := placement.Gang{Members: gpus / 8, GPUsPerMember: 8, MilliCPUPerMember: 1000, MemoryPerMember: 1 << 30}
			// PreFilter reads the member's request and plan key once,
			// before it plans.
			req, key := p.view.Request(pod), p.planKey(pod)
			plan := func() *placement.Plan {
				snap, err := p.view.Snapshot(pod, key, req, p.nodes)
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
				p.view.Recycle(snap)
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
