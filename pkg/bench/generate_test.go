package bench

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files and test/e2e/traces/default.csv")

const (
	defaultTracePath = "../../test/e2e/traces/default.csv"
	smokeTracePath   = "../../test/e2e/traces/smoke.csv"
)

// defaultTraceComment heads the committed default trace.
const defaultTraceComment = `# The default lockstep-bench trace: 150 jobs over one hour for the 256 GPUs
# of test/e2e/models/hgx-32.yaml. Generated from bench.DefaultTraceConfig;
# do not edit: regenerate with
#   go test ./pkg/bench -run TestDefaultTraceIsGenerated -update
# docs/benchmarks.md explains the mix.
`

func TestDefaultTraceIsGenerated(t *testing.T) {
	var want bytes.Buffer
	want.WriteString(defaultTraceComment)
	mustNoError(t, WriteTrace(&want, GenerateTrace(DefaultTraceConfig())))
	if *update {
		mustNoError(t, os.WriteFile(defaultTracePath, want.Bytes(), 0o644))
	}
	got, err := os.ReadFile(defaultTracePath)
	mustNoError(t, err)
	if diff := cmp.Diff(want.String(), string(got)); diff != "" {
		t.Errorf("%s is not what DefaultTraceConfig generates; run go test ./pkg/bench -run TestDefaultTraceIsGenerated -update (-want,+got):\n%s", defaultTracePath, diff)
	}
	if _, err := ParseTrace(bytes.NewReader(got)); err != nil {
		t.Errorf("ParseTrace(%s): %v", defaultTracePath, err)
	}
}

func TestGenerateTraceIsDeterministic(t *testing.T) {
	cfg := DefaultTraceConfig()
	first := GenerateTrace(cfg)
	if diff := cmp.Diff(first, GenerateTrace(cfg)); diff != "" {
		t.Errorf("two traces of one seed differ (-first,+second):\n%s", diff)
	}
	cfg.Seed++
	if cmp.Equal(first, GenerateTrace(cfg)) {
		t.Error("traces of two seeds are equal")
	}
}

func TestDefaultTraceShape(t *testing.T) {
	cfg := DefaultTraceConfig()
	jobs := GenerateTrace(cfg)
	sizes := map[int]int{}
	constraints := map[string]int{}
	var gpuHours, bigGPUHours float64
	for i, j := range jobs {
		mustNoError(t, j.Validate())
		sizes[j.GPUs()]++
		if j.Topology != nil {
			constraints[j.Topology.Level+":"+j.Topology.Mode]++
			if j.Replicas < 2 {
				t.Errorf("%s: a single-pod job has a constraint", j.ID)
			}
			if j.Topology.Mode == ModeRequired && j.GPUs() > cfg.ConstraintLevelGPUs {
				t.Errorf("%s: Required on %d GPUs, more than a leaf's %d", j.ID, j.GPUs(), cfg.ConstraintLevelGPUs)
			}
		}
		if j.GPUs() > 8 && (j.GPUsPerReplica != 8 || j.Replicas*8 != j.GPUs()) {
			t.Errorf("%s: %d×%d GPUs, want whole 8-GPU pods", j.ID, j.Replicas, j.GPUsPerReplica)
		}
		if j.Submit < 0 || j.Submit > cfg.Span || j.Duration < cfg.MinDuration || j.Duration > cfg.MaxDuration {
			t.Errorf("%s: submit %v, duration %v out of the configured ranges", j.ID, j.Submit, j.Duration)
		}
		if i > 0 && jobs[i-1].Submit > j.Submit {
			t.Errorf("%s is submitted before %s", j.ID, jobs[i-1].ID)
		}
		h := float64(j.GPUs()) * j.Duration.Hours()
		gpuHours += h
		if j.GPUs() >= 16 {
			bigGPUHours += h
		}
	}
	// Largest-remainder quotas of the configured shares, exactly.
	wantSizes := map[int]int{1: 81, 2: 12, 4: 12, 8: 18, 16: 9, 32: 8, 64: 4, 128: 4, 256: 2}
	if diff := cmp.Diff(wantSizes, sizes); diff != "" {
		t.Errorf("jobs per GPU count (-want,+got):\n%s", diff)
	}
	if n := constraints["leaf:Required"] + constraints["leaf:Preferred"]; n < 4 || n > 20 || constraints["leaf:Required"] == 0 || constraints["leaf:Preferred"] == 0 {
		t.Errorf("constraints %v: want a few of each mode", constraints)
	}
	// Multi-node gangs are a small share of the jobs but most of the GPU time,
	// and the offered load is of the order of the cluster's capacity.
	if share := bigGPUHours / gpuHours; share < 0.6 {
		t.Errorf("gangs of 16+ GPUs have %.0f%% of the GPU time, want most", 100*share)
	}
	if load := gpuHours / (256 * cfg.Span.Hours()); load < 0.5 || load > 1.5 {
		t.Errorf("offered load %.2f of the cluster's capacity over the span, want 0.5 to 1.5", load)
	}
}

func TestGenerateTraceConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   TraceConfig
		check func(t *testing.T, jobs []Job)
	}{
		{
			name: "no jobs",
			cfg:  TraceConfig{Seed: 1},
			check: func(t *testing.T, jobs []Job) {
				if len(jobs) != 0 {
					t.Errorf("got %d jobs, want none", len(jobs))
				}
			},
		},
		{
			name: "sizes capped by the cluster, defaults filled in, no constraints",
			cfg:  TraceConfig{Seed: 7, Jobs: 1000, Span: time.Hour, ClusterGPUs: 32},
			check: func(t *testing.T, jobs []Job) {
				if len(jobs) != 1000 || jobs[0].ID != "job-000" || jobs[999].ID != "job-999" {
					t.Fatalf("got %d jobs from %s to %s, want job-000 to job-999", len(jobs), jobs[0].ID, jobs[len(jobs)-1].ID)
				}
				for _, j := range jobs {
					if j.GPUs() > 32 || j.Topology != nil {
						t.Fatalf("%s: %d GPUs, constraint %v; want at most 32 GPUs and no constraint", j.ID, j.GPUs(), j.Topology)
					}
				}
			},
		},
		{
			name: "custom sizes and node size",
			cfg: TraceConfig{Seed: 3, Jobs: 10, Span: time.Minute, GPUsPerNode: 4, Sizes: []SizeShare{{GPUs: 12, Share: 1}},
				ConstraintLevel: "rack", ConstraintLevelGPUs: 16, RequiredShare: 1},
			check: func(t *testing.T, jobs []Job) {
				for _, j := range jobs {
					if j.Replicas != 3 || j.GPUsPerReplica != 4 || j.Topology == nil || *j.Topology != (Constraint{Level: "rack", Mode: ModeRequired}) {
						t.Fatalf("%+v: want 3×4 GPUs, rack:Required", j)
					}
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, GenerateTrace(tc.cfg))
		})
	}
}

