package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeTopology is the GPU hardware of one node and its current GPU
// allocation, published by the topology agent and read by the scheduler and
// the controller. It is cluster-scoped, named after its Node and owned by it,
// so deleting the Node deletes it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ntopo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.gpuCount`
// +kubebuilder:printcolumn:name="Product",type=string,JSONPath=`.spec.gpuProduct`
// +kubebuilder:printcolumn:name="NVLink-Domain",type=string,JSONPath=`.spec.nvlinkDomain.clusterUUID`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.freeGPUs`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.heartbeatTime`
// +kubebuilder:validation:XValidation:rule="!has(self.status) || !has(self.status.allocations) || self.status.allocations.all(a, a.gpus.all(g, g < self.spec.gpuCount))",message="GPU index out of range; indices run from 0 to spec.gpuCount-1",fieldPath=`.status.allocations`
// +kubebuilder:validation:XValidation:rule="!has(self.status) || !has(self.status.gpuHealth) || self.status.gpuHealth.all(h, h.index < self.spec.gpuCount)",message="GPU index out of range; indices run from 0 to spec.gpuCount-1",fieldPath=`.status.gpuHealth`
type NodeTopology struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeTopologySpec   `json:"spec"`
	Status NodeTopologyStatus `json:"status,omitempty"`
}

// NodeTopologySpec is the node's hardware as discovered: it changes only when
// the hardware does.
//
// +kubebuilder:validation:XValidation:rule="self.gpuCount == size(self.gpus)",message="must equal the number of entries in gpus",fieldPath=`.gpuCount`
// +kubebuilder:validation:XValidation:rule="self.gpus.all(g, g.index < size(self.gpus))",message="indices must run from 0 to the GPU count - 1",fieldPath=`.gpus`
// +kubebuilder:validation:XValidation:rule="self.links.all(l, l.a < l.b && l.b < size(self.gpus))",message="each link joins GPU a and GPU b with a < b < the GPU count",fieldPath=`.links`
// +kubebuilder:validation:XValidation:rule="size(self.links) == size(self.gpus) * (size(self.gpus) - 1) / 2",message="list every pair of GPUs exactly once (n*(n-1)/2 entries for n GPUs)",fieldPath=`.links`
// +kubebuilder:validation:XValidation:rule="!has(self.nics) || self.nics.all(n, !has(n.nearestGPUs) || n.nearestGPUs.all(g, g < size(self.gpus)))",message="nearestGPUs: GPU index out of range",fieldPath=`.nics`
// +kubebuilder:validation:XValidation:rule="!has(self.nics) || self.nics.all(n, !has(n.gpuPaths) || size(n.gpuPaths) == size(self.gpus))",message="gpuPaths: give one path per GPU, or none",fieldPath=`.nics`
type NodeTopologySpec struct {
	// Profile is the built-in hardware profile this node matches, if any
	// (hgx-h100, dgx1-v100, l40s-pcie, a100-pcie-nvlink, gb200-nvl72).
	// +optional
	Profile string `json:"profile,omitempty"`
	// GPUProduct is the product name of the node's GPUs, as GPU feature
	// discovery labels it (e.g. NVIDIA-H100-80GB-HBM3).
	// +kubebuilder:validation:MaxLength=128
	GPUProduct string `json:"gpuProduct"`
	// GPUCount is the number of GPUs; it must equal len(gpus).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	GPUCount int32 `json:"gpuCount"`
	// GPUs are the node's GPUs by NVML index.
	// +listType=map
	// +listMapKey=index
	// +kubebuilder:validation:MaxItems=64
	GPUs []GPU `json:"gpus"`
	// Links is the GPU-to-GPU link matrix: one entry per unordered pair.
	// +listType=map
	// +listMapKey=a
	// +listMapKey=b
	// +kubebuilder:validation:MaxItems=2016
	// +optional
	Links []GPULink `json:"links"`
	// NICs are the RDMA NICs GPUs use to reach other nodes.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	NICs []NIC `json:"nics,omitempty"`
	// NVLinkDomain is set when the GPUs belong to a multi-node NVLink domain
	// (GB200 NVL72).
	// +optional
	NVLinkDomain *NVLinkDomain `json:"nvlinkDomain,omitempty"`
}

