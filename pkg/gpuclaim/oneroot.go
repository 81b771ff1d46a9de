package gpuclaim

import (
	"slices"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// The subrequests of a request OneRootFirst rewrites: the same GPUs, first
// under one PCIe root, then anywhere.
const (
	OneRootSubrequest = "one-pcie-root"
	AnyRootSubrequest = "any-pcie-root"
)

// OneRootFirst rewrites a claim spec so that the allocator gives each of
// its GPU requests of two or more GPUs devices of one PCIe root when a node
// has that many free there, and any devices otherwise. NVIDIA's driver
// publishes no NVLink attribute, and the allocator otherwise takes the
// first free devices in slice order; the PCIe root is the one topology
// attribute it publishes, and on the nodes where NVLink does not reach
// every GPU it follows NVLink: a DGX-1's fully connected quads are its two
// roots, and a PCIe card pair bridged by NVLink sits behind one switch.
//
// A request becomes a firstAvailable of two alternatives of the same class,
// selectors, count and tolerations: OneRootSubrequest under a matchAttribute
// constraint on lockstep.DRAPCIeRootAttribute, then AnyRootSubrequest
// without one, so a claim that no root can satisfy (eight GPUs on a node of
// four per root, an NVSwitch node of one root per GPU) is still allocated.
// Left as written: requests of other classes (a ComputeDomain channel), of
// one GPU, of all GPUs, with admin access (which firstAvailable does not
// offer), already firstAvailable, or named by a constraint of the claim,
// whose author chose the devices' relation already. changed says whether
// any request was rewritten; the input is not modified.
func OneRootFirst(spec resourcev1.ResourceClaimSpec) (out resourcev1.ResourceClaimSpec, changed bool) {
	out = *spec.DeepCopy()
	pcieRoot := resourcev1.FullyQualifiedName(lockstep.DRAPCIeRootAttribute)
	for i := range out.Devices.Requests {
		r := &out.Devices.Requests[i]
		e := r.Exactly
		if e == nil || e.DeviceClassName != lockstep.DRAGPUDeviceClass || e.Count < 2 ||
			(e.AllocationMode != "" && e.AllocationMode != resourcev1.DeviceAllocationModeExactCount) ||
			(e.AdminAccess != nil && *e.AdminAccess) || constrained(spec.Devices.Constraints, r.Name) {
			continue
		}
		sub := func(name string) resourcev1.DeviceSubRequest {
			return resourcev1.DeviceSubRequest{Name: name, DeviceClassName: e.DeviceClassName, Selectors: e.Selectors,
				AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: e.Count, Tolerations: e.Tolerations, Capacity: e.Capacity}
		}
		r.FirstAvailable = []resourcev1.DeviceSubRequest{sub(OneRootSubrequest), sub(AnyRootSubrequest)}
		r.Exactly = nil
		out.Devices.Constraints = append(out.Devices.Constraints, resourcev1.DeviceConstraint{
			Requests: []string{r.Name + "/" + OneRootSubrequest}, MatchAttribute: &pcieRoot})
		changed = true
	}
	return out, changed
}

// constrained reports whether a constraint applies to request name: one
// naming it or one of its subrequests, or one naming none (all requests).
func constrained(constraints []resourcev1.DeviceConstraint, name string) bool {
	return slices.ContainsFunc(constraints, func(c resourcev1.DeviceConstraint) bool {
		return len(c.Requests) == 0 || slices.ContainsFunc(c.Requests, func(r string) bool {
			return r == name || len(r) > len(name) && r[:len(name)+1] == name+"/"
		})
	})
}

// OnePCIeRoot reports whether the allocator is asked to give a claim's GPUs
// from one PCIe root first: its GPUs come from one request, and that
// request (or its first alternative, which Count plans) is under a
// matchAttribute constraint on lockstep.DRAPCIeRootAttribute. The scheduler
// predicts such a claim's devices as the first root with enough free ones
// (topology.DRAOrder). A claim whose GPUs come from several requests is
// predicted as unconstrained.
func OnePCIeRoot(spec *resourcev1.ResourceClaimSpec) bool {
	// The names a constraint on the GPUs would use: "req", "req/sub".
	var names []string
	requests := 0
	for _, r := range spec.Devices.Requests {
		switch {
		case r.Exactly != nil && r.Exactly.DeviceClassName == lockstep.DRAGPUDeviceClass:
			requests++
			names = append(names, r.Name)
		case len(r.FirstAvailable) > 0 && r.FirstAvailable[0].DeviceClassName == lockstep.DRAGPUDeviceClass:
			requests++
			names = append(names, r.Name, r.Name+"/"+r.FirstAvailable[0].Name)
		}
	}
	if requests != 1 {
		return false
	}
	return slices.ContainsFunc(spec.Devices.Constraints, func(c resourcev1.DeviceConstraint) bool {
		if c.MatchAttribute == nil || *c.MatchAttribute != lockstep.DRAPCIeRootAttribute {
			return false
		}
		return len(c.Requests) == 0 || slices.ContainsFunc(c.Requests, func(r string) bool { return slices.Contains(names, r) })
	})
}
