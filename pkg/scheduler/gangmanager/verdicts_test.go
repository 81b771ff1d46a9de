package gangmanager

import (
	"testing"
	"time"

	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestVerdictMadeWhileInputsChanged: a verdict whose inputs changed while
// it was being made is not kept.
func TestVerdictMadeWhileInputsChanged(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Verdicts)
	}{
		{"room freed", func(c *Verdicts) { c.MayFit() }},
		{"gang changed", func(c *Verdicts) { c.GangChanged("ns/g") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewVerdicts()
			pod := utiltesting.MakePod("m-0", "ns").GPUs(8).PodGroup("g").Obj()
			ticket := c.Begin("ns/g")
			tc.change(c)
			req := 8 // the node view's request stands in for any comparable value
			c.Remember("ns/g#8", &Verdict{Ticket: ticket, Pod: pod, Request: req})
			if _, ok := c.Lookup("ns/g#8", pod, req, WaitState{}, time.Time{}); ok {
				t.Error("verdict made across a change was kept")
			}
		})
	}
}