func TestSizeQuotas(t *testing.T) {
	tests := []struct {
		name   string
		shares []SizeShare
		cap    int
		jobs   int
		want   []int
	}{
		{"exact", []SizeShare{{1, 0.5}, {8, 0.5}}, 0, 4, []int{1, 1, 8, 8}},
		{"largest remainder", []SizeShare{{1, 0.55}, {2, 0.3}, {4, 0.15}}, 0, 4, []int{1, 1, 2, 4}},
		{"equal remainders go to the smaller size", []SizeShare{{1, 0.6}, {2, 0.3}, {4, 0.1}}, 0, 4, []int{1, 1, 1, 2}},
		{"unsorted shares", []SizeShare{{8, 1}, {1, 1}}, 0, 3, []int{1, 1, 8}},
		{"cap drops sizes and renormalises", []SizeShare{{1, 1}, {512, 10}}, 256, 2, []int{1, 1}},
		{"nothing fits: one GPU each", []SizeShare{{512, 1}}, 256, 2, []int{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, sizeQuotas(tc.shares, tc.cap, tc.jobs)); diff != "" {
				t.Errorf("sizeQuotas (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestSmokeTrace(t *testing.T) {
	f, err := os.Open(filepath.FromSlash(smokeTracePath))
	mustNoError(t, err)
	defer f.Close()
	jobs, err := ParseTrace(f)
	mustNoError(t, err)
	shapes := map[[2]int]int{}
	gpus := 0
	for _, j := range jobs {
		shapes[[2]int{j.Replicas, j.GPUsPerReplica}]++
		gpus += j.GPUs()
		// Each job outlives the agent's 10 s read interval (so the agent
		// reports its GPUs, as it would a real job's), and the trace
		// ends within about 40 s.
		if j.Submit > 20*time.Second || j.Duration > 20*time.Second || j.Duration <= 10*time.Second {
			t.Errorf("%s: submitted at %v for %v; the smoke trace's jobs must run 10-20 s and start within 20 s", j.ID, j.Submit, j.Duration)
		}
	}
	if gpus > 256 {
		t.Errorf("the smoke jobs need %d GPUs together, more than the 256 of hgx-32", gpus)
	}
	for shape, want := range map[[2]int]int{{2, 8}: 2, {1, 1}: 2, {4, 8}: 1} {
		if shapes[shape] != want {
			t.Errorf("%d jobs of %d×%d GPUs, want %d", shapes[shape], shape[0], shape[1], want)
		}
	}
}

const priorityTracePath = "../../test/e2e/traces/priority.csv"

// priorityTraceComment heads the committed priority trace.
const priorityTraceComment = `# The priority lockstep-bench trace: bench-low gangs that keep the 256 GPUs
# of test/e2e/models/hgx-32-oversubscribed.yaml full, and bench-high gangs
# arriving while they do. Generated from bench.DefaultPriorityTraceConfig;
# do not edit: regenerate with
#   go test ./pkg/bench -run TestPriorityTraceIsGenerated -update
# docs/benchmarks.md explains the mix.
`

func TestPriorityTraceIsGenerated(t *testing.T) {
	var want bytes.Buffer
	want.WriteString(priorityTraceComment)
	mustNoError(t, WriteTrace(&want, GeneratePriorityTrace(DefaultPriorityTraceConfig())))
	if *update {
		mustNoError(t, os.WriteFile(priorityTracePath, want.Bytes(), 0o644))
	}
	got, err := os.ReadFile(priorityTracePath)
	mustNoError(t, err)
	if diff := cmp.Diff(want.String(), string(got)); diff != "" {
		t.Errorf("%s is not what DefaultPriorityTraceConfig generates; run go test ./pkg/bench -run TestPriorityTraceIsGenerated -update (-want,+got):\n%s", priorityTracePath, diff)
	}
	if _, err := ParseTrace(bytes.NewReader(got)); err != nil {
		t.Errorf("ParseTrace(%s): %v", priorityTracePath, err)
	}
}

// TestPriorityTraceShape checks what the priority trace is for: the low
// class alone more than fills the cluster until after the last high gang
// arrives, so every high gang finds it full, and the high gangs are the
// few leaf-constrained gangs the issue names.
func TestPriorityTraceShape(t *testing.T) {
	const clusterGPUs = 256
	cfg := DefaultPriorityTraceConfig()
	jobs := GeneratePriorityTrace(cfg)
	byClass := map[string]int{}
	highShapes := map[string]int{}
	var lowGPUSeconds float64
	var lastHigh time.Duration
	for i, j := range jobs {
		mustNoError(t, j.Validate())
		byClass[j.Priority]++
		if i > 0 && jobs[i-1].Submit > j.Submit {
			t.Errorf("%s is submitted before %s", j.ID, jobs[i-1].ID)
		}
		switch j.Priority {
		case PriorityLow:
			lowGPUSeconds += float64(j.GPUs()) * j.Duration.Seconds()
		case PriorityHigh:
			lastHigh = max(lastHigh, j.Submit)
			if j.Topology == nil || j.Topology.Level != "leaf" {
				t.Errorf("%s: high gang without a leaf constraint", j.ID)
				continue
			}
			highShapes[fmt.Sprintf("%dx%d %s", j.Replicas, j.GPUsPerReplica, j.Topology.Mode)]++
		}
	}
	if diff := cmp.Diff(map[string]int{PriorityLow: 40, PriorityHigh: 6}, byClass); diff != "" {
		t.Errorf("jobs per class (-want,+got):\n%s", diff)
	}
	if n := highShapes["4x8 Required"] + highShapes["4x8 Preferred"]; n != 4 {
		t.Errorf("high gangs %v: want four of 4×8", highShapes)
	}
	if n := highShapes["2x8 Required"] + highShapes["2x8 Preferred"]; n != 2 {
		t.Errorf("high gangs %v: want two of 2×8", highShapes)
	}
	if highShapes["4x8 Required"]+highShapes["2x8 Required"] == 0 || highShapes["4x8 Preferred"]+highShapes["2x8 Preferred"] == 0 {
		t.Errorf("high gangs %v: want both modes", highShapes)
	}
	// Even packed perfectly from time 0, the low work keeps every GPU busy
	// past the last high submission.
	if busyUntil := time.Duration(lowGPUSeconds / clusterGPUs * float64(time.Second)); busyUntil < lastHigh+10*time.Minute {
		t.Errorf("the low work fills the cluster for %v, want beyond the last high gang's arrival at %v", busyUntil, lastHigh)
	}
}
