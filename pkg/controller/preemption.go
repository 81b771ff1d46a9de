package controller

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/util/syncmap"
)

// The preemption path (docs/controller.md, "Preemption"). To make room for
// a higher-priority workload the scheduler marks each pod of a victim gang
// with a DisruptionTarget condition of reason PreemptionByScheduler (the
// message is lockstep.Preemption.Message() when Lockstep's gang preemption
// wrote it, upstream DefaultPreemption's own otherwise) and deletes it with
// its own grace period. The gang restarts whole as for any lost member, but
// the restart is counted in status.preemptions, not against backoffLimit,
// and the new gang is created without the restart backoff: its pods wait in
// the scheduler's queue, not in the controller.
//
// The controller learns of the preemption from the members of the current
// incarnation it can see: those terminating (a bound pod waits for its
// kubelet through the grace period) or failed with the condition. A member
// deleted at once (grace period 0, or unbound) may be gone from the cache
// before the job is reconciled: the pod event handler notes the condition
// of such a pod as it goes (vanished), so a gang whose pods all go at once
// is still known to have been preempted.

// ReasonPreempted is the reason of the Warning event a preemption records
// on the job; its message is the Preempted condition's.
const ReasonPreempted = "Preempted"

// preemptionCause is what a victim's DisruptionTarget condition says.
type preemptionCause struct {
	// pod is the member that carried the condition.
	pod string
	// by is the preemptor, when Lockstep's gang preemption wrote the
	// message; known is false for any other writer (upstream's
	// DefaultPreemption), whose preemptor is not named.
	by    lockstep.Preemption
	known bool
}

// podPreemption reads the scheduler's preemption condition off a pod.
func podPreemption(p *corev1.Pod) (preemptionCause, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.DisruptionTarget || c.Status != corev1.ConditionTrue || c.Reason != corev1.PodReasonPreemptionByScheduler {
			continue
		}
		by, known := lockstep.ParsePreemption(c.Message)
		return preemptionCause{pod: p.Name, by: by, known: known}, true
	}
	return preemptionCause{}, false
}

// preemptor names who took the gang's place, for people.
func (c preemptionCause) preemptor() string {
	if !c.known {
		return "a higher-priority pod"
	}
	s := fmt.Sprintf("%s (priority %d)", c.by.Preemptor, c.by.Priority)
	if c.by.Domain != "" {
		s += " in " + c.by.Domain
	}
	return s
}

// message is the Preempted condition's and the event's message.
func (c preemptionCause) message() string {
	return fmt.Sprintf("pod %s was preempted by %s", c.pod, c.preemptor())
}

// vanishedPod is what the pod event handler noted of a member that carried
// the preemption condition or another disruption (podDisruption), for when the member is gone from the cache by
// the time its job is reconciled.
type vanishedPod struct {
	incarnation, suspensions int32
	// bound says the pod had been bound: the gang had started.
	bound bool
	// cause is the preemption, when preempted; disruption the reason the
	// cluster took it otherwise (podDisruption), "" when it did not.
	preempted  bool
	cause      preemptionCause
	disruption string
}

// vanishedPods remembers, per job UID and pod name, the preempted members
// the controller saw last. It lives in memory only: after a controller
// restart a member that went while the controller was down is known only
// from the cache, and one whose pod is gone counts as lost for an unknown
// reason (a failure) or, when the whole gang is gone, is simply created
// again (docs/controller.md).
type vanishedPods struct {
	jobs syncmap.Map[types.UID, map[string]vanishedPod]
}

// note records p when it carries the preemption condition.
func (v *vanishedPods) note(p *corev1.Pod) {
	ref := jobOwner(p)
	if ref == nil {
		return
	}
	cause, preempted := podPreemption(p)
	disruption, disrupted := podDisruption(p)
	if !preempted && !disrupted {
		return
	}
	jp := podLabels(p, 0)
	v.jobs.Update(ref.UID, func(pods map[string]vanishedPod, _ bool) (map[string]vanishedPod, bool) {
		if pods == nil {
			pods = map[string]vanishedPod{}
		}
		for name, old := range pods {
			// Pods of an earlier incarnation are of no more use.
			if old.incarnation < jp.incarnation || old.suspensions < jp.suspensions {
				delete(pods, name)
			}
		}
		pods[p.Name] = vanishedPod{incarnation: jp.incarnation, suspensions: jp.suspensions, bound: p.Spec.NodeName != "",
			preempted: preempted, cause: cause, disruption: disruption}
		return pods, true
	})
}

