package kueue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// slice builds an elastic Workload mirror in namespace ns for the table:
// workers Worker pods, the slice it replaces, and a pending QuotaReserved
// message from Kueue.
type slice struct {
	wl
	workers    int32
	replaces   string
	pendingMsg string
}

func (b slice) obj() *Workload {
	w := b.wl.obj()
	w.Namespace = "ns"
	w.Annotations[lockstep.AnnotationKueueElasticJob] = "true"
	w.Annotations[lockstep.AnnotationKueueSliceName] = "w1"
	if b.replaces != "" {
		w.Annotations[lockstep.AnnotationKueueSliceReplacementFor] = "ns/" + b.replaces
	}
	w.Spec.PodSets = []PodSet{{Name: ElasticPodSet, Count: b.workers}}
	if b.pendingMsg != "" {
		w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: ConditionQuotaReserved, Status: metav1.ConditionFalse, Reason: "Pending", Message: b.pendingMsg})
	}
	return w
}

// TestDecideSlices: an elastic job's resizes under Kueue keep the admitted
// Workload and its pods: scale-down in place, scale-up by a replacement
// slice while the job runs at its admitted size, the pods beyond it
// waiting with Kueue's reason; eviction, a finished job and a spec change
// behave as for any Workload.
func TestDecideSlices(t *testing.T) {
	admission := &Admission{ClusterQueue: "cq", PodSetAssignments: []PodSetAssignment{{Name: "worker", Flavors: map[string]string{"nvidia.com/gpu": "h100"}}}}
	admitted := map[string]string{ConditionQuotaReserved: "QuotaReserved", ConditionAdmitted: "Admitted"}
	replaced := map[string]string{ConditionQuotaReserved: "QuotaReserved", ConditionAdmitted: "Admitted", ConditionFinished: ReasonSliceReplaced}
	evicted := map[string]string{ConditionQuotaReserved: "QuotaReserved", ConditionAdmitted: "Admitted", ConditionEvicted: ReasonEvictedByPreemption}
	job := func(workers int32, active bool) Job {
		return Job{SpecHash: "h", Elastic: true, Counts: map[string]int32{"worker": workers}, Active: active}
	}
	workers := func(n int32) map[string]int32 { return map[string]int32{"worker": n} }
	const quotaMsg = "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in flavor h100, 16 more needed"
	outOfSync := func(by string) *metav1.Condition {
		return &metav1.Condition{Type: ConditionFinished, Status: metav1.ConditionTrue, Reason: ReasonOutOfSync,
			Message: "The workload slice is out of sync with its parent job: replaced by Workload " + by}
	}
	for _, tc := range []struct {
		name   string
		job    Job
		slices []slice
		want   Decision
	}{
		{
			name: "no workload: the first slice is created, the job held",
			job:  job(4, false),
			want: Decision{Create: true, HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit the job's Workload"},
		},
		{
			name:   "admitted at its size: run all of it",
			job:    job(4, true),
			slices: []slice{{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission}, workers: 4}},
			want:   Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(4)},
		},
		{
			name:   "scaled down while admitted: the slice shrinks in place and keeps running",
			job:    job(2, true),
			slices: []slice{{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission}, workers: 4}},
			want: Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(2),
				Resize: &Resize{Name: "w1", Counts: workers(2)}},
		},
		{
			name:   "scaled up while admitted: a replacement slice, the job runs at the admitted size",
			job:    job(4, true),
			slices: []slice{{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission}, workers: 2}},
			want: Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(2),
				Create: true, ReplaceSlice: "w1", SliceName: "w1",
				ResizePending: "2 of 4 worker pods wait for Kueue to admit a Workload slice for the new size; the running pods keep running"},
		},
		{
			name: "replacement pending beyond quota: the extra pods wait with Kueue's reason",
			job:  job(4, true),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission}, workers: 2},
				{wl: wl{name: "w2", hash: "h"}, workers: 4, replaces: "w1", pendingMsg: quotaMsg},
			},
			want: Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(2),
				ResizePending: "2 of 4 worker pods wait for Kueue to admit Workload w2: " + quotaMsg + "; the running pods keep running"},
		},
		{
			name: "scaled again while the replacement is pending: the replacement takes the new size",
			job:  job(5, true),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission}, workers: 2},
				{wl: wl{name: "w2", hash: "h"}, workers: 4, replaces: "w1"},
			},
			want: Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(2),
				Resize:        &Resize{Name: "w2", Counts: workers(5)},
				ResizePending: "3 of 5 worker pods wait for Kueue to admit Workload w2; the running pods keep running"},
		},
		{
			name: "scaled back below the admitted size while the replacement is pending: the extra running pods go",
			job:  job(1, true),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission}, workers: 2},
				{wl: wl{name: "w2", hash: "h"}, workers: 4, replaces: "w1"},
			},
			want: Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(1),
				Resize: &Resize{Name: "w2", Counts: workers(1)}},
		},
		{
			name: "replacement admitted before Kueue finished the old slice: finish it, run at the new size",
			job:  job(4, true),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission, finalizer: true}, workers: 2},
				{wl: wl{name: "w2", hash: "h", conds: admitted, admission: admission}, workers: 4, replaces: "w1"},
			},
			want: Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(4),
				Finish: outOfSync("w2"), FinishWorkload: "w1"},
		},
		{
			name: "old slice replaced, its replacement's admission not seen yet: keep running on the old one",
			job:  job(4, true),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: replaced, admission: admission, finalizer: true}, workers: 2},
				{wl: wl{name: "w2", hash: "h"}, workers: 4, replaces: "w1"},
			},
			want: Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(2), RemoveFinalizer: []string{"w1"},
				ResizePending: "2 of 4 worker pods wait for Kueue to admit Workload w2; the running pods keep running"},
		},
		{
			name: "replacement admitted, old slice finished: the old one is deleted",
			job:  job(4, true),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: replaced, admission: admission}, workers: 2},
				{wl: wl{name: "w2", hash: "h", conds: admitted, admission: admission}, workers: 4, replaces: "w1"},
			},
			want: Decision{Run: true, Assignments: admission.PodSetAssignments, Allowed: workers(4), Delete: []string{"w1"}},
		},
		{
			name:   "not admitted yet: the counts change in place, still held",
			job:    job(4, false),
			slices: []slice{{wl: wl{name: "w1", hash: "h"}, workers: 2}},
			want: Decision{Resize: &Resize{Name: "w1", Counts: workers(4)},
				HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit Workload w1"},
		},
		{
			name: "admitted slice evicted while pods live: held, the replacement waits",
			job:  job(4, true),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: evicted, admission: admission}, workers: 2},
				{wl: wl{name: "w2", hash: "h"}, workers: 4, replaces: "w1"},
			},
			want: Decision{HeldReason: HeldEvicted, HeldMessage: "Kueue evicted Workload w1 (Preempted): Evicted message; the job waits to be admitted again"},
		},
		{
			name: "admitted slice evicted, pods gone: it is finished and the replacement stands for the job",
			job:  job(4, false),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: evicted, admission: admission}, workers: 2},
				{wl: wl{name: "w2", hash: "h"}, workers: 4, replaces: "w1"},
			},
			want: Decision{Finish: outOfSync("w2"), FinishWorkload: "w1",
				HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit Workload w2"},
		},
		{
			name: "replaced slice with no pods left: no bridge, held for the replacement",
			job:  job(4, false),
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: replaced, admission: admission}, workers: 2},
				{wl: wl{name: "w2", hash: "h"}, workers: 4, replaces: "w1"},
			},
			want: Decision{Delete: []string{"w1"}, HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit Workload w2"},
		},
		{
			name: "finished with a replacement pending: the admitted slice is finished, the pending one deleted",
			job:  Job{SpecHash: "h", Elastic: true, Counts: workers(4), Finished: true, Succeeded: true, Message: "done"},
			slices: []slice{
				{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission, finalizer: true}, workers: 2},
				{wl: wl{name: "w2", hash: "h"}, workers: 4, replaces: "w1"},
			},
			want: Decision{Delete: []string{"w2"}, Finish: &metav1.Condition{Type: ConditionFinished, Status: metav1.ConditionTrue, Reason: ReasonSucceeded, Message: "done"},
				FinishWorkload: "w1", RemoveFinalizer: []string{"w1"}},
		},
		{
			name:   "another change of spec: the stale slice goes and the job starts again",
			job:    Job{SpecHash: "h2", Elastic: true, Counts: workers(4), Active: true},
			slices: []slice{{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission}, workers: 4}},
			want: Decision{Create: true, Delete: []string{"w1"},
				HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit the job's Workload"},
		},
		{
			name:   "a deleted slice loses its finalizer",
			job:    job(4, false),
			slices: []slice{{wl: wl{name: "w1", hash: "h", conds: admitted, admission: admission, finalizer: true, deleting: true}, workers: 4}},
			want: Decision{Create: true, RemoveFinalizer: []string{"w1"},
				HeldReason: HeldWaitingForAdmission, HeldMessage: "waiting for Kueue to admit the job's Workload"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ws []*Workload
			for _, b := range tc.slices {
				ws = append(ws, b.obj())
			}
			got := Decide(tc.job, ws)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decide (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestSortOldestFirst: Workloads created in one second (a job resized
// twice within it) read old to new along the slice chain, whatever order
// the list returns them in.
func TestSortOldestFirst(t *testing.T) {
	at := metav1.Unix(1000, 0)
	w := func(name, replaces string, created metav1.Time) *Workload {
		x := &Workload{}
		x.Namespace, x.Name, x.CreationTimestamp = "ns", name, created
		x.Annotations = map[string]string{}
		if replaces != "" {
			x.Annotations[lockstep.AnnotationKueueSliceReplacementFor] = "ns/" + replaces
		}
		return x
	}
	tests := []struct {
		name string
		in   []*Workload
		want []string
	}{
		{name: "by creation", in: []*Workload{w("wl-2", "", metav1.Unix(1001, 0)), w("wl-1", "", at)}, want: []string{"wl-1", "wl-2"}},
		{name: "a replacement created in the same second, listed first", in: []*Workload{w("wl-6", "wl-4", at), w("wl-4", "", at)}, want: []string{"wl-4", "wl-6"}},
		{name: "the same, whose name sorts first", in: []*Workload{w("wl-10", "wl-9", at), w("wl-9", "", at)}, want: []string{"wl-9", "wl-10"}},
		{name: "other ties by name", in: []*Workload{w("b", "", at), w("a", "", at)}, want: []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			SortOldestFirst(tc.in)
			var got []string
			for _, x := range tc.in {
				got = append(got, x.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("order (-want,+got):\n%s", diff)
			}
		})
	}
}
