package bench

import (
	"bytes"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sampleReport compares three schedulers on hand-made results: kube-scheduler
// with a deadlock and unknown GPU sets, Coscheduling spreading gangs,
// Lockstep meeting its targets but throughput at scale.
func sampleReport() Report {
	perJob := func(eff []float64, waits []float64) []JobResult {
		var out []JobResult
		for i := range max(len(eff), len(waits)) {
			j := JobResult{ID: "job", GPUs: 16, Replicas: 2, PodsBound: 2, Finished: true}
			if i < len(eff) {
				j.Efficiency = ptr(eff[i])
			}
			if i < len(waits) {
				j.WaitSeconds = ptr(waits[i])
			}
			out = append(out, j)
		}
		return out
	}
	util := func(busy ...float64) []UtilizationPoint {
		var out []UtilizationPoint
		for i, b := range busy {
			out = append(out, UtilizationPoint{Seconds: float64(10 * i), Busy: b})
		}
		return out
	}
	return Report{
		Model:           "hgx-32",
		Trace:           "test/e2e/traces/default.csv",
		Command:         "lockstep-bench --model test/e2e/models/hgx-32.yaml --trace test/e2e/traces/default.csv --compress 10",
		TimeCompression: 10,
		Host:            "2 CPU cores, linux/amd64",
		Targets:         DefaultTargets(),
		Notes:           []string{"Lockstep's preferredWait is 3s."},
		Results: []Result{
			{
				Scheduler: SchedulerKube, Jobs: 150, Pods: 412, PodsBound: 380, FinishedJobs: 140,
				MultiGPUJobs: 60, EfficiencyJobs: 50, UnmodelledJobs: 10,
				EfficiencyMean: ptr(0.7123), EfficiencyP10: ptr(0.5004),
				MultiNodeJobs: 20, OneLeafJobs: 9, OneLeafShare: ptr(0.45),
				FullyBoundJobs: 145, NeverFullyBoundJobs: 5,
				GangWaitP50Seconds: ptr(1.26), GangWaitP99Seconds: ptr(412.3),
				MakespanSeconds: 1800, MakespanIncomplete: true,
				TotalGPUs: 256, UtilizationMean: ptr(0.6512), Utilization: util(0, 0.4, 0.9, 0.7),
				PodsPerSecond: ptr(31.25), PartialGangAfterSeconds: 30, PartialGangs: 4, DeadlockedGangs: 2,
				TimeCompression: 10, MakespanTraceSeconds: 18000,
				JCTMeanSeconds: ptr(812.4), JCTP50Seconds: ptr(402.0), JCTP99Seconds: ptr(7210.0), IncompleteJobs: 10,
				GPUHours: 240.25, UsefulGPUHours: 180.0, IdealGPUHours: 200.0, ModelledGPUHours: 205.0, WasteGPUHours: 60.25, UsefulUtilization: ptr(0.5), WasteShare: ptr(0.1674),
				PerJob: perJob([]float64{0.5, 0.7, 1, 0.99}, []float64{1, 2, 400}),
			},
			{
				Scheduler: SchedulerCoscheduling, Jobs: 150, Pods: 412, PodsBound: 412, FinishedJobs: 150,
				MultiGPUJobs: 62, EfficiencyJobs: 62,
				EfficiencyMean: ptr(0.8), EfficiencyP10: ptr(0.5),
				MultiNodeJobs: 21, OneLeafJobs: 12, OneLeafShare: ptr(12.0 / 21),
				FullyBoundJobs:     150,
				GangWaitP50Seconds: ptr(2.5), GangWaitP99Seconds: ptr(95.0),
				MakespanSeconds: 1234.56,
				TotalGPUs:       256, UtilizationMean: ptr(0.7), Utilization: util(0, 0.5, 0.8),
				PodsPerSecond: ptr(20.0), PartialGangAfterSeconds: 30,
				TimeCompression: 10, MakespanTraceSeconds: 12345.6,
				JCTMeanSeconds: ptr(700.0), JCTP50Seconds: ptr(380.0), JCTP99Seconds: ptr(3100.0),
				GPUHours: 230.0, UsefulGPUHours: 229.5, IdealGPUHours: 200.0, ModelledGPUHours: 205.0, WasteGPUHours: 0.5, UsefulUtilization: ptr(0.6975), WasteShare: ptr(0.0015),
				PerJob: perJob([]float64{0.5, 0.8, 1}, []float64{2.5, 95}),
			},
			{
				Scheduler: SchedulerLockstep, Jobs: 150, Pods: 412, PodsBound: 412, FinishedJobs: 150,
				MultiGPUJobs: 62, EfficiencyJobs: 62,
				EfficiencyMean: ptr(0.9871), EfficiencyP10: ptr(0.9512),
				MultiNodeJobs: 21, OneLeafJobs: 19, OneLeafShare: ptr(19.0 / 21),
				FullyBoundJobs:     150,
				GangWaitP50Seconds: ptr(0.4), GangWaitP99Seconds: ptr(61.75),
				MakespanSeconds: 1100.04,
				TotalGPUs:       256, UtilizationMean: ptr(0.75), Utilization: util(0, 0.6, 0.9, 0.8, 0.2),
				PodsPerSecond: ptr(25.5), PartialGangAfterSeconds: 30,
				TimeCompression: 10, MakespanTraceSeconds: 11000.4,
				JCTMeanSeconds: ptr(640.0), JCTP50Seconds: ptr(360.0), JCTP99Seconds: ptr(2900.0),
				GPUHours: 210.0, UsefulGPUHours: 210.0, IdealGPUHours: 200.0, ModelledGPUHours: 205.0, UsefulUtilization: ptr(0.745), WasteShare: ptr(0.0),
				PerJob: perJob([]float64{0.999, 1, 1}, []float64{0.4, 61.75}),
			},
		},
		Sweep: &Sweep{DeployedWaitSeconds: 30, Points: []SweepPoint{
			{WaitSeconds: 120, Jobs: 150, FinishedJobs: 150, JCTMeanSeconds: ptr(700.0), JCTP99Seconds: ptr(3300.0), GPUHours: 209.0, EfficiencyMean: ptr(0.995), OneLeafShare: ptr(0.95)},
			{WaitSeconds: 0, Jobs: 150, FinishedJobs: 150, JCTMeanSeconds: ptr(620.0), JCTP99Seconds: ptr(2800.0), GPUHours: 215.5, EfficiencyMean: ptr(0.95), OneLeafShare: ptr(0.8)},
			{WaitSeconds: 30, Jobs: 150, FinishedJobs: 150, JCTMeanSeconds: ptr(640.0), JCTP99Seconds: ptr(2900.0), GPUHours: 210.0, EfficiencyMean: ptr(0.9871), OneLeafShare: ptr(19.0 / 21)},
			{WaitSeconds: 30, Jobs: 150, FinishedJobs: 150, JCTMeanSeconds: ptr(650.0), JCTP99Seconds: ptr(2950.0), GPUHours: 213.0, EfficiencyMean: ptr(0.991), OneLeafShare: ptr(19.0 / 21)},
		}},
		Priority: &PriorityReplay{
			Trace: "test/e2e/traces/priority.csv",
			Notes: []string{"kube-scheduler preempts pod by pod."},
			Results: []Result{
				{Scheduler: SchedulerKube, Jobs: 46, FinishedJobs: 40, PreemptedJobs: 9, Preemptions: 12, EvictedPods: 30,
					Preemptors: 5, AttributedPreemptions: 12, MostPreemptionsByOne: 4,
					PreemptionLostGPUHours: 41.25, GPUHours: 400.5, MakespanTraceSeconds: 7200, MakespanIncomplete: true,
					Priorities: []PriorityResult{
						{Class: PriorityHigh, Value: 1000, Jobs: 6, FinishedJobs: 6, FullyBoundJobs: 6, GangWaitP50Seconds: ptr(1.5), GangWaitP99Seconds: ptr(70.0), MakespanTraceSeconds: 1900},
						{Class: PriorityLow, Value: 100, Jobs: 40, FinishedJobs: 34, FullyBoundJobs: 36, GangWaitP50Seconds: ptr(30.0), GangWaitP99Seconds: ptr(90.0),
							MakespanTraceSeconds: 7200, MakespanIncomplete: true, PreemptedJobs: 9, Preemptions: 12, EvictedPods: 30, PreemptionLostGPUHours: 41.25},
					}},
				{Scheduler: SchedulerLockstep, Jobs: 46, FinishedJobs: 46, PreemptedJobs: 3, Preemptions: 3, EvictedPods: 12,
					PreemptionLostGPUHours: 8.5, GPUHours: 350.0, MakespanTraceSeconds: 5000,
					Priorities: []PriorityResult{
						{Class: PriorityHigh, Value: 1000, Jobs: 6, FinishedJobs: 6, FullyBoundJobs: 6, GangWaitP50Seconds: ptr(0.8), GangWaitP99Seconds: ptr(3.0), MakespanTraceSeconds: 1800},
						{Class: PriorityLow, Value: 100, Jobs: 39, FinishedJobs: 39, FullyBoundJobs: 39, GangWaitP50Seconds: ptr(20.0), GangWaitP99Seconds: ptr(80.0),
							MakespanTraceSeconds: 5000, PreemptedJobs: 3, Preemptions: 3, EvictedPods: 12, PreemptionLostGPUHours: 8.5},
						{Jobs: 1, FinishedJobs: 1, FullyBoundJobs: 1, GangWaitP50Seconds: ptr(0.1), GangWaitP99Seconds: ptr(0.1), MakespanTraceSeconds: 60},
					}},
			},
		},
		Scale: &ScaleResult{
			Model: "scale-5000", Nodes: 5000, Jobs: 2000, Pods: 20000,
			PodsPerSecond: map[string]float64{SchedulerKube: 100, SchedulerLockstep: 70, SchedulerCoscheduling: 60, "other": 1},
			PeakRSSBytes:  map[string]uint64{SchedulerKube: 400 << 20, SchedulerLockstep: 460 << 20},
		},
		InProcess: &InProcessResult{
			Model: "scale-5000", Nodes: 5000, Pods: 840, Rounds: 2,
			Runs: []InProcessRun{
				{Scheduler: SchedulerKube, Round: 1, Pods: 840, PodsPerSecond: 100, PeakHeapBytes: 150 << 20},
				{Scheduler: SchedulerLockstep, Round: 1, Pods: 840, PodsPerSecond: 130, PeakHeapBytes: 200 << 20},
				{Scheduler: SchedulerKube, Round: 2, Pods: 840, PodsPerSecond: 110, PeakHeapBytes: 160 << 20},
				{Scheduler: SchedulerLockstep, Round: 2, Pods: 840, PodsPerSecond: 120, PeakHeapBytes: 180 << 20},
			},
		},
	}
}

// inProcessReport is make bench-scale's report: only the in-process run,
// of a mixed burst, one round.
func inProcessReport() Report {
	jobs := []BurstJob{{Pods: 1024, GPUsPerPod: 4}, {Pods: 1, GPUsPerPod: 1}, {Pods: 2, GPUsPerPod: 4}, {Pods: 1, GPUsPerPod: 3}, {Pods: 2, GPUsPerPod: 4}}
	return Report{
		Model: "m", Trace: "t.csv", TimeCompression: 60, Host: "2 CPU cores, linux/amd64", Targets: DefaultTargets(),
		InProcess: &InProcessResult{
			Model: "test/e2e/models/gb200-100k.yaml", Nodes: 25200, Burst: BurstMixed, Jobs: len(jobs), Mix: BurstMix(jobs), Pods: 1030, Rounds: 1,
			Runs: []InProcessRun{
				{Scheduler: SchedulerKube, Round: 1, Pods: 1030, PodsPerSecond: 200, PeakHeapBytes: 1000 << 20,
					WallSeconds: 9.5, SchedulerCPUSeconds: 12.25, ControlPlaneCPUSeconds: 6.5, BoundBy: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 9.5}},
				{Scheduler: SchedulerLockstep, Round: 1, Pods: 1030, PodsPerSecond: 450, PeakHeapBytes: 1100 << 20,
					WallSeconds: 6, SchedulerCPUSeconds: 4, ControlPlaneCPUSeconds: 5.5, BoundBy: []float64{3.5, 4, 4, 4.5, 4.5, 5, 5, 5.5, 5.5, 6}},
			},
		},
	}
}

