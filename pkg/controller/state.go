package controller

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Condition reasons the controller sets besides the adapters' outcomes.
const (
	ReasonInvalidSpec          = "InvalidSpec"
	ReasonBackoffLimitExceeded = "BackoffLimitExceeded"
	ReasonDeadlineExceeded     = "DeadlineExceeded"
	ReasonPodsCreated          = "PodsCreated"
	ReasonFailedCreatePod      = "FailedCreatePod"
	ReasonGangRunning          = "GangRunning"
	ReasonRestarting           = "Restarting"
	ReasonSuspended            = "Suspended"
	ReasonResumed              = "Resumed"
	ReasonFinished             = "Finished"
)

// jobPod is one of a job's pods with the role, index and incarnation its
// labels give.
type jobPod struct {
	*corev1.Pod
	role  v1alpha1.ReplicaType
	index int32
	// incarnation is the job's restartCount when the pod was created (the
	// lockstep.LabelIncarnation label; the current count for a pod made
	// before the label existed).
	incarnation int32
	// suspensions is the job's suspension count when the pod was created
	// (lockstep.LabelSuspensions; 0 for a pod made before the label).
	suspensions int32
}

// observation is a job's pods sorted out for the decisions.
type observation struct {
	// live are the pods not being deleted, by name.
	live map[string]jobPod
	// terminating counts pods of this incarnation being deleted.
	terminating int
	// stale are the live pods of an earlier incarnation under a gang
	// restart scope, or of a run the job was suspended from under any
	// scope: a gang restart or a resume is under way, and they go before
	// the new pods are created. staleTerminating counts those being
	// deleted.
	stale            []jobPod
	staleTerminating int
	// staleDoomed are the pods counted in staleTerminating; abandon takes
	// out of the count those the new gang need not wait for.
	staleDoomed []jobPod
	// abandoned are pods of an earlier incarnation left Terminating on an
	// unavailable node, which the new gang, named and fenced apart, does
	// not wait for (abandon).
	abandoned []string
	// lost names the members of this incarnation that are missing or being
	// deleted by someone else (evicted, preempted, their node gone) after
	// the gang started; nil before it started. terminatingMembers are those
	// being deleted.
	lost               []string
	terminatingMembers []string
	// preempted are the members of this incarnation, by name, that the
	// scheduler marked preempted and that are being deleted, failed or gone
	// (preemption.go).
	preempted map[string]preemptionCause
	// disrupted are the members of this incarnation, by name, that the
	// cluster took (their DisruptionTarget condition, a kubelet eviction,
	// their node gone dark): the reason, for a restart that is no failure
	// of the job's.
	disrupted map[string]string
	// slots are the role and index of the live members, whatever their
	// names (a pod made by an older controller keeps its name).
	slots map[slot]bool
	// terminatingSlots are those of terminatingMembers.
	terminatingSlots map[slot]bool
	// nameIncarnation is the incarnation the job's new pods are named for
	// (framework.NameIncarnation).
	nameIncarnation int32
	// started says a pod of this incarnation was bound to a node. Gang
	// scheduling binds no member before every member exists, so a member
	// missing after that was lost, not yet to be created.
	started bool
	// excess are live pods whose role or index the spec no longer has.
	excess []jobPod
	// retry are failed pods that the restart policy of their role retries.
	retry []jobPod
	// phases is the adapters' view: a retried or missing pod is Pending.
	phases framework.Observed
	// running counts live pods in phase Running.
	running int32
	// replicas counts pods by role and phase.
	replicas map[v1alpha1.ReplicaType]v1alpha1.ReplicaStatus
}

// slot is a member's place in the job: its role and index.
type slot struct {
	role  v1alpha1.ReplicaType
	index int32
}

