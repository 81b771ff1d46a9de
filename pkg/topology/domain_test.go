package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// labels builds a node's labels from the default level keys; empty values are
// left out.
func labels(clique, leaf, spine, block string) map[string]string {
	l := map[string]string{}
	for key, v := range map[string]string{
		lockstep.LabelGPUClique:   clique,
		lockstep.LabelFabricTier0: leaf,
		lockstep.LabelFabricTier1: spine,
		lockstep.LabelFabricTier2: block,
	} {
		if v != "" {
			l[key] = v
		}
	}
	return l
}

// testCluster is two blocks: b1 has spine s1 (leaves l1, l2) and spine s2
// (leaf l3); b2 has spine s3. Nodes g1-g3 are GB200 trays in clique c1
// under l1.
func testCluster() []NodeLabels {
	return []NodeLabels{
		{Name: "h1", Labels: labels("", "l1", "s1", "b1")},
		{Name: "h2", Labels: labels("", "l1", "s1", "b1")},
		{Name: "h3", Labels: labels("", "l2", "s1", "b1")},
		{Name: "h4", Labels: labels("", "l3", "s2", "b1")},
		{Name: "h5", Labels: labels("", "l4", "s3", "b2")},
		{Name: "g1", Labels: labels("uuid.1", "l1", "s1", "b1")},
		{Name: "g2", Labels: labels("uuid.1", "l1", "s1", "b1")},
		{Name: "g3", Labels: labels("uuid.2", "l1", "s1", "b1")},
		// Labelled up to the spine only: its leaf is unknown.
		{Name: "noleaf", Labels: labels("", "", "s1", "b1")},
		// No topology labels at all.
		{Name: "bare"},
	}
}

func mustTree(t testing.TB, nodes []NodeLabels) *Tree {
	t.Helper()
	tree, err := NewTree(lockstep.DefaultLevels(), nodes)
	if err != nil {
		t.Fatalf("NewTree: %v", err)
	}
	return tree
}

func TestLowestCommonDomain(t *testing.T) {
	tree := mustTree(t, testCluster())
	tests := []struct {
		name      string
		nodes     []string
		wantLevel int
		wantID    string
	}{
		{name: "one node", nodes: []string{"h1"}, wantLevel: 0, wantID: "block=b1/spine=s1/leaf=l1/clique=(h1)/host=h1"},
		{name: "same leaf, no clique", nodes: []string{"h1", "h2"}, wantLevel: 2, wantID: "block=b1/spine=s1/leaf=l1"},
		{name: "same clique", nodes: []string{"g1", "g2"}, wantLevel: 1, wantID: "block=b1/spine=s1/leaf=l1/clique=uuid.1"},
		{name: "two cliques, one leaf", nodes: []string{"g1", "g3"}, wantLevel: 2, wantID: "block=b1/spine=s1/leaf=l1"},
		{name: "two leaves", nodes: []string{"h1", "h3"}, wantLevel: 3, wantID: "block=b1/spine=s1"},
		{name: "two spines", nodes: []string{"h1", "h2", "h4"}, wantLevel: 4, wantID: "block=b1"},
		{name: "two blocks", nodes: []string{"h1", "h5"}, wantLevel: 5, wantID: "cluster"},
		// A node without a leaf label shares no leaf, not even with itself
		// and a neighbour, but still meets its spine.
		{name: "missing leaf meets at the spine", nodes: []string{"noleaf", "h3"}, wantLevel: 3, wantID: "block=b1/spine=s1"},
		{name: "missing leaf alone", nodes: []string{"noleaf"}, wantLevel: 0, wantID: "block=b1/spine=s1/leaf=(noleaf)/clique=(noleaf)/host=noleaf"},
		// A node with no labels meets others only at the root.
		{name: "no labels", nodes: []string{"bare", "h1"}, wantLevel: 5, wantID: "cluster"},
		{name: "order does not matter", nodes: []string{"h4", "h2", "h1"}, wantLevel: 4, wantID: "block=b1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dom, err := tree.LowestCommonDomain(tt.nodes)
			if err != nil {
				t.Fatalf("LowestCommonDomain(%q): %v", tt.nodes, err)
			}
			type levelID struct {
				Level int
				ID    string
			}
			if d := diff(levelID{tt.wantLevel, tt.wantID}, levelID{dom.Level, dom.ID}); d != "" {
				t.Errorf("LowestCommonDomain(%q) (-want,+got):\n%s", tt.nodes, d)
			}
			level, err := tree.LowestCommonLevel(tt.nodes)
			if err != nil || level != tt.wantLevel {
				t.Errorf("LowestCommonLevel(%q) = %d, %v, want %d", tt.nodes, level, err, tt.wantLevel)
			}
		})
	}
}

