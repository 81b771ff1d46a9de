package gangmanager

import (
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// VictimOf reads pod as a victim of gang preemption that is still going: a
// pod not finished, being deleted or given notice
// (lockstep.AnnotationPreemptionNotice), whose DisruptionTarget condition
// (reason PreemptionByScheduler) carries the message the scheduler writes
// (lockstep.Preemption) with the preemptor's plan. A pod marked but
// neither deleted nor given notice is not one: its eviction failed, or
// the scheduler that marked it died before the delete, and it is running
// work like any other.
func VictimOf(pod *v1.Pod) (lockstep.Preemption, bool) {
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return lockstep.Preemption{}, false
	}
	if _, noticed := lockstep.NoticeOn(pod.Annotations); pod.DeletionTimestamp == nil && !noticed {
		return lockstep.Preemption{}, false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type != v1.DisruptionTarget || c.Status != v1.ConditionTrue || c.Reason != v1.PodReasonPreemptionByScheduler {
			continue
		}
		p, ok := lockstep.ParsePreemption(c.Message)
		return p, ok && p.Plan != "" && p.DomainID != ""
	}
	return lockstep.Preemption{}, false
}

// WaitsOutNotice reports whether pod is a victim of a scheduler's preemption
// waiting out its notice: given lockstep.AnnotationPreemptionNotice by a
// scheduler (not a suspension's) and the DisruptionTarget condition of a
// preemption, not deleted yet, and when its notice says it goes at the
// latest, its grace period included. It is going as surely as a pod being
// deleted: no preemption may count its room again.
func WaitsOutNotice(pod *v1.Pod) (time.Time, bool) {
	n, ok := lockstep.NoticeOn(pod.Annotations)
	if !ok || n.By == lockstep.NoticeBySuspend || pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return time.Time{}, false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler {
			return n.Deadline.Add(Grace(pod)), true
		}
	}
	return time.Time{}, false
}

// pendingVictim is a victim seen terminating that the books do not hold.
type pendingVictim struct {
	preemption lockstep.Preemption
	pod        string
	// deleted is when the pod's grace period ends (its deletion
	// timestamp), zero while it is not being deleted.
	deleted time.Time
	// notice is the notice it waits out, while it is not being deleted.
	notice *lockstep.Notice
	uid    types.UID
}

// Noticed is a victim's pod that waits out its notice, given by a
// scheduler before this one: the evictor takes it over (Evictor.Resume).
type Noticed struct {
	UID        types.UID
	Pod        string
	Notice     lockstep.Notice
	Preemption lockstep.Preemption
}

// Adopted is what AdoptPending rebuilt: the gangs whose holds it made or
// grew, and the victims' pods still waiting out a notice.
type Adopted struct {
	Gangs   []string
	Noticed []Noticed
}

// ObservePod notes a pod that is a terminating victim of a preemption
// these books did not make (VictimOf), for AdoptPending. Cheap: it runs in
// the pod informer's handler, where no domain tree is at hand.
func (m *Manager) ObservePod(pod *v1.Pod) {
	p, ok := VictimOf(pod)
	if !ok {
		return
	}
	if m.Books.EvictedFor(pod.UID) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[pod.UID] {
		// Its hold ended here: it must not start another.
		return
	}
	if m.pending == nil {
		m.pending = map[types.UID]pendingVictim{}
	}
	v := pendingVictim{preemption: p, pod: pod.Namespace + "/" + pod.Name, uid: pod.UID}
	if pod.DeletionTimestamp != nil {
		v.deleted = pod.DeletionTimestamp.Time
	} else if n, ok := lockstep.NoticeOn(pod.Annotations); ok {
		// Deleted at the notice's deadline at the latest, then given its
		// grace period.
		v.notice = &n
		v.deleted = n.Deadline.Add(Grace(pod))
	}
	m.pending[pod.UID] = v
	m.victims[pod.UID] = v.pod
}

// HasPending reports whether victims wait for AdoptPending.
func (m *Manager) HasPending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending) > 0
}

// AdoptPending makes the holds of the victims noted by ObservePod, with
// domain resolving a domain ID on the current topology. It runs before
// gangs are planned or preempt, so a scheduler that did not make a
// preemption sees its domain held and its victims as going, and evicts
// nothing more for it. A victim whose domain is not on the topology (its
// nodes are gone) is dropped: there is nothing left to hold. It returns the
// gangs whose holds it made or grew.
//
// A rebuilt hold waits for its victims no longer than a fresh one: until
// the last of their grace periods ends (their deletion timestamps; now for
// one not being deleted yet; a noticed one's notice deadline and grace
// period) and stall after (Books.BoundHold).
func (m *Manager) AdoptPending(domain func(id string) (*topology.Domain, bool), now time.Time, stall time.Duration) Adopted {
	m.mu.Lock()
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()
	var out Adopted
	until := map[string]time.Time{}
	for _, uid := range slices.Sorted(maps.Keys(pending)) {
		v := pending[uid]
		d, ok := domain(v.preemption.DomainID)
		if !ok {
			continue
		}
		if m.Books.AdoptVictim(v.preemption.Plan, d, v.preemption.Priority, uid, now) && !slices.Contains(out.Gangs, v.preemption.Plan) {
			out.Gangs = append(out.Gangs, v.preemption.Plan)
		}
		if v.notice != nil && m.Books.EvictedFor(uid) {
			out.Noticed = append(out.Noticed, Noticed{UID: uid, Pod: v.pod, Notice: *v.notice, Preemption: v.preemption})
		}
		end := now
		if v.deleted.After(end) {
			end = v.deleted
		}
		if end.After(until[v.preemption.Plan]) {
			until[v.preemption.Plan] = end
		}
	}
	for _, gang := range out.Gangs {
		m.Books.BoundHold(gang, until[gang].Add(stall))
	}
	return out
}

// Grace is the termination grace period the kubelet gives pod when it is
// deleted with the default options.
func Grace(pod *v1.Pod) time.Duration {
	grace := int64(v1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(grace) * time.Second
}

// VictimGone records that pod is gone: it leaves the hold it is a victim
// of, and is no longer waited for. It returns the gang when pod was its
// hold's last pending victim.
func (m *Manager) VictimGone(pod types.UID, now time.Time) (string, bool) {
	m.mu.Lock()
	delete(m.pending, pod)
	m.mu.Unlock()
	was := m.Books.EvictedFor(pod)
	gang, last := m.Books.VictimGone(pod, now)
	if was {
		m.mu.Lock()
		// Gone, or no longer waited for (its eviction failed): never a
		// victim again while this pod object is seen (PodGone).
		m.seen[pod] = true
		m.mu.Unlock()
	}
	return gang, last
}

// State is what the manager keeps of preemptions, in a form to compare:
// the holds with their victims, and the preemptors' nominations.
type State struct {
	Holds []placement.HoldState
	// Nominations are the nominated node of each preemptor member
	// ("namespace/name") whose gang holds a domain.
	Nominations map[string]string
}

// State returns the manager's holds and nominations.
func (m *Manager) State() State {
	s := State{Holds: m.Books.Holds(), Nominations: map[string]string{}}
	held := map[string]bool{}
	for _, h := range s.Holds {
		held[h.Gang] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.nominated {
		if held[n.gang] {
			s.Nominations[n.pod] = n.node
		}
	}
	return s
}
