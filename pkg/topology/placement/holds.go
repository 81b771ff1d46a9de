package placement

import (
	"maps"
	"slices"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// drain is one gang's drained domain.
type drain struct {
	domain *topology.Domain
	// priority is the gang's: the drain keeps off pods of this priority
	// or lower (KeptOff).
	priority int32
	// free is the most GPUs the domain had free at any Drain call, and
	// progressed when that most was first reached.
	free       int
	progressed time.Time
	// victims are the pods evicted to make room for the gang (Hold) that
	// are not gone yet: while any remains the drain holds whatever its
	// progress, since pods that checkpoint on SIGTERM may take their whole
	// grace period to go.
	victims map[string]bool
	// preempted marks a drain made by Hold: the gang paid for the domain
	// with evictions, so it keeps it (Drain does not move it elsewhere)
	// until it is planned, leaves, or the domain stalls, and does not
	// preempt again meanwhile (Preempted).
	preempted bool
	// since is when Hold made the hold; until, when set (BoundHold), is
	// when it stops waiting for victims that are not gone.
	since, until time.Time
}

// Drain holds domain d for gang key until the gang is planned (Add), its
// drain is dropped (Undrain) or stalls (ExpireDrain): while it
// holds, planners of other gangs see no free GPU on its nodes (mark them
// Node.Drained) and pods outside gangs stay off them, so capacity freed
// there accumulates for the gang instead of going to whichever pod comes
// next. The place of Place's Unschedulable.Drain, with free its
// DrainFree. A gang drains one domain: a new domain replaces its old one,
// while the same domain (by ID) again records progress when its free GPUs
// grew past their most so far (DrainHeld). It reports false, changing
// nothing, when a node of d is drained for another gang.
//
// A drain needs no other bound: nothing enters the domain but pods that
// outrank the gang (KeptOff), so its free GPUs can grow past their most only
// as often as it has GPUs, and a domain that stops freeing them stalls.
func (b *Books) Drain(key string, d *topology.Domain, priority int32, free int, now time.Time) bool {
	if old, ok := b.drains[key]; ok && old.preempted {
		// The domain the gang preempted for (Hold) stays its drain.
		return old.domain.ID == d.ID
	}
	for _, node := range d.Nodes {
		if other, ok := b.drainedFor[node]; ok && other != key {
			return false
		}
	}
	dr := drain{domain: d, priority: priority, free: free, progressed: now}
	if old, ok := b.drains[key]; ok && old.domain.ID == d.ID {
		if free <= old.free {
			dr.free, dr.progressed = old.free, old.progressed
		}
	}
	b.Undrain(key)
	b.drains[key] = dr
	for _, node := range d.Nodes {
		b.drainedFor[node] = key
		b.touch(node)
	}
	return true
}

// Undrain drops gang key's drain, and forgets that its last one stalled: it
// was planned, or is gone. It reports whether the gang had a drain.
func (b *Books) Undrain(key string) bool {
	delete(b.stalled, key)
	dr, ok := b.drains[key]
	if !ok {
		return false
	}
	for _, node := range dr.domain.Nodes {
		delete(b.drainedFor, node)
		b.touch(node)
	}
	// Its victims stay in victimOf until they are gone (VictimGone): they
	// are leaving whatever becomes of the hold, and must never be counted
	// as victims again (EvictedFor).
	delete(b.drains, key)
	return true
}

// Hold drains d for gang key, of the given priority, whose preemption
// evicts pods (their UIDs): the domain freed for a preemptor. As a drain it
// keeps off pods of the gang's priority or lower (KeptOff), and it holds
// while any of the pods is not gone (VictimGone), then as a drain that
// progressed when the last one went; Drain never moves it (Preempted). Drains of lower-priority gangs on d's
// nodes are released, and their gangs returned, sorted: the preemptor
// outranks them. It reports false, changing nothing, when a node of d is
// drained for another gang of equal or higher priority.
func (b *Books) Hold(key string, d *topology.Domain, priority int32, pods []string, now time.Time) ([]string, bool) {
	var lower []string
	for _, node := range d.Nodes {
		other, ok := b.drainedFor[node]
		if !ok || other == key || slices.Contains(lower, other) {
			continue
		}
		if b.drains[other].priority >= priority {
			return nil, false
		}
		lower = append(lower, other)
	}
	for _, other := range lower {
		b.Undrain(other)
	}
	b.Undrain(key)
	dr := drain{domain: d, priority: priority, progressed: now, victims: make(map[string]bool, len(pods)), preempted: true, since: now}
	for _, pod := range pods {
		if prev, ok := b.victimOf[pod]; ok && prev != key {
			// Evicted for another gang already: it leaves once, for both.
			continue
		}
		dr.victims[pod] = true
		b.victimOf[pod] = key
	}
	b.drains[key] = dr
	for _, node := range d.Nodes {
		b.drainedFor[node] = key
		b.touch(node)
	}
	slices.Sort(lower)
	return lower, true
}

// VictimGone records that pod, evicted for a gang's hold, is gone. It
// returns the gang when pod was its last pending victim: the hold now
// counts as a drain that progressed at now.
func (b *Books) VictimGone(pod string, now time.Time) (string, bool) {
	key, ok := b.victimOf[pod]
	if !ok {
		return "", false
	}
	delete(b.victimOf, pod)
	dr, held := b.drains[key]
	if !held || !dr.victims[pod] {
		// Its hold ended or was taken over meanwhile.
		return "", false
	}
	delete(dr.victims, pod)
	if len(dr.victims) > 0 {
		return "", false
	}
	dr.progressed = now
	b.drains[key] = dr
	return key, true
}

// EvictedFor returns the gang pod was evicted for while it is not gone
// (Hold), so no other preemption counts it as a victim again.
func (b *Books) EvictedFor(pod string) (string, bool) {
	key, ok := b.victimOf[pod]
	return key, ok
}

// PreemptedFor returns the gang whose preemption holds node (Hold,
// Preempted), and its priority; "" when none does.
func (b *Books) PreemptedFor(node string) (string, int32) {
	if key := b.drainedFor[node]; b.drains[key].preempted {
		return key, b.drains[key].priority
	}
	return "", 0
}

// Victims counts gang key's pending victims (Hold).
func (b *Books) Victims(key string) int { return len(b.drains[key].victims) }

// Preempted reports whether gang key holds a domain it preempted for
// (Hold), its victims gone or not: it waits for that domain and should not
// preempt again until the hold ends (Undrain, ExpireDrain). The victims'
// going is seen by the books and the scheduler's own cache in no fixed
// order, so a gang retried when its last victim went may still find no
// room: that is no reason to evict more.
func (b *Books) Preempted(key string) bool { return b.drains[key].preempted }

// Drained returns the domain drained for gang key.
func (b *Books) Drained(key string) (*topology.Domain, bool) {
	dr, ok := b.drains[key]
	return dr.domain, ok
}

// Draining returns the gangs with a drain, sorted.
func (b *Books) Draining() []string { return slices.Sorted(maps.Keys(b.drains)) }

// DrainedNodes counts the nodes drained for gangs.
func (b *Books) DrainedNodes() int { return len(b.drainedFor) }

// DrainedFor returns the gang node is drained for, "" when none.
func (b *Books) DrainedFor(node string) string { return b.drainedFor[node] }

// KeptOff returns the gang whose drain keeps a pod of gang key ("" for a
// pod outside gangs) with the given priority off node's free GPUs, "" when
// none does. A drain keeps off other gangs and pods of its gang's priority
// or lower; a pod of higher priority may take the drained GPUs, as it could
// preempt the waiting gang's pods once they run: a drain orders the gang
// before its peers, never before those that outrank it. The exception is
// a gang that holds a domain it preempted for (Hold): it is kept off other
// gangs' holds whatever their priority, since room is coming for it where
// it evicted, and taking theirs would only make them evict again.
func (b *Books) KeptOff(node, key string, priority int32) string {
	by, ok := b.drainedFor[node]
	if !ok || by == key {
		return ""
	}
	if priority > b.drains[by].priority && !(b.drains[by].preempted && b.drains[key].preempted) {
		return ""
	}
	return by
}

// ExpireDrains ends every drain that stalled at now (ExpireDrain) and
// returns their gangs, sorted.
func (b *Books) ExpireDrains(now time.Time, stall time.Duration) []string {
	var out []string
	for key := range b.drains {
		if b.ExpireDrain(key, now, stall) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// ExpireDrain ends gang key's drain when it stalled at now (DrainHeld) and
// reports whether it did. The gang is marked Stalled for the next stall: a
// domain that freed no GPU for stall waits on pods that are not ending, and
// is left to other pods for as long before the gang may drain again.
func (b *Books) ExpireDrain(key string, now time.Time, stall time.Duration) bool {
	hold, held := b.DrainHeld(key, now, stall)
	if held {
		return false
	}
	if _, ok := b.drains[key]; !ok {
		return false
	}
	b.Undrain(key)
	b.stalled[key] = hold
	return true
}

// Stalled reports whether gang key's last drain ended on a stall
// (ExpireDrain) less than stall before now, and the gang was neither
// planned nor dropped since: it should not drain yet (Gang.NoDrain).
func (b *Books) Stalled(key string, now time.Time, stall time.Duration) bool {
	at, ok := b.stalled[key]
	return ok && now.Before(at.Add(stall))
}

// DrainHeld reports whether gang key's drain still holds at now, and until
// when: until it freed no GPU for stall (its domain waits on pods that
// are not ending, and holding it would only keep other gangs off room they
// could use now). False without a drain.
func (b *Books) DrainHeld(key string, now time.Time, stall time.Duration) (time.Time, bool) {
	dr, ok := b.drains[key]
	if !ok {
		return time.Time{}, false
	}
	if len(dr.victims) > 0 {
		if !dr.until.IsZero() && !now.Before(dr.until) {
			return dr.until, false
		}
		return now.Add(stall), true
	}
	hold := dr.progressed.Add(stall)
	return hold, now.Before(hold)
}

// BoundHold sets when gang key's hold stops waiting for its victims that
// are not gone: a victim stuck terminating (its node dark, a finalizer no
// one removes) would otherwise keep the domain closed to equal- and
// lower-priority work for ever. From until on the hold ends as a drain that
// stalled does (ExpireDrain): the domain reopens, and the victims still
// going stay evicted for the gang, never candidates again (EvictedFor). It
// reports false when key holds nothing it preempted for.
func (b *Books) BoundHold(key string, until time.Time) bool {
	dr, ok := b.drains[key]
	if !ok || !dr.preempted {
		return false
	}
	dr.until = until
	b.drains[key] = dr
	return true
}

// VictimsOf returns the victims gang key's hold waits for, sorted.
func (b *Books) VictimsOf(key string) []string {
	return slices.Sorted(maps.Keys(b.drains[key].victims))
}

// HeldSince returns when gang key's hold was made (Hold, AdoptVictim).
func (b *Books) HeldSince(key string) (time.Time, bool) {
	dr, ok := b.drains[key]
	if !ok || !dr.preempted {
		return time.Time{}, false
	}
	return dr.since, true
}

// Overdue returns the victims gang key's hold still waits for at now past
// its bound (BoundHold), sorted; none when it waits for none, or within
// its bound.
func (b *Books) Overdue(key string, now time.Time) []string {
	dr, ok := b.drains[key]
	if !ok || len(dr.victims) == 0 || dr.until.IsZero() || now.Before(dr.until) {
		return nil
	}
	return slices.Sorted(maps.Keys(dr.victims))
}
