package topologyplacement

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/requeue"
)

// podDeleted is requeue.PodDeleted narrowed to what this plugin plans: a
// pod deleted from a node the waiting pod cannot run on (cordoned, a taint
// it does not tolerate, outside its required node affinity, or without
// GPUs when it asks for some) frees nothing it could use, so it is
// skipped. Coscheduling keeps the wider hint: its minResources count the
// whole cluster. A pod of the waiting pod's own gang, a node the scheduler
// does not know, or anything unsure queues.
func (p *TopologyPlacement) podDeleted(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	hint, err := requeue.PodDeleted(logger, pod, oldObj, newObj)
	if err != nil || hint != fwk.Queue {
		return hint, err
	}
	if tomb, ok := oldObj.(cache.DeletedFinalStateUnknown); ok {
		oldObj = tomb.Obj
	}
	deleted, ok := oldObj.(*v1.Pod)
	if !ok || deleted.Spec.NodeName == "" || (gangmanager.GangKey(pod) != "" && gangmanager.GangKey(deleted) == gangmanager.GangKey(pod)) {
		return fwk.Queue, nil
	}
	node, ok := p.nodeNamed(deleted.Spec.NodeName)
	if !ok {
		return fwk.Queue, nil
	}
	if why := cannotUse(node, pod, p.view.Request(pod).ResourceGPUs()); why != "" {
		logger.V(5).Info("Deleted pod freed room on a node the pod cannot use", "pod", klog.KObj(pod), "deleted", klog.KObj(deleted), "node", klog.KObj(node), "why", why)
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// cannotUse says why pod, asking for gpus nvidia.com/gpu, can use nothing
// node frees, "" when it may.
func cannotUse(node *v1.Node, pod *v1.Pod, gpus int) string {
	if !nodeview.CanHost(node, pod, nodeaffinity.GetRequiredNodeAffinity(pod)) {
		return "the pod may not run there"
	}
	if gpus > 0 {
		if gpus, ok := node.Status.Allocatable[lockstep.GPUResource]; !ok || gpus.IsZero() {
			return "the node has no GPUs"
		}
	}
	return ""
}

// nodeNamed reads a node from the scheduler's node informer.
func (p *TopologyPlacement) nodeNamed(name string) (*v1.Node, bool) {
	node, err := p.handle.SharedInformerFactory().Core().V1().Nodes().Lister().Get(name)
	return node, err == nil && node != nil
}
