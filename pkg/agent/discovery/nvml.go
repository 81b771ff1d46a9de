package discovery

// Library is the part of NVML discovery uses. It is deliberately narrow so
// that fixtures can implement it completely (go-nvml's own mock panics on any
// method left unset) and so that this package builds without the NVIDIA
// driver or go-nvml; NewNVML returns the real implementation.
//
// Every method returns nil or an error that wraps an NVMLReturn, so callers
// test outcomes with errors.Is(err, NVMLErrorNotSupported) and the like.
type Library interface {
	// Init loads and initializes NVML (nvmlInit). A missing
	// libnvidia-ml.so.1 is NVMLErrorLibraryNotFound.
	Init() error
	// Shutdown releases NVML (nvmlShutdown); every successful Init is paired
	// with one Shutdown.
	Shutdown() error
	// DeviceCount is nvmlDeviceGetCount: the number of GPUs NVML lists,
	// including ones that fail to answer later queries.
	DeviceCount() (int, error)
	// DeviceByIndex is nvmlDeviceGetHandleByIndex.
	DeviceByIndex(index int) (Device, error)
}

// Device is one GPU as NVML reports it. Methods are named after the NVML
// call they stand for; see each for the call.
type Device interface {
	// UUID is nvmlDeviceGetUUID ("GPU-…").
	UUID() (string, error)
	// Name is nvmlDeviceGetName ("NVIDIA H100 80GB HBM3").
	Name() (string, error)
	// MemoryTotalBytes is the total of nvmlDeviceGetMemoryInfo.
	MemoryTotalBytes() (uint64, error)
	// PCIBusID is the busId of nvmlDeviceGetPciInfo ("00000000:18:00.0").
	PCIBusID() (string, error)
	// Architecture is nvmlDeviceGetArchitecture.
	Architecture() (Architecture, error)
	// MemoryAffinity is nvmlDeviceGetMemoryAffinity with the NUMA-node
	// scope: the NUMA nodes the GPU is local to, ascending.
	MemoryAffinity() ([]int, error)
	// MIGMode is nvmlDeviceGetMigMode: whether MIG is enabled now and
	// whether it will be after the next GPU reset.
	MIGMode() (current, pending bool, err error)
	// MaxPCIeLink is nvmlDeviceGetMaxPcieLinkGeneration and
	// nvmlDeviceGetMaxPcieLinkWidth: the fastest link the GPU and the slot
	// it sits in both support.
	MaxPCIeLink() (PCIeLink, error)
	// NVLinkState is nvmlDeviceGetNvLinkState: whether link is active. A GPU
	// without NVLink answers NVMLErrorNotSupported; a link index past the
	// GPU's last link answers NVMLErrorInvalidArgument.
	NVLinkState(link int) (bool, error)
	// NVLinkVersion is nvmlDeviceGetNvLinkVersion.
	NVLinkVersion(link int) (NVLinkVersion, error)
	// NVLinkRemotePCIBusID is the busId of nvmlDeviceGetNvLinkRemotePciInfo:
	// the device at the other end of link.
	NVLinkRemotePCIBusID(link int) (string, error)
	// NVLinkRemoteDeviceType is nvmlDeviceGetNvLinkRemoteDeviceType: GPU or
	// NVSwitch at the other end of link.
	NVLinkRemoteDeviceType(link int) (NVLinkDeviceType, error)
	// TopologyCommonAncestor is nvmlDeviceGetTopologyCommonAncestor: the
	// closest PCIe ancestor this GPU shares with other. other is a Device
	// from the same Library.
	TopologyCommonAncestor(other Device) (TopologyLevel, error)
	// NVLinkP2PStatus is nvmlDeviceGetP2PStatus with
	// NVML_P2P_CAPS_INDEX_NVLINK: whether CUDA peer-to-peer over NVLink works
	// between this GPU and other.
	NVLinkP2PStatus(other Device) (P2PStatus, error)
	// FabricInfo is nvmlDeviceGetGpuFabricInfoV (or the older
	// nvmlDeviceGetGpuFabricInfo): the GPU's registration in an NVLink
	// fabric. GPUs before Hopper answer NVMLErrorNotSupported.
	FabricInfo() (FabricInfo, error)
}

// The types below carry NVML's own numeric values, so an adapter converts an
// NVML value with a plain conversion.

// Architecture is nvmlDeviceArchitecture_t.
type Architecture uint32

// GPU architectures (NVML_DEVICE_ARCH_*).
const (
	ArchVolta     Architecture = 5
	ArchTuring    Architecture = 6
	ArchAmpere    Architecture = 7
	ArchAda       Architecture = 8
	ArchHopper    Architecture = 9
	ArchBlackwell Architecture = 10
	ArchUnknown   Architecture = 0xffffffff
)

