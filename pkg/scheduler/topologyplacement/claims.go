package topologyplacement

import (
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/cache"
)

// followClaims replaces the books' prediction of a pod's GPUs with those
// its allocated ResourceClaims hold (gangmanager.Manager.TakeClaimed), on
// the node the books have it on. A plan predicts which devices the
// allocator will give a member, but the allocator does not read the plan:
// another gang's open slot, invisible to it, makes it take other devices,
// and the books then hid GPUs nobody held (the node looked full with half
// its GPUs idle) until the pod ended, days for a training job, unless the
// node's agent reported the pod. Claims in known are taken as given
// (the event being handled); the others are read from the claim tracker.
// Pods the books do not know, or whose GPU claims are not all allocated
// yet, are left alone.
func (p *TopologyPlacement) followClaims(pod *v1.Pod, known ...*resourcev1.ResourceClaim) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return
	}
	a, ok := p.gangs.Books.AssignmentOf(pod.UID)
	if !ok {
		return
	}
	if gpus, ok := p.view.ClaimedGPUs(pod, a.Node, known...); ok {
		p.gangs.TakeClaimed(p.logger, pod, a.Node, gpus)
	}
}

// claimEvents follows every allocated ResourceClaim to the pods it is
// reserved for. DynamicResources writes the allocation and the reservation
// in one update, in PreBind, before the pod is bound; Bind reads the
// claims again (the tracker has them by then), so the event matters for
// allocations the binding cycle did not see: a shared claim allocated for
// another pod, a reservation added later, a restart.
func (p *TopologyPlacement) claimEvents() cache.ResourceEventHandler {
	pods := p.handle.SharedInformerFactory().Core().V1().Pods().Lister()
	follow := func(obj any) {
		c, ok := obj.(*resourcev1.ResourceClaim)
		if !ok || c.Status.Allocation == nil {
			return
		}
		for _, r := range c.Status.ReservedFor {
			if r.APIGroup != "" || r.Resource != "pods" {
				continue
			}
			pod, err := pods.Pods(c.Namespace).Get(r.Name)
			if err != nil || pod.UID != r.UID {
				continue
			}
			p.followClaims(pod, c)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    follow,
		UpdateFunc: func(_, obj any) { follow(obj) },
	}
}
