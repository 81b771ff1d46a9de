package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func hgxSpec(t testing.TB) *v1alpha1.NodeTopologySpec {
	t.Helper()
	p, ok := topology.LookupProfile("hgx-h100")
	if !ok {
		t.Fatal("no hgx-h100 profile")
	}
	hw, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	spec := v1alpha1.SpecFromTopology(hw, "hgx-h100")
	return &spec
}

// hgxLabels are the labels of an hgx-h100 node under leaf and spine.
func hgxLabels(leaf, spine string) map[string]string {
	return map[string]string{
		lockstep.LabelFabricTier0:      leaf,
		lockstep.LabelFabricTier1:      spine,
		lockstep.LabelNVIDIAGPUProduct: "NVIDIA-H100-80GB-HBM3",
	}
}

func TestSummarizePlacement(t *testing.T) {
	labels := []topology.NodeLabels{
		{Name: "n1", Labels: hgxLabels("leaf-1", "spine-1")},
		{Name: "n2", Labels: hgxLabels("leaf-1", "spine-1")},
		{Name: "n3", Labels: hgxLabels("leaf-2", "spine-1")},
		{Name: "bare", Labels: hgxLabels("leaf-1", "spine-1")},
	}
	spec := hgxSpec(t)
	nodes := map[string]placementNode{"n1": {spec}, "n2": {spec}, "n3": {spec}, "bare": {}}
	nonBlocking := lockstep.DefaultTopologyConfig()
	blocking := lockstep.DefaultTopologyConfig()
	blocking.Oversubscription = map[string]float64{lockstep.LevelSpine: 2}
	full := "0,1,2,3,4,5,6,7"
	cases := []struct {
		name    string
		cfg     lockstep.TopologyConfig
		pods    []placedPod
		want    *v1alpha1.Placement
		wantErr bool
	}{{
		name: "no pods",
	}, {
		name: "one full node",
		pods: []placedPod{{Node: "n1", GPUs: "0,1,2,3"}, {Node: "n1", GPUs: "4,5,6,7"}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1/host=n1", LevelName: "host", Nodes: []string{"n1"}, BusBandwidthMBps: 450000, Efficiency: "1.000",
			Reason: "on one node n1; as fast as the best placement (bus bandwidth 450.0 GB/s)"},
	}, {
		name: "two nodes under one leaf: the absent clique level is not spanned",
		pods: []placedPod{{Node: "n1", GPUs: full}, {Node: "n2", GPUs: full}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"n1", "n2"}, BusBandwidthMBps: 50000, Efficiency: "1.000",
			Reason: "on 2 nodes in leaf leaf-1; as fast as the best placement (bus bandwidth 50.0 GB/s)"},
	}, {
		name: "two nodes across leaves",
		pods: []placedPod{{Node: "n1", GPUs: full}, {Node: "n3", GPUs: full}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1", LevelName: "spine", LevelsSpanned: 2, Nodes: []string{"n1", "n3"}, BusBandwidthMBps: 50000, Efficiency: "0.999",
			Reason: "spans 2 leaves (leaf-1, leaf-2) under spine spine-1; same bus bandwidth (50.0 GB/s) but more hops: latency 180µs against 150µs for the best placement"},
	}, {
		name: "two nodes across leaves under a 2:1 oversubscribed spine: the configuration's oversubscription counts",
		cfg:  blocking,
		pods: []placedPod{{Node: "n1", GPUs: full}, {Node: "n3", GPUs: full}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1", LevelName: "spine", LevelsSpanned: 2, Nodes: []string{"n1", "n3"}, BusBandwidthMBps: 25000, Efficiency: "0.501",
			Reason: "spans 2 leaves (leaf-1, leaf-2) under spine spine-1; crossing the 2:1 oversubscribed spine cuts bus bandwidth from 50.0 to 25.0 GB/s"},
	}, {
		name: "pods without GPU sets: domain only",
		pods: []placedPod{{Node: "n1"}, {Node: "n2"}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"n1", "n2"}},
	}, {
		name: "node without NodeTopology: domain only",
		pods: []placedPod{{Node: "n1", GPUs: "0"}, {Node: "bare", GPUs: "0"}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"bare", "n1"}},
	}, {
		name:    "malformed GPU annotation",
		pods:    []placedPod{{Node: "n1", GPUs: "0,x"}},
		wantErr: true,
	}, {
		name:    "node outside the cluster",
		pods:    []placedPod{{Node: "gone", GPUs: "0"}},
		wantErr: true,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.Levels == nil {
				cfg = nonBlocking
			}
			cluster, err := newPlacementCluster(cfg, labels)
			if err != nil {
				t.Fatal(err)
			}
			got, err := summarizePlacement(tc.pods, nodes, cluster)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("placement (-want,+got):\n%s", diff)
			}
		})
	}
}

