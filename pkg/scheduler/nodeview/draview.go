package nodeview

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// deviceView is the GPU driver's devices as a plan reads them, kept up to
// date by ResourceSlice and ResourceClaim events rather than rebuilt per
// plan: listing 5,000 slices, grouping them by pool and looking up every
// node's UUIDs took most of a 5,000-node DRA plan.
//
// Per node-local pool of the GPU driver (NVIDIA's kubelet plugin names the
// pool after its node) it keeps the slices of the newest generation, their
// devices joined to the node's NodeTopology GPUs by UUID, and the joined
// GPUs no claim holds. A pool's slices are taken in name order: the
// allocator walks them in the order its informer lists them, which is no
// order at all, so any fixed one predicts it as well.
//
// Claims are read as the claim informer delivers them. The allocations
// DynamicResources made in this scheduler and has not seen come back yet
// (in flight between its Reserve and PreBind, or written and not yet
// watched) are the claim tracker's alone: while a reserved pod's claim is
// not seen allocated (reserving), a plan reads the tracker's allocated
// devices instead (draSnapshot).
//
// A deviceView is safe for concurrent use; read holds it for reading.
type deviceView struct {
	logger klog.Logger
	mu     sync.RWMutex
	// slices are the GPU driver's node-local slices by name, any generation.
	slices map[string]*resourcev1.ResourceSlice
	// pools are the published pools by name (the node's), each with the
	// names of its slices.
	pools map[string]*devicePool
	// uuids are each node's GPU UUIDs by NodeTopology index (specTable).
	uuids map[string][]string
	// claims are the allocated claims by namespace/name, each with the GPU
	// driver's devices it holds; taken counts the claims holding each
	// device.
	claims map[string][]structured.DeviceID
	taken  map[structured.DeviceID]int
	// reserving counts, per claim, the pods reserved with it whose
	// allocation the claim informer has not shown yet.
	reserving map[string]int
	// epoch moves whenever a pool is added or removed: a snapshot row
	// keeps its node's pool (snapshotRow.dra) while it stays.
	epoch uint64
	// unjoined counts the devices of every pool that join no GPU.
	unjoined int
	// orders interns the pools' device orders, so nodes that walk equal
	// orders share one and the planner reuses its last answer for them.
	orders map[string]*topology.DRAOrder
	// freed, when set, is called (without mu) after a claim released
	// devices it held: deallocated or deleted. Gangs whose "does not fit"
	// is remembered may fit now (Config.Freed). The claim's own event
	// requeues the waiting pods (requeue.ClaimFreed), but without this
	// they would replay the verdict made while the devices were taken:
	// the pod's deletion, the usual retry, comes before its claims are
	// deallocated.
	freed func()
}

// devicePool is a published pool: its node's part of a plan's view.
type devicePool struct {
	// names are the pool's slices; slices those of its newest generation,
	// in name order.
	names  sets.Set[string]
	slices []*resourcev1.ResourceSlice
	join   *nodeJoin
	// free are the joined GPUs whose devices no claim holds.
	free topology.GPUSet
}

// maxDRAOrders bounds deviceView.orders: a cluster has a handful of GPU
// layouts; past that, orders are kept unshared.
const maxDRAOrders = 1024

func newDeviceView(logger klog.Logger) *deviceView {
	return &deviceView{
		logger:    logger,
		slices:    map[string]*resourcev1.ResourceSlice{},
		pools:     map[string]*devicePool{},
		uuids:     map[string][]string{},
		claims:    map[string][]structured.DeviceID{},
		taken:     map[structured.DeviceID]int{},
		reserving: map[string]int{},
		epoch:     1,
		orders:    map[string]*topology.DRAOrder{},
	}
}

// gpuPool returns the pool a ResourceSlice publishes GPUs of the node in:
// the GPU driver's node-local one, "" for any other slice.
func gpuPool(s *resourcev1.ResourceSlice) string {
	if s == nil || s.Spec.Driver != lockstep.DRAGPUDriver || s.Spec.NodeName == nil || s.Spec.Pool.Name != *s.Spec.NodeName {
		return ""
	}
	return s.Spec.Pool.Name
}

