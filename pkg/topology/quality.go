package topology

import (
	"math"
	"math/bits"
)

// SetQuality describes how well a set of GPUs of one node can run a
// collective. Selection ranks sets of equal size with Better.
type SetQuality struct {
	// GPUs is the size of the set.
	GPUs int
	// BottleneckGBps is the lowest per-direction link bandwidth between any
	// two GPUs of the set: what a ring all-reduce inside the node runs at.
	// Zero for a single GPU, which has no pair.
	BottleneckGBps float64
	// NUMANodes is the number of distinct NUMA nodes the set touches; one
	// more than its NUMA crossings. GPUs of unknown NUMA count as one node.
	NUMANodes int
	// NICGBpsPerGPU is the NIC bandwidth each GPU of the set gets when all
	// of them send off the node at once through their nearest NICs: the
	// minimum over the set of each GPU's share of those NICs. Zero when a GPU
	// has no NIC.
	NICGBpsPerGPU float64
	// NICs is the number of distinct NICs the set uses.
	NICs int
}

// Better reports whether q is strictly better than o: higher bottleneck
// bandwidth, then fewer NUMA nodes, then more NIC bandwidth per GPU, then
// fewer NICs (leaving NICs to other jobs). Sets that tie are ordered by
// lowest GPU indices by the selector.
func (q SetQuality) Better(o SetQuality) bool {
	if q.BottleneckGBps != o.BottleneckGBps {
		return q.BottleneckGBps > o.BottleneckGBps
	}
	if q.NUMANodes != o.NUMANodes {
		return q.NUMANodes < o.NUMANodes
	}
	if q.NICGBpsPerGPU != o.NICGBpsPerGPU {
		return q.NICGBpsPerGPU > o.NICGBpsPerGPU
	}
	return q.NICs < o.NICs
}

// SetQuality returns the quality of a set of the node's GPUs; GPUs the node
// does not have are ignored. It reads the node directly and does not
// allocate, so rating a plan costs nothing per member; a Selector answers
// the same question from its precomputed table.
func (n *NodeTopology) SetQuality(set GPUSet) SetQuality {
	set &= n.AllGPUs()
	if set == 0 {
		return SetQuality{}
	}
	q := SetQuality{GPUs: set.Len()}
	if q.GPUs >= 2 {
		q.BottleneckGBps = math.Inf(1)
		for rest := uint64(set); rest != 0; rest &= rest - 1 {
			i := bits.TrailingZeros64(rest)
			for others := rest & (rest - 1); others != 0; others &= others - 1 {
				q.BottleneckGBps = min(q.BottleneckGBps, n.Links[i][bits.TrailingZeros64(others)].GBps)
			}
		}
	}
	// As shape.qualityWithBottleneck: distinct NUMA nodes (unknown, -1, is
	// one of them), the NICs used, and each GPU's share of its NICs when
	// every GPU of set sends at once.
	var (
		nicsOf [MaxGPUs]uint64
		users  [MaxNICs]int
		nics   uint64
	)
	for rest := uint64(set); rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros64(rest)
		nicsOf[i] = gpuNICs(n, i)
		nics |= nicsOf[i]
		for r := nicsOf[i]; r != 0; r &= r - 1 {
			users[bits.TrailingZeros64(r)]++
		}
		seen := false
		for earlier := uint64(set) & (1<<uint(i) - 1); earlier != 0 && !seen; earlier &= earlier - 1 {
			seen = n.GPUs[bits.TrailingZeros64(earlier)].NUMANode == n.GPUs[i].NUMANode
		}
		if !seen {
			q.NUMANodes++
		}
	}
	nicBW := math.Inf(1)
	for rest := uint64(set); rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros64(rest)
		var share float64
		for r := nicsOf[i]; r != 0; r &= r - 1 {
			j := bits.TrailingZeros64(r)
			share += n.NICs[j].GBps() / float64(users[j])
		}
		nicBW = min(nicBW, share)
	}
	q.NICGBpsPerGPU = nicBW
	q.NICs = bits.OnesCount64(nics)
	return q
}

// shape is a node reduced to what GPU set quality depends on, in flat arrays
// indexed by GPU and NIC so that quality needs no allocation and no map.
type shape struct {
	n int
	// bw[i*n+j] is the bandwidth between GPUs i and j.
	bw []float64
	// numa[i] is the bit of GPU i's NUMA node, densely renumbered.
	numa []uint64
	// nicsOf[i] is the set of NICs GPU i sends through.
	nicsOf []uint64
	// nicGPUs[j] is the set of GPUs sending through NIC j.
	nicGPUs []GPUSet
	// nicGBps[j] is NIC j's rate in GB/s.
	nicGBps []float64
}

