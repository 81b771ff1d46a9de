package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

const h100 = "hgx-h100"

// busy returns node count's GPU set with the given GPUs taken.
func busy(count int, taken ...int) topology.GPUSet {
	return topology.AllGPUs(count) &^ topology.NewGPUSet(taken...)
}

func TestPlaceBestFitLeaf(t *testing.T) {
	// l-empty: 8 free nodes. l-half: 4 free nodes of 8. l-three: 3 free
	// nodes. Every node is an 8-GPU HGX H100; members take a whole node.
	c := newCluster(t)
	c.addN("empty", 8, h100, at{leaf: "l-empty", spine: "s1"})
	c.addN("half", 4, h100, at{leaf: "l-half", spine: "s1"})
	for i := range 4 {
		c.add("half-busy-"+string(rune('a'+i)), h100, 0, at{leaf: "l-half", spine: "s1"})
	}
	c.addN("three", 3, h100, at{leaf: "l-three", spine: "s1"})
	s := c.snapshot()

	tests := []struct {
		name      string
		members   int
		wantNodes []string
		wantLevel string
		wantID    string
	}{
		{
			// Fits l-empty and l-half: the half-full leaf, so that l-empty
			// stays whole for a bigger gang.
			name: "half-full leaf over empty one", members: 4,
			wantNodes: []string{"half-0", "half-1", "half-2", "half-3"},
			wantLevel: "leaf", wantID: "block=()/spine=s1/leaf=l-half",
		},
		{
			// Fits all three leaves: the one left with no free GPU.
			name: "exact fit", members: 3,
			wantNodes: []string{"three-0", "three-1", "three-2"},
			wantLevel: "leaf", wantID: "block=()/spine=s1/leaf=l-three",
		},
		{
			// Only l-empty fits 5.
			name: "only fit", members: 5,
			wantNodes: []string{"empty-0", "empty-1", "empty-2", "empty-3", "empty-4"},
			wantLevel: "leaf", wantID: "block=()/spine=s1/leaf=l-empty",
		},
		{
			// No leaf holds 9: fill l-empty whole, then the best fit for the
			// last member (l-three, left with 16 free, over l-half's 24).
			name: "spill fills one leaf first", members: 9,
			wantNodes: []string{"empty-0", "empty-1", "empty-2", "empty-3", "empty-4", "empty-5", "empty-6", "empty-7", "three-0"},
			wantLevel: "spine", wantID: "block=()/spine=s1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := mustPlace(t, s, Gang{Members: tt.members, GPUsPerMember: 8})
			if d := diff(tt.wantNodes, nodesOf(plan)); d != "" {
				t.Errorf("nodes (-want,+got):\n%s", d)
			}
			if d := diff([]string{tt.wantLevel, tt.wantID}, []string{plan.LevelName, plan.Domain.ID}); d != "" {
				t.Errorf("level, domain (-want,+got):\n%s", d)
			}
			for _, m := range plan.Members {
				if m.GPUs != topology.AllGPUs(8) {
					t.Errorf("member on %s has GPUs %v, want all 8", m.Node, m.GPUs)
				}
			}
			if plan.Efficiency <= 0 || plan.Efficiency > 1 {
				t.Errorf("efficiency = %v, want (0, 1]", plan.Efficiency)
			}
		})
	}
}

func TestPlacePacksFewestNodes(t *testing.T) {
	// One leaf of H100 nodes with 2, 8, 4 and 6 free GPUs: room for 1, 4,
	// 2 and 3 members of 2 GPUs.
	c := newCluster(t)
	c.add("a", h100, topology.NewGPUSet(6, 7), at{leaf: "l1"})
	c.add("b", h100, topology.AllGPUs(8), at{leaf: "l1"})
	c.add("c", h100, topology.NewGPUSet(0, 1, 2, 3), at{leaf: "l1"})
	c.add("d", h100, busy(8, 0, 1), at{leaf: "l1"})
	s := c.snapshot()

	tests := []struct {
		name    string
		members int
		want    []Assignment
	}{
		{
			// d fits 3 exactly; b would keep 2 GPUs free.
			name: "one node, exact fit", members: 3,
			want: []Assignment{assign("d", 2, 3), assign("d", 4, 5), assign("d", 6, 7)},
		},
		{
			// b takes 4, the remaining 2 go to c, an exact fit, not d.
			name: "roomiest then exact fit", members: 6,
			want: []Assignment{
				assign("b", 0, 1), assign("b", 2, 3), assign("b", 4, 5), assign("b", 6, 7),
				assign("c", 0, 1), assign("c", 2, 3),
			},
		},
		{
			// b takes 4, the last member goes to a, left with nothing.
			name: "remainder to smallest fit", members: 5,
			want: []Assignment{
				assign("b", 0, 1), assign("b", 2, 3), assign("b", 4, 5), assign("b", 6, 7),
				assign("a", 6, 7),
			},
		},
		{
			name: "every free GPU", members: 10,
			want: []Assignment{
				assign("b", 0, 1), assign("b", 2, 3), assign("b", 4, 5), assign("b", 6, 7),
				assign("d", 2, 3), assign("d", 4, 5), assign("d", 6, 7),
				assign("c", 0, 1), assign("c", 2, 3),
				assign("a", 6, 7),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := mustPlace(t, s, Gang{Members: tt.members, GPUsPerMember: 2})
			if d := diff(tt.want, plan.Members); d != "" {
				t.Errorf("members (-want,+got):\n%s", d)
			}
		})
	}
}

