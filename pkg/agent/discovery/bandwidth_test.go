package discovery

import (
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestNVLinkLinkGBps(t *testing.T) {
	tests := []struct {
		name      string
		version   NVLinkVersion
		arch      Architecture
		wantGBps  float64
		wantKnown bool
	}{
		{"P100 NVLink 1.0", NVLinkVersion1_0, 4, 20, true},
		{"V100 NVLink 2.0", NVLinkVersion2_0, ArchVolta, 25, true},
		{"A100 NVLink 3.0", NVLinkVersion3_0, ArchAmpere, 25, true},
		{"RTX 3090 NVLink 3.1", NVLinkVersion3_1, ArchAmpere, 25, true},
		{"H100 NVLink 4.0", NVLinkVersion4_0, ArchHopper, 25, true},
		{"B200 NVLink 5.0", NVLinkVersion5_0, ArchBlackwell, 50, true},
		{"NVLink 5.0 with unknown architecture", NVLinkVersion5_0, ArchUnknown, 50, true},
		{"NVLink 5.0 claimed by a Hopper GPU", NVLinkVersion5_0, ArchHopper, 25, true},
		{"invalid", NVLinkVersionInvalid, ArchHopper, 0, false},
		{"newer than known", 8, ArchBlackwell, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, known := nvlinkLinkGBps(tc.version, tc.arch)
			if got != tc.wantGBps || known != tc.wantKnown {
				t.Errorf("nvlinkLinkGBps(%d, %d) = %v, %v; want %v, %v", tc.version, tc.arch, got, known, tc.wantGBps, tc.wantKnown)
			}
		})
	}
}

func TestPCIeGBps(t *testing.T) {
	x16 := func(gen int) PCIeLink { return PCIeLink{Generation: gen, Width: 16} }
	tests := []struct {
		name  string
		class topology.LinkClass
		a, b  PCIeLink
		want  float64
	}{
		{"Gen4 same switch", topology.LinkSameSwitch, x16(4), x16(4), 25},
		{"Gen4 several switches", topology.LinkMultiSwitch, x16(4), x16(4), 25},
		{"Gen4 host bridge", topology.LinkHostBridge, x16(4), x16(4), 20},
		{"Gen4 same NUMA", topology.LinkSameNUMA, x16(4), x16(4), 20},
		{"Gen4 cross socket", topology.LinkCrossNUMA, x16(4), x16(4), 14},
		{"Gen3 cross socket (DGX-1)", topology.LinkCrossNUMA, x16(3), x16(3), 10},
		{"Gen3 same switch", topology.LinkSameSwitch, x16(3), x16(3), 12.5},
		{"Gen5 same NUMA", topology.LinkSameNUMA, x16(5), x16(5), 40},
		{"Gen5 cross socket", topology.LinkCrossNUMA, x16(5), x16(5), 28},
		{"slower GPU bounds the pair", topology.LinkSameSwitch, x16(5), x16(4), 25},
		{"narrower link bounds the pair", topology.LinkSameSwitch, x16(4), PCIeLink{Generation: 4, Width: 8}, 12.5},
		{"Gen2 is half of Gen3", topology.LinkSameSwitch, x16(2), x16(2), 6.25},
		{"Gen6 is held at Gen5", topology.LinkSameSwitch, x16(6), x16(6), 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pcieGBps(tc.class, tc.a, tc.b); got != tc.want {
				t.Errorf("pcieGBps(%v, %+v, %+v) = %v, want %v", tc.class, tc.a, tc.b, got, tc.want)
			}
		})
	}
}