// observe sorts a defaulted job's pods. Under a gang restart scope, pods of
// an earlier incarnation are set apart as stale.
func observe(job *v1alpha1.TrainingJob, pods []*corev1.Pod, scope v1alpha1.RestartScope) observation {
	obs := observation{
		live:             map[string]jobPod{},
		preempted:        map[string]preemptionCause{},
		disrupted:        map[string]string{},
		slots:            map[slot]bool{},
		terminatingSlots: map[slot]bool{},
		phases:           framework.Observed{},
		replicas:         map[v1alpha1.ReplicaType]v1alpha1.ReplicaStatus{},
	}
	if scope == v1alpha1.RestartScopeGang {
		obs.nameIncarnation = job.Status.RestartCount
	}
	for role, spec := range job.Spec.ReplicaSpecs {
		phases := make([]corev1.PodPhase, spec.DesiredReplicas())
		for i := range phases {
			phases[i] = corev1.PodPending
		}
		obs.phases[role] = phases
		obs.replicas[role] = v1alpha1.ReplicaStatus{}
	}
	for _, p := range pods {
		jp, known := podRole(job, p, scope)
		earlierRun := jp.suspensions < job.Status.Suspensions
		if earlierRun || scope == v1alpha1.RestartScopeGang && jp.incarnation < job.Status.RestartCount {
			if p.DeletionTimestamp != nil {
				obs.staleTerminating++
				obs.staleDoomed = append(obs.staleDoomed, jp)
			} else {
				obs.stale = append(obs.stale, jp)
			}
			continue
		}
		if p.Spec.NodeName != "" {
			obs.started = true
		}
		cause, preempted := podPreemption(p)
		// A member that failed after the scheduler marked it preempted (its
		// containers stopped before the scheduler's delete) was not the
		// program's failure: it is taken for lost, as when it is deleted.
		// Under a pod scope it is retried as any failed pod.
		doomed := p.DeletionTimestamp != nil || preempted && known && p.Status.Phase == corev1.PodFailed && scope == v1alpha1.RestartScopeGang
		if preempted && doomed && known {
			obs.preempted[p.Name] = cause
		}
		if reason, ok := podDisruption(p); ok && known && (doomed || p.Status.Phase == corev1.PodFailed) {
			obs.disrupted[p.Name] = reason
		}
		if doomed {
			if p.DeletionTimestamp != nil {
				obs.terminating++
			}
			if known {
				obs.terminatingMembers = append(obs.terminatingMembers, p.Name)
				obs.terminatingSlots[slot{jp.role, jp.index}] = true
			}
			continue
		}
		if !known {
			obs.excess = append(obs.excess, jp)
			continue
		}
		obs.live[p.Name] = jp
		obs.slots[slot{jp.role, jp.index}] = true
		rs := obs.replicas[jp.role]
		phase := p.Status.Phase
		switch phase {
		case corev1.PodSucceeded:
			rs.Succeeded++
		case corev1.PodFailed:
			rs.Failed++
			if retryable(job, jp) {
				obs.retry = append(obs.retry, jp)
				phase = corev1.PodPending
			}
		case corev1.PodRunning:
			obs.running++
			rs.Active++
		default:
			rs.Active++
		}
		obs.replicas[jp.role] = rs
		obs.phases[jp.role][jp.index] = phase
	}
	if obs.started {
		obs.findLost(job)
	}
	return obs
}

// findLost lists the members of a gang that started that are not live.
func (o *observation) findLost(job *v1alpha1.TrainingJob) {
	o.lost = slices.Clone(o.terminatingMembers)
	for role, spec := range job.Spec.ReplicaSpecs {
		for i := range spec.DesiredReplicas() {
			if !o.slots[slot{role, i}] && !o.terminatingSlots[slot{role, i}] {
				o.lost = append(o.lost, framework.PodName(job.Name, role, i, o.nameIncarnation))
			}
		}
	}
	slices.Sort(o.lost)
}

