package discoverytest

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Hardware is what NVML reports about a machine that a NodeTopology does not
// say: the GPUs' generation and how they attach.
type Hardware struct {
	Architecture discovery.Architecture
	// NVLinkVersion is what every active NVLink reports.
	NVLinkVersion discovery.NVLinkVersion
	// NVLinksPerGPU is the number of NVLink ports of each GPU (6 on V100,
	// 12 on A100, 18 on H100 and B200); zero for a GPU without NVLink, whose
	// NVLink queries answer NVML_ERROR_NOT_SUPPORTED.
	NVLinksPerGPU int
	PCIe          discovery.PCIeLink
	// FabricSingleNode makes a GPU of a node without a multi-node NVLink
	// domain report a completed fabric registration with a zero cluster
	// UUID, as Hopper NVSwitch systems do; otherwise such GPUs answer
	// NVML_ERROR_NOT_SUPPORTED.
	FabricSingleNode bool
}

// NVML is a fake discovery.Library. Its fields are the answers; set the
// error fields to make calls fail.
type NVML struct {
	// InitErr, ShutdownErr and CountErr fail Init, Shutdown and
	// DeviceCount.
	InitErr, ShutdownErr, CountErr error
	Devices                        []*Device
	// Shutdowns counts Shutdown calls, so tests can check Init is paired.
	Shutdowns int
}

// Device is a fake discovery.Device.
type Device struct {
	Index int

	UUIDValue     string
	NameValue     string
	MemoryBytes   uint64
	BusID         string
	Arch          discovery.Architecture
	NUMANodes     []int
	MIGEnabled    bool
	MIGPending    bool
	PCIe          discovery.PCIeLink
	NVLinks       []NVLink
	NVLinksPerGPU int
	NVLinkVer     discovery.NVLinkVersion
	Fabric        discovery.FabricInfo
	FabricErr     error
	Ancestors     map[int]discovery.TopologyLevel
	NVLinkP2P     map[int]discovery.P2PStatus
	HandleErr     error
	// Errs makes the method of that name (e.g. "UUID", "NVLinkState")
	// fail with the error.
	Errs map[string]error
}

// NVLink is one active NVLink port of a Device.
type NVLink struct {
	Remote      discovery.NVLinkDeviceType
	RemoteBusID string
}

var _ discovery.Library = (*NVML)(nil)
var _ discovery.Device = (*Device)(nil)

