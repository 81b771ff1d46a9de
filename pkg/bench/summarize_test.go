package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// job is a trace entry for hand-built runs.
func job(id string, replicas, gpus int) Job {
	return Job{ID: id, Replicas: replicas, GPUsPerReplica: gpus, Duration: time.Minute}
}

func TestSummarize(t *testing.T) {
	// 16 HGX nodes, two leaves of 8 under a 2:1 spine: 128 GPUs.
	c := hgxCluster(16, 8, 2)
	crossSpine := 40_415_318.0 / 80_710_637.0 // TestPlacementEfficiency
	run := Run{
		Scheduler: SchedulerLockstep,
		Start:     at(0),
		End:       at(200),
		Jobs: []JobRun{
			// A gang in one leaf: wait 3 s, efficiency 1.
			{Job: job("a", 2, 8), Submitted: at(0), Finished: at(53), Slowdown: 1, Pods: []PodRun{
				pod("a-1", "n01", all8, 3, 53), pod("a-0", "n00", all8, 2, 53),
			}},
			// A gang across the spine, complete after 35 s: partial, wait 39 s.
			{Job: job("b", 2, 8), Submitted: at(1), Finished: at(100), Slowdown: 1.3, Pods: []PodRun{
				pod("b-0", "n02", all8, 5, 100), pod("b-1", "n08", all8, 40, 100),
			}},
			// One GPU: no efficiency; wait 2 s.
			{Job: job("c", 1, 1), Submitted: at(2), Finished: at(20), Pods: []PodRun{
				pod("c-0", "n03", topology.NewGPUSet(0), 4, 20),
			}},
			// Four GPUs of unknown indices: unmodelled; wait 3 s.
			{Job: job("d", 1, 4), Submitted: at(3), Finished: at(30), Pods: []PodRun{
				pod("d-0", "n03", 0, 6, 30),
			}},
			// Half a gang bound and holding its GPUs at the end: deadlocked.
			{Job: job("e", 4, 8), Submitted: at(10), Pods: []PodRun{
				pod("e-0", "n04", all8, 12, 0), pod("e-1", "n05", all8, 12, 0), unbound("e-2"),
			}},
			// Nothing bound.
			{Job: job("f", 2, 8), Submitted: at(20), Pods: []PodRun{unbound("f-0"), unbound("f-1")}},
		},
		Utilization: []Sample{
			{At: at(20), BusyGPUs: 128}, {At: at(0), BusyGPUs: 0}, {At: at(40), BusyGPUs: 32}, {At: at(10), BusyGPUs: 64},
		},
	}
	want := Result{
		Scheduler:    SchedulerLockstep,
		Jobs:         6,
		Pods:         12,
		PodsBound:    8,
		FinishedJobs: 4,

		MultiGPUJobs:   3,
		EfficiencyJobs: 2,
		UnmodelledJobs: 1,
		EfficiencyMean: ptr((1 + crossSpine) / 2),
		EfficiencyP10:  ptr(crossSpine),

		MultiNodeJobs: 2,
		OneLeafJobs:   1,
		OneLeafShare:  ptr(0.5),

		FullyBoundJobs:      4,
		NeverFullyBoundJobs: 2,
		// Waits 2, 3, 3, 39: nearest rank 2 and 4.
		GangWaitP50Seconds: ptr(3.0),
		GangWaitP99Seconds: ptr(39.0),

		MakespanSeconds:    200,
		MakespanIncomplete: true,

		TimeCompression:      1,
		MakespanTraceSeconds: 200,
		// Finished: a 53 s, b 99 s, c 18 s, d 27 s; e and f did not.
		JCTMeanSeconds: ptr((53.0 + 99 + 18 + 27) / 4),
		JCTP50Seconds:  ptr(27.0),
		JCTP99Seconds:  ptr(99.0),
		IncompleteJobs: 2,
		// GPU-seconds held (useful): a 8·51+8·50 (8·50·2 from its full bind
		// at 3 s), b 8·95+8·60 (8·60·2 from 40 s), c 16 (16), d 4·24 (96),
		// e 8·188·2 to the end (none: never whole).
		GPUHours:       5168.0 / 3600,
		UsefulGPUHours: 1872.0 / 3600,
		WasteGPUHours:  3296.0 / 3600,
		// 85 GPUs of one-minute jobs.
		IdealGPUHours: 5100.0 / 3600,
		// Finished a, b (slowed 1.3), c and d.
		ModelledGPUHours:  (960.0 + 16*60.0*1.3 + 60 + 240) / 3600,
		UsefulUtilization: ptr(1872.0 / (128 * 200)),
		WasteShare:        ptr(3296.0 / (128 * 200)),

		TotalGPUs: 128,
		// 0 for 10 s, 0.5 for 10 s, 1 for 20 s: 25/40.
		UtilizationMean: ptr(0.625),
		Utilization:     []UtilizationPoint{{0, 0}, {10, 0.5}, {20, 1}, {40, 0.25}},

		// 8 binds from 2 s to 40 s.
		PodsPerSecond: ptr(8.0 / 38),

		PartialGangAfterSeconds: 30,
		PartialGangs:            2,
		DeadlockedGangs:         1,

		PerJob: []JobResult{
			{ID: "a", GPUs: 16, Replicas: 2, PodsBound: 2, WaitSeconds: ptr(3.0), Efficiency: ptr(1.0), Domain: "spine=spine-0/leaf=leaf-0", Finished: true,
				JCTSeconds: ptr(53.0), GPUHours: 808.0 / 3600, UsefulGPUHours: 800.0 / 3600, Slowdown: ptr(1.0)},
			{ID: "b", GPUs: 16, Replicas: 2, PodsBound: 2, WaitSeconds: ptr(39.0), Efficiency: ptr(crossSpine), Domain: "spine=spine-0", Partial: true, Finished: true,
				JCTSeconds: ptr(99.0), GPUHours: 1240.0 / 3600, UsefulGPUHours: 960.0 / 3600, Slowdown: ptr(1.3)},
			{ID: "c", GPUs: 1, Replicas: 1, PodsBound: 1, WaitSeconds: ptr(2.0), Domain: "spine=spine-0/leaf=leaf-0/host=n03", Finished: true,
				JCTSeconds: ptr(18.0), GPUHours: 16.0 / 3600, UsefulGPUHours: 16.0 / 3600},
			{ID: "d", GPUs: 4, Replicas: 1, PodsBound: 1, WaitSeconds: ptr(3.0), Domain: "spine=spine-0/leaf=leaf-0/host=n03", Finished: true,
				JCTSeconds: ptr(27.0), GPUHours: 96.0 / 3600, UsefulGPUHours: 96.0 / 3600},
			{ID: "e", GPUs: 32, Replicas: 4, PodsBound: 2, Partial: true, Deadlocked: true, GPUHours: 3008.0 / 3600},
			{ID: "f", GPUs: 16, Replicas: 2},
		},
	}
	got, err := Summarize(c, run)
	mustNoError(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Summarize (-want,+got):\n%s", diff)
	}
}

