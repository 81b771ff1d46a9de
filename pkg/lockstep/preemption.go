package lockstep

import (
	"fmt"
	"strconv"
	"strings"
)

// PreemptionMessagePrefix opens the message of the DisruptionTarget
// condition (reason PreemptionByScheduler, as upstream's preemption writes)
// that the scheduler puts on every pod of a gang or single pod it evicts to
// make room for a higher-priority gang. The controller reads the condition
// back (ParsePreemption) to tell the TrainingJob who preempted it and at what
// priority, and to count the restart as a preemption, not a failure.
const PreemptionMessagePrefix = "lockstep-scheduler: preempted"

// Preemption is what the scheduler says to a victim: who took its place, at
// what priority, and in which domain.
type Preemption struct {
	// Preemptor is the gang's "namespace/podgroup" or a single pod's
	// "namespace/name".
	Preemptor string
	// Priority is the preemptor's pod priority.
	Priority int32
	// Domain is the topology domain the preemptor was given
	// (topology.Domain.DisplayID); may be empty.
	Domain string
	// Plan and DomainID say exactly what the scheduler holds for the
	// preemptor while its victims go: the plan key of the preemptor's
	// members ("namespace/podgroup#gpus") and the held domain's
	// topology.Domain.ID, which unlike DisplayID names synthetic domains.
	// A scheduler that did not make the preemption (a new leader, or the
	// same one restarted) rebuilds the hold from them. Empty for a single
	// pod's preemption and in messages of older schedulers.
	Plan, DomainID string
}

// Message writes p as the DisruptionTarget condition's message, the one
// format ParsePreemption reads: a sentence for people with the facts in
// key=value form at the end.
//
//	lockstep-scheduler: preempted for gang team-a/release (priority 1000) in spine=s1/leaf=l2; preemptor=team-a/release priority=1000 domain=spine=s1/leaf=l2 plan=team-a/release#8 domainID=spine=s1/leaf=l2
//
// Plan and DomainID come last, each only when set, so that the facts
// before them read as they always did.
func (p Preemption) Message() string {
	where := ""
	if p.Domain != "" {
		where = " in " + p.Domain
	}
	msg := fmt.Sprintf("%s for gang %s (priority %d)%s; preemptor=%s priority=%d domain=%s",
		PreemptionMessagePrefix, p.Preemptor, p.Priority, where, p.Preemptor, p.Priority, p.Domain)
	if p.Plan != "" {
		msg += " plan=" + p.Plan
	}
	if p.DomainID != "" {
		msg += " domainID=" + p.DomainID
	}
	return msg
}

// ParsePreemption reads a message written by Preemption.Message. It reports
// false for any other message, e.g. upstream DefaultPreemption's, whose
// preemptor is unknown.
func ParsePreemption(msg string) (Preemption, bool) {
	if !strings.HasPrefix(msg, PreemptionMessagePrefix) {
		return Preemption{}, false
	}
	_, facts, ok := strings.Cut(msg, "; preemptor=")
	if !ok {
		return Preemption{}, false
	}
	preemptor, rest, ok := strings.Cut(facts, " priority=")
	if !ok {
		return Preemption{}, false
	}
	prio, domain, ok := strings.Cut(rest, " domain=")
	if !ok {
		return Preemption{}, false
	}
	n, err := strconv.ParseInt(prio, 10, 32)
	if err != nil || preemptor == "" {
		return Preemption{}, false
	}
	// Neither a label value, a domain ID nor a plan key holds a space.
	domain, domainID, _ := strings.Cut(domain, " domainID=")
	domain, plan, _ := strings.Cut(domain, " plan=")
	return Preemption{Preemptor: preemptor, Priority: int32(n), Domain: domain, Plan: plan, DomainID: domainID}, true
}
