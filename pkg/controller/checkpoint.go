package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/util/syncmap"
)

// Checkpoints (docs/controller.md, "Checkpoints"): the ranks report, the
// controller keeps the newest report of the incarnation that runs in
// status.checkpoint and hands it to every later incarnation.

// Warning events: a report that was ignored, and a reporter Role that
// could not be written (the job runs on; the write is retried after
// checkpointReporterRetry).
const (
	ReasonInvalidCheckpoint        = "InvalidCheckpointReport"
	ReasonCheckpointReporterFailed = "CheckpointReporterFailed"
)

const checkpointReporterRetry = 30 * time.Second

// checkpointReport is one report a pod made, where it was read.
type checkpointReport struct {
	status v1alpha1.CheckpointStatus
	// raw is the report as written, to warn about a bad one once.
	raw string
	err error
	pod types.UID
}

// checkpointReports reads the reports of the job's pods that count. Under a
// pod restart scope every pod's count: its pods are one run, whatever their
// incarnation labels. Under a gang scope those of the incarnation that runs
// (restartCount) count, and those of the one before it made before any pod
// of the new one was created: the ranks of a gang being restarted (a
// preemption, a failed member) checkpoint on SIGTERM, after the restart
// was decided, and the new incarnation is created only once they are gone
// from healthy nodes. A later report of an earlier incarnation comes from a
// rank that kept running beside the new one (on a partitioned node), which
// wrote a checkpoint the new incarnation never agreed on: it is not read,
// nor is anything of older incarnations.
//
// Reports are read from the pod's annotation and from its containers'
// termination messages, of the container's last run and its current state.
func checkpointReports(job *v1alpha1.TrainingJob, pods []*corev1.Pod, scope v1alpha1.RestartScope) []checkpointReport {
	current := job.Status.RestartCount
	// fence is when the first pod of the current incarnation was created.
	var fence time.Time
	for _, p := range pods {
		if podLabels(p, current).incarnation == current && (fence.IsZero() || p.CreationTimestamp.Time.Before(fence)) {
			fence = p.CreationTimestamp.Time
		}
	}
	var out []checkpointReport
	for _, p := range pods {
		jp := podLabels(p, current)
		previous := scope == v1alpha1.RestartScopeGang && jp.incarnation != current
		if previous && jp.incarnation != current-1 {
			continue
		}
		index, _ := strconv.ParseInt(p.Labels[lockstep.LabelReplicaIndex], 10, 32)
		base := v1alpha1.CheckpointStatus{Pod: p.Name, ReplicaType: jp.role, Index: int32(index), Incarnation: jp.incarnation}
		if rank, err := strconv.ParseInt(p.Annotations[lockstep.AnnotationRank], 10, 32); err == nil {
			base.Rank = ptr.To(int32(rank))
		}
		add := func(source v1alpha1.CheckpointSource, raw string, c lockstep.Checkpoint, err error) {
			if previous && err == nil && !fence.IsZero() && !c.Time.Before(fence) {
				return
			}
			st := base
			st.Source, st.Step, st.Time, st.Location = source, c.Step, metav1.NewTime(c.Time), c.Location
			out = append(out, checkpointReport{status: st, raw: raw, err: err, pod: p.UID})
		}
		if raw, ok := p.Annotations[lockstep.AnnotationCheckpoint]; ok {
			c, err := lockstep.ParseCheckpoint(raw)
			add(v1alpha1.CheckpointFromAnnotation, raw, c, err)
		}
		for _, m := range terminationMessages(p) {
			if c, found, err := lockstep.CheckpointInMessage(m.message); found {
				add(v1alpha1.CheckpointFromTerminationMessage, m.container+": "+m.message, c, err)
			}
		}
	}
	return out
}

// hasReport says whether pod carries a checkpoint report, in its
// annotation or a termination message.
func hasReport(p *corev1.Pod) bool {
	if _, ok := p.Annotations[lockstep.AnnotationCheckpoint]; ok {
		return true
	}
	return slices.ContainsFunc(terminationMessages(p), func(m terminationMessage) bool {
		return strings.Contains(m.message, lockstep.CheckpointMessagePrefix)
	})
}

// terminationMessage is a container's termination message, of its last
// run or its current state.
type terminationMessage struct{ container, message string }

