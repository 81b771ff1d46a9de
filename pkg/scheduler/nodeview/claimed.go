package nodeview

import (
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// ClaimedGPUs returns the GPUs of node that pod's ResourceClaims were
// allocated, as NodeTopology indexes joined by UUID: what the pod holds,
// which replaces the plan's prediction in the books once the allocator
// has chosen (the allocator does not read the plan; another gang's open
// slot, which it cannot see, makes it choose other devices). The claims
// are read as the claim tracker has them; a claim in known is taken as
// given instead (the one whose informer event is being handled, which the
// tracker may not have seen yet).
//
// ok is false until every claim of the pod that asks for GPUs is
// allocated and each of its devices on the node joins a GPU: a partial
// answer would free GPUs the pod is about to hold. A pod that claims no
// GPU, or a scheduler without DRA, has no answer either.
func (v *View) ClaimedGPUs(pod *v1.Pod, node string, known ...*resourcev1.ResourceClaim) (gpus topology.GPUSet, ok bool) {
	if v.dra == nil || node == "" {
		return 0, false
	}
	join := v.joinOf(node)
	if join == nil {
		return 0, false
	}
	asked := false
	for _, name := range podClaimNames(pod) {
		claim := claimNamed(known, pod.Namespace, name)
		if claim == nil {
			c, err := v.dra.Claim(pod.Namespace, name)
			if err != nil {
				return 0, false
			}
			claim = c
		}
		if claim.Status.Allocation == nil {
			if n, problem := gpuclaim.Count(&claim.Spec); n > 0 || problem != "" {
				// It asks for GPUs (or for what the planner cannot read)
				// and has none yet.
				return 0, false
			}
			continue
		}
		held, unknown := gpuclaim.NodeGPUs(claim.Status.Allocation, node, join.gpus)
		if len(unknown) > 0 {
			return 0, false
		}
		if held != 0 {
			asked = true
		}
		gpus |= held
	}
	return gpus, asked
}

// claimNamed is the claim of that name among known, nil when none is.
func claimNamed(known []*resourcev1.ResourceClaim, namespace, name string) *resourcev1.ResourceClaim {
	for _, c := range known {
		if c != nil && c.Namespace == namespace && c.Name == name {
			return c
		}
	}
	return nil
}

// unclaimedGPUs returns the GPUs of a DRA node whose devices no claim
// holds (in-flight allocations of this scheduler included), and false for
// a scheduler without DRA. A node that publishes no GPU device has none.
func (v *View) unclaimedGPUs(node string) (topology.GPUSet, bool) {
	if v.dra == nil {
		return 0, false
	}
	view, err := v.draSnapshot()
	if err != nil {
		// The tracker could not be read: nothing is known free.
		return 0, true
	}
	done := view.devices.read()
	defer done()
	pool := view.devices.pools[node]
	if pool == nil || pool.join == nil {
		return 0, true
	}
	if view.taken != nil {
		return freeExcept(pool.join, view.taken[node]), true
	}
	return pool.free, true
}
