package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// TestBooksChangesNameEveryNode runs random sequences of every event that
// can change a node's Booked or DrainedFor and checks after each that every
// node whose answer changed is among Changes since the step before: a
// reader that keeps answers per node and misses one serves stale capacity.
func TestBooksChangesNameEveryNode(t *testing.T) {
	nodes := []string{"a", "b", "c", "d"}
	gangs := []string{"ns/x", "ns/y", "ns/z"}
	domains := []*topology.Domain{
		{ID: "ab", Value: "ab", Nodes: []string{"a", "b"}},
		{ID: "cd", Value: "cd", Nodes: []string{"c", "d"}},
		{ID: "all", Value: "all", Nodes: nodes},
	}
	type answer struct {
		Booked  topology.GPUSet
		Drained string
	}
	answers := func(b *Books) map[string]answer {
		out := map[string]answer{}
		for _, n := range nodes {
			out[n] = answer{b.Booked(n), b.DrainedFor(n)}
		}
		return out
	}
	now := time.Unix(0, 0)
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 33))
		b := NewBooks()
		var cursor uint64
		before := answers(b)
		for step := range 80 {
			pod := fmt.Sprintf("p%d", rng.IntN(16))
			gang, node := gangs[rng.IntN(len(gangs))], nodes[rng.IntN(len(nodes))]
			d := domains[rng.IntN(len(domains))]
			var op string
			switch k := rng.IntN(booksOps + 4); k {
			case 0, 1, 2, 3, 4, 5, 6:
				randomPlan := func() *Plan {
					plan := &Plan{}
					for range 1 + rng.IntN(6) {
						plan.Members = append(plan.Members, assign(nodes[rng.IntN(len(nodes))], rng.IntN(8)))
					}
					return plan
				}
				op = applyBooksOp(b, rng, k, gang, pod, node, randomPlan, 8, now)
			case 7:
				op = fmt.Sprintf("drain %s %s", gang, d.Value)
				b.Drain(gang, d, int32(rng.IntN(3)), rng.IntN(8), now)
			case 8:
				op = fmt.Sprintf("hold %s %s", gang, d.Value)
				b.Hold(gang, d, int32(rng.IntN(3)), []string{pod}, now)
			case 9:
				op = "undrain " + gang
				b.Undrain(gang)
			case 10:
				op = "expire drains"
				now = now.Add(time.Minute)
				b.ExpireDrains(now, time.Second)
			}
			after := answers(b)
			changed, next, complete := b.Changes(cursor)
			if !complete {
				t.Fatalf("seed %d step %d (%s): the journal lost position %d", seed, step, op, cursor)
			}
			for _, n := range nodes {
				if before[n] != after[n] && !slices.Contains(changed, n) {
					t.Fatalf("seed %d step %d (%s): node %s went from %+v to %+v, Changes names only %v", seed, step, op, n, before[n], after[n], changed)
				}
			}
			before, cursor = after, next
		}
	}
}

// TestBooksChangesStartOver: a reader whose position the journal no
// longer reaches is told to read every node again, and one that caught up
// reads on from where it was.
func TestBooksChangesStartOver(t *testing.T) {
	b := NewBooks()
	for i := range maxJournal {
		b.Assign(fmt.Sprintf("p%d", i), "a", topology.NewGPUSet(0))
	}
	nodes, last, complete := b.Changes(0)
	if !complete || len(nodes) != maxJournal || last != maxJournal {
		t.Fatalf("Changes(0) = %d nodes, next %d, complete %v; want %d, %d, true", len(nodes), last, complete, maxJournal, maxJournal)
	}
	b.Assign("q", "b", topology.NewGPUSet(1))
	if _, _, complete := b.Changes(0); complete {
		t.Errorf("Changes(0) after the journal started over is complete")
	}
	nodes, next, complete := b.Changes(last)
	if diff := cmp.Diff([]string{"b"}, nodes); diff != "" || !complete || next != last+1 {
		t.Errorf("Changes(%d) = %v, %d, %v; want [b], %d, true (-want,+got nodes):\n%s", last, nodes, next, complete, last+1, diff)
	}
	if _, _, complete := b.Changes(next + 1); complete {
		t.Errorf("Changes past the journal's end is complete")
	}
}
