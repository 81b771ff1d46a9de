package coscheduling

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

// maxFreeColumns bounds the resources clusterFree sums at once. PodGroups
// name a handful (cpu, memory, pods, a GPU resource); one naming others
// starts the columns over with its own, so a PodGroup that invents
// resource names costs a recount, never memory without bound.
const maxFreeColumns = 8

// clusterFree is the minResources check's lower bound (checkClusterResource)
// kept between checks: per resource, the free capacity summed over the
// scheduler's node list, with each node's share remembered by its position
// in the list, its NodeInfo and the NodeInfo's generation (the scheduler
// bumps it on every change to the node or its pods, and keeps a node's
// snapshot NodeInfo in place as it updates it). A check re-reads only the
// nodes that changed since the one before, a few binds' worth, and compares
// sums.
//
// Why. Reading every node's free capacity for every PreFilter of a gang
// not yet admitted, through the NodeInfo's resource maps and
// resource.Quantity arithmetic, was 12% of the scheduler's CPU on the
// 25,200-node run (docs/benchmarks.md): a filling cluster's gangs keep
// retrying, each read nearly every node, and almost every node was as it
// was at the check before.
type clusterFree struct {
	mu sync.Mutex
	// resources are the columns: what sum and cells count, in order.
	resources []v1.ResourceName
	sum       []int64
	// rows[i] is what cells[i*len(resources):] was read from.
	rows  []freeRow
	cells []int64
}

type freeRow struct {
	// read says info and generation are set: a new row is read at the
	// first check, whatever the list holds there, nil included.
	read       bool
	info       fwk.NodeInfo
	generation int64
}

// covers reports whether nodes, as they are, have request free in total.
// It is a lower bound of upstream's answer: upstream counts the gang's own
// pods as free, which only adds, and a total that covers the request
// covers it by the list's last node at the latest, in whatever order
// upstream subtracts. Quantities are compared as the integers the nodes
// count in (milli-CPU, bytes, pods, devices), the request rounded up, so a
// fractional request never makes the bound say yes where upstream would
// not.
func (f *clusterFree) covers(nodes []fwk.NodeInfo, request v1.ResourceList) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fit(nodes, request)
	k := len(f.resources)
	for i, ni := range nodes {
		row := &f.rows[i]
		if row.read && row.info == ni && (ni == nil || row.generation == ni.GetGeneration()) {
			continue
		}
		cells := f.cells[i*k : (i+1)*k]
		for c := range cells {
			f.sum[c] -= cells[c]
			cells[c] = 0
		}
		*row = freeRow{read: true, info: ni}
		if ni == nil {
			continue
		}
		row.generation = ni.GetGeneration()
		if ni.Node() == nil {
			continue
		}
		for c, r := range f.resources {
			cells[c] = freeAmount(ni, r)
			f.sum[c] += cells[c]
		}
	}
	for r, q := range request {
		if f.sum[slices.Index(f.resources, r)] < wantAmount(r, q) {
			return false
		}
	}
	return true
}

// fit makes sure every resource of request is a column and there is a row
// per node, starting over (every row unread) when either changed. The
// caller holds f.mu.
func (f *clusterFree) fit(nodes []fwk.NodeInfo, request v1.ResourceList) {
	var missing []v1.ResourceName
	for r := range request {
		if !slices.Contains(f.resources, r) {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 && len(f.rows) == len(nodes) {
		return
	}
	switch {
	case len(f.resources)+len(missing) <= maxFreeColumns:
		f.resources = append(f.resources, missing...)
	default:
		f.resources = f.resources[:0]
		for r := range request {
			f.resources = append(f.resources, r)
		}
	}
	f.sum = make([]int64, len(f.resources))
	f.rows = make([]freeRow, len(nodes))
	f.cells = make([]int64, len(nodes)*len(f.resources))
}

// freeAmount is free(ni, r) as an integer in the unit the node counts r
// in: milli-CPU, bytes, pods, devices.
func freeAmount(ni fwk.NodeInfo, r v1.ResourceName) int64 {
	alloc, req := ni.GetAllocatable(), ni.GetRequested()
	switch r {
	case v1.ResourceCPU:
		return alloc.GetMilliCPU() - req.GetMilliCPU()
	case v1.ResourceMemory:
		return alloc.GetMemory() - req.GetMemory()
	case v1.ResourcePods:
		return int64(alloc.GetAllowedPodNumber() - len(ni.GetPods()))
	case v1.ResourceEphemeralStorage:
		return alloc.GetEphemeralStorage() - req.GetEphemeralStorage()
	}
	a, ok := alloc.GetScalarResources()[r]
	if !ok {
		return 0
	}
	return a - req.GetScalarResources()[r]
}

// wantAmount is q of resource r in freeAmount's unit, rounded up.
func wantAmount(r v1.ResourceName, q resource.Quantity) int64 {
	if r == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}
