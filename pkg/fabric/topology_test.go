package fabric

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTopologyFixtures(t *testing.T) {
	const (
		// two-leaf: EDR, one spine over two leaves, four hosts with two
		// adapters each; node-04 has one adapter on each leaf.
		twoLeaf1, twoLeaf2 = "leaf-7cfe90030012a100", "leaf-7cfe90030012a200"
		twoLeafSpines      = "spine-group-7cfe90030012a000"
		// fat-tree: HDR, two spines over four leaves, SHARP aggregation
		// nodes on every switch.
		fatSpines = "spine-group-b8599f0300fc6000"
		// three-tier: NDR, two pods of two spines and two leaves under two
		// cores.
		pod1, pod2 = "spine-group-a088c20300501100", "spine-group-a088c20300502100"
		cores      = "core-group-a088c20300500100"
		// rail-optimised: two scalable units of two rails under two spines.
		su1Rail0, su2Rail0, su2Rail1 = "leaf-e8ebd30300701100", "leaf-e8ebd30300702100", "leaf-e8ebd30300702200"
		railSpines                   = "spine-group-e8ebd30300700100"
	)
	tests := []struct {
		fixture   string
		wantDepth int
		want      []Assignment
	}{
		{
			fixture:   "two-leaf.ibnetdiscover",
			wantDepth: 2,
			want: []Assignment{
				{Host: "node-01", Domains: []string{twoLeaf1, twoLeafSpines}},
				{Host: "node-02", Domains: []string{twoLeaf1, twoLeafSpines}},
				{Host: "node-03", Domains: []string{twoLeaf2, twoLeafSpines}},
				// One adapter per leaf: the tie goes to mlx5_0's leaf.
				{Host: "node-04", Domains: []string{twoLeaf2, twoLeafSpines}},
			},
		},
		{
			fixture:   "fat-tree.ibnetdiscover",
			wantDepth: 2, // the aggregation nodes on the spines do not make them leaves
			want: []Assignment{
				{Host: "dgx-a01", Domains: []string{"leaf-b8599f0300fc6200", fatSpines}},
				{Host: "dgx-a02", Domains: []string{"leaf-b8599f0300fc6200", fatSpines}},
				{Host: "dgx-a03", Domains: []string{"leaf-b8599f0300fc6300", fatSpines}},
				{Host: "dgx-a04", Domains: []string{"leaf-b8599f0300fc6300", fatSpines}},
				{Host: "dgx-a05", Domains: []string{"leaf-b8599f0300fc6400", fatSpines}},
				{Host: "dgx-a06", Domains: []string{"leaf-b8599f0300fc6400", fatSpines}},
				{Host: "dgx-a07", Domains: []string{"leaf-b8599f0300fc6500", fatSpines}},
				{Host: "dgx-a08", Domains: []string{"leaf-b8599f0300fc6500", fatSpines}},
			},
		},
		{
			fixture:   "three-tier.ibnetdiscover",
			wantDepth: 3,
			want: []Assignment{
				{Host: "gpu-001", Domains: []string{"leaf-a088c20300501300", pod1, cores}},
				{Host: "gpu-002", Domains: []string{"leaf-a088c20300501400", pod1, cores}},
				{Host: "gpu-003", Domains: []string{"leaf-a088c20300502300", pod2, cores}},
				{Host: "gpu-004", Domains: []string{"leaf-a088c20300502400", pod2, cores}},
			},
		},
		{
			fixture:   "rail-optimised.ibnetdiscover",
			wantDepth: 2,
			want: []Assignment{
				{Host: "dgx-b01", Domains: []string{su1Rail0, railSpines}},
				{Host: "dgx-b02", Domains: []string{su1Rail0, railSpines}},
				{Host: "dgx-b03", Domains: []string{su2Rail0, railSpines}},
				// HCA-2 and HCA-3 share the rail-1 leaf: most adapters win.
				{Host: "dgx-b04", Domains: []string{su2Rail1, railSpines}},
				// HCA-2 and HCA-10 tie; HCA-2 comes first in natural order.
				{Host: "dgx-b05", Domains: []string{su2Rail1, railSpines}},
			},
		},
		{
			fixture:   "back-to-back.ibnetdiscover",
			wantDepth: 0,
			want:      []Assignment{{Host: "bench-01"}, {Host: "bench-02"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			topo := parseFixture(t, tc.fixture).Topology(Options{})
			if diff := cmp.Diff(tc.want, topo.Assignments); diff != "" {
				t.Errorf("Assignments (-want,+got):\n%s", diff)
			}
			if topo.Depth != tc.wantDepth {
				t.Errorf("Depth = %d, want %d", topo.Depth, tc.wantDepth)
			}
		})
	}
}

func TestTopologySwitchTiers(t *testing.T) {
	topo := parseFixture(t, "three-tier.ibnetdiscover").Topology(Options{})
	want := []SwitchTier{
		{GUID: "a088c20300501300", Description: "MF0;pod1-leaf-01:MQM9700/U1", Tier: 1},
		{GUID: "a088c20300501400", Description: "MF0;pod1-leaf-02:MQM9700/U1", Tier: 1},
		{GUID: "a088c20300502300", Description: "MF0;pod2-leaf-01:MQM9700/U1", Tier: 1},
		{GUID: "a088c20300502400", Description: "MF0;pod2-leaf-02:MQM9700/U1", Tier: 1},
		{GUID: "a088c20300501100", Description: "MF0;pod1-spine-01:MQM9700/U1", Tier: 2},
		{GUID: "a088c20300501200", Description: "MF0;pod1-spine-02:MQM9700/U1", Tier: 2},
		{GUID: "a088c20300502100", Description: "MF0;pod2-spine-01:MQM9700/U1", Tier: 2},
		{GUID: "a088c20300502200", Description: "MF0;pod2-spine-02:MQM9700/U1", Tier: 2},
		{GUID: "a088c20300500100", Description: "MF0;ndr-core-01:MQM9700/U1", Tier: 3},
		{GUID: "a088c20300500200", Description: "MF0;ndr-core-02:MQM9700/U1", Tier: 3},
		// A leaf with no hosts is two hops from the nearest leaf, like a
		// core: the documented limit. It only ever joins its own pod.
		{GUID: "a088c20300502500", Description: "MF0;pod2-leaf-03:MQM9700/U1", Tier: 3},
	}
	if diff := cmp.Diff(want, topo.Switches); diff != "" {
		t.Errorf("Switches (-want,+got):\n%s", diff)
	}
}

func TestTopologyWarnings(t *testing.T) {
	tests := []struct {
		fixture string
		want    []string
	}{
		{"two-leaf.ibnetdiscover", nil},
		{"fat-tree.ibnetdiscover", []string{
			`adapter H-0c42a10300d1ef00 "MT4123 ConnectX6   Mellanox Technologies" is not a host's; skipped`,
			`6 adapters described "Mellanox Technologies Aggregation Node" are not hosts'; skipped (H-b8599f0300fc6008, ...)`,
		}},
		{"back-to-back.ibnetdiscover", []string{
			"host bench-01 is cabled to no switch",
			"host bench-02 is cabled to no switch",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			topo := parseFixture(t, tc.fixture).Topology(Options{})
			if diff := cmp.Diff(tc.want, topo.Warnings); diff != "" {
				t.Errorf("Warnings (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestTopologyHostNameOption(t *testing.T) {
	// Keeping only the dgx-a0[1-4] hosts leaves hdr-leaf-03 and -04 without
	// hosts: they become tier 3, hanging off the spines.
	hostName := func(desc string) (string, bool) {
		host, ok := HostFromNodeDescription(desc)
		return host, ok && host <= "dgx-a04"
	}
	topo := parseFixture(t, "fat-tree.ibnetdiscover").Topology(Options{HostName: hostName})
	spines := "spine-group-b8599f0300fc6000"
	fabricTop := "core-group-b8599f0300fc6400"
	want := []Assignment{
		{Host: "dgx-a01", Domains: []string{"leaf-b8599f0300fc6200", spines, fabricTop}},
		{Host: "dgx-a02", Domains: []string{"leaf-b8599f0300fc6200", spines, fabricTop}},
		{Host: "dgx-a03", Domains: []string{"leaf-b8599f0300fc6300", spines, fabricTop}},
		{Host: "dgx-a04", Domains: []string{"leaf-b8599f0300fc6300", spines, fabricTop}},
	}
	if diff := cmp.Diff(want, topo.Assignments); diff != "" {
		t.Errorf("Assignments (-want,+got):\n%s", diff)
	}
}

// TestTopologyWidestDomainRepeats feeds three subnets' outputs concatenated
// (as from a multi-plane fabric), three, two and one tier deep: a host in a
// shallower subnet repeats its widest domain up to the overall depth.
func TestTopologyWidestDomainRepeats(t *testing.T) {
	input := strings.Join([]string{
		`Switch	8 "S-00000000000000a1"		# "a-leaf" enhanced port 0 lid 1 lmc 0`,
		`[1]	"H-00000000000000fa"[1](fa) 		# "host-a mlx5_0" lid 11 4xHDR`,
		`[8]	"S-00000000000000a2"[1]		# "a-spine" lid 2 4xHDR`,
		``,
		`Switch	8 "S-00000000000000a2"		# "a-spine" enhanced port 0 lid 2 lmc 0`,
		`[8]	"S-00000000000000a3"[1]		# "a-core" lid 3 4xHDR`,
		``,
		`Switch	8 "S-00000000000000b1"		# "b-leaf" enhanced port 0 lid 1 lmc 0`,
		`[1]	"H-00000000000000fb"[1](fb) 		# "host-b mlx5_1" lid 12 4xHDR`,
		`[8]	"S-00000000000000b2"[1]		# "b-spine" lid 2 4xHDR`,
		``,
		`Switch	8 "S-00000000000000c1"		# "c-leaf" enhanced port 0 lid 1 lmc 0`,
		`[1]	"H-00000000000000fc"[1](fc) 		# "host-c mlx5_2" lid 13 4xHDR`,
	}, "\n")
	fab, err := ParseIBNetDiscover(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	topo := fab.Topology(Options{})
	want := []Assignment{
		{Host: "host-a", Domains: []string{"leaf-00000000000000a1", "spine-group-00000000000000a2", "core-group-00000000000000a3"}},
		{Host: "host-b", Domains: []string{"leaf-00000000000000b1", "spine-group-00000000000000b2", "spine-group-00000000000000b2"}},
		{Host: "host-c", Domains: []string{"leaf-00000000000000c1", "leaf-00000000000000c1", "leaf-00000000000000c1"}},
	}
	if diff := cmp.Diff(want, topo.Assignments); diff != "" {
		t.Errorf("Assignments (-want,+got):\n%s", diff)
	}
}

func TestHostFromNodeDescription(t *testing.T) {
	tests := []struct {
		desc     string
		wantHost string
		wantOK   bool
	}{
		{"node-01 mlx5_0", "node-01", true},
		{"dgx-a12 HCA-1", "dgx-a12", true},
		{"  gpu-7.example.com\tmlx5_3 ", "gpu-7.example.com", true},
		{"solo", "solo", true},
		{"", "", false},
		{"   ", "", false},
		{"Mellanox Technologies Aggregation Node", "", false},
		{"MT4123 ConnectX6   Mellanox Technologies", "", false},
		{"localhost mlx5_0", "", false},
		{"localhost.localdomain mlx5_0", "", false},
	}
	for _, tc := range tests {
		host, ok := HostFromNodeDescription(tc.desc)
		if host != tc.wantHost || ok != tc.wantOK {
			t.Errorf("HostFromNodeDescription(%q) = %q, %v; want %q, %v", tc.desc, host, ok, tc.wantHost, tc.wantOK)
		}
	}
}

func TestNaturalCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"mlx5_2", "mlx5_10", -1},
		{"HCA-10", "HCA-2", 1},
		{"HCA-1", "HCA-1", 0},
		{"node-01 mlx5_0", "node-01 mlx5_00", -1}, // equal numbers: plain order decides
		{"a", "b", -1},
		{"a1b", "a1", 1},
		{"x007", "x7", -1},
	}
	for _, tc := range tests {
		if got := naturalCompare(tc.a, tc.b); got != tc.want {
			t.Errorf("naturalCompare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("s", 64)
	tests := []struct {
		in, want string
	}{
		{"S-2c5eab036832a42e", "S-2c5eab036832a42e"},
		{"7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1", "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1"},
		{strings.Repeat("s", 63), strings.Repeat("s", 63)},
		{long, "x322a0e50944b43e5"},
		{"MF0;leaf-01:MQM8700/U1", "xf3d351e3c51a719e"},
		{"-leading-dash", "xb5e5d8562e51826d"},
	}
	for _, tc := range tests {
		got := labelValue(tc.in)
		if got != tc.want {
			t.Errorf("labelValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !isLabelValue(got) {
			t.Errorf("labelValue(%q) = %q is not a valid label value", tc.in, got)
		}
	}
}
