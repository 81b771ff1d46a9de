package nodeview

import (
	"hash/maphash"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// maxSharedSpecs bounds each pool of a specTable. A cluster has a handful
// of hardware profiles and one NVLink domain per rack; a pool that fills up
// is being fed per-node values (or a hostile agent's), and from then on new
// values are stored unshared rather than remembered for the life of the
// scheduler.
const maxSharedSpecs = 4096

// specTable keeps the NodeTopology informer's memory near the stock
// scheduler's. Each NodeTopology carries its node's GPU list, link matrix
// and NICs, about 8 KiB decoded: on 5,000 nodes some 40 MiB live together,
// and twice that in RSS once the garbage collector's target follows. Nodes
// of one hardware profile report equal values apart from identifiers (GPU
// UUIDs and bus IDs, NIC GUIDs and bus IDs) that planning never reads. The
// informer's transform (slim) drops those identifiers from valid objects
// (and the metadata nothing reads from all) and
// replaces each slice by an equal one already stored, so the store keeps one
// copy per profile. The placement model converted from a shared spec is kept
// once too (topology): the GPU index and the health check convert nothing
// per node.
//
// Stored objects are never modified after the transform, so sharing their
// slices between objects is safe. A specTable is safe for concurrent use.
type specTable struct {
	mu    sync.Mutex
	seed  maphash.Seed
	gpus  pool[v1alpha1.GPU]
	links pool[v1alpha1.GPULink]
	nics  pool[v1alpha1.NIC]
	nvl   map[v1alpha1.NVLinkDomain]*v1alpha1.NVLinkDomain
	// converted holds the placement model of each spec made only of
	// shared parts.
	converted map[specKey]*topology.NodeTopology
	// uuids are each node's GPU UUIDs by index, which slim drops from the
	// spec: the key that joins a node's GPUs to a DRA driver's devices
	// (keepUUIDs, draSnapshot).
	uuids map[string][]string
	// onUUIDs is told of every change of uuids (watchUUIDs).
	onUUIDs func(node string, uuids []string)
	// stored returns the object the informer holds under a key, so that an
	// update of the status only reuses the stored spec; nil always
	// recomputes.
	stored func(key string) (any, bool, error)
}

// specKey identifies a spec made of shared parts: equal keys, equal specs.
type specKey struct {
	profile, product    string
	count               int32
	gpus                *v1alpha1.GPU
	links               *v1alpha1.GPULink
	nics                *v1alpha1.NIC
	nvl                 *v1alpha1.NVLinkDomain
	nGPUs, nLinks, nNIC int
}

func keyOf(s *v1alpha1.NodeTopologySpec) specKey {
	return specKey{
		profile: s.Profile, product: s.GPUProduct, count: s.GPUCount,
		gpus: first(s.GPUs), links: first(s.Links), nics: first(s.NICs), nvl: s.NVLinkDomain,
		nGPUs: len(s.GPUs), nLinks: len(s.Links), nNIC: len(s.NICs),
	}
}

func first[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

func newSpecTable() *specTable {
	return &specTable{
		seed:      maphash.MakeSeed(),
		gpus:      pool[v1alpha1.GPU]{hash: hashComparables[v1alpha1.GPU], equal: slices.Equal[[]v1alpha1.GPU]},
		links:     pool[v1alpha1.GPULink]{hash: hashComparables[v1alpha1.GPULink], equal: slices.Equal[[]v1alpha1.GPULink]},
		nics:      pool[v1alpha1.NIC]{hash: hashNICs, equal: equalNICs},
		nvl:       map[v1alpha1.NVLinkDomain]*v1alpha1.NVLinkDomain{},
		converted: map[specKey]*topology.NodeTopology{},
	}
}

// slim is the NodeTopology informer's transform. Objects of other types
// pass unchanged. It is idempotent, as transforms must be: a slim object
// slims to itself.
func (t *specTable) slim(obj any) (any, error) {
	nt, ok := obj.(*v1alpha1.NodeTopology)
	if !ok {
		return obj, nil
	}
	// Of the metadata, the handlers read the name and UID, the informer the
	// resource version and slim the generation: labels, annotations, owner
	// references and managedFields are per-node memory nothing reads.
	nt.ObjectMeta = metav1.ObjectMeta{
		Name: nt.Name, Namespace: nt.Namespace, UID: nt.UID, ResourceVersion: nt.ResourceVersion,
		Generation: nt.Generation, DeletionTimestamp: nt.DeletionTimestamp,
	}
	if t.reuse(nt) {
		return nt, nil
	}
	// The identifiers are checked (duplicate UUIDs make a spec invalid)
	// before they are dropped. An invalid object is kept whole: the GPU
	// index and the health check report its error from it.
	if _, err := nt.Spec.ToTopology(); err != nil {
		return nt, nil
	}
	s := &nt.Spec
	t.keepUUIDs(nt.Name, s.GPUs)
	// Written only where set: a slim object's slices are shared, and even
	// writing the same value races with their readers.
	for i, g := range s.GPUs {
		if g.UUID != "" || g.PCIBusID != "" {
			s.GPUs[i].UUID, s.GPUs[i].PCIBusID = "", ""
		}
	}
	for i, n := range s.NICs {
		if n.GUID != "" || n.PCIBusID != "" {
			s.NICs[i].GUID, s.NICs[i].PCIBusID = "", ""
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var shared [4]bool
	s.GPUs, shared[0] = t.gpus.intern(t.seed, s.GPUs)
	s.Links, shared[1] = t.links.intern(t.seed, s.Links)
	s.NICs, shared[2] = t.nics.intern(t.seed, s.NICs)
	s.NVLinkDomain, shared[3] = t.internDomain(s.NVLinkDomain)
	if shared != [4]bool{true, true, true, true} {
		return nt, nil
	}
	k := keyOf(s)
	if _, ok := t.converted[k]; !ok && len(t.converted) < maxSharedSpecs {
		if hw, err := s.ToTopology(); err == nil {
			t.converted[k] = hw
		}
	}
	return nt, nil
}

// reuse gives nt the spec of the stored object it replaces when only its
// status changed: same UID and generation (the API server bumps generation
// on every change of the spec). Objects without a generation are never
// reused.
func (t *specTable) reuse(nt *v1alpha1.NodeTopology) bool {
	if t.stored == nil || nt.Generation == 0 {
		return false
	}
	key, err := cache.MetaNamespaceKeyFunc(nt)
	if err != nil {
		return false
	}
	obj, ok, err := t.stored(key)
	if err != nil || !ok {
		return false
	}
	prev, ok := obj.(*v1alpha1.NodeTopology)
	if !ok || prev.UID != nt.UID || prev.Generation != nt.Generation {
		return false
	}
	nt.Spec = prev.Spec
	return true
}

// topology returns the placement model of s: the shared one when s is made
// of shared parts, else a fresh conversion. Callers only read it. A nil
// table always converts.
func (t *specTable) topology(s *v1alpha1.NodeTopologySpec) (*topology.NodeTopology, error) {
	if t != nil {
		t.mu.Lock()
		hw, ok := t.converted[keyOf(s)]
		t.mu.Unlock()
		if ok {
			return hw, nil
		}
	}
	return s.ToTopology()
}

// internDomain returns the stored NVLinkDomain equal to d and whether it
// is shared. Nil is shared: it is the same for every node without one.
func (t *specTable) internDomain(d *v1alpha1.NVLinkDomain) (*v1alpha1.NVLinkDomain, bool) {
	if d == nil {
		return nil, true
	}
	if p, ok := t.nvl[*d]; ok {
		return p, true
	}
	if len(t.nvl) >= maxSharedSpecs {
		return d, false
	}
	t.nvl[*d] = d
	return d, true
}

// pool holds one copy of each distinct slice it was given.
type pool[T any] struct {
	buckets map[uint64][][]T
	size    int
	hash    func(maphash.Seed, []T) uint64
	equal   func(a, b []T) bool
}

// intern returns the stored slice equal to v, storing v when there is none
// and the pool has room, and whether the result is shared. Empty slices are
// shared as they are.
func (p *pool[T]) intern(seed maphash.Seed, v []T) ([]T, bool) {
	if len(v) == 0 {
		return v, true
	}
	h := p.hash(seed, v)
	for _, s := range p.buckets[h] {
		if p.equal(s, v) {
			return s, true
		}
	}
	if p.size >= maxSharedSpecs {
		return v, false
	}
	if p.buckets == nil {
		p.buckets = map[uint64][][]T{}
	}
	p.buckets[h] = append(p.buckets[h], v)
	p.size++
	return v, true
}

func hashComparables[T comparable](seed maphash.Seed, v []T) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, e := range v {
		maphash.WriteComparable(&h, e)
	}
	return h.Sum64()
}

func hashNICs(seed maphash.Seed, v []v1alpha1.NIC) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, n := range v {
		for _, s := range []string{n.Name, n.GUID, n.State, n.PCIBusID} {
			h.WriteString(s)
			h.WriteByte(0)
		}
		maphash.WriteComparable(&h, [2]int32{n.RateGbps, n.NUMANode})
		for _, g := range n.NearestGPUs {
			maphash.WriteComparable(&h, g)
		}
		h.WriteByte(0)
		for _, c := range n.GPUPaths {
			h.WriteString(string(c))
			h.WriteByte(0)
		}
	}
	return h.Sum64()
}

func equalNICs(a, b []v1alpha1.NIC) bool {
	return slices.EqualFunc(a, b, func(x, y v1alpha1.NIC) bool {
		return x.Name == y.Name && x.GUID == y.GUID && x.RateGbps == y.RateGbps && x.State == y.State &&
			x.PCIBusID == y.PCIBusID && x.NUMANode == y.NUMANode &&
			slices.Equal(x.NearestGPUs, y.NearestGPUs) && slices.Equal(x.GPUPaths, y.GPUPaths)
	})
}
