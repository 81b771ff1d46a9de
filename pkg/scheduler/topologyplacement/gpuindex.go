package topologyplacement

import (
	"slices"
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// nodeGPUs is what the scheduler needs of a node's NodeTopology, computed
// once per object change so Filter and Score read it without copying or
// allocating.
type nodeGPUs struct {
	topology *topology.NodeTopology
	// selector is shared by nodes of one shape.
	selector *topology.Selector
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
type gpuIndex struct {
	mu    sync.RWMutex
	nodes map[string]*nodeGPUs
	// epoch changes whenever an entry is added or removed, which makes the
	// pointers kept by snapshotRows stale; updates in place leave it.
	epoch     uint64
	selectors map[string]*topology.Selector
	// specs converts specs, sharing the model of nodes of one profile (nil:
	// each node converts its own).
	specs *specTable
}

func newGPUIndex(specs *specTable) *gpuIndex {
	return &gpuIndex{nodes: map[string]*nodeGPUs{}, selectors: map[string]*topology.Selector{}, specs: specs}
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
	if _, ok := x.nodes[name]; ok {
		delete(x.nodes, name)
		x.epoch++
	}
}

// set indexes a NodeTopology. A malformed one removes the node from the
// index: it is then planned as GPUs without topology, never a crash.
func (x *gpuIndex) set(nt *v1alpha1.NodeTopology) {
	hw, err := x.specs.topology(&nt.Spec)
	x.mu.Lock()
	defer x.mu.Unlock()
	if err != nil {
		x.drop(nt.Name)
		return
	}
	// Nodes of a built-in profile share one selector; other hardware gets its
	// own (its table is built from its link matrix).
	key := nt.Spec.Profile
	if key == "" {
		key = "node/" + nt.Name
	}
	sel, ok := x.selectors[key]
	if !ok {
		if sel, err = topology.NewSelector(hw); err != nil {
			x.drop(nt.Name)
			return
		}
		x.selectors[key] = sel
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
	n, ok := x.nodes[nt.Name]
	if !ok {
		n = &nodeGPUs{}
		x.nodes[nt.Name] = n
		x.epoch++
	}
	*n = nodeGPUs{topology: hw, selector: sel, free: free, allocated: allocated}
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

// handler keeps the index in step with the informer.
func (x *gpuIndex) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				x.set(nt)
			}
		},
		UpdateFunc: func(_, obj any) {
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				x.set(nt)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				x.remove(nt.Name)
			}
		},
	}
}
