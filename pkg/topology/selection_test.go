package topology

import (
	"fmt"
	"testing"
)

func TestSelectorBest(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		free    GPUSet
		k       int
		want    GPUSet
		wantQ   SetQuality
		wantOK  bool
	}{
		{
			// NV2 pairs within a quad: (0,3), (1,2), (2,3) and the same in
			// the other quad. (2,3) share a NIC; (0,3) is lowest.
			name: "dgx1 2 GPUs takes an NV2 pair", profile: "dgx1-v100",
			free: AllGPUs(8), k: 2, want: NewGPUSet(0, 3), wantOK: true,
			wantQ: SetQuality{GPUs: 2, BottleneckGBps: 50, NUMANodes: 1, NICGBpsPerGPU: 12.5, NICs: 2},
		},
		{
			// No 4-set has only NV2 links; a quad has all pairs NVLinked.
			name: "dgx1 4 GPUs takes a quad", profile: "dgx1-v100",
			free: AllGPUs(8), k: 4, want: NewGPUSet(0, 1, 2, 3), wantOK: true,
			wantQ: SetQuality{GPUs: 4, BottleneckGBps: 25, NUMANodes: 1, NICGBpsPerGPU: 6.25, NICs: 2},
		},
		{
			name: "dgx1 4 GPUs takes the whole quad when the other is broken", profile: "dgx1-v100",
			free: AllGPUs(8) &^ NewGPUSet(0), k: 4, want: NewGPUSet(4, 5, 6, 7), wantOK: true,
			wantQ: SetQuality{GPUs: 4, BottleneckGBps: 25, NUMANodes: 1, NICGBpsPerGPU: 6.25, NICs: 2},
		},
		{
			// GPUs 0 and 4 busy: (1,2) and (5,6) are NV2 with a NIC each,
			// (2,3) and (6,7) NV2 but sharing one.
			name: "dgx1 2 GPUs in a fragmented node", profile: "dgx1-v100",
			free: NewGPUSet(1, 2, 3, 5, 6, 7), k: 2, want: NewGPUSet(1, 2), wantOK: true,
			wantQ: SetQuality{GPUs: 2, BottleneckGBps: 50, NUMANodes: 1, NICGBpsPerGPU: 12.5, NICs: 2},
		},
		{
			// With neither quad whole, any 4 GPUs cross the sockets over PCIe
			// (SYS). Among those, one GPU per NIC gives each GPU a whole EDR
			// port: {1,2} and {5,6}, NV2 pairs joined by 1-5 NV2 and 2-6 NV1.
			name: "dgx1 4 GPUs with both quads broken", profile: "dgx1-v100",
			free: NewGPUSet(1, 2, 3, 5, 6, 7), k: 4, want: NewGPUSet(1, 2, 5, 6), wantOK: true,
			wantQ: SetQuality{GPUs: 4, BottleneckGBps: 10, NUMANodes: 2, NICGBpsPerGPU: 12.5, NICs: 4},
		},
		{
			name: "l40s 2 GPUs takes a PIX pair", profile: "l40s-pcie",
			free: AllGPUs(8), k: 2, want: NewGPUSet(0, 1), wantOK: true,
			wantQ: SetQuality{GPUs: 2, BottleneckGBps: 25, NUMANodes: 1, NICGBpsPerGPU: 25, NICs: 1},
		},
		{
			name: "l40s 2 GPUs skips broken pairs", profile: "l40s-pcie",
			free: NewGPUSet(0, 2, 4, 5, 7), k: 2, want: NewGPUSet(4, 5), wantOK: true,
			wantQ: SetQuality{GPUs: 2, BottleneckGBps: 25, NUMANodes: 1, NICGBpsPerGPU: 25, NICs: 1},
		},
		{
			name: "l40s 4 GPUs stays on one socket", profile: "l40s-pcie",
			free: AllGPUs(8), k: 4, want: NewGPUSet(0, 1, 2, 3), wantOK: true,
			wantQ: SetQuality{GPUs: 4, BottleneckGBps: 20, NUMANodes: 1, NICGBpsPerGPU: 25, NICs: 2},
		},
		{
			name: "a100 2 GPUs takes a bridged pair", profile: "a100-pcie-nvlink",
			free: AllGPUs(8), k: 2, want: NewGPUSet(0, 1), wantOK: true,
			wantQ: SetQuality{GPUs: 2, BottleneckGBps: 300, NUMANodes: 1, NICGBpsPerGPU: 12.5, NICs: 1},
		},
		{
			name: "a100 2 GPUs finds the one whole bridged pair", profile: "a100-pcie-nvlink",
			free: NewGPUSet(1, 2, 4, 6, 7), k: 2, want: NewGPUSet(6, 7), wantOK: true,
			wantQ: SetQuality{GPUs: 2, BottleneckGBps: 300, NUMANodes: 1, NICGBpsPerGPU: 12.5, NICs: 1},
		},
		{
			name: "hgx 3 GPUs prefers one socket", profile: "hgx-h100",
			free: NewGPUSet(1, 3, 5, 6, 7), k: 3, want: NewGPUSet(5, 6, 7), wantOK: true,
			wantQ: SetQuality{GPUs: 3, BottleneckGBps: 450, NUMANodes: 1, NICGBpsPerGPU: 50, NICs: 3},
		},
		{
			name: "hgx 4 GPUs must cross sockets, lowest indices win", profile: "hgx-h100",
			free: NewGPUSet(1, 3, 5, 6, 7), k: 4, want: NewGPUSet(1, 3, 5, 6), wantOK: true,
			wantQ: SetQuality{GPUs: 4, BottleneckGBps: 450, NUMANodes: 2, NICGBpsPerGPU: 50, NICs: 4},
		},
		{
			name: "single GPU", profile: "hgx-h100",
			free: NewGPUSet(6, 7), k: 1, want: NewGPUSet(6), wantOK: true,
			wantQ: SetQuality{GPUs: 1, NUMANodes: 1, NICGBpsPerGPU: 50, NICs: 1},
		},
		{
			name: "gb200 whole tray", profile: "gb200-nvl72",
			free: AllGPUs(4), k: 4, want: AllGPUs(4), wantOK: true,
			wantQ: SetQuality{GPUs: 4, BottleneckGBps: 900, NUMANodes: 2, NICGBpsPerGPU: 50, NICs: 4},
		},
		{
			name: "bits beyond the node are ignored", profile: "gb200-nvl72",
			free: NewGPUSet(2, 3, 8, 9), k: 2, want: NewGPUSet(2, 3), wantOK: true,
			wantQ: SetQuality{GPUs: 2, BottleneckGBps: 900, NUMANodes: 1, NICGBpsPerGPU: 50, NICs: 2},
		},
		{name: "more GPUs than free", profile: "hgx-h100", free: NewGPUSet(0, 1, 2), k: 4},
		{name: "more GPUs than the node", profile: "gb200-nvl72", free: AllGPUs(8), k: 5},
		{name: "zero GPUs", profile: "hgx-h100", free: AllGPUs(8), k: 0},
		{name: "negative GPUs", profile: "hgx-h100", free: AllGPUs(8), k: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel := mustSelector(t, tt.profile)
			got, q, ok := sel.Best(tt.free, tt.k)
			if ok != tt.wantOK {
				t.Fatalf("Best(%v, %d) ok = %v, want %v", tt.free, tt.k, ok, tt.wantOK)
			}
			if got != tt.want {
				t.Errorf("Best(%v, %d) = %v, want %v", tt.free, tt.k, got, tt.want)
			}
			if d := diff(tt.wantQ, q); d != "" {
				t.Errorf("Best(%v, %d) quality (-want,+got):\n%s", tt.free, tt.k, d)
			}
		})
	}
}

