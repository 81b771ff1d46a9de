package bench

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestPlacementEfficiency(t *testing.T) {
	spine2to1 := hgxCluster(16, 8, 2)
	nonBlocking := hgxCluster(16, 8, 1)
	hgx32 := hgxCluster(32, 8, 2)
	var hgx32Gang []PodRun
	for _, n := range hgx32.Nodes {
		hgx32Gang = append(hgx32Gang, pod("p-"+n.Name, n.Name, all8, 1, 0))
	}
	tests := []struct {
		name    string
		cluster Cluster
		pods    []PodRun
		want    float64
	}{
		{
			name:    "8 GPUs on one node",
			cluster: spine2to1,
			pods:    []PodRun{pod("p0", "n00", all8, 1, 0)},
			want:    1,
		},
		{
			name:    "two pods sharing a node",
			cluster: spine2to1,
			pods:    []PodRun{pod("p0", "n03", topology.NewGPUSet(0, 1, 2, 3), 1, 0), pod("p1", "n03", topology.NewGPUSet(4, 5, 6, 7), 1, 0)},
			want:    1,
		},
		{
			name:    "16 GPUs on two nodes of one leaf",
			cluster: spine2to1,
			pods:    []PodRun{pod("p0", "n00", all8, 1, 0), pod("p1", "n07", all8, 1, 0)},
			want:    1,
		},
		{
			// Best (one leaf): B = 50 GB/s, L = 2·15·5 µs, t = 40,415,318 ns.
			// Actual (across the 2:1 spine): B = 50/2 = 25 GB/s,
			// L = 2·15·6 µs = 180 µs, t = 180 µs + 80,530,636.8 ns
			// = 80,710,637 ns (the case of cost_test.go).
			name:    "16 GPUs across leaves of a 2:1 spine",
			cluster: spine2to1,
			pods:    []PodRun{pod("p0", "n00", all8, 1, 0), pod("p1", "n08", all8, 1, 0)},
			want:    40_415_318.0 / 80_710_637.0,
		},
		{
			// Only the latency of the second tier: L = 2·15·6 µs = 180 µs,
			// t = 180 µs + 40,265,318 ns = 40,445,318 ns.
			name:    "16 GPUs across leaves of a non-blocking spine",
			cluster: nonBlocking,
			pods:    []PodRun{pod("p0", "n00", all8, 1, 0), pod("p1", "n08", all8, 1, 0)},
			want:    40_415_318.0 / 40_445_318.0,
		},
		{
			// Best: both on one node, B = 450 GB/s, L = 2·1·1 µs,
			// 2·1/2 · 2^30 / 450e9 = 2,386,092.9 ns, t = 2,388,093 ns.
			// Actual: one GPU on each of two nodes of a leaf, B = 50 GB/s,
			// L = 2·1·5 µs, 2^30 / 50e9 = 21,474,836.5 ns, t = 21,484,836 ns
			// (rounded half to even by math.Round of .48).
			name:    "2 GPUs split over two nodes",
			cluster: spine2to1,
			pods:    []PodRun{pod("p0", "n00", topology.NewGPUSet(0), 1, 0), pod("p1", "n01", topology.NewGPUSet(3), 1, 0)},
			want:    2_388_093.0 / 21_484_836.0,
		},
		{
			// No leaf holds 32 nodes, so the reference crosses the spine too,
			// at B = 25 GB/s and at the spine's switch tier (L = 2·255·6 µs):
			// the gang fills the spine as well as it can and rates 1. (The
			// bench's reference used to sit at tier 1, so the extra tier's
			// latency rated it 0.994.)
			name:    "256 GPUs on a 32-node cluster with 2:1 spine",
			cluster: hgx32,
			pods:    hgx32Gang,
			want:    1,
		},
		{
			name:    "8 GB200 GPUs on two trays of one NVL72 clique",
			cluster: gb200Cluster(),
			pods:    []PodRun{pod("p0", "r0-00", topology.AllGPUs(4), 1, 0), pod("p1", "r0-17", topology.AllGPUs(4), 1, 0)},
			want:    1,
		},
		{
			// Best: one clique, B = 900 GB/s NVLink, L = 2·7·1 µs = 14 µs,
			// 2·7/8 · 2^30 / 900e9 = 2,087,831.3 ns, t = 2,101,831 ns.
			// Actual: two racks meet at the spine, B = 400 Gb/s / 8 = 50 GB/s,
			// L = 2·7·6 µs = 84 µs, 2·7/8 · 2^30 / 50e9 = 37,580,963.8 ns,
			// t = 37,664,964 ns.
			name:    "8 GB200 GPUs on two racks",
			cluster: gb200Cluster(),
			pods:    []PodRun{pod("p0", "r0-00", topology.AllGPUs(4), 1, 0), pod("p1", "r1-00", topology.AllGPUs(4), 1, 0)},
			want:    2_101_831.0 / 37_664_964.0,
		},
		{
			name:    "one GPU",
			cluster: spine2to1,
			pods:    []PodRun{pod("p0", "n00", topology.NewGPUSet(5), 1, 0)},
			want:    1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlacementEfficiency(tc.cluster, tc.pods)
			mustNoError(t, err)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PlacementEfficiency (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPlacementEfficiencyErrors(t *testing.T) {
	c := hgxCluster(2, 8, 1)
	badProfile := hgxCluster(2, 8, 1)
	badProfile.Nodes[1].Profile = "tpu-v5"
	badLevels := hgxCluster(2, 8, 1)
	badLevels.Levels = append(badLevels.Levels, topology.Level{Name: "leaf", LabelKey: "x"})
	tests := []struct {
		name       string
		cluster    Cluster
		pods       []PodRun
		want       string
		unmodelled bool
	}{
		{"no pods", c, nil, "no pods to rate", false},
		{"unbound pod", c, []PodRun{pod("p0", "n00", all8, 1, 0), unbound("p1")}, "pod p1 is not bound to a node", false},
		{"unknown node", c, []PodRun{pod("p0", "n99", all8, 1, 0)}, `pod p0 is bound to node n99, which is not in cluster "test"`, false},
		{"unknown GPU set", c, []PodRun{pod("p0", "n00", all8, 1, 0), pod("p1", "n01", 0, 1, 0)}, "pod p1 on node n01: GPU set unknown", true},
		{"GPU beyond the node", c, []PodRun{pod("p0", "n00", topology.NewGPUSet(7, 8, 9), 1, 0)}, "pod p0: GPUs {8,9} are not among the 8 GPUs of node n00", false},
		{"GPUs claimed twice", c, []PodRun{pod("p0", "n00", topology.NewGPUSet(0, 1), 1, 0), pod("p1", "n00", topology.NewGPUSet(1, 2), 1, 0)},
			"pod p1: GPUs {1} of node n00 are also another pod's of the job", false},
		{"unknown profile", badProfile, []PodRun{pod("p0", "n00", all8, 1, 0)}, `node n01: profile "tpu-v5" is not built in: use one of [a100-pcie-nvlink dgx1-v100 gb200-nvl72 hgx-h100 l40s-pcie]`, false},
		{"invalid levels", badLevels, []PodRun{pod("p0", "n00", all8, 1, 0)}, `cluster "test": building the domain tree: invalid levels: levels[2].name "leaf" is used twice`, false},
		{"no nodes", Cluster{Name: "empty"}, []PodRun{pod("p0", "n00", all8, 1, 0)}, `cluster "empty" has no nodes`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PlacementEfficiency(tc.cluster, tc.pods)
			if err == nil {
				t.Fatalf("PlacementEfficiency succeeded, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("PlacementEfficiency error = %q, want it to contain %q", err, tc.want)
			}
			if got := errors.Is(err, ErrUnmodelled); got != tc.unmodelled {
				t.Errorf("errors.Is(err, ErrUnmodelled) = %v, want %v", got, tc.unmodelled)
			}
		})
	}
}