// GPU is one GPU of the node.
type GPU struct {
	// Index is the NVML device index.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	Index int32 `json:"index"`
	// UUID is the NVML UUID (GPU-...).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	UUID string `json:"uuid,omitempty"`
	// +kubebuilder:validation:MaxLength=128
	Product string `json:"product"`
	// MemoryMiB is the GPU memory.
	// +kubebuilder:validation:Minimum=0
	MemoryMiB int64 `json:"memoryMiB"`
	// PCIBusID is the NVML PCI bus id, e.g. 00000000:18:00.0.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	PCIBusID string `json:"pciBusID,omitempty"`
	// NUMANode is the nearest CPU NUMA node, -1 when unknown.
	// +kubebuilder:validation:Minimum=-1
	NUMANode int32 `json:"numaNode"`
}

// LinkClass is how two devices of a node are connected. The PCIe classes
// use the tokens of `nvidia-smi topo -m`.
//
// +kubebuilder:validation:Enum=NVSwitch;NVLink;PIX;PXB;PHB;NODE;SYS
type LinkClass string

// GPULink connects GPU a and GPU b.
//
// +kubebuilder:validation:XValidation:rule="!(self.class in ['NVSwitch', 'NVLink']) || (has(self.nvlinks) && self.nvlinks > 0)",message="NVLink and NVSwitch links need a link count above 0",fieldPath=`.nvlinks`
type GPULink struct {
	// +kubebuilder:validation:Minimum=0
	A int32 `json:"a"`
	// +kubebuilder:validation:Minimum=0
	B     int32     `json:"b"`
	Class LinkClass `json:"class"`
	// NVLinks is the number of NVLinks between the pair (NVLink) or of each
	// GPU into the switches (NVSwitch); 0 for PCIe classes.
	// +kubebuilder:validation:Minimum=0
	// +optional
	NVLinks int32 `json:"nvlinks,omitempty"`
	// BandwidthMBps is the usable bandwidth per direction, in MB/s.
	// +kubebuilder:validation:Minimum=1
	BandwidthMBps int64 `json:"bandwidthMBps"`
}

