package kueue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// wl builds a Workload mirror for the table: its hash, conditions (type →
// reason, all True), and whether it holds Kueue's finalizer or is deleted.
type wl struct {
	name, hash string
	conds      map[string]string
	admission  *Admission
	finalizer  bool
	deleting   bool
}

func (b wl) obj() *Workload {
	w := &Workload{ObjectMeta: metav1.ObjectMeta{Name: b.name, Annotations: map[string]string{lockstep.AnnotationSpecHash: b.hash}}}
	for t, reason := range b.conds {
		w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: t + " message"})
	}
	w.Status.Admission = b.admission
	if b.finalizer {
		w.Finalizers = []string{FinalizerResourceInUse}
	}
	if b.deleting {
		w.DeletionTimestamp = ptr.To(metav1.NewTime(time.Unix(1, 0)))
	}
	return w
}

func TestDecide(t *testing.T) {
	admission := &Admission{ClusterQueue: "cq", PodSetAssignments: []PodSetAssignment{{Name: "worker", Flavors: map[string]string{"nvidia.com/gpu": "h100"}}}}
	admitted := map[string]string{ConditionQuotaReserved: "QuotaReserved", ConditionAdmitted: "Admitted"}
	evicted := func(reason string) map[string]string {
		return map[string]string{ConditionQuotaReserved: "QuotaReserved", ConditionAdmitted: "Admitted", ConditionEvicted: reason}
	}
	requeue := func(status metav1.ConditionStatus, reason string) *Clear {
		return &Clear{
			Name:     "w1",
			Requeued: metav1.Condition{Type: ConditionRequeued, Status: status, Reason: reason, Message: "Evicted message"},
			Reserved: metav1.Condition{Type: ConditionQuotaReserved, Status: metav1.ConditionFalse, Reason: ReasonPending, Message: "Evicted message"},
			Admitted: metav1.Condition{Type: ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "NoReservation", Message: "The workload has no reservation"},
		}
	}
	for _, tc := range []struct {
		name      string
		job       Job
		workloads []wl
		want      Decision
	}{
		{
			name: "no workload: create it and hold the job",
			job:  Job{SpecHash: "h"},
			want: Decision{Create: true, HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit the job's Workload"},
		},
		{
			name:      "pending: held with Kueue's reason",
			job:       Job{SpecHash: "h"},
			workloads: []wl{{name: "w1", hash: "h"}},
			want:      Decision{HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit Workload w1"},
		},
		{
			name:      "quota reserved but admission checks pending: still held",
			job:       Job{SpecHash: "h"},
			workloads: []wl{{name: "w1", hash: "h", conds: map[string]string{ConditionQuotaReserved: "QuotaReserved"}, admission: admission}},
			want:      Decision{HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit Workload w1: QuotaReserved message"},
		},
		{
			name:      "admitted: run with the flavors",
			job:       Job{SpecHash: "h"},
			workloads: []wl{{name: "w1", hash: "h", conds: admitted, admission: admission, finalizer: true}},
			want:      Decision{Run: true, Assignments: admission.PodSetAssignments},
		},
		{
			name:      "spec changed: the stale workload goes, a new one comes",
			job:       Job{SpecHash: "h2"},
			workloads: []wl{{name: "w1", hash: "h", conds: admitted, admission: admission, finalizer: true}},
			want:      Decision{Create: true, Delete: []string{"w1"}, HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit the job's Workload"},
		},
		{
			name:      "preempted while pods live: held, quota kept until they are gone",
			job:       Job{SpecHash: "h", Active: true},
			workloads: []wl{{name: "w1", hash: "h", conds: evicted(ReasonEvictedByPreemption), admission: admission}},
			want:      Decision{HeldReason: HeldEvicted, HeldMessage: "Kueue evicted Workload w1 (Preempted): Evicted message; the job waits to be admitted again"},
		},
		{
			name:      "preempted, pods gone: reservation cleared and requeued",
			job:       Job{SpecHash: "h"},
			workloads: []wl{{name: "w1", hash: "h", conds: evicted(ReasonEvictedByPreemption), admission: admission}},
			want: Decision{HeldReason: HeldEvicted, HeldMessage: "Kueue evicted Workload w1 (Preempted): Evicted message; the job waits to be admitted again",
				ClearReservation: requeue(metav1.ConditionTrue, ReasonEvictedByPreemption)},
		},
		{
			name:      "deactivated, pods gone: reservation cleared, not requeued",
			job:       Job{SpecHash: "h"},
			workloads: []wl{{name: "w1", hash: "h", conds: evicted("Deactivated"), admission: admission}},
			want: Decision{HeldReason: HeldEvicted, HeldMessage: "Kueue evicted Workload w1 (Deactivated): Evicted message; the job waits to be admitted again",
				ClearReservation: requeue(metav1.ConditionFalse, "Deactivated")},
		},
		{
			name:      "evicted and already cleared: only held",
			job:       Job{SpecHash: "h"},
			workloads: []wl{{name: "w1", hash: "h", conds: map[string]string{ConditionEvicted: ReasonEvictedByPreemption}}},
			want:      Decision{HeldReason: HeldEvicted, HeldMessage: "Kueue evicted Workload w1 (Preempted): Evicted message; the job waits to be admitted again"},
		},
		{
			name:      "succeeded: finish the workload and drop the finalizer",
			job:       Job{SpecHash: "h", Finished: true, Succeeded: true, Message: "done"},
			workloads: []wl{{name: "w1", hash: "h", conds: admitted, admission: admission, finalizer: true}},
			want: Decision{Finish: &metav1.Condition{Type: ConditionFinished, Status: metav1.ConditionTrue, Reason: ReasonSucceeded, Message: "done"},
				FinishWorkload: "w1", RemoveFinalizer: []string{"w1"}},
		},
		{
			name:      "failed: finished as Failed",
			job:       Job{SpecHash: "h", Finished: true, Message: "boom"},
			workloads: []wl{{name: "w1", hash: "h", conds: admitted, admission: admission}},
			want:      Decision{Finish: &metav1.Condition{Type: ConditionFinished, Status: metav1.ConditionTrue, Reason: ReasonFailed, Message: "boom"}, FinishWorkload: "w1"},
		},
		{
			name:      "finished twice: nothing more",
			job:       Job{SpecHash: "h", Finished: true, Succeeded: true},
			workloads: []wl{{name: "w1", hash: "h", conds: map[string]string{ConditionFinished: ReasonSucceeded}}},
			want:      Decision{},
		},
		{
			name: "finished job without a workload creates none",
			job:  Job{SpecHash: "h", Finished: true},
			want: Decision{},
		},
		{
			name:      "a deleted workload loses its finalizer; the job gets a new one",
			job:       Job{SpecHash: "h"},
			workloads: []wl{{name: "w1", hash: "h", conds: admitted, admission: admission, finalizer: true, deleting: true}},
			want: Decision{Create: true, RemoveFinalizer: []string{"w1"},
				HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit the job's Workload"},
		},
		{
			name:      "duplicates: the first matching one is kept",
			job:       Job{SpecHash: "h"},
			workloads: []wl{{name: "w1", hash: "h", conds: admitted, admission: admission}, {name: "w2", hash: "h"}},
			want:      Decision{Run: true, Assignments: admission.PodSetAssignments, Delete: []string{"w2"}},
		},
		{
			name:      "finished by Kueue while the job runs: held",
			job:       Job{SpecHash: "h", Active: true},
			workloads: []wl{{name: "w1", hash: "h", conds: map[string]string{ConditionFinished: "FailedToStart"}, finalizer: true}},
			want: Decision{HeldReason: HeldWorkloadFinished, HeldMessage: "Kueue finished Workload w1 (FailedToStart): Finished message",
				RemoveFinalizer: []string{"w1"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ws []*Workload
			for _, b := range tc.workloads {
				ws = append(ws, b.obj())
			}
			got := Decide(tc.job, ws)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decide (-want,+got):\n%s", diff)
			}
		})
	}
}
