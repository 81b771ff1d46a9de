package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstep-dev/lockstep/pkg/bench"
)

func TestPlanTime(t *testing.T) {
	const histogram = `# HELP lockstep_scheduler_plan_duration_seconds [ALPHA] Time PreFilter spent planning a gang.
# TYPE lockstep_scheduler_plan_duration_seconds histogram
lockstep_scheduler_plan_duration_seconds_bucket{outcome="planned",le="0.001"} 40
lockstep_scheduler_plan_duration_seconds_bucket{outcome="planned",le="0.002"} 90
lockstep_scheduler_plan_duration_seconds_bucket{outcome="planned",le="0.004"} 90
lockstep_scheduler_plan_duration_seconds_bucket{outcome="planned",le="+Inf"} 90
lockstep_scheduler_plan_duration_seconds_sum{outcome="planned"} 0.1
lockstep_scheduler_plan_duration_seconds_count{outcome="planned"} 90
lockstep_scheduler_plan_duration_seconds_bucket{outcome="unschedulable",le="0.001"} 0
lockstep_scheduler_plan_duration_seconds_bucket{outcome="unschedulable",le="0.002"} 8
lockstep_scheduler_plan_duration_seconds_bucket{outcome="unschedulable",le="0.004"} 10
lockstep_scheduler_plan_duration_seconds_bucket{outcome="unschedulable",le="+Inf"} 10
lockstep_scheduler_plan_duration_seconds_sum{outcome="unschedulable"} 0.02
lockstep_scheduler_plan_duration_seconds_count{outcome="unschedulable"} 10
`
	const other = `# TYPE scheduler_pending_pods gauge
scheduler_pending_pods{queue="active"} 0
`
	tests := []struct {
		name string
		page string
		want *bench.PlanTime
	}{
		// 100 plans over both outcomes: 98 within 2 ms, all within 4 ms,
		// so the 99th is half-way through (2 ms, 4 ms].
		{"outcomes added up", histogram + other, &bench.PlanTime{Plans: 100, MeanSeconds: 0.0012, P99Seconds: 0.003}},
		{"a scheduler without TopologyPlacement", other, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planTime([]byte(tc.page))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("planTime (-want,+got):\n%s", diff)
			}
		})
	}
	if _, err := planTime([]byte("not a metrics page {")); err == nil {
		t.Error("planTime of a page that is no exposition format succeeded")
	}
}
