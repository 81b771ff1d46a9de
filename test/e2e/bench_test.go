package e2e

import (
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// TestSimulatedRuntimeEndsJob checks the KWOK stage the benchmark relies on:
// pods annotated with a simulated runtime succeed that long after they
// start, so the job succeeds with nothing patching pod status.
func TestSimulatedRuntimeEndsJob(t *testing.T) {
	t.Parallel()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "timed", 1)
	for role, spec := range job.Spec.ReplicaSpecs {
		spec.Template.Annotations = map[string]string{lockstep.AnnotationSimulatedRuntime: "3s"}
		job.Spec.ReplicaSpecs[role] = spec
	}
	createJob(t, job)

	pods := waitPods(t, ns, job.Name, 2, 30*time.Second)
	var started time.Time
	for _, p := range pods {
		if p.Status.StartTime != nil && p.Status.StartTime.After(started) {
			started = p.Status.StartTime.Time
		}
	}
	done := waitJob(t, ns, job.Name, 40*time.Second, "job Succeeded", hasCondition(v1alpha1.JobSucceeded, ""))
	// A PyTorch job succeeds when its master does; the worker started a
	// moment later, so it may still be running for that moment.
	var finished map[string]corev1.Pod
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, 10*time.Second, "every pod of the job ended", func(ctx context.Context) (bool, error) {
		var err error
		if finished, err = jobPodsOf(ctx, ns, job.Name); err != nil {
			return false, nil
		}
		for _, p := range finished {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
	for name, p := range finished {
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s is %s, want Succeeded", name, p.Status.Phase)
		}
		term := p.Status.ContainerStatuses
		if len(term) != 1 || term[0].State.Terminated == nil || term[0].State.Terminated.ExitCode != 0 {
			t.Errorf("pod %s: container statuses %+v, want one terminated with exit code 0", name, term)
			continue
		}
		// Status times have second precision.
		ran := term[0].State.Terminated.FinishedAt.Sub(term[0].State.Terminated.StartedAt.Time)
		if ran < 2*time.Second {
			t.Errorf("pod %s ran %s, want about its simulated 3s", name, ran)
		}
	}
	t.Logf("job %s succeeded %s after its last pod started", done.Name, time.Since(started).Round(time.Second))
}

// TestBenchReplaysTraceOnEveryScheduler runs make bench's command on the
// smoke trace: three fresh clusters, one per scheduler, each replaying the
// same jobs. Every scheduler must account for every job, the report and
// plots must be written, Lockstep must place every gang whole and inside
// one leaf, every job must run at least its trace duration times the
// slowdown the runtime model gave its placement, and a two-value
// preferredWait sweep must land in the report.
func TestBenchReplaysTraceOnEveryScheduler(t *testing.T) {
	root := cluster.RepoRoot
	trace := filepath.Join(root, "test", "e2e", "traces", "smoke.csv")
	out := t.TempDir()
	// Five fresh clusters (three schedulers, two sweep points) take about
	// 7 minutes beside the other shards; on a loaded 2-core machine each
	// cluster's start alone has taken 100 s.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "lockstep-bench"),
		"--bin", filepath.Join(root, "bin"),
		"--model", filepath.Join(root, "test", "e2e", "models", "hgx-32-oversubscribed.yaml"),
		"--trace", trace, "--time-compression", "1", "--stall", "20s", "--timeout", "3m", "--out", out,
		"--sweep-preferred-wait", "0s,5s")
	cmd.Dir = root
	output, err := cmd.CombinedOutput()
	t.Logf("lockstep-bench output:\n%s", output)
	if err != nil {
		t.Fatalf("lockstep-bench: %v", err)
	}

	f, err := os.Open(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	report, err := bench.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	traceFile, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer traceFile.Close()
	jobs, err := bench.ParseTrace(traceFile)
	if err != nil {
		t.Fatal(err)
	}

	var names []string
	for _, r := range report.Results {
		names = append(names, r.Scheduler)
		if r.Jobs != len(jobs) || len(r.PerJob) != len(jobs) {
			t.Errorf("%s: %d jobs (%d per-job rows), want the trace's %d", r.Scheduler, r.Jobs, len(r.PerJob), len(jobs))
		}
		// The smoke trace fits the cluster at once: every scheduler finishes it.
		if r.FinishedJobs != len(jobs) || r.MakespanIncomplete {
			t.Errorf("%s: %d of %d jobs finished (makespan incomplete: %v)", r.Scheduler, r.FinishedJobs, len(jobs), r.MakespanIncomplete)
		}
		if r.EfficiencyMean == nil || *r.EfficiencyMean <= 0 || *r.EfficiencyMean > 1 {
			t.Errorf("%s: efficiency mean %v, want one in (0, 1]", r.Scheduler, r.EfficiencyMean)
		}
		if r.UnmodelledJobs != 0 {
			t.Errorf("%s: %d jobs without known GPU sets; the agent's allocations should give every one", r.Scheduler, r.UnmodelledJobs)
		}
		if r.PodsPerSecond == nil || *r.PodsPerSecond <= 0 {
			t.Errorf("%s: pods per second %v, want a positive rate", r.Scheduler, r.PodsPerSecond)
		}
		if r.JCTMeanSeconds == nil || r.JCTP99Seconds == nil || r.IncompleteJobs != 0 {
			t.Errorf("%s: JCT mean %v, p99 %v, %d incomplete; want JCTs of every job", r.Scheduler, r.JCTMeanSeconds, r.JCTP99Seconds, r.IncompleteJobs)
		}
		if r.GPUHours <= 0 || r.UsefulGPUHours <= 0 || r.UsefulGPUHours > r.GPUHours || r.UsefulUtilization == nil {
			t.Errorf("%s: %v GPU-hours, %v useful (utilization %v); want positive, useful within held", r.Scheduler, r.GPUHours, r.UsefulGPUHours, r.UsefulUtilization)
		}
		byID := map[string]bench.Job{}
		for _, j := range jobs {
			byID[j.ID] = j
		}
		for _, j := range r.PerJob {
			if j.Slowdown == nil || *j.Slowdown < 1 {
				t.Errorf("%s: job %s ran with slowdown %v, want one of at least 1", r.Scheduler, j.ID, j.Slowdown)
				continue
			}
			// Pods end their simulated runtime after the whole gang runs,
			// so submission to finish covers it.
			runtime := byID[j.ID].Duration.Seconds() * *j.Slowdown
			if j.JCTSeconds == nil || *j.JCTSeconds < runtime {
				t.Errorf("%s: job %s completed in %v s, want at least its runtime %.3f s (slowdown %.3f)", r.Scheduler, j.ID, j.JCTSeconds, runtime, *j.Slowdown)
			}
		}
	}
	if want := []string{bench.SchedulerKube, bench.SchedulerCoscheduling, bench.SchedulerLockstep}; !slices.Equal(names, want) {
		t.Fatalf("results for %v, want %v", names, want)
	}
	lockstep := report.Results[2]
	if lockstep.PartialGangs != 0 || lockstep.DeadlockedGangs != 0 || lockstep.NeverFullyBoundJobs != 0 {
		t.Errorf("lockstep: %d partial, %d deadlocked, %d never fully bound gangs; want none",
			lockstep.PartialGangs, lockstep.DeadlockedGangs, lockstep.NeverFullyBoundJobs)
	}
	if lockstep.OneLeafShare == nil || *lockstep.OneLeafShare != 1 {
		t.Errorf("lockstep: share of gangs inside one leaf %v, want 1", lockstep.OneLeafShare)
	}

	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !strings.Contains(string(md), name) {
			t.Errorf("report.md does not mention %s", name)
		}
	}
	if report.Sweep == nil || len(report.Sweep.Points) != 2 {
		t.Errorf("sweep %+v, want points for 0s and 5s", report.Sweep)
	} else {
		for i, want := range []float64{0, 5} {
			p := report.Sweep.Points[i]
			if p.WaitSeconds != want || p.FinishedJobs != len(jobs) || p.GPUHours <= 0 || p.PartialGangs != 0 {
				t.Errorf("sweep point %d: %+v, want preferredWait %v s with every job finished, GPU-hours and no partial gang", i, p, want)
			}
		}
	}
	if !strings.Contains(string(md), "## preferredWait sweep") {
		t.Error("report.md has no preferredWait sweep")
	}
	for _, plot := range []string{bench.EfficiencyPlotFile, bench.WaitPlotFile, bench.UtilizationPlotFile, bench.SweepPlotFile} {
		pf, err := os.Open(filepath.Join(out, plot))
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := png.Decode(pf); err != nil {
			t.Errorf("%s: %v", plot, err)
		}
		pf.Close()
	}
}