// of returns the noted members of the job's current incarnation.
func (v *vanishedPods) of(job *v1alpha1.TrainingJob) map[string]vanishedPod {
	out := map[string]vanishedPod{}
	v.jobs.Update(job.UID, func(pods map[string]vanishedPod, ok bool) (map[string]vanishedPod, bool) {
		for name, p := range pods {
			if p.incarnation == job.Status.RestartCount && p.suspensions == job.Status.Suspensions {
				out[name] = p
			}
		}
		return pods, ok
	})
	return out
}

// forget drops what was noted of a job.
func (v *vanishedPods) forget(uid types.UID) {
	v.jobs.Delete(uid)
}

// podEvents enqueues the job that controls a pod, as Owns does, and first
// notes a deleted or updated pod's preemption condition and checkpoint
// reports, so that the reconcile the event causes knows why the pod went,
// and what it last reported, even when the cache no longer holds it.
type podEvents struct {
	handler.EventHandler
	vanished *vanishedPods
	reports  *heardReports
}

func (h podEvents) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if p, ok := e.ObjectNew.(*corev1.Pod); ok {
		h.vanished.note(p)
		h.reports.note(p)
	}
	h.EventHandler.Update(ctx, e, q)
}

func (h podEvents) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if p, ok := e.Object.(*corev1.Pod); ok {
		h.vanished.note(p)
		h.reports.note(p)
	}
	h.EventHandler.Delete(ctx, e, q)
}

// noteVanished adds what the pod events said of members of the current
// incarnation that the cache no longer holds: a bound one shows the gang had
// started (when every member went at once, no pod is left to say so), and
// its preemption is the cause of its loss.
func (o *observation) noteVanished(job *v1alpha1.TrainingJob, vanished map[string]vanishedPod) {
	for name, p := range vanished {
		if _, live := o.live[name]; live {
			// Still there: the scheduler marked it but has not deleted it
			// (yet); the cache says what happens next.
			continue
		}
		if _, seen := o.preempted[name]; !seen && p.preempted {
			o.preempted[name] = p.cause
		}
		if _, seen := o.disrupted[name]; !seen && p.disruption != "" {
			o.disrupted[name] = p.disruption
		}
		if p.bound && !o.started {
			o.started = true
			o.findLost(job)
		}
	}
}

// preemption is the cause of the gang's loss when a member that was lost or
// failed was preempted: the first such member by name.
func (o *observation) preemption() *preemptionCause {
	var first *preemptionCause
	for _, names := range [][]string{o.lost, jobPodNames(o.retry)} {
		for _, name := range names {
			if c, ok := o.preempted[name]; ok && (first == nil || name < first.pod) {
				first = &c
			}
		}
	}
	return first
}

func jobPodNames(jps []jobPod) []string {
	names := make([]string, len(jps))
	for i, p := range jps {
		names[i] = p.Name
	}
	return names
}

// ensurePreemptedCleared ends the Preempted condition once the gang runs
// whole again; its message keeps who preempted it.
func ensurePreemptedCleared(job *v1alpha1.TrainingJob) {
	c := meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionPreempted)
	if c == nil || c.Status != metav1.ConditionTrue {
		return
	}
	meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPreempted, Status: metav1.ConditionFalse,
		Reason: ReasonGangRunning, Message: truncateMessage("the gang runs again after a preemption (" + c.Message + ")"),
		ObservedGeneration: job.Generation})
}

// preemptionsTotal counts the preemptions the controller recorded (once
// each: the status write that counted it succeeded), by framework.
var preemptionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "lockstep_controller_preemptions_total",
	Help: "Gang restarts of TrainingJobs caused by preemption (status.preemptions), by framework.",
}, []string{"framework"})
