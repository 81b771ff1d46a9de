package discoverytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Layout is a machine's PCIe tree, as much of it as discovery reads.
type Layout struct {
	HostBridges []HostBridge
}

// HostBridge is one PCI root ("pci0000:15" in /sys/devices), with the NUMA
// node the kernel gives its devices.
type HostBridge struct {
	Domain, Bus int
	NUMANode    int
	// Switches each hang off a root port of their own.
	Switches []Switch
}

// Switch is one PCIe switch: an upstream port with a downstream port per
// endpoint.
type Switch struct {
	Endpoints []Endpoint
}

// Endpoint is a GPU or an RDMA NIC.
type Endpoint struct {
	// Address is the sysfs PCI address, "0000:18:00.0".
	Address string
	// HCA is set for an RDMA NIC.
	HCA *HCA
}

// HCA is an RDMA device as /sys/class/infiniband shows it.
type HCA struct {
	Name     string
	NodeGUID string
	Ports    []Port
}

// Port holds the contents of a port's sysfs files.
type Port struct {
	Rate      string // "400 Gb/sec (4X NDR)"
	State     string // "4: ACTIVE"
	LinkLayer string // "InfiniBand"
}

// WriteSysfs writes the layout as a sysfs tree under root: the devices
// under /devices/pci<root>/<root port>/<upstream>/<downstream>/<endpoint>
// with their numa_node, the /bus/pci/devices and /class/infiniband
// symlinks, and each HCA's node_guid and ports, the way the kernel lays
// them out. Bridges get bus numbers no endpoint uses.
func WriteSysfs(root string, l Layout) error {
	buses := newBusAllocator(l)
	for _, hb := range l.HostBridges {
		rootDir := filepath.Join(root, "devices", fmt.Sprintf("pci%04x:%02x", hb.Domain, hb.Bus))
		for s, sw := range hb.Switches {
			rootPort := fmt.Sprintf("%04x:%02x:%02x.0", hb.Domain, hb.Bus, s+1)
			up := fmt.Sprintf("%04x:%02x:00.0", hb.Domain, buses.next(hb.Domain))
			downBus := buses.next(hb.Domain)
			upDir := filepath.Join(rootDir, rootPort, up)
			for _, dir := range []string{filepath.Join(rootDir, rootPort), upDir} {
				if err := writePCIDevice(root, dir, hb.NUMANode); err != nil {
					return err
				}
			}
			for e, ep := range sw.Endpoints {
				down := fmt.Sprintf("%04x:%02x:%02x.0", hb.Domain, downBus, e)
				downDir := filepath.Join(upDir, down)
				dir := filepath.Join(downDir, ep.Address)
				for _, d := range []string{downDir, dir} {
					if err := writePCIDevice(root, d, hb.NUMANode); err != nil {
						return err
					}
				}
				if ep.HCA != nil {
					if err := writeHCA(root, dir, *ep.HCA); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// writePCIDevice creates a PCI device directory with its numa_node and its
// /sys/bus/pci/devices link.
func writePCIDevice(root, dir string, numa int) error {
	if err := writeFile(filepath.Join(dir, "numa_node"), strconv.Itoa(numa)); err != nil {
		return err
	}
	return relativeSymlink(dir, filepath.Join(root, "bus", "pci", "devices", filepath.Base(dir)))
}

func writeHCA(root, pciDir string, h HCA) error {
	dir := filepath.Join(pciDir, "infiniband", h.Name)
	if err := writeFile(filepath.Join(dir, "node_guid"), h.NodeGUID); err != nil {
		return err
	}
	for n, p := range h.Ports {
		portDir := filepath.Join(dir, "ports", strconv.Itoa(n+1))
		for name, content := range map[string]string{"rate": p.Rate, "state": p.State, "link_layer": p.LinkLayer} {
			if err := writeFile(filepath.Join(portDir, name), content); err != nil {
				return err
			}
		}
	}
	if err := relativeSymlink(pciDir, filepath.Join(dir, "device")); err != nil {
		return err
	}
	return relativeSymlink(dir, filepath.Join(root, "class", "infiniband", h.Name))
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content+"\n"), 0o644)
}

// relativeSymlink makes link point at target with a relative path through
// target's parent, as sysfs links are ("../../../devices/pci0000:15/…",
// "../../../0000:19:00.0").
func relativeSymlink(target, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(link), filepath.Dir(target))
	if err != nil {
		return err
	}
	return os.Symlink(filepath.Join(rel, filepath.Base(target)), link)
}

// busAllocator hands out PCI bus numbers no host bridge or endpoint of the
// layout uses, per PCI domain.
type busAllocator struct {
	used map[int]map[int]bool
}

func newBusAllocator(l Layout) *busAllocator {
	a := &busAllocator{used: map[int]map[int]bool{}}
	for _, hb := range l.HostBridges {
		a.take(hb.Domain, hb.Bus)
		for _, sw := range hb.Switches {
			for _, ep := range sw.Endpoints {
				a.take(domainAndBus(ep.Address))
			}
		}
	}
	return a
}

func (a *busAllocator) take(domain, bus int) {
	if a.used[domain] == nil {
		a.used[domain] = map[int]bool{}
	}
	a.used[domain][bus] = true
}

func (a *busAllocator) next(domain int) int {
	bus := 1
	for a.used[domain][bus] {
		bus++
	}
	a.take(domain, bus)
	return bus
}

// LayoutFromTopology builds a PCIe tree that gives node's NIC-to-GPU paths:
// each NIC shares a switch with the GPUs it is PIX to; the switches of a
// NUMA node share one host bridge when a NIC there is PHB to GPUs outside
// its switch, and each have their own otherwise (NODE); NUMA nodes never
// share a host bridge (SYS). PXB paths are not supported. A NIC's address
// follows its switch's last GPU, or gets a PCI domain of its own when it
// has no PIX GPU (as on GB200, where every GPU-to-NIC path is SYS).
func LayoutFromTopology(node *topology.NodeTopology) (Layout, error) {
	type group struct {
		numa      int
		endpoints []Endpoint
	}
	var groups []group
	inGroup := make([]bool, len(node.GPUs))
	sharedBridge := map[int]bool{}
	for k, nic := range node.NICs {
		g := group{numa: nic.NUMANode}
		var addr string
		for gpu := range node.GPUs {
			switch nic.PathTo(node, gpu) {
			case topology.LinkSameSwitch:
				a, err := sysfsAddress(node.GPUs[gpu].PCIBusID)
				if err != nil {
					return Layout{}, err
				}
				if node.GPUs[gpu].NUMANode != nic.NUMANode {
					return Layout{}, fmt.Errorf("NIC %s and its PIX GPU %d are on different NUMA nodes", nic.Name, gpu)
				}
				// The NIC takes the bus after its switch's last GPU.
				domain, bus := domainAndBus(a)
				addr = fmt.Sprintf("%04x:%02x:00.0", domain, bus+1)
				g.endpoints = append(g.endpoints, Endpoint{Address: a})
				inGroup[gpu] = true
			case topology.LinkHostBridge:
				sharedBridge[nic.NUMANode] = true
			case topology.LinkMultiSwitch:
				return Layout{}, fmt.Errorf("NIC %s: PXB paths are not supported", nic.Name)
			}
		}
		if addr == "" {
			addr = fmt.Sprintf("%04x:03:00.0", k)
		}
		g.endpoints = append(g.endpoints, Endpoint{Address: addr, HCA: &HCA{
			Name:     nic.Name,
			NodeGUID: fmt.Sprintf("b83f:d203:00a1:%04x", k),
			Ports:    []Port{{Rate: portRate(nic.RateGbps), State: "4: ACTIVE", LinkLayer: "InfiniBand"}},
		}})
		groups = append(groups, g)
	}
	for gpu, in := range inGroup {
		if !in {
			a, err := sysfsAddress(node.GPUs[gpu].PCIBusID)
			if err != nil {
				return Layout{}, err
			}
			groups = append(groups, group{numa: node.GPUs[gpu].NUMANode, endpoints: []Endpoint{{Address: a}}})
		}
	}

	seen := map[string]bool{}
	for _, g := range groups {
		for _, ep := range g.endpoints {
			if seen[ep.Address] {
				return Layout{}, fmt.Errorf("two devices at PCI address %s", ep.Address)
			}
			seen[ep.Address] = true
		}
	}

	var l Layout
	bridgeOfNUMA := map[int]int{}
	rootBuses := map[[2]int]bool{}
	for _, g := range groups {
		sw := Switch{Endpoints: g.endpoints}
		if i, ok := bridgeOfNUMA[g.numa]; ok && sharedBridge[g.numa] {
			l.HostBridges[i].Switches = append(l.HostBridges[i].Switches, sw)
			continue
		}
		// Root buses sit a few numbers below their devices, as firmware
		// numbers them.
		domain, bus := domainAndBus(g.endpoints[0].Address)
		bus = max(bus-3, 0)
		for rootBuses[[2]int{domain, bus}] {
			bus++
		}
		rootBuses[[2]int{domain, bus}] = true
		bridgeOfNUMA[g.numa] = len(l.HostBridges)
		l.HostBridges = append(l.HostBridges, HostBridge{Domain: domain, Bus: bus, NUMANode: g.numa, Switches: []Switch{sw}})
	}
	return l, nil
}

// domainAndBus splits a sysfs PCI address; it returns zeros for one that
// does not parse.
func domainAndBus(addr string) (domain, bus int) {
	if _, err := fmt.Sscanf(addr, "%x:%x:", &domain, &bus); err != nil {
		return 0, 0
	}
	return domain, bus
}

// sysfsAddress turns an NVML bus id into a sysfs PCI address.
func sysfsAddress(busID string) (string, error) {
	var domain, bus, dev, fn int
	if _, err := fmt.Sscanf(busID, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err != nil {
		return "", fmt.Errorf("bus id %q: %w", busID, err)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, fn), nil
}

// portRate is the rate file of an InfiniBand port of the given speed.
func portRate(gbps int) string {
	speed := map[int]string{100: "EDR", 200: "HDR", 400: "NDR", 800: "XDR"}[gbps]
	return fmt.Sprintf("%d Gb/sec (4X %s)", gbps, speed)
}
