package nodeview

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
)

// allocatedClaim is claim name in namespace ns, allocated the GPU driver's
// devices of pool and reserved for the pods of the given names (whose UIDs
// are schedtesting.ClaimPod's, "uid-" and the name).
func allocatedClaim(name, pool string, devices []string, reservedFor ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: lockstep.DRAGPUDriver, Pool: pool, Device: d})
	}
	for _, pod := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)})
	}
	return c
}

// TestGPUsHeld reads the GPUs a victim's claims hold on its node: the ones
// an eviction frees, by NodeTopology index, whether the view follows the
// devices by events or reads the slices for the plan.
func TestGPUsHeld(t *testing.T) {
	victim := func() *v1.Pod {
		pod := schedtesting.ClaimPod("m", "four")
		pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To("m-gpus")}}
		return pod
	}
	tests := []struct {
		name   string
		pod    func() *v1.Pod
		claims []*resourcev1.ResourceClaim
		// change changes the world's slices before the read.
		change func(w *draWorld)
		node   string
		want   string
	}{
		{
			name:   "a template's claim allocated on the node",
			claims: []*resourcev1.ResourceClaim{allocatedClaim("m-gpus", "d1", []string{"gpu-2", "gpu-3", "gpu-6"}, "m")},
			node:   "d1", want: "2,3,6",
		},
		{
			name:   "devices are joined to GPUs by UUID, not by name",
			claims: []*resourcev1.ResourceClaim{allocatedClaim("m-gpus", "d1", []string{"dev-a", "dev-b"}, "m")},
			change: func(w *draWorld) {
				// Device dev-a is GPU 7, dev-b GPU 0.
				w.dra.GPUSlices[0] = gpuSlice("d1", 7, 0)
				w.dra.GPUSlices[0].Spec.Devices[0].Name = "dev-a"
				w.dra.GPUSlices[0].Spec.Devices[1].Name = "dev-b"
			},
			node: "d1", want: "0,7",
		},
		{
			name:   "devices of another node's pool are not this node's",
			claims: []*resourcev1.ResourceClaim{allocatedClaim("m-gpus", "d2", []string{"gpu-2"}, "m")},
			node:   "d1", want: "",
		},
		{
			name: "a claim the pod names, reserved for it alone",
			pod: func() *v1.Pod {
				pod := schedtesting.ClaimPod("m", "four")
				pod.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "gpus", ResourceClaimName: ptr.To("shared")}
				return pod
			},
			claims: []*resourcev1.ResourceClaim{allocatedClaim("shared", "d1", []string{"gpu-1"}, "m")},
			node:   "d1", want: "1",
		},
		{
			name: "a claim another pod is reserved for too is not freed",
			pod: func() *v1.Pod {
				pod := schedtesting.ClaimPod("m", "four")
				pod.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "gpus", ResourceClaimName: ptr.To("shared")}
				return pod
			},
			claims: []*resourcev1.ResourceClaim{allocatedClaim("shared", "d1", []string{"gpu-1"}, "m", "other")},
			node:   "d1", want: "",
		},
		{
			name: "a claim not allocated yet holds nothing",
			claims: func() []*resourcev1.ResourceClaim {
				c := allocatedClaim("m-gpus", "d1", nil)
				c.Status.Allocation = nil
				return []*resourcev1.ResourceClaim{c}
			}(),
			node: "d1", want: "",
		},
		{
			name: "admin access and other drivers' devices take no GPU",
			claims: func() []*resourcev1.ResourceClaim {
				c := allocatedClaim("m-gpus", "d1", []string{"gpu-4", "gpu-5"}, "m")
				c.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
				c.Status.Allocation.Devices.Results[1].Driver = "other.example.com"
				return []*resourcev1.ResourceClaim{c}
			}(),
			node: "d1", want: "",
		},
		{
			name:   "a pod whose claim is not generated yet",
			pod:    func() *v1.Pod { return schedtesting.ClaimPod("m", "four") },
			claims: []*resourcev1.ResourceClaim{allocatedClaim("m-gpus", "d1", []string{"gpu-2"}, "m")},
			node:   "d1", want: "",
		},
	}
	for _, tc := range tests {
		for _, follow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/follow=%v", tc.name, follow), func(t *testing.T) {
				w := newDRAWorld(t, 0)
				if tc.change != nil {
					tc.change(w)
				}
				w.dra.Claims = map[string]*resourcev1.ResourceClaim{}
				for _, c := range tc.claims {
					w.dra.Claims[c.Namespace+"/"+c.Name] = c
				}
				if follow {
					w.followDevices()
				}
				pod := victim()
				if tc.pod != nil {
					pod = tc.pod()
				}
				if got := w.GPUsHeld(pod, tc.node).List(); got != tc.want {
					t.Errorf("GPUsHeld(%s) = %q, want %q", tc.node, got, tc.want)
				}
			})
		}
	}
}
