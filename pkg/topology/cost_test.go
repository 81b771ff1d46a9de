package topology

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

const gib = 1 << 30

// h100Cluster is four HGX H100 nodes: a1, a2 under leaf l1 and b1 under leaf
// l2, both leaves under spine s1; c1 in another block.
func h100Cluster(t testing.TB) (*Tree, *NodeTopology) {
	t.Helper()
	tree := mustTree(t, []NodeLabels{
		{Name: "a1", Labels: labels("", "l1", "s1", "b1")},
		{Name: "a2", Labels: labels("", "l1", "s1", "b1")},
		{Name: "b1", Labels: labels("", "l2", "s1", "b1")},
		{Name: "c1", Labels: labels("", "l9", "s9", "b9")},
	})
	return tree, mustNode(t, "hgx-h100")
}

func TestEstimateAllReduceH100(t *testing.T) {
	tree, node := h100Cluster(t)
	full := node.AllGPUs()
	spine2to1 := Fabric{Oversubscription: map[string]float64{"spine": 2}}
	tests := []struct {
		name    string
		members []Member
		fabric  Fabric
		want    Estimate
	}{
		{
			// One NVSwitch node, n = 8, B = 450 GB/s (NV18), α = 1 µs:
			//   L = 2·7·1 µs                     =     14 µs
			//   2·7/8 · 2^30 B / 450e9 B/s       = 4,175,662.65 ns
			//   t                                = 4,189,663 ns (rounded)
			name:    "8 GPUs on one node",
			members: []Member{{Node: node, GPUs: full, Path: tree.Path("a1")}},
			want: Estimate{
				Time: 4_189_663 * time.Nanosecond, Latency: 14 * time.Microsecond,
				BottleneckGBps: 450, GPUs: 8, Nodes: 1, Level: 0, LevelName: "host",
			},
		},
		{
			// Two nodes under one non-blocking leaf, n = 16:
			//   B = min(450 NVSwitch, 400 Gb/s / 8 = 50 GB/s per GPU ÷ 1) = 50
			//   α = 5 µs (network, first tier), L = 2·15·5 µs = 150 µs
			//   2·15/16 · 2^30 / 50e9            = 40,265,318.4 ns
			//   t                                = 40,415,318 ns
			name: "16 GPUs on two nodes of one leaf",
			members: []Member{
				{Node: node, GPUs: full, Path: tree.Path("a1")},
				{Node: node, GPUs: full, Path: tree.Path("a2")},
			},
			fabric: spine2to1,
			want: Estimate{
				Time: 40_415_318 * time.Nanosecond, Latency: 150 * time.Microsecond,
				BottleneckGBps: 50, GPUs: 16, Nodes: 2, Level: 2, LevelName: "leaf",
			},
		},
		{
			// Two nodes on different leaves of a 2:1 oversubscribed spine:
			//   B = min(450, 50 ÷ 2) = 25 GB/s
			//   α = 5 µs + 1 µs (second tier) = 6 µs, L = 2·15·6 µs = 180 µs
			//   2·15/16 · 2^30 / 25e9            = 80,530,636.8 ns
			//   t                                = 80,710,637 ns
			name: "16 GPUs across a 2:1 spine",
			members: []Member{
				{Node: node, GPUs: full, Path: tree.Path("a1")},
				{Node: node, GPUs: full, Path: tree.Path("b1")},
			},
			fabric: spine2to1,
			want: Estimate{
				Time: 80_710_637 * time.Nanosecond, Latency: 180 * time.Microsecond,
				BottleneckGBps: 25, GPUs: 16, Nodes: 2, Level: 3, LevelName: "spine",
			},
		},
		{
			// Across blocks with no oversubscription configured: B = 50,
			// α = 5 + 3·1 µs (tier 4) = 8 µs, L = 30·8 µs = 240 µs.
			//   t = 240,000 + 40,265,318.4 = 40,505,318 ns
			name: "16 GPUs across blocks, non-blocking",
			members: []Member{
				{Node: node, GPUs: full, Path: tree.Path("a1")},
				{Node: node, GPUs: full, Path: tree.Path("c1")},
			},
			want: Estimate{
				Time: 40_505_318 * time.Nanosecond, Latency: 240 * time.Microsecond,
				BottleneckGBps: 50, GPUs: 16, Nodes: 2, Level: 5, LevelName: "cluster",
			},
		},
		{
			// Half a node each on two nodes: the NVSwitch bottleneck and NIC
			// share are unchanged, n = 8, L = 2·7·5 µs = 70 µs,
			//   2·7/8 · 2^30 / 50e9 = 37,580,963.84 ns, t = 37,650,964 ns.
			name: "8 GPUs as 4+4 on one leaf",
			members: []Member{
				{Node: node, GPUs: NewGPUSet(0, 1, 2, 3), Path: tree.Path("a1")},
				{Node: node, GPUs: NewGPUSet(4, 5, 6, 7), Path: tree.Path("a2")},
			},
			want: Estimate{
				Time: 37_650_964 * time.Nanosecond, Latency: 70 * time.Microsecond,
				BottleneckGBps: 50, GPUs: 8, Nodes: 2, Level: 2, LevelName: "leaf",
			},
		},
		{
			name:    "one GPU communicates with no one",
			members: []Member{{Node: node, GPUs: NewGPUSet(3)}},
			want:    Estimate{GPUs: 1, Nodes: 1, LevelName: "host"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EstimateAllReduce(tt.members, gib, tt.fabric)
			if err != nil {
				t.Fatalf("EstimateAllReduce: %v", err)
			}
			if d := diff(tt.want, got); d != "" {
				t.Errorf("EstimateAllReduce (-want,+got):\n%s", d)
			}
		})
	}
}

