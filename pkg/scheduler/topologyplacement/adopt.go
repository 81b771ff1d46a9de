package topologyplacement

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
)

// EventGPUAnnotationIgnored is the reason of the Warning event on a bound
// pod whose lockstep.dev/gpus annotation the books do not adopt.
const EventGPUAnnotationIgnored = "GPUAnnotationIgnored"

// adoptBoundGPUs puts a bound pod's annotated GPUs in the books when the
// books do not know the pod (a previous leader bound it, or its Binding's
// answer was lost and Unreserve forgot it), its node's agent has not
// reported its allocation yet, and adoption allows it; a pod whose
// annotation it refuses gets a Warning event once. A pod the books know
// has its claims followed instead (followClaims), and a pod that claims
// its GPUs adopts nothing: its claims hold them.
func (p *TopologyPlacement) adoptBoundGPUs(pod *v1.Pod) {
	if _, known := p.gangs.Books.AssignmentOf(pod.UID); known {
		p.followClaims(pod)
		return
	}
	req := p.view.Request(pod)
	if req.Claimed {
		// Its devices are its claims', which the DRA view keeps from
		// planners: the annotation, a plan's prediction, is no truth to
		// adopt.
		return
	}
	gpus, ignored := gangmanager.Adoption(pod, req.ResourceGPUs(), p.ourProfile, p.nodeGPUCount(pod.Spec.NodeName))
	if ignored != "" {
		// Once per pod and annotation: the handler sees every status write.
		if p.ignored.AddNew(string(pod.UID) + "/" + pod.Annotations[lockstep.AnnotationGPUs]) {
			p.logger.V(2).Info("Ignored a pod's GPU annotation", "pod", klog.KObj(pod), "node", pod.Spec.NodeName, "reason", ignored)
			p.handle.EventRecorder().Eventf(pod, nil, v1.EventTypeWarning, EventGPUAnnotationIgnored, "Scheduling", "%s", ignored)
		}
		return
	}
	if gpus == 0 {
		return
	}
	if _, ok := p.view.AllocatedTo(pod.Spec.NodeName, string(pod.UID)); ok {
		// Its allocation is known and already kept from planners: no guess
		// to hold (after a restart the NodeTopology informer may have run
		// before the pod informer).
		return
	}
	if p.gangs.Books.AdoptBound(pod.UID, pod.Spec.NodeName, gpus) {
		p.logger.V(2).Info("Adopted the GPUs of a pod bound outside this scheduler's books", "pod", klog.KObj(pod), "node", pod.Spec.NodeName, "gpus", gpus.String())
	}
}

// ourProfile reports whether schedulerName is a profile of this scheduler
// that enables the plugin. Without a recorded profile (a handle that does
// not name its profile), the default profile is.
func (p *TopologyPlacement) ourProfile(schedulerName string) bool {
	if p.profiles.Empty() {
		return schedulerName == lockstep.SchedulerName
	}
	return p.profiles.Has(schedulerName)
}

// nodeGPUCount returns how many GPUs node has: its NodeTopology's count,
// else its allocatable, else gangmanager.UnknownGPUCount.
func (p *TopologyPlacement) nodeGPUCount(node string) int {
	if n, ok := p.view.GPUCount(node); ok {
		return n
	}
	nd, err := p.handle.SharedInformerFactory().Core().V1().Nodes().Lister().Get(node)
	if err != nil {
		return gangmanager.UnknownGPUCount
	}
	if q, ok := nd.Status.Allocatable[lockstep.GPUResource]; ok {
		return int(q.Value())
	}
	return 0
}
