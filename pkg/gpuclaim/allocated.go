package gpuclaim

import (
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// SliceDevices are the devices of ResourceSlices as the GPU join reads
// them (topology.JoinDRADevices): driver, name and the uuid attribute.
func SliceDevices(slices ...*resourcev1.ResourceSlice) []topology.DRADevice {
	var out []topology.DRADevice
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			dev := topology.DRADevice{Driver: s.Spec.Driver, Name: d.Name}
			if a, ok := d.Attributes[lockstep.DRAUUIDAttribute]; ok && a.StringValue != nil {
				dev.UUID = *a.StringValue
			}
			out = append(out, dev)
		}
	}
	return out
}

// NodeGPUs are the GPUs of node that an allocation holds: its results of
// the GPU driver in the node's pool (NVIDIA's kubelet plugin names the
// pool after the node), mapped to NodeTopology indexes by gpuOf, the
// join of the node's published devices to its GPUs by UUID
// (topology.JoinDRADevices). Results of other drivers (a ComputeDomain's
// channel), of other pools and with admin access are not the node's GPUs
// held. unknown lists the
// node's GPU devices gpuOf does not join: a caller that must know every
// GPU (to replace a guess with the truth) waits until the join knows
// them.
func NodeGPUs(alloc *resourcev1.AllocationResult, node string, gpuOf map[string]int) (gpus topology.GPUSet, unknown []string) {
	if alloc == nil {
		return 0, nil
	}
	for _, r := range alloc.Devices.Results {
		// Admin access takes no device, as the scheduler counts it.
		if r.Driver != lockstep.DRAGPUDriver || r.Pool != node || ptr.Deref(r.AdminAccess, false) {
			continue
		}
		g, ok := gpuOf[r.Device]
		if !ok || g < 0 || g >= topology.MaxGPUs {
			unknown = append(unknown, r.Device)
			continue
		}
		gpus |= topology.NewGPUSet(g)
	}
	return gpus, unknown
}
