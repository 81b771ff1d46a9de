package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// TestRatingAgreesEverywhere places gangs with the scheduler's planner and
// rates the resulting placement the three ways it is reported: the plan
// (PodGroup annotations), the controller's status.placement and the bench's
// PlacementEfficiency. All three call topology.Rater.Rate, so they must
// agree on the efficiency, and the plan and status on domain and reason.
//
// The cluster, under the default levels (block absent):
//
//	spine s1: leaf l1 (n1, n2 hgx-h100; m1 a100-pcie-nvlink), leaf l2 (n3, n4)
//	spine s2: leaf l3 (g1, g2 gb200 in clique c1; g3, g4 in clique c2)
func TestRatingAgreesEverywhere(t *testing.T) {
	type clusterNode struct{ name, profile, clique, leaf, spine string }
	cluster := []clusterNode{
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
	hw := map[string]*topology.NodeTopology{}
	var labelled []topology.NodeLabels
	var benchNodes []bench.Node
	for _, n := range cluster {
		l := map[string]string{lockstep.LabelFabricTier0: n.leaf, lockstep.LabelFabricTier1: n.spine, lockstep.LabelProfile: n.profile}
		p, _ := topology.LookupProfile(n.profile)
		node, err := p.Node()
		if err != nil {
			t.Fatal(err)
		}
		if n.clique != "" {
			l[lockstep.LabelGPUClique] = n.clique
			// As the bench models it: the clique label names the domain.
			node.NVLinkDomain.ClusterUUID, node.NVLinkDomain.CliqueID = n.clique, 0
		}
		hw[n.name] = node
		labelled = append(labelled, topology.NodeLabels{Name: n.name, Labels: l})
		benchNodes = append(benchNodes, bench.Node{Name: n.name, Labels: l, Profile: n.profile})
	}
	tree, err := topology.NewTree(lockstep.DefaultLevels(), labelled)
	if err != nil {
		t.Fatal(err)
	}
	spine2to1 := map[string]float64{lockstep.LevelSpine: 2}

	cases := []struct {
		name string
		over map[string]float64
		// free are the GPUs free on each node: the planner has no other
		// choice than the placement under test.
		free        map[string]topology.GPUSet
		members     int
		gpusPerNode int
		want        string // the efficiency all three report
	}{
		{name: "one node", free: map[string]topology.GPUSet{"n1": topology.AllGPUs(8)}, members: 1, gpusPerNode: 8, want: "1.000"},
		{name: "one leaf", free: map[string]topology.GPUSet{"n1": topology.AllGPUs(8), "n2": topology.AllGPUs(8)}, members: 2, gpusPerNode: 8, want: "1.000"},
		{name: "two leaves, non-blocking", free: map[string]topology.GPUSet{"n1": topology.AllGPUs(8), "n3": topology.AllGPUs(8)}, members: 2, gpusPerNode: 8, want: "0.999"},
		{name: "two leaves under a 2:1 spine", over: spine2to1, free: map[string]topology.GPUSet{"n1": topology.AllGPUs(8), "n3": topology.AllGPUs(8)}, members: 2, gpusPerNode: 8, want: "0.501"},
		{name: "bigger than a leaf, placed perfectly under a 2:1 spine", over: spine2to1,
			free: map[string]topology.GPUSet{"n1": topology.AllGPUs(8), "n2": topology.AllGPUs(8), "n3": topology.AllGPUs(8)}, members: 3, gpusPerNode: 8, want: "1.000"},
		{name: "GB200 inside one clique", free: map[string]topology.GPUSet{"g1": topology.AllGPUs(4), "g2": topology.AllGPUs(4)}, members: 2, gpusPerNode: 4, want: "1.000"},
		{name: "GB200 split across two cliques", free: map[string]topology.GPUSet{"g1": topology.AllGPUs(4), "g3": topology.AllGPUs(4)}, members: 2, gpusPerNode: 4, want: "0.056"},
		// 4 GPUs each of hgx-h100 and a100-pcie-nvlink: the tie goes to the
		// first profile by name, the A100's NICs are the bottleneck.
		{name: "mixed profiles", free: map[string]topology.GPUSet{"n1": topology.AllGPUs(4), "m1": topology.AllGPUs(4)}, members: 2, gpusPerNode: 4, want: "0.893"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := lockstep.TopologyConfig{Levels: lockstep.DefaultLevels(), Oversubscription: tc.over}

			// The scheduler: plan on a snapshot of every node.
			snap := &placement.Snapshot{Tree: tree, Fabric: topology.Fabric{Oversubscription: tc.over}, Levels: cfg.Levels}
			for _, n := range cluster {
				sel, err := topology.NewSelector(hw[n.name])
				if err != nil {
					t.Fatal(err)
				}
				snap.Nodes = append(snap.Nodes, &placement.Node{Name: n.name, Topology: hw[n.name], Selector: sel, FreeGPUs: tc.free[n.name],
					FreeMilliCPU: 1e6, FreeMemory: 1 << 40, FreePods: 100})
			}
			plan, err := placement.Place(snap, placement.Gang{Members: tc.members, GPUsPerMember: tc.gpusPerNode}, placement.Options{})
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			for _, a := range plan.Members {
				if a.GPUs != tc.free[a.Node] {
					t.Fatalf("plan put GPUs %v on %s, want the free %v", a.GPUs, a.Node, tc.free[a.Node])
				}
			}

			// The controller and the bench rate the plan's placement.
			var pods []placedPod
			var runs []bench.PodRun
			nodes := map[string]placementNode{}
			for i, a := range plan.Members {
				pods = append(pods, placedPod{Node: a.Node, GPUs: a.GPUs.List()})
				runs = append(runs, bench.PodRun{Name: string(rune('a' + i)), Node: a.Node, GPUs: a.GPUs})
				spec := v1alpha1.SpecFromTopology(hw[a.Node], "")
				nodes[a.Node] = placementNode{Topology: &spec}
			}
			pc, err := newPlacementCluster(cfg, labelled)
			if err != nil {
				t.Fatal(err)
			}
			status, err := summarizePlacement(pods, nodes, pc)
			if err != nil {
				t.Fatal(err)
			}
			benchEff, err := bench.PlacementEfficiency(bench.Cluster{Name: "agreement", Nodes: benchNodes, Levels: cfg.Levels, Fabric: snap.Fabric}, runs)
			if err != nil {
				t.Fatal(err)
			}

			type report struct{ Efficiency, Domain, Reason string }
			want := report{Efficiency: tc.want, Domain: plan.Domain.DisplayID(), Reason: plan.Explanation}
			if diff := cmp.Diff(want, report{status.Efficiency, status.Domain, status.Reason}); diff != "" {
				t.Errorf("controller status.placement vs the plan (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, lockstep.FormatEfficiency(plan.Efficiency)); diff != "" {
				t.Errorf("plan efficiency (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(plan.Efficiency, benchEff); diff != "" {
				t.Errorf("bench PlacementEfficiency vs the plan's (-plan,+bench):\n%s", diff)
			}
		})
	}
}
