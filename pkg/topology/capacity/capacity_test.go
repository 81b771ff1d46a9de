package capacity

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

var levels = []topology.Level{
	{Name: "leaf", LabelKey: "tier-0"},
	{Name: "spine", LabelKey: "tier-1"},
	{Name: "block", LabelKey: "tier-2"},
}

func node(name, leaf, spine string, alloc, req int) Node {
	labels := map[string]string{}
	if leaf != "" {
		labels["tier-0"] = leaf
	}
	if spine != "" {
		labels["tier-1"] = spine
	}
	return Node{Name: name, Labels: labels, Allocatable: alloc, Requested: req}
}

func reported(n Node, usable, unhealthy int) Node {
	n.Reported = &Reported{Usable: usable, Unhealthy: unhealthy}
	return n
}

// lines writes a tree one domain a line, indented by depth:
// "ID level name nodes gpus free unhealthy".
func lines(d *Domain, depth int, out []string) []string {
	unhealthy := "-"
	if d.Unhealthy != nil {
		unhealthy = fmt.Sprint(*d.Unhealthy)
	}
	out = append(out, fmt.Sprintf("%s%s %s %s %d %d %d %s", strings.Repeat(" ", depth), d.ID, d.Level, d.Name, d.Nodes, d.GPUs, d.Free, unhealthy))
	for _, c := range d.Children {
		out = lines(c, depth+1, out)
	}
	return out
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name       string
		nodes      []Node
		wantLevels []string
		want       []string
	}{{
		name: "absent block level is left out",
		nodes: []Node{
			node("n1", "l1", "s1", 8, 2),
			reported(node("n2", "l1", "s1", 8, 0), 7, 1),
			node("n3", "l2", "s1", 8, 8),
		},
		wantLevels: []string{"host", "leaf", "spine", "cluster"},
		want: []string{
			"cluster cluster cluster 3 24 13 1",
			" spine=s1 spine s1 3 24 13 1",
			"  spine=s1/leaf=l1 leaf l1 2 16 13 1",
			"   spine=s1/leaf=l1/host=n1 host n1 1 8 6 -",
			"   spine=s1/leaf=l1/host=n2 host n2 1 8 7 1",
			"  spine=s1/leaf=l2 leaf l2 1 8 0 -",
			"   spine=s1/leaf=l2/host=n3 host n3 1 8 0 -",
		},
	}, {
		name: "unlabelled node is a domain of its own",
		nodes: []Node{
			node("n1", "l1", "s1", 4, 0),
			node("n2", "", "s1", 4, 1),
		},
		wantLevels: []string{"host", "leaf", "spine", "cluster"},
		want: []string{
			"cluster cluster cluster 2 8 7 -",
			" spine=s1 spine s1 2 8 7 -",
			"  spine=s1/leaf=(n2) leaf (n2) 1 4 3 -",
			"   spine=s1/leaf=(n2)/host=n2 host n2 1 4 3 -",
			"  spine=s1/leaf=l1 leaf l1 1 4 4 -",
			"   spine=s1/leaf=l1/host=n1 host n1 1 4 4 -",
		},
	}, {
		name: "no labels: hosts under the root",
		nodes: []Node{
			node("b", "", "", 2, 0),
			reported(node("a", "", "", 2, 0), 0, 2),
		},
		wantLevels: []string{"host", "cluster"},
		want: []string{
			"cluster cluster cluster 2 4 2 2",
			" host=a host a 1 2 0 2",
			" host=b host b 1 2 2 -",
		},
	}, {
		name:       "no nodes",
		wantLevels: []string{"host", "cluster"},
		want:       []string{"cluster cluster cluster 0 0 0 -"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := Build(levels, tc.nodes)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantLevels, tree.Levels); diff != "" {
				t.Errorf("levels (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, lines(tree.Root, 0, nil)); diff != "" {
				t.Errorf("tree (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestBuildRejectsBadInput(t *testing.T) {
	if _, err := Build([]topology.Level{{Name: "leaf"}}, nil); err == nil || !strings.Contains(err.Error(), "nodeLabel is empty") {
		t.Errorf("level without a key: %v", err)
	}
	if _, err := Build(levels, []Node{node("a", "", "", 1, 0), node("a", "", "", 1, 0)}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("node listed twice: %v", err)
	}
}

func TestFree(t *testing.T) {
	tests := []struct {
		name string
		node Node
		want int
	}{
		{"allocatable minus requested", Node{Allocatable: 8, Requested: 3}, 5},
		{"over-requested", Node{Allocatable: 2, Requested: 3}, 0},
		{"capped by usable GPUs", Node{Allocatable: 8, Requested: 0, Reported: &Reported{Usable: 6, Unhealthy: 2}}, 6},
		{"allocation not yet reported", Node{Allocatable: 8, Requested: 4, Reported: &Reported{Usable: 8}}, 4},
	}
	for _, tc := range tests {
		if got := tc.node.Free(); got != tc.want {
			t.Errorf("%s: Free() = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestTruncateAndAtLevel(t *testing.T) {
	tree, err := Build(levels, []Node{
		node("n1", "l1", "s1", 8, 2),
		node("n2", "l2", "s1", 8, 0),
		node("n3", "l3", "s2", 8, 8),
	})
	if err != nil {
		t.Fatal(err)
	}
	truncated := []struct {
		depth int
		want  []string
	}{
		{0, []string{"cluster cluster cluster 3 24 14 -"}},
		{1, []string{
			"cluster cluster cluster 3 24 14 -",
			" spine=s1 spine s1 2 16 14 -",
			" spine=s2 spine s2 1 8 0 -",
		}},
	}
	for _, tc := range truncated {
		if diff := cmp.Diff(tc.want, lines(tree.Truncate(tc.depth), 0, nil)); diff != "" {
			t.Errorf("Truncate(%d) (-want,+got):\n%s", tc.depth, diff)
		}
	}
	if n := len(lines(tree.Truncate(-1), 0, nil)); n != 9 {
		t.Errorf("Truncate(-1) has %d domains, want all 9", n)
	}
	if n := len(lines(tree.Root, 0, nil)); n != 9 {
		t.Errorf("Truncate modified the tree: %d domains left, want 9", n)
	}

	levelTests := []struct {
		level   string
		want    []string
		wantErr string
	}{
		{level: "leaf", want: []string{
			"spine=s1/leaf=l1 leaf l1 1 8 6 -",
			"spine=s1/leaf=l2 leaf l2 1 8 8 -",
			"spine=s2/leaf=l3 leaf l3 1 8 0 -",
		}},
		{level: "cluster", want: []string{"cluster cluster cluster 3 24 14 -"}},
		{level: "block", wantErr: `no node is labelled for level "block" (label tier-2)`},
		{level: "rack", wantErr: `unknown level "rack": the levels are host, leaf, spine, cluster`},
	}
	for _, tc := range levelTests {
		domains, err := tree.AtLevel(tc.level)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("AtLevel(%s) error %v, want %q", tc.level, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("AtLevel(%s): %v", tc.level, err)
		}
		var got []string
		for _, d := range domains {
			got = append(got, lines(d, 0, nil)...)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("AtLevel(%s) (-want,+got):\n%s", tc.level, diff)
		}
	}
}

func TestPath(t *testing.T) {
	tree, err := Build(levels, []Node{node("n1", "l1", "s1", 8, 0), node("n2", "", "s1", 8, 0)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range tree.Path("n2") {
		got = append(got, d.Level+":"+d.Name)
	}
	if diff := cmp.Diff([]string{"host:n2", "leaf:(n2)", "spine:s1", "cluster:cluster"}, got); diff != "" {
		t.Errorf("Path(n2) (-want,+got):\n%s", diff)
	}
	if p := tree.Path("nope"); p != nil {
		t.Errorf("Path of an unknown node = %v, want nil", p)
	}
}
