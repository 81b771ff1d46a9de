package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSweepSuggested(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	point := func(wait, hours, eff float64) SweepPoint {
		return SweepPoint{WaitSeconds: wait, Jobs: 150, FinishedJobs: 150, GPUHours: hours, EfficiencyMean: f(eff)}
	}
	// The committed run of docs/benchmarks/results: 30 s is the longest
	// wait within 1% of 0 s's GPU-hours; 1 m lost efficiency, 2 and 5 m
	// cost more than 1%.
	committed := []SweepPoint{
		point(0, 223.1, 0.993), point(15, 224.4, 0.993), point(30, 224.8, 0.993),
		point(60, 226.2, 0.986), point(120, 225.8, 0.993), point(300, 226.7, 0.993),
	}
	partial := point(300, 200, 0.999)
	partial.PartialGangs = 1
	unfinished := point(300, 200, 0.999)
	unfinished.FinishedJobs = 149
	for _, tc := range []struct {
		name   string
		points []SweepPoint
		want   float64
		wantOK bool
	}{
		{name: "committed run", points: committed, want: 30, wantOK: true},
		{name: "order of points does not matter", points: []SweepPoint{committed[5], committed[2], committed[0], committed[3]}, want: 30, wantOK: true},
		{name: "all equal picks the longest", points: []SweepPoint{point(0, 100, 0.99), point(120, 100, 0.99)}, want: 120, wantOK: true},
		{name: "a cheaper point that left a gang partial is no reference", points: []SweepPoint{point(0, 100, 0.99), point(30, 100.5, 0.99), partial}, want: 30, wantOK: true},
		{name: "an unfinished replay is no reference", points: []SweepPoint{point(0, 100, 0.99), unfinished}, want: 0, wantOK: true},
		{name: "a longer wait that only buys efficiency past the tolerance wins", points: []SweepPoint{point(0, 100, 0.95), point(60, 100.9, 0.99)}, want: 60, wantOK: true},
		{name: "no point whole", points: []SweepPoint{partial, unfinished}, wantOK: false},
		{name: "empty", wantOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Sweep{Points: tc.points}.Suggested()
			if ok != tc.wantOK {
				t.Fatalf("Suggested() ok = %v, want %v (got %+v)", ok, tc.wantOK, got)
			}
			if diff := cmp.Diff(tc.want, got.WaitSeconds); ok && diff != "" {
				t.Errorf("Suggested() wait (-want +got):\n%s", diff)
			}
		})
	}
}
