package topologyplacement

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// allocate allocates claim the GPU devices of node named, reserved for
// pod, as DynamicResources' PreBind writes it, and records the devices
// allocated in dra.
func allocate(claim *resourcev1.ResourceClaim, pod *v1.Pod, node string, devices ...string) {
	claim.Status.Allocation = &resourcev1.AllocationResult{}
	for _, d := range devices {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results,
			resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: lockstep.DRAGPUDriver, Pool: node, Device: d})
	}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
}

// TestDRABooksFollowClaims: another gang's open slot holds GPUs 0-3 of the
// only DRA node, so the plan of a 4-GPU member predicts 4-7; the
// allocator, which does not see the slot, gives its claim 0-3. Once the
// claim is allocated the books hold 0-3 for the member, and when the other
// gang's plan goes, the node has 4 GPUs free in the scheduler, as in the
// claims. Before the books followed claims they kept the prediction: the
// node showed 0 free with 4 idle until the member ended.
func TestDRABooksFollowClaims(t *testing.T) {
	ctx := context.Background()
	p, dra := draPlugin(t, 1)
	p.nodes = p.nodes[:1] // d1
	pod := p.pods[0]
	pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To("m-0-gpus")}}
	p.addPod(t, pod)
	claim := &resourcev1.ResourceClaim{}
	claim.Namespace, claim.Name = "ns", "m-0-gpus"
	claim.Spec = dra.Templates["ns/four"].Spec.Spec
	dra.Claims = map[string]*resourcev1.ResourceClaim{"ns/m-0-gpus": claim}

	p.gangs.Books.Add("ns/other#2", &placement.Plan{Members: []placement.Assignment{
		{Node: "d1", GPUs: topology.NewGPUSet(0, 1, 2, 3)},
		{Node: "d2", GPUs: topology.NewGPUSet(0, 1, 2, 3)},
	}}, time.Unix(0, 0))

	state := framework.NewCycleState()
	if _, status := p.PreFilter(ctx, state, pod, p.nodes); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	if status := p.Reserve(ctx, state, pod, "d1"); !status.IsSuccess() {
		t.Fatalf("Reserve: %v", status)
	}
	a, ok := p.gangs.Books.AssignmentOf(pod.UID)
	if !ok || a.GPUs != topology.NewGPUSet(4, 5, 6, 7) {
		t.Fatalf("reserved with %v (booked %v), want the prediction 4-7 beside the open slot", a.GPUs, ok)
	}

	// An unallocated claim replaces nothing.
	p.claimEvents().OnUpdate(nil, claim)
	if a, _ := p.gangs.Books.AssignmentOf(pod.UID); a.GPUs != topology.NewGPUSet(4, 5, 6, 7) {
		t.Errorf("books hold %v for a member whose claim is not allocated, want the prediction 4-7", a.GPUs)
	}

	allocate(claim, pod, "d1", "gpu-0", "gpu-1", "gpu-2", "gpu-3")
	dra.Devices.Insert(
		structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-0"), structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-1"),
		structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-2"), structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-3"))
	p.claimEvents().OnUpdate(nil, claim)
	a, _ = p.gangs.Books.AssignmentOf(pod.UID)
	if diff := cmp.Diff(topology.NewGPUSet(0, 1, 2, 3), a.GPUs); diff != "" {
		t.Errorf("books hold for the member (-want,+got):\n%s", diff)
	}

	// The other gang's plan ends (its member never came): 4-7 are free.
	p.gangs.Books.Drop("ns/other#2")
	if got := p.view.ClaimedFree("d1", ""); got != 4 {
		t.Errorf("ClaimedFree(d1) = %d after the other plan went, want 4 (GPUs 4-7)", got)
	}
	snap, err := p.view.Snapshot(pod, "ns/next#1", p.view.Request(pod), p.nodes)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Nodes) != 1 || snap.Nodes[0].FreeGPUs != topology.NewGPUSet(4, 5, 6, 7) {
		var free []string
		for _, n := range snap.Nodes {
			free = append(free, n.Name+": "+n.FreeGPUs.String())
		}
		t.Errorf("a plan sees free GPUs %v, want d1 with 4-7", free)
	}
}

// TestClaimedFreeReadsClaims: a plan's validity on a DRA node counts out
// the devices claims hold even where the node's agent reports the GPUs
// free, as an agent whose kubelet does not serve DynamicResources does,
// and one that reads them on its resync does for a while.
func TestClaimedFreeReadsClaims(t *testing.T) {
	p, dra := draPlugin(t, 1)
	if got := p.view.ClaimedFree("d1", ""); got != 8 {
		t.Fatalf("ClaimedFree(d1) = %d with no claim, want 8", got)
	}
	dra.Devices.Insert(structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-5"), structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-6"),
		structured.MakeDeviceID(lockstep.DRAGPUDriver, "d2", "gpu-0"))
	for node, want := range map[string]int{"d1": 6, "d2": 7} {
		if got := p.view.ClaimedFree(node, ""); got != want {
			t.Errorf("ClaimedFree(%s) = %d with claimed devices the agent reports free, want %d", node, got, want)
		}
	}
}

// TestClaimedPodAdoptsNoAnnotation: after a restart the books do not know
// a bound DRA member; its lockstep.dev/gpus annotation, the old plan's
// prediction, is not adopted (its claims hold its devices) and draws no
// warning.
func TestClaimedPodAdoptsNoAnnotation(t *testing.T) {
	p, _ := draPlugin(t, 1)
	pod := p.pods[0].DeepCopy()
	pod.Spec.NodeName = "d1"
	pod.Annotations = map[string]string{lockstep.AnnotationGPUs: "4,5,6,7"}
	p.adoptBoundGPUs(pod)
	if a, ok := p.gangs.Books.AssignmentOf(pod.UID); ok {
		t.Errorf("books adopted %v for a pod that claims its GPUs", a.GPUs)
	}
	if !p.ignored.Empty() {
		t.Errorf("the annotation of a pod that claims its GPUs was judged and ignored")
	}
}
