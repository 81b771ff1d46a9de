package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSweepSuggested(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	point := func(wait, hours, eff float64) SweepPoint {
		return SweepPoint{WaitSeconds: wait, Jobs: 150, FinishedJobs: 150, GPUHours: hours, EfficiencyMean: f(eff)}
	}
	// Three make bench runs on the 2-core machine, each with 30 s
	// deployed. Under the earlier rule (the longest wait within 1% of the
	// lowest GPU-hours and 0.005 of the best efficiency) the first
	// suggested 30 s, the second 5 min and the third none, although no
	// wait differs from another by more than the same configuration
	// moved between runs, or between the third run's two replays of 30 s.
	first := []SweepPoint{
		point(0, 223.1, 0.993), point(15, 224.4, 0.993), point(30, 224.8, 0.993),
		point(60, 226.2, 0.986), point(120, 225.8, 0.993), point(300, 226.7, 0.993),
	}
	second := []SweepPoint{
		point(0, 226.2, 0.993), point(15, 229.3, 0.986), point(30, 228.2, 0.993),
		point(60, 226.2, 0.986), point(120, 224.7, 0.993), point(300, 224.6, 0.993),
	}
	third := []SweepPoint{
		point(0, 230.9, 0.986), point(15, 231.1, 0.986), point(30, 231.9, 0.986), point(30, 230.1, 0.993),
		point(60, 227.8, 0.986), point(120, 233.5, 0.993), point(300, 234.8, 0.986),
	}
	partial := point(300, 200, 0.999)
	partial.PartialGangs = 1
	unfinished := point(300, 200, 0.999)
	unfinished.FinishedJobs = 149
	for _, tc := range []struct {
		name     string
		deployed float64
		points   []SweepPoint
		want     Suggestion
		wantOK   bool
	}{
		{name: "first run keeps the deployed wait", deployed: 30, points: first, want: Suggestion{30, SuggestDeployedGood}, wantOK: true},
		{name: "second run keeps the deployed wait", deployed: 30, points: second, want: Suggestion{30, SuggestDeployedGood}, wantOK: true},
		{name: "third run keeps the deployed wait", deployed: 30, points: third, want: Suggestion{30, SuggestDeployedGood}, wantOK: true},
		{name: "order of points does not matter", deployed: 30, points: []SweepPoint{third[6], third[3], third[0], third[2], third[4]}, want: Suggestion{30, SuggestDeployedGood}, wantOK: true},
		{name: "a deployed wait beaten beyond the noise gives way to the nearest good wait", deployed: 0,
			points: []SweepPoint{point(0, 110, 0.99), point(30, 100.5, 0.99), point(60, 100, 0.99), point(300, 100, 0.99)}, want: Suggestion{30, SuggestNearestGood}, wantOK: true},
		{name: "the shorter of two good waits equally near", deployed: 60,
			points: []SweepPoint{point(30, 100, 0.99), point(60, 120, 0.99), point(90, 100, 0.99)}, want: Suggestion{30, SuggestNearestGood}, wantOK: true},
		{name: "a deployed wait that loses efficiency past the tolerance gives way", deployed: 0,
			points: []SweepPoint{point(0, 100, 0.95), point(60, 100.9, 0.99)}, want: Suggestion{60, SuggestNearestGood}, wantOK: true},
		{name: "a deployed wait that left a gang partial gives way", deployed: 300,
			points: []SweepPoint{point(0, 100, 0.99), point(30, 100.5, 0.99), partial}, want: Suggestion{30, SuggestNearestGood}, wantOK: true},
		{name: "a cheaper point that left a gang partial is no reference", deployed: 30,
			points: []SweepPoint{point(0, 100, 0.99), point(30, 101.5, 0.99), partial}, want: Suggestion{30, SuggestDeployedGood}, wantOK: true},
		{name: "an unfinished replay is no reference", deployed: 30, points: []SweepPoint{point(0, 100, 0.99), unfinished}, want: Suggestion{0, SuggestNearestGood}, wantOK: true},
		{name: "one unfinished replay of a repeated wait rules it out", deployed: 300,
			points: []SweepPoint{point(0, 100, 0.99), point(300, 100, 0.99), unfinished}, want: Suggestion{0, SuggestNearestGood}, wantOK: true},
		// 30 s averages 102.5 GPU-hours, past the 2% floor but inside its
		// own replays' 3% spread.
		{name: "a repeat's GPU-hours spread widens the tolerance", deployed: 30,
			points: []SweepPoint{point(0, 100, 0.99), point(30, 101, 0.99), point(30, 104, 0.99)}, want: Suggestion{30, SuggestDeployedGood}, wantOK: true},
		// 30 s averages 0.985, past the 0.01 floor below 60 s's 1.0 but
		// inside its own replays' 0.02 spread.
		{name: "a repeat's efficiency spread widens the tolerance", deployed: 30,
			points: []SweepPoint{point(30, 100, 0.975), point(30, 100, 0.995), point(60, 100, 1.0)}, want: Suggestion{30, SuggestDeployedGood}, wantOK: true},
		{name: "no wait good: the whole deployed wait stands", deployed: 30,
			points: []SweepPoint{point(0, 100, 0.90), point(30, 105, 0.95), point(60, 110, 0.99)}, want: Suggestion{30, SuggestDeployedNoneGood}, wantOK: true},
		{name: "no wait good and the deployed one partial: the cheapest whole wait", deployed: 300,
			points: []SweepPoint{point(0, 100, 0.90), point(60, 110, 0.99), partial}, want: Suggestion{0, SuggestCheapest}, wantOK: true},
		{name: "no point whole", deployed: 30, points: []SweepPoint{partial, unfinished}, wantOK: false},
		{name: "empty", wantOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Sweep{DeployedWaitSeconds: tc.deployed, Points: tc.points}.Suggested()
			if ok != tc.wantOK {
				t.Fatalf("Suggested() ok = %v, want %v (got %+v)", ok, tc.wantOK, got)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Suggested() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSweepTolerance(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	point := func(wait, hours, eff float64) SweepPoint {
		return SweepPoint{WaitSeconds: wait, GPUHours: hours, EfficiencyMean: f(eff)}
	}
	for _, tc := range []struct {
		name                 string
		points               []SweepPoint
		wantSpread, wantTol  float64
		wantEffSpread, wantE float64
	}{
		{name: "no repeat: the floors", points: []SweepPoint{point(0, 100, 0.9), point(30, 150, 1)},
			wantTol: suggestGPUHoursFloor, wantE: suggestEfficiencyFloor},
		{name: "a repeat inside the floors", points: []SweepPoint{point(30, 100, 0.99), point(0, 140, 0.5), point(30, 101, 0.995)},
			wantSpread: 0.01, wantTol: suggestGPUHoursFloor, wantEffSpread: 0.005, wantE: suggestEfficiencyFloor},
		{name: "a repeat past the floors", points: []SweepPoint{point(30, 104, 0.97), point(30, 100, 0.99)},
			wantSpread: 0.04, wantTol: 0.04, wantEffSpread: 0.02, wantE: 0.02},
		{name: "an empty replay measures nothing", points: []SweepPoint{{WaitSeconds: 30}, point(30, 100, 0.99)},
			wantTol: suggestGPUHoursFloor, wantE: suggestEfficiencyFloor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Sweep{Points: tc.points}
			got := []float64{s.RepeatSpread(), s.GPUHoursTolerance(), s.RepeatEfficiencySpread(), s.EfficiencyTolerance()}
			want := []float64{tc.wantSpread, tc.wantTol, tc.wantEffSpread, tc.wantE}
			if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("spread, tolerance, efficiency spread, efficiency tolerance (-want +got):\n%s", diff)
			}
		})
	}
}