func TestPlaceMemberSizes(t *testing.T) {
	// One H100 node: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1, all on NVSwitch,
	// so the best sets stay within a socket where they can.
	tests := []struct {
		name    string
		free    topology.GPUSet
		members int
		gpus    int
		want    []Assignment
	}{
		{name: "1 GPU", free: busy(8, 0), members: 1, gpus: 1, want: []Assignment{assign("n", 1)}},
		{
			// GPU 3 is alone on NUMA 0 once 0-2 are busy; pairs come from NUMA 1.
			name: "2 GPUs", free: busy(8, 0, 1, 2), members: 2, gpus: 2,
			want: []Assignment{assign("n", 4, 5), assign("n", 6, 7)},
		},
		{
			name: "4 GPUs on one socket", free: busy(8, 0), members: 1, gpus: 4,
			want: []Assignment{assign("n", 4, 5, 6, 7)},
		},
		{
			name: "two 4-GPU members", free: topology.AllGPUs(8), members: 2, gpus: 4,
			want: []Assignment{assign("n", 0, 1, 2, 3), assign("n", 4, 5, 6, 7)},
		},
		{name: "8 GPUs", free: topology.AllGPUs(8), members: 1, gpus: 8, want: []Assignment{assign("n", 0, 1, 2, 3, 4, 5, 6, 7)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.add("n", h100, tt.free, at{leaf: "l1"})
			plan := mustPlace(t, c.snapshot(), Gang{Members: tt.members, GPUsPerMember: tt.gpus})
			if d := diff(tt.want, plan.Members); d != "" {
				t.Errorf("members (-want,+got):\n%s", d)
			}
			if plan.LevelName != lockstep.LevelHost {
				t.Errorf("level = %q, want host", plan.LevelName)
			}
		})
	}
}

// nvlinked reports whether every pair of set is joined by NVLink on node.
func nvlinked(node *topology.NodeTopology, set topology.GPUSet) bool {
	idx := set.Indices()
	for a, i := range idx {
		for _, j := range idx[a+1:] {
			if !node.Link(i, j).Class.IsNVLink() {
				return false
			}
		}
	}
	return true
}

func TestPlaceNVLinkPairs(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		free    topology.GPUSet
		members int
		want    []Assignment
	}{
		{
			// The lowest pair, 0-5, is PCIe across sockets; 5-6 has two NVLinks.
			name: "DGX-1 pair", profile: "dgx1-v100", free: topology.NewGPUSet(0, 5, 6), members: 1,
			want: []Assignment{assign("n", 5, 6)},
		},
		{
			// Four pairs on a free DGX-1, each over a double NVLink.
			name: "DGX-1 four pairs", profile: "dgx1-v100", free: topology.AllGPUs(8), members: 4,
			want: []Assignment{assign("n", 0, 3), assign("n", 1, 2), assign("n", 4, 7), assign("n", 5, 6)},
		},
		{
			// A100 PCIe bridges join 0-1, 2-3, …; 1 and 2 are busy.
			name: "A100 bridge pairs", profile: "a100-pcie-nvlink", free: busy(8, 1, 2), members: 2,
			want: []Assignment{assign("n", 4, 5), assign("n", 6, 7)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			node := c.add("n", tt.profile, tt.free, at{leaf: "l1"})
			plan := mustPlace(t, c.snapshot(), Gang{Members: tt.members, GPUsPerMember: 2})
			if d := diff(tt.want, plan.Members); d != "" {
				t.Errorf("members (-want,+got):\n%s", d)
			}
			for _, m := range plan.Members {
				if !nvlinked(node.Topology, m.GPUs) {
					t.Errorf("member GPUs %v are not joined by NVLink", m.GPUs)
				}
			}
		})
	}
}