// abandon stops waiting for pods of an earlier incarnation that are being
// deleted on a node that is unavailable (gone dark, NotReady, fenced): their
// kubelet may never confirm, and the new incarnation's pods have other
// names and a fenced rendezvous (framework.PodName), so the gang restarts
// on healthy nodes while they stay Terminating. A pod whose name the new
// incarnation would reuse (a pod scope, a suspension) is still waited for:
// the name is not free until it goes (forceDeletable).
func (o *observation) abandon(job *v1alpha1.TrainingJob, outages map[string]nodeOutage) {
	for _, p := range o.staleDoomed {
		if _, out := outages[p.Spec.NodeName]; !out || p.Spec.NodeName == "" {
			continue
		}
		if p.Name == framework.PodName(job.Name, p.role, p.index, o.nameIncarnation) {
			continue
		}
		o.staleTerminating--
		o.abandoned = append(o.abandoned, p.Name)
	}
	slices.Sort(o.abandoned)
}

// excuse takes the members whose creation the controller tried and failed
// in this incarnation out of lost: a pod that never existed was not lost.
// With minAvailable below the replica count the gang starts without them,
// and a create that keeps failing (a ResourceQuota) is retried and
// reported (FailedCreatePod), not turned into gang restarts.
func (o *observation) excuse(neverCreated func(name string) bool) {
	o.lost = slices.DeleteFunc(o.lost, neverCreated)
}

// podRole reads a pod's role and index; false when the job's spec has no
// such pod (a role removed or scaled down while suspended) or the pod's
// name is not the one its role, index and incarnation give it under scope.
// A pod named for incarnation 0 is accepted in any incarnation: a
// controller before per-incarnation names made it.
func podRole(job *v1alpha1.TrainingJob, p *corev1.Pod, scope v1alpha1.RestartScope) (jobPod, bool) {
	jp := podLabels(p, job.Status.RestartCount)
	i, err := strconv.ParseInt(p.Labels[lockstep.LabelReplicaIndex], 10, 32)
	spec, ok := job.Spec.ReplicaSpecs[jp.role]
	if err != nil || !ok || i < 0 || int32(i) >= spec.DesiredReplicas() {
		return jp, false
	}
	jp.index = int32(i)
	inc := int32(0)
	if scope == v1alpha1.RestartScopeGang {
		inc = jp.incarnation
	}
	if p.Name != framework.PodName(job.Name, jp.role, jp.index, inc) && p.Name != framework.PodName(job.Name, jp.role, jp.index, 0) {
		return jp, false
	}
	return jp, true
}

// podLabels reads a pod's role, incarnation and suspension count off its
// labels; incarnation is the one of a pod made before the label existed.
func podLabels(p *corev1.Pod, incarnation int32) jobPod {
	jp := jobPod{Pod: p, role: v1alpha1.ReplicaType(p.Labels[lockstep.LabelReplicaType]), incarnation: incarnation}
	if n, err := strconv.ParseInt(p.Labels[lockstep.LabelIncarnation], 10, 32); err == nil && n >= 0 {
		jp.incarnation = int32(n)
	}
	if n, err := strconv.ParseInt(p.Labels[lockstep.LabelSuspensions], 10, 32); err == nil && n >= 0 {
		jp.suspensions = int32(n)
	}
	return jp
}

// retryable says whether the restart policy of a failed pod's role retries
// it. Always and OnFailure retry every failure; ExitCode a retryable exit
// code, or a pod that failed without one (evicted, its node lost), which is
// the infrastructure's failure rather than the program's; Never nothing.
func retryable(job *v1alpha1.TrainingJob, p jobPod) bool {
	switch job.Spec.ReplicaSpecs[p.role].RestartPolicy {
	case v1alpha1.RestartAlways, v1alpha1.RestartOnFailure:
		return true
	case v1alpha1.RestartExitCode:
		code, ok := exitCode(p.Pod)
		return !ok || job.Spec.FailurePolicy.IsRetryableExitCode(code)
	}
	return false
}

// exitCode is the exit code of the first container that failed.
func exitCode(p *corev1.Pod) (int32, bool) {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return t.ExitCode, true
		}
	}
	return 0, false
}