// gangRun is a run of one job whose pods bind at the given seconds (negative:
// never), none finishing, observed until end.
func gangRun(replicas int, binds []float64, end float64) Run {
	jr := JobRun{Job: job("g", replicas, 8), Submitted: at(0)}
	for i, b := range binds {
		p := unbound(fmt.Sprintf("g-%d", i))
		if b >= 0 {
			p = pod(p.Name, fmt.Sprintf("n%02d", i), all8, b, 0)
		}
		jr.Pods = append(jr.Pods, p)
	}
	return Run{Scheduler: "test", Start: at(0), End: at(end), Jobs: []JobRun{jr}}
}

func TestPartialGangs(t *testing.T) {
	c := hgxCluster(8, 8, 1)
	tests := []struct {
		name      string
		run       Run
		threshold time.Duration
		want      int
	}{
		{"complete after 29 s", gangRun(2, []float64{10, 39}, 100), 30 * time.Second, 0},
		{"complete after exactly 30 s", gangRun(2, []float64{10, 40}, 100), 30 * time.Second, 0},
		{"complete after 31 s", gangRun(2, []float64{10, 41}, 100), 30 * time.Second, 1},
		{"incomplete for 29 s at the end", gangRun(2, []float64{10, -1}, 39), 30 * time.Second, 0},
		{"incomplete for 31 s at the end", gangRun(2, []float64{10, -1}, 41), 30 * time.Second, 1},
		{"from the first bind, not the submission", gangRun(3, []float64{50, 60, 75}, 100), 30 * time.Second, 0},
		{"a shorter threshold", gangRun(2, []float64{10, 21}, 100), 10 * time.Second, 1},
		{"single pods never count", Run{Scheduler: "test", Start: at(0), End: at(100), Jobs: []JobRun{
			{Job: job("s", 1, 8), Submitted: at(0), Pods: []PodRun{pod("s-0", "n00", all8, 50, 0)}},
		}}, 30 * time.Second, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SummarizeWithOptions(c, tc.run, Options{PartialGangAfter: tc.threshold})
			mustNoError(t, err)
			if got.PartialGangs != tc.want {
				t.Errorf("PartialGangs = %d, want %d", got.PartialGangs, tc.want)
			}
		})
	}
}