// PCIeLink is a PCIe link generation and lane count; zero fields are
// unknown.
type PCIeLink struct {
	Generation int
	Width      int
}

// NVLinkVersion is nvmlNvlinkVersion_t. Its values are not the NVLink
// generation: NVLink 3.0 (A100) is 4, NVLink 4.0 (H100) is 6. Early NVML
// headers documented a plain number, and tools that read it as the
// generation got bandwidths wrong (hwloc issue 658).
type NVLinkVersion uint32

// NVLink versions (NVML_NVLINK_VERSION_*).
const (
	NVLinkVersionInvalid NVLinkVersion = 0
	NVLinkVersion1_0     NVLinkVersion = 1
	NVLinkVersion2_0     NVLinkVersion = 2
	NVLinkVersion2_2     NVLinkVersion = 3
	NVLinkVersion3_0     NVLinkVersion = 4
	NVLinkVersion3_1     NVLinkVersion = 5
	NVLinkVersion4_0     NVLinkVersion = 6
	NVLinkVersion5_0     NVLinkVersion = 7
)

// NVLinkDeviceType is nvmlIntNvLinkDeviceType_t: what is at the far end of
// an NVLink.
type NVLinkDeviceType int32

// NVLink remote device types (NVML_NVLINK_DEVICE_TYPE_*).
const (
	NVLinkDeviceGPU     NVLinkDeviceType = 0
	NVLinkDeviceIBMNPU  NVLinkDeviceType = 1
	NVLinkDeviceSwitch  NVLinkDeviceType = 2
	NVLinkDeviceUnknown NVLinkDeviceType = 0xff
)

// TopologyLevel is nvmlGpuTopologyLevel_t, the closest common PCIe ancestor
// of two GPUs.
type TopologyLevel int32

// Topology levels (NVML_TOPOLOGY_*).
const (
	// TopologyInternal is two GPUs on one board (Tesla K80).
	TopologyInternal TopologyLevel = 0
	// TopologySingle is one PCIe switch between the GPUs.
	TopologySingle TopologyLevel = 10
	// TopologyMultiple is several PCIe switches, no host bridge.
	TopologyMultiple TopologyLevel = 20
	// TopologyHostBridge is one PCIe host bridge.
	TopologyHostBridge TopologyLevel = 30
	// TopologyNode is several host bridges within one NUMA node.
	TopologyNode TopologyLevel = 40
	// TopologySystem is the interconnect between NUMA nodes.
	TopologySystem TopologyLevel = 50
)

// P2PStatus is nvmlGpuP2PStatus_t.
type P2PStatus int32

// Peer-to-peer statuses (NVML_P2P_STATUS_*).
const (
	P2PStatusOK                      P2PStatus = 0
	P2PStatusChipsetNotSupported     P2PStatus = 1
	P2PStatusGPUNotSupported         P2PStatus = 2
	P2PStatusIOHTopologyNotSupported P2PStatus = 3
	P2PStatusDisabledByRegkey        P2PStatus = 4
	P2PStatusNotSupported            P2PStatus = 5
	P2PStatusUnknown                 P2PStatus = 6
)

// FabricState is nvmlGpuFabricState_t: how far the GPU's registration with
// the NVLink fabric manager got.
type FabricState uint8

// Fabric registration states (NVML_GPU_FABRIC_STATE_*).
const (
	FabricStateNotSupported FabricState = 0
	FabricStateNotStarted   FabricState = 1
	FabricStateInProgress   FabricState = 2
	FabricStateCompleted    FabricState = 3
)

// FabricInfo is nvmlGpuFabricInfo_t.
type FabricInfo struct {
	// ClusterUUID identifies the NVLink domain (the NVL72 rack); all zero
	// when the GPU is in no multi-node domain.
	ClusterUUID [16]byte
	// CliqueID partitions the cluster.
	CliqueID uint32
	State    FabricState
	// Status is the outcome of a completed registration: NVMLSuccess or the
	// failure. NVML says to read it only when State is completed.
	Status NVMLReturn
}

func (s P2PStatus) String() string {
	switch s {
	case P2PStatusOK:
		return "OK"
	case P2PStatusChipsetNotSupported:
		return "not supported by the chipset"
	case P2PStatusGPUNotSupported:
		return "not supported by the GPU"
	case P2PStatusIOHTopologyNotSupported:
		return "not supported by the IOH topology"
	case P2PStatusDisabledByRegkey:
		return "disabled by registry key"
	case P2PStatusNotSupported:
		return "not supported"
	default:
		return "unknown"
	}
}

func (s FabricState) String() string {
	switch s {
	case FabricStateNotSupported:
		return "not supported"
	case FabricStateNotStarted:
		return "not started"
	case FabricStateInProgress:
		return "in progress"
	case FabricStateCompleted:
		return "completed"
	default:
		return "unknown"
	}
}