func TestEfficiencyH100(t *testing.T) {
	tree, node := h100Cluster(t)
	levels := lockstep.DefaultLevels()
	fabric := Fabric{Oversubscription: map[string]float64{"spine": 2}}
	best, err := BestAllReduce(mustProfile(t, "hgx-h100"), 16, gib, levels, fabric)
	if err != nil {
		t.Fatal(err)
	}
	// The best 16-GPU placement is two full nodes under one leaf.
	if best.Time != 40_415_318*time.Nanosecond || best.LevelName != "leaf" || best.Nodes != 2 {
		t.Fatalf("BestAllReduce = %+v, want two nodes of one leaf at 40,415,318 ns", best)
	}
	spread, err := EstimateAllReduce([]Member{
		{Node: node, GPUs: node.AllGPUs(), Path: tree.Path("a1")},
		{Node: node, GPUs: node.AllGPUs(), Path: tree.Path("b1")},
	}, gib, fabric)
	if err != nil {
		t.Fatal(err)
	}
	// 40,415,318 / 80,710,637 = 0.50074...
	if got, want := Efficiency(best, spread), 40_415_318.0/80_710_637.0; math.Abs(got-want) > 1e-12 {
		t.Errorf("Efficiency = %v, want %v", got, want)
	}
	if got := Efficiency(best, best); got != 1 {
		t.Errorf("Efficiency(best, best) = %v, want 1", got)
	}
	// An actual placement faster than the modelled best still reads 1.
	if got := Efficiency(spread, best); got != 1 {
		t.Errorf("Efficiency(slow, fast) = %v, want 1", got)
	}
	if got := Efficiency(Estimate{}, Estimate{}); got != 1 {
		t.Errorf("Efficiency of no communication = %v, want 1", got)
	}
}