func TestDeadlockedGangs(t *testing.T) {
	c := hgxCluster(8, 8, 1)
	withFinish := func(r Run, finished ...float64) Run {
		for i, f := range finished {
			r.Jobs[0].Pods[i].Finished = at(f)
		}
		return r
	}
	tests := []struct {
		name string
		run  Run
		want int
	}{
		{"two of three bound and running", gangRun(3, []float64{1, 2, -1}, 100), 1},
		{"two of three bound, both finished", withFinish(gangRun(3, []float64{1, 2, -1}, 100), 50, 60), 0},
		{"one bound, finishing after the end", withFinish(gangRun(2, []float64{1, -1}, 100), 150), 1},
		{"pods never created count as unbound", gangRun(3, []float64{1, 2}, 100), 1},
		{"all bound", gangRun(2, []float64{1, 2}, 100), 0},
		{"none bound", gangRun(2, []float64{-1, -1}, 100), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Summarize(c, tc.run)
			mustNoError(t, err)
			if got.DeadlockedGangs != tc.want {
				t.Errorf("DeadlockedGangs = %d, want %d", got.DeadlockedGangs, tc.want)
			}
		})
	}
}

func TestMakespan(t *testing.T) {
	c := hgxCluster(2, 8, 1)
	finished := func(id string, at time.Time) JobRun {
		return JobRun{Job: job(id, 1, 1), Submitted: t0, Finished: at, Pods: []PodRun{pod(id+"-0", "n00", topology.NewGPUSet(0), 0, 0)}}
	}
	tests := []struct {
		name           string
		jobs           []JobRun
		wantSeconds    float64
		wantIncomplete bool
	}{
		{"last finish", []JobRun{finished("a", at(70)), finished("b", at(95.5)), finished("c", at(10))}, 95.5, false},
		{"one unfinished", []JobRun{finished("a", at(70)), finished("b", time.Time{})}, 300, true},
		{"no jobs", nil, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Summarize(c, Run{Scheduler: "test", Start: at(0), End: at(300), Jobs: tc.jobs})
			mustNoError(t, err)
			if got.MakespanSeconds != tc.wantSeconds || got.MakespanIncomplete != tc.wantIncomplete {
				t.Errorf("makespan = %v s (incomplete %v), want %v s (incomplete %v)", got.MakespanSeconds, got.MakespanIncomplete, tc.wantSeconds, tc.wantIncomplete)
			}
		})
	}
}

