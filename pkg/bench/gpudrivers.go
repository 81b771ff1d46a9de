package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// GPU drivers a replay's GPUs reach pods through, as the cluster model
// names them.
const (
	GPUDriverDevicePlugin = lockstep.GPUDriverDevicePlugin
	GPUDriverDRA          = lockstep.GPUDriverDRA
)

// DRAReplay is the trace replayed once more per scheduler on the same
// model with every pool's GPUs served by NVIDIA's DRA driver, each job's
// replicas claiming their GPUs through a ResourceClaimTemplate: the DRA
// side of the report's comparison with the device-plugin replays of
// Report.Results.
type DRAReplay struct {
	// Model is the model file the replays ran on: Report.Model with every
	// pool's gpuDriver set to DRA.
	Model string `json:"model"`
	// Results are one per scheduler, in run order.
	Results []Result `json:"results"`
}

// PlanTime is how long TopologyPlacement's PreFilter spent planning gangs
// in a replay, from the scheduler's lockstep_scheduler_plan_duration_seconds
// histogram over every outcome.
type PlanTime struct {
	// Plans are the planning attempts: gangs planned, found unschedulable
	// or failed.
	Plans       int     `json:"plans"`
	MeanSeconds float64 `json:"mean_s"`
	// P99Seconds is estimated from the histogram's buckets, as Prometheus'
	// histogram_quantile does: linear within the bucket it falls in.
	P99Seconds float64 `json:"p99_s"`
}

// Bucket is one cumulative histogram bucket: Count observations of at most
// UpperBound.
type Bucket struct {
	UpperBound float64
	Count      uint64
}

// NewPlanTime summarizes a plan-duration histogram: its observation count
// and sum and its cumulative buckets in any order (+Inf included or not).
// It returns nil when nothing was observed.
func NewPlanTime(count uint64, sum float64, buckets []Bucket) *PlanTime {
	if count == 0 {
		return nil
	}
	return &PlanTime{Plans: int(count), MeanSeconds: sum / float64(count), P99Seconds: bucketQuantile(0.99, count, buckets)}
}

// bucketQuantile estimates the q-quantile of count observations from their
// cumulative buckets. A quantile above the last finite bound is that bound:
// the histogram knows no more.
func bucketQuantile(q float64, count uint64, buckets []Bucket) float64 {
	sorted := slices.Clone(buckets)
	slices.SortFunc(sorted, func(a, b Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) })
	rank := q * float64(count)
	lower, below := 0.0, uint64(0)
	for _, b := range sorted {
		if math.IsInf(b.UpperBound, 1) {
			break
		}
		if float64(b.Count) >= rank {
			return lower + (b.UpperBound-lower)*(rank-float64(below))/float64(b.Count-below)
		}
		lower, below = b.UpperBound, b.Count
	}
	return lower
}

// driverRows are the rows of the GPU-driver comparison: the main table's
// for placement and throughput, then Lockstep's plan time.
func driverRows() []metricRow {
	keep := []string{
		"jobs finished",
		"placement efficiency, mean",
		"placement efficiency, p10",
		"multi-GPU jobs rated (unmodelled)",
		"multi-node jobs in one leaf",
		"gang wait, p50",
		"gang wait, p99",
		"pods bound per second",
		"GPU-hours (trace time)",
		partialRowName,
		"gangs deadlocked at the end",
	}
	var rows []metricRow
	for _, r := range metricRows() {
		if slices.Contains(keep, r.name) {
			rows = append(rows, r)
		}
	}
	planned := func(cell func(*PlanTime) string) func(Result) string {
		return func(r Result) string {
			if r.PlanTime == nil {
				return "n/a"
			}
			return cell(r.PlanTime)
		}
	}
	return append(rows,
		metricRow{"gangs planned by TopologyPlacement (attempts)", planned(func(p *PlanTime) string { return fmt.Sprint(p.Plans) })},
		metricRow{"plan time, mean", planned(func(p *PlanTime) string { return formatMillis(p.MeanSeconds) })},
		metricRow{"plan time, p99 (histogram estimate)", planned(func(p *PlanTime) string { return formatMillis(p.P99Seconds) })},
	)
}

func formatMillis(seconds float64) string { return fmt.Sprintf("%.2f ms", 1000*seconds) }

// driverColumn is one column of the comparison: a scheduler's replay with
// one GPU driver.
type driverColumn struct {
	driver string
	result Result
}

// columns pairs each scheduler's device-plugin replay with its DRA replay:
// the schedulers of results in order, then those only DRA replayed.
func (d *DRAReplay) columns(results []Result) []driverColumn {
	var names []string
	for _, rs := range [][]Result{results, d.Results} {
		for _, r := range rs {
			if !slices.Contains(names, r.Scheduler) {
				names = append(names, r.Scheduler)
			}
		}
	}
	var cols []driverColumn
	for _, name := range names {
		for _, side := range []struct {
			driver  string
			results []Result
		}{{GPUDriverDevicePlugin, results}, {GPUDriverDRA, d.Results}} {
			if i := slices.IndexFunc(side.results, func(r Result) bool { return r.Scheduler == name }); i >= 0 {
				cols = append(cols, driverColumn{side.driver, side.results[i]})
			}
		}
	}
	return cols
}

// writeMarkdown writes the GPU-driver comparison: a column per scheduler
// and driver, then how far each scheduler's mean efficiency moved.
func (d *DRAReplay) writeMarkdown(b *strings.Builder, results []Result) {
	b.WriteString("\n## GPU drivers: device plugin and DRA\n\n")
	fmt.Fprintf(b, "The trace once more on `%s`: the same nodes with every pool's GPUs served by NVIDIA's DRA driver, each job's replicas claiming theirs through a ResourceClaimTemplate of DeviceClass gpu.nvidia.com. With DRA the GPU sets rated are the ones the claims were allocated.\n\n", d.Model)
	cols := d.columns(results)
	header := []string{"metric"}
	for _, c := range cols {
		header = append(header, c.result.Scheduler+", "+c.driver)
	}
	writeRow(b, header)
	writeRow(b, slices.Repeat([]string{"---"}, len(header)))
	for _, row := range driverRows() {
		cells := []string{row.name}
		for _, c := range cols {
			cells = append(cells, row.cell(c.result))
		}
		writeRow(b, cells)
	}
	var moves []string
	for i := 1; i < len(cols); i++ {
		dp, dra := cols[i-1], cols[i]
		if dp.driver != GPUDriverDevicePlugin || dra.driver != GPUDriverDRA || dp.result.Scheduler != dra.result.Scheduler ||
			dp.result.EfficiencyMean == nil || dra.result.EfficiencyMean == nil {
			continue
		}
		moves = append(moves, fmt.Sprintf("%s %+.3f", dra.result.Scheduler, *dra.result.EfficiencyMean-*dp.result.EfficiencyMean))
	}
	if len(moves) > 0 {
		fmt.Fprintf(b, "\nMean placement efficiency, DRA minus device plugin: %s.\n", strings.Join(moves, ", "))
	}
}