// Pods that ask for no GPUs (an MPI launcher, often on a CPU-only node)
// are not in the scheduler's plans nor their rating: the summary rates the
// pods with GPUs and needs no NodeTopology for the others' nodes, while the
// domain and nodes still cover the whole gang.
func TestSummarizePlacementLeavesPodsWithoutGPUsUnrated(t *testing.T) {
	cpuLabels := func(leaf, spine string) map[string]string {
		return map[string]string{lockstep.LabelFabricTier0: leaf, lockstep.LabelFabricTier1: spine}
	}
	labels := []topology.NodeLabels{
		{Name: "n1", Labels: hgxLabels("leaf-1", "spine-1")},
		{Name: "n2", Labels: hgxLabels("leaf-1", "spine-1")},
		{Name: "cpu-1", Labels: cpuLabels("leaf-1", "spine-1")},
		{Name: "cpu-2", Labels: cpuLabels("leaf-2", "spine-1")},
	}
	spec := hgxSpec(t)
	// The CPU nodes have no NodeTopology: no agent runs there.
	nodes := map[string]placementNode{"n1": {Topology: spec}, "n2": {Topology: spec}}
	full := "0,1,2,3,4,5,6,7"
	oneLeaf := "on 2 nodes in leaf leaf-1; as fast as the best placement (bus bandwidth 50.0 GB/s)"
	cases := []struct {
		name string
		pods []placedPod
		want *v1alpha1.Placement
	}{{
		name: "launcher on a CPU node of the workers' leaf",
		pods: []placedPod{{Node: "cpu-1", NoGPUs: true}, {Node: "n1", GPUs: full}, {Node: "n2", GPUs: full}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"cpu-1", "n1", "n2"},
			BusBandwidthMBps: 50000, Efficiency: "1.000", Reason: oneLeaf},
	}, {
		name: "launcher on a CPU node of another leaf: the domain spans it, the rating is the workers'",
		pods: []placedPod{{Node: "cpu-2", NoGPUs: true}, {Node: "n1", GPUs: full}, {Node: "n2", GPUs: full}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1", LevelName: "spine", LevelsSpanned: 2, Nodes: []string{"cpu-2", "n1", "n2"},
			BusBandwidthMBps: 50000, Efficiency: "1.000", Reason: oneLeaf},
	}, {
		name: "launcher beside a worker on a GPU node",
		pods: []placedPod{{Node: "n1", NoGPUs: true}, {Node: "n1", GPUs: full}, {Node: "n2", GPUs: full}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"n1", "n2"},
			BusBandwidthMBps: 50000, Efficiency: "1.000", Reason: oneLeaf},
	}, {
		name: "a pod asking for GPUs without a GPU set still leaves the rating out",
		pods: []placedPod{{Node: "cpu-1", NoGPUs: true}, {Node: "n1", GPUs: full}, {Node: "n2"}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"cpu-1", "n1", "n2"}},
	}, {
		name: "no pod asks for GPUs: domain only",
		pods: []placedPod{{Node: "cpu-1", NoGPUs: true}, {Node: "cpu-2", NoGPUs: true}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1", LevelName: "spine", LevelsSpanned: 2, Nodes: []string{"cpu-1", "cpu-2"}},
	}}
	cluster, err := newPlacementCluster(lockstep.DefaultTopologyConfig(), labels)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := summarizePlacement(tc.pods, nodes, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("placement (-want,+got):\n%s", diff)
			}
		})
	}
}