func TestEstimateAllReduceGB200(t *testing.T) {
	clique := func(id uint32) *NodeTopology {
		n := mustNode(t, "gb200-nvl72")
		n.NVLinkDomain.ClusterUUID = "rack"
		n.NVLinkDomain.CliqueID = id
		return n
	}
	tree := mustTree(t, []NodeLabels{
		{Name: "t1", Labels: labels("rack.1", "l1", "s1", "b1")},
		{Name: "t2", Labels: labels("rack.1", "l1", "s1", "b1")},
		{Name: "t3", Labels: labels("rack.2", "l1", "s1", "b1")},
	})
	tests := []struct {
		name    string
		members []Member
		want    Estimate
	}{
		{
			// Two trays of one clique talk over NVLink: B = 900 GB/s,
			// α = 1 µs, n = 8, L = 14 µs,
			//   2·7/8 · 2^30 / 900e9 = 2,087,831.32 ns, t = 2,101,831 ns.
			name: "one clique",
			members: []Member{
				{Node: clique(1), GPUs: AllGPUs(4), Path: tree.Path("t1")},
				{Node: clique(1), GPUs: AllGPUs(4), Path: tree.Path("t2")},
			},
			want: Estimate{
				Time: 2_101_831 * time.Nanosecond, Latency: 14 * time.Microsecond,
				BottleneckGBps: 900, GPUs: 8, Nodes: 2, Level: 1, LevelName: "clique",
			},
		},
		{
			// Different cliques fall back to the NICs: 400 Gb/s per GPU =
			// 50 GB/s, α = 5 µs, L = 70 µs,
			//   2·7/8 · 2^30 / 50e9 = 37,580,963.84 ns, t = 37,650,964 ns.
			name: "two cliques on one leaf",
			members: []Member{
				{Node: clique(1), GPUs: AllGPUs(4), Path: tree.Path("t1")},
				{Node: clique(2), GPUs: AllGPUs(4), Path: tree.Path("t3")},
			},
			want: Estimate{
				Time: 37_650_964 * time.Nanosecond, Latency: 70 * time.Microsecond,
				BottleneckGBps: 50, GPUs: 8, Nodes: 2, Level: 2, LevelName: "leaf",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EstimateAllReduce(tt.members, gib, Fabric{})
			if err != nil {
				t.Fatalf("EstimateAllReduce: %v", err)
			}
			if d := diff(tt.want, got); d != "" {
				t.Errorf("EstimateAllReduce (-want,+got):\n%s", d)
			}
		})
	}
}

