package lockstep

// Names of NVIDIA's DRA driver for GPUs (NVIDIA/k8s-dra-driver-gpu) that
// Lockstep reads and, in the fake world, writes as the driver would.
const (
	// DRAGPUDriver is the driver name in the GPU kubelet plugin's
	// ResourceSlices and in allocation results; it is also the domain of the
	// unqualified attribute names it publishes ("uuid" is
	// "gpu.nvidia.com/uuid" in CEL).
	DRAGPUDriver = "gpu.nvidia.com"
	// DRAGPUDeviceClass is the DeviceClass NVIDIA's Helm chart installs for
	// whole GPUs; claims ask for GPUs through it.
	DRAGPUDeviceClass = "gpu.nvidia.com"
	// DRAGPUDeviceClassSelector is that class's CEL selector: devices of the
	// driver whose type attribute is "gpu" (not "mig" or "vfio").
	DRAGPUDeviceClassSelector = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
	// DRAGPUDevicePrefix starts the name of a whole GPU's device,
	// "gpu-<minor>".
	DRAGPUDevicePrefix = "gpu-"
	// DRATypeAttribute is the attribute saying what a device is, and
	// DRATypeGPU its value on a whole GPU (not "mig" or "vfio"), which the
	// DeviceClass selects.
	DRATypeAttribute = "type"
	DRATypeGPU       = "gpu"
	// DRAUUIDAttribute is the attribute holding a device's NVML UUID, the
	// key that joins a device to the GPU of the same UUID in a NodeTopology.
	DRAUUIDAttribute = "uuid"
	// DRAPCIeRootAttribute is Kubernetes' standard attribute naming the PCIe
	// root complex of a device ("pci<domain>:<bus>").
	DRAPCIeRootAttribute = "resource.kubernetes.io/pcieRoot"
)

// GPU drivers of a simulated node: how its GPUs reach pods. The cluster model
// sets it per pool and writes it in LabelGPUDriver; the fake topology agent
// emulates the matching NVIDIA component.
const (
	// LabelGPUDriver names the GPU driver of a simulated node, one of the
	// GPUDriver values. Absent means GPUDriverDevicePlugin.
	LabelGPUDriver = "lockstep.dev/gpu-driver"
	// GPUDriverDevicePlugin: NVIDIA's device plugin advertises GPUResource
	// and the kubelet picks a pod's GPUs.
	GPUDriverDevicePlugin = "DevicePlugin"
	// GPUDriverDRA: NVIDIA's DRA driver publishes the GPUs in ResourceSlices
	// and the scheduler allocates them to ResourceClaims; the node
	// advertises no GPUResource.
	GPUDriverDRA = "DRA"

	// LabelNVIDIADeployDevicePlugin is the GPU Operator's per-node switch
	// for its device plugin DaemonSet; "false" keeps the device plugin off
	// a node whose GPUs the DRA driver serves.
	LabelNVIDIADeployDevicePlugin = "nvidia.com/gpu.deploy.device-plugin"
)

// AnnotationClaimTemplateSource on a TrainingJob's copy of a
// ResourceClaimTemplate (the one-PCIe-root-first GPU claim its pods use) is
// the UID of the user's template it was copied from: a template deleted and
// created again under its name is a new one, and the copy is made again.
const AnnotationClaimTemplateSource = "lockstep.dev/claim-template-source-uid"