// bruteForceBest enumerates every k-subset of free: the definition the
// table must match.
func bruteForceBest(node *NodeTopology, free GPUSet, k int) (GPUSet, SetQuality, bool) {
	var best GPUSet
	var bestQ SetQuality
	for set := GPUSet(1); set <= free; set++ {
		if set&^free != 0 || set.Len() != k {
			continue
		}
		q := node.SetQuality(set)
		if best == 0 || better(set, best, q, bestQ) {
			best, bestQ = set, q
		}
	}
	return best, bestQ, best != 0
}

func TestSelectorMatchesBruteForce(t *testing.T) {
	for _, p := range Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			node := mustNode(t, p.Name)
			sel := mustSelector(t, p.Name)
			all := node.AllGPUs()
			for free := GPUSet(0); free <= all; free++ {
				for k := 0; k <= node.NumGPUs()+1; k++ {
					want, wantQ, wantOK := bruteForceBest(node, free, k)
					got, gotQ, gotOK := sel.Best(free, k)
					if got != want || gotOK != wantOK || gotQ != wantQ {
						t.Fatalf("Best(%v, %d) = %v %+v %v, want %v %+v %v", free, k, got, gotQ, gotOK, want, wantQ, wantOK)
					}
				}
				if got, want := sel.Quality(free), node.SetQuality(free); got != want {
					t.Fatalf("Quality(%v) (-want,+got):\n%s", free, diff(want, got))
				}
			}
		})
	}
}

