package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"

	"github.com/lockstep-dev/lockstep/pkg/util/syncmap"
)

// expectationsTTL bounds how long a job waits for its cache to show writes
// the controller made. A write the cache never shows (its watch event lost
// to a relist that raced it) must not stall the job for good.
const expectationsTTL = time.Minute

// expectations remembers, per job UID, the pod creations and deletions the
// controller has issued and its cache has not shown yet.
//
// Deterministic pod names already make duplicate pods impossible: a second
// create of <job>-worker-3 fails with AlreadyExists. What names cannot
// prevent is acting twice on one observation: a cache that still shows a
// failed pod after the controller deleted it would count a second restart
// against backoffLimit and delete the new gang. So restarts, deletions and
// creations run only when the job's expectations are satisfied.
//
// Satisfaction is checked against the pods the reconciler lists, not fed
// from event handlers: the list is the cache, so what it shows is exactly
// what the next decision would be made on.
type expectations struct {
	clock clock.PassiveClock
	byJob syncmap.Map[types.UID, *jobExpectations]
}

type jobExpectations struct {
	creates sets.Set[string]
	deletes sets.Set[types.UID]
	since   time.Time
}

func newExpectations(c clock.PassiveClock) *expectations {
	return &expectations{clock: c}
}

// entry returns x, a new record when x is nil, marked as written now.
func (e *expectations) entry(x *jobExpectations) *jobExpectations {
	if x == nil {
		x = &jobExpectations{creates: sets.New[string](), deletes: sets.New[types.UID]()}
	}
	x.since = e.clock.Now()
	return x
}

// ExpectCreations records pods about to be created, by name.
func (e *expectations) ExpectCreations(job types.UID, names ...string) {
	e.byJob.Update(job, func(x *jobExpectations, _ bool) (*jobExpectations, bool) {
		x = e.entry(x)
		x.creates.Insert(names...)
		return x, true
	})
}

// CreationFailed forgets a creation that did not happen.
func (e *expectations) CreationFailed(job types.UID, name string) {
	e.byJob.Update(job, func(x *jobExpectations, ok bool) (*jobExpectations, bool) {
		if ok {
			x.creates.Delete(name)
		}
		return x, ok
	})
}

// ExpectDeletions records pods about to be deleted, by UID.
func (e *expectations) ExpectDeletions(job types.UID, uids ...types.UID) {
	e.byJob.Update(job, func(x *jobExpectations, _ bool) (*jobExpectations, bool) {
		x = e.entry(x)
		x.deletes.Insert(uids...)
		return x, true
	})
}

// DeletionFailed forgets a deletion that did not happen.
func (e *expectations) DeletionFailed(job types.UID, uid types.UID) {
	e.byJob.Update(job, func(x *jobExpectations, ok bool) (*jobExpectations, bool) {
		if ok {
			x.deletes.Delete(uid)
		}
		return x, ok
	})
}

// Satisfied reports whether pods, the job's pods as the cache shows them,
// reflect every write recorded for the job, dropping those they do. A
// created pod is seen once its name is listed; a deleted one once its UID
// is gone or marked for deletion. Expectations older than expectationsTTL
// are dropped as satisfied.
func (e *expectations) Satisfied(job types.UID, pods []*corev1.Pod) bool {
	satisfied := true
	e.byJob.Update(job, func(x *jobExpectations, ok bool) (*jobExpectations, bool) {
		if !ok {
			return x, false
		}
		live := make(map[types.UID]bool, len(pods))
		for _, p := range pods {
			x.creates.Delete(p.Name)
			live[p.UID] = p.DeletionTimestamp == nil
		}
		for uid := range x.deletes {
			if !live[uid] {
				x.deletes.Delete(uid)
			}
		}
		if x.creates.Len() == 0 && x.deletes.Len() == 0 || e.clock.Since(x.since) > expectationsTTL {
			return x, false
		}
		satisfied = false
		return x, true
	})
	return satisfied
}

// Forget drops a job's expectations, when the job is gone.
func (e *expectations) Forget(job types.UID) {
	e.byJob.Delete(job)
}
