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

// benchPlace times Place of g on s, reporting the plan's efficiency and
// nodes beside the time and allocations.
func benchPlace(b *testing.B, s *Snapshot, g Gang) {
	b.Helper()
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
}

// BenchmarkPlace plans gangs of 8-GPU members, with no constraint so the
// search climbs every level it must.
func BenchmarkPlace(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s := benchSnapshot(b, n)
			for _, gpus := range []int{8, 64, 512} {
				b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
					benchPlace(b, s, Gang{Members: gpus / 8, GPUsPerMember: 8, MilliCPUPerMember: 16_000, MemoryPerMember: 64 << 30})
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

// gb200Snapshot is a partially occupied GB200 NVL72 cluster of n compute
// trays (4 GPUs each; 25,000 is 100,000 GPUs): 18 trays per NVLink clique
// (one rack), 4 cliques per leaf, 16 leaves per spine and 8 spines per
// block. A third of the racks are idle, a third full and the rest hold a
// random number of busy GPUs (0 to 4) per tray, as a cluster mid-day whose
// big jobs own whole racks. The seed is fixed so runs compare.
func gb200Snapshot(b *testing.B, n int) *Snapshot {
	b.Helper()
	const perClique, perLeaf, perSpine, perBlock = 18, 4, 16, 8
	p, _ := topology.LookupProfile("gb200-nvl72")
	proto, err := p.Node()
	if err != nil {
		b.Fatal(err)
	}
	sel, err := topology.NewSelector(proto)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(27, 0))
	nodes := make([]*Node, n)
	labels := make([]topology.NodeLabels, n)
	var rack *topology.NodeTopology
	var busy int
	for i := range n {
		clique := i / perClique
		if i%perClique == 0 {
			// The trays of a rack share one NVLink domain.
			r := *proto
			nv := *proto.NVLinkDomain
			nv.ClusterUUID, nv.CliqueID = "nvl72", uint32(clique)
			r.NVLinkDomain = &nv
			rack, busy = &r, rng.IntN(3)
		}
		used := 0
		switch busy {
		case 1:
			used = p.GPUCount
		case 2:
			used = rng.IntN(p.GPUCount + 1)
		}
		var taken topology.GPUSet
		for _, g := range rng.Perm(p.GPUCount)[:used] {
			taken |= topology.NewGPUSet(g)
		}
		name := fmt.Sprintf("gb200-%05d", i)
		nodes[i] = &Node{
			Name:         name,
			Topology:     rack,
			Selector:     sel,
			FreeGPUs:     rack.AllGPUs() &^ taken,
			FreeMilliCPU: int64(p.CPUs-used*p.CPUs/p.GPUCount) * 1000,
			FreeMemory:   int64(p.MemoryGiB-used*p.MemoryGiB/p.GPUCount) << 30,
			FreePods:     110 - used,
		}
		leaf := clique / perLeaf
		spine := leaf / perSpine
		labels[i] = topology.NodeLabels{Name: name, Labels: map[string]string{
			lockstep.LabelGPUClique:   rack.NVLinkDomain.Label(),
			lockstep.LabelFabricTier0: fmt.Sprintf("leaf-%04d", leaf),
			lockstep.LabelFabricTier1: fmt.Sprintf("spine-%03d", spine),
			lockstep.LabelFabricTier2: fmt.Sprintf("block-%02d", spine/perBlock),
		}}
	}
	tree, err := topology.NewTree(lockstep.DefaultLevels(), labels)
	if err != nil {
		b.Fatal(err)
	}
	s := &Snapshot{
		Tree:   tree,
		Nodes:  nodes,
		Fabric: topology.Fabric{Oversubscription: map[string]float64{"spine": 2, "block": 4}},
		Levels: lockstep.DefaultLevels(),
	}
	// As the scheduler's snapshot: one rater per tree, built once.
	if s.Rater, err = NewRater(s, 0); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkPlaceGB200 plans gangs of 4-GPU members on the GB200 NVL72 model
// at 5,000 and 25,000 trays (100,000 GPUs), each at the level a job of its
// size names, one widening allowed (Widen 1) so the search climbs past the
// base level as a gang that waited does; the largest names none. Allocations
// per plan are not to grow with the cluster.
func BenchmarkPlaceGB200(b *testing.B) {
	gangs := []struct {
		gpus  int
		level string
	}{
		{8, lockstep.LevelClique},
		{64, lockstep.LevelClique},
		{512, lockstep.LevelLeaf},
		{2048, lockstep.LevelSpine},
		{4096, ""},
	}
	for _, n := range []int{5000, 25000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s := gb200Snapshot(b, n)
			for _, gang := range gangs {
				b.Run(fmt.Sprintf("gpus=%d", gang.gpus), func(b *testing.B) {
					g := Gang{Members: gang.gpus / 4, GPUsPerMember: 4, MilliCPUPerMember: 100_000, MemoryPerMember: 512 << 30, Level: gang.level}
					if g.Level != "" {
						g.Mode, g.Widen = lockstep.Preferred, 1
					}
					benchPlace(b, s, g)
				})
			}
		})
	}
}