// TestGreedyOnProfiles runs the large-node fallback on the built-in shapes,
// where the table gives the exact answer, to bound how far greedy strays.
func TestGreedyOnProfiles(t *testing.T) {
	for _, p := range Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			sel := mustSelector(t, p.Name)
			all := AllGPUs(sel.NumGPUs())
			for free := GPUSet(1); free <= all; free++ {
				for k := 1; k <= free.Len(); k++ {
					_, want, _ := sel.Best(free, k)
					set, got, ok := sel.greedy(free, k)
					if !ok || set&^free != 0 || set.Len() != k {
						t.Fatalf("greedy(%v, %d) = %v, %v: not a %d-subset of the free GPUs", free, k, set, ok, k)
					}
					if got.BottleneckGBps != want.BottleneckGBps {
						t.Errorf("greedy(%v, %d) = %v with bottleneck %v GB/s, the best set has %v", free, k, set, got.BottleneckGBps, want.BottleneckGBps)
					}
				}
			}
		})
	}
}

// islandNode is a large node of NVSwitch islands joined by PCIe across
// sockets, one NIC per GPU: the shape nodes above MaxTableGPUs have.
func islandNode(islands, perIsland int) *NodeTopology {
	n := islands * perIsland
	node := &NodeTopology{GPUs: make([]GPU, n), Links: make([][]Link, n)}
	for i := range n {
		node.GPUs[i] = GPU{Index: i, NUMANode: i / perIsland}
		node.Links[i] = make([]Link, n)
		node.NICs = append(node.NICs, NIC{Name: fmt.Sprintf("mlx5_%d", i), RateGbps: 400, NUMANode: i / perIsland, NearestGPUs: []int{i}})
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			if i/perIsland == j/perIsland {
				node.connect(i, j, Link{Class: LinkNVSwitch, NVLinks: 18, GBps: 450})
			} else {
				node.connect(i, j, Link{Class: LinkCrossNUMA, GBps: 14})
			}
		}
	}
	return node
}

func TestSelectorLargeNode(t *testing.T) {
	node := islandNode(4, 8) // 32 GPUs: greedy
	sel, err := NewSelector(node)
	if err != nil {
		t.Fatal(err)
	}
	if sel.best != nil {
		t.Fatal("a 32-GPU node got a table; want the greedy fallback")
	}
	island := func(i int) GPUSet { return AllGPUs(8) << uint(8*i) }
	tests := []struct {
		name string
		free GPUSet
		k    int
		want GPUSet
	}{
		{name: "whole island", free: AllGPUs(32), k: 8, want: island(0)},
		{name: "the island with room", free: island(0)&^NewGPUSet(3) | island(2), k: 8, want: island(2)},
		{name: "best fit within an island", free: NewGPUSet(1, 2, 9, 10, 11, 12), k: 4, want: NewGPUSet(9, 10, 11, 12)},
		{name: "crosses islands when it must", free: NewGPUSet(1, 2, 9, 10), k: 3, want: NewGPUSet(1, 2, 9)},
		{name: "all", free: AllGPUs(32), k: 32, want: AllGPUs(32)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, q, ok := sel.Best(tt.free, tt.k)
			if !ok || got != tt.want {
				t.Errorf("Best(%v, %d) = %v, %v, want %v", tt.free, tt.k, got, ok, tt.want)
			}
			if want := node.SetQuality(got); q != want {
				t.Errorf("quality (-want,+got):\n%s", diff(want, q))
			}
		})
	}
	if _, _, ok := sel.Best(NewGPUSet(1, 2), 3); ok {
		t.Error("Best with too few free GPUs succeeded")
	}
}

func TestSelectorTableLimit(t *testing.T) {
	// DGX-2-like: 16 GPUs on NVSwitch, the largest tabulated shape.
	sel, err := NewSelector(islandNode(2, 8))
	if err != nil {
		t.Fatal(err)
	}
	if sel.best == nil {
		t.Fatal("a 16-GPU node got no table")
	}
	got, _, ok := sel.Best(AllGPUs(16)&^NewGPUSet(0), 8)
	if want := AllGPUs(8) << 8; !ok || got != want {
		t.Errorf("Best = %v, %v, want %v", got, ok, want)
	}
}

func TestNewSelectorInvalidNode(t *testing.T) {
	n := twoGPUNode()
	n.Links[1][0] = Link{}
	if _, err := NewSelector(n); err == nil {
		t.Error("NewSelector accepted an asymmetric node")
	}
}

func BenchmarkSelectorBest(b *testing.B) {
	for _, name := range []string{"hgx-h100", "dgx1-v100", "gb200-nvl72"} {
		sel := mustSelector(b, name)
		n := sel.NumGPUs()
		b.Run("profile="+name, func(b *testing.B) {
			var sink GPUSet
			i := 0
			for b.Loop() {
				free := GPUSet(i) & AllGPUs(n)
				k := 1 + i%n
				set, _, _ := sel.Best(free, k)
				sink ^= set
				i++
			}
			_ = sink
		})
	}
	sel, err := NewSelector(islandNode(4, 8))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("greedy/gpus=32/k=8", func(b *testing.B) {
		free := AllGPUs(32) &^ NewGPUSet(0, 9, 18)
		for b.Loop() {
			sel.Best(free, 8)
		}
	})
}

