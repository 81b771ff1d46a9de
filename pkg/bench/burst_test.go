package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGangBurst(t *testing.T) {
	got := GangBurst(8, 8)
	want := []BurstJob{{2, 8}, {4, 8}, {4, 8}, {8, 8}, {8, 8}, {16, 8}, {2, 8}, {4, 8}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GangBurst(8, 8) (-want,+got):\n%s", diff)
	}
}

func TestMixedBurst(t *testing.T) {
	tests := []struct {
		name        string
		nodes       int
		gpusPerNode int
		// mix is the histogram of job sizes.
		mix     []BurstBucket
		wantErr bool
	}{
		{
			// gb200-100k.yaml: gangs of 8 to 4,096 GPUs, 4,096 GPUs in each
			// size, beside 4,032 single-pod jobs of 1 to 4 GPUs.
			name: "100k GPUs of GB200", nodes: 25200, gpusPerNode: 4,
			mix: []BurstBucket{
				{GPUs: 1, Jobs: 1008, Pods: 1008}, {GPUs: 2, Jobs: 1008, Pods: 1008}, {GPUs: 3, Jobs: 1008, Pods: 1008}, {GPUs: 4, Jobs: 1008, Pods: 1008},
				{GPUs: 8, Jobs: 512, Pods: 1024}, {GPUs: 16, Jobs: 256, Pods: 1024}, {GPUs: 32, Jobs: 128, Pods: 1024}, {GPUs: 64, Jobs: 64, Pods: 1024},
				{GPUs: 128, Jobs: 32, Pods: 1024}, {GPUs: 256, Jobs: 16, Pods: 1024}, {GPUs: 512, Jobs: 8, Pods: 1024}, {GPUs: 1024, Jobs: 4, Pods: 1024},
				{GPUs: 2048, Jobs: 2, Pods: 1024}, {GPUs: 4096, Jobs: 1, Pods: 1024},
			},
		},
		{
			// Twice the nodes: the largest gang stays 4,096 GPUs.
			name: "200k GPUs of GB200", nodes: 50400, gpusPerNode: 4,
			mix: []BurstBucket{
				{GPUs: 1, Jobs: 2016, Pods: 2016}, {GPUs: 2, Jobs: 2016, Pods: 2016}, {GPUs: 3, Jobs: 2016, Pods: 2016}, {GPUs: 4, Jobs: 2016, Pods: 2016},
				{GPUs: 8, Jobs: 512, Pods: 1024}, {GPUs: 16, Jobs: 256, Pods: 1024}, {GPUs: 32, Jobs: 128, Pods: 1024}, {GPUs: 64, Jobs: 64, Pods: 1024},
				{GPUs: 128, Jobs: 32, Pods: 1024}, {GPUs: 256, Jobs: 16, Pods: 1024}, {GPUs: 512, Jobs: 8, Pods: 1024}, {GPUs: 1024, Jobs: 4, Pods: 1024},
				{GPUs: 2048, Jobs: 2, Pods: 1024}, {GPUs: 4096, Jobs: 1, Pods: 1024},
			},
		},
		{
			// 1,000 trays: 440 nodes for gangs hold the classes up to 256
			// GPUs (384 nodes), not up to 512 (896).
			name: "a thousand trays", nodes: 1000, gpusPerNode: 4,
			mix: []BurstBucket{
				{GPUs: 1, Jobs: 40, Pods: 40}, {GPUs: 2, Jobs: 40, Pods: 40}, {GPUs: 3, Jobs: 40, Pods: 40}, {GPUs: 4, Jobs: 40, Pods: 40},
				{GPUs: 8, Jobs: 32, Pods: 64}, {GPUs: 16, Jobs: 16, Pods: 64}, {GPUs: 32, Jobs: 8, Pods: 64}, {GPUs: 64, Jobs: 4, Pods: 64},
				{GPUs: 128, Jobs: 2, Pods: 64}, {GPUs: 256, Jobs: 1, Pods: 64},
			},
		},
		{
			// 8-GPU nodes: an 8-GPU gang is one pod; 44 nodes for gangs
			// hold the classes up to 64 GPUs (32 nodes).
			name: "HGX", nodes: 100, gpusPerNode: 8,
			mix: []BurstBucket{
				{GPUs: 1, Jobs: 2, Pods: 2}, {GPUs: 2, Jobs: 2, Pods: 2}, {GPUs: 3, Jobs: 2, Pods: 2}, {GPUs: 4, Jobs: 2, Pods: 2},
				{GPUs: 5, Jobs: 2, Pods: 2}, {GPUs: 6, Jobs: 2, Pods: 2}, {GPUs: 7, Jobs: 2, Pods: 2},
				// Eight one-pod gangs and two single-pod jobs.
				{GPUs: 8, Jobs: 10, Pods: 10},
				{GPUs: 16, Jobs: 4, Pods: 8}, {GPUs: 32, Jobs: 2, Pods: 8}, {GPUs: 64, Jobs: 1, Pods: 8},
			},
		},
		{name: "too small for a gang", nodes: 3, gpusPerNode: 4, wantErr: true},
		{name: "GPUs per node not a power of two", nodes: 25200, gpusPerNode: 6, wantErr: true},
		{name: "more GPUs per node than the smallest gang", nodes: 25200, gpusPerNode: 16, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := MixedBurst(tc.nodes, tc.gpusPerNode)
			if (err != nil) != tc.wantErr {
				t.Fatalf("MixedBurst(%d, %d) error %v, want error %t", tc.nodes, tc.gpusPerNode, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.mix, BurstMix(jobs)); diff != "" {
				t.Errorf("mix (-want,+got):\n%s", diff)
			}
			if err != nil {
				return
			}
			// The stock scheduler's worst case: every single-pod job alone
			// on a node, every gang pod on a whole node of its own.
			var worstNodes int
			for _, j := range jobs {
				if j.Pods > 1 && j.GPUsPerPod != tc.gpusPerNode {
					t.Errorf("gang %+v: pods ask for %d GPUs, want the node's %d", j, j.GPUsPerPod, tc.gpusPerNode)
				}
				worstNodes += j.Pods
			}
			if limit := tc.nodes * mixedUsedPercent / 100; worstNodes > limit {
				t.Errorf("the burst may take %d nodes, more than %d%% of %d", worstNodes, mixedUsedPercent, tc.nodes)
			}
		})
	}
}

// TestMixedBurstOrder checks that gang sizes take turns and single-pod
// jobs are spread among the gangs, not listed after them.
func TestMixedBurstOrder(t *testing.T) {
	jobs, err := MixedBurst(1000, 4)
	if err != nil {
		t.Fatal(err)
	}
	var first []int
	for _, j := range jobs[:12] {
		first = append(first, j.GPUs())
	}
	// The first round lists one gang of each size, largest first, with a
	// single-pod job or three after each gang (160 among 63 gangs).
	want := []int{256, 1, 2, 128, 3, 4, 1, 64, 2, 3, 32, 4}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("first jobs' GPUs (-want,+got):\n%s", diff)
	}
	if last := jobs[len(jobs)-1]; last.Pods != 1 {
		t.Errorf("last job %+v, want a single-pod job (they are spread to the end)", last)
	}
}

// BenchmarkMixedBurst is the cost of listing the 100k-GPU model's burst and
// its histogram, once per lockstep-bench run.
func BenchmarkMixedBurst(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		jobs, err := MixedBurst(25200, 4)
		if err != nil {
			b.Fatal(err)
		}
		BurstMix(jobs)
	}
}
