package gangmanager

import (
	"time"

	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// DrainStallWaits, in PreferredWaits, bounds a drain. A gang that does not
// fit drains a domain of its base level, and while the domain keeps
// freeing GPUs (within DrainStallWaits of the last GPU freed) it is held
// there and does not widen (placement.Policy.Widen): a domain that is
// emptying is worth a longer wait than one a smaller pod may fill at any
// time, and training jobs end minutes apart, so a domain that freed no GPU
// for one PreferredWait is not yet stalled. When the domain stalls, the
// drain is released, the gang widens as its time allows, and it drains
// nothing for another stall (placement.Books.Stalled): the domain waits on
// pods that are not ending, and holding it would keep other gangs off room
// they could use now. No other bound is needed, as nothing but pods that
// outrank the gang enters the domain (placement.Books.Drain).
const DrainStallWaits = 8

// DrainStall is how long a drained domain may free no GPU before its drain
// is released (Config.DrainStall).
func (m *Manager) DrainStall() time.Duration { return m.drainStall }

// Wait is what the manager remembers of gang for widening, at now: when it
// was first attempted (this attempt, if it is the first), and whether the
// domain drained for it keeps it at its base level (placement.Books.DrainHeld,
// the rule the sweep expires drains by) or stalled (placement.Books.Stalled).
func (m *Manager) Wait(gang string, now time.Time) placement.Wait {
	w := placement.Wait{
		Waited:  now.Sub(m.FirstSeen(gang, now)),
		Stalled: m.Books.Stalled(gang, now, m.drainStall),
	}
	if hold, ok := m.Books.DrainHeld(gang, now, m.drainStall); ok {
		w.Held, w.HoldLeft = true, hold.Sub(now)
	}
	return w
}

// ReleaseDrain releases gang's drain, if any, and reports whether there
// was one: the gang was planned, or is gone. Releasing it frees capacity no
// cluster event reports, so the gangs turned away are retried.
func (m *Manager) ReleaseDrain(gang string) bool {
	if !m.Books.Undrain(gang) {
		return false
	}
	m.RetryTurnedAway(gang)
	return true
}

// DrainsOf returns the plan keys of every size class of gang
// ("namespace/podgroup") that drains a domain.
func (m *Manager) DrainsOf(gang string) []string {
	var out []string
	for _, key := range m.Books.Draining() {
		if GangOf(key) == gang {
			out = append(out, key)
		}
	}
	return out
}

// EndDrainIfDue releases gang's drain once its domain stalled
// (placement.Books.ExpireDrain), before the gang is planned with the
// widening that allows, and reports whether it did.
func (m *Manager) EndDrainIfDue(gang string, now time.Time) bool {
	if !m.Books.ExpireDrain(gang, now, m.drainStall) {
		return false
	}
	m.RetryTurnedAway(gang)
	return true
}

// ExpireDrains releases the drains that stalled by now, whose gangs were
// not tried again, retries the gangs turned away for each, and returns
// their keys.
func (m *Manager) ExpireDrains(now time.Time) []string {
	keys := m.Books.ExpireDrains(now, m.drainStall)
	for _, key := range keys {
		m.RetryTurnedAway(key)
	}
	return keys
}
