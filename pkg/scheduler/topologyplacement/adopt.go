package topologyplacement

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// EventGPUAnnotationIgnored is the reason of the Warning event on a bound
// pod whose lockstep.dev/gpus annotation the books do not adopt.
const EventGPUAnnotationIgnored = "GPUAnnotationIgnored"

// unknownGPUCount is adoption's node GPU count when neither the node's
// NodeTopology nor its allocatable says it.
const unknownGPUCount = -1

// adoption decides whether a bound pod's lockstep.dev/gpus annotation goes
// into the books, which then keep those GPUs from planners until the
// node's agent reports the pod's real allocation (Books.Report) or the pod
// ends. The annotation is anyone's to write, and the books trust it before
// the agent does, so only what this scheduler could have written is
// adopted: a pod of one of its profiles (ours reports whether a
// schedulerName is one), requesting GPUs, naming GPUs the node has
// (nodeGPUs, or unknownGPUCount), and no more than it requests. Anything
// else would hide GPUs no pod holds: one DaemonSet pod annotated with every
// index hid every GPU of every node.
//
// It returns the GPUs to adopt, or why the annotation is ignored; both
// empty when there is nothing to judge (no annotation, not bound, ending).
func adoption(pod *v1.Pod, want int, ours func(schedulerName string) bool, nodeGPUs int) (topology.GPUSet, string) {
	list, ok := pod.Annotations[lockstep.AnnotationGPUs]
	if !ok || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return 0, ""
	}
	prefix := fmt.Sprintf("%s=%q on a pod bound to %s is ignored: ", lockstep.AnnotationGPUs, list, pod.Spec.NodeName)
	if !ours(pod.Spec.SchedulerName) {
		return 0, prefix + fmt.Sprintf("the pod's schedulerName is %q, not a profile of this scheduler, so only the node's agent says which GPUs it holds", pod.Spec.SchedulerName)
	}
	if want == 0 {
		return 0, prefix + fmt.Sprintf("the pod requests no %s", lockstep.GPUResource)
	}
	gpus, err := topology.ParseGPUList(list)
	if err != nil {
		return 0, prefix + err.Error() + " (write GPU indices separated by commas)"
	}
	if nodeGPUs != unknownGPUCount {
		if extra := gpus &^ topology.AllGPUs(min(nodeGPUs, topology.MaxGPUs)); extra != 0 {
			return 0, prefix + fmt.Sprintf("GPUs %s do not exist: the node has %d", extra, nodeGPUs)
		}
	}
	if gpus.Len() > want {
		return 0, prefix + fmt.Sprintf("it names %d GPUs, more than the %d the pod requests", gpus.Len(), want)
	}
	return gpus, ""
}

// adoptBoundGPUs puts a bound pod's annotated GPUs in the books when the
// books do not know the pod (a previous leader bound it, or its Binding's
// answer was lost and Unreserve forgot it), its node's agent has not
// reported its allocation yet, and adoption allows it; a pod whose
// annotation it refuses gets a Warning event once.
func (p *TopologyPlacement) adoptBoundGPUs(pod *v1.Pod) {
	if _, known := p.gangs.Books.AssignmentOf(pod.UID); known {
		return
	}
	gpus, ignored := adoption(pod, p.view.Request(pod).ResourceGPUs(), p.ourProfile, p.nodeGPUCount(pod.Spec.NodeName))
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
// else its allocatable, else unknownGPUCount.
func (p *TopologyPlacement) nodeGPUCount(node string) int {
	if n, ok := p.view.GPUCount(node); ok {
		return n
	}
	nd, err := p.handle.SharedInformerFactory().Core().V1().Nodes().Lister().Get(node)
	if err != nil {
		return unknownGPUCount
	}
	if q, ok := nd.Status.Allocatable[lockstep.GPUResource]; ok {
		return int(q.Value())
	}
	return 0
}

// takeReportedAllocations hands every NodeTopology's allocations to the
// books as the truth about its pods' GPUs: the stock device plugin does not
// read lockstep.dev/gpus, and a pod annotated 0-3 that got 4-7 made its node
// look full while 4 GPUs were free.
func (p *TopologyPlacement) takeReportedAllocations(nt *v1alpha1.NodeTopology) {
	for _, a := range nt.Status.Allocations {
		var gpus topology.GPUSet
		for _, g := range a.GPUs {
			gpus |= topology.NewGPUSet(int(g))
		}
		before, known := p.gangs.Books.AssignmentOf(types.UID(a.PodUID))
		if !known || !p.gangs.Books.Report(types.UID(a.PodUID), nt.Name, gpus) {
			continue
		}
		p.logger.V(2).Info("The node's agent reported a pod's GPUs; they replace the scheduler's choice", "pod", klog.KRef(a.Namespace, a.Pod), "node", nt.Name, "gpus", gpus.String(), "chosen", before.GPUs.String())
		if before.GPUs&^gpus != 0 {
			// GPUs the choice held are free in the books now, which no
			// cluster event reports.
			p.gangs.RetryTurnedAway("")
		}
	}
}
