// Package gangmanager is the TopologyPlacement plugin's gang manager, what
// core.Manager is to Coscheduling: the one owner of what the plugin keeps
// about gangs between scheduling cycles. That is the books of held capacity
// (plans, rank slots, drains and holds, Books), the gangs turned away for
// want of room and their retries, the gangs' first attempts, where ranked
// members were steered, and the nominations made for preemptors. The
// plugin's extension points decide (placement.Decide, placement.Preempt)
// and hand the outcome here; the manager never reads the framework's
// snapshot or the node view.
//
// Its memory is a cache of the cluster, never the source of truth (as
// kube-scheduler's cache and nominator are): what must survive a restart
// or a leader change is rebuilt from API objects (ObservePod, AdoptPending): the pods evicted
// for a preemptor carry a DisruptionTarget condition whose message names
// the preemptor, its plan and the domain held for it, and the preemptor's
// members carry status.nominatedNodeName.
package gangmanager

import (
	"maps"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/lockstep-dev/lockstep/pkg/util/keyset"
)

// RetryDelay is how long after room appears that no cluster event reports
// (a plan dropped, a drain ended) the gangs that may use it are put back in
// the active queue: long enough for the scheduler's cache to catch up with
// the books.
const RetryDelay = time.Second

// Config is what a Manager is given of its surroundings.
type Config struct {
	// Clock tells the time and runs the retries' timers.
	Clock clock.WithDelayedExecution
	// Activate puts the unbound members of gang (a plan key) back in the
	// scheduler's active queue.
	Activate func(gang string)
	// Reject rejects the members of gang waiting at Permit with msg.
	Reject func(gang, msg string)
	// Pods lists the pods of PodGroup name in namespace ns from the
	// scheduler's pod cache.
	Pods func(ns, name string) ([]*v1.Pod, error)
	// Size is how many GPUs pod asks for, and whether through
	// ResourceClaims: the node view's count (nodeview.View.Request).
	Size func(pod *v1.Pod) (gpus int, claimed bool)
	// DrainStall is how long a drained domain may free no GPU before its
	// drain is released (DrainStallWaits).
	DrainStall time.Duration
}

// Manager is the gang manager; see the package doc.
type Manager struct {
	// Books are the books of held capacity.
	Books *Books
	// Verdicts are the gangs known not to fit until something changes.
	Verdicts *Verdicts

	clock      clock.WithDelayedExecution
	activate   func(gang string)
	reject     func(gang, msg string)
	pods       func(ns, name string) ([]*v1.Pod, error)
	size       func(pod *v1.Pod) (int, bool)
	drainStall time.Duration

	// turnedAway are the gangs PreFilter last rejected for want of room:
	// capacity a dropped plan releases is in no cluster event, so they are
	// retried when a plan is dropped.
	turnedAway *keyset.Set
	// wakeups are the gangs with a retry pending (RetryAfter).
	wakeups *keyset.Set

	mu sync.Mutex
	// firstSeen is when each gang was first attempted, for Preferred
	// constraints that widen with time and for the gang wait metric.
	firstSeen map[string]time.Time
	// steered is the node PreFilter last sent each ranked member to.
	steered map[types.UID]string
	// nominated are the nodes preemptors' members were nominated to, by
	// pod, while their gang holds a domain.
	nominated map[types.UID]nomination
	// seen are the victims these books held at some point: a victim whose
	// hold ended here is never adopted again (ObservePod).
	seen map[types.UID]bool
	// pending are the victims seen going that the books do not hold yet
	// (ObservePod, AdoptPending).
	pending map[types.UID]pendingVictim
	// victims names the victims of the holds (NameVictims, ObservePod), for
	// saying which ones a preemptor waits for (WaitingFor).
	victims map[types.UID]string
}

// nomination is a preemptor member's nominated node.
type nomination struct {
	gang, pod, node string
}

// New returns an empty manager.
func New(c Config) *Manager {
	return &Manager{
		Books: NewBooks(), Verdicts: NewVerdicts(), clock: c.Clock, activate: c.Activate, reject: c.Reject,
		pods: c.Pods, size: c.Size, drainStall: c.DrainStall,
		turnedAway: keyset.New(), wakeups: keyset.New(),
		firstSeen: map[string]time.Time{}, steered: map[types.UID]string{},
		nominated: map[types.UID]nomination{}, seen: map[types.UID]bool{}, victims: map[types.UID]string{},
	}
}

// TurnedAway remembers that gang was turned away for want of room.
func (m *Manager) TurnedAway(gang string) { m.turnedAway.Add(gang) }

// Placed forgets that gang was turned away: it has a plan.
func (m *Manager) Placed(gang string) { m.turnedAway.Remove(gang) }

