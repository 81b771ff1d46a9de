package topologyplacement

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// TestDRAPlanPredictsAllocator plans a one-member gang claiming 4 GPUs on
// DRA node d1, whose gpu-0 is allocated and whose devices are under two
// PCIe roots (0-3, 4-7) as on a DGX-1: the member's planned GPUs are the
// ones the allocator will give its claim, one root first when the claim
// asks for it.
func TestDRAPlanPredictsAllocator(t *testing.T) {
	oneRoot, _ := gpuclaim.OneRootFirst(claimSpec(gpuRequest("gpus", 4)))
	tests := []struct {
		name        string
		spec        resourcev1.ResourceClaimSpec
		wantOneRoot bool
		want        topology.GPUSet
	}{
		{name: "as written: first free in device order", spec: claimSpec(gpuRequest("gpus", 4)), want: topology.NewGPUSet(1, 2, 3, 4)},
		{name: "one PCIe root first", spec: oneRoot, wantOneRoot: true, want: topology.NewGPUSet(4, 5, 6, 7)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, dra := draPlugin(t, 1)
			dra.Templates["ns/four"].Spec.Spec = tc.spec
			for _, s := range dra.GPUSlices {
				for i := range s.Spec.Devices {
					root := "pci0000:00"
					if i >= 4 {
						root = "pci0000:80"
					}
					s.Spec.Devices[i].Attributes[lockstep.DRAPCIeRootAttribute] = resourcev1.DeviceAttribute{StringValue: ptr.To(root)}
				}
			}
			dra.Devices.Insert(structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-0"))
			for i := range 8 {
				dra.Devices.Insert(structured.MakeDeviceID(lockstep.DRAGPUDriver, "d2", fmt.Sprintf("gpu-%d", i)))
			}
			pod := p.pods[0]
			snap, err := p.view.Snapshot(pod, p.planKey(pod), p.view.Request(pod), p.nodes)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range snap.Nodes {
				if n.DRA == nil || n.DRAOneRoot != tc.wantOneRoot {
					t.Errorf("node %s: DRA order %v, one root %t; want an order, one root %t", n.Name, n.DRA, n.DRAOneRoot, tc.wantOneRoot)
				}
			}
			plan, err := placement.Place(snap, placement.Gang{Members: 1, GPUsPerMember: 4}, placement.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]placement.Assignment{{Node: "d1", GPUs: tc.want}}, plan.Members); diff != "" {
				t.Errorf("members (-want,+got):\n%s", diff)
			}
		})
	}
}
