package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// DefaultSysfsRoot is where sysfs is mounted on a node.
const DefaultSysfsRoot = "/sys"

// pciAddress converts an NVML bus id ("00000000:18:00.0", 8 hex digits of
// PCI domain, upper case) to the form sysfs names devices by
// ("0000:18:00.0", at least 4 digits of domain, lower case).
func pciAddress(busID string) (string, error) {
	domain, rest, ok := strings.Cut(strings.TrimSpace(busID), ":")
	if !ok {
		return "", fmt.Errorf("PCI bus id %q: want domain:bus:device.function", busID)
	}
	d, err := strconv.ParseUint(domain, 16, 32)
	if err != nil {
		return "", fmt.Errorf("PCI bus id %q: bad domain: %w", busID, err)
	}
	var bus, dev, fn uint
	if n, err := fmt.Sscanf(strings.ToLower(rest), "%02x:%02x.%x", &bus, &dev, &fn); err != nil || n != 3 {
		return "", fmt.Errorf("PCI bus id %q: want domain:bus:device.function", busID)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", d, bus, dev, fn), nil
}

// pciDevice is where a PCI device sits in the host's PCIe tree.
type pciDevice struct {
	// path is the device's directories below /sys/devices, from its PCI
	// root ("pci0000:15") down to the device itself: every bridge on the way
	// is one element, so two devices' shared prefix is their shared
	// ancestry.
	path []string
	// numaNode is the kernel's NUMA node of the device, -1 when unknown.
	numaNode int
}

// sysfs reads the PCI and RDMA parts of a sysfs tree mounted at root.
type sysfs struct {
	root string
}

// pciDeviceByAddress locates the PCI device with the given sysfs address
// through the /sys/bus/pci/devices/<address> symlink.
func (s sysfs) pciDeviceByAddress(addr string) (pciDevice, error) {
	return s.pciDeviceAt(filepath.Join(s.root, "bus", "pci", "devices", addr))
}

// pciDeviceAt locates the PCI device whose sysfs directory, or a symlink to
// it, is link.
func (s sysfs) pciDeviceAt(link string) (pciDevice, error) {
	resolved, err := filepath.EvalSymlinks(link)
	if err != nil {
		return pciDevice{}, fmt.Errorf("resolving PCI device: %w", err)
	}
	devices, err := filepath.EvalSymlinks(filepath.Join(s.root, "devices"))
	if err != nil {
		return pciDevice{}, fmt.Errorf("resolving PCI device: %w", err)
	}
	rel, err := filepath.Rel(devices, resolved)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return pciDevice{}, fmt.Errorf("PCI device %s is not under %s", resolved, devices)
	}
	numa, err := readNUMANode(filepath.Join(resolved, "numa_node"))
	if err != nil {
		return pciDevice{}, err
	}
	return pciDevice{path: strings.Split(rel, string(filepath.Separator)), numaNode: numa}, nil
}

// readNUMANode reads a sysfs numa_node file; the kernel writes -1 when the
// platform does not say (single-socket machines, many VMs).
func readNUMANode(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return -1, fmt.Errorf("reading NUMA node: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1, fmt.Errorf("reading NUMA node from %s: %w", file, err)
	}
	return max(n, -1), nil
}

// pciPathClass is the `nvidia-smi topo -m` class of the PCIe path between
// two devices, from where they sit in the tree:
//   - different PCI roots: NODE within a NUMA node, SYS across;
//   - the same root but different root ports: PHB, through the host bridge;
//   - under one PCIe switch, each at most a downstream port below the
//     deepest bridge they share: PIX;
//   - otherwise, several bridges without the host bridge: PXB.
//
// Linux shows a switch as an upstream port with one downstream port per
// link, so "one switch" is two levels of directories below the shared
// upstream port.
func pciPathClass(a, b pciDevice) topology.LinkClass {
	if len(a.path) == 0 || len(b.path) == 0 || a.path[0] != b.path[0] {
		return numaPathClass(a.numaNode, b.numaNode)
	}
	shared := 0
	for shared < len(a.path) && shared < len(b.path) && a.path[shared] == b.path[shared] {
		shared++
	}
	if shared == 1 {
		return topology.LinkHostBridge
	}
	if max(len(a.path), len(b.path))-shared <= 2 {
		return topology.LinkSameSwitch
	}
	return topology.LinkMultiSwitch
}

// numaPathClass is the path class between two devices under different PCI
// roots, or known only by their NUMA nodes: NODE on one NUMA node, SYS
// across. Two unknown nodes count as one, which is right on the
// single-socket machines where the kernel reports none.
func numaPathClass(a, b int) topology.LinkClass {
	if a == b {
		return topology.LinkSameNUMA
	}
	return topology.LinkCrossNUMA
}
