package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func hgxNode(t *testing.T, leaf, spine string) placementNode {
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
	return placementNode{
		Labels:   map[string]string{lockstep.LabelFabricTier0: leaf, lockstep.LabelFabricTier1: spine},
		Topology: &spec,
	}
}

func TestSummarizePlacement(t *testing.T) {
	nodes := map[string]placementNode{
		"n1":   hgxNode(t, "leaf-1", "spine-1"),
		"n2":   hgxNode(t, "leaf-1", "spine-1"),
		"n3":   hgxNode(t, "leaf-2", "spine-1"),
		"bare": {Labels: map[string]string{lockstep.LabelFabricTier0: "leaf-1", lockstep.LabelFabricTier1: "spine-1"}},
	}
	cases := []struct {
		name    string
		pods    []placedPod
		want    *v1alpha1.Placement
		wantErr bool
	}{{
		name: "no pods",
	}, {
		name: "one full node",
		pods: []placedPod{{Node: "n1", GPUs: "0,1,2,3"}, {Node: "n1", GPUs: "4,5,6,7"}},
		want: &v1alpha1.Placement{Domain: "n1", LevelName: "host", Nodes: []string{"n1"}, BusBandwidthMBps: 450000, Efficiency: "1.00"},
	}, {
		name: "two nodes under one leaf",
		pods: []placedPod{{Node: "n1", GPUs: "0,1,2,3,4,5,6,7"}, {Node: "n2", GPUs: "0,1,2,3,4,5,6,7"}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 2, Nodes: []string{"n1", "n2"}, BusBandwidthMBps: 50000, Efficiency: "1.00"},
	}, {
		name: "two nodes across leaves",
		pods: []placedPod{{Node: "n1", GPUs: "0,1,2,3,4,5,6,7"}, {Node: "n3", GPUs: "0,1,2,3,4,5,6,7"}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1", LevelName: "spine", LevelsSpanned: 3, Nodes: []string{"n1", "n3"}, BusBandwidthMBps: 50000, Efficiency: "1.00"},
	}, {
		name: "pods without GPU sets: domain only",
		pods: []placedPod{{Node: "n1"}, {Node: "n2"}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 2, Nodes: []string{"n1", "n2"}},
	}, {
		name: "node without NodeTopology: domain only",
		pods: []placedPod{{Node: "n1", GPUs: "0"}, {Node: "bare", GPUs: "0"}},
		want: &v1alpha1.Placement{Domain: "spine=spine-1/leaf=leaf-1", LevelName: "leaf", LevelsSpanned: 2, Nodes: []string{"bare", "n1"}},
	}, {
		name:    "malformed GPU annotation",
		pods:    []placedPod{{Node: "n1", GPUs: "0,x"}},
		wantErr: true,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := summarizePlacement(tc.pods, nodes, lockstep.DefaultLevels())
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("placement (-want,+got):\n%s", diff)
			}
		})
	}
}
