package topologyplacement

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangpreemption"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// eligibleAlone is DefaultPreemption's IsEligiblePod: whether upstream's
// pod-by-pod preemption may evict victim for a pod outside gangs. A gang
// member never is: evicting one member restarts its whole gang (the
// controller restarts a gang whole on any loss), so a 1-GPU pod would
// throw away the progress of every GPU of the gang to free one. Gangs are
// evicted whole, through placement.Preempt, when no pod outside gangs
// makes room (preemptForPod). Nor is a pod evicted for a gang's hold
// already (it is going, and counting it twice would let two preemptors
// count on the same room; or it waits out a notice), or one that started less than
// preemptionMinRuntime ago: the guard that protects gangs protects pods.
func (p *TopologyPlacement) eligibleAlone(_ fwk.NodeInfo, victim fwk.PodInfo, _ *v1.Pod) bool {
	pod := victim.GetPod()
	if gangmanager.GangKey(pod) != "" || p.gangs.Books.EvictedFor(pod.UID) {
		return false
	}
	if _, noticed := gangmanager.WaitsOutNotice(pod); noticed {
		return false
	}
	if minRuntime := p.args.PreemptionMinRuntime.Duration; minRuntime > 0 {
		started := p.clock.Now()
		if pod.Status.StartTime != nil {
			started = pod.Status.StartTime.Time
		}
		if p.clock.Since(started) < minRuntime {
			return false
		}
	}
	return true
}

// preemptForPod is PostFilter for a pod outside gangs (and for a gang
// member that asks for no GPUs, which the planner leaves to the
// framework). Every preemption is gang-aware:
//
//  1. While victims evicted for the pod still terminate on the node it is
//     nominated to, it waits and evicts nothing more. This is upstream's
//     rule, read from the cluster (so it holds across a restart or
//     failover), over every victim, gang members included, which
//     upstream's own check skips once IsEligiblePod leaves them out. A
//     victim past its grace period and a drain stall no longer counts: a
//     pod stuck Terminating must not keep the pod waiting for ever.
//  2. Upstream's DefaultPreemption runs with gang members ineligible
//     (eligibleAlone): pods outside gangs are preferred wherever they
//     suffice, chosen as the stock scheduler chooses them (PDBs included).
//  3. When none suffices, placement.Preempt frees one node for the pod
//     with the cost model, min-runtime guard and holds gangs preempt by:
//     the cheapest whole gangs (and pods) whose eviction makes room, never
//     a lone member.
func (p *TopologyPlacement) preemptForPod(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m framework.NodeToStatusReader) (*framework.PostFilterResult, *fwk.Status) {
	if p.defaultPreemption == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, "preemption for pods outside gangs is not set up")
	}
	if going := p.victimsGoing(pod); going != "" {
		p.metrics.preemptionAttempts.WithLabelValues(preemptionWaitingForVictims).Inc()
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("preemption: waiting for %s, evicted for this pod, to terminate on the nominated node %s", going, pod.Status.NominatedNodeName))
	}
	result, status := p.defaultPreemption.PostFilter(ctx, state, pod, m)
	if status.Code() != fwk.Unschedulable || (pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever) {
		return result, status
	}
	pr := p.preemptGangsForPod(ctx, pod, m)
	if pr.err != nil {
		return nil, fwk.AsStatus(pr.err)
	}
	p.metrics.preemptionAttempts.WithLabelValues(pr.outcome).Inc()
	if pr.outcome == preemptionPreempted {
		return nominate(pr.node), fwk.NewStatus(fwk.Success)
	}
	// Upstream's result clears a stale nomination; its message says why no
	// pod outside gangs would do, ours why no gang would.
	return result, fwk.NewStatus(fwk.Unschedulable, status.Message()+"; gang preemption: "+pr.reason)
}

