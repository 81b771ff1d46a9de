package kueue

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Reasons of Finished on a slice that no longer stands for the job: Kueue
// replaced it by an admitted larger slice, or the job's controller found it
// out of step with its replacement (sigs.k8s.io/kueue v0.17,
// pkg/workloadslicing).
const (
	ReasonSliceReplaced = "WorkloadSliceReplaced"
	ReasonOutOfSync     = "OutOfSync"
)

// decideSlices is Decide for an elastic job, whose Workloads are slices of
// one chain (Kueue's ElasticJobsViaWorkloadSlices, as its jobframework
// keeps them for its built-in elastic integrations):
//
//   - a scale-down of an admitted slice lowers its counts in place: the
//     pods above the new size go, the rest keep running, and Kueue gives
//     the freed quota back;
//   - a scale-up of an admitted slice creates a replacement slice for the
//     new size, naming the admitted one; Kueue admits it for the difference
//     and finishes the old one as WorkloadSliceReplaced. Until then the job
//     runs at the admitted size, and the pods beyond it wait
//     (ResizePending, with Kueue's reason). Beyond quota they wait for as
//     long as Kueue leaves the slice pending; the running pods are never
//     stopped for it;
//   - a slice not admitted yet takes the new counts in place;
//   - an evicted slice holds the job as any evicted Workload does; a
//     replacement pending beside it becomes the job's Workload once the
//     pods are gone (the evicted slice is finished OutOfSync), and Kueue
//     admits it at its full size;
//   - replaced slices lose Kueue's finalizer and are deleted once their
//     replacement is admitted.
//
// Any other change of the spec (templates, roles, queue, priority) changes
// SpecHash and restarts the job on a new Workload, as for other jobs.
func decideSlices(job Job, workloads []*Workload) Decision {
	var d Decision
	var live, replaced []*Workload
	var finished *Workload
	for _, w := range workloads {
		switch {
		case w.DeletionTimestamp != nil:
			if w.HasFinalizer() {
				d.RemoveFinalizer = append(d.RemoveFinalizer, w.Name)
			}
		case w.Annotations[lockstep.AnnotationSpecHash] != job.SpecHash:
			d.Delete = append(d.Delete, w.Name)
		case finishedAs(w, ReasonSliceReplaced, ReasonOutOfSync):
			replaced = append(replaced, w)
		case w.IsTrue(ConditionFinished):
			finished = w
		default:
			live = append(live, w)
		}
	}

	var match, pending *Workload
	switch {
	case len(live) == 0:
		match = finished
	case len(live) == 1:
		match = live[0]
	default:
		// Kueue keeps at most two: the admitted slice and its replacement.
		old, newest := live[0], live[len(live)-1]
		for _, w := range live[1 : len(live)-1] {
			if !w.IsTrue(ConditionQuotaReserved) {
				d.Delete = append(d.Delete, w.Name)
			}
		}
		replacing := newest.IsTrue(ConditionQuotaReserved) && newest.Annotations[lockstep.AnnotationKueueSliceReplacementFor] == sliceKey(old)
		switch {
		case job.Finished:
			match, pending = old, newest
			if newest.IsTrue(ConditionQuotaReserved) {
				match, pending = newest, old
			}
			d.Delete = append(d.Delete, pending.Name)
			pending = nil
		case replacing || !old.IsTrue(ConditionQuotaReserved) || (old.IsTrue(ConditionEvicted) && !job.Active):
			d.Finish = &metav1.Condition{Type: ConditionFinished, Status: metav1.ConditionTrue, Reason: ReasonOutOfSync,
				Message: fmt.Sprintf("The workload slice is out of sync with its parent job: replaced by Workload %s", newest.Name)}
			d.FinishWorkload = old.Name
			match = newest
		default:
			match, pending = old, newest
		}
	}

	if match != nil && !job.Finished && !match.IsTrue(ConditionFinished) && !match.IsTrue(ConditionEvicted) {
		have := match.Counts()
		switch {
		case pending != nil:
			if !maps.Equal(pending.Counts(), job.Counts) {
				d.Resize = &Resize{Name: pending.Name, Counts: job.Counts}
			}
		case maps.Equal(have, job.Counts):
		case !match.IsTrue(ConditionQuotaReserved) || scaledDown(have, job.Counts):
			d.Resize = &Resize{Name: match.Name, Counts: job.Counts}
		default:
			d.Create, d.ReplaceSlice, d.SliceName = true, match.Name, sliceName(match)
		}
	}

	decideMatch(&d, job, match)

	// Kueue finishes the replaced slice just before it admits the new one:
	// in between, the job keeps running on what the replaced slice held.
	var bridge *Workload
	if !d.Run && d.HeldReason == HeldWaitingForAdmission && job.Active && match != nil {
		key := match.Annotations[lockstep.AnnotationKueueSliceReplacementFor]
		for _, r := range replaced {
			if sliceKey(r) == key && finishedAs(r, ReasonSliceReplaced) && r.Status.Admission != nil {
				bridge = r
			}
		}
	}
	if bridge != nil {
		d.Run, d.HeldReason, d.HeldMessage = true, "", ""
		d.Assignments = slices.Clone(bridge.Status.Admission.PodSetAssignments)
		pending, match = match, bridge
	}
	for _, r := range replaced {
		switch {
		case r == bridge:
			if r.HasFinalizer() {
				d.RemoveFinalizer = append(d.RemoveFinalizer, r.Name)
			}
		default:
			// Deleting it also takes the finalizer off (next pass).
			d.Delete = append(d.Delete, r.Name)
		}
	}

	if d.Run {
		d.Allowed = map[string]int32{}
		for ps, n := range match.Counts() {
			d.Allowed[ps] = min(n, job.Counts[ps])
		}
		d.ResizePending = resizePending(job.Counts, d.Allowed, pending, d.Create)
	}
	return d
}

