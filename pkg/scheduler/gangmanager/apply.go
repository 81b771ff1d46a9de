package gangmanager

import (
	"time"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Decision is a gang's plan attempt as the plugin decided it
// (placement.Decide), in the terms the manager carries it out in: a plan
// to book, or a gang that waits, maybe draining a domain and retried at
// its next widening.
type Decision struct {
	// Plan is the gang's new plan; nil when the gang waits.
	Plan *placement.Plan
	// Ranks are the ranks of the members Plan was made for, ascending
	// (rank → slot, RankSlots); nil when they could not be read, and then
	// read at the first ranked member (Books.SetRankSlots).
	Ranks []int
	// Drain is the domain a waiting gang drains, with DrainFree its free
	// GPUs now; nil drains nothing.
	Drain     *topology.Domain
	DrainFree int
	// Priority is the gang's: a drain keeps off pods of no higher one.
	Priority int32
	// RetryIn, when set, is when a waiting gang is retried: the time to
	// its next widening, read once the drain is recorded, since a drain
	// that gained room holds the gang a stall from now.
	RetryIn func() time.Duration
}

// Applied is what Apply did that the plugin reports.
type Applied struct {
	// Plan is the gang's plan in the books; nil when it waits.
	Plan *Plan
	// Draining says the gang drains Decision.Drain now; a domain drained
	// for another gang refuses it.
	Draining bool
	// Released says a domain the gang drained before was released, and
	// the gangs turned away retried: that capacity is in no cluster event.
	Released bool
}

// Apply carries out decision d for gang at now, as raft's Advance takes a
// Ready: a planned gang's drain ends and its plan is booked with its rank
// slots; a waiting gang drains d.Drain (replacing another domain it
// drained) and is retried at d.RetryIn. Either way a released drain
// retries the gangs turned away.
func (m *Manager) Apply(gang string, d Decision, now time.Time) Applied {
	var a Applied
	if d.Plan != nil {
		if m.Books.Undrain(gang) {
			a.Released = true
			m.RetryTurnedAway(gang)
		}
		a.Plan = m.Books.Add(gang, d.Plan, now)
		if d.Ranks != nil {
			m.Books.SetRankSlots(a.Plan, d.Ranks)
		}
		return a
	}
	if d.Drain != nil {
		a.Draining, a.Released = m.Books.Drain(gang, d.Drain, d.Priority, d.DrainFree, now)
		if a.Released {
			m.RetryTurnedAway(gang)
		}
	}
	if d.RetryIn != nil {
		m.RetryAfter(gang, d.RetryIn())
	}
	return a
}
