package gangmanager

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// UnknownGPUCount is Adoption's node GPU count when neither the node's
// NodeTopology nor its allocatable says it.
const UnknownGPUCount = -1

// Adoption decides whether a bound pod's lockstep.dev/gpus annotation goes
// into the books, which then keep those GPUs from planners until the
// node's agent reports the pod's real allocation (Books.Report) or the pod
// ends. The annotation is anyone's to write, and the books trust it before
// the agent does, so only what this scheduler could have written is
// adopted: a pod of one of its profiles (ours reports whether a
// schedulerName is one), requesting want GPUs, naming GPUs the node has
// (nodeGPUs, or UnknownGPUCount), and no more than it requests. Anything
// else would hide GPUs no pod holds: one DaemonSet pod annotated with every
// index hid every GPU of every node.
//
// It returns the GPUs to adopt, or why the annotation is ignored; both
// empty when there is nothing to judge (no annotation, not bound, ending).
func Adoption(pod *v1.Pod, want int, ours func(schedulerName string) bool, nodeGPUs int) (topology.GPUSet, string) {
	list, ok := pod.Annotations[lockstep.AnnotationGPUs]
	if !ok || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || ended(pod) {
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
	if nodeGPUs != UnknownGPUCount {
		if extra := gpus &^ topology.AllGPUs(min(nodeGPUs, topology.MaxGPUs)); extra != 0 {
			return 0, prefix + fmt.Sprintf("GPUs %s do not exist: the node has %d", extra, nodeGPUs)
		}
	}
	if gpus.Len() > want {
		return 0, prefix + fmt.Sprintf("it names %d GPUs, more than the %d the pod requests", gpus.Len(), want)
	}
	return gpus, ""
}

// TakeReported hands the allocations nt's agent reports to the books as
// the truth about its pods' GPUs: the stock device plugin does not read
// lockstep.dev/gpus, and a pod annotated 0-3 that got 4-7 made its node
// look full while 4 GPUs were free. When a report frees GPUs the
// scheduler's choice held, the gangs turned away are retried: no cluster
// event says so.
func (m *Manager) TakeReported(logger klog.Logger, nt *v1alpha1.NodeTopology) {
	for _, a := range nt.Status.Allocations {
		var gpus topology.GPUSet
		for _, g := range a.GPUs {
			gpus |= topology.NewGPUSet(int(g))
		}
		before, known := m.Books.AssignmentOf(types.UID(a.PodUID))
		if !known || !m.Books.Report(types.UID(a.PodUID), nt.Name, gpus) {
			continue
		}
		logger.V(2).Info("The node's agent reported a pod's GPUs; they replace the scheduler's choice", "pod", klog.KRef(a.Namespace, a.Pod), "node", nt.Name, "gpus", gpus.String(), "chosen", before.GPUs.String())
		if before.GPUs&^gpus != 0 {
			m.RetryTurnedAway("")
		}
	}
}

// TakeClaimed hands the books the GPUs a pod's allocated ResourceClaims
// hold on node (nodeview.View.ClaimedGPUs): for a pod that claims its
// GPUs, the allocator's choice is the truth, and the plan's prediction
// the books kept until then hid GPUs it did not take (the allocator does
// not see other gangs' open slots, and picks the first free device). The
// agent may report it late or never (a kubelet that does not serve
// DynamicResources). As for TakeReported, gangs turned away are retried
// when the guess held GPUs the claim does not.
func (m *Manager) TakeClaimed(logger klog.Logger, pod *v1.Pod, node string, gpus topology.GPUSet) {
	before, known := m.Books.AssignmentOf(pod.UID)
	if !known || !m.Books.Report(pod.UID, node, gpus) {
		return
	}
	if before.GPUs == gpus {
		logger.V(5).Info("A pod's ResourceClaims were allocated the GPUs predicted", "pod", klog.KObj(pod), "node", node, "gpus", gpus.String())
		return
	}
	logger.V(2).Info("A pod's ResourceClaims were allocated other GPUs than predicted; they replace the prediction", "pod", klog.KObj(pod), "node", node, "gpus", gpus.String(), "predicted", before.GPUs.String())
	if before.GPUs&^gpus != 0 {
		m.RetryTurnedAway("")
	}
}
