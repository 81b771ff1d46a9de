package topology_test

import (
	"fmt"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func ExampleSelector_Best() {
	p, _ := topology.LookupProfile("dgx1-v100")
	node, _ := p.Node()
	sel, _ := topology.NewSelector(node)

	// GPUs 0 and 4 are taken; pick the best 2 of the rest.
	free := node.AllGPUs() &^ topology.NewGPUSet(0, 4)
	set, q, ok := sel.Best(free, 2)
	fmt.Println(set, q.BottleneckGBps, ok)
	// Output: {1,2} 50 true
}

func ExampleEstimateAllReduce() {
	p, _ := topology.LookupProfile("hgx-h100")
	node, _ := p.Node()
	tree, _ := topology.NewTree(lockstep.DefaultLevels(), []topology.NodeLabels{
		{Name: "a", Labels: map[string]string{lockstep.LabelFabricTier0: "leaf-1", lockstep.LabelFabricTier1: "spine-1"}},
		{Name: "b", Labels: map[string]string{lockstep.LabelFabricTier0: "leaf-2", lockstep.LabelFabricTier1: "spine-1"}},
	})
	fabric := topology.Fabric{Oversubscription: map[string]float64{"spine": 2}}

	actual, _ := topology.EstimateAllReduce([]topology.Member{
		{Node: node, GPUs: node.AllGPUs(), Path: tree.Path("a")},
		{Node: node, GPUs: node.AllGPUs(), Path: tree.Path("b")},
	}, 1<<30, fabric)
	best, _ := topology.BestAllReduce(p, 16, 1<<30, lockstep.DefaultLevels(), fabric)

	fmt.Printf("%s %v %.0f GB/s, efficiency %.2f\n", actual.LevelName, actual.Time, actual.BottleneckGBps, topology.Efficiency(best, actual))
	// Output: spine 80.710637ms 25 GB/s, efficiency 0.50
}
