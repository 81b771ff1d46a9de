package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// benchSnapshot is a partially occupied HGX H100 cluster of n nodes: 32
// nodes per leaf, 16 leaves per spine, each node with a uniformly random
// number of its GPUs (0 to 8, random ones) and the matching share of CPU,
// memory and pod slots in use. The seed is fixed so runs compare.
func benchSnapshot(b *testing.B, n int) *Snapshot {
	b.Helper()
	p, _ := topology.LookupProfile(h100)
	node, err := p.Node()
	if err != nil {
		b.Fatal(err)
	}
	sel, err := topology.NewSelector(node)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(42, 0))
	nodes := make([]*Node, n)
	labels := make([]topology.NodeLabels, n)
	for i := range n {
		name := fmt.Sprintf("node-%05d", i)
		used := rng.IntN(p.GPUCount + 1)
		var taken topology.GPUSet
		for _, g := range rng.Perm(p.GPUCount)[:used] {
			taken |= topology.NewGPUSet(g)
		}
		nodes[i] = &Node{
			Name:         name,
			Topology:     node,
			Selector:     sel,
			FreeGPUs:     node.AllGPUs() &^ taken,
			FreeMilliCPU: int64(p.CPUs-used*p.CPUs/p.GPUCount) * 1000,
			FreeMemory:   int64(p.MemoryGiB-used*p.MemoryGiB/p.GPUCount) << 30,
			FreePods:     110 - used,
		}
		labels[i] = topology.NodeLabels{Name: name, Labels: at{
			leaf:  fmt.Sprintf("leaf-%03d", i/32),
			spine: fmt.Sprintf("spine-%02d", i/(32*16)),
		}.labels()}
	}
	tree, err := topology.NewTree(lockstep.DefaultLevels(), labels)
	if err != nil {
		b.Fatal(err)
	}
	return &Snapshot{
		Tree:   tree,
		Nodes:  nodes,
		Fabric: topology.Fabric{Oversubscription: map[string]float64{"spine": 2}},
	}
}

// BenchmarkPlace plans gangs of 8-GPU members, with no constraint so the
// search climbs every level it must.
func BenchmarkPlace(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s := benchSnapshot(b, n)
			for _, gpus := range []int{8, 64, 512} {
				b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
					g := Gang{Members: gpus / 8, GPUsPerMember: 8, MilliCPUPerMember: 16_000, MemoryPerMember: 64 << 30}
					plan, err := Place(s, g, Options{})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					for b.Loop() {
						if _, err := Place(s, g, Options{}); err != nil {
							b.Fatal(err)
						}
					}
					// ResetTimer, which Loop calls, drops metrics reported before.
					b.ReportMetric(plan.Efficiency, "efficiency")
					b.ReportMetric(float64(plan.Estimate.Nodes), "nodes/op")
				})
			}
		})
	}
}

// BenchmarkPreempt finds victims for a 4×8 leaf:Required gang on a full
// cluster of n nodes whose busy GPUs belong to lower-priority work: each
// node's used GPUs are one pod, and runs of four nodes of a leaf form a
// gang, as after a day of mixed jobs.
func BenchmarkPreempt(b *testing.B) {
	for _, n := range []int{512, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s := benchSnapshot(b, n)
			// As the scheduler's snapshot: one rater per tree, built once.
			rater, err := NewRater(s, 0)
			if err != nil {
				b.Fatal(err)
			}
			s.Rater = rater
			now := time.Unix(0, 0).Add(24 * time.Hour)
			rng := rand.New(rand.NewPCG(7, 0))
			var victims []Victim
			for i, node := range s.Nodes {
				// At most GPUs 0-2 stay free, so no node is free whole.
				node.FreeGPUs &= topology.NewGPUSet(0, 1, 2)
				busy := node.Topology.AllGPUs() &^ node.FreeGPUs
				if busy == 0 {
					continue
				}
				pod := VictimPod{Node: node.Name, GPUs: busy}
				if i%4 != 0 && len(victims) > 0 && rng.IntN(2) == 0 {
					last := &victims[len(victims)-1]
					last.Pods = append(last.Pods, pod)
					continue
				}
				victims = append(victims, Victim{
					Key:      fmt.Sprintf("ns/job-%05d", i),
					Priority: int32(rng.IntN(3)),
					Started:  now.Add(-time.Duration(rng.IntN(600)) * time.Minute),
					Pods:     []VictimPod{pod},
				})
			}
			p := Preemptor{Gang: Gang{Members: 4, GPUsPerMember: 8, Level: lockstep.LevelLeaf, Mode: lockstep.Required}, Priority: 10, Now: now}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Preempt(s, p, victims); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
