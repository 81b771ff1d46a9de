package topology

import (
	"math/rand/v2"
	"testing"
)

// TestSetQualityMatchesShape checks that NodeTopology.SetQuality, which reads
// the node directly without allocating, answers as the selector's flat shape
// does, for every subset of the built-in profiles and of random small nodes
// (unknown NUMA nodes and GPUs without a NIC of their own included).
func TestSetQualityMatchesShape(t *testing.T) {
	var nodes []*NodeTopology
	for _, p := range Profiles() {
		nodes = append(nodes, mustNode(t, p.Name))
	}
	nodes = append(nodes, islandNode(2, 4))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		data := make([]byte, 40)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		node := nodeFromBytes(data)
		for i := range node.GPUs {
			if rng.IntN(4) == 0 {
				node.GPUs[i].NUMANode = -1
			}
		}
		nodes = append(nodes, node)
	}
	for _, node := range nodes {
		s := newShape(node)
		for set := GPUSet(0); set <= node.AllGPUs(); set++ {
			if got, want := node.SetQuality(set), s.quality(set); got != want {
				t.Fatalf("SetQuality(%v) on %+v (-want,+got):\n%s", set, node, diff(want, got))
			}
		}
		if got, want := node.SetQuality(^GPUSet(0)), s.quality(node.AllGPUs()); got != want {
			t.Fatalf("SetQuality(all bits) (-want,+got):\n%s", diff(want, got))
		}
	}
}

func TestSetQualityDoesNotAllocate(t *testing.T) {
	node := mustNode(t, "hgx-h100")
	if n := testing.AllocsPerRun(100, func() { node.SetQuality(NewGPUSet(0, 1, 5, 7)) }); n != 0 {
		t.Errorf("SetQuality allocates %v times per call, want 0", n)
	}
}

func TestSameProductMatchesProductLabel(t *testing.T) {
	labels := []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-GB200", "A", "A-B"}
	names := []string{
		"", " ", "NVIDIA H100 80GB HBM3", "  NVIDIA   H100 80GB\tHBM3 ", "NVIDIA-H100-80GB-HBM3",
		"NVIDIA H100 80GB", "NVIDIA H100 80GB HBM3 X", "NVIDIA GB200", "NVIDIA-GB200 ", "A", "A B", "A-B", "A--B", "A- B", "AB", "-A",
	}
	for _, label := range labels {
		for _, name := range names {
			if got, want := sameProduct(name, label), ProductLabel(name) == label; got != want {
				t.Errorf("sameProduct(%q, %q) = %v, want %v", name, label, got, want)
			}
		}
	}
}