// OnSlice records a ResourceSlice added, or changed from old (nil for an
// add, or a resync's unchanged object).
func (v *deviceView) OnSlice(old, s *resourcev1.ResourceSlice) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if old != nil && old.Name != s.Name {
		v.removeSlice(old.Name)
	}
	prev := v.slices[s.Name]
	if gpuPool(s) == "" {
		if prev != nil {
			v.removeSlice(s.Name)
		}
		return
	}
	if prev != nil && gpuPool(prev) != gpuPool(s) {
		v.removeSlice(s.Name)
	}
	v.slices[s.Name] = s
	pool := v.pools[gpuPool(s)]
	if pool == nil {
		pool = &devicePool{names: sets.New[string]()}
		v.pools[gpuPool(s)] = pool
		v.epoch++
	}
	pool.names.Insert(s.Name)
	v.refreshPool(gpuPool(s))
}

// OnSliceDelete records a ResourceSlice deleted; obj may be a tombstone.
func (v *deviceView) OnSliceDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	s, ok := obj.(*resourcev1.ResourceSlice)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.removeSlice(s.Name)
}

// removeSlice forgets the slice of that name. The caller holds v.mu.
func (v *deviceView) removeSlice(name string) {
	s, ok := v.slices[name]
	if !ok {
		return
	}
	delete(v.slices, name)
	pool := v.pools[gpuPool(s)]
	if pool == nil {
		return
	}
	pool.names.Delete(name)
	v.refreshPool(gpuPool(s))
}

// OnClaim records a ResourceClaim added or changed: the GPU driver's
// devices its allocation holds, none while it is not allocated.
func (v *deviceView) OnClaim(c *resourcev1.ResourceClaim) {
	key := c.Namespace + "/" + c.Name
	var held []structured.DeviceID
	if c.Status.Allocation != nil {
		for _, r := range c.Status.Allocation.Devices.Results {
			// As the scheduler's allocated devices: admin access takes
			// no device.
			if r.Driver == lockstep.DRAGPUDriver && !ptr.Deref(r.AdminAccess, false) {
				held = append(held, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
			}
		}
	}
	v.mu.Lock()
	if c.Status.Allocation != nil {
		delete(v.reserving, key)
	}
	released := v.setClaim(key, held, c.Status.Allocation != nil)
	v.mu.Unlock()
	if released && v.freed != nil {
		v.freed()
	}
}

// OnClaimDelete records a ResourceClaim deleted; obj may be a tombstone.
func (v *deviceView) OnClaimDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return
	}
	key := c.Namespace + "/" + c.Name
	v.mu.Lock()
	delete(v.reserving, key)
	released := v.setClaim(key, nil, false)
	v.mu.Unlock()
	if released && v.freed != nil {
		v.freed()
	}
}

// setClaim records claim key allocated with the devices held, or not
// allocated, and reports whether the claim let go of a device it held.
// The caller holds v.mu.
func (v *deviceView) setClaim(key string, held []structured.DeviceID, allocated bool) (released bool) {
	old, was := v.claims[key]
	if allocated {
		v.claims[key] = held
	} else {
		delete(v.claims, key)
	}
	if was == allocated && slices.Equal(old, held) {
		return false
	}
	for _, id := range old {
		if !slices.Contains(held, id) {
			released = true
		}
	}
	changed := sets.New[string]()
	for _, id := range old {
		if v.taken[id]--; v.taken[id] <= 0 {
			delete(v.taken, id)
		}
		changed.Insert(id.Pool.String())
	}
	for _, id := range held {
		v.taken[id]++
		changed.Insert(id.Pool.String())
	}
	for name := range changed {
		if pool := v.pools[name]; pool != nil {
			pool.free = v.freeOf(name, pool.join)
		}
	}
	return released
}

// OnUUIDs records a node's GPU UUIDs by index, nil once its NodeTopology
// is gone (specTable.keepUUIDs, forgetUUIDs).
func (v *deviceView) OnUUIDs(node string, uuids []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if uuids == nil {
		delete(v.uuids, node)
	} else {
		v.uuids[node] = uuids
	}
	if v.pools[node] != nil {
		v.refreshPool(node)
	}
}