func TestUtilization(t *testing.T) {
	tests := []struct {
		name       string
		samples    []Sample
		wantPoints []UtilizationPoint
		wantMean   *float64
	}{
		{"none", nil, nil, nil},
		{"one", []Sample{{At: at(5), BusyGPUs: 4}}, []UtilizationPoint{{5, 0.25}}, ptr(0.25)},
		{"same instant", []Sample{{At: at(5), BusyGPUs: 4}, {At: at(5), BusyGPUs: 12}}, []UtilizationPoint{{5, 0.25}, {5, 0.75}}, ptr(0.5)},
		// 1 for 1 s, 0 for 3 s: the last sample only closes the span.
		{"time-weighted", []Sample{{At: at(0), BusyGPUs: 16}, {At: at(1), BusyGPUs: 0}, {At: at(4), BusyGPUs: 16}}, []UtilizationPoint{{0, 1}, {1, 0}, {4, 1}}, ptr(0.25)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			points, mean := utilization(tc.samples, t0, 16)
			if diff := cmp.Diff(tc.wantPoints, points); diff != "" {
				t.Errorf("points (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMean, mean); diff != "" {
				t.Errorf("mean (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		values []float64
		p      float64
		want   *float64
	}{
		{nil, 50, nil},
		{[]float64{7}, 99, ptr(7.0)},
		{[]float64{4, 1, 3, 2}, 50, ptr(2.0)},
		{[]float64{4, 1, 3, 2}, 10, ptr(1.0)},
		{[]float64{4, 1, 3, 2}, 99, ptr(4.0)},
		{[]float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5, 11}, 10, ptr(2.0)},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, percentile(tc.values, tc.p)); diff != "" {
			t.Errorf("percentile(%v, %v) (-want,+got):\n%s", tc.values, tc.p, diff)
		}
	}
}

func TestBindThroughput(t *testing.T) {
	tests := []struct {
		name  string
		binds []time.Time
		want  float64
	}{
		{"none", nil, 0},
		{"one", []time.Time{at(1)}, 0},
		{"all at once", []time.Time{at(1), at(1)}, 0},
		{"unsorted", []time.Time{at(3), at(1), at(2), at(5)}, 1},
		{"fast", []time.Time{at(0), at(0.25), at(0.5)}, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := BindThroughput(tc.binds); got != tc.want {
				t.Errorf("BindThroughput = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDomainShares(t *testing.T) {
	// gang puts pod i of a 2-GPU-per-pod job on nodes[i], on GPUs 2i and
	// 2i+1 so that pods sharing a node do not overlap.
	gang := func(id string, nodes ...string) JobRun {
		jr := JobRun{Job: job(id, len(nodes), 2), Submitted: at(0)}
		for i, n := range nodes {
			jr.Pods = append(jr.Pods, pod(fmt.Sprintf("%s-%d", id, i), n, topology.NewGPUSet(2*i, 2*i+1), 1, 0))
		}
		return jr
	}
	hgxWithClique := hgxCluster(16, 8, 1)
	hgxWithClique.Levels = append([]topology.Level{{Name: "clique", LabelKey: cliqueKey, NVLink: true}}, hgxWithClique.Levels...)
	tests := []struct {
		name                string
		cluster             Cluster
		jobs                []JobRun
		wantLeaf, wantNVL   *float64
		wantOneLeaf, wantNV int
	}{
		{
			name:    "GB200: one rack, two racks, one tray",
			cluster: gb200Cluster(),
			jobs: []JobRun{
				gang("rack", "r0-00", "r0-05"), gang("racks", "r0-01", "r1-01"), gang("tray", "r1-02"),
				gang("two-pods-one-tray", "r1-03", "r1-03"),
			},
			// Multi-pod: rack, racks, two-pods-one-tray. The tray pair is in
			// one leaf and one clique.
			wantLeaf: ptr(2.0 / 3), wantNVL: ptr(2.0 / 3), wantOneLeaf: 2, wantNV: 2,
		},
		{
			name:     "HGX with a declared clique level no node has",
			cluster:  hgxWithClique,
			jobs:     []JobRun{gang("leaf", "n00", "n01"), gang("spine", "n00", "n08")},
			wantLeaf: ptr(0.5), wantNVL: ptr(0.0), wantOneLeaf: 1,
		},
		{
			name:     "no NVLink level: n/a",
			cluster:  hgxCluster(16, 8, 1),
			jobs:     []JobRun{gang("leaf", "n00", "n01")},
			wantLeaf: ptr(1.0), wantOneLeaf: 1,
		},
		{
			name:    "no multi-node jobs: n/a",
			cluster: gb200Cluster(),
			jobs:    []JobRun{gang("tray", "r0-00")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Summarize(tc.cluster, Run{Scheduler: "test", Start: at(0), End: at(10), Jobs: tc.jobs})
			mustNoError(t, err)
			type shares struct {
				Leaf, NVLink       *float64
				OneLeaf, OneNVLink int
			}
			want := shares{tc.wantLeaf, tc.wantNVL, tc.wantOneLeaf, tc.wantNV}
			if diff := cmp.Diff(want, shares{got.OneLeafShare, got.OneNVLinkDomainShare, got.OneLeafJobs, got.OneNVLinkDomainJobs}); diff != "" {
				t.Errorf("shares (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestTraceTimeMetrics(t *testing.T) {
	// 2 HGX nodes (16 GPUs), observed for 100 s of replay.
	c := hgxCluster(2, 8, 1)
	type metrics struct {
		JCTMean, JCTP50, JCTP99           *float64
		Incomplete                        int
		GPUHours, Useful, Waste, Makespan float64
		UsefulUtil, WasteShare            *float64
	}
	gang := func(bindA, bindB, finish float64) JobRun {
		jr := JobRun{Job: job("g", 2, 8), Submitted: at(0), Pods: []PodRun{pod("g-0", "n00", all8, bindA, finish), pod("g-1", "n01", all8, bindB, finish)}}
		if finish > 0 {
			jr.Finished = at(finish)
		}
		return jr
	}
	tests := []struct {
		name        string
		compression float64
		jobs        []JobRun
		want        metrics
	}{
		{
			name: "a whole gang, uncompressed", compression: 1, jobs: []JobRun{gang(10, 10, 70)},
			// 16 GPUs for 60 s, all useful; 960 of 1600 GPU-seconds.
			want: metrics{JCTMean: ptr(70.0), JCTP50: ptr(70.0), JCTP99: ptr(70.0), GPUHours: 960.0 / 3600, Useful: 960.0 / 3600,
				Makespan: 70, UsefulUtil: ptr(0.6), WasteShare: ptr(0.0)},
		},
		{
			name: "the same gang at 60x", compression: 60, jobs: []JobRun{gang(10, 10, 70)},
			// Trace time: 70 min JCT, 16 GPU-hours; shares do not change.
			want: metrics{JCTMean: ptr(4200.0), JCTP50: ptr(4200.0), JCTP99: ptr(4200.0), GPUHours: 16, Useful: 16,
				Makespan: 4200, UsefulUtil: ptr(0.6), WasteShare: ptr(0.0)},
		},
		{
			name: "a compression below 1 counts as 1", compression: 0.5, jobs: []JobRun{gang(10, 10, 70)},
			want: metrics{JCTMean: ptr(70.0), JCTP50: ptr(70.0), JCTP99: ptr(70.0), GPUHours: 960.0 / 3600, Useful: 960.0 / 3600,
				Makespan: 70, UsefulUtil: ptr(0.6), WasteShare: ptr(0.0)},
		},
		{
			name: "a pod waiting 20 s for its gang wastes them", compression: 1, jobs: []JobRun{gang(10, 30, 70)},
			// 8·60 + 8·40 held, 16·40 useful.
			want: metrics{JCTMean: ptr(70.0), JCTP50: ptr(70.0), JCTP99: ptr(70.0), GPUHours: 800.0 / 3600, Useful: 640.0 / 3600, Waste: 160.0 / 3600,
				Makespan: 70, UsefulUtil: ptr(0.4), WasteShare: ptr(0.1)},
		},
		{
			name: "a half-placed gang holds its GPUs to the end and never completes", compression: 1, jobs: []JobRun{gang(10, -1, 0)},
			want: metrics{Incomplete: 1, GPUHours: 720.0 / 3600, Waste: 720.0 / 3600, Makespan: 100, UsefulUtil: ptr(0.0), WasteShare: ptr(0.45)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run := Run{Scheduler: "test", Start: at(0), End: at(100), TimeCompression: tc.compression, Jobs: tc.jobs}
			for i := range run.Jobs {
				if p := &run.Jobs[i].Pods[1]; p.Bound.Before(at(0)) {
					*p = unbound(p.Name)
				}
			}
			got, err := Summarize(c, run)
			mustNoError(t, err)
			gotM := metrics{got.JCTMeanSeconds, got.JCTP50Seconds, got.JCTP99Seconds, got.IncompleteJobs,
				got.GPUHours, got.UsefulGPUHours, got.WasteGPUHours, got.MakespanTraceSeconds, got.UsefulUtilization, got.WasteShare}
			if diff := cmp.Diff(tc.want, gotM, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("trace-time metrics (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestSummarizeUsesTheFirstBoundPods(t *testing.T) {
	// A replacement pod bound later on another leaf does not change the
	// placement the gang was admitted with.
	c := hgxCluster(16, 8, 2)
	run := Run{Scheduler: "test", Start: at(0), End: at(100), Jobs: []JobRun{{
		Job: job("r", 2, 8), Submitted: at(0), Pods: []PodRun{
			pod("r-0", "n00", all8, 1, 0), pod("r-1", "n01", all8, 2, 0), pod("r-1-retry", "n09", all8, 50, 0),
		},
	}}}
	got, err := Summarize(c, run)
	mustNoError(t, err)
	// The replacement's GPU time is held, not useful: 8·99 + 8·98 + 8·50
	// held, 8·98·2 from the full bind at 2 s.
	want := JobResult{ID: "r", GPUs: 16, Replicas: 2, PodsBound: 3, WaitSeconds: ptr(2.0), Efficiency: ptr(1.0), Domain: "spine=spine-0/leaf=leaf-0",
		GPUHours: 1976.0 / 3600, UsefulGPUHours: 1568.0 / 3600}
	if diff := cmp.Diff([]JobResult{want}, got.PerJob); diff != "" {
		t.Errorf("PerJob (-want,+got):\n%s", diff)
	}
}

func TestSummarizeErrors(t *testing.T) {
	c := hgxCluster(2, 8, 1)
	valid := JobRun{Job: job("a", 1, 1), Submitted: at(0)}
	tests := []struct {
		name    string
		cluster Cluster
		run     Run
		want    string
	}{
		{"no start", c, Run{Scheduler: "x", End: at(1)}, "run of x: start 0001-01-01 00:00:00 +0000 UTC and end"},
		{"end before start", c, Run{Scheduler: "x", Start: at(2), End: at(1)}, "want a start and an end not before it"},
		{"bad cluster", Cluster{Name: "none"}, Run{Scheduler: "x", Start: at(0), End: at(1)}, `cluster "none" has no nodes`},
		{"invalid job", c, Run{Scheduler: "x", Start: at(0), End: at(1), Jobs: []JobRun{{Job: job("a", 0, 1), Submitted: at(0)}}},
			`run of x: job "a": replicas: replicas = 0: a job needs at least 1 pod`},
		{"no submission", c, Run{Scheduler: "x", Start: at(0), End: at(1), Jobs: []JobRun{valid, {Job: job("b", 1, 1)}}},
			"run of x: job b has no submission time"},
		{"bound pod without node", c, Run{Scheduler: "x", Start: at(0), End: at(1), Jobs: []JobRun{{Job: job("a", 1, 1), Submitted: at(0),
			Pods: []PodRun{{Name: "a-0", Bound: at(1)}}}}}, "run of x: job a: pod a-0 has a bind time but no node"},
		{"pod on an unknown node", c, Run{Scheduler: "x", Start: at(0), End: at(1), Jobs: []JobRun{{Job: job("a", 1, 1), Submitted: at(0),
			Pods: []PodRun{pod("a-0", "elsewhere", topology.NewGPUSet(0), 1, 0)}}}}, `run of x: job a: locating the job's nodes: node "elsewhere" is not in the tree`},
		{"GPU out of range", c, Run{Scheduler: "x", Start: at(0), End: at(1), Jobs: []JobRun{{Job: job("a", 1, 2), Submitted: at(0),
			Pods: []PodRun{pod("a-0", "n00", topology.NewGPUSet(8, 9), 1, 0)}}}}, "run of x: job a: pod a-0: GPUs {8,9} are not among the 8 GPUs of node n00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Summarize(tc.cluster, tc.run)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Summarize error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// syntheticRun is a run of jobs of the default trace's mix on the 256-GPU
// hgx-32 shape: each job bound a second after submission on consecutive
// nodes, with known GPU sets.
func syntheticRun(jobs int) (Cluster, Run) {
	c := hgxCluster(32, 8, 2)
	trace := GenerateTrace(TraceConfig{Seed: 1, Jobs: jobs, Span: time.Hour, ClusterGPUs: 256})
	run := Run{Scheduler: SchedulerLockstep, Start: t0, End: t0.Add(2 * time.Hour)}
	next := 0
	for _, j := range trace {
		submitted := t0.Add(j.Submit)
		jr := JobRun{Job: j, Submitted: submitted, Finished: submitted.Add(time.Second + j.Duration)}
		for p := range j.Replicas {
			node := c.Nodes[next%len(c.Nodes)].Name
			next++
			jr.Pods = append(jr.Pods, PodRun{
				Name: fmt.Sprintf("%s-%d", j.ID, p), Node: node, GPUs: topology.AllGPUs(j.GPUsPerReplica),
				Bound: submitted.Add(time.Second), Finished: jr.Finished,
			})
		}
		run.Jobs = append(run.Jobs, jr)
	}
	for s := range 7200 {
		run.Utilization = append(run.Utilization, Sample{At: t0.Add(time.Duration(s) * time.Second), BusyGPUs: s % 257})
	}
	return c, run
}

func TestSummarizeSyntheticRun(t *testing.T) {
	c, run := syntheticRun(1000)
	got, err := Summarize(c, run)
	mustNoError(t, err)
	if got.Jobs != 1000 || got.FullyBoundJobs != 1000 || got.DeadlockedGangs != 0 || got.PartialGangs != 0 || got.MakespanIncomplete {
		t.Errorf("Summarize = %+v, want 1000 complete jobs", cmp.Diff(Result{}, got, cmpopts.IgnoreFields(Result{}, "PerJob", "Utilization")))
	}
	if got.EfficiencyMean == nil || *got.EfficiencyMean <= 0 || *got.EfficiencyMean > 1 {
		t.Errorf("EfficiencyMean = %v, want in (0, 1]", got.EfficiencyMean)
	}
}

func BenchmarkSummarize(b *testing.B) {
	for _, jobs := range []int{1000} {
		c, run := syntheticRun(jobs)
		b.Run(fmt.Sprintf("jobs=%d", jobs), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Summarize(c, run); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestBindProgress(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(secs ...float64) []time.Time {
		var out []time.Time
		for _, s := range secs {
			out = append(out, start.Add(time.Duration(s*float64(time.Second))))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		binds []time.Time
		want  []float64
	}{
		{"none", nil, nil},
		{"one", at(3), []float64{3, 3, 3, 3, 3, 3, 3, 3, 3, 3}},
		{"twenty, unordered", at(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1),
			[]float64{2, 4, 6, 8, 10, 12, 14, 16, 18, 20}},
		{"five", at(1, 2, 3, 4, 5), []float64{1, 1, 2, 2, 3, 3, 4, 4, 5, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, BindProgress(tc.binds, start)); diff != "" {
				t.Errorf("BindProgress (-want,+got):\n%s", diff)
			}
		})
	}
}
