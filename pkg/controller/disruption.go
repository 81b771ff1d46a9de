package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Restarts the infrastructure causes (docs/controller.md, "Incarnations").
// A member the cluster took — its node went dark or was deleted, the
// kubelet evicted it for node pressure or a node shutdown, the taint
// manager or the pod garbage collector deleted it, a drain evicted it — is
// lost as any other, and the gang restarts whole; but the restart is
// counted in status.infrastructureRestarts, not against backoffLimit, as a
// Job's podFailurePolicy ignores the DisruptionTarget condition. A flaky
// rack must not fail a long job for good.

// DisruptionTarget reasons that say the cluster, not the job, took a pod.
// PreemptionByScheduler is the preemption path's (preemption.go). The
// first is corev1's; the others are the writers' own constants upstream
// (the taint-eviction controller, the pod garbage collector, the eviction
// subresource), not part of the API package.
const (
	disruptionByKubelet      = corev1.PodReasonTerminationByKubelet
	disruptionByTaintManager = "DeletionByTaintManager"
	disruptionByPodGC        = "DeletionByPodGC"
	disruptionByEvictionAPI  = "EvictionByEvictionAPI"
	// podReasonEvicted is the status.reason of a pod the kubelet's
	// eviction manager evicted, which a kubelet before DisruptionTarget
	// conditions sets alone.
	podReasonEvicted = "Evicted"
)

// podDisruption says whether the cluster took the pod, and the reason: a
// DisruptionTarget condition of one of the reasons above, or a kubelet's
// eviction. A pod deleted by a person or another controller carries none,
// and its loss stays a failure.
func podDisruption(p *corev1.Pod) (string, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.DisruptionTarget || c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Reason {
		case disruptionByKubelet, disruptionByTaintManager, disruptionByPodGC, disruptionByEvictionAPI:
			return c.Reason, true
		}
	}
	if p.Status.Phase == corev1.PodFailed && p.Status.Reason == podReasonEvicted {
		return disruptionByKubelet, true
	}
	return "", false
}

// disruptionCause is why the cluster took a member.
type disruptionCause struct {
	pod, reason string
}

// message is the Restarting condition's and event's message.
func (c disruptionCause) message() string {
	what := map[string]string{
		disruptionByKubelet:      "was evicted by its kubelet (node pressure or shutdown)",
		disruptionByTaintManager: "was evicted from a tainted node",
		disruptionByPodGC:        "was deleted with its node",
		disruptionByEvictionAPI:  "was evicted (a drain)",
		ReasonNodeUnreachable:    "is on a node that stopped answering",
	}[c.reason]
	if what == "" {
		what = "was taken by the cluster (" + c.reason + ")"
	}
	return fmt.Sprintf("pod %s %s; an infrastructure restart, not counted against backoffLimit", c.pod, what)
}

// disruption is the cause of the restart when a member that was lost or
// failed was taken by the cluster: the first such member by name.
func (o *observation) disruption() *disruptionCause {
	var first *disruptionCause
	for _, names := range [][]string{o.lost, jobPodNames(o.retry)} {
		for _, name := range names {
			if r, ok := o.disrupted[name]; ok && (first == nil || name < first.pod) {
				first = &disruptionCause{pod: name, reason: r}
			}
		}
	}
	return first
}
