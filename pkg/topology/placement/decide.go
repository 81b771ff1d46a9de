package placement

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Policy is the scheduler's configuration of Decide.
type Policy struct {
	// Topology names the levels a constraint may use (TopologyConfig.HasLevel).
	Topology lockstep.TopologyConfig
	// DefaultMode is the mode of a constraint that names a level only.
	DefaultMode lockstep.ConstraintMode
	// TightestFirst places a gang that names no level as one Preferred
	// from the host (Gang.Implicit); without it such a gang goes at once
	// to the tightest domain free now.
	TightestFirst bool
	// PreferredWait is what each level of widening costs; 0 never widens.
	PreferredWait time.Duration
}

// Wait is what the scheduler remembers of a gang between attempts.
type Wait struct {
	// Waited is how long ago the gang was first attempted.
	Waited time.Duration
	// Held says the domain drained for the gang keeps emptying
	// (Books.DrainHeld), so it is held at its base level for HoldLeft more.
	Held     bool
	HoldLeft time.Duration
	// Stalled says its last drain stalled (Books.Stalled): it drains
	// nothing for now (Gang.NoDrain).
	Stalled bool
}

// Request is one size class of a gang as its PodGroup and pods ask for it:
// the input of Decide.
type Request struct {
	// Pending are the class's members still to place, at least 1; Needed,
	// at most Pending, are those the gang's minMember still needs. When not
	// all Pending fit, Decide plans Needed, since the rest may follow later.
	Pending, Needed   int
	GPUsPerMember     int
	MilliCPUPerMember int64
	MemoryPerMember   int64
	// Channels: each member claims a ComputeDomain channel (Gang.Channels).
	Channels bool
	// Near are the nodes of members placed before (Gang.Near).
	Near []string
	// Level and Mode are the constraint the gang names: "" for none, and a
	// Mode of "" takes Policy.DefaultMode.
	Level string
	Mode  lockstep.ConstraintMode
	Wait  Wait
}

// Verdict is the kind of a Decision.
type Verdict int

const (
	// Planned: Decision.Plan places the gang.
	Planned Verdict = iota
	// Waiting: it does not fit now (an *Unschedulable); it may drain a
	// domain and be retried when it may widen.
	Waiting
	// Refused: the request names a level or mode the scheduler does not
	// know; the user must change it.
	Refused
	// Failed: the planner refused its input (a plain error from Place).
	Failed
)

// Decision is what Decide decided for a gang.
type Decision struct {
	Verdict Verdict
	// Gang is the gang as last given to Place, its constraint defaulted
	// and widened by the wait; zero when Refused.
	Gang Gang
	// Fallback says not every pending member fitted, so only Needed were
	// planned (or tried).
	Fallback bool
	// Plan, when Planned, with its slots in topology order (RankOrder), so
	// consecutive ranks share the tightest domain.
	Plan *Plan
	// Reason says why the gang is not planned: the Unschedulable reason,
	// the refusal or the planner's error.
	Reason string
	// Drain and DrainFree are the domain the waiting gang should drain,
	// and its free GPUs (Unschedulable.Drain); nil for none.
	Drain     *topology.Domain
	DrainFree int
	// Retry says the waiting gang fits once it widens or its drain's hold
	// ends, which no cluster event announces: try it again after
	// Policy.NextWiden, read once the drain is recorded.
	Retry bool
}

// Decide is the whole rule for one attempt at a gang: the constraint
// checked and defaulted, widened by the wait (Policy.Widen), the pending
// members planned on s, or those minMember needs when not all fit, and
// for a gang that does not fit the domain to drain and whether to retry it
// on the clock. It changes nothing: the caller records the plan or the
// drain in its Books.
func Decide(s *Snapshot, r Request, p Policy) Decision {
	gang, err := p.Gang(r)
	if err != nil {
		return Decision{Verdict: Refused, Reason: err.Error()}
	}
	d := Decision{}
	plan, err := Place(s, gang, Options{})
	var unschedulable *Unschedulable
	if needed := max(r.Needed, 1); needed < gang.Members && errors.As(err, &unschedulable) {
		d.Fallback = true
		gang.Members = needed
		plan, err = Place(s, gang, Options{})
	}
	d.Gang = gang
	switch {
	case errors.As(err, &unschedulable):
		d.Verdict, d.Reason = Waiting, unschedulable.Reason
		d.Drain, d.DrainFree = unschedulable.Drain, unschedulable.DrainFree
		d.Retry = gang.Level != "" && (unschedulable.WiderLevel != "" || unschedulable.Drain != nil)
	case err != nil:
		d.Verdict, d.Reason = Failed, err.Error()
	default:
		RankOrder(s.Tree, plan, s.NodeTopology)
		d.Verdict, d.Plan = Planned, plan
	}
	return d
}

// Gang turns r into the planner's Gang for its pending members, its
// constraint checked, defaulted and widened by r.Wait, or says why the
// constraint is refused. Required gangs widen too, from the narrowest level
// that could hold them up to their level (Gang.Widen).
func (p Policy) Gang(r Request) (Gang, error) {
	g := Gang{
		Members:           max(r.Pending, 1),
		GPUsPerMember:     r.GPUsPerMember,
		MilliCPUPerMember: r.MilliCPUPerMember,
		MemoryPerMember:   r.MemoryPerMember,
		Channels:          r.Channels,
		Near:              r.Near,
		Level:             r.Level,
		Mode:              r.Mode,
	}
	if g.Level == "" {
		if p.TightestFirst {
			// The tightest domain first, as a gang Preferred from the
			// host: levels too small for it are skipped at once, and
			// each wider one costs a PreferredWait.
			g.Level, g.Mode, g.Implicit = lockstep.LevelHost, lockstep.Preferred, true
			g.Widen, g.NoDrain = p.Widen(r.Wait), r.Wait.Stalled
		}
		return g, nil
	}
	if !p.Topology.HasLevel(g.Level) {
		return g, fmt.Errorf("annotation %s=%q names no configured level; use one of %s",
			lockstep.AnnotationTopologyLevel, g.Level, strings.Join(p.Topology.LevelNames(), ", "))
	}
	switch {
	case g.Mode == "":
		g.Mode = p.DefaultMode
	case !g.Mode.Valid():
		return g, fmt.Errorf("annotation %s=%q must be %s", lockstep.AnnotationTopologyMode, g.Mode, lockstep.ConstraintModeList())
	}
	g.Widen, g.NoDrain = p.Widen(r.Wait), r.Wait.Stalled
	return g, nil
}

// Widen is how many levels a gang may widen now: one per PreferredWait
// since it was first attempted, and none while the domain drained for it
// keeps emptying. Waiting for a domain others keep filling is a gamble
// worth one wait; waiting for one that empties is worth more.
func (p Policy) Widen(w Wait) int {
	if w.Held {
		return 0
	}
	if p.PreferredWait > 0 && w.Waited > 0 {
		return int(w.Waited / p.PreferredWait)
	}
	return 0
}

// NextWiden is how long until a gang may widen one more level: the end of
// its hold while its drained domain is emptying, else the end of its
// current PreferredWait; 0 when it never widens.
func (p Policy) NextWiden(w Wait) time.Duration {
	if w.Held {
		return w.HoldLeft
	}
	if p.PreferredWait <= 0 {
		return 0
	}
	return p.PreferredWait - max(w.Waited, 0)%p.PreferredWait
}