func TestPlaceHeterogeneous(t *testing.T) {
	t.Run("members get NVLink sets on every profile", func(t *testing.T) {
		// h has 4 free H100s, a a free 8x A100 PCIe with bridge pairs, l a
		// busy L40S node: 6 members of 2 fill a, then h.
		c := newCluster(t)
		h := c.add("h", h100, topology.NewGPUSet(0, 1, 2, 3), at{leaf: "l1"})
		a := c.add("a", "a100-pcie-nvlink", topology.AllGPUs(8), at{leaf: "l1"})
		c.add("l", "l40s-pcie", topology.NewGPUSet(0), at{leaf: "l1"})
		plan := mustPlace(t, c.snapshot(), Gang{Members: 6, GPUsPerMember: 2})
		want := []Assignment{
			assign("a", 0, 1), assign("a", 2, 3), assign("a", 4, 5), assign("a", 6, 7),
			assign("h", 0, 1), assign("h", 2, 3),
		}
		if d := diff(want, plan.Members); d != "" {
			t.Errorf("members (-want,+got):\n%s", d)
		}
		topo := map[string]*topology.NodeTopology{"h": h.Topology, "a": a.Topology}
		for _, m := range plan.Members {
			if !nvlinked(topo[m.Node], m.GPUs) {
				t.Errorf("member on %s has GPUs %v not joined by NVLink", m.Node, m.GPUs)
			}
		}
		// 8 of the 12 GPUs are A100s: the reference is the A100 profile.
		if plan.Efficiency <= 0 || plan.Efficiency > 1 {
			t.Errorf("efficiency = %v, want (0, 1]", plan.Efficiency)
		}
	})
	t.Run("equal fit goes to the faster leaf", func(t *testing.T) {
		// Both leaves fit 2 members exactly; the H100 leaf (NVSwitch, 400G
		// per GPU) models faster than the L40S one, despite its later ID.
		c := newCluster(t)
		c.addN("l40s", 2, "l40s-pcie", at{leaf: "a-l40s"})
		c.addN("h100", 2, h100, at{leaf: "b-h100"})
		plan := mustPlace(t, c.snapshot(), Gang{Members: 2, GPUsPerMember: 8})
		if d := diff([]string{"h100-0", "h100-1"}, nodesOf(plan)); d != "" {
			t.Errorf("nodes (-want,+got):\n%s", d)
		}
	})
}

func TestPlaceGB200Clique(t *testing.T) {
	// Leaf l1 holds trays of cliques 1 (3 free) and 2 (1 free), exactly 4;
	// leaf l2 holds 6 free trays of clique 3.
	c := newCluster(t)
	c.addN("c1", 3, "gb200-nvl72", at{clique: "1", leaf: "l1"})
	c.addN("c2", 1, "gb200-nvl72", at{clique: "2", leaf: "l1"})
	c.addN("c3", 6, "gb200-nvl72", at{clique: "3", leaf: "l2"})
	s := c.snapshot()

	tests := []struct {
		name      string
		members   int
		wantNodes []string
		wantLevel string
		wantGBps  float64
	}{
		{
			// l1 fits 4 exactly, but only clique 3 fits them over NVLink.
			name: "clique over best-fit leaf", members: 4,
			wantNodes: []string{"c3-0", "c3-1", "c3-2", "c3-3"}, wantLevel: "clique", wantGBps: 900,
		},
		{
			name: "best-fit clique", members: 2,
			wantNodes: []string{"c1-0", "c1-1"}, wantLevel: "clique", wantGBps: 900,
		},
		{
			// 7 fit in no clique and no leaf: l2 is filled, and the last
			// member goes to the best fit of l1, clique 2's only tray. The
			// ring crosses cliques, so it runs over the NICs.
			name: "beyond a leaf", members: 7,
			wantNodes: []string{"c3-0", "c3-1", "c3-2", "c3-3", "c3-4", "c3-5", "c2-0"}, wantLevel: "cluster", wantGBps: 50,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := mustPlace(t, s, Gang{Members: tt.members, GPUsPerMember: 4})
			got := []any{nodesOf(plan), plan.LevelName, plan.Estimate.BottleneckGBps}
			if d := diff([]any{tt.wantNodes, tt.wantLevel, tt.wantGBps}, got); d != "" {
				t.Errorf("nodes, level, bandwidth (-want,+got):\n%s", d)
			}
		})
	}
}