// NewNVML returns a fake NVML that reports node as hw describes it. GPU
// UUIDs and the NVLink domain are taken from node, so give them values.
func NewNVML(node *topology.NodeTopology, hw Hardware) (*NVML, error) {
	lib := &NVML{}
	for i, g := range node.GPUs {
		d := &Device{
			Index:         i,
			UUIDValue:     g.UUID,
			NameValue:     strings.ReplaceAll(g.Product, "-", " "),
			MemoryBytes:   uint64(g.MemoryMiB) << 20,
			BusID:         g.PCIBusID,
			Arch:          hw.Architecture,
			NUMANodes:     []int{g.NUMANode},
			PCIe:          hw.PCIe,
			NVLinksPerGPU: hw.NVLinksPerGPU,
			NVLinkVer:     hw.NVLinkVersion,
			FabricErr:     discovery.NVMLErrorNotSupported,
			Ancestors:     map[int]discovery.TopologyLevel{},
			NVLinkP2P:     map[int]discovery.P2PStatus{},
			Errs:          map[string]error{},
		}
		lib.Devices = append(lib.Devices, d)
	}
	for i, d := range lib.Devices {
		for j := range node.GPUs {
			if i == j {
				continue
			}
			l := node.Links[i][j]
			d.Ancestors[j] = ancestorOf(node, i, j)
			d.NVLinkP2P[j] = discovery.P2PStatusNotSupported
			switch l.Class {
			case topology.LinkNVLink:
				d.NVLinkP2P[j] = discovery.P2PStatusOK
				for range l.NVLinks {
					d.NVLinks = append(d.NVLinks, NVLink{Remote: discovery.NVLinkDeviceGPU, RemoteBusID: node.GPUs[j].PCIBusID})
				}
			case topology.LinkNVSwitch:
				d.NVLinkP2P[j] = discovery.P2PStatusOK
			}
		}
		if switchLinks := nvswitchLinks(node, i); switchLinks > 0 {
			for k := range switchLinks {
				// The baseboard's NVSwitches, round robin, as on HGX.
				d.NVLinks = append(d.NVLinks, NVLink{Remote: discovery.NVLinkDeviceSwitch, RemoteBusID: fmt.Sprintf("00000000:%02X:00.0", 0x05+k%4)})
			}
		}
		if len(d.NVLinks) > hw.NVLinksPerGPU {
			return nil, fmt.Errorf("GPU %d has %d NVLinks but the hardware has %d per GPU", i, len(d.NVLinks), hw.NVLinksPerGPU)
		}
		switch dom := node.NVLinkDomain; {
		case dom != nil:
			uuid, err := parseUUID(dom.ClusterUUID)
			if err != nil {
				return nil, fmt.Errorf("NVLink domain: %w", err)
			}
			d.Fabric = discovery.FabricInfo{ClusterUUID: uuid, CliqueID: dom.CliqueID, State: discovery.FabricStateCompleted, Status: discovery.NVMLSuccess}
			d.FabricErr = nil
		case hw.FabricSingleNode:
			d.Fabric = discovery.FabricInfo{State: discovery.FabricStateCompleted, Status: discovery.NVMLSuccess}
			d.FabricErr = nil
		}
	}
	return lib, nil
}

// nvswitchLinks is the number of links GPU i has into NVSwitches.
func nvswitchLinks(node *topology.NodeTopology, i int) int {
	for j, l := range node.Links[i] {
		if j != i && l.Class == topology.LinkNVSwitch {
			return l.NVLinks
		}
	}
	return 0
}

// ancestorOf is the NVML topology level of the PCIe path between GPUs i and
// j. NVLink pairs have no PCIe class in the model; they get the one their
// NUMA nodes imply, which discovery never asks for.
func ancestorOf(node *topology.NodeTopology, i, j int) discovery.TopologyLevel {
	switch node.Links[i][j].Class {
	case topology.LinkSameSwitch:
		return discovery.TopologySingle
	case topology.LinkMultiSwitch:
		return discovery.TopologyMultiple
	case topology.LinkHostBridge:
		return discovery.TopologyHostBridge
	case topology.LinkSameNUMA:
		return discovery.TopologyNode
	case topology.LinkCrossNUMA:
		return discovery.TopologySystem
	}
	if node.GPUs[i].NUMANode == node.GPUs[j].NUMANode {
		return discovery.TopologyNode
	}
	return discovery.TopologySystem
}

func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(u) {
		return u, fmt.Errorf("bad UUID %q", s)
	}
	copy(u[:], b)
	return u, nil
}

// Init implements discovery.Library.
func (n *NVML) Init() error { return n.InitErr }

// Shutdown implements discovery.Library.
func (n *NVML) Shutdown() error {
	n.Shutdowns++
	return n.ShutdownErr
}

// DeviceCount implements discovery.Library.
func (n *NVML) DeviceCount() (int, error) {
	if n.CountErr != nil {
		return 0, n.CountErr
	}
	return len(n.Devices), nil
}

// DeviceByIndex implements discovery.Library.
func (n *NVML) DeviceByIndex(i int) (discovery.Device, error) {
	if i < 0 || i >= len(n.Devices) {
		return nil, discovery.NVMLErrorInvalidArgument
	}
	if err := n.Devices[i].HandleErr; err != nil {
		return nil, err
	}
	return n.Devices[i], nil
}

// UUID implements discovery.Device.
func (d *Device) UUID() (string, error) { return d.UUIDValue, d.Errs["UUID"] }

