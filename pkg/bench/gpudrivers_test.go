package bench

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestNewPlanTime(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		count   uint64
		sum     float64
		buckets []Bucket
		want    *PlanTime
	}{
		{"nothing observed", 0, 0, []Bucket{{0.001, 0}, {inf, 0}}, nil},
		{
			// 100 plans: 50 within 1 ms, 98 within 2 ms, all within 4 ms;
			// the 99th is half-way through (2 ms, 4 ms].
			"p99 interpolated in its bucket", 100, 0.15,
			[]Bucket{{0.001, 50}, {0.002, 98}, {0.004, 100}, {inf, 100}},
			&PlanTime{Plans: 100, MeanSeconds: 0.0015, P99Seconds: 0.003},
		},
		{
			"buckets in any order", 100, 0.15,
			[]Bucket{{inf, 100}, {0.004, 100}, {0.001, 50}, {0.002, 98}},
			&PlanTime{Plans: 100, MeanSeconds: 0.0015, P99Seconds: 0.003},
		},
		{
			"p99 in the first bucket, from 0", 10, 0.005,
			[]Bucket{{0.001, 10}, {inf, 10}},
			&PlanTime{Plans: 10, MeanSeconds: 0.0005, P99Seconds: 0.00099},
		},
		{
			// Half the plans took longer than the last finite bound: the
			// histogram says no more than that bound.
			"p99 beyond the last finite bound", 4, 8,
			[]Bucket{{0.001, 1}, {1.6384, 2}, {inf, 4}},
			&PlanTime{Plans: 4, MeanSeconds: 2, P99Seconds: 1.6384},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NewPlanTime(tc.count, tc.sum, tc.buckets)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("NewPlanTime (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestSummarizeCarriesPlanTime(t *testing.T) {
	c := hgxCluster(2, 2, 1)
	job := Job{ID: "a", Replicas: 1, GPUsPerReplica: 8, Duration: 60e9}
	run := Run{Scheduler: SchedulerLockstep, Start: at(0), End: at(100),
		Jobs:     []JobRun{{Job: job, Submitted: at(0), Pods: []PodRun{pod("a-0", "n00", all8, 1, 0)}}},
		PlanTime: &PlanTime{Plans: 3, MeanSeconds: 0.002, P99Seconds: 0.004}}
	res, err := Summarize(c, run)
	mustNoError(t, err)
	if diff := cmp.Diff(run.PlanTime, res.PlanTime); diff != "" {
		t.Errorf("Result.PlanTime (-want,+got):\n%s", diff)
	}
}

// draReport is sampleReport with DRA replays of kube-scheduler and
// Lockstep, Lockstep's plan times on both sides, and a DRA replay of a
// scheduler the device-plugin replays did not run.
func draReport() Report {
	r := sampleReport()
	r.Results[2].PlanTime = &PlanTime{Plans: 412, MeanSeconds: 0.00123, P99Seconds: 0.0081}
	kube, lockstep := r.Results[0], r.Results[2]
	kube.EfficiencyMean, kube.PodsPerSecond = ptr(0.7201), ptr(28.5)
	lockstep.EfficiencyMean, lockstep.PodsPerSecond = ptr(0.981), ptr(30.0)
	lockstep.PlanTime = &PlanTime{Plans: 430, MeanSeconds: 0.00181, P99Seconds: 0.0122}
	other := Result{Scheduler: "other", Jobs: 150, Pods: 412, PartialGangAfterSeconds: 30}
	r.DRA = &DRAReplay{Model: "_output/bench/models/hgx-32-dra.yaml", Results: []Result{lockstep, kube, other}}
	return r
}

func TestWriteMarkdownDRA(t *testing.T) {
	var buf bytes.Buffer
	mustNoError(t, draReport().WriteMarkdown(&buf))
	path := filepath.Join("testdata", "report-dra.md")
	if *update {
		mustNoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	mustNoError(t, err)
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("WriteMarkdown differs from %s; run go test ./pkg/bench -update (-want,+got):\n%s", path, diff)
	}
}

func TestDRAColumns(t *testing.T) {
	r := draReport()
	var got []string
	for _, c := range r.DRA.columns(r.Results) {
		got = append(got, c.result.Scheduler+"/"+c.driver)
	}
	want := []string{
		"kube-scheduler/DevicePlugin", "kube-scheduler/DRA",
		"coscheduling/DevicePlugin",
		"lockstep/DevicePlugin", "lockstep/DRA",
		"other/DRA",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("columns (-want,+got):\n%s", diff)
	}
}

func TestJSONRoundTripDRA(t *testing.T) {
	want := draReport()
	var buf bytes.Buffer
	mustNoError(t, want.WriteJSON(&buf))
	got, err := ReadJSON(&buf)
	mustNoError(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadJSON(WriteJSON(r)) (-want,+got):\n%s", diff)
	}
}

// TestRenderWithoutDRA reads a results.json written before the DRA replay
// and plan times existed: it has neither, and its report has no DRA
// section.
func TestRenderWithoutDRA(t *testing.T) {
	old := `{"model": "m", "trace": "t.csv", "time_compression": 60, "host": "2 CPU cores, linux/amd64",
		"results": [{"scheduler": "lockstep", "jobs": 1, "pods": 1, "partial_gang_after_s": 30}],
		"targets": {"efficiency_mean": 0.97}}`
	r, err := ReadJSON(strings.NewReader(old))
	mustNoError(t, err)
	if r.DRA != nil || r.Results[0].PlanTime != nil {
		t.Errorf("old results.json read with DRA %+v and plan time %+v, want neither", r.DRA, r.Results[0].PlanTime)
	}
	var buf bytes.Buffer
	mustNoError(t, r.WriteMarkdown(&buf))
	if strings.Contains(buf.String(), "DRA") {
		t.Errorf("report of an old results.json mentions DRA:\n%s", buf.String())
	}
}

// BenchmarkWriteMarkdownDRA renders the sample report with its GPU-driver
// comparison; BenchmarkWriteMarkdown is the same report without it.
func BenchmarkWriteMarkdownDRA(b *testing.B) {
	r := draReport()
	b.ReportAllocs()
	for b.Loop() {
		if err := r.WriteMarkdown(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