func TestPlaceConstraint(t *testing.T) {
	// Two leaves of one spine with 2 free H100 nodes each, and a third
	// leaf under another spine with 1. Leaf l1 also has 3 busy nodes, so
	// it could hold 5 members once they free up: a Preferred gang of up to
	// 5 waits for a leaf.
	c := newCluster(t)
	c.addN("a", 2, h100, at{leaf: "l1", spine: "s1"})
	for i := range 3 {
		c.add(fmt.Sprintf("a-busy-%d", i), h100, 0, at{leaf: "l1", spine: "s1"})
	}
	c.addN("b", 2, h100, at{leaf: "l2", spine: "s1"})
	c.addN("z", 1, h100, at{leaf: "l3", spine: "s2"})
	s := c.snapshot()

	tests := []struct {
		name      string
		gang      Gang
		wantLevel string
		wantErr   *Unschedulable
		// wantDrain is the DisplayID of wantErr's Drain, "" for none.
		wantDrain string
	}{
		{
			name:      "Required leaf met",
			gang:      Gang{Members: 2, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Required},
			wantLevel: "leaf",
		},
		{
			// Its last drain stalled: it waits without one.
			name: "Required leaf not met, no drain",
			gang: Gang{Members: 3, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Required, Widen: 1, NoDrain: true},
			wantErr: &Unschedulable{
				Reason: "gang of 3 x 8 GPUs does not fit in any leaf (fabric.topograph.run/tier-0): " +
					"the best leaf has room for 2 members (16 of 24 GPUs free); Required constraint; it would fit in one spine",
				WiderLevel: "spine",
			},
		},
		{
			name: "Required host not met",
			gang: Gang{Members: 2, GPUsPerMember: 8, Level: "host", Mode: lockstep.Required},
			wantErr: &Unschedulable{
				Reason: "gang of 2 x 8 GPUs does not fit on any single node: " +
					"the best node has room for 1 member (8 of 16 GPUs free); Required constraint; it would fit in one leaf",
				WiderLevel: "leaf",
			},
		},
		{
			name: "Preferred leaf, not widened yet",
			gang: Gang{Members: 3, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred},
			wantErr: &Unschedulable{
				Reason: "gang of 3 x 8 GPUs does not fit in any leaf (fabric.topograph.run/tier-0): " +
					"the best leaf has room for 2 members (16 of 24 GPUs free); Preferred constraint on leaf; it would fit in one spine" +
					"; draining leaf spine=s1/leaf=l1 for it: no other pod takes GPUs there while it waits",
				WiderLevel: "spine",
			},
			wantDrain: "spine=s1/leaf=l1",
		},
		{
			name:      "Preferred leaf widened to spine",
			gang:      Gang{Members: 3, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred, Widen: 1},
			wantLevel: "spine",
		},
		{
			name:      "Preferred leaf widened past the cluster",
			gang:      Gang{Members: 3, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred, Widen: 1 << 62},
			wantLevel: "spine",
		},
		{
			name: "Preferred widened, still too narrow",
			gang: Gang{Members: 5, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred, Widen: 1},
			wantErr: &Unschedulable{
				Reason: "gang of 5 x 8 GPUs does not fit in any spine (fabric.topograph.run/tier-1): " +
					"the best spine has room for 4 members (32 of 40 GPUs free); Preferred constraint on leaf, widened so far to spine; it would fit in the cluster" +
					"; draining leaf spine=s1/leaf=l1 for it: no other pod takes GPUs there while it waits",
				WiderLevel: "cluster",
			},
			// It widened and still does not fit: it drains its tightest
			// domain again, so smaller pods do not take every GPU that
			// frees.
			wantDrain: "spine=s1/leaf=l1",
		},
		{
			name:    "not enough GPUs",
			gang:    Gang{Members: 6, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Required},
			wantErr: &Unschedulable{Reason: "gang of 6 x 8 GPUs needs 48 GPUs, 40 free in the cluster"},
		},
		{
			name:    "member larger than any node",
			gang:    Gang{Members: 1, GPUsPerMember: 16},
			wantErr: &Unschedulable{Reason: "gang of 1 x 16 GPUs does not fit in the cluster: it has room for 0 members (its 40 free GPUs hold only 0 sets of 16 on one node)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Place(s, tt.gang, Options{})
			if tt.wantErr != nil {
				var u *Unschedulable
				if !errors.As(err, &u) {
					t.Fatalf("Place = %v, %v; want *Unschedulable", plan, err)
				}
				if d := diff(tt.wantErr, withoutDrain(u)); d != "" {
					t.Errorf("Unschedulable (-want,+got):\n%s", d)
				}
				if got := drainID(u); got != tt.wantDrain {
					t.Errorf("Unschedulable.Drain = %q, want %q", got, tt.wantDrain)
				}
				return
			}
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			if plan.LevelName != tt.wantLevel {
				t.Errorf("level = %q, want %q", plan.LevelName, tt.wantLevel)
			}
		})
	}
}