// Name implements discovery.Device.
func (d *Device) Name() (string, error) { return d.NameValue, d.Errs["Name"] }

// MemoryTotalBytes implements discovery.Device.
func (d *Device) MemoryTotalBytes() (uint64, error) { return d.MemoryBytes, d.Errs["MemoryTotalBytes"] }

// PCIBusID implements discovery.Device.
func (d *Device) PCIBusID() (string, error) { return d.BusID, d.Errs["PCIBusID"] }

// Architecture implements discovery.Device.
func (d *Device) Architecture() (discovery.Architecture, error) {
	return d.Arch, d.Errs["Architecture"]
}

// MemoryAffinity implements discovery.Device.
func (d *Device) MemoryAffinity() ([]int, error) { return d.NUMANodes, d.Errs["MemoryAffinity"] }

// MIGMode implements discovery.Device.
func (d *Device) MIGMode() (bool, bool, error) {
	return d.MIGEnabled, d.MIGPending, d.Errs["MIGMode"]
}

// MaxPCIeLink implements discovery.Device.
func (d *Device) MaxPCIeLink() (discovery.PCIeLink, error) { return d.PCIe, d.Errs["MaxPCIeLink"] }

// nvlink returns port link, or the error NVML gives for it: not supported
// on a GPU without NVLink, invalid argument past the last port.
func (d *Device) nvlink(method string, link int) (NVLink, bool, error) {
	if err := d.Errs[method]; err != nil {
		return NVLink{}, false, err
	}
	switch {
	case d.NVLinksPerGPU == 0:
		return NVLink{}, false, discovery.NVMLErrorNotSupported
	case link < 0 || link >= d.NVLinksPerGPU:
		return NVLink{}, false, discovery.NVMLErrorInvalidArgument
	case link >= len(d.NVLinks):
		return NVLink{}, false, nil
	}
	return d.NVLinks[link], true, nil
}

// NVLinkState implements discovery.Device.
func (d *Device) NVLinkState(link int) (bool, error) {
	_, active, err := d.nvlink("NVLinkState", link)
	return active, err
}

// NVLinkVersion implements discovery.Device.
func (d *Device) NVLinkVersion(link int) (discovery.NVLinkVersion, error) {
	if _, _, err := d.nvlink("NVLinkVersion", link); err != nil {
		return discovery.NVLinkVersionInvalid, err
	}
	return d.NVLinkVer, nil
}

// NVLinkRemotePCIBusID implements discovery.Device.
func (d *Device) NVLinkRemotePCIBusID(link int) (string, error) {
	l, _, err := d.nvlink("NVLinkRemotePCIBusID", link)
	return l.RemoteBusID, err
}

// NVLinkRemoteDeviceType implements discovery.Device.
func (d *Device) NVLinkRemoteDeviceType(link int) (discovery.NVLinkDeviceType, error) {
	l, _, err := d.nvlink("NVLinkRemoteDeviceType", link)
	return l.Remote, err
}

// TopologyCommonAncestor implements discovery.Device.
func (d *Device) TopologyCommonAncestor(other discovery.Device) (discovery.TopologyLevel, error) {
	if err := d.Errs["TopologyCommonAncestor"]; err != nil {
		return 0, err
	}
	return d.Ancestors[other.(*Device).Index], nil
}

// NVLinkP2PStatus implements discovery.Device.
func (d *Device) NVLinkP2PStatus(other discovery.Device) (discovery.P2PStatus, error) {
	if err := d.Errs["NVLinkP2PStatus"]; err != nil {
		return discovery.P2PStatusUnknown, err
	}
	return d.NVLinkP2P[other.(*Device).Index], nil
}

// FabricInfo implements discovery.Device.
func (d *Device) FabricInfo() (discovery.FabricInfo, error) {
	if err := d.Errs["FabricInfo"]; err != nil {
		return discovery.FabricInfo{}, err
	}
	return d.Fabric, d.FabricErr
}
