package topologyplacement

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Filter keeps gang members on their plan's open slots, and keeps every other
// GPU pod off GPUs that plans hold for gangs: that capacity is invisible to
// the scheduler's own resource accounting until the members are reserved.
func (p *TopologyPlacement) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := stateOf(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	node := nodeInfo.Node()
	if s.plan != nil {
		if len(s.plan.OpenSlotsOn(node.Name)) == 0 {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("node is not in PodGroup %s's plan (domain %s)", s.gang, s.plan.Plan().Domain.ID))
		}
		return nil
	}
	if s.req.GPUs == 0 {
		return nil
	}
	gang, held := p.gangs.Books.OffLimits(node.Name, corev1helpers.PodPriority(pod))
	if gang != "" {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("node is drained for PodGroup %s, which waits for its tightest domain", gang))
	}
	if held == 0 {
		return nil
	}
	// A pod that claims GPUs counts the free GPUs of the node's devices
	// (the allocator does not know Lockstep's books); one that requests
	// nvidia.com/gpu the node's free count.
	var free int
	if s.req.Claimed {
		free = p.view.ClaimedFree(node.Name, "")
	} else {
		free = int(nodeInfo.GetAllocatable().GetScalarResources()[lockstep.GPUResource]-nodeInfo.GetRequested().GetScalarResources()[lockstep.GPUResource]) - held
	}
	if free < s.req.GPUs {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%d of the node's free GPUs are held for gangs", held))
	}
	return nil
}