func TestPlaceHeadroom(t *testing.T) {
	// Three free H100 nodes: a has CPU for 1 member, b pod slots for 2, c
	// memory for 1; x is a CPU-only node.
	c := newCluster(t)
	c.add("a", h100, topology.AllGPUs(8), at{leaf: "l1"}).FreeMilliCPU = 1_500
	c.add("b", h100, topology.AllGPUs(8), at{leaf: "l1"}).FreePods = 2
	c.add("c", h100, topology.AllGPUs(8), at{leaf: "l1"}).FreeMemory = 3 << 30
	c.add("x", "", 0, at{leaf: "l1"})
	s := c.snapshot()
	gang := Gang{GPUsPerMember: 2, MilliCPUPerMember: 1_000, MemoryPerMember: 2 << 30}

	gang.Members = 4
	plan := mustPlace(t, s, gang)
	want := []Assignment{assign("b", 0, 1), assign("b", 2, 3), assign("a", 0, 1), assign("c", 0, 1)}
	if d := diff(want, plan.Members); d != "" {
		t.Errorf("members (-want,+got):\n%s", d)
	}

	gang.Members = 5
	_, err := Place(s, gang, Options{})
	wantErr := &Unschedulable{Reason: "gang of 5 x 2 GPUs does not fit in the cluster: it has room for 4 members " +
		"(free GPUs, CPU, memory and pod slots are on different nodes)"}
	if d := diff(error(wantErr), err); d != "" {
		t.Errorf("Place error (-want,+got):\n%s", d)
	}

	// CPU-only members go where they leave no GPU stranded: node x.
	plan = mustPlace(t, s, Gang{Members: 3, MilliCPUPerMember: 1_000})
	if d := diff([]Assignment{{Node: "x"}, {Node: "x"}, {Node: "x"}}, plan.Members); d != "" {
		t.Errorf("CPU-only members (-want,+got):\n%s", d)
	}
	if plan.Efficiency != 0 || plan.Estimate != (topology.Estimate{}) {
		t.Errorf("CPU-only plan has estimate %+v, efficiency %v; want none", plan.Estimate, plan.Efficiency)
	}
}

