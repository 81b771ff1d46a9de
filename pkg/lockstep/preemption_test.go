package lockstep

import "testing"

// TestPreemptionMessageRoundTrip: what the scheduler writes on a victim the
// controller reads back; other messages (upstream's) read as unknown.
func TestPreemptionMessageRoundTrip(t *testing.T) {
	for _, p := range []Preemption{
		{Preemptor: "team-a/release", Priority: 1000, Domain: "spine=s1/leaf=l2"},
		{Preemptor: "ns/pod-1", Priority: -5},
		{Preemptor: "a/b", Priority: 2000000000, Domain: "clique=7"},
		{Preemptor: "team-a/release", Priority: 1000, Domain: "spine=s1/leaf=l2", Plan: "team-a/release#8", DomainID: "spine=s1/leaf=l2"},
		{Preemptor: "ns/g", Priority: 7, Domain: "spine=s1", Plan: "ns/g#4", DomainID: "spine=s1/leaf=(n3)"},
		{Preemptor: "ns/g", Priority: 7, Plan: "ns/g#4"},
	} {
		got, ok := ParsePreemption(p.Message())
		if !ok || got != p {
			t.Errorf("ParsePreemption(%q) = %+v, %v; want %+v", p.Message(), got, ok, p)
		}
	}
	for _, msg := range []string{
		"",
		"default-scheduler: preempting to accommodate a higher priority pod",
		PreemptionMessagePrefix + " for gang x",
		PreemptionMessagePrefix + "; preemptor=a/b priority=high domain=",
		PreemptionMessagePrefix + "; preemptor= priority=1 domain=",
	} {
		if got, ok := ParsePreemption(msg); ok {
			t.Errorf("ParsePreemption(%q) = %+v, want not ok", msg, got)
		}
	}
}
