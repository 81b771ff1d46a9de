package placement

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestWidening: a gang widens one level per PreferredWait since it was
// first attempted, none while its drain holds it, and is retried when the
// next level opens or the hold ends, which no cluster event announces.
func TestWidening(t *testing.T) {
	p := Policy{PreferredWait: 30 * time.Second}
	type got struct {
		Widen int
		Next  time.Duration
	}
	tests := []struct {
		name   string
		policy Policy
		wait   Wait
		want   got
	}{
		{"first attempt", p, Wait{}, got{0, 30 * time.Second}},
		{"within the first wait", p, Wait{Waited: 10 * time.Second}, got{0, 20 * time.Second}},
		{"one wait", p, Wait{Waited: 30 * time.Second}, got{1, 30 * time.Second}},
		{"halfway through the second", p, Wait{Waited: 45 * time.Second}, got{1, 15 * time.Second}},
		{"three and a half waits", p, Wait{Waited: 105 * time.Second}, got{3, 15 * time.Second}},
		{"held by an emptying drain", p, Wait{Waited: 105 * time.Second, Held: true, HoldLeft: time.Second}, got{0, time.Second}},
		{"no wait configured", Policy{}, Wait{Waited: time.Hour}, got{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, got{tc.policy.Widen(tc.wait), tc.policy.NextWiden(tc.wait)}); diff != "" {
				t.Errorf("widen and next widening (-want,+got):\n%s", diff)
			}
		})
	}
}
