package topology

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// MaxTableGPUs is the largest node for which NewSelector precomputes the best
// set for every free mask. The table has 2^n·(n+1) entries: 2,304 for an
// 8-GPU node, about 1.1 M (a few MiB, tens of milliseconds to build) for 16.
// Larger nodes use a greedy search per query instead.
const MaxTableGPUs = 16

// Selector picks the best set of k free GPUs on nodes of one shape. It is
// immutable after NewSelector and safe for concurrent use, so one selector
// can serve every node built from the same profile.
//
// For nodes of up to MaxTableGPUs GPUs, NewSelector ranks every subset once
// (see SetQuality.Better, ties broken by lowest indices) and tabulates the
// best subset of every size within every free mask, so Best is two array
// reads. Larger nodes fall back to a greedy search (see Best).
type Selector struct {
	shape *shape
	all   GPUSet
	// quality[set] is the quality of every subset; nil above MaxTableGPUs.
	quality []SetQuality
	// best[free*(n+1)+k] is the best k-subset of free; zero when k exceeds
	// the free count.
	best []uint16
}

// SelectorKey encodes what NewSelector reads of a node (newShape,
// gpuNICs): the GPU count and each GPU's NUMA node, the link
// matrix, and each NIC's rate, NUMA node, nearest GPUs and paths to the
// GPUs. Names, identifiers, products and the NVLink domain are left out:
// nodes that differ only there choose GPU sets alike, so nodes with equal
// keys may share one Selector. It lives beside newShape so that it follows
// what the selector reads.
func SelectorKey(hw *NodeTopology) string {
	n := len(hw.GPUs)
	b := make([]byte, 0, 16+n*(2+n*10)+len(hw.NICs)*(8+2*n))
	b = binary.AppendUvarint(b, uint64(n))
	for _, g := range hw.GPUs {
		b = binary.AppendVarint(b, int64(g.NUMANode))
	}
	for _, row := range hw.Links {
		for _, l := range row {
			b = binary.AppendVarint(b, int64(l.Class))
			b = binary.AppendVarint(b, int64(l.NVLinks))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.GBps))
		}
	}
	b = binary.AppendUvarint(b, uint64(len(hw.NICs)))
	for _, nic := range hw.NICs {
		b = binary.AppendVarint(b, int64(nic.RateGbps))
		b = binary.AppendVarint(b, int64(nic.NUMANode))
		b = binary.AppendUvarint(b, uint64(len(nic.NearestGPUs)))
		for _, g := range nic.NearestGPUs {
			b = binary.AppendVarint(b, int64(g))
		}
		// nil paths are derived, so they differ from any given list.
		if nic.GPUPaths == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(nic.GPUPaths)))
		for _, c := range nic.GPUPaths {
			b = binary.AppendVarint(b, int64(c))
		}
	}
	return string(b)
}

// NewSelector validates node and precomputes its selection table.
func NewSelector(node *NodeTopology) (*Selector, error) {
	if err := node.Validate(); err != nil {
		return nil, fmt.Errorf("invalid node topology: %w", err)
	}
	s := &Selector{shape: newShape(node), all: node.AllGPUs()}
	if s.shape.n <= MaxTableGPUs {
		s.buildTable()
	}
	return s, nil
}

// NumGPUs returns the number of GPUs of the node shape.
func (s *Selector) NumGPUs() int { return s.shape.n }

// Quality returns the quality of set; GPUs outside the node are ignored.
func (s *Selector) Quality(set GPUSet) SetQuality {
	set &= s.all
	if s.quality != nil {
		return s.quality[set]
	}
	return s.shape.quality(set)
}

