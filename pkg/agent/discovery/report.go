package discovery

import "github.com/lockstep-dev/lockstep/pkg/topology"

// Report is what discovery found on a node: the hardware model, the state of
// each GPU, the RDMA devices, and, when asked for, which pods hold which
// GPUs. Its JSON form (report_json.go) writes the topology as the
// NodeTopology API spec.
type Report struct {
	// Topology is the node's hardware. It passes Validate and lists every
	// GPU NVML lists, at its NVML index, including GPUs that cannot be used:
	// GPUHealth says which, and callers must leave those out.
	Topology topology.NodeTopology
	// GPUHealth has one entry per GPU, by index.
	GPUHealth []GPUHealth
	// HCAs are all the RDMA devices sysfs shows, including ones that are
	// down or filtered out and so are not among Topology.NICs.
	HCAs []HCA
	// Allocations are the GPUs the kubelet has handed to containers; nil
	// when Options.PodResourcesSocket is empty. Devices the DRA driver
	// prepared for claims are resolved to GPUs by the agent, which reads
	// the node's ResourceSlice (ResolveClaimDevices).
	Allocations []Allocation
	// DynamicResources is PodResources.DynamicResources: nil when the
	// kubelet was not asked.
	DynamicResources map[string]bool
	// Warnings are what discovery worked around: unsupported or failed
	// queries it had a fallback for, inconsistent answers, missing sysfs
	// entries. Each names the GPU or device concerned.
	Warnings []string
	// Unavailable are the sources discovery could not read at all and did
	// without (the reason is among Warnings), for the agent's error counts.
	Unavailable []Source
}

// Source is a place discovery reads.
type Source string

const (
	SourceNVML         Source = "nvml"
	SourceSysfs        Source = "sysfs"
	SourcePodResources Source = "pod-resources"
)

// HealthState is whether a GPU can be offered as a whole GPU. The values are
// the NodeTopology API's GPUHealthState, plus Healthy, which the API leaves
// implicit.
type HealthState string

const (
	// GPUHealthy answered every query.
	GPUHealthy HealthState = "Healthy"
	// GPULost is listed by NVML but has fallen off the bus or is otherwise
	// unreachable (NVML_ERROR_GPU_IS_LOST); it needs a reset or a reboot.
	GPULost HealthState = "Lost"
	// GPUMIGEnabled is partitioned with MIG: it is offered as MIG instances,
	// not as a whole GPU.
	GPUMIGEnabled HealthState = "MIGEnabled"
	// GPUUnknown failed a query discovery cannot do without, for a reason
	// other than being lost.
	GPUUnknown HealthState = "Unknown"
)

// GPUHealth is the state of one GPU.
type GPUHealth struct {
	Index int `json:"index"`
	// UUID is the GPU's UUID when NVML gave it before failing.
	UUID  string      `json:"uuid,omitempty"`
	State HealthState `json:"state"`
	// Reason says what discovery saw when the state is not Healthy, e.g.
	// "GPU 3: nvmlDeviceGetUUID: NVML_ERROR_GPU_IS_LOST".
	Reason string `json:"reason,omitempty"`
}

// UsableGPUs returns the healthy GPUs: the ones a scheduler may hand out
// as whole GPUs.
func (r *Report) UsableGPUs() topology.GPUSet {
	var set topology.GPUSet
	for _, h := range r.GPUHealth {
		if h.State == GPUHealthy {
			set |= topology.NewGPUSet(h.Index)
		}
	}
	return set
}