func TestPlaceDeterministic(t *testing.T) {
	c := newCluster(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 64 {
		leaf := []string{"l1", "l2", "l3", "l4"}[i%4]
		c.add("n"+string(rune('A'+i%26))+string(rune('a'+i/26)), h100, topology.GPUSet(rng.Uint64()&0xff), at{leaf: leaf, spine: "s1"})
	}
	s := c.snapshot()
	gang := Gang{Members: 12, GPUsPerMember: 2}
	want := mustPlace(t, s, gang)
	for i := range 5 {
		shuffled := *s
		shuffled.Nodes = append([]*Node(nil), s.Nodes...)
		rng.Shuffle(len(shuffled.Nodes), func(a, b int) {
			shuffled.Nodes[a], shuffled.Nodes[b] = shuffled.Nodes[b], shuffled.Nodes[a]
		})
		if d := diff(want, mustPlace(t, &shuffled, gang)); d != "" {
			t.Errorf("run %d with shuffled nodes (-want,+got):\n%s", i, d)
		}
	}
}

func TestPlaceBadInput(t *testing.T) {
	c := newCluster(t)
	c.add("a", h100, topology.AllGPUs(8), at{leaf: "l1"})
	s := c.snapshot()
	stray := *s
	stray.Nodes = append([]*Node{{Name: "stray"}}, s.Nodes...)
	twice := *s
	twice.Nodes = append(twice.Nodes[:1:1], s.Nodes...)
	wrongLevels := *s
	wrongLevels.Levels = lockstep.DefaultLevels()[1:]

	tests := []struct {
		name string
		s    *Snapshot
		gang Gang
		opts Options
	}{
		{name: "nil snapshot", gang: Gang{Members: 1}},
		{name: "no members", s: s, gang: Gang{Members: 0}},
		{name: "negative GPUs", s: s, gang: Gang{Members: 1, GPUsPerMember: -1}},
		{name: "GPUs beyond a node", s: s, gang: Gang{Members: 1, GPUsPerMember: topology.MaxGPUs + 1}},
		{name: "negative CPU", s: s, gang: Gang{Members: 1, MilliCPUPerMember: -1}},
		{name: "unknown level", s: s, gang: Gang{Members: 1, Level: "rack", Mode: lockstep.Required}},
		{name: "negative widen", s: s, gang: Gang{Members: 1, Level: "leaf", Mode: lockstep.Preferred, Widen: -1}},
		{name: "unknown mode", s: s, gang: Gang{Members: 1, Level: "leaf", Mode: "Sometimes"}},
		{name: "negative message", s: s, gang: Gang{Members: 1}, opts: Options{MessageBytes: -1}},
		{name: "node not in tree", s: &stray, gang: Gang{Members: 1}},
		{name: "node twice", s: &twice, gang: Gang{Members: 1}},
		{name: "levels unlike the tree's", s: &wrongLevels, gang: Gang{Members: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Place(tt.s, tt.gang, tt.opts)
			var u *Unschedulable
			if err == nil || errors.As(err, &u) {
				t.Fatalf("Place = %v, %v; want a plain error", plan, err)
			}
		})
	}
}

func TestPlacePreferredSkipsLevelsNoDomainCanHold(t *testing.T) {
	// Two spines of 8 leaves of 8 H100 nodes: 64 GPUs a leaf, 512 a spine,
	// no block labels. In s1 leaf l1 has 1 busy node and the other leaves
	// 2 each (49 free nodes); in s2 every leaf has 4 busy nodes (32 free).
	c := newCluster(t)
	for sp, busyPerLeaf := range map[string][]int{"s1": {1, 2, 2, 2, 2, 2, 2, 2}, "s2": {4, 4, 4, 4, 4, 4, 4, 4}} {
		for l, nbusy := range busyPerLeaf {
			leaf := fmt.Sprintf("%s-l%d", sp, l+1)
			for n := range 8 {
				free := topology.AllGPUs(8)
				if n < nbusy {
					free = 0
				}
				c.add(fmt.Sprintf("%s-%d", leaf, n), h100, free, at{leaf: leaf, spine: sp})
			}
		}
	}
	s := c.snapshot()

	tests := []struct {
		name      string
		gang      Gang
		wantLevel string
		wantID    string
		wantErr   *Unschedulable
		// wantDrain is the DisplayID of wantErr's Drain, "" for none.
		wantDrain string
	}{
		{
			// 256 GPUs fit no leaf even when empty: the widening starts at
			// spine, where s2 fits exactly (best fit over s1).
			name:      "256 GPUs on 64-GPU leaves go to a spine at once",
			gang:      Gang{Members: 32, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred},
			wantLevel: "spine", wantID: "block=()/spine=s2",
		},
		{
			// 640 GPUs fit no spine even when empty either; the block level
			// no node is labelled for groups the whole cluster.
			name:      "wider than any spine goes to the cluster at once",
			gang:      Gang{Members: 80, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred},
			wantLevel: "cluster", wantID: "cluster",
		},
		{
			// 400 GPUs fit an empty spine but no spine now: the gang waits
			// for a spine, and says why it skipped the leaves.
			name: "fits an empty spine, waits for one",
			gang: Gang{Members: 50, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred},
			wantErr: &Unschedulable{
				Reason: "gang of 50 x 8 GPUs does not fit in any spine (fabric.topograph.run/tier-1): " +
					"the best spine has room for 49 members (392 of 400 GPUs free); " +
					"Preferred constraint on leaf, skipped to spine as no leaf could hold it even with every GPU free; " +
					"it would fit in the cluster; draining spine spine=s1 for it: no other pod takes GPUs there while it waits",
				WiderLevel: "cluster",
			},
			wantDrain: "spine=s1",
		},
		{
			// Widen counts from spine, the level skipped to, not from leaf.
			name:      "widen counts from the level skipped to",
			gang:      Gang{Members: 50, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred, Widen: 1},
			wantLevel: "cluster", wantID: "cluster",
		},
		{
			// 64 GPUs fit an empty leaf but no leaf now (7 free nodes at
			// most): waiting may help, so the gang keeps to leaf.
			name: "fits an empty leaf, waits for one",
			gang: Gang{Members: 8, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred},
			wantErr: &Unschedulable{
				Reason: "gang of 8 x 8 GPUs does not fit in any leaf (fabric.topograph.run/tier-0): " +
					"the best leaf has room for 7 members (56 of 64 GPUs free); Preferred constraint on leaf; it would fit in one spine" +
					"; draining leaf spine=s1/leaf=s1-l1 for it: no other pod takes GPUs there while it waits",
				WiderLevel: "spine",
			},
			wantDrain: "spine=s1/leaf=s1-l1",
		},
		{
			name:      "fits an empty leaf, widened once",
			gang:      Gang{Members: 8, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred, Widen: 1},
			wantLevel: "spine", wantID: "block=()/spine=s2",
		},
		{
			// No node holds 16 GPUs; the clique level no node is labelled
			// for stands for each leaf, so the gang lands in one leaf.
			name:      "host preference skips to the clique",
			gang:      Gang{Members: 2, GPUsPerMember: 8, Level: "host", Mode: lockstep.Preferred},
			wantLevel: "leaf", wantID: "block=()/spine=s2/leaf=s2-l1",
		},
		{
			name: "Required never skips",
			gang: Gang{Members: 32, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Required},
			wantErr: &Unschedulable{
				Reason: "gang of 32 x 8 GPUs does not fit in any leaf (fabric.topograph.run/tier-0): " +
					"the best leaf has room for 7 members (56 of 256 GPUs free); Required constraint; it would fit in one spine",
				WiderLevel: "spine",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Place(s, tt.gang, Options{})
			if tt.wantErr != nil {
				var u *Unschedulable
				if !errors.As(err, &u) {
					t.Fatalf("Place = %v, %v; want *Unschedulable", plan, err)
				}
				if d := diff(tt.wantErr, withoutDrain(u)); d != "" {
					t.Errorf("Unschedulable (-want,+got):\n%s", d)
				}
				if got := drainID(u); got != tt.wantDrain {
					t.Errorf("Unschedulable.Drain = %q, want %q", got, tt.wantDrain)
				}
				return
			}
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			if d := diff([]string{tt.wantLevel, tt.wantID}, []string{plan.LevelName, plan.Domain.ID}); d != "" {
				t.Errorf("level, domain (-want,+got):\n%s", d)
			}
			if len(plan.Members) != tt.gang.Members {
				t.Errorf("plan has %d members, want %d", len(plan.Members), tt.gang.Members)
			}
		})
	}
}

func TestPlacePreferredBaseCountsAllGPUs(t *testing.T) {
	// Leaf l1 has three 8-GPU nodes, one of them busy; leaf l2 one free
	// node. A node with topology counts all its GPUs towards what its leaf
	// could hold; one without counts only what it has free.
	tests := []struct {
		name      string
		profile   string
		wantLevel string
	}{
		{name: "with topology, l1 could hold 3 members: wait", profile: h100},
		{name: "without topology, no leaf could hold 3: spread", profile: "", wantLevel: "spine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.add("a", tt.profile, topology.AllGPUs(8), at{leaf: "l1", spine: "s1"})
			c.add("b", tt.profile, topology.AllGPUs(8), at{leaf: "l1", spine: "s1"})
			c.add("c", tt.profile, 0, at{leaf: "l1", spine: "s1"})
			c.add("d", tt.profile, topology.AllGPUs(8), at{leaf: "l2", spine: "s1"})
			plan, err := Place(c.snapshot(), Gang{Members: 3, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Preferred}, Options{})
			var u *Unschedulable
			switch {
			case tt.wantLevel == "" && (!errors.As(err, &u) || u.WiderLevel != "spine"):
				t.Errorf("Place = %v, %v; want *Unschedulable that would fit in a spine", plan, err)
			case tt.wantLevel != "" && (err != nil || plan.LevelName != tt.wantLevel):
				t.Errorf("Place = %v, %v; want a plan at %s", plan, err, tt.wantLevel)
			}
		})
	}
}