func newShape(node *NodeTopology) *shape {
	n := len(node.GPUs)
	s := &shape{
		n:       n,
		bw:      make([]float64, n*n),
		numa:    make([]uint64, n),
		nicsOf:  make([]uint64, n),
		nicGPUs: make([]GPUSet, len(node.NICs)),
		nicGBps: make([]float64, len(node.NICs)),
	}
	for i := range n {
		for j := range n {
			s.bw[i*n+j] = node.Links[i][j].GBps
		}
	}
	// NUMA ids are sparse (and -1 when unknown); a dense renumbering turns
	// "how many NUMA nodes" into a popcount.
	var numaIDs []int
	for i, g := range node.GPUs {
		k := 0
		for k < len(numaIDs) && numaIDs[k] != g.NUMANode {
			k++
		}
		if k == len(numaIDs) {
			numaIDs = append(numaIDs, g.NUMANode)
		}
		s.numa[i] = 1 << uint(k) // k < len(GPUs) <= MaxGPUs
	}
	for i := range n {
		s.nicsOf[i] = gpuNICs(node, i)
		for rest := s.nicsOf[i]; rest != 0; rest &= rest - 1 {
			s.nicGPUs[bits.TrailingZeros64(rest)] |= NewGPUSet(i)
		}
	}
	for j, nic := range node.NICs {
		s.nicGBps[j] = nic.GBps()
	}
	return s
}

// gpuNICs returns the NICs GPU g sends through: the NICs listing it as a
// nearest GPU or, when none does, every NIC on the closest path class. That
// fallback keeps GPUs without an assigned NIC (common on PCIe servers with
// fewer NICs than GPUs) from looking unreachable.
func gpuNICs(node *NodeTopology, g int) uint64 {
	var nearest uint64
	for j, nic := range node.NICs {
		for _, ng := range nic.NearestGPUs {
			if ng == g {
				nearest |= 1 << uint(j)
			}
		}
	}
	if nearest != 0 {
		return nearest
	}
	best := LinkUnknown
	for j, nic := range node.NICs {
		switch c := nic.PathTo(node, g); {
		case c > best:
			best, nearest = c, 1<<uint(j)
		case c == best:
			nearest |= 1 << uint(j)
		}
	}
	return nearest
}

func (s *shape) quality(set GPUSet) SetQuality {
	if set == 0 {
		return SetQuality{}
	}
	return s.qualityWithBottleneck(set, s.bottleneck(set))
}

// bottleneck is the weakest link within set; zero for fewer than two GPUs.
func (s *shape) bottleneck(set GPUSet) float64 {
	if set.Len() < 2 {
		return 0
	}
	bottleneck := math.Inf(1)
	for rest := uint64(set); rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros64(rest)
		for others := rest & (rest - 1); others != 0; others &= others - 1 {
			bottleneck = min(bottleneck, s.bw[i*s.n+bits.TrailingZeros64(others)])
		}
	}
	return bottleneck
}

// qualityWithBottleneck is quality with the O(k²) bottleneck scan replaced by
// a known value, which the greedy search maintains incrementally.
func (s *shape) qualityWithBottleneck(set GPUSet, bottleneck float64) SetQuality {
	q := SetQuality{GPUs: set.Len(), BottleneckGBps: bottleneck}
	var numa, nics uint64
	nicBW := math.Inf(1)
	for rest := uint64(set); rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros64(rest)
		numa |= s.numa[i]
		nics |= s.nicsOf[i]
		nicBW = min(nicBW, s.nicShare(set, i))
	}
	q.NUMANodes = bits.OnesCount64(numa)
	q.NICGBpsPerGPU = nicBW
	q.NICs = bits.OnesCount64(nics)
	return q
}

// nicShare is GPU i's share of its NICs when every GPU of set sends at once.
func (s *shape) nicShare(set GPUSet, i int) float64 {
	var share float64
	for rest := s.nicsOf[i]; rest != 0; rest &= rest - 1 {
		j := bits.TrailingZeros64(rest)
		share += s.nicGBps[j] / float64((s.nicGPUs[j] & set).Len())
	}
	return share
}