func terminationMessages(p *corev1.Pod) []terminationMessage {
	var out []terminationMessage
	for _, cs := range p.Status.ContainerStatuses {
		for _, t := range []*corev1.ContainerStateTerminated{cs.LastTerminationState.Terminated, cs.State.Terminated} {
			if t != nil && t.Message != "" {
				out = append(out, terminationMessage{cs.Name, t.Message})
			}
		}
	}
	return out
}

// heardReports keeps, per job, the last state the pod events showed of
// each of its pods that carried a checkpoint report. A rank that reports
// in its termination message on its way out does so moments before its
// kubelet deletes the pod: the reconcile its status update causes may
// list the cache after the deletion, and would never see the report.
type heardReports struct {
	jobs syncmap.Map[types.UID, map[types.UID]*corev1.Pod]
}

// note keeps p's reports if it carries any, stripped to what
// checkpointReports reads.
func (h *heardReports) note(p *corev1.Pod) {
	if h == nil {
		return
	}
	ref := jobOwner(p)
	if ref == nil || !hasReport(p) {
		return
	}
	kept := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: p.Labels, CreationTimestamp: p.CreationTimestamp,
	}}
	if raw, ok := p.Annotations[lockstep.AnnotationCheckpoint]; ok {
		kept.Annotations = map[string]string{lockstep.AnnotationCheckpoint: raw}
	}
	for _, cs := range p.Status.ContainerStatuses {
		kept.Status.ContainerStatuses = append(kept.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cs.Name, State: corev1.ContainerState{Terminated: cs.State.Terminated},
			LastTerminationState: corev1.ContainerState{Terminated: cs.LastTerminationState.Terminated},
		})
	}
	h.jobs.Update(ref.UID, func(pods map[types.UID]*corev1.Pod, _ bool) (map[types.UID]*corev1.Pod, bool) {
		if pods == nil {
			pods = map[types.UID]*corev1.Pod{}
		}
		pods[p.UID] = kept
		return pods, true
	})
}

// with returns pods and the heard pods the cache no longer lists, and
// forgets heard pods of incarnations whose reports no longer count.
func (h *heardReports) with(job *v1alpha1.TrainingJob, pods []*corev1.Pod) []*corev1.Pod {
	listed := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		listed[p.UID] = true
	}
	out := pods
	h.jobs.Update(job.UID, func(heard map[types.UID]*corev1.Pod, ok bool) (map[types.UID]*corev1.Pod, bool) {
		for uid, p := range heard {
			switch {
			case podLabels(p, job.Status.RestartCount).incarnation+1 < job.Status.RestartCount:
				delete(heard, uid)
			case !listed[uid]:
				out = append(out, p)
			}
		}
		return heard, ok && len(heard) > 0
	})
	return out
}

func (h *heardReports) forget(job types.UID) { h.jobs.Delete(job) }

// newestCheckpoint folds reports into the job's checkpoint (current, nil
// when none): the newest valid report by time, then step, when it is newer
// than current. Reports that do not parse, or whose time is ahead of now by
// more than lockstep.CheckpointClockSkew, are returned as faults; a fault's
// err names the field.
func newestCheckpoint(current *v1alpha1.CheckpointStatus, reports []checkpointReport, now time.Time) (*v1alpha1.CheckpointStatus, []checkpointReport) {
	var faults []checkpointReport
	best := current
	for _, r := range reports {
		if r.err == nil && !(lockstep.Checkpoint{Time: r.status.Time.Time}).Believable(now) {
			r.err = fmt.Errorf("time: %s is %s ahead of the controller's clock (at most %s)",
				r.status.Time.UTC().Format(time.RFC3339), r.status.Time.Sub(now).Round(time.Second), lockstep.CheckpointClockSkew)
		}
		if r.err != nil {
			faults = append(faults, r)
			continue
		}
		if best == nil || newer(r.status, *best) {
			st := r.status
			best = &st
		}
	}
	return best, faults
}

// newer orders reports by time, then step, then the pod that made it (so
// that of two ranks reporting the same checkpoint one is kept, the same one
// on every pass, and the status is not rewritten back and forth).
func newer(a, b v1alpha1.CheckpointStatus) bool {
	switch {
	case !a.Time.Equal(&b.Time):
		return a.Time.After(b.Time.Time)
	case a.Step != b.Step:
		return a.Step > b.Step
	default:
		return a.Pod < b.Pod
	}
}

