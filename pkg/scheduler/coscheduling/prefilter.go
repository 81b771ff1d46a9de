package coscheduling

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
)

// PreFilter is the manager's PreFilter (core.PodGroupManager.PreFilter),
// in the same order and with the same messages: the pod is turned away,
// UnschedulableAndUnresolvable so that nothing is preempted for it, while
// its PodGroup is backed off after a failure, has fewer than minMember
// pods, or more gated pods than it can spare, or asks in minResources for
// more than the whole cluster has free (checkClusterResource). A PodGroup
// that passed the minResources check is admitted for permitWaitingTimeSeconds
// and not checked again until then, or until PostFilter or Unreserve fail
// it.
//
// It is ours, not the manager's, for what the manager's costs: its
// minResources check deep-copies every node it reads (checkClusterResource).
// The backoff and the admissions are then ours too: the manager keeps them
// unexported.
//
// Why the check stays for the gangs TopologyPlacement plans, though its
// PreFilter checks their whole plan exactly: the check is also a gate. A
// gang it turns away never reaches TopologyPlacement, which would
// otherwise count it as waiting for room, drain a domain for it and start
// its widening clock on a cluster that has no room for it at all; and the
// requeue of such a gang rides on this plugin's events (package requeue).
//
// A PodGroup of one member is let through: its checks come down to the
// pod itself as the quorum and minResources, which Filter (NodeResourcesFit,
// TopologyPlacement) checks node by node, more strictly, for the one pod;
// a cluster of many single-pod jobs (each with a PodGroup, as the
// TrainingJob controller writes them) paid the sum once per job. Backoff of
// such a group is the queue's own pod backoff.
func (c *Coscheduling) PreFilter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*framework.PreFilterResult, *fwk.Status) {
	pgName, pg := c.mgr.GetPodGroup(ctx, pod)
	if pg == nil || pg.Spec.MinMember <= 1 {
		return nil, nil
	}
	if err := c.preFilter(ctx, pod, pgName, pg, nodes); err != nil {
		klog.FromContext(ctx).V(2).Info("PreFilter rejects the pod", "plugin", Name, "pod", klog.KObj(pod), "podGroup", klog.KObj(pg), "reason", err)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	return nil, nil
}

func (c *Coscheduling) preFilter(ctx context.Context, pod *v1.Pod, pgName string, pg *v1alpha1.PodGroup, nodes []fwk.NodeInfo) error {
	if c.backoff != nil && c.backoff.has(pgName) {
		return fmt.Errorf("podGroup %v failed recently", pgName)
	}
	members, err := liveMembers(c.pods, pod.Namespace, pg.Name)
	if err != nil {
		return fmt.Errorf("podLister list pods failed: %w", err)
	}
	gap := int(pg.Spec.MinMember) - len(members)
	if gap > 0 {
		return fmt.Errorf("pre-filter pod %v cannot find enough sibling pods, "+
			"current pods number: %v, minMember of group: %v", pod.Name, len(members), pg.Spec.MinMember)
	}
	// minMember may be below the gang's size: that many pods may be gated.
	for _, m := range members {
		if len(m.Spec.SchedulingGates) > 0 {
			gap++
		}
		if gap > 0 {
			return fmt.Errorf("pre-filter pod %v cannot proceed due to gated pods in the same PodGroup", pod.Name)
		}
	}
	if pg.Spec.MinResources == nil || c.admitted.has(pgName) {
		return nil
	}
	request := pg.Spec.MinResources.DeepCopy()
	request[v1.ResourcePods] = *resource.NewQuantity(int64(pg.Spec.MinMember), resource.DecimalSI)
	if err := checkClusterResource(klog.FromContext(ctx), c.free, nodes, request, pod.Namespace, pg.Name); err != nil {
		return err
	}
	c.admitted.add(pgName)
	return nil
}

// checkClusterResource is scheduler-plugins' core.CheckClusterResource
// (v0.34.7), the same answer and message: whether the nodes' free capacity,
// counting the resources of PodGroup ns/name's own pods as free, covers
// request, read node by node in the scheduler's order until it does.
// Upstream reads a node's free capacity from a deep copy of its NodeInfo
// with the gang's pods removed, for every node it reads; at 5,000 nodes
// those copies were 16% of the scheduler's CPU, and on a cluster filling
// up a gang's check read more than half of its nodes.
//
// Removing pods only frees capacity, so the nodes' free capacity as they
// are, summed, gives a lower bound of upstream's answer: when it covers
// the request, so does upstream's count, and no node's pods need scanning
// for the gang's (at 25,200 nodes that scan alone was 16% of the
// scheduler's CPU). sums keeps that sum between checks (clusterFree).
// Only when it falls short is upstream's count made, node by node in the
// scheduler's order, with a copy of just the nodes that hold pods of the
// gang, for its answer and message: request is what is left, modified in
// place.
func checkClusterResource(logger klog.Logger, sums *clusterFree, nodes []fwk.NodeInfo, request v1.ResourceList, ns, name string) error {
	if sums.covers(nodes, request) {
		return nil
	}
	for _, ni := range nodes {
		if len(request) == 0 {
			return nil
		}
		if ni == nil || ni.Node() == nil {
			continue
		}
		ni = withoutGang(logger, ni, ns, name)
		for r, q := range request {
			q.Sub(free(ni, r))
			if q.Sign() <= 0 {
				delete(request, r)
				continue
			}
			request[r] = q
		}
	}
	if len(request) == 0 {
		return nil
	}
	return fmt.Errorf("resource gap: %v", request)
}

// withoutGang is ni, or a copy without the pods of PodGroup ns/name when it
// holds any.
func withoutGang(logger klog.Logger, ni fwk.NodeInfo, ns, name string) fwk.NodeInfo {
	var c fwk.NodeInfo
	for _, pi := range ni.GetPods() {
		if pi == nil || pi.GetPod() == nil {
			continue
		}
		if p := pi.GetPod(); p.Namespace != ns || p.Labels[v1alpha1.PodGroupLabel] != name {
			continue
		}
		if c == nil {
			c = ni.Snapshot()
		}
		// As upstream: a pod that is not there is nothing to free.
		_ = c.RemovePod(logger, pi.GetPod())
	}
	if c == nil {
		return ni
	}
	return c
}

// free is what ni has left of resource r, as upstream counts it (as
// freeAmount counts it, in upstream's quantity formats): pods by number,
// the others allocatable less requested, zero for a resource the node does
// not have.
func free(ni fwk.NodeInfo, r v1.ResourceName) resource.Quantity {
	n := freeAmount(ni, r)
	switch r {
	case v1.ResourceCPU:
		return *resource.NewMilliQuantity(n, resource.DecimalSI)
	case v1.ResourceMemory, v1.ResourcePods, v1.ResourceEphemeralStorage:
		return *resource.NewQuantity(n, resource.BinarySI)
	}
	return *resource.NewQuantity(n, resource.DecimalSI)
}

// expiring is a set of PodGroups, each kept for d from when it was added:
// the PodGroups backed off after a failure (podGroupBackoffSeconds), and
// those admitted by the minResources check (permitWaitingTimeSeconds), as
// the manager keeps them.
type expiring struct {
	d   time.Duration
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
}

func newExpiring(d time.Duration, now func() time.Time) *expiring {
	return &expiring{d: d, now: now, until: map[string]time.Time{}}
}

// add adds gang, unless it is there already: as upstream's cache, adding
// again does not extend it. Ended entries are dropped.
func (e *expiring) add(gang string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for g, end := range e.until {
		if !now.Before(end) {
			delete(e.until, g)
		}
	}
	if _, ok := e.until[gang]; !ok {
		e.until[gang] = now.Add(e.d)
	}
}

func (e *expiring) has(gang string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	end, ok := e.until[gang]
	return ok && e.now().Before(end)
}

func (e *expiring) delete(gang string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.until, gang)
}

// liveMembers are the gang's pods that are not being deleted. Upstream
// counts every pod of the group; a member Terminating on a node that
// stopped answering (it may stay so for good) is no sibling the gang can
// run with, and counting it would let the next incarnation of the gang
// (other pod names, the same PodGroup) past the quorum short of a member.
func liveMembers(pods corev1informers.PodInformer, ns, name string) ([]*v1.Pod, error) {
	members, err := podgroupindex.Members(pods, ns, name)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(members), func(p *v1.Pod) bool { return p.DeletionTimestamp != nil }), nil
}
