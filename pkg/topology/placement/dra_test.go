package placement

import (
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// dgx1DRA is the DGX-1's device order as NVIDIA's driver publishes it:
// gpu-0..gpu-7, 0-3 under one PCIe root and 4-7 under the other.
func dgx1DRA() *topology.DRAOrder {
	return topology.NewDRAOrder([]int{0, 1, 2, 3, 4, 5, 6, 7},
		[]string{"pci0000:00", "pci0000:00", "pci0000:00", "pci0000:00", "pci0000:80", "pci0000:80", "pci0000:80", "pci0000:80"})
}

// TestPlaceDRAPredictsAllocator checks that a DRA node's members get the
// set the allocator will give their claims, not the selector's best.
func TestPlaceDRAPredictsAllocator(t *testing.T) {
	tests := []struct {
		name    string
		free    topology.GPUSet
		oneRoot bool
		members int
		gpus    int
		want    []Assignment
	}{
		{
			name: "first free in order", free: busy(8, 0), members: 1, gpus: 4,
			want: []Assignment{assign("n", 1, 2, 3, 4)},
		},
		{
			name: "one PCIe root first", free: busy(8, 0), oneRoot: true, members: 1, gpus: 4,
			want: []Assignment{assign("n", 4, 5, 6, 7)},
		},
		{
			// Each member's claim is allocated after the one before.
			name: "members in turn", free: busy(8, 0), oneRoot: true, members: 2, gpus: 3,
			want: []Assignment{assign("n", 1, 2, 3), assign("n", 4, 5, 6)},
		},
		{
			name: "no root has enough: the fallback", free: busy(8, 0, 4), oneRoot: true, members: 1, gpus: 4,
			want: []Assignment{assign("n", 1, 2, 3, 5)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			node := c.add("n", "dgx1-v100", tc.free, at{leaf: "l1"})
			node.DRA, node.DRAOneRoot = dgx1DRA(), tc.oneRoot
			plan := mustPlace(t, c.snapshot(), Gang{Members: tc.members, GPUsPerMember: tc.gpus})
			if d := diff(tc.want, plan.Members); d != "" {
				t.Errorf("members (-want,+got):\n%s", d)
			}
		})
	}
}

// TestPlaceDRAPrefersNVLinkPrediction checks that between two DRA nodes
// with as many free GPUs, a gang on one host goes where the allocator's
// set is NVLink-connected. On "a" (GPU 0 taken) the selector would find
// 4-7, but the allocator takes 1-4; on "b" (GPU 7 taken) it takes 0-3.
func TestPlaceDRAPrefersNVLinkPrediction(t *testing.T) {
	c := newCluster(t)
	for name, free := range map[string]topology.GPUSet{"a": busy(8, 0), "b": busy(8, 7)} {
		n := c.add(name, "dgx1-v100", free, at{leaf: "l1"})
		n.DRA = dgx1DRA()
	}
	plan := mustPlace(t, c.snapshot(), Gang{Members: 1, GPUsPerMember: 4})
	if d := diff([]Assignment{assign("b", 0, 1, 2, 3)}, plan.Members); d != "" {
		t.Errorf("members (-want,+got):\n%s", d)
	}
}