func TestPlaceNear(t *testing.T) {
	// Two spines of two leaves each. l-a1 is nearly full (two free nodes, a
	// bound member on a third); l-b1 has room for four. Best fit alone
	// would pick l-a1 for two members; placed earlier members pull the
	// new ones beside them.
	c := newCluster(t)
	c.addN("a1", 2, h100, at{leaf: "l-a1", spine: "s-a"})
	c.add("a1-bound", h100, 0, at{leaf: "l-a1", spine: "s-a"})
	c.addN("a2", 4, h100, at{leaf: "l-a2", spine: "s-a"})
	c.addN("b1", 4, h100, at{leaf: "l-b1", spine: "s-b"})
	c.add("b1-bound", h100, 0, at{leaf: "l-b1", spine: "s-b"})
	c.add("b2-bound", h100, 0, at{leaf: "l-b2", spine: "s-b"})
	s := c.snapshot()

	tests := []struct {
		name       string
		gang       Gang
		wantNodes  []string
		wantDomain string
		wantErr    string
	}{{
		name:      "no near: best fit",
		gang:      Gang{Members: 2, GPUsPerMember: 8},
		wantNodes: []string{"a1-0", "a1-1"}, wantDomain: "block=()/spine=s-a/leaf=l-a1",
	}, {
		name:      "beside a member in another leaf",
		gang:      Gang{Members: 2, GPUsPerMember: 8, Near: []string{"b1-bound"}},
		wantNodes: []string{"b1-0", "b1-1"}, wantDomain: "block=()/spine=s-b/leaf=l-b1",
	}, {
		name:      "members on two leaves of one spine: that spine",
		gang:      Gang{Members: 2, GPUsPerMember: 8, Near: []string{"b1-bound", "b2-bound"}},
		wantNodes: []string{"b1-0", "b1-1"}, wantDomain: "block=()/spine=s-b/leaf=l-b1",
	}, {
		name:      "unknown near nodes are ignored",
		gang:      Gang{Members: 2, GPUsPerMember: 8, Near: []string{"gone"}},
		wantNodes: []string{"a1-0", "a1-1"}, wantDomain: "block=()/spine=s-a/leaf=l-a1",
	}, {
		// The near leaf has room for 2: the spine above it is chosen, and
		// inside it the new members go where they fit best, together in
		// l-a2 (Domain is theirs; the whole gang spans the spine either way).
		name:       "too big for the near leaf: the narrowest wider domain holding it",
		gang:       Gang{Members: 3, GPUsPerMember: 8, Near: []string{"a1-bound"}},
		wantNodes:  []string{"a2-0", "a2-1", "a2-2"},
		wantDomain: "block=()/spine=s-a/leaf=l-a2",
	}, {
		// Tightest first counts from the narrowest domain holding the
		// members placed before: no wait for a leaf that cannot hold
		// them all.
		name:      "tightest first beside members on two leaves: their spine at once",
		gang:      Gang{Members: 2, GPUsPerMember: 8, Level: "host", Mode: lockstep.Preferred, Implicit: true, Near: []string{"b1-bound", "b2-bound"}},
		wantNodes: []string{"b1-0", "b1-1"}, wantDomain: "block=()/spine=s-b/leaf=l-b1",
	}, {
		name:    "a Required leaf counts the members placed before",
		gang:    Gang{Members: 3, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Required, Near: []string{"a1-bound"}},
		wantErr: "kept beside the gang's 1 members placed before",
	}}
	t.Run("a member filling its host: the next ones go beside it at once", func(t *testing.T) {
		// Tightest first from a1-bound, which its own member fills: that
		// host can never hold another, so the base is its leaf and the new
		// member is placed there now, without a preferredWait.
		plan, err := Place(s, Gang{Members: 1, GPUsPerMember: 8, Level: "host", Mode: lockstep.Preferred, Implicit: true, Near: []string{"a1-bound"}}, Options{})
		if err != nil {
			t.Fatalf("Place(): %v", err)
		}
		if plan.Domain.ID != "block=()/spine=s-a/leaf=l-a1/clique=()/host=a1-0" && plan.Domain.ID != "block=()/spine=s-a/leaf=l-a1/clique=()/host=a1-1" {
			t.Errorf("domain = %s, want a host of l-a1 beside a1-bound", plan.Domain.ID)
		}
	})
	t.Run("no drain beside members placed before", func(t *testing.T) {
		// l-1 holds the gang's member (n-bound, full), a node of another
		// job (n-busy) and a free node: it could hold two new members once
		// n-busy's job ends, so it is their base, and they do not fit now.
		// A drain there would hold the running member while n-busy's job
		// runs on: the gang waits to widen instead.
		c := newCluster(t)
		c.add("n-bound", h100, 0, at{leaf: "l-1", spine: "s"})
		c.add("n-busy", h100, 0, at{leaf: "l-1", spine: "s"})
		c.add("n-free", h100, 8, at{leaf: "l-1", spine: "s"})
		c.addN("m", 2, h100, at{leaf: "l-2", spine: "s"})
		s := c.snapshot()
		gang := Gang{Members: 2, GPUsPerMember: 8, Level: "host", Mode: lockstep.Preferred, Implicit: true, Near: []string{"n-bound"}}
		_, err := Place(s, gang, Options{})
		var u *Unschedulable
		if !errors.As(err, &u) {
			t.Fatalf("Place() error = %v, want Unschedulable", err)
		}
		if u.Drain != nil {
			t.Errorf("drains %s, want no drain", u.Drain.ID)
		}
		// The same gang with nothing placed before drains l-1.
		gang.Near = nil
		gang.Members = 3
		if _, err := Place(s, gang, Options{}); !errors.As(err, &u) || u.Drain == nil {
			t.Errorf("without Near: error %v, want a drain", err)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Place(s, tt.gang, Options{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Place() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Place(): %v", err)
			}
			if d := diff(tt.wantNodes, nodesOf(plan)); d != "" {
				t.Errorf("nodes (-want,+got):\n%s", d)
			}
			if plan.Domain.ID != tt.wantDomain {
				t.Errorf("domain = %s, want %s", plan.Domain.ID, tt.wantDomain)
			}
		})
	}
}