// reservingClaims records that a pod was reserved with the claims named:
// until the claim informer shows each allocated, plans read the claim
// tracker's allocations.
func (v *deviceView) reservingClaims(namespace string, names []string) {
	if len(names) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, name := range names {
		key := namespace + "/" + name
		if _, allocated := v.claims[key]; !allocated {
			v.reserving[key]++
		}
	}
}

// unreservedClaims undoes reservingClaims for a pod unreserved.
func (v *deviceView) unreservedClaims(namespace string, names []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, name := range names {
		key := namespace + "/" + name
		if v.reserving[key]--; v.reserving[key] <= 0 {
			delete(v.reserving, key)
		}
	}
}

// refreshPool brings a pool up to date with its slices and its node's
// UUIDs, dropping it once it has no slice. The caller holds v.mu.
func (v *deviceView) refreshPool(name string) {
	pool := v.pools[name]
	if pool.names.Len() == 0 {
		if pool.join != nil {
			v.unjoined -= len(pool.join.unjoined)
		}
		delete(v.pools, name)
		v.epoch++
		return
	}
	// Only the newest generation counts: older ones are being replaced.
	newest := int64(-1)
	var newer []*resourcev1.ResourceSlice
	for _, n := range sets.List(pool.names) {
		s := v.slices[n]
		switch gen := s.Spec.Pool.Generation; {
		case gen > newest:
			newest, newer = gen, append(newer[:0], s)
		case gen == newest:
			newer = append(newer, s)
		}
	}
	uuids := v.uuids[name]
	if pool.join != nil && slices.Equal(pool.slices, newer) && sameSlice(pool.join.uuids, uuids) {
		return
	}
	if pool.join != nil {
		v.unjoined -= len(pool.join.unjoined)
	}
	pool.slices = newer
	pool.join = joinNode(newer, uuids)
	pool.join.order = v.intern(pool.join.order)
	v.unjoined += len(pool.join.unjoined)
	if len(pool.join.unjoined) > 0 && v.logger.V(2).Enabled() {
		v.logger.V(2).Info("GPU devices that join no GPU of the node's NodeTopology are not planned on", "node", name, "devices", pool.join.unjoined)
	}
	pool.free = v.freeOf(name, pool.join)
}

// freeOf is the GPUs of join whose devices of pool no claim holds. The
// caller holds v.mu.
func (v *deviceView) freeOf(pool string, join *nodeJoin) topology.GPUSet {
	free := join.all
	if len(v.taken) == 0 {
		return free
	}
	for name, gpu := range join.gpus {
		if v.taken[structured.MakeDeviceID(lockstep.DRAGPUDriver, pool, name)] > 0 {
			free &^= topology.NewGPUSet(gpu)
		}
	}
	return free
}

// intern returns the order equal to o that v keeps. The caller holds v.mu.
func (v *deviceView) intern(o *topology.DRAOrder) *topology.DRAOrder {
	var b strings.Builder
	for i, g := range o.GPUs {
		b.WriteString(strconv.Itoa(g))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(o.Roots[i]))
		b.WriteByte(',')
	}
	key := b.String()
	if kept, ok := v.orders[key]; ok {
		return kept
	}
	if len(v.orders) < maxDRAOrders {
		v.orders[key] = o
	}
	return o
}

// freeExcept is the GPUs of join but those of the devices named.
func freeExcept(join *nodeJoin, taken []string) topology.GPUSet {
	free := join.all
	for _, name := range taken {
		if gpu, ok := join.gpus[name]; ok {
			free &^= topology.NewGPUSet(gpu)
		}
	}
	return free
}

// needsTracker reports whether a plan must read the claim tracker's
// allocations: a reserved pod's claim is not seen allocated yet.
func (v *deviceView) needsTracker() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.reserving) > 0
}

// read holds v for reading until the returned function is called, for a
// snapshot that reads its nodes (draView.pool).
func (v *deviceView) read() func() {
	v.mu.RLock()
	return v.mu.RUnlock
}

