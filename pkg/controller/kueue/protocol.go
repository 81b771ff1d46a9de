package kueue

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Job is what the protocol needs to know of a queued job.
type Job struct {
	// SpecHash identifies the Workload the job wants now (WantedWorkload's
	// hash): a Workload with another hash is stale.
	SpecHash string
	// Finished, with Succeeded and Message, is the job's outcome once it
	// has one.
	Finished  bool
	Succeeded bool
	Message   string
	// Active is whether any of the job's pods still exists: quota of an
	// evicted Workload is given back only once they are gone.
	Active bool

	// Elastic: the job's Workloads are slices (WantedWorkload leaves the
	// Worker count out of SpecHash), and Counts is the pod count of each
	// pod set the job wants now.
	Elastic bool
	Counts  map[string]int32
}

// Held reasons: why a queued job has no pods (its Suspended condition).
const (
	HeldWaitingForAdmission = "WaitingForAdmission"
	HeldEvicted             = "Evicted"
	HeldWorkloadGone        = "WorkloadDeleted"
	HeldWorkloadFinished    = "WorkloadFinished"
)

// Decision is what the job and its Workloads must do next. The controller
// carries it out in this order: create, delete, status writes, finalizers.
type Decision struct {
	// Run: the job's Workload is admitted; Assignments are its pod sets'
	// flavors. Otherwise the job is held (no pods) for HeldReason.
	Run         bool
	Assignments []PodSetAssignment
	HeldReason  string
	HeldMessage string

	// Create the Workload the job wants.
	Create bool
	// Delete these Workloads (stale: the job wants another spec).
	Delete []string
	// Finish marks Workload Finish.Name finished with Finish.Reason.
	Finish         *metav1.Condition
	FinishWorkload string
	// ClearReservation gives the quota of evicted Workload Name back:
	// QuotaReserved=False, no admission, Admitted=False, Requeued.
	ClearReservation *Clear
	// RemoveFinalizer from these Workloads (finished, or being deleted).
	RemoveFinalizer []string

	// Elastic jobs only.
	//
	// Allowed, when Run, is how many pods of each pod set Kueue admitted
	// and the job may run now; the job wants more of those in
	// ResizePending, which says why they wait ("" when none does).
	Allowed       map[string]int32
	ResizePending string
	// ReplaceSlice, with Create, makes the new Workload a slice replacing
	// the admitted Workload of that name (a scale-up): Kueue admits it for
	// the difference and then finishes the old one. SliceName is the first
	// Workload of the chain, which every slice names.
	ReplaceSlice string
	SliceName    string
	// Resize sets the pod counts of Workload Resize.Name: a slice not
	// admitted yet, or an admitted one scaled down, whose freed quota Kueue
	// then gives back.
	Resize *Resize
}

// Resize is a Workload's new pod counts.
type Resize struct {
	Name   string
	Counts map[string]int32
}

// Clear is the status write that returns an evicted Workload to its queue.
type Clear struct {
	Name     string
	Requeued metav1.Condition
	Reserved metav1.Condition
	Admitted metav1.Condition
}

// Decide applies Kueue's job-integration protocol to a job and the
// Workloads it controls (deleted ones included), as Kueue's generic job
// reconciler does for its built-in kinds:
//
//   - the Workload whose hash matches is the job's; others are stale and
//     deleted (the job's spec changed), and a job without one gets a new one;
//   - a finished job finishes its Workload (Finished=True, Succeeded or
//     Failed), which frees its quota; Kueue's finalizer comes off a finished
//     or deleted Workload;
//   - an evicted Workload (preempted, deactivated, ...) holds the job; once
//     its pods are gone the quota reservation is cleared so Kueue can queue
//     it again;
//   - the job runs only while its Workload is Admitted.
//
// An elastic job's Workloads are slices (decideSlices): a resize keeps the
// admitted Workload and its pods.
func Decide(job Job, workloads []*Workload) Decision {
	if job.Elastic {
		return decideSlices(job, workloads)
	}
	var d Decision
	var match *Workload
	for _, w := range workloads {
		if w.DeletionTimestamp != nil {
			if w.HasFinalizer() {
				d.RemoveFinalizer = append(d.RemoveFinalizer, w.Name)
			}
			continue
		}
		if match == nil && w.Annotations[lockstep.AnnotationSpecHash] == job.SpecHash {
			match = w
			continue
		}
		d.Delete = append(d.Delete, w.Name)
	}
	decideMatch(&d, job, match)
	return d
}

// decideMatch decides on the job's own Workload match (nil: none yet).
func decideMatch(d *Decision, job Job, match *Workload) {
	if job.Finished {
		if match == nil {
			return
		}
		if !match.IsTrue(ConditionFinished) {
			reason := ReasonSucceeded
			if !job.Succeeded {
				reason = ReasonFailed
			}
			d.Finish = &metav1.Condition{Type: ConditionFinished, Status: metav1.ConditionTrue, Reason: reason, Message: job.Message}
			d.FinishWorkload = match.Name
		}
		if match.HasFinalizer() {
			d.RemoveFinalizer = append(d.RemoveFinalizer, match.Name)
		}
		return
	}

	if match == nil {
		d.Create = true
		d.HeldReason, d.HeldMessage = HeldWaitingForAdmission, "waiting for Kueue to admit the job's Workload"
		return
	}
	if match.IsTrue(ConditionFinished) {
		// Kueue finished it (e.g. it could not start): the job stays held.
		c := meta.FindStatusCondition(match.Status.Conditions, ConditionFinished)
		d.HeldReason, d.HeldMessage = HeldWorkloadFinished, fmt.Sprintf("Kueue finished Workload %s (%s): %s", match.Name, c.Reason, c.Message)
		if match.HasFinalizer() {
			d.RemoveFinalizer = append(d.RemoveFinalizer, match.Name)
		}
		return
	}
	if ev := meta.FindStatusCondition(match.Status.Conditions, ConditionEvicted); ev != nil && ev.Status == metav1.ConditionTrue {
		d.HeldReason = HeldEvicted
		d.HeldMessage = fmt.Sprintf("Kueue evicted Workload %s (%s): %s; the job waits to be admitted again", match.Name, ev.Reason, ev.Message)
		if match.IsTrue(ConditionQuotaReserved) && !job.Active {
			requeued := metav1.ConditionFalse
			if ev.Reason == ReasonEvictedByPreemption || ev.Reason == ReasonEvictedNodeFailures {
				requeued = metav1.ConditionTrue
			}
			d.ClearReservation = &Clear{
				Name:     match.Name,
				Requeued: metav1.Condition{Type: ConditionRequeued, Status: requeued, Reason: ev.Reason, Message: ev.Message},
				Reserved: metav1.Condition{Type: ConditionQuotaReserved, Status: metav1.ConditionFalse, Reason: ReasonPending, Message: ev.Message},
				Admitted: metav1.Condition{Type: ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "NoReservation", Message: "The workload has no reservation"},
			}
		}
		return
	}
	if match.IsTrue(ConditionAdmitted) && match.Status.Admission != nil {
		d.Run = true
		d.Assignments = slices.Clone(match.Status.Admission.PodSetAssignments)
		return
	}
	d.HeldReason = HeldWaitingForAdmission
	d.HeldMessage = fmt.Sprintf("waiting for Kueue to admit Workload %s", match.Name)
	if c := meta.FindStatusCondition(match.Status.Conditions, ConditionQuotaReserved); c != nil && c.Message != "" {
		d.HeldMessage += ": " + c.Message
	}
}