// booksBench books a 1,000-pod gang of 1-GPU members on the first 125
// of nodes nodes (8 per node), every slot reserved, beside 8 single-GPU
// pods outside gangs on each of the other nodes: 40,000 pods on 5,000
// nodes, as a big cluster where one gang restarts.
func booksBench(nodes int) (*Books, *Plan) {
	const perNode, gangPods = 8, 1000
	bk := NewBooks()
	plan := &Plan{Members: make([]Assignment, gangPods)}
	for i := range plan.Members {
		plan.Members[i] = Assignment{Node: fmt.Sprintf("node-%05d", i/perNode), GPUs: topology.NewGPUSet(i % perNode)}
	}
	for n := gangPods / perNode; n < nodes; n++ {
		for g := range perNode {
			bk.Assign(fmt.Sprintf("pod-%05d-%d", n, g), fmt.Sprintf("node-%05d", n), topology.NewGPUSet(g))
		}
	}
	return bk, plan
}

// BenchmarkBooksForget forgets a 1,000-pod gang pod by pod in a 40,000-pod
// cluster (5,000 nodes × 8 pods), as a gang restart does under the
// scheduler's books lock. One op is the whole gang.
func BenchmarkBooksForget(b *testing.B) {
	bk, plan := booksBench(5000)
	pods := make([]string, len(plan.Members))
	for i := range pods {
		pods[i] = fmt.Sprintf("gang-pod-%04d", i)
	}
	now := time.Unix(0, 0)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		bk.Add("ns/gang", plan, now)
		for i, m := range plan.Members {
			if _, ok := bk.ReserveSlot("ns/gang", pods[i], m.Node, i); !ok {
				b.Fatalf("pod %d did not reserve", i)
			}
		}
		b.StartTimer()
		for _, pod := range pods {
			bk.ForgetPod(pod)
		}
	}
	if _, ok := bk.Get("ns/gang"); ok {
		b.Fatal("the gang's complete plan outlived its pods")
	}
}

// heldBench books a 512-member plan of 4-GPU members, two per node of
// 256 nodes of an 8-GPU cluster, with its first half reserved.
func heldBench(b *testing.B) (*Held, []string) {
	b.Helper()
	bk := NewBooks()
	plan := &Plan{Members: make([]Assignment, 512)}
	nodes := make([]string, 0, 256)
	for i := range plan.Members {
		node := fmt.Sprintf("node-%05d", i/2)
		if i%2 == 0 {
			nodes = append(nodes, node)
		}
		plan.Members[i] = Assignment{Node: node, GPUs: topology.NewGPUSet(4*(i%2), 4*(i%2)+1, 4*(i%2)+2, 4*(i%2)+3)}
	}
	h := bk.Add("ns/gang", plan, time.Unix(0, 0))
	for i, m := range plan.Members[:256] {
		if _, ok := bk.Reserve("ns/gang", fmt.Sprintf("pod-%d", i), m.Node); !ok {
			b.Fatalf("member %d did not reserve", i)
		}
	}
	return h, nodes
}

// BenchmarkHeldOpenSlotsOn asks for the open slots on every node of a
// 512-member plan, as Filter and Score do per node.
func BenchmarkHeldOpenSlotsOn(b *testing.B) {
	h, nodes := heldBench(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, node := range nodes {
			_ = len(h.OpenSlotsOn(node))
		}
	}
}

// BenchmarkHeldOpenNodes lists a 512-member plan's open nodes, as
// PreFilter does per member.
func BenchmarkHeldOpenNodes(b *testing.B) {
	h, _ := heldBench(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = h.OpenNodes()
	}
}