// scaleRoundsReport is a KWOK scale run alone, three rounds of two
// schedulers.
func scaleRoundsReport() Report {
	s := &ScaleResult{Model: "scale-5000", Nodes: 5000, Jobs: 120, Pods: 840}
	for i, r := range []struct {
		rate float64
		rss  uint64
	}{{120, 220}, {170, 250}, {100, 215}, {160, 290}, {125, 230}, {150, 260}} {
		name := SchedulerKube
		if i%2 == 1 {
			name = SchedulerLockstep
		}
		run := ScaleRun{Scheduler: name, Round: i/2 + 1, PodsPerSecond: r.rate, PeakRSSBytes: r.rss << 20}
		if i < 4 {
			// The last round's runs come from before CPU was recorded, the
			// second's from before the first bind was.
			run.WallSeconds, run.SchedulerCPUSeconds, run.ClusterCPUSeconds = 10, 4, 15
		}
		if i < 2 {
			// The first round's also have the bind window's: 8 s of it.
			run.FirstBindSeconds, run.BindSchedulerCPUSeconds, run.BindClusterCPUSeconds = 2, 2, 12
		}
		s.Add(run)
	}
	return Report{Model: "m", Trace: "t.csv", TimeCompression: 60, Host: "2 CPU cores, linux/amd64", Targets: DefaultTargets(), Scale: s}
}