// victimsGoing names a pod evicted for pod by preemption that still
// terminates, or waits out its notice, on pod's nominated node within its
// bound, or "" when none does.
func (p *TopologyPlacement) victimsGoing(pod *v1.Pod) string {
	node := pod.Status.NominatedNodeName
	if node == "" {
		return ""
	}
	ni, ok := p.nodeLookup(nil)(node)
	if !ok {
		return ""
	}
	prio := corev1helpers.PodPriority(pod)
	now := p.clock.Now()
	for _, pi := range ni.GetPods() {
		v := pi.GetPod()
		if corev1helpers.PodPriority(v) >= prio || !preemptedByScheduler(v) {
			continue
		}
		// Terminating, or waiting out its notice (and then its grace
		// period).
		until, noticed := gangmanager.WaitsOutNotice(v)
		switch {
		case v.DeletionTimestamp != nil:
			until = v.DeletionTimestamp.Time
		case !noticed:
			continue
		}
		if now.Before(until.Add(p.gangs.DrainStall())) {
			return v.Namespace + "/" + v.Name
		}
	}
	return ""
}

// preemptedByScheduler reports whether pod carries the DisruptionTarget
// condition a scheduler's preemption gives its victims (upstream's and
// ours).
func preemptedByScheduler(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler {
			return true
		}
	}
	return false
}

// preemptGangsForPod frees one node for pod, outside gangs, by evicting
// whole gangs (and pods) as placement.Preempt chooses them, on the nodes
// where the framework's filters found it short of room.
func (p *TopologyPlacement) preemptGangsForPod(ctx context.Context, pod *v1.Pod, m framework.NodeToStatusReader) preemption {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "pod", klog.KObj(pod))
	req := p.view.Request(pod)
	if req.Claimed {
		return preemption{outcome: preemptionNotEligible, reason: "gang preemption does not preempt for GPUs asked through ResourceClaims"}
	}
	lister := p.handle.SnapshotSharedLister()
	if lister == nil {
		return preemption{outcome: preemptionNotEligible, reason: "no snapshot"}
	}
	// Nodes whose filters failed for want of what an eviction frees;
	// UnschedulableAndUnresolvable ones (affinity, taints) no eviction helps.
	nodes, err := m.NodesForStatusCode(lister.NodeInfos(), fwk.Unschedulable)
	if err != nil {
		return preemption{err: err}
	}
	if len(nodes) == 0 {
		return preemption{outcome: preemptionNoRoom, reason: "no node would fit the pod whatever were evicted"}
	}
	snap, err := p.view.Snapshot(pod, "", req, nodes)
	if err != nil {
		return preemption{err: err}
	}
	defer p.view.Recycle(snap)
	prio := corev1helpers.PodPriority(pod)
	now := p.clock.Now()
	candidates, podsOf := p.victims().Candidates(pod, prio, snap, nodes)
	pre, err := placement.Preempt(snap, placement.Preemptor{
		Gang: placement.Gang{
			Members: 1, GPUsPerMember: req.GPUs, MilliCPUPerMember: req.MilliCPU, MemoryPerMember: req.Memory,
			Level: lockstep.LevelHost, Mode: lockstep.Required,
		},
		Priority: prio, Now: now, MinRuntime: p.args.PreemptionMinRuntime.Duration,
		Held: p.gangs.Books.HeldForOthers(snap.Nodes, "", prio),
	}, candidates)
	var none *placement.NoPreemption
	if errors.As(err, &none) {
		return preemption{outcome: preemptionNoRoom, reason: none.Reason}
	}
	if err != nil {
		return preemption{err: err}
	}
	if len(pre.Plan.Members) != 1 {
		return preemption{outcome: preemptionNoRoom, reason: "the plan places no node"}
	}
	node := pre.Plan.Members[0].Node
	names, victims, broken := p.countVictims(pre, podsOf)
	preemptor := pod.Namespace + "/" + pod.Name
	by := lockstep.Preemption{Preemptor: preemptor, Priority: prio, Domain: node}
	logger.V(2).Info("Preempting whole gangs for a pod outside gangs", "priority", prio, "node", node,
		"victims", names, "pods", len(victims), "gpuSeconds", pre.Cost.GPUSeconds, "pdbViolations", pre.Cost.PDBViolations)
	p.handle.EventRecorder().Eventf(pod, nil, v1.EventTypeNormal, gangpreemption.EventPreempting, "Preempting",
		"Preempting %s for pod %s (priority %d) on %s: no pod outside gangs frees enough%s", strings.Join(names, ", "), preemptor, prio, node, broken)
	p.evictor().Evict(logger, pod, evictedOf(pre, podsOf), by)
	return preemption{outcome: preemptionPreempted, node: node}
}
