package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// HCA is one RDMA device (InfiniBand or RoCE host channel adapter) as sysfs
// shows it under /sys/class/infiniband.
type HCA struct {
	// Name is the RDMA device name, e.g. "mlx5_0".
	Name string `json:"name"`
	// NodeGUID is the adapter's node GUID as sysfs prints it
	// ("b83f:d203:00a1:2b3c").
	NodeGUID string `json:"nodeGUID,omitempty"`
	// PCIAddress is the adapter's PCI function ("0000:19:00.0"); empty when
	// sysfs does not link the device to one.
	PCIAddress string `json:"pciAddress,omitempty"`
	// NUMANode is the adapter's NUMA node, -1 when unknown.
	NUMANode int `json:"numaNode"`
	// Ports are the adapter's ports by number.
	Ports []HCAPort `json:"ports"`
}

// rdmaDevice is an HCA and where it sits in the PCIe tree; the path is empty
// when sysfs does not say.
type rdmaDevice struct {
	HCA
	pci pciDevice
}

// HCAPort is one port of an HCA.
type HCAPort struct {
	Number int `json:"number"`
	// State is the port state name: "ACTIVE", "DOWN", "INIT", ...
	State string `json:"state"`
	// RateGbps is the signalling rate, e.g. 400 for "400 Gb/sec (4X NDR)".
	RateGbps float64 `json:"rateGbps"`
	// LinkLayer is "InfiniBand" or "Ethernet" (RoCE).
	LinkLayer string `json:"linkLayer"`
}

// Active reports whether the port can carry traffic.
func (p HCAPort) Active() bool { return p.State == "ACTIVE" }

// ActiveRateGbps is the summed rate of the HCA's active ports.
func (h HCA) ActiveRateGbps() float64 {
	var rate float64
	for _, p := range h.Ports {
		if p.Active() {
			rate += p.RateGbps
		}
	}
	return rate
}

// readHCAs lists the RDMA devices of the sysfs tree, sorted by name. A
// machine without RDMA devices has no /sys/class/infiniband: that is no
// HCAs, not an error.
func (s sysfs) readHCAs(w *warnings) ([]rdmaDevice, error) {
	class := filepath.Join(s.root, "class", "infiniband")
	entries, err := os.ReadDir(class)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing RDMA devices: %w", err)
	}
	hcas := make([]rdmaDevice, 0, len(entries))
	for _, e := range entries {
		hca, err := s.readHCA(filepath.Join(class, e.Name()), w)
		if err != nil {
			return nil, fmt.Errorf("RDMA device %s: %w", e.Name(), err)
		}
		hcas = append(hcas, hca)
	}
	sort.Slice(hcas, func(i, j int) bool { return naturalLess(hcas[i].Name, hcas[j].Name) })
	return hcas, nil
}

// readHCA reads one /sys/class/infiniband/<name> directory. The PCI
// location is optional: soft-RoCE devices have none, and without it the NIC
// is placed by NUMA node alone.
func (s sysfs) readHCA(dir string, w *warnings) (rdmaDevice, error) {
	hca := rdmaDevice{HCA: HCA{Name: filepath.Base(dir), NUMANode: -1}}
	guid, err := readSysfsString(filepath.Join(dir, "node_guid"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rdmaDevice{}, err
	}
	hca.NodeGUID = guid
	switch pci, err := s.pciDeviceAt(filepath.Join(dir, "device")); {
	case err == nil:
		hca.pci = pci
		hca.PCIAddress = pci.path[len(pci.path)-1]
		hca.NUMANode = pci.numaNode
	case !errors.Is(err, fs.ErrNotExist):
		w.add("RDMA device %s: locating its PCI device: %v; placing it by NUMA node only", hca.Name, err)
	}
	portsDir := filepath.Join(dir, "ports")
	entries, err := os.ReadDir(portsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rdmaDevice{}, fmt.Errorf("listing ports: %w", err)
	}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		port, err := readHCAPort(filepath.Join(portsDir, e.Name()), n)
		if err != nil {
			return rdmaDevice{}, fmt.Errorf("port %d: %w", n, err)
		}
		hca.Ports = append(hca.Ports, port)
	}
	sort.Slice(hca.Ports, func(i, j int) bool { return hca.Ports[i].Number < hca.Ports[j].Number })
	return hca, nil
}

func readHCAPort(dir string, number int) (HCAPort, error) {
	port := HCAPort{Number: number}
	state, err := readSysfsString(filepath.Join(dir, "state"))
	if err != nil {
		return HCAPort{}, err
	}
	// "4: ACTIVE": the number is the IB spec's port state code.
	if _, name, ok := strings.Cut(state, ":"); ok {
		state = name
	}
	port.State = strings.TrimSpace(state)
	rate, err := readSysfsString(filepath.Join(dir, "rate"))
	if err != nil {
		return HCAPort{}, err
	}
	if port.RateGbps, err = parsePortRate(rate); err != nil {
		return HCAPort{}, err
	}
	// Old kernels have no link_layer: they predate RoCE, so InfiniBand.
	port.LinkLayer, err = readSysfsString(filepath.Join(dir, "link_layer"))
	if errors.Is(err, fs.ErrNotExist) {
		port.LinkLayer, err = "InfiniBand", nil
	}
	return port, err
}

// parsePortRate parses a port rate file: "400 Gb/sec (4X NDR)",
// "2.5 Gb/sec (1X SDR)".
func parsePortRate(s string) (float64, error) {
	num, _, ok := strings.Cut(strings.TrimSpace(s), " Gb/sec")
	if !ok {
		return 0, fmt.Errorf("port rate %q: want \"<n> Gb/sec (...)\"", s)
	}
	rate, err := strconv.ParseFloat(num, 64)
	if err != nil || rate < 0 {
		return 0, fmt.Errorf("port rate %q: want \"<n> Gb/sec (...)\"", s)
	}
	return rate, nil
}

func readSysfsString(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", filepath.Base(file), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// naturalLess orders names by their text and then by a trailing number, so
// mlx5_2 sorts before mlx5_10 as operators number them.
func naturalLess(a, b string) bool {
	ap, an := splitTrailingNumber(a)
	bp, bn := splitTrailingNumber(b)
	if ap != bp || an < 0 || bn < 0 {
		return a < b
	}
	return an < bn
}

// splitTrailingNumber splits "mlx5_10" into "mlx5_" and 10; the number is -1
// when the name does not end in digits.
func splitTrailingNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, -1
	}
	return s[:i], n
}