func TestLowestCommonDomainErrors(t *testing.T) {
	tree := mustTree(t, testCluster())
	if _, err := tree.LowestCommonDomain(nil); err == nil {
		t.Error("no nodes: want an error")
	}
	if _, err := tree.LowestCommonDomain([]string{"h1", "ghost"}); err == nil || !strings.Contains(err.Error(), `"ghost"`) {
		t.Errorf("unknown node: error = %v, want one naming it", err)
	}
}

func TestTreeStructure(t *testing.T) {
	tree := mustTree(t, testCluster())
	if d := diff([]string{"host", "clique", "leaf", "spine", "block", "cluster"}, tree.LevelNames()); d != "" {
		t.Errorf("LevelNames() (-want,+got):\n%s", d)
	}
	var spines []string
	for _, d := range tree.Domains(3) {
		spines = append(spines, fmt.Sprintf("%s %v", d.ID, d.Nodes))
	}
	want := []string{
		"block=(bare)/spine=(bare) [bare]",
		"block=b1/spine=s1 [g1 g2 g3 h1 h2 h3 noleaf]",
		"block=b1/spine=s2 [h4]",
		"block=b2/spine=s3 [h5]",
	}
	if d := diff(want, spines); d != "" {
		t.Errorf("spines (-want,+got):\n%s", d)
	}
	leaf := tree.Domains(2)
	var leafIDs []string
	for _, d := range leaf {
		leafIDs = append(leafIDs, d.ID)
		if d.Parent.Level != 3 {
			t.Errorf("%s has parent %s at level %d, want level 3", d.ID, d.Parent.ID, d.Parent.Level)
		}
	}
	wantLeaves := []string{
		"block=(bare)/spine=(bare)/leaf=(bare)",
		"block=b1/spine=s1/leaf=(noleaf)",
		"block=b1/spine=s1/leaf=l1",
		"block=b1/spine=s1/leaf=l2",
		"block=b1/spine=s2/leaf=l3",
		"block=b2/spine=s3/leaf=l4",
	}
	if d := diff(wantLeaves, leafIDs); d != "" {
		t.Errorf("leaves (-want,+got):\n%s", d)
	}
	path := tree.Path("g1")
	var pathIDs []string
	for _, d := range path {
		pathIDs = append(pathIDs, d.LevelName+":"+d.Value)
	}
	if d := diff([]string{"host:g1", "clique:uuid.1", "leaf:l1", "spine:s1", "block:b1", "cluster:"}, pathIDs); d != "" {
		t.Errorf("Path(g1) (-want,+got):\n%s", d)
	}
	if path[len(path)-1] != tree.Root() {
		t.Error("Path does not end at the root")
	}
	if tree.Path("ghost") != nil {
		t.Error("Path of an unknown node is not nil")
	}
	if got := tree.Domains(7); got != nil {
		t.Errorf("Domains(7) = %v, want nil", got)
	}
}

func TestTreeLeafValueReusedUnderTwoSpines(t *testing.T) {
	// Inconsistent labels still give a tree: leaf "l1" under s1 and under s2
	// are different domains.
	tree := mustTree(t, []NodeLabels{
		{Name: "a", Labels: labels("", "l1", "s1", "b1")},
		{Name: "b", Labels: labels("", "l1", "s2", "b1")},
	})
	if level, _ := tree.LowestCommonLevel([]string{"a", "b"}); level != 4 {
		t.Errorf("LowestCommonLevel = %d, want 4 (block)", level)
	}
}