// decision is what the controller does next with a running job.
type decision struct {
	// outcome is Succeeded or Failed to finish the job, Running otherwise.
	outcome framework.Outcome
	// restart are the pods to delete for a retry; they are recreated once
	// gone. Empty when nothing restarts. incident says why, for the
	// condition and the event.
	restart  []jobPod
	incident string
	// reason is the restart's condition and event reason when it is not
	// ReasonRestarting (ReasonNodeUnreachable).
	reason string
	// gangRestart marks a restart of the whole gang: the restart count
	// rises and every pod of the incarnation goes, lost members included.
	gangRestart bool
	// preemption is set when the gang restarts because the scheduler
	// preempted it: counted in status.preemptions, not against
	// backoffLimit, and without the restart backoff.
	preemption *preemptionCause
	// disruption is set when the gang (or, under a pod scope, a pod)
	// restarts because the cluster took a member (disruptionCause):
	// counted in status.infrastructureRestarts, not against backoffLimit.
	disruption *disruptionCause
	// removeStale are pods of an earlier incarnation still to delete, and
	// waitStale says the new gang waits for them to be gone: a gang
	// restart is under way.
	removeStale []jobPod
	waitStale   bool
	// requeueAfter is when the deadline falls, 0 without one.
	requeueAfter time.Duration
}

// decide applies the adapter's success rule, the deadline and the failure
// policy to what observe saw.
//
// Under a gang scope a member that fails (as its restart policy retries) or
// is lost once the gang started is one incident: the restart count rises
// once and the whole incarnation goes. The count is recorded before any
// pod is deleted, and pods carry the count they were created under, so a
// restart that was cut short (a crash, a failed delete, a duplicate event)
// resumes by deleting the earlier incarnation's pods without counting again.
func decide(job *v1alpha1.TrainingJob, a framework.Adapter, obs observation, now time.Time) decision {
	if len(obs.stale) > 0 || obs.staleTerminating > 0 {
		return decision{outcome: framework.Outcome{Result: framework.Running}, removeStale: obs.stale, waitStale: true}
	}
	out := a.Outcome(job, obs.phases)
	if out.Result != framework.Running {
		return decision{outcome: out}
	}
	var d decision
	d.outcome = out
	if ads := job.Spec.RunPolicy.ActiveDeadlineSeconds; ads != nil && job.Status.StartTime != nil {
		left := job.Status.StartTime.Add(time.Duration(*ads) * time.Second).Sub(now)
		if left <= 0 {
			return decision{outcome: framework.Outcome{Result: framework.Failed, Reason: ReasonDeadlineExceeded,
				Message: fmt.Sprintf("the job ran longer than activeDeadlineSeconds (%ds)", *ads)}}
		}
		d.requeueAfter = left
	}
	gang := framework.EffectiveRestartScope(a, job) == v1alpha1.RestartScopeGang
	lost := gang && len(obs.lost) > 0 && (job.Spec.ElasticPolicy == nil || int32(len(obs.live)) < minMember(job))
	switch {
	case gang && (lost || len(obs.retry) > 0) && obs.preemption() != nil:
		// The scheduler evicts a gang whole: whatever else its members
		// did meanwhile, the gang restarts because it was preempted.
		d.preemption = obs.preemption()
		d.incident = d.preemption.message()
		d.reason = v1alpha1.ReasonPreemptedByScheduler
	case (lost || len(obs.retry) > 0) && obs.disruption() != nil:
		// The cluster took a member (its node went dark or was deleted, the
		// kubelet evicted it, a drain): whatever the others did next (ranks
		// fail when a peer goes), the restart is no failure of the job's.
		d.disruption = obs.disruption()
		d.incident = d.disruption.message()
		d.reason = d.disruption.reason
	case len(obs.retry) > 0:
		d.incident = fmt.Sprintf("%s %d failed", obs.retry[0].role, obs.retry[0].index)
	case lost:
		d.incident = fmt.Sprintf("pod %s was lost (deleted, evicted, preempted or its node gone)", obs.lost[0])
		if len(obs.lost) > 1 {
			d.incident = fmt.Sprintf("pods %s were lost (deleted, evicted, preempted or their node gone)", strings.Join(obs.lost, ", "))
		}
	default:
		return d
	}
	if bl := job.Spec.RunPolicy.BackoffLimit; bl != nil && d.preemption == nil && d.disruption == nil && failures(&job.Status) >= *bl {
		msg := fmt.Sprintf("%s after %d restarts (backoffLimit %d)", d.incident, failures(&job.Status), *bl)
		if other := job.Status.Preemptions + job.Status.InfrastructureRestarts; other > 0 {
			msg = fmt.Sprintf("%s after %d restarts for failures and %d for preemptions and the infrastructure, which do not count (backoffLimit %d)",
				d.incident, failures(&job.Status), other, *bl)
		}
		return decision{outcome: framework.Outcome{Result: framework.Failed, Reason: ReasonBackoffLimitExceeded, Message: msg}}
	}
	if gang {
		d.gangRestart = true
		for _, p := range obs.live {
			d.restart = append(d.restart, p)
		}
		slices.SortFunc(d.restart, func(a, b jobPod) int { return strings.Compare(a.Name, b.Name) })
	} else {
		d.restart = obs.retry
	}
	return d
}