// NIC is one RDMA network adapter.
type NIC struct {
	// Name is the RDMA device name, e.g. mlx5_0.
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`
	// GUID is the port GUID (InfiniBand) as sysfs prints it.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	GUID string `json:"guid,omitempty"`
	// RateGbps is the port rate in Gb/s.
	// +kubebuilder:validation:Minimum=0
	RateGbps int32 `json:"rateGbps"`
	// State is the port state (ACTIVE, DOWN, ...).
	// +kubebuilder:validation:MaxLength=32
	// +optional
	State string `json:"state,omitempty"`
	// +kubebuilder:validation:MaxLength=32
	// +optional
	PCIBusID string `json:"pciBusID,omitempty"`
	// +kubebuilder:validation:Minimum=-1
	NUMANode int32 `json:"numaNode"`
	// NearestGPUs are the GPUs that send through this NIC.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +optional
	NearestGPUs []int32 `json:"nearestGPUs,omitempty"`
	// GPUPaths is the path class from this NIC to each GPU, by GPU index, as
	// the NIC columns of `nvidia-smi topo -m` show it. When empty it is
	// derived from nearestGPUs and NUMA nodes.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	GPUPaths []LinkClass `json:"gpuPaths,omitempty"`
}

// NVLinkDomain is a multi-node NVLink domain as NVML's GPU fabric info
// reports it.
type NVLinkDomain struct {
	// ClusterUUID is the NVLink fabric cluster UUID.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	ClusterUUID string `json:"clusterUUID"`
	// CliqueID partitions the cluster; GPUs talk over NVLink within a clique.
	// +kubebuilder:validation:Minimum=0
	CliqueID int64 `json:"cliqueID"`
	// BandwidthMBps is each GPU's per-direction bandwidth into the fabric.
	// +kubebuilder:validation:Minimum=1
	BandwidthMBps int64 `json:"bandwidthMBps"`
}

// NodeTopologyStatus is what changes while the node runs: GPU health, which
// pod holds which GPUs, and the agent's heartbeat.
type NodeTopologyStatus struct {
	// FreeGPUs is the number of healthy GPUs no pod holds.
	// +optional
	FreeGPUs int32 `json:"freeGPUs"`
	// GPUHealth lists the GPUs that are not healthy; GPUs not listed are.
	// +listType=map
	// +listMapKey=index
	// +kubebuilder:validation:MaxItems=64
	// +optional
	GPUHealth []GPUHealth `json:"gpuHealth,omitempty"`
	// Allocations say which pod holds which GPUs.
	// +listType=map
	// +listMapKey=podUID
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Allocations []GPUAllocation `json:"allocations,omitempty"`
	// HeartbeatTime is when the agent last confirmed this object.
	// +optional
	HeartbeatTime metav1.Time `json:"heartbeatTime,omitempty"`
	// Agent names the agent mode that publishes the object (real or fake).
	// +optional
	Agent string `json:"agent,omitempty"`
	// Conditions are the agent's observations about its sources:
	// DynamicResourcesReported says whether the kubelet reports the devices
	// it prepared for ResourceClaims, without which Allocations leave out
	// the GPUs pods hold through DRA.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeTopologyDynamicResourcesReported is the condition type saying
// whether the node's kubelet reports, in its pod-resources API, the devices
// it prepared for pods' ResourceClaims (DynamicResources, behind the
// kubelet's KubeletPodResourcesDynamicResources feature: alpha before
// Kubernetes 1.34, beta and on by default since). When it does not, the
// allocations of the NodeTopology leave out the GPUs pods hold through DRA,
// and only the claims say which those are (the scheduler reads the claims).
const NodeTopologyDynamicResourcesReported = "DynamicResourcesReported"

// Reasons of the DynamicResourcesReported condition.
const (
	// ReasonKubeletReportsDynamicResources: the kubelet listed devices for
	// a container that uses claims.
	ReasonKubeletReportsDynamicResources = "KubeletReportsDynamicResources"
	// ReasonKubeletOmitsDynamicResources: running containers use claims
	// and the kubelet listed devices for none of them.
	ReasonKubeletOmitsDynamicResources = "KubeletOmitsDynamicResources"
	// ReasonNoClaimedContainers: no running container of the node uses a
	// claim, so nothing tells.
	ReasonNoClaimedContainers = "NoClaimedContainers"
)

// GPUHealthState says why a GPU cannot be used.
//
// +kubebuilder:validation:Enum=Lost;MIGEnabled;Unknown
type GPUHealthState string

const (
	// GPULost is a GPU NVML lists but can no longer reach (fallen off the bus).
	GPULost GPUHealthState = "Lost"
	// GPUMIGEnabled is a GPU partitioned with MIG: it is not offered as a
	// whole GPU.
	GPUMIGEnabled GPUHealthState = "MIGEnabled"
	// GPUUnknown is a GPU whose state discovery could not establish.
	GPUUnknown GPUHealthState = "Unknown"
)

// GPUHealth is the state of a GPU that is not healthy.
type GPUHealth struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	Index int32          `json:"index"`
	State GPUHealthState `json:"state"`
	// Message says what discovery saw.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
}

// GPUAllocation is a pod's hold on GPUs of the node.
type GPUAllocation struct {
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// +kubebuilder:validation:MaxLength=64
	PodUID string `json:"podUID"`
	// GPUs are the indices the pod holds.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	GPUs []int32 `json:"gpus"`
}

// NodeTopologyList is a list of NodeTopology.
//
// +kubebuilder:object:root=true
type NodeTopologyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeTopology `json:"items"`
}