// RetryTurnedAway puts the unbound members of the gangs turned away, but
// except, back in the active queue shortly: room appeared that no cluster
// event reports (a plan dropped from the books, a node whose NodeTopology
// is fresh again).
func (m *Manager) RetryTurnedAway(except string) {
	// The same room can make a gang fit whose verdict is remembered.
	m.Verdicts.MayFit()
	keys := m.turnedAway.Take()
	if len(keys) == 0 {
		return
	}
	m.after(RetryDelay, func() {
		for _, k := range keys {
			if k != except {
				m.activate(k)
			}
		}
	})
}

// RetryAfter puts gang's unbound members back in the active queue after
// delay, once: a later call for a gang with a retry pending does nothing.
func (m *Manager) RetryAfter(gang string, delay time.Duration) {
	if delay <= 0 || !m.wakeups.AddNew(gang) {
		return
	}
	m.after(delay, func() {
		m.wakeups.Remove(gang)
		m.activate(gang)
	})
}

// Activate puts gang's unbound members back in the active queue now.
func (m *Manager) Activate(gang string) { m.activate(gang) }

// Invalidate drops gang's plan, rejects its members waiting at Permit with
// msg and has the unbound members retried shortly; it reports whether
// there was a plan. The retry matters because the rejection is often
// Coscheduling's (a Permit timeout), and no cluster event of those the
// plugins register need follow it: without it a gang that failed once
// would wait for the queue's 5-minute flush. Notably after a scheduler
// restart Coscheduling counts members bound by the previous instance from
// informer events that can arrive after the first cycle.
func (m *Manager) Invalidate(gang, msg string) bool {
	if !m.Books.Drop(gang) {
		return false
	}
	m.reject(gang, msg)
	m.after(RetryDelay, func() { m.activate(gang) })
	// The plan's capacity is free again in the books: gangs turned away
	// for want of it may fit now.
	m.RetryTurnedAway(gang)
	return true
}

// after runs f once delay passed on the clock: on the real clock on a
// goroutine of its own, on a fake one (tests) within its Step, so a test
// sees the retry done when Step returns. A fake clock runs f holding its
// lock, so f must never read the clock.
func (m *Manager) after(delay time.Duration, f func()) {
	m.clock.AfterFunc(delay, f)
}

// FirstSeen returns when gang was first attempted, now if this is its
// first attempt.
func (m *Manager) FirstSeen(gang string, now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if first, ok := m.firstSeen[gang]; ok {
		return first
	}
	m.firstSeen[gang] = now
	return now
}

// Attempted returns the gangs with a first attempt recorded, sorted.
func (m *Manager) Attempted() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.firstSeen))
}

// ForgetFirstSeen forgets gang's first attempt: it was placed or is gone.
func (m *Manager) ForgetFirstSeen(gang string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.firstSeen, gang)
}

// Steer records that pod is sent to node and reports whether it was not
// sent there last time: a second time means the node did not take it.
func (m *Manager) Steer(pod types.UID, node string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.steered[pod] == node {
		return false
	}
	m.steered[pod] = node
	return true
}

// ForgetSteer drops a pod's steering once it reserved a slot or is gone.
func (m *Manager) ForgetSteer(pod types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.steered, pod)
}

// Nominate records that pod ("namespace/name") of gang, whose preemption
// holds a domain, was nominated to node.
func (m *Manager) Nominate(gang string, uid types.UID, pod, node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if node == "" {
		delete(m.nominated, uid)
		return
	}
	m.nominated[uid] = nomination{gang: gang, pod: pod, node: node}
}

// NominatedNode returns the node pod was nominated to for its gang's hold,
// "" when none.
func (m *Manager) NominatedNode(pod types.UID) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nominated[pod].node
}

// PodGone forgets what is kept of a pod that is gone.
func (m *Manager) PodGone(pod types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.steered, pod)
	delete(m.nominated, pod)
	delete(m.seen, pod)
	delete(m.pending, pod)
	delete(m.victims, pod)
}

// NameVictims remembers the names of pods evicted for a hold, so that the
// gang's answers can say which ones it waits for (WaitingFor).
func (m *Manager) NameVictims(pods []*v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pod := range pods {
		m.victims[pod.UID] = pod.Namespace + "/" + pod.Name
	}
}

// WaitingFor returns the victims gang's hold waits for, by name where it
// is known, else by UID, sorted.
func (m *Manager) WaitingFor(gang string) []string {
	uids := m.Books.VictimsOf(gang)
	if len(uids) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, len(uids))
	for i, uid := range uids {
		if name, ok := m.victims[types.UID(uid)]; ok {
			out[i] = name
		} else {
			out[i] = uid
		}
	}
	slices.Sort(out)
	return out
}

// TurnedAwayGangs returns the gangs turned away and not retried since,
// sorted.
func (m *Manager) TurnedAwayGangs() []string {
	return m.turnedAway.Sorted()
}
