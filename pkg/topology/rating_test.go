package topology

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// ratingCluster is a small cluster of every shape the rating cases need,
// under the default levels (clique, leaf, spine, block; block absent):
//
//	spine s1: leaf l1 (n1, n2, m1), leaf l2 (n3, n4)
//	spine s2: leaf l3 (g1, g2 in clique c1; g3, g4 in clique c2)
//
// n* are hgx-h100, m1 an a100-pcie-nvlink, g* gb200-nvl72 trays. No leaf
// holds 3 hgx nodes.
type ratingCluster struct {
	tree     *Tree
	hw       map[string]*NodeTopology
	profiles map[string]string
}

func newRatingCluster(t testing.TB) *ratingCluster {
	t.Helper()
	type node struct{ name, profile, clique, leaf, spine string }
	nodes := []node{
		{"n1", "hgx-h100", "", "l1", "s1"},
		{"n2", "hgx-h100", "", "l1", "s1"},
		{"m1", "a100-pcie-nvlink", "", "l1", "s1"},
		{"n3", "hgx-h100", "", "l2", "s1"},
		{"n4", "hgx-h100", "", "l2", "s1"},
		{"g1", "gb200-nvl72", "c1", "l3", "s2"},
		{"g2", "gb200-nvl72", "c1", "l3", "s2"},
		{"g3", "gb200-nvl72", "c2", "l3", "s2"},
		{"g4", "gb200-nvl72", "c2", "l3", "s2"},
	}
	c := &ratingCluster{hw: map[string]*NodeTopology{}, profiles: map[string]string{}}
	var labelled []NodeLabels
	for _, n := range nodes {
		labels := map[string]string{lockstep.LabelFabricTier0: n.leaf, lockstep.LabelFabricTier1: n.spine}
		hw := mustNode(t, n.profile)
		if n.clique != "" {
			labels[lockstep.LabelGPUClique] = n.clique
			hw.NVLinkDomain.ClusterUUID = n.clique
		}
		labelled = append(labelled, NodeLabels{Name: n.name, Labels: labels})
		c.hw[n.name] = hw
		c.profiles[n.name] = n.profile
	}
	tree, err := NewTree(lockstep.DefaultLevels(), labelled)
	if err != nil {
		t.Fatal(err)
	}
	c.tree = tree
	return c
}

