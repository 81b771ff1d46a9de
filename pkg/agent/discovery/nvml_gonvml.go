package discovery

import (
	"errors"
	"math/bits"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NewNVML returns the real NVML library, github.com/NVIDIA/go-nvml. It loads
// libnvidia-ml.so.1 at Init, so a binary built with it still starts on a
// machine without the NVIDIA driver; Init then fails with
// NVMLErrorLibraryNotFound.
func NewNVML() Library { return &goNVML{lib: nvml.New()} }

// goNVML adapts go-nvml to Library.
type goNVML struct {
	lib nvml.Interface
}

// nvmlError converts an NVML return code to nil or an NVMLReturn.
func nvmlError(r nvml.Return) error {
	if r == nvml.SUCCESS {
		return nil
	}
	return NVMLReturn(r)
}

func (l *goNVML) Init() error     { return nvmlError(l.lib.Init()) }
func (l *goNVML) Shutdown() error { return nvmlError(l.lib.Shutdown()) }

func (l *goNVML) DeviceCount() (int, error) {
	n, r := l.lib.DeviceGetCount()
	return n, nvmlError(r)
}

func (l *goNVML) DeviceByIndex(index int) (Device, error) {
	d, r := l.lib.DeviceGetHandleByIndex(index)
	if err := nvmlError(r); err != nil {
		return nil, err
	}
	return &goNVMLDevice{lib: l, dev: d}, nil
}

// hasSymbol reports whether the loaded driver has an NVML function. go-nvml
// links every function lazily, so calling one an older driver lacks would
// crash the process rather than return an error.
func (l *goNVML) hasSymbol(name string) bool {
	return l.lib.Extensions().LookupSymbol(name) == nil
}

// goNVMLDevice adapts a go-nvml device to Device.
type goNVMLDevice struct {
	lib *goNVML
	dev nvml.Device
}

var errForeignDevice = errors.New("device does not come from go-nvml")

func (d *goNVMLDevice) UUID() (string, error) {
	s, r := d.dev.GetUUID()
	return s, nvmlError(r)
}

func (d *goNVMLDevice) Name() (string, error) {
	s, r := d.dev.GetName()
	return s, nvmlError(r)
}

func (d *goNVMLDevice) MemoryTotalBytes() (uint64, error) {
	m, r := d.dev.GetMemoryInfo()
	return m.Total, nvmlError(r)
}

func (d *goNVMLDevice) PCIBusID() (string, error) {
	p, r := d.dev.GetPciInfo()
	return cString(p.BusId[:]), nvmlError(r)
}

func (d *goNVMLDevice) Architecture() (Architecture, error) {
	a, r := d.dev.GetArchitecture()
	return Architecture(a), nvmlError(r)
}

// memoryAffinityNodes is how many NUMA nodes the affinity mask is asked
// for; GB200 trays number GPU memory nodes into the thirties.
const memoryAffinityNodes = 256

func (d *goNVMLDevice) MemoryAffinity() ([]int, error) {
	if !d.lib.hasSymbol("nvmlDeviceGetMemoryAffinity") {
		return nil, NVMLErrorFunctionNotFound
	}
	mask, r := d.dev.GetMemoryAffinity(memoryAffinityNodes, nvml.AFFINITY_SCOPE_NODE)
	if err := nvmlError(r); err != nil {
		return nil, err
	}
	var nodes []int
	for w, word := range mask {
		for ; word != 0; word &= word - 1 {
			nodes = append(nodes, w*bits.UintSize+bits.TrailingZeros(word))
		}
	}
	return nodes, nil
}

func (d *goNVMLDevice) MIGMode() (current, pending bool, err error) {
	if !d.lib.hasSymbol("nvmlDeviceGetMigMode") {
		return false, false, NVMLErrorFunctionNotFound
	}
	cur, pend, r := d.dev.GetMigMode()
	return cur == nvml.DEVICE_MIG_ENABLE, pend == nvml.DEVICE_MIG_ENABLE, nvmlError(r)
}

// MaxPCIeLink reads the maximum link rather than the current one: GPUs
// drop to a slower PCIe generation while idle, so the current link
// understates what a transfer gets.
func (d *goNVMLDevice) MaxPCIeLink() (PCIeLink, error) {
	gen, r := d.dev.GetMaxPcieLinkGeneration()
	if err := nvmlError(r); err != nil {
		return PCIeLink{}, err
	}
	width, r := d.dev.GetMaxPcieLinkWidth()
	return PCIeLink{Generation: gen, Width: width}, nvmlError(r)
}

func (d *goNVMLDevice) NVLinkState(link int) (bool, error) {
	s, r := d.dev.GetNvLinkState(link)
	return s == nvml.FEATURE_ENABLED, nvmlError(r)
}

func (d *goNVMLDevice) NVLinkVersion(link int) (NVLinkVersion, error) {
	v, r := d.dev.GetNvLinkVersion(link)
	return NVLinkVersion(v), nvmlError(r)
}

func (d *goNVMLDevice) NVLinkRemotePCIBusID(link int) (string, error) {
	p, r := d.dev.GetNvLinkRemotePciInfo(link)
	return cString(p.BusId[:]), nvmlError(r)
}

func (d *goNVMLDevice) NVLinkRemoteDeviceType(link int) (NVLinkDeviceType, error) {
	if !d.lib.hasSymbol("nvmlDeviceGetNvLinkRemoteDeviceType") {
		return NVLinkDeviceUnknown, NVMLErrorFunctionNotFound
	}
	t, r := d.dev.GetNvLinkRemoteDeviceType(link)
	return NVLinkDeviceType(t), nvmlError(r)
}

func (d *goNVMLDevice) TopologyCommonAncestor(other Device) (TopologyLevel, error) {
	o, ok := other.(*goNVMLDevice)
	if !ok {
		return 0, errForeignDevice
	}
	level, r := d.dev.GetTopologyCommonAncestor(o.dev)
	return TopologyLevel(level), nvmlError(r)
}

func (d *goNVMLDevice) NVLinkP2PStatus(other Device) (P2PStatus, error) {
	o, ok := other.(*goNVMLDevice)
	if !ok {
		return P2PStatusUnknown, errForeignDevice
	}
	s, r := d.dev.GetP2PStatus(o.dev, nvml.P2P_CAPS_INDEX_NVLINK)
	return P2PStatus(s), nvmlError(r)
}

// FabricInfo prefers the versioned call and falls back to the deprecated
// one on drivers that predate it or do not know its version 2 structure.
func (d *goNVMLDevice) FabricInfo() (FabricInfo, error) {
	if d.lib.hasSymbol("nvmlDeviceGetGpuFabricInfoV") {
		info, r := d.dev.GetGpuFabricInfoV().V2()
		if r != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			return FabricInfo{
				ClusterUUID: info.ClusterUuid,
				CliqueID:    info.CliqueId,
				State:       FabricState(info.State),
				Status:      NVMLReturn(info.Status),
			}, nvmlError(r)
		}
	}
	if !d.lib.hasSymbol("nvmlDeviceGetGpuFabricInfo") {
		return FabricInfo{}, NVMLErrorFunctionNotFound
	}
	info, r := d.dev.GetGpuFabricInfo()
	return FabricInfo{
		ClusterUUID: info.ClusterUuid,
		CliqueID:    info.CliqueId,
		State:       FabricState(info.State),
		Status:      NVMLReturn(info.Status),
	}, nvmlError(r)
}

// cString converts a NUL-terminated C char array.
func cString(c []int8) string {
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}
