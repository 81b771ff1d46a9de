package topologyplacement

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
)

// Reserve gives a gang member an open slot of its plan on the chosen node.
func (p *TopologyPlacement) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	p.view.Reserved(pod)
	s, err := stateOf(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s.plan == nil {
		// A pod that claims GPUs gets the devices DynamicResources
		// allocates, which the DRA view reads: a guess in the books would
		// only hide others.
		if !s.req.Claimed {
			p.reserveBestSet(pod, nodeName, s.req.GPUs)
		}
		return nil
	}
	a, ok := p.gangs.Books.ReserveSlot(s.gang, pod.UID, nodeName, s.slot)
	if !ok {
		// The plan changed under the pod (expired or invalidated); retry it.
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("PodGroup %s's plan has no open slot on %s any more", s.gang, nodeName))
	}
	p.gangs.ForgetSteer(pod.UID)
	// A reserved member counts as bound in its gang's other size classes'
	// plans (gangmanager.Manager.ClassMembers).
	p.gangs.Verdicts.GangChanged(gangmanager.GangKey(pod))
	logger := klog.FromContext(ctx)
	if s.slot >= 0 && a.Slot != s.slot {
		// Its rank's slot went to another pod, or its node did not take this
		// one: the rank is kept (the pod's environment has it) and the ring
		// crosses a boundary more than it had to.
		logger.V(2).Info("Ranked member reserved off its rank's slot", "plugin", Name, "pod", klog.KObj(pod), "node", nodeName, "podGroup", s.gang, "wantSlot", s.slot, "slot", a.Slot)
	}
	logger.V(5).Info("Reserved plan slot", "plugin", Name, "pod", klog.KObj(pod), "node", nodeName, "podGroup", s.gang, "slot", a.Slot)
	return nil
}

// Unreserve runs when a reserved member fails (Permit rejected or timed out,
// binding failed). Coscheduling rejects the gang's other waiting members
// then, so the whole plan is dropped and the gang is planned afresh.
func (p *TopologyPlacement) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	p.view.Unreserved(pod)
	// A binding cycle that failed before Bind (another plugin's PreBind)
	// ends its count here.
	p.binds.done(pod.UID)
	key := p.planKey(pod)
	if key == "" {
		p.gangs.Books.ForgetPod(pod.UID)
		p.gangs.Verdicts.MayFit()
		return
	}
	if _, ok := p.gangs.Books.Get(key); ok {
		klog.FromContext(ctx).V(2).Info("Gang member unreserved; dropping the plan", "plugin", Name, "pod", klog.KObj(pod), "podGroup", key)
		p.invalidate(key, dropUnreserved)
	}
	// Then the pod's own GPUs go back; the plan's other members keep theirs
	// until they are unreserved too or gone (Books.Drop). Not before the
	// drop: forgetting the last member of a complete plan forgets the plan,
	// and the gang would not be retried.
	p.gangs.Books.ForgetPod(pod.UID)
	p.gangs.Verdicts.GangChanged(gangmanager.GangKey(pod))
	p.gangs.Verdicts.MayFit()
}

// reserveBestSet picks the NVLink-best free GPU set of the node for a GPU pod
// outside gangs, so PreBind can tell the device plugin. Nodes without a
// NodeTopology are left to the device plugin's own choice.
func (p *TopologyPlacement) reserveBestSet(pod *v1.Pod, nodeName string, k int) {
	if k == 0 {
		return
	}
	if set, _, ok := p.view.BestFree(nodeName, k); ok {
		p.gangs.Books.Assign(pod.UID, nodeName, set)
	}
}
