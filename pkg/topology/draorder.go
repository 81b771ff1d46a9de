package topology

// DRAOrder is a node's GPUs as the DRA allocator meets their devices, so a
// planner can predict which devices it gives a claim. The allocator
// (k8s.io/dynamic-resource-allocation/structured) searches depth first: for
// each device of a request it walks the node's pool slice by slice, device
// by device, in the order the slices are listed, takes the first free one
// that satisfies the request and its constraints, and backtracks to the next
// device when the rest of the claim cannot be satisfied after it. The set it
// returns is therefore a function of this order, the free devices and the
// claim's constraints, not of NVLink.
type DRAOrder struct {
	// GPUs are the GPU indexes of the driver's devices, in device order.
	GPUs []int
	// Roots are, for each of GPUs, its PCIe root as a small number (equal
	// numbers, equal roots), NoPCIeRoot for a device that publishes none.
	Roots []int
}

// NoPCIeRoot marks a device without a PCIe root attribute: it satisfies no
// matchAttribute constraint on that attribute.
const NoPCIeRoot = -1

// NewDRAOrder returns the order of gpus (GPU indexes in device order) whose
// devices have the PCIe roots roots (attribute values, "" for none).
func NewDRAOrder(gpus []int, roots []string) *DRAOrder {
	o := &DRAOrder{GPUs: gpus, Roots: make([]int, len(gpus))}
	ids := map[string]int{}
	for i := range gpus {
		r := ""
		if i < len(roots) {
			r = roots[i]
		}
		if r == "" {
			o.Roots[i] = NoPCIeRoot
			continue
		}
		id, ok := ids[r]
		if !ok {
			id = len(ids)
			ids[r] = id
		}
		o.Roots[i] = id
	}
	return o
}

// Pick predicts the k GPUs the allocator gives a claim of one request of k
// GPUs, of free, and whether it gives any.
//
// Unconstrained (oneRoot false), the allocator takes the first k free
// devices in order. With oneRoot, the claim's request is NVIDIA's
// one-PCIe-root-first shape: a firstAvailable whose first alternative
// constrains its GPUs with matchAttribute on the PCIe root and whose second
// has no constraint. The first alternative's search starts at the first
// free device; when its root has fewer than k free devices, backtracking
// moves on to the next device, so the first root in device order with k
// free devices wins, and its first k free devices in order. When no root
// has k free devices, the second alternative takes the first k free.
func (o *DRAOrder) Pick(free GPUSet, k int, oneRoot bool) (GPUSet, bool) {
	if k < 1 {
		return 0, false
	}
	if oneRoot {
		var perRoot [MaxGPUs]int
		for i, g := range o.GPUs {
			if r := o.Roots[i]; r != NoPCIeRoot && r < MaxGPUs && free.Has(g) {
				perRoot[r]++
			}
		}
		for i, g := range o.GPUs {
			if r := o.Roots[i]; r != NoPCIeRoot && r < MaxGPUs && free.Has(g) && perRoot[r] >= k {
				return o.first(free, k, r), true
			}
		}
	}
	set := o.first(free, k, NoPCIeRoot)
	return set, set.Len() == k
}

// first returns the first k free GPUs in device order, only those of root
// unless it is NoPCIeRoot; fewer when there are not k.
func (o *DRAOrder) first(free GPUSet, k int, root int) GPUSet {
	var set GPUSet
	for i, g := range o.GPUs {
		if set.Len() == k {
			break
		}
		if free.Has(g) && (root == NoPCIeRoot || o.Roots[i] == root) {
			set |= NewGPUSet(g)
		}
	}
	return set
}

// NVLinkConnected reports whether every two GPUs of set are linked over
// NVLink or NVSwitch: a set whose all-reduce never leaves NVLink. GPUs
// outside the node make it false.
func (n *NodeTopology) NVLinkConnected(set GPUSet) bool {
	if set&^n.AllGPUs() != 0 {
		return false
	}
	gpus := set.Indices()
	for a, i := range gpus {
		for _, j := range gpus[a+1:] {
			if !n.Links[i][j].Class.IsNVLink() {
				return false
			}
		}
	}
	return true
}
