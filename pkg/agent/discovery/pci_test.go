package discovery

import (
	"strings"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestPCIAddress(t *testing.T) {
	tests := []struct {
		busID   string
		want    string
		wantErr bool
	}{
		{busID: "00000000:18:00.0", want: "0000:18:00.0"},
		{busID: "00000000:2A:00.0", want: "0000:2a:00.0"},
		{busID: "00000008:01:00.0", want: "0008:01:00.0"},
		{busID: "0000:1b:00.1", want: "0000:1b:00.1"},
		// VMD domains do not fit in four digits.
		{busID: "00010000:E1:00.0", want: "10000:e1:00.0"},
		{busID: "", wantErr: true},
		{busID: "18:00.0", wantErr: true},
		{busID: "0000000G:18:00.0", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.busID, func(t *testing.T) {
			got, err := pciAddress(tc.busID)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("pciAddress(%q) = %q, %v; want %q, error %v", tc.busID, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// device places a device by its sysfs path below /sys/devices.
func device(numa int, path string) pciDevice {
	return pciDevice{path: strings.Split(path, "/"), numaNode: numa}
}

func TestPCIPathClass(t *testing.T) {
	const (
		// One switch under a root port: an upstream port with a
		// downstream port per device.
		gpu = "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
		nic = "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"
		// A second switch under another root port of the same root.
		otherSwitch = "pci0000:15/0000:15:03.0/0000:1b:00.0/0000:1c:00.0/0000:1d:00.0"
		// Two levels of switches, as on DGX A100: both devices under the
		// same first-level switch but different second-level ones.
		cascadeA  = "pci0000:ff/0000:ff:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0"
		cascadeB  = "pci0000:ff/0000:ff:01.0/0000:01:00.0/0000:02:01.0/0000:06:00.0/0000:07:00.0/0000:08:00.0"
		otherRoot = "pci0000:26/0000:26:01.0/0000:27:00.0/0000:28:00.0/0000:29:00.0"
	)
	tests := []struct {
		name string
		a, b pciDevice
		want topology.LinkClass
	}{
		{"same switch", device(0, gpu), device(0, nic), topology.LinkSameSwitch},
		{"functions of one device", device(0, "pci0000:15/0000:15:01.0/0000:18:00.0"), device(0, "pci0000:15/0000:15:01.0/0000:18:00.1"), topology.LinkSameSwitch},
		{"cascaded switches", device(0, cascadeA), device(0, cascadeB), topology.LinkMultiSwitch},
		{"same root, different root ports", device(0, gpu), device(0, otherSwitch), topology.LinkHostBridge},
		{"different roots, same NUMA node", device(0, gpu), device(0, otherRoot), topology.LinkSameNUMA},
		{"different roots, different NUMA nodes", device(0, gpu), device(1, otherRoot), topology.LinkCrossNUMA},
		{"different roots, NUMA unknown", device(-1, gpu), device(-1, otherRoot), topology.LinkSameNUMA},
		{"one end not in the tree", pciDevice{numaNode: 1}, device(0, gpu), topology.LinkCrossNUMA},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pciPathClass(tc.a, tc.b); got != tc.want {
				t.Errorf("pciPathClass = %v, want %v", got, tc.want)
			}
			if got := pciPathClass(tc.b, tc.a); got != tc.want {
				t.Errorf("pciPathClass swapped = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParsePortRate(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantErr bool
	}{
		{in: "400 Gb/sec (4X NDR)", want: 400},
		{in: "200 Gb/sec (2X NDR)\n", want: 200},
		{in: "100 Gb/sec (4X EDR)", want: 100},
		{in: "2.5 Gb/sec (1X SDR)", want: 2.5},
		{in: "unknown", wantErr: true},
		{in: "fast Gb/sec", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parsePortRate(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parsePortRate(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestNaturalLess(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"mlx5_2", "mlx5_10", true},
		{"mlx5_10", "mlx5_2", false},
		{"mlx5_0", "mlx5_0", false},
		{"ibp24s0", "mlx5_0", true},
		{"mlx5_bond_0", "mlx5_1", false},
	}
	for _, tc := range tests {
		if got := naturalLess(tc.a, tc.b); got != tc.want {
			t.Errorf("naturalLess(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestProductLabel(t *testing.T) {
	tests := map[string]string{
		"NVIDIA H100 80GB HBM3": "NVIDIA-H100-80GB-HBM3",
		"Tesla V100-SXM2-32GB":  "Tesla-V100-SXM2-32GB",
		" NVIDIA  L40S ":        "NVIDIA-L40S",
	}
	for in, want := range tests {
		if got := productLabel(in); got != want {
			t.Errorf("productLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFormatUUID(t *testing.T) {
	u := [16]byte{0x5c, 0x8a, 0x1b, 0x52, 0x7e, 0x0a, 0x4c, 0x3b, 0x9d, 0x3f, 0x2a, 0x6b, 0x8e, 0x1f, 0x0c, 0x11}
	if got, want := formatUUID(u), "5c8a1b52-7e0a-4c3b-9d3f-2a6b8e1f0c11"; got != want {
		t.Errorf("formatUUID = %q, want %q", got, want)
	}
}