// handlers are the informer handlers that keep v: one for
// ResourceSlices, one for ResourceClaims.
func (v *deviceView) handlers() (slices, claims cache.ResourceEventHandler) {
	slices = cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*resourcev1.ResourceSlice); ok {
				v.OnSlice(nil, s)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			old, _ := oldObj.(*resourcev1.ResourceSlice)
			if s, ok := obj.(*resourcev1.ResourceSlice); ok {
				v.OnSlice(old, s)
			}
		},
		DeleteFunc: v.OnSliceDelete,
	}
	claims = cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c, ok := obj.(*resourcev1.ResourceClaim); ok {
				v.OnClaim(c)
			}
		},
		UpdateFunc: func(_, obj any) {
			if c, ok := obj.(*resourcev1.ResourceClaim); ok {
				v.OnClaim(c)
			}
		},
		DeleteFunc: v.OnClaimDelete,
	}
	return slices, claims
}

// rebuiltDeviceView is the view of the objects given, built from scratch:
// what a plan reads of a Source that no informer feeds (FollowDevices not called), and
// what the incremental view must equal.
func rebuiltDeviceView(logger klog.Logger, all []*resourcev1.ResourceSlice, claims []*resourcev1.ResourceClaim, uuidsOf func(node string) []string) *deviceView {
	v := newDeviceView(logger)
	for _, s := range all {
		if pool := gpuPool(s); pool != "" {
			if _, ok := v.uuids[pool]; !ok {
				if u := uuidsOf(pool); u != nil {
					v.uuids[pool] = u
				}
			}
		}
	}
	for _, c := range claims {
		v.OnClaim(c)
	}
	for _, s := range all {
		v.OnSlice(nil, s)
	}
	return v
}

// takenByPool indexes the GPU driver's devices of allocated by pool.
func takenByPool(allocated sets.Set[structured.DeviceID]) map[string][]string {
	// Claims hold few devices next to the cluster's: index them by pool.
	taken := map[string][]string{}
	for id := range allocated {
		if id.Driver.String() == lockstep.DRAGPUDriver {
			taken[id.Pool.String()] = append(taken[id.Pool.String()], id.Device.String())
		}
	}
	return taken
}

// podClaimNames are the ResourceClaims a pod's claims name, or that were
// generated for it from templates.
func podClaimNames(pod *v1.Pod) []string {
	var names []string
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			names = append(names, *pc.ResourceClaimName)
			continue
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == pc.Name && st.ResourceClaimName != nil {
				names = append(names, *st.ResourceClaimName)
			}
		}
	}
	return names
}

// Reserved records a pod reserved: DynamicResources allocates its claims
// in this scheduler (reservingClaims). A view that follows no devices
// (WatchDevices) records nothing.
func (v *View) Reserved(pod *v1.Pod) {
	if v.devices != nil && len(pod.Spec.ResourceClaims) > 0 {
		v.devices.reservingClaims(pod.Namespace, podClaimNames(pod))
	}
}

// Unreserved records a reserved pod unreserved: DynamicResources dropped
// the allocations it had not written.
func (v *View) Unreserved(pod *v1.Pod) {
	if v.devices != nil && len(pod.Spec.ResourceClaims) > 0 {
		v.devices.unreservedClaims(pod.Namespace, podClaimNames(pod))
	}
}

// Registrar adds an informer handler and remembers its registration (the
// plugin waits for every one to sync before it plans).
type Registrar func(informer HandlerAdder, h cache.ResourceEventHandler) error

// HandlerAdder is an informer, client-go's or controller-runtime's.
type HandlerAdder interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// FollowDevices has the view follow the GPU driver's devices by informer
// events, and the NodeTopology UUIDs it keeps, instead of reading every
// slice for each plan: it returns the one handler for the scheduler's
// ResourceSlice informer and the one for its ResourceClaim informer (the
// ones the DRA manager reads). Only for a view with a DRA source, before
// its informers start.
func (v *View) FollowDevices() (slices, claims cache.ResourceEventHandler) {
	d := newDeviceView(v.logger)
	d.freed = v.gpus.freed
	v.specs.watchUUIDs(d.OnUUIDs)
	v.devices = d
	return d.handlers()
}
