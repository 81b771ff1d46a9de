// Package gpuclaim reads ResourceClaim specs that ask for GPUs of NVIDIA's
// DRA driver (the lockstep.DRAGPUDeviceClass): how many GPUs a claim asks
// for, and whether TopologyPlacement can predict what the allocator will
// give it. The scheduler plans with it and the controller sizes jobs with
// it, so both read a claim the same way.
package gpuclaim

import (
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Count counts the GPUs a claim spec asks for, or says why TopologyPlacement
// cannot plan it. A request of the GPU class asks for Count GPUs (mode
// ExactCount, the default); a firstAvailable request counts as its first
// alternative, the one the allocator tries first, when that is of the GPU
// class. What the planner cannot predict is refused rather than planned
// wrongly: all of a node's GPUs (the plan would not know how many), CEL
// selectors, admin access, a GPU class offered only as a fallback, and
// constraints on GPUs other than matchAttribute on the PCIe root.
func Count(spec *resourcev1.ResourceClaimSpec) (int, string) {
	gpus := 0
	// GPU request names, for the constraints: "req" and "req/sub".
	gpuRequests := sets.New[string]()
	for _, r := range spec.Devices.Requests {
		switch {
		case r.Exactly != nil:
			if r.Exactly.DeviceClassName != lockstep.DRAGPUDeviceClass {
				continue
			}
			if len(r.Exactly.Selectors) > 0 {
				return 0, fmt.Sprintf("request %q selects GPUs with CEL selectors, which TopologyPlacement cannot evaluate; choose nodes with node affinity instead", r.Name)
			}
			if r.Exactly.AdminAccess != nil && *r.Exactly.AdminAccess {
				return 0, fmt.Sprintf("request %q asks for admin access to GPUs, which takes no GPU; use a claim outside the gang", r.Name)
			}
			n, problem := exactGPUs(r.Name, r.Exactly.AllocationMode, r.Exactly.Count)
			if problem != "" {
				return 0, problem
			}
			gpus += n
			gpuRequests.Insert(r.Name)
		case len(r.FirstAvailable) > 0:
			first := r.FirstAvailable[0]
			if first.DeviceClassName != lockstep.DRAGPUDeviceClass {
				for _, sub := range r.FirstAvailable[1:] {
					if sub.DeviceClassName == lockstep.DRAGPUDeviceClass {
						return 0, fmt.Sprintf("request %q offers GPUs only as a fallback (subrequest %q): TopologyPlacement plans a request's first alternative; put the GPU subrequest first or in a request of its own", r.Name, sub.Name)
					}
				}
				continue
			}
			if len(first.Selectors) > 0 {
				return 0, fmt.Sprintf("subrequest %q selects GPUs with CEL selectors, which TopologyPlacement cannot evaluate; choose nodes with node affinity instead", r.Name+"/"+first.Name)
			}
			n, problem := exactGPUs(r.Name+"/"+first.Name, first.AllocationMode, first.Count)
			if problem != "" {
				return 0, problem
			}
			gpus += n
			gpuRequests.Insert(r.Name, r.Name+"/"+first.Name)
		}
	}
	for _, c := range spec.Devices.Constraints {
		touches := len(c.Requests) == 0 && gpuRequests.Len() > 0
		for _, name := range c.Requests {
			touches = touches || gpuRequests.Has(name)
		}
		if !touches || (c.MatchAttribute != nil && *c.MatchAttribute == lockstep.DRAPCIeRootAttribute) {
			continue
		}
		what := "distinctAttribute"
		if c.MatchAttribute != nil {
			what = "matchAttribute " + string(*c.MatchAttribute)
		}
		return 0, fmt.Sprintf("a constraint (%s) on GPU requests %s: TopologyPlacement predicts only matchAttribute %s; drop the constraint or use that one", what, strings.Join(sets.List(gpuRequests), ","), lockstep.DRAPCIeRootAttribute)
	}
	return gpus, ""
}

// exactGPUs is the GPU count of one request of the GPU class.
func exactGPUs(name string, mode resourcev1.DeviceAllocationMode, count int64) (int, string) {
	switch mode {
	case resourcev1.DeviceAllocationModeExactCount, "":
		// The API defaults count to 1; a template read from a cache that
		// skipped defaulting is read the same way.
		return int(max(count, 1)), ""
	case resourcev1.DeviceAllocationModeAll:
		return 0, fmt.Sprintf("request %q asks for all GPUs of a node (allocationMode All), which a gang plan cannot size; ask for an exact count", name)
	default:
		return 0, fmt.Sprintf("request %q has allocationMode %q, which TopologyPlacement does not know", name, mode)
	}
}