// Best returns the best set of k GPUs among free, its quality, and whether k
// GPUs are free at all (ok is false for k < 1 or k > free GPUs). GPUs outside
// the node are ignored.
//
// Up to MaxTableGPUs it is exact and O(1). Above, it grows a set greedily
// from every free GPU as a seed, each step adding the GPU that keeps the set
// best, and returns the best grown set: O(n²·k) per query and exact on
// uniform fabrics (NVSwitch) and on islands of uniform links, which is what
// nodes that large are, but not guaranteed optimal on arbitrary meshes,
// where the max-min subset problem is NP-hard.
func (s *Selector) Best(free GPUSet, k int) (GPUSet, SetQuality, bool) {
	free &= s.all
	if k < 1 || k > free.Len() {
		return 0, SetQuality{}, false
	}
	if s.best == nil {
		return s.greedy(free, k)
	}
	set := GPUSet(s.best[int(free)*(s.shape.n+1)+k])
	return set, s.quality[set], true
}

// better orders candidate sets of equal size: quality first, then lowest
// indices so the table and the greedy search are deterministic.
func better(a, b GPUSet, qa, qb SetQuality) bool {
	if qa.Better(qb) {
		return true
	}
	if qb.Better(qa) {
		return false
	}
	return lowerIndices(a, b)
}

// buildTable fills quality and best. The best k-subset of a mask with more
// than k GPUs is the best among the best k-subsets of the mask minus one GPU,
// so visiting masks in increasing order needs only n lookups per (mask, k):
// O(2^n·n²) in all instead of enumerating every subset of every mask (3^n).
func (s *Selector) buildTable() {
	n := s.shape.n
	size := 1 << uint(n)
	s.quality = make([]SetQuality, size)
	for set := range size {
		s.quality[set] = s.shape.quality(GPUSet(set))
	}
	s.best = make([]uint16, size*(n+1))
	for mask := 1; mask < size; mask++ {
		row := s.best[mask*(n+1) : (mask+1)*(n+1)]
		c := bits.OnesCount(uint(mask))
		row[c] = uint16(mask)
		for k := 1; k < c; k++ {
			var winner uint16
			for rest := mask; rest != 0; rest &= rest - 1 {
				sub := mask &^ (rest & -rest)
				cand := s.best[sub*(n+1)+k]
				if winner == 0 || better(GPUSet(cand), GPUSet(winner), s.quality[cand], s.quality[winner]) {
					winner = cand
				}
			}
			row[k] = winner
		}
	}
}

// greedy is Best for nodes above MaxTableGPUs. minTo[c] tracks the weakest
// link from candidate c into the set grown so far, so a candidate's
// bottleneck is O(1) and only its NUMA and NIC tie-breaks cost O(k).
func (s *Selector) greedy(free GPUSet, k int) (GPUSet, SetQuality, bool) {
	n := s.shape.n
	minTo := make([]float64, n)
	var bestSet GPUSet
	var bestQ SetQuality
	for seeds := uint64(free); seeds != 0; seeds &= seeds - 1 {
		seed := bits.TrailingZeros64(seeds)
		set := NewGPUSet(seed)
		bottleneck := math.Inf(1)
		for c := range n {
			minTo[c] = s.shape.bw[seed*n+c]
		}
		for set.Len() < k {
			var pick int
			var pickSet GPUSet
			var pickQ SetQuality
			for rest := uint64(free &^ set); rest != 0; rest &= rest - 1 {
				c := bits.TrailingZeros64(rest)
				candSet := set | NewGPUSet(c)
				candQ := s.shape.qualityWithBottleneck(candSet, min(bottleneck, minTo[c]))
				if pickSet == 0 || better(candSet, pickSet, candQ, pickQ) {
					pick, pickSet, pickQ = c, candSet, candQ
				}
			}
			set, bottleneck = pickSet, pickQ.BottleneckGBps
			for c := range n {
				minTo[c] = min(minTo[c], s.shape.bw[pick*n+c])
			}
		}
		q := s.shape.quality(set)
		if bestSet == 0 || better(set, bestSet, q, bestQ) {
			bestSet, bestQ = set, q
		}
	}
	return bestSet, bestQ, true
}
