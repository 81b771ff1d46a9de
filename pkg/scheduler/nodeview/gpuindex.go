package nodeview

import (
	"reflect"
	"slices"
	"sync"
	"unique"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// nodeGPUs is what the scheduler needs of a node's NodeTopology, computed
// once per object change so Filter and Score read it without copying or
// allocating.
type nodeGPUs struct {
	topology *topology.NodeTopology
	// selector is shared by nodes of one hardware; hardware is its key in
	// gpuIndex.selectors (topology.SelectorKey).
	selector *topology.Selector
	hardware string
	// free are the healthy GPUs the agent reports no pod holding.
	free topology.GPUSet
	// allocated are the pods the agent reports holding GPUs, and which:
	// their GPUs are known, so adoption need not guess them, and
	// preemption knows what evicting one frees.
	allocated []podGPUs
}

// podGPUs are the GPUs a node's agent reports a pod (by UID) holding.
type podGPUs struct {
	pod  string
	gpus topology.GPUSet
}

// gpuIndex maps node names to nodeGPUs, fed by the NodeTopology informer.
// A NodeTopology update rewrites the node's entry in place (under mu), so
// the planner's snapshot can keep a pointer to it per node instead of
// looking the name up for each of thousands of nodes on every plan.
//
// Selectors are shared by the nodes of one hardware, whatever their
// profile is called: keyed by what topology.NewSelector reads of a node
// (topology.SelectorKey), so a node whose hardware changed gets another, and
// counted by the nodes using them, so the last node leaving a selector
// frees it. A selector is built without the index's lock held: for a
// node of 16 GPUs that is a table of some 5 MB, during which Filter,
// Score and the planner's snapshot would otherwise wait.
type gpuIndex struct {
	mu    sync.RWMutex
	nodes map[string]*nodeGPUs
	// epoch changes whenever an entry is added or removed, which makes the
	// pointers kept by snapshotRows stale; updates in place leave it.
	epoch     uint64
	selectors map[string]*sharedSelector
	// specs converts specs, sharing the model of nodes of one profile (nil:
	// each node converts its own).
	specs *specTable
	// newSelector is topology.NewSelector; tests watch it.
	newSelector func(*topology.NodeTopology) (*topology.Selector, error)
	// freed, when set, is called after an update that can make room: a
	// node indexed anew or with other hardware, or GPUs free that were not.
	// A heartbeat changes none of these.
	freed func()
}

// sharedSelector is a selector and how many indexed nodes use it.
type sharedSelector struct {
	selector *topology.Selector
	nodes    int
}

func newGPUIndex(specs *specTable) *gpuIndex {
	return &gpuIndex{nodes: map[string]*nodeGPUs{}, selectors: map[string]*sharedSelector{}, specs: specs, newSelector: topology.NewSelector}
}

func (x *gpuIndex) get(node string) (nodeGPUs, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if n, ok := x.nodes[node]; ok {
		return *n, true
	}
	return nodeGPUs{}, false
}

// drop removes a node's entry. The caller holds x.mu.
func (x *gpuIndex) drop(name string) {
	if n, ok := x.nodes[name]; ok {
		x.release(n.hardware)
		delete(x.nodes, name)
		x.epoch++
	}
}

// release counts one node fewer using the selector of hardware, and
// forgets the selector when none is left. The caller holds x.mu.
func (x *gpuIndex) release(hardware string) {
	if s, ok := x.selectors[hardware]; ok {
		if s.nodes--; s.nodes <= 0 {
			delete(x.selectors, hardware)
		}
	}
}

// set indexes a NodeTopology. A malformed one removes the node from the
// index: it is then planned as GPUs without topology, never a crash.
func (x *gpuIndex) set(nt *v1alpha1.NodeTopology) {
	hw, err := x.specs.topology(&nt.Spec)
	if err != nil {
		x.remove(nt.Name)
		return
	}
	hardware, sel, err := x.selectorFor(nt.Name, hw)
	if err != nil {
		x.remove(nt.Name)
		return
	}
	free := hw.AllGPUs()
	for _, h := range nt.Status.GPUHealth {
		free &^= topology.NewGPUSet(int(h.Index))
	}
	var allocated []podGPUs
	for _, a := range nt.Status.Allocations {
		var gpus topology.GPUSet
		for _, g := range a.GPUs {
			gpus |= topology.NewGPUSet(int(g))
		}
		free &^= gpus
		allocated = append(allocated, podGPUs{pod: a.PodUID, gpus: gpus})
	}
	if x.store(nt.Name, hw, hardware, sel, free, allocated) && x.freed != nil {
		x.freed()
	}
}

// store writes a node's entry and reports whether it can make room (freed).
func (x *gpuIndex) store(name string, hw *topology.NodeTopology, hardware string, sel *topology.Selector, free topology.GPUSet, allocated []podGPUs) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	// Another node of the hardware may have stored its selector since, or
	// the last one using it gone: the stored one is shared, else this one
	// is stored.
	shared, ok := x.selectors[hardware]
	if !ok {
		shared = &sharedSelector{selector: sel}
		x.selectors[hardware] = shared
	}
	n, ok := x.nodes[name]
	// A heartbeat's model is the same shared one (specTable), or an equal
	// fresh conversion.
	freed := !ok || free&^n.free != 0 || (n.topology != hw && !reflect.DeepEqual(n.topology, hw))
	switch {
	case !ok:
		n = &nodeGPUs{}
		x.nodes[name] = n
		x.epoch++
		shared.nodes++
	case n.hardware != hardware:
		x.release(n.hardware)
		shared.nodes++
	}
	*n = nodeGPUs{topology: hw, selector: shared.selector, hardware: hardware, free: free, allocated: allocated}
	return freed
}

// selectorFor returns the key of hw's hardware and a selector for it: the
// node's own when its model is unchanged (a status update), else the one
// nodes of the hardware share, else a new one, built without x.mu held.
func (x *gpuIndex) selectorFor(node string, hw *topology.NodeTopology) (string, *topology.Selector, error) {
	x.mu.RLock()
	n, ok := x.nodes[node]
	if ok && n.topology == hw {
		hardware, sel := n.hardware, n.selector
		x.mu.RUnlock()
		return hardware, sel, nil
	}
	x.mu.RUnlock()
	// Every node keeps its hardware's key: one copy per kind of
	// hardware, not one per node (about 700 bytes for an 8-GPU HGX; 3.5 MB
	// of the heap at 5,000 nodes).
	hardware := unique.Make(topology.SelectorKey(hw)).Value()
	x.mu.RLock()
	shared, ok := x.selectors[hardware]
	x.mu.RUnlock()
	if ok {
		return hardware, shared.selector, nil
	}
	sel, err := x.newSelector(hw)
	return hardware, sel, err
}

// reports reports whether node's agent reports pod holding GPUs.
func (x *gpuIndex) reports(node, pod string) bool {
	_, ok := x.allocatedTo(node, pod)
	return ok
}

// allocatedTo returns the GPUs node's agent reports pod holding.
func (x *gpuIndex) allocatedTo(node, pod string) (topology.GPUSet, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n, ok := x.nodes[node]
	if !ok {
		return 0, false
	}
	i := slices.IndexFunc(n.allocated, func(a podGPUs) bool { return a.pod == pod })
	if i < 0 {
		return 0, false
	}
	return n.allocated[i].gpus, true
}

func (x *gpuIndex) remove(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.drop(name)
}