// failures is how many of the job's restarts were for failures, what
// backoffLimit bounds: preemptions and the infrastructure's restarts are
// restarts too, but no failure.
func failures(st *v1alpha1.TrainingJobStatus) int32 {
	return max(st.RestartCount-st.Preemptions-st.InfrastructureRestarts, 0)
}

// recordRestart appends the restart just counted to status.restarts,
// keeping the latest MaxRestartRecords.
func recordRestart(st *v1alpha1.TrainingJobStatus, kind v1alpha1.RestartKind, reason string, now metav1.Time) {
	st.Restarts = append(st.Restarts, v1alpha1.RestartRecord{RestartCount: st.RestartCount, Kind: kind, Reason: reason, Time: now})
	if n := len(st.Restarts); n > v1alpha1.MaxRestartRecords {
		st.Restarts = slices.Clone(st.Restarts[n-v1alpha1.MaxRestartRecords:])
	}
}

// isFinished says whether the job has succeeded or failed for good.
func isFinished(st *v1alpha1.TrainingJobStatus) bool {
	return meta.IsStatusConditionTrue(st.Conditions, string(v1alpha1.JobSucceeded)) ||
		meta.IsStatusConditionTrue(st.Conditions, string(v1alpha1.JobFailed))
}

// setCondition sets a condition and keeps State the latest one that holds.
func setCondition(st *v1alpha1.TrainingJobStatus, generation int64, t v1alpha1.JobState, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: string(t), Status: status, Reason: reason, Message: msg, ObservedGeneration: generation,
	})
	st.State = stateOf(st)
}

// truncateMessage keeps a condition message within the API's 32 KiB limit.
func truncateMessage(s string) string {
	const limit = 32 * 1024
	if len(s) <= limit {
		return s
	}
	return s[:limit]
}

// stateOf is the one-word summary: the strongest condition that holds.
func stateOf(st *v1alpha1.TrainingJobStatus) v1alpha1.JobState {
	for _, s := range []v1alpha1.JobState{v1alpha1.JobSucceeded, v1alpha1.JobFailed, v1alpha1.JobSuspended,
		v1alpha1.JobRestarting, v1alpha1.JobRunning, v1alpha1.JobCreated} {
		if meta.IsStatusConditionTrue(st.Conditions, string(s)) {
			return s
		}
	}
	return ""
}

// finish marks the job succeeded or failed.
func finish(st *v1alpha1.TrainingJobStatus, generation int64, out framework.Outcome, now metav1.Time) {
	t := v1alpha1.JobSucceeded
	if out.Result == framework.Failed {
		t = v1alpha1.JobFailed
	}
	for _, c := range []v1alpha1.JobState{v1alpha1.JobRunning, v1alpha1.JobRestarting, v1alpha1.ConditionPreempted} {
		if meta.FindStatusCondition(st.Conditions, string(c)) != nil {
			setCondition(st, generation, c, metav1.ConditionFalse, ReasonFinished, "the job finished")
		}
	}
	setCondition(st, generation, t, metav1.ConditionTrue, out.Reason, out.Message)
	if st.CompletionTime == nil {
		st.CompletionTime = &now
	}
}