func TestBestAllReduce(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		gpus    int
		levels  []Level
		want    Estimate
	}{
		{
			// 72 GPUs fill one NVL72 clique: NVLink all the way, B = 900,
			// n = 72, L = 2·71·1 µs = 142 µs,
			//   2·71/72 · 2^30 / 900e9 = 2,352,952.76 ns, t = 2,494,953 ns.
			name: "gb200 whole rack", profile: "gb200-nvl72", gpus: 72, levels: lockstep.DefaultLevels(),
			want: Estimate{
				Time: 2_494_953 * time.Nanosecond, Latency: 142 * time.Microsecond,
				BottleneckGBps: 900, GPUs: 72, Nodes: 18, Level: 1, LevelName: "clique",
			},
		},
		{
			// 76 GPUs need a 19th tray, outside the clique: NICs at 50 GB/s
			// under one leaf, n = 76, L = 2·75·5 µs = 750 µs,
			//   2·75/76 · 2^30 / 50e9 = 42,384,545.68 ns, t = 43,134,546 ns.
			name: "gb200 beyond one rack", profile: "gb200-nvl72", gpus: 76, levels: lockstep.DefaultLevels(),
			want: Estimate{
				Time: 43_134_546 * time.Nanosecond, Latency: 750 * time.Microsecond,
				BottleneckGBps: 50, GPUs: 76, Nodes: 19, Level: 2, LevelName: "leaf",
			},
		},
		{
			// A full L40S node crosses the sockets: B = 14 GB/s (SYS), PCIe
			// α = 2 µs, L = 2·7·2 µs = 28 µs,
			//   2·7/8 · 2^30 / 14e9 = 134,217,728 ns, t = 134,245,728 ns.
			name: "l40s packs a full node", profile: "l40s-pcie", gpus: 8, levels: lockstep.DefaultLevels(),
			want: Estimate{
				Time: 134_245_728 * time.Nanosecond, Latency: 28 * time.Microsecond,
				BottleneckGBps: 14, GPUs: 8, Nodes: 1, Level: 0, LevelName: "host",
			},
		},
		{
			// 12 H100s: a full node and the best 4-GPU set (one socket) of a
			// second. B = 50 GB/s (NIC), L = 2·11·5 µs = 110 µs,
			//   2·11/12 · 2^30 / 50e9 = 39,370,533.55 ns, t = 39,480,534 ns.
			name: "hgx 12 GPUs", profile: "hgx-h100", gpus: 12, levels: lockstep.DefaultLevels(),
			want: Estimate{
				Time: 39_480_534 * time.Nanosecond, Latency: 110 * time.Microsecond,
				BottleneckGBps: 50, GPUs: 12, Nodes: 2, Level: 2, LevelName: "leaf",
			},
		},
		{
			// Two bridged A100s: NV12 at 300 GB/s, n = 2, L = 2 µs,
			//   2·1/2 · 2^30 / 300e9 = 3,579,139.41 ns, t = 3,581,139 ns.
			name: "a100 pair", profile: "a100-pcie-nvlink", gpus: 2, levels: lockstep.DefaultLevels(),
			want: Estimate{
				Time: 3_581_139 * time.Nanosecond, Latency: 2 * time.Microsecond,
				BottleneckGBps: 300, GPUs: 2, Nodes: 1, Level: 0, LevelName: "host",
			},
		},
		{
			// Without configured levels the nodes meet at the cluster root,
			// which counts as the first network tier.
			name: "no levels", profile: "hgx-h100", gpus: 16, levels: nil,
			want: Estimate{
				Time: 40_415_318 * time.Nanosecond, Latency: 150 * time.Microsecond,
				BottleneckGBps: 50, GPUs: 16, Nodes: 2, Level: 1, LevelName: "cluster",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BestAllReduce(mustProfile(t, tt.profile), tt.gpus, gib, tt.levels, Fabric{})
			if err != nil {
				t.Fatalf("BestAllReduce: %v", err)
			}
			if d := diff(tt.want, got); d != "" {
				t.Errorf("BestAllReduce (-want,+got):\n%s", d)
			}
		})
	}
}