// TestScaleResultAdd checks that a scale run of rounds reports each
// scheduler's medians, not its last run.
func TestScaleResultAdd(t *testing.T) {
	s := scaleRoundsReport().Scale
	want := &ScaleResult{
		PodsPerSecond: map[string]float64{SchedulerKube: 120, SchedulerLockstep: 160},
		PeakRSSBytes:  map[string]uint64{SchedulerKube: 220 << 20, SchedulerLockstep: 260 << 20},
		Rounds:        3,
	}
	got := &ScaleResult{PodsPerSecond: s.PodsPerSecond, PeakRSSBytes: s.PeakRSSBytes, Rounds: s.Rounds}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("medians (-want,+got):\n%s", diff)
	}
	if len(s.Runs) != 6 {
		t.Errorf("%d runs kept, want 6", len(s.Runs))
	}
	even := &ScaleResult{}
	even.Add(ScaleRun{Scheduler: SchedulerKube, Round: 1, PodsPerSecond: 100, PeakRSSBytes: 200})
	even.Add(ScaleRun{Scheduler: SchedulerKube, Round: 2, PodsPerSecond: 110, PeakRSSBytes: 300})
	if got, want := []any{even.PodsPerSecond[SchedulerKube], even.PeakRSSBytes[SchedulerKube]}, []any{105.0, uint64(250)}; !cmp.Equal(got, want) {
		t.Errorf("medians of two runs %v, want %v", got, want)
	}
}