func (c *ratingCluster) rater(t testing.TB, over map[string]float64) *Rater {
	t.Helper()
	r, err := NewRater(lockstep.TopologyConfig{Levels: lockstep.DefaultLevels(), Oversubscription: over}, c.tree,
		func(n string) string { return c.profiles[n] }, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// members turns "n1:0-7 n3:0,1" into placement members.
func (c *ratingCluster) members(t testing.TB, spec string) []Member {
	t.Helper()
	var out []Member
	for _, f := range strings.Fields(spec) {
		name, list, _ := strings.Cut(f, ":")
		var set GPUSet
		if lo, hi, ok := strings.Cut(list, "-"); ok {
			for i := int(lo[0] - '0'); i <= int(hi[0]-'0'); i++ {
				set |= NewGPUSet(i)
			}
		} else {
			var err error
			if set, err = ParseGPUList(list); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, Member{Node: c.hw[name], GPUs: set, Path: c.tree.Path(name)})
	}
	return out
}

// ratingView is what the cases compare of a Rating.
type ratingView struct {
	Efficiency    string
	Profile       string
	Domain        string
	LevelName     string
	LevelsSpanned int
	Reason        string
}

func viewOf(r Rating) ratingView {
	return ratingView{
		Efficiency:    lockstep.FormatEfficiency(r.Efficiency),
		Profile:       r.Profile,
		Domain:        r.Domain.DisplayID(),
		LevelName:     r.LevelName,
		LevelsSpanned: r.LevelsSpanned,
		Reason:        r.Reason,
	}
}

func TestRate(t *testing.T) {
	c := newRatingCluster(t)
	blocking := map[string]float64{lockstep.LevelSpine: 2}
	cases := []struct {
		name    string
		over    map[string]float64
		members string
		want    ratingView
	}{{
		name:    "one GPU",
		members: "n1:3",
		want: ratingView{Efficiency: "1.000", Profile: "hgx-h100", Domain: "spine=s1/leaf=l1/host=n1", LevelName: "host",
			Reason: "on one node n1; one GPU: no communication to slow down"},
	}, {
		name:    "one node",
		members: "n1:0-7",
		want: ratingView{Efficiency: "1.000", Profile: "hgx-h100", Domain: "spine=s1/leaf=l1/host=n1", LevelName: "host",
			Reason: "on one node n1; as fast as the best placement (bus bandwidth 450.0 GB/s)"},
	}, {
		name:    "one leaf",
		members: "n1:0-7 n2:0-7",
		want: ratingView{Efficiency: "1.000", Profile: "hgx-h100", Domain: "spine=s1/leaf=l1", LevelName: "leaf", LevelsSpanned: 1,
			Reason: "on 2 nodes in leaf l1; as fast as the best placement (bus bandwidth 50.0 GB/s)"},
	}, {
		name:    "two leaves, non-blocking spine: one more switch tier of latency",
		members: "n1:0-7 n3:0-7",
		want: ratingView{Efficiency: "0.999", Profile: "hgx-h100", Domain: "spine=s1", LevelName: "spine", LevelsSpanned: 2,
			Reason: "spans 2 leaves (l1, l2) under spine s1; same bus bandwidth (50.0 GB/s) but more hops: latency 180µs against 150µs for the best placement"},
	}, {
		name:    "two leaves under a 2:1 oversubscribed spine",
		over:    blocking,
		members: "n1:0-7 n3:0-7",
		want: ratingView{Efficiency: "0.501", Profile: "hgx-h100", Domain: "spine=s1", LevelName: "spine", LevelsSpanned: 2,
			Reason: "spans 2 leaves (l1, l2) under spine s1; crossing the 2:1 oversubscribed spine cuts bus bandwidth from 50.0 to 25.0 GB/s"},
	}, {
		name:    "a gang bigger than any leaf, placed perfectly under an oversubscribed spine",
		over:    blocking,
		members: "n1:0-7 n2:0-7 n3:0-7",
		want: ratingView{Efficiency: "1.000", Profile: "hgx-h100", Domain: "spine=s1", LevelName: "spine", LevelsSpanned: 2,
			Reason: "spans 2 leaves (l1, l2) under spine s1; as fast as the best placement (bus bandwidth 25.0 GB/s)"},
	}, {
		name:    "GB200 gang inside one NVLink clique",
		members: "g1:0-3 g2:0-3",
		want: ratingView{Efficiency: "1.000", Profile: "gb200-nvl72", Domain: "spine=s2/leaf=l3/clique=c1", LevelName: "clique", LevelsSpanned: 1,
			Reason: "on 2 nodes in clique c1; as fast as the best placement (bus bandwidth 900.0 GB/s)"},
	}, {
		name:    "GB200 gang split across two NVLink cliques",
		members: "g1:0-3 g3:0-3",
		want: ratingView{Efficiency: "0.056", Profile: "gb200-nvl72", Domain: "spine=s2/leaf=l3", LevelName: "leaf", LevelsSpanned: 2,
			Reason: "split across 2 NVLink cliques (c1, c2) in leaf l3; leaving the NVLink domain drops bus bandwidth from 900.0 GB/s over NVLink to 50.0 GB/s over the network"},
	}, {
		name:    "mixed profiles: the hgx-h100 majority is the reference, the A100's PCIe link the bottleneck",
		members: "n1:0-7 m1:0-3",
		want: ratingView{Efficiency: "0.251", Profile: "hgx-h100", Domain: "spine=s1/leaf=l1", LevelName: "leaf", LevelsSpanned: 1,
			Reason: "on 2 nodes in leaf l1; GPUs 0,1,2,3 of node m1 get 12.5 GB/s each of NIC bandwidth, against 50.0 GB/s for the best placement"},
	}, {
		name:    "a weak link inside a node",
		members: "m1:0,4",
		want: ratingView{Efficiency: "0.047", Profile: "a100-pcie-nvlink", Domain: "spine=s1/leaf=l1/host=m1", LevelName: "host",
			Reason: "on one node m1; GPUs 0,4 of node m1 meet over a 14.0 GB/s link, against 300.0 GB/s for the best placement"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.rater(t, tc.over).Rate(c.members(t, tc.members))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, viewOf(got)); diff != "" {
				t.Errorf("rating (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRateWithoutTree is the reference of an unknown cluster: one leaf is
// assumed to hold any gang, as BestAllReduce assumes.
func TestRateWithoutTree(t *testing.T) {
	c := newRatingCluster(t)
	cfg := lockstep.TopologyConfig{Levels: lockstep.DefaultLevels(), Oversubscription: map[string]float64{lockstep.LevelSpine: 2}}
	r, err := NewRater(cfg, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	members := c.members(t, "n1:0-7 n2:0-7 n3:0-7")
	got, err := r.Rate(members)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := LookupProfile("hgx-h100")
	best, err := BestAllReduce(p, 24, DefaultMessageBytes, cfg.Levels, Fabric{Oversubscription: cfg.Oversubscription})
	if err != nil {
		t.Fatal(err)
	}
	if got.Best != best {
		t.Errorf("reference without a tree = %+v, want BestAllReduce's %+v", got.Best, best)
	}
}

func TestRateErrors(t *testing.T) {
	c := newRatingCluster(t)
	r := c.rater(t, nil)
	if _, err := r.Rate(nil); err == nil {
		t.Error("Rate(no members): want an error")
	}
	if _, err := r.Rate(c.members(t, "n1:0 n1:1")); err == nil {
		t.Error("Rate(the same node twice): want an error")
	}
	if _, err := NewRater(lockstep.TopologyConfig{Levels: lockstep.DefaultLevels()[1:]}, c.tree, nil, 0); err == nil {
		t.Error("NewRater(levels other than the tree's): want an error")
	}
}

// TestRateUnknownProfile: a node matching no built-in profile has no
// reference; the estimate is still made.
func TestRateUnknownProfile(t *testing.T) {
	c := newRatingCluster(t)
	members := c.members(t, "n1:0-7")
	hw := *members[0].Node
	hw.GPUs = slices.Clone(hw.GPUs)
	for i := range hw.GPUs {
		hw.GPUs[i].Product = "Some GPU"
	}
	members[0].Node = &hw
	got, err := c.rater(t, nil).Rate(members)
	if err != nil {
		t.Fatal(err)
	}
	if got.Efficiency != 0 || got.Actual.GPUs != 8 || !strings.Contains(got.Reason, "no GPU product") {
		t.Errorf("Rate = %+v, want efficiency 0, the estimate and a reason", got)
	}
}

// FuzzRate checks that every placement the cluster allows rates in (0, 1]
// with a reason.
func FuzzRate(f *testing.F) {
	f.Add(uint64(1), uint16(0x1ff), false)
	f.Add(uint64(7), uint16(0x00f), true)
	f.Add(uint64(42), uint16(0x1e0), true)
	c := newRatingCluster(f)
	names := c.tree.Root().Nodes
	raters := map[bool]*Rater{false: c.rater(f, nil), true: c.rater(f, map[string]float64{lockstep.LevelSpine: 2, lockstep.LevelCluster: 4})}
	f.Fuzz(func(t *testing.T, seed uint64, pick uint16, blocking bool) {
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		var members []Member
		for i, n := range names {
			if pick&(1<<i) == 0 {
				continue
			}
			hw := c.hw[n]
			set := GPUSet(rng.Uint64()) & hw.AllGPUs()
			if set == 0 {
				set = NewGPUSet(0)
			}
			members = append(members, Member{Node: hw, GPUs: set, Path: c.tree.Path(n)})
		}
		if len(members) == 0 {
			return
		}
		got, err := raters[blocking].Rate(members)
		if err != nil {
			t.Fatal(err)
		}
		if !(got.Efficiency > 0 && got.Efficiency <= 1) || got.Reason == "" {
			t.Fatalf("Rate = efficiency %v, reason %q; want (0, 1] and a reason", got.Efficiency, got.Reason)
		}
		if got.LevelsSpanned < 0 || got.LevelsSpanned > got.Domain.Level {
			t.Fatalf("levels spanned %d outside [0, %d]", got.LevelsSpanned, got.Domain.Level)
		}
	})
}

func TestFormatEfficiencyAndDisplayID(t *testing.T) {
	for in, want := range map[float64]string{1: "1.000", 1.2: "1.000", 0.9734: "0.973", 0.5: "0.500", 0.0001: "0.001", 0: "", -1: ""} {
		if got := lockstep.FormatEfficiency(in); got != want {
			t.Errorf("FormatEfficiency(%v) = %q, want %q", in, got, want)
		}
	}
	c := newRatingCluster(t)
	for node, want := range map[string]string{"n1": "spine=s1/leaf=l1/host=n1", "g1": "spine=s2/leaf=l3/clique=c1/host=g1"} {
		if got := c.tree.Path(node)[0].DisplayID(); got != want {
			t.Errorf("DisplayID(host %s) = %q, want %q", node, got, want)
		}
	}
	if got := c.tree.Root().DisplayID(); got != lockstep.LevelCluster {
		t.Errorf("DisplayID(root) = %q, want cluster", got)
	}
}
