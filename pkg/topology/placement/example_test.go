package placement_test

import (
	"errors"
	"fmt"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

func ExamplePlace() {
	p, _ := topology.LookupProfile("hgx-h100")
	node, _ := p.Node()
	sel, _ := topology.NewSelector(node)

	// Leaf l1 has two free nodes; leaf l2 has one free node and one with
	// GPUs 0-3 busy.
	var nodes []*placement.Node
	var labels []topology.NodeLabels
	for _, n := range []struct {
		name, leaf string
		free       topology.GPUSet
	}{
		{"a1", "l1", node.AllGPUs()},
		{"a2", "l1", node.AllGPUs()},
		{"b1", "l2", node.AllGPUs()},
		{"b2", "l2", topology.NewGPUSet(4, 5, 6, 7)},
	} {
		nodes = append(nodes, &placement.Node{
			Name: n.name, Topology: node, Selector: sel, FreeGPUs: n.free,
			FreeMilliCPU: 200_000, FreeMemory: 1 << 40, FreePods: 100,
		})
		labels = append(labels, topology.NodeLabels{Name: n.name, Labels: map[string]string{lockstep.LabelFabricTier0: n.leaf}})
	}
	tree, _ := topology.NewTree(lockstep.DefaultLevels(), labels)
	s := &placement.Snapshot{Tree: tree, Nodes: nodes}

	// Three members of 4 GPUs fit either leaf; l2 is the tighter fit.
	plan, _ := placement.Place(s, placement.Gang{Members: 3, GPUsPerMember: 4, Level: "leaf", Mode: lockstep.Required}, placement.Options{})
	fmt.Println(plan.LevelName, plan.Members)

	// Three members of 8 GPUs fit no leaf.
	_, err := placement.Place(s, placement.Gang{Members: 3, GPUsPerMember: 8, Level: "leaf", Mode: lockstep.Required}, placement.Options{})
	var u *placement.Unschedulable
	if errors.As(err, &u) {
		fmt.Println(u.Reason)
	}
	// Output:
	// leaf [{b1 {0,1,2,3}} {b1 {4,5,6,7}} {b2 {4,5,6,7}}]
	// gang of 3 x 8 GPUs does not fit in any leaf (fabric.topograph.run/tier-0): the best leaf has room for 2 members (16 of 24 GPUs free); Required constraint; it would fit in the cluster
}
