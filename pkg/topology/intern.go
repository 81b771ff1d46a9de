package topology

import (
	"math"
	"slices"
)

// Interner shares the parts of node topologies that are equal between
// nodes: a cluster of thousands of nodes has a handful of hardware
// profiles, and every node of one profile has the same link matrix, the
// same NICs and, where the agent reports no per-GPU identity, the same GPU
// list. Keeping one copy per distinct value rather than one per node is
// what makes a 5,000-node index cost kilobytes per profile, not megabytes.
//
// Sharing is safe because a NodeTopology is plain data that nothing
// modifies after Validate. An Interner is not safe for concurrent use.
type Interner struct {
	links map[uint64][][][]Link
	nics  map[uint64][][]NIC
	gpus  map[uint64][][]GPU
}

// NewInterner returns an empty Interner.
func NewInterner() *Interner {
	return &Interner{links: map[uint64][][][]Link{}, nics: map[uint64][][]NIC{}, gpus: map[uint64][][]GPU{}}
}

// Intern replaces n's GPU list, link matrix and NIC list by equal ones it
// has seen before, or remembers n's as the ones to share from now on. GPU
// lists with UUIDs are left as they are. It changes n's fields, never the
// values they point to, and returns n.
func (in *Interner) Intern(n *NodeTopology) *NodeTopology {
	// GPUs with UUIDs are one node's own: interning them would keep a copy
	// per node, for as long as the Interner lives, for nothing.
	if !slices.ContainsFunc(n.GPUs, func(g GPU) bool { return g.UUID != "" }) {
		n.GPUs = intern(in.gpus, n.GPUs, hashGPUs, slices.Equal[[]GPU])
	}
	n.Links = intern(in.links, n.Links, hashLinks, equalLinks)
	n.NICs = intern(in.nics, n.NICs, hashNICs, equalNICs)
	return n
}

// Len returns how many distinct values the interner holds: GPU lists, link
// matrices and NIC lists together.
func (in *Interner) Len() int {
	return bucketsLen(in.links) + bucketsLen(in.nics) + bucketsLen(in.gpus)
}

func bucketsLen[V any](m map[uint64][]V) int {
	count := 0
	for _, b := range m {
		count += len(b)
	}
	return count
}

// intern returns the value of buckets equal to v, adding v when there is
// none. Nil and empty values are returned as they are.
func intern[V any](buckets map[uint64][]V, v V, hash func(V) uint64, equal func(a, b V) bool) V {
	h := hash(v)
	for _, have := range buckets[h] {
		if equal(have, v) {
			return have
		}
	}
	buckets[h] = append(buckets[h], v)
	return v
}

// fnv is an FNV-1a hash that does not allocate.
type fnv uint64

func newFNV() fnv { return 14695981039346656037 }

func (h *fnv) int(v int64) {
	for i := 0; i < 8; i++ {
		*h ^= fnv(byte(v >> (8 * i)))
		*h *= 1099511628211
	}
}

func (h *fnv) string(s string) {
	for i := 0; i < len(s); i++ {
		*h ^= fnv(s[i])
		*h *= 1099511628211
	}
	h.int(int64(len(s))) // separator: "ab"+"c" differs from "a"+"bc"
}

func hashGPUs(gpus []GPU) uint64 {
	h := newFNV()
	h.int(int64(len(gpus)))
	for _, g := range gpus {
		h.int(int64(g.Index))
		h.string(g.UUID)
		h.string(g.Product)
		h.int(int64(g.MemoryMiB))
		h.string(g.PCIBusID)
		h.int(int64(g.NUMANode))
	}
	return uint64(h)
}

func hashLinks(links [][]Link) uint64 {
	h := newFNV()
	h.int(int64(len(links)))
	for _, row := range links {
		h.int(int64(len(row)))
		for _, l := range row {
			h.int(int64(l.Class))
			h.int(int64(l.NVLinks))
			h.int(int64(math.Float64bits(l.GBps)))
		}
	}
	return uint64(h)
}

func equalLinks(a, b [][]Link) bool {
	return slices.EqualFunc(a, b, slices.Equal[[]Link])
}

func hashNICs(nics []NIC) uint64 {
	h := newFNV()
	h.int(int64(len(nics)))
	for _, n := range nics {
		h.string(n.Name)
		h.int(int64(n.RateGbps))
		h.int(int64(n.NUMANode))
		h.int(int64(len(n.NearestGPUs)))
		for _, g := range n.NearestGPUs {
			h.int(int64(g))
		}
		h.int(int64(len(n.GPUPaths)))
		for _, c := range n.GPUPaths {
			h.int(int64(c))
		}
	}
	return uint64(h)
}

func equalNICs(a, b []NIC) bool {
	return slices.EqualFunc(a, b, func(x, y NIC) bool {
		// GPUPaths nil and empty mean different things to PathTo.
		return x.Name == y.Name && x.RateGbps == y.RateGbps && x.NUMANode == y.NUMANode &&
			slices.Equal(x.NearestGPUs, y.NearestGPUs) &&
			(x.GPUPaths == nil) == (y.GPUPaths == nil) && slices.Equal(x.GPUPaths, y.GPUPaths)
	})
}
