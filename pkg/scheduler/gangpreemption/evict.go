package gangpreemption

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	apipod "k8s.io/kubernetes/pkg/api/v1/pod"
)

// Reasons of the events gang preemption records: EventPreempted on each
// victim pod (upstream's DefaultPreemption uses the same reason),
// EventPreempting on the member of the preemptor whose cycle evicted them.
const (
	EventPreempted  = "Preempted"
	EventPreempting = "Preempting"
	// EventHoldExpired is on the preemptor's PodGroup when its hold is
	// released with victims still terminating past the hold's bound.
	EventHoldExpired = "PreemptionHoldExpired"
)

// evictionWorkers bounds the victims evicted at once: a 64-pod gang's
// status patches and deletes go out in a few rounds, not 128 requests at
// once against the API server's priority-and-fairness share of the
// scheduler.
const evictionWorkers = 16

// Evictor evicts the victims of a preemption.
type Evictor struct {
	Client   kubernetes.Interface
	Recorder events.EventRecorder
	// NotGoing is told of a victim that is not going, or went before it
	// could be evicted, so that the hold stops waiting for it.
	NotGoing func(ctx context.Context, victim *v1.Pod)
	// Failed counts an eviction the API server refused.
	Failed func()
}

// Evict evicts victims for preemptor, off the scheduling thread: each pod
// gets a DisruptionTarget condition whose message (msg, a
// lockstep.Preemption) tells the controller who preempted it, is deleted
// with its own termination grace period (the trainer checkpoints on
// SIGTERM), and gets an event naming the preemptor. The hold waits for each
// victim's deletion event, except for a pod found gone already, whose
// event may have come before the hold, and a pod that could not be evicted
// (logged and counted), which is not going: NotGoing is told of both, and
// once the hold waits for none the domain is held as a drain, which ends
// when it stops freeing GPUs.
//
// Every write is fenced by the victim's UID: TrainingJob pods keep their
// names across incarnations, and a write by name alone could evict the
// job's next incarnation.
func (e *Evictor) Evict(logger klog.Logger, preemptor *v1.Pod, victims []*v1.Pod, msg string) {
	ctx := klog.NewContext(context.Background(), logger)
	failed := func(victim *v1.Pod, err error, what string) {
		// Gone, or replaced by a pod of the same name (a new incarnation
		// of its job): the victim is not there to evict.
		if !apierrors.IsNotFound(err) && !replaced(err) {
			logger.Error(err, what, "victim", klog.KObj(victim))
			e.Failed()
		}
		e.NotGoing(ctx, victim)
	}
	go workqueue.ParallelizeUntil(ctx, evictionWorkers, len(victims), func(i int) {
		victim := victims[i]
		condition := &v1.PodCondition{
			Type:               v1.DisruptionTarget,
			ObservedGeneration: apipod.CalculatePodConditionObservedGeneration(&victim.Status, victim.Generation, v1.DisruptionTarget),
			Status:             v1.ConditionTrue,
			Reason:             v1.PodReasonPreemptionByScheduler,
			Message:            msg,
		}
		status := victim.Status.DeepCopy()
		if apipod.UpdatePodCondition(status, condition) {
			if err := patchVictimStatus(ctx, e.Client, victim, status); err != nil {
				// Deleted without the condition, the controller would
				// count the restart as a failure: the pod is left running.
				failed(victim, err, "Could not mark a victim of gang preemption; not deleting it")
				return
			}
		}
		err := e.Client.CoreV1().Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(victim.UID))})
		if err != nil {
			failed(victim, err, "Could not delete a victim of gang preemption")
			return
		}
		logger.V(2).Info("Evicted a victim of gang preemption", "victim", klog.KObj(victim), "node", victim.Spec.NodeName)
		e.Recorder.Eventf(victim, preemptor, v1.EventTypeNormal, EventPreempted, "Preempting", "%s", msg)
	})
}

// patchVictimStatus patches victim's status to status, only if the pod of
// that name is still the victim: the patch carries its UID, which the
// apiserver refuses to change.
func patchVictimStatus(ctx context.Context, cs kubernetes.Interface, victim *v1.Pod, status *v1.PodStatus) error {
	oldData, err := json.Marshal(v1.Pod{Status: victim.Status})
	if err != nil {
		return err
	}
	newData, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: victim.UID}, Status: *status})
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, &v1.Pod{})
	if err != nil {
		return fmt.Errorf("patching the status of pod %s/%s: %w", victim.Namespace, victim.Name, err)
	}
	_, err = cs.CoreV1().Pods(victim.Namespace).Patch(ctx, victim.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// replaced reports whether err says the pod of a name is not the one a UID
// named: a delete's UID precondition failed (Conflict), or a patch would
// have changed the immutable UID (Invalid).
func replaced(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err)
}

// LongestGrace is the longest termination grace period of pods, as the
// kubelet gives them when they are deleted with the default options: how
// long a hold may wait for its victims before a stall is counted.
func LongestGrace(pods []*v1.Pod) time.Duration {
	longest := time.Duration(0)
	for _, pod := range pods {
		grace := int64(v1.DefaultTerminationGracePeriodSeconds)
		if pod.Spec.TerminationGracePeriodSeconds != nil {
			grace = *pod.Spec.TerminationGracePeriodSeconds
		}
		longest = max(longest, time.Duration(grace)*time.Second)
	}
	return longest
}
