package controller

import (
	"fmt"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/util/syncmap"
)

// restartDelay is how long the pods of the consecutive-th restart in a row
// wait before they are created again: initialSeconds, doubled for each
// restart in a row after the first, capped at maxSeconds. The policy is
// defaulted.
func restartDelay(p *v1alpha1.RestartBackoff, consecutive int32) time.Duration {
	d := time.Duration(*p.InitialSeconds) * time.Second
	limit := time.Duration(*p.MaxSeconds) * time.Second
	for i := int32(1); i < consecutive && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// nextRestartBackoff is the backoff state after a restart recorded at now.
// runningSince is when the gang last became Running, nil when it is not
// Running: a gang that ran for resetAfterSeconds before this failure
// starts the delay over.
func nextRestartBackoff(p *v1alpha1.RestartBackoff, prev *v1alpha1.RestartBackoffStatus, runningSince *time.Time, now time.Time) *v1alpha1.RestartBackoffStatus {
	consecutive := int32(1)
	healthy := runningSince != nil && now.Sub(*runningSince) >= time.Duration(*p.ResetAfterSeconds)*time.Second
	if prev != nil && !healthy {
		consecutive = prev.ConsecutiveRestarts + 1
	}
	last := metav1.NewTime(now)
	next := metav1.NewTime(now.Add(restartDelay(p, consecutive)))
	return &v1alpha1.RestartBackoffStatus{ConsecutiveRestarts: consecutive, LastRestartTime: &last, NextAttemptTime: &next}
}

// backoffWait is how long the pods of the latest restart must still wait
// to be created; 0 when they may be created now.
func backoffWait(st *v1alpha1.TrainingJobStatus, now time.Time) time.Duration {
	if st.RestartBackoff == nil || st.RestartBackoff.NextAttemptTime == nil {
		return 0
	}
	return max(st.RestartBackoff.NextAttemptTime.Sub(now), 0)
}

// describeBackoff says in the Restarting condition when the pods come back.
func describeBackoff(b *v1alpha1.RestartBackoffStatus) string {
	wait := b.NextAttemptTime.Sub(b.LastRestartTime.Time)
	return fmt.Sprintf("the pods are created again at %s, after a %s backoff (restart %d in a row)",
		b.NextAttemptTime.UTC().Format(time.RFC3339), wait, b.ConsecutiveRestarts)
}

// failedCreates remembers, per job, the pods whose creation failed in the
// job's current incarnation, so that a member that never existed is not
// taken for a lost one (observation.excuse). It lives in memory only: after
// a controller restart such a member counts as lost once more, and the
// next failed create is remembered again. That errs towards a restart,
// which the backoff and backoffLimit bound, never towards a gang running
// with a member replaced behind its back.
type failedCreates struct {
	jobs syncmap.Map[types.UID, *jobFailedCreates]
}

type jobFailedCreates struct {
	restartCount, suspensions int32
	names                     map[string]bool
}

// current says whether e is the record of job's current incarnation.
func (e *jobFailedCreates) current(job *v1alpha1.TrainingJob) bool {
	return e != nil && e.restartCount == job.Status.RestartCount && e.suspensions == job.Status.Suspensions
}

// record notes the outcome of creating pod name for job.
func (f *failedCreates) record(job *v1alpha1.TrainingJob, name string, failed bool) {
	f.jobs.Update(job.UID, func(e *jobFailedCreates, ok bool) (*jobFailedCreates, bool) {
		if !e.current(job) {
			if !failed {
				return e, ok
			}
			e = &jobFailedCreates{restartCount: job.Status.RestartCount, suspensions: job.Status.Suspensions, names: map[string]bool{}}
		}
		if failed {
			e.names[name] = true
		} else {
			delete(e.names, name)
		}
		return e, true
	})
}

// neverCreated says whether pod name of job failed to be created in the
// job's current incarnation.
func (f *failedCreates) neverCreated(job *v1alpha1.TrainingJob) func(name string) bool {
	var names map[string]bool
	f.jobs.Update(job.UID, func(e *jobFailedCreates, ok bool) (*jobFailedCreates, bool) {
		if e.current(job) && len(e.names) > 0 {
			names = maps.Clone(e.names)
		}
		return e, ok
	})
	if names == nil {
		return func(string) bool { return false }
	}
	return func(name string) bool { return names[name] }
}

// forget drops what was remembered of a job.
func (f *failedCreates) forget(uid types.UID) {
	f.jobs.Delete(uid)
}