func TestNewTreeErrors(t *testing.T) {
	tests := []struct {
		name    string
		levels  []Level
		nodes   []NodeLabels
		wantErr string
	}{
		{name: "duplicate node", levels: lockstep.DefaultLevels(), nodes: []NodeLabels{{Name: "a"}, {Name: "a"}}, wantErr: `node "a" is listed twice`},
		{name: "unnamed node", levels: lockstep.DefaultLevels(), nodes: []NodeLabels{{}}, wantErr: "nodes[0] has no name"},
		{name: "reserved level", levels: []Level{{Name: "host", LabelKey: "k"}}, wantErr: "reserved"},
		{name: "duplicate level", levels: []Level{{Name: "leaf", LabelKey: "a"}, {Name: "leaf", LabelKey: "b"}}, wantErr: `"leaf" is used twice`},
		{name: "duplicate key", levels: []Level{{Name: "a", LabelKey: "k"}, {Name: "b", LabelKey: "k"}}, wantErr: `"k" is used twice`},
		{name: "empty level", levels: []Level{{}}, wantErr: "levels[0].name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewTree(tt.levels, tt.nodes)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewTree error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestTreeWithoutLevels(t *testing.T) {
	tree, err := NewTree(nil, []NodeLabels{{Name: "a"}, {Name: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if level, _ := tree.LowestCommonLevel([]string{"a", "b"}); level != 1 {
		t.Errorf("LowestCommonLevel = %d, want 1 (cluster)", level)
	}
}

func TestDomainTiers(t *testing.T) {
	tree := mustTree(t, testCluster())
	var got []int
	for _, d := range tree.Path("g1") {
		got = append(got, d.tier)
	}
	// host, clique (NVLink: shares the first network tier), leaf, spine,
	// block, cluster.
	if d := diff([]int{0, 1, 1, 2, 3, 4}, got); d != "" {
		t.Errorf("tiers (-want,+got):\n%s", d)
	}
}

// syntheticCluster labels n nodes 32 per leaf, 16 leaves per spine, 4 spines
// per block.
func syntheticCluster(n int) []NodeLabels {
	nodes := make([]NodeLabels, n)
	for i := range nodes {
		leaf, spine := i/32, i/(32*16)
		nodes[i] = NodeLabels{
			Name:   fmt.Sprintf("node-%05d", i),
			Labels: labels("", fmt.Sprintf("leaf-%d", leaf), fmt.Sprintf("spine-%d", spine), fmt.Sprintf("block-%d", spine/4)),
		}
	}
	return nodes
}

func BenchmarkNewTree(b *testing.B) {
	nodes := syntheticCluster(5000)
	b.Run("nodes=5000", func(b *testing.B) {
		for b.Loop() {
			if _, err := NewTree(lockstep.DefaultLevels(), nodes); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkLowestCommonLevel(b *testing.B) {
	tree := mustTree(b, syntheticCluster(5000))
	gang := []string{"node-00000", "node-00031", "node-00032", "node-00600"}
	for b.Loop() {
		if _, err := tree.LowestCommonLevel(gang); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTreeAbsentLevels(t *testing.T) {
	// A two-tier network labels no tier-3 and has no NVLink cliques: those
	// levels are absent, so nodes of one spine still meet at the spine.
	tree := mustTree(t, []NodeLabels{
		{Name: "a", Labels: labels("", "l1", "s1", "")},
		{Name: "b", Labels: labels("", "l2", "s1", "")},
		{Name: "c", Labels: labels("", "l3", "s2", "")},
	})
	tests := []struct {
		nodes  []string
		wantID string
	}{
		{[]string{"a", "b"}, "block=()/spine=s1"},
		// They share the absent block, which is the whole cluster.
		{[]string{"a", "c"}, "cluster"},
	}
	for _, tt := range tests {
		d, err := tree.LowestCommonDomain(tt.nodes)
		if err != nil || d.ID != tt.wantID {
			t.Errorf("LowestCommonDomain(%q) = %v, %v, want %s", tt.nodes, d.ID, err, tt.wantID)
		}
	}
	var tiers []int
	for _, d := range tree.Path("a") {
		tiers = append(tiers, d.tier)
	}
	// host, clique (absent), leaf, spine, block (absent), cluster.
	if d := diff([]int{0, 1, 1, 2, 2, 3}, tiers); d != "" {
		t.Errorf("tiers (-want,+got):\n%s", d)
	}

	// With no labels at all every level is absent: nodes meet at the root,
	// one network tier up.
	bare := mustTree(t, []NodeLabels{{Name: "x"}, {Name: "y"}})
	d, err := bare.LowestCommonDomain([]string{"x", "y"})
	if err != nil || d != bare.Root() || d.tier != 1 {
		t.Errorf("unlabelled nodes meet at %v (tier %d), %v; want the root at tier 1", d.ID, d.tier, err)
	}
}
