package placement

import (
	"maps"
	"slices"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// AdoptVictim records pod as a victim of gang key's preemption of domain
// d, at the gang's priority, when these books did not make that preemption:
// they belong to a scheduler that restarted or took over from the leader
// that did, and rebuild its holds from the victims it finds terminating.
// Without the hold the new books would see the victims' room as taken,
// leave the terminating victims out as candidates, and evict a second set.
//
// The first victim adopted for key makes its hold as Hold does; each later
// one joins it. It reports false, changing nothing, when pod is a victim
// already, key holds another domain, or a node of d is drained for a gang
// of equal or higher priority (Hold).
func (b *Books) AdoptVictim(key string, d *topology.Domain, priority int32, pod string, now time.Time) bool {
	if _, ok := b.victimOf[pod]; ok {
		return false
	}
	if dr, ok := b.drains[key]; ok && dr.preempted {
		if dr.domain.ID != d.ID {
			return false
		}
		dr.victims[pod] = true
		b.victimOf[pod] = key
		return true
	}
	_, ok := b.Hold(key, d, priority, []string{pod}, now)
	return ok
}

// HoldState is what the books keep of one preemptor's hold.
type HoldState struct {
	Gang     string
	Domain   string
	Priority int32
	// Victims are the pods not gone yet, sorted.
	Victims []string
}

// Holds returns every hold (Hold) the books keep, by gang.
func (b *Books) Holds() []HoldState {
	var out []HoldState
	for _, key := range slices.Sorted(maps.Keys(b.drains)) {
		dr := b.drains[key]
		if !dr.preempted {
			continue
		}
		out = append(out, HoldState{Gang: key, Domain: dr.domain.ID, Priority: dr.priority, Victims: slices.Sorted(maps.Keys(dr.victims))})
	}
	return out
}
