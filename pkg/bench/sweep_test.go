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
	// Two make bench runs on the 2-core machine, each with 30 s deployed.
	// Under the earlier rule (the longest wait within 1% of the lowest
	// GPU-hours) the first suggested 30 s and the second 5 min, although
	// no point of either differs from another by more than the 1.6%
	// the same configurations moved between the runs.
	first := []SweepPoint{
		point(0, 223.1, 0.993), point(15, 224.4, 0.993), point(30, 224.8, 0.993),
		point(60, 226.2, 0.986), point(120, 225.8, 0.993), point(300, 226.7, 0.993),
	}
	second := []SweepPoint{
		point(0, 226.2, 0.993), point(15, 229.3, 0.986), point(30, 228.2, 0.993),
		point(60, 226.2, 0.986), point(120, 224.7, 0.993), point(300, 224.6, 0.993),
	}
	partial := point(300, 200, 0.999)
	partial.PartialGangs = 1
	unfinished := point(300, 200, 0.999)
	unfinished.FinishedJobs = 149
	for _, tc := range []struct {
		name         string
		deployed     float64
		points       []SweepPoint
		want         float64
		wantDeployed bool
		wantOK       bool
	}{
		{name: "first run keeps the deployed wait", deployed: 30, points: first, want: 30, wantDeployed: true, wantOK: true},
		{name: "second run keeps the deployed wait", deployed: 30, points: second, want: 30, wantDeployed: true, wantOK: true},
		{name: "order of points does not matter", deployed: 30, points: []SweepPoint{second[5], second[2], second[0], second[3]}, want: 30, wantDeployed: true, wantOK: true},
		{name: "a deployed wait beaten beyond the noise gives way to the nearest good wait", deployed: 0,
			points: []SweepPoint{point(0, 110, 0.99), point(30, 100.5, 0.99), point(60, 100, 0.99), point(300, 100, 0.99)}, want: 30, wantOK: true},
		{name: "the shorter of two good waits equally near", deployed: 60,
			points: []SweepPoint{point(30, 100, 0.99), point(60, 120, 0.99), point(90, 100, 0.99)}, want: 30, wantOK: true},
		{name: "a deployed wait that loses efficiency past the tolerance gives way", deployed: 0,
			points: []SweepPoint{point(0, 100, 0.95), point(60, 100.9, 0.99)}, want: 60, wantOK: true},
		{name: "a deployed wait that left a gang partial gives way", deployed: 300,
			points: []SweepPoint{point(0, 100, 0.99), point(30, 100.5, 0.99), partial}, want: 30, wantOK: true},
		{name: "a cheaper point that left a gang partial is no reference", deployed: 30,
			points: []SweepPoint{point(0, 100, 0.99), point(30, 101.5, 0.99), partial}, want: 30, wantDeployed: true, wantOK: true},
		{name: "an unfinished replay is no reference", deployed: 30, points: []SweepPoint{point(0, 100, 0.99), unfinished}, want: 0, wantOK: true},
		{name: "one unfinished replay of a repeated wait rules it out", deployed: 300,
			points: []SweepPoint{point(0, 100, 0.99), point(300, 100, 0.99), unfinished}, want: 0, wantOK: true},
		// 30 s averages 102.5, past the 2% floor but inside its own
		// replays' 3% spread.
		{name: "a repeat's spread widens the tolerance", deployed: 30,
			points: []SweepPoint{point(0, 100, 0.99), point(30, 101, 0.99), point(30, 104, 0.99)}, want: 30, wantDeployed: true, wantOK: true},
		{name: "no point whole", deployed: 30, points: []SweepPoint{partial, unfinished}, wantOK: false},
		{name: "empty", wantOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, deployed, ok := Sweep{DeployedWaitSeconds: tc.deployed, Points: tc.points}.Suggested()
			if ok != tc.wantOK {
				t.Fatalf("Suggested() ok = %v, want %v (got %v)", ok, tc.wantOK, got)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Suggested() wait (-want +got):\n%s", diff)
			}
			if deployed != tc.wantDeployed {
				t.Errorf("Suggested() deployed = %v, want %v", deployed, tc.wantDeployed)
			}
		})
	}
}

func TestSweepTolerance(t *testing.T) {
	point := func(wait, hours float64) SweepPoint { return SweepPoint{WaitSeconds: wait, GPUHours: hours} }
	for _, tc := range []struct {
		name       string
		points     []SweepPoint
		wantSpread float64
		wantTol    float64
	}{
		{name: "no repeat: the floor", points: []SweepPoint{point(0, 100), point(30, 150)}, wantSpread: 0, wantTol: suggestGPUHoursFloor},
		{name: "a repeat inside the floor", points: []SweepPoint{point(30, 100), point(0, 140), point(30, 101)}, wantSpread: 0.01, wantTol: suggestGPUHoursFloor},
		{name: "a repeat past the floor", points: []SweepPoint{point(30, 104), point(30, 100)}, wantSpread: 0.04, wantTol: 0.04},
		{name: "an empty replay measures nothing", points: []SweepPoint{point(30, 0), point(30, 100)}, wantSpread: 0, wantTol: suggestGPUHoursFloor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Sweep{Points: tc.points}
			approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
			if diff := cmp.Diff(tc.wantSpread, s.RepeatSpread(), approx); diff != "" {
				t.Errorf("RepeatSpread (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTol, s.GPUHoursTolerance(), approx); diff != "" {
				t.Errorf("GPUHoursTolerance (-want +got):\n%s", diff)
			}
		})
	}
}