// resizePending says which pods wait for Kueue to admit a larger slice,
// pending (or the one being created), and Kueue's reason; "" when none.
func resizePending(want, allowed map[string]int32, pending *Workload, creating bool) string {
	var waiting []string
	for _, ps := range slices.Sorted(maps.Keys(want)) {
		if n := want[ps] - allowed[ps]; n > 0 {
			waiting = append(waiting, fmt.Sprintf("%d of %d %s pods", n, want[ps], ps))
		}
	}
	if len(waiting) == 0 {
		return ""
	}
	msg := strings.Join(waiting, ", ") + " wait for Kueue to admit "
	switch {
	case pending != nil:
		msg += "Workload " + pending.Name
		if c := meta.FindStatusCondition(pending.Status.Conditions, ConditionQuotaReserved); c != nil && c.Status != metav1.ConditionTrue && c.Message != "" {
			msg += ": " + c.Message
		}
	case creating:
		msg += "a Workload slice for the new size"
	default:
		msg += "the new size"
	}
	return msg + "; the running pods keep running"
}

// scaledDown reports whether want shrinks have: no pod set grows, and the
// pod sets are the same.
func scaledDown(have, want map[string]int32) bool {
	if len(have) != len(want) {
		return false
	}
	for ps, n := range want {
		h, ok := have[ps]
		if !ok || n > h {
			return false
		}
	}
	return true
}

// finishedAs reports whether w is Finished for one of reasons.
func finishedAs(w *Workload, reasons ...string) bool {
	c := meta.FindStatusCondition(w.Status.Conditions, ConditionFinished)
	return c != nil && c.Status == metav1.ConditionTrue && slices.Contains(reasons, c.Reason)
}

// sliceKey is how a replacement slice names the slice it replaces.
func sliceKey(w *Workload) string { return w.Namespace + "/" + w.Name }

// SortOldestFirst orders a job's Workloads by creation, as Decide reads
// them. Creation timestamps have a resolution of a second, and a job
// resized twice within one (6 → 4 → 6) has a slice and its replacement
// created in the same second: a slice then comes after the one it replaces
// (its replacement-for annotation), so the chain reads old to new. Read in
// the other order, the admitted slice was taken for the replacement: the
// pending one was finished as out of sync, the admitted one deleted as
// stale, and the running job suspended and its pods deleted. Other ties go
// by name, so every reconcile reads the same order.
func SortOldestFirst(ws []*Workload) {
	slices.SortStableFunc(ws, func(a, b *Workload) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		switch {
		case b.Annotations[lockstep.AnnotationKueueSliceReplacementFor] == sliceKey(a):
			return -1
		case a.Annotations[lockstep.AnnotationKueueSliceReplacementFor] == sliceKey(b):
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// sliceName is the first Workload of w's chain.
func sliceName(w *Workload) string {
	if n := w.Annotations[lockstep.AnnotationKueueSliceName]; n != "" {
		return n
	}
	return w.Name
}