func TestEstimateAllReduceErrors(t *testing.T) {
	tree, node := h100Cluster(t)
	other := mustTree(t, []NodeLabels{{Name: "x"}})
	noNIC := mustNode(t, "hgx-h100")
	noNIC.NICs = nil
	tests := []struct {
		name    string
		members []Member
		bytes   int64
		wantErr string
	}{
		{name: "empty", wantErr: "no members"},
		{name: "nil node", members: []Member{{GPUs: 1}}, wantErr: "no node topology"},
		{name: "empty set", members: []Member{{Node: node}}, wantErr: "empty or not within"},
		{name: "GPU beyond node", members: []Member{{Node: node, GPUs: NewGPUSet(8)}}, wantErr: "empty or not within"},
		{name: "negative size", members: []Member{{Node: node, GPUs: 3}}, bytes: -1, wantErr: "message size"},
		{
			name:    "missing path",
			members: []Member{{Node: node, GPUs: 1}, {Node: node, GPUs: 1, Path: tree.Path("a2")}},
			wantErr: "members[0] has no domain path",
		},
		{
			name:    "paths of two trees",
			members: []Member{{Node: node, GPUs: 1, Path: tree.Path("a1")}, {Node: node, GPUs: 1, Path: other.Path("x")}},
			wantErr: "members[1] has no domain path from the same tree",
		},
		{
			name:    "same node twice",
			members: []Member{{Node: node, GPUs: 1, Path: tree.Path("a1")}, {Node: node, GPUs: 2, Path: tree.Path("a1")}},
			wantErr: `same node "a1"`,
		},
		{
			name: "same node twice, not first",
			members: []Member{
				{Node: node, GPUs: 1, Path: tree.Path("a1")},
				{Node: node, GPUs: 1, Path: tree.Path("a2")},
				{Node: node, GPUs: 2, Path: tree.Path("a2")},
			},
			wantErr: `members[1] and members[2] are the same node "a2"`,
		},
		{
			name:    "no NIC",
			members: []Member{{Node: node, GPUs: 1, Path: tree.Path("a1")}, {Node: noNIC, GPUs: 1, Path: tree.Path("a2")}},
			wantErr: "members[1]: some GPUs have no NIC",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EstimateAllReduce(tt.members, tt.bytes, Fabric{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("EstimateAllReduce error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	if _, err := BestAllReduce(mustProfile(t, "hgx-h100"), 0, gib, nil, Fabric{}); err == nil {
		t.Error("BestAllReduce of 0 GPUs succeeded")
	}
	if _, err := BestAllReduce(Profile{Name: "nope", GPUCount: 8}, 8, gib, nil, Fabric{}); err == nil {
		t.Error("BestAllReduce of an unknown profile succeeded")
	}
}

func mustProfile(t testing.TB, name string) Profile {
	t.Helper()
	p, ok := LookupProfile(name)
	if !ok {
		t.Fatalf("no profile %q", name)
	}
	return p
}

func BenchmarkCost(b *testing.B) {
	tree, node := h100Cluster(b)
	members := []Member{
		{Node: node, GPUs: node.AllGPUs(), Path: tree.Path("a1")},
		{Node: node, GPUs: node.AllGPUs(), Path: tree.Path("b1")},
	}
	fabric := Fabric{Oversubscription: map[string]float64{"spine": 2}}
	b.Run("estimate/nodes=2", func(b *testing.B) {
		for b.Loop() {
			if _, err := EstimateAllReduce(members, gib, fabric); err != nil {
				b.Fatal(err)
			}
		}
	})
	p := mustProfile(b, "hgx-h100")
	b.Run("best/gpus=64", func(b *testing.B) {
		for b.Loop() {
			if _, err := BestAllReduce(p, 64, gib, lockstep.DefaultLevels(), fabric); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestEfficiencyClampsSpreadPCIe(t *testing.T) {
	// The model rates 8 L40S as 4+4 on two nodes (NODE, 20 GB/s) above one
	// full node (SYS, 14 GB/s): t = 70 µs + 93,952,409.6 ns = 94,022,410 ns
	// against the packed reference's 134,245,728 ns. Efficiency caps at 1.
	node := mustNode(t, "l40s-pcie")
	tree := mustTree(t, []NodeLabels{
		{Name: "a", Labels: labels("", "l1", "s1", "b1")},
		{Name: "b", Labels: labels("", "l1", "s1", "b1")},
	})
	spread, err := EstimateAllReduce([]Member{
		{Node: node, GPUs: NewGPUSet(0, 1, 2, 3), Path: tree.Path("a")},
		{Node: node, GPUs: NewGPUSet(4, 5, 6, 7), Path: tree.Path("b")},
	}, gib, Fabric{})
	if err != nil {
		t.Fatal(err)
	}
	if spread.Time != 94_022_410*time.Nanosecond {
		t.Errorf("spread Time = %v, want 94.02241ms", spread.Time)
	}
	best, err := BestAllReduce(mustProfile(t, "l40s-pcie"), 8, gib, lockstep.DefaultLevels(), Fabric{})
	if err != nil {
		t.Fatal(err)
	}
	if got := Efficiency(best, spread); got != 1 {
		t.Errorf("Efficiency = %v, want 1", got)
	}
}