// BenchmarkNewSelector measures the per-shape precomputation for 8 GPUs. A
// 16-GPU table takes about 1000 times longer (tens of milliseconds), too slow
// for the fixed iteration counts CI runs benchmarks with.
func BenchmarkNewSelector(b *testing.B) {
	node := mustNode(b, "hgx-h100")
	for b.Loop() {
		if _, err := NewSelector(node); err != nil {
			b.Fatal(err)
		}
	}
}

// nodeFromBytes decodes fuzz input into a small node: the first byte picks 2
// to 6 GPUs, then one byte per GPU pair picks a link class and bandwidth, one
// per GPU its NUMA node and one its NIC (or none). Missing bytes read as 0.
func nodeFromBytes(data []byte) *NodeTopology {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	n := 2 + int(next()%5)
	node := &NodeTopology{GPUs: make([]GPU, n), Links: make([][]Link, n)}
	for i := range n {
		node.Links[i] = make([]Link, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			b := next()
			l := Link{Class: LinkCrossNUMA + LinkClass(b%7), GBps: float64(1 + b/7%4*10)}
			if l.Class.IsNVLink() {
				l.NVLinks = 1 + int(b%3)
			}
			node.connect(i, j, l)
		}
	}
	nics := map[int][]int{}
	for i := range n {
		node.GPUs[i] = GPU{Index: i, NUMANode: int(next() % 3)}
		if nic := int(next() % 4); nic < 3 {
			nics[nic] = append(nics[nic], i)
		}
	}
	for nic := range 3 {
		if gpus, ok := nics[nic]; ok {
			node.NICs = append(node.NICs, NIC{Name: fmt.Sprintf("nic%d", nic), RateGbps: 100 * (nic + 1), NUMANode: -1, NearestGPUs: gpus})
		}
	}
	return node
}

// FuzzSelectorBest checks on arbitrary small nodes that the table matches
// exhaustive search and that greedy never claims a better set than exists.
func FuzzSelectorBest(f *testing.F) {
	f.Add([]byte{3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{4, 40, 41, 42, 43, 44, 45, 0, 0, 1, 1, 2, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		node := nodeFromBytes(data)
		if err := node.Validate(); err != nil {
			t.Fatalf("decoded node is invalid: %v", err)
		}
		sel, err := NewSelector(node)
		if err != nil {
			t.Fatal(err)
		}
		for free := GPUSet(0); free <= node.AllGPUs(); free++ {
			for k := 0; k <= node.NumGPUs(); k++ {
				want, wantQ, wantOK := bruteForceBest(node, free, k)
				got, gotQ, gotOK := sel.Best(free, k)
				if got != want || gotQ != wantQ || gotOK != wantOK {
					t.Fatalf("Best(%v, %d) = %v %+v %v, want %v %+v %v", free, k, got, gotQ, gotOK, want, wantQ, wantOK)
				}
				if !wantOK {
					continue
				}
				gSet, gQ, _ := sel.greedy(free, k)
				if gSet&^free != 0 || gSet.Len() != k || gQ != node.SetQuality(gSet) || gQ.Better(wantQ) {
					t.Fatalf("greedy(%v, %d) = %v %+v: not a valid set no better than %+v", free, k, gSet, gQ, wantQ)
				}
			}
		}
	})
}

// TestSelectorKey: nodes that differ only in what NewSelector does not read
// (UUIDs, products, the NVLink domain) share a key; any change to what it
// reads (a link, a NIC's nearest GPUs) gives another.
func TestSelectorKey(t *testing.T) {
	p, _ := LookupProfile("hgx-h100")
	base, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	same, _ := p.Node()
	for i := range same.GPUs {
		same.GPUs[i].UUID, same.GPUs[i].Product = "GPU-other", "renamed"
	}
	if SelectorKey(base) != SelectorKey(same) {
		t.Error("identifiers changed the key")
	}
	link, _ := p.Node()
	link.Links[0][1].GBps /= 2
	link.Links[1][0].GBps /= 2
	if SelectorKey(base) == SelectorKey(link) {
		t.Error("a slower link kept the key")
	}
	nic, _ := p.Node()
	if len(nic.NICs) > 0 {
		nic.NICs[0].NearestGPUs = nil
		if SelectorKey(base) == SelectorKey(nic) {
			t.Error("a NIC's nearest GPUs did not change the key")
		}
	}
	dgx, _ := LookupProfile("dgx1-v100")
	other, _ := dgx.Node()
	if SelectorKey(base) == SelectorKey(other) {
		t.Error("two profiles share a key")
	}
}
