package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// TestPlanReusesTreeCopySafely plans on one tree again and again, as the
// scheduler does, with the snapshot's nodes reordered, narrowed, repeated,
// nil and unknown, and checks every answer against a plan on a fresh tree,
// for which nothing cached applies.
func TestPlanReusesTreeCopySafely(t *testing.T) {
	c := newCluster(t)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 96 {
		free := topology.AllGPUs(8) &^ topology.GPUSet(rng.Uint64N(256))
		c.add(fmt.Sprintf("n%d", i), "hgx-h100", free, at{leaf: fmt.Sprintf("l%d", i/8), spine: fmt.Sprintf("s%d", i/32)})
	}
	shared := c.snapshot()
	fresh := func(nodes []*Node) *Snapshot {
		tree, err := topology.NewTree(lockstep.DefaultLevels(), c.labels)
		if err != nil {
			t.Fatal(err)
		}
		return &Snapshot{Tree: tree, Nodes: nodes}
	}
	stranger := &Node{Name: "stranger", FreeGPUs: topology.AllGPUs(8), FreePods: 1}
	variants := map[string][]*Node{
		"all":       c.nodes,
		"reversed":  reversed(c.nodes),
		"all again": c.nodes,
		"half":      c.nodes[:48],
		"shuffled":  shuffled(rng, c.nodes),
		"repeated":  append(slices.Clone(c.nodes[:10]), c.nodes[3]),
		"nil":       append(slices.Clone(c.nodes[:10]), nil),
		"unknown":   append(slices.Clone(c.nodes[:10]), stranger),
		"all last":  c.nodes,
	}
	type answer struct {
		plan *Plan
		err  error
	}
	order := []string{"all", "reversed", "all again", "half", "repeated", "shuffled", "nil", "all last", "unknown", "all"}
	gangs := []Gang{{Members: 4, GPUsPerMember: 8}, {Members: 3, GPUsPerMember: 2}, {Members: 30, GPUsPerMember: 8}}
	// The plans on fresh trees first: each replaces the cached tree copy.
	want := map[string][]answer{}
	for name, nodes := range variants {
		for _, g := range gangs {
			plan, err := Place(fresh(nodes), g, Options{})
			want[name] = append(want[name], answer{plan, err})
		}
	}
	for _, name := range order {
		for i, g := range gangs {
			s := *shared
			s.Nodes = variants[name]
			got, err := Place(&s, g, Options{})
			w := want[name][i]
			if fmt.Sprint(err) != fmt.Sprint(w.err) {
				t.Fatalf("%s, %+v: error %v, want %v", name, g, err, w.err)
			}
			if err == nil && (diff(w.plan.Members, got.Members) != "" || got.Domain.ID != w.plan.Domain.ID || got.Efficiency != w.plan.Efficiency || got.Explanation != w.plan.Explanation) {
				t.Fatalf("%s, %+v: plan %+v, want %+v", name, g, got, w.plan)
			}
		}
	}
	if sk := lastSkeleton.Load(); sk == nil || sk.tree != shared.Tree {
		t.Error("the shared tree's copy is not cached")
	}
}

func shuffled(rng *rand.Rand, nodes []*Node) []*Node {
	out := slices.Clone(nodes)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func reversed(nodes []*Node) []*Node {
	out := slices.Clone(nodes)
	slices.Reverse(out)
	return out
}