// foldCheckpoints updates status.checkpoint from the job's pods' reports,
// and warns once per bad report (an event on the job, for the user to fix
// the trainer; never a resume from it).
func (r *TrainingJobReconciler) foldCheckpoints(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod, scope v1alpha1.RestartScope) {
	reports := checkpointReports(job, r.heardReports.with(job, pods), scope)
	if len(reports) == 0 {
		return
	}
	best, faults := newestCheckpoint(job.Status.Checkpoint, reports, r.Clock.Now())
	if best != job.Status.Checkpoint {
		ctrl.LoggerFrom(ctx).V(2).Info("Checkpoint reported", "step", best.Step, "time", best.Time, "location", best.Location, "pod", best.Pod, "source", best.Source)
		job.Status.Checkpoint = best
	}
	for _, f := range faults {
		if r.checkpointWarnings.first(job.UID, f.pod, f.raw) {
			r.Recorder.Eventf(job, corev1.EventTypeWarning, ReasonInvalidCheckpoint,
				"Ignored the checkpoint report of pod %s (%s): %v", f.status.Pod, f.status.Source, f.err)
		}
	}
}

// checkpointWarnings remembers the bad reports warned about, per job, so
// that a report is warned about once, not on every reconcile.
type checkpointWarnings struct {
	jobs syncmap.Map[types.UID, map[string]bool]
}

// first reports whether raw, reported by pod, was not warned about yet, and
// notes it.
func (w *checkpointWarnings) first(job, pod types.UID, raw string) bool {
	key := string(pod) + "\x00" + raw
	first := false
	w.jobs.Update(job, func(seen map[string]bool, _ bool) (map[string]bool, bool) {
		if seen == nil {
			seen = map[string]bool{}
		}
		if !seen[key] {
			first, seen[key] = true, true
		}
		return seen, true
	})
	return first
}

func (w *checkpointWarnings) forget(job types.UID) { w.jobs.Delete(job) }

// setResumeEnv gives every container, init containers included (a restore
// often runs in one), the job's last checkpoint: LOCKSTEP_RESUME_FROM and
// LOCKSTEP_RESUME_STEP. Templates may not set them
// (v1alpha1.ValidateReservedEnv).
func setResumeEnv(spec *corev1.PodSpec, c *v1alpha1.CheckpointStatus) {
	if c == nil {
		return
	}
	setControllerEnv(spec,
		corev1.EnvVar{Name: lockstep.EnvResumeFrom, Value: c.Location},
		corev1.EnvVar{Name: lockstep.EnvResumeStep, Value: strconv.FormatInt(c.Step, 10)})
}

// checkpointReporter is the Role and RoleBinding that let the job's pods
// report checkpoints: get and patch on the pods of the incarnation that
// runs, by name, for the ServiceAccounts the job's templates run as. RBAC
// cannot narrow a patch to one annotation, nor to the caller's own pod;
// deploy/default/checkpoint-policy.yaml does: a pod may change only
// lockstep.dev/checkpoint, only on itself. A rank of an earlier incarnation
// is not named, so it cannot report at all.
func checkpointReporter(job *v1alpha1.TrainingJob, a framework.Adapter) (*rbacv1.Role, *rbacv1.RoleBinding) {
	name := framework.CheckpointReporterName(job.Name)
	inc := framework.NameIncarnation(a, job)
	var pods []string
	accounts := map[string]bool{}
	for _, role := range a.Roles() {
		spec, ok := job.Spec.ReplicaSpecs[role]
		if !ok {
			continue
		}
		for i := range spec.DesiredReplicas() {
			pods = append(pods, framework.PodName(job.Name, role, i, inc))
		}
		sa := spec.Template.Spec.ServiceAccountName
		if sa == "" {
			sa = spec.Template.Spec.DeprecatedServiceAccount
		}
		if sa == "" {
			sa = "default"
		}
		accounts[sa] = true
	}
	slices.Sort(pods)
	meta := metav1.ObjectMeta{Name: name, Namespace: job.Namespace}
	role := &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}, ResourceNames: pods,
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}
	for _, sa := range slices.Sorted(maps.Keys(accounts)) {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: job.Namespace})
	}
	return role, binding
}

// ensureCheckpointReporter applies checkpointReporter's Role and binding.
func (r *TrainingJobReconciler) ensureCheckpointReporter(ctx context.Context, job *v1alpha1.TrainingJob, a framework.Adapter) error {
	role, binding := checkpointReporter(job, a)
	if err := r.ensureObject(ctx, job, role, false); err != nil {
		return err
	}
	return r.ensureObject(ctx, job, binding, false)
}
