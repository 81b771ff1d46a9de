package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestRankOrder(t *testing.T) {
	// Two spines of two leaves each, two nodes per leaf, with node names
	// that sort against the tree (a-… in the second leaf) so name order and
	// topology order differ.
	c := newCluster(t)
	for _, n := range []struct {
		name string
		at   at
	}{
		{"z-0", at{leaf: "l0", spine: "s0"}},
		{"b-0", at{leaf: "l0", spine: "s0"}},
		{"a-1", at{leaf: "l1", spine: "s0"}},
		{"y-1", at{leaf: "l1", spine: "s0"}},
		{"c-2", at{leaf: "l2", spine: "s1"}},
		{"x-3", at{leaf: "l3", spine: "s1"}},
	} {
		c.add(n.name, h100, topology.AllGPUs(8), n.at)
	}
	dgx1 := c.add("dgx", "dgx1-v100", topology.AllGPUs(8), at{leaf: "l3", spine: "s1"})
	s := c.snapshot()
	topo := func(node string) *topology.NodeTopology {
		if node == "dgx" {
			return dgx1.Topology
		}
		return s.Nodes[0].Topology
	}
	for _, tc := range []struct {
		name    string
		members []Assignment
		want    []Assignment
	}{{
		name: "leaves contiguous, spine before spine, nodes by name inside a leaf",
		members: []Assignment{
			assign("c-2", 0), assign("a-1", 0), assign("z-0", 0), assign("x-3", 0),
			assign("y-1", 0), assign("b-0", 0),
		},
		want: []Assignment{
			assign("b-0", 0), assign("z-0", 0), assign("a-1", 0), assign("y-1", 0),
			assign("c-2", 0), assign("x-3", 0),
		},
	}, {
		name: "members of one node adjacent, lowest GPU first",
		members: []Assignment{
			assign("a-1", 4, 5), assign("z-0", 2, 3), assign("a-1", 0, 1), assign("z-0", 0, 1),
		},
		want: []Assignment{
			assign("z-0", 0, 1), assign("z-0", 2, 3), assign("a-1", 0, 1), assign("a-1", 4, 5),
		},
	}, {
		// DGX-1 hybrid cube-mesh: GPU 0's NV2 links go to 3 and 4, not to
		// 1 or 2, so the ring goes 0 → 4 (NV2) rather than 0 → 1 (NV1).
		name: "NVLink order on a node with several members",
		members: []Assignment{
			assign("dgx", 1), assign("dgx", 0), assign("dgx", 2), assign("dgx", 4),
		},
		want: []Assignment{
			assign("dgx", 0), assign("dgx", 4), assign("dgx", 1), assign("dgx", 2),
		},
	}, {
		name:    "nodes outside the tree last, by name",
		members: []Assignment{assign("ghost-b", 0), assign("x-3", 0), assign("ghost-a", 0)},
		want:    []Assignment{assign("x-3", 0), assign("ghost-a", 0), assign("ghost-b", 0)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &Plan{Members: slices.Clone(tc.members)}
			got := RankOrder(s.Tree, plan, topo)
			if d := diff(tc.want, got); d != "" {
				t.Errorf("RankOrder (-want,+got):\n%s", d)
			}
			if d := diff(got, plan.Members); d != "" {
				t.Errorf("plan.Members not reordered in place (-want,+got):\n%s", d)
			}
		})
	}
}

// TestRankOrderDGX1Links pins the link facts TestRankOrder's NVLink case
// relies on, so a profile change fails here with a clear message.
func TestRankOrderDGX1Links(t *testing.T) {
	p, _ := topology.LookupProfile("dgx1-v100")
	node, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	if a, b := node.Link(0, 4).GBps, node.Link(0, 1).GBps; a <= b {
		t.Fatalf("dgx1-v100: link 0-4 %v GB/s, 0-1 %v GB/s: want 0-4 faster", a, b)
	}
	if a, b := node.Link(4, 1).GBps, node.Link(4, 2).GBps; a < b {
		t.Fatalf("dgx1-v100: link 4-1 %v GB/s, 4-2 %v GB/s: want 4-1 at least as fast", a, b)
	}
}

// FuzzRankOrder places random gangs on random snapshots, shuffles the plan
// and checks that RankOrder returns the same members in an order that,
// at every level of the tree, enters each domain once: the ring over them
// never comes back to a domain it left.
func FuzzRankOrder(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(8))
	f.Add(uint64(2), uint8(12), uint8(1))
	f.Add(uint64(3), uint8(20), uint8(2))
	f.Add(uint64(4), uint8(7), uint8(0))
	selectors := map[string]*topology.Selector{}
	f.Fuzz(func(t *testing.T, seed uint64, members, gpus uint8) {
		c := newCluster(t)
		c.selectors = selectors
		rng := rand.New(rand.NewPCG(seed, 0))
		randomNodes(c, rng)
		s := c.snapshot()
		plan, err := Place(s, Gang{Members: 1 + int(members)%24, GPUsPerMember: int(gpus) % 9}, Options{})
		if u := new(*Unschedulable); errors.As(err, u) {
			return // a random cluster too small for the gang: nothing to order
		}
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(plan.Members)
		rng.Shuffle(len(plan.Members), func(i, j int) {
			plan.Members[i], plan.Members[j] = plan.Members[j], plan.Members[i]
		})
		got := RankOrder(s.Tree, plan, s.NodeTopology)
		if err := checkRankOrder(s.Tree, want, got); err != nil {
			t.Fatalf("seed %d: %v\nplan %v", seed, err, got)
		}
	})
}

// checkRankOrder checks that got is a permutation of want in which every
// domain of every level is one contiguous run.
func checkRankOrder(tree *topology.Tree, want, got []Assignment) error {
	key := func(a Assignment) string { return fmt.Sprintf("%s/%d", a.Node, a.GPUs) }
	w, g := make([]string, len(want)), make([]string, len(got))
	for i := range want {
		w[i] = key(want[i])
	}
	for i := range got {
		g[i] = key(got[i])
	}
	slices.Sort(w)
	slices.Sort(g)
	if !slices.Equal(w, g) {
		return fmt.Errorf("members changed: %v, want %v", g, w)
	}
	for level := range tree.LevelNames() {
		left := map[string]bool{}
		prev := ""
		for i, m := range got {
			path := tree.Path(m.Node)
			if path == nil {
				return fmt.Errorf("member %d: node %s not in the tree", i, m.Node)
			}
			id := path[level].ID
			if id == prev {
				continue
			}
			if left[id] {
				return fmt.Errorf("member %d (%s) comes back to %s, which the order left before", i, m.Node, id)
			}
			if prev != "" {
				left[prev] = true
			}
			prev = id
		}
	}
	return nil
}