func TestWriteMarkdown(t *testing.T) {
	tests := []struct {
		name   string
		report Report
		golden string
	}{
		{"three schedulers and a scale run", sampleReport(), "report.md"},
		{"nothing measured", Report{Model: "m", Trace: "t.csv", TimeCompression: 1.5, Host: "1 CPU cores, linux/arm64", Targets: DefaultTargets(),
			Results: []Result{{Scheduler: SchedulerKube, PartialGangAfterSeconds: 30}}}, "report-empty.md"},
		{"the in-process run alone, mixed burst", inProcessReport(), "report-inprocess.md"},
		{"a scale run of three rounds", scaleRoundsReport(), "report-scale-rounds.md"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			mustNoError(t, tc.report.WriteMarkdown(&buf))
			path := filepath.Join("testdata", tc.golden)
			if *update {
				mustNoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
			}
			want, err := os.ReadFile(path)
			mustNoError(t, err)
			if diff := cmp.Diff(string(want), buf.String()); diff != "" {
				t.Errorf("WriteMarkdown differs from %s; run go test ./pkg/bench -update (-want,+got):\n%s", path, diff)
			}
		})
	}
}

func TestCheckTargets(t *testing.T) {
	missed := sampleReport()
	missed.Results[2].EfficiencyMean = ptr(0.9)
	missed.Results[2].PartialGangs = 1
	missed.Results[2].DeadlockedGangs = 3
	missed.Scale.PodsPerSecond[SchedulerLockstep] = 79.9
	missed.Scale.PeakRSSBytes[SchedulerLockstep] = 481 << 20
	for i := range missed.InProcess.Runs {
		if missed.InProcess.Runs[i].Scheduler == SchedulerLockstep {
			missed.InProcess.Runs[i].PodsPerSecond = 90
			missed.InProcess.Runs[i].PeakHeapBytes = 200 << 20
		}
	}
	missed.Results[2].GPUHours = 216.3 // 0.9003 of kube-scheduler's 240.25
	noLockstep := sampleReport()
	noLockstep.Results = noLockstep.Results[:2]
	noLockstep.Scale = nil
	noLockstep.InProcess = nil
	tests := []struct {
		name   string
		report Report
		want   []string
	}{
		// In process: 125 vs 105 pods/s (medians), 190 vs 155 MiB (1.23×).
		{"sample: all but KWOK throughput and in-process heap met", sampleReport(), []string{TargetMet, TargetMet, TargetMet, TargetMet, TargetMissed, TargetMet, TargetMet, TargetMissed}},
		{"everything missed", missed, []string{TargetMissed, TargetMissed, TargetMissed, TargetMissed, TargetMissed, TargetMissed, TargetMissed, TargetMissed}},
		{"no Lockstep run, no scale run", noLockstep, []string{TargetNotMeasured, TargetNotMeasured, TargetNotMeasured, TargetNotMeasured, TargetNotMeasured, TargetNotMeasured, TargetNotMeasured, TargetNotMeasured}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range tc.report.CheckTargets() {
				got = append(got, c.Status)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("statuses (-want,+got):\n%s", diff)
			}
		})
	}
	met := sampleReport()
	met.Results[2].GPUHours = 0.9 * met.Results[0].GPUHours
	if got := met.CheckTargets()[3]; got.Status != TargetMet {
		t.Errorf("GPU-hours at exactly 0.9× = %+v, want met", got)
	}
	unfinished := met
	unfinished.Results = slices.Clone(met.Results)
	unfinished.Results[2].IncompleteJobs = 1
	if got := unfinished.CheckTargets()[3]; got.Status != TargetMissed || !strings.Contains(got.Got, "1 of Lockstep's jobs unfinished") {
		t.Errorf("GPU-hours of a Lockstep replay that left a job unfinished = %+v, want missed and said", got)
	}
	met.Scale.PodsPerSecond[SchedulerLockstep] = 100
	if got := met.CheckTargets()[4]; got.Status != TargetMet || got.Got != "1.00× (100.0 vs 100.0 pods/s)" {
		t.Errorf("throughput at exactly 1.0× = %+v, want met", got)
	}
	met.Scale.PeakRSSBytes[SchedulerLockstep] = 480 << 20
	if got := met.CheckTargets()[5]; got.Status != TargetMet || got.Got != "1.20× (480 MiB vs 400 MiB)" {
		t.Errorf("peak RSS at exactly 1.2× = %+v, want met", got)
	}
	if got := met.CheckTargets()[6]; got.Got != "1.19× (125.0 vs 105.0 pods/s, median of 2 rounds)" {
		t.Errorf("in-process throughput = %+v", got)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	want := sampleReport()
	var buf bytes.Buffer
	mustNoError(t, want.WriteJSON(&buf))
	if !bytes.Contains(buf.Bytes(), []byte(`"target_checks"`)) {
		t.Error("the JSON report has no target_checks")
	}
	got, err := ReadJSON(&buf)
	mustNoError(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadJSON(WriteJSON(r)) (-want,+got):\n%s", diff)
	}
}

func TestWriteAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	mustNoError(t, sampleReport().WriteAll(dir))
	for _, name := range []string{EfficiencyPlotFile, WaitPlotFile, UtilizationPlotFile, SweepPlotFile} {
		f, err := os.Open(filepath.Join(dir, name))
		mustNoError(t, err)
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s is not a PNG: %v", name, err)
			continue
		}
		if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
			t.Errorf("%s is %v, want a readable size", name, b)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	mustNoError(t, err)
	golden, err := os.ReadFile(filepath.Join("testdata", "report.md"))
	mustNoError(t, err)
	if !bytes.Equal(md, golden) {
		t.Error("report.md differs from WriteMarkdown's output")
	}
	f, err := os.Open(filepath.Join(dir, "results.json"))
	mustNoError(t, err)
	defer f.Close()
	if _, err := ReadJSON(f); err != nil {
		t.Errorf("results.json: %v", err)
	}
}

func TestWritePlotsWithoutData(t *testing.T) {
	dir := t.TempDir()
	r := Report{Results: []Result{{Scheduler: SchedulerKube}, {Scheduler: SchedulerLockstep}}, Sweep: &Sweep{}}
	mustNoError(t, r.WritePlots(dir))
	for _, name := range []string{EfficiencyPlotFile, WaitPlotFile, UtilizationPlotFile, SweepPlotFile} {
		f, err := os.Open(filepath.Join(dir, name))
		mustNoError(t, err)
		_, err = png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s is not a PNG: %v", name, err)
		}
	}
}

func TestWritePlotsToMissingDirectory(t *testing.T) {
	err := sampleReport().WritePlots(filepath.Join(t.TempDir(), "missing"))
	if err == nil {
		t.Error("WritePlots into a missing directory succeeded")
	}
}

// BenchmarkWriteMarkdown renders the sample report, scale sections
// included.
func BenchmarkWriteMarkdown(b *testing.B) {
	r := sampleReport()
	b.ReportAllocs()
	for b.Loop() {
		if err := r.WriteMarkdown(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
