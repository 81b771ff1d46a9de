package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/lockstep-dev/lockstep/internal/perf"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
)

// inProcessBurst is the jobs of o.inProcessBurst on model. The mixed
// burst's gang pods ask for the smallest GPU node's GPUs, so they fit on
// every GPU node of a model with several profiles.
func inProcessBurst(o options, model *clustermodel.Model) ([]bench.BurstJob, error) {
	switch o.inProcessBurst {
	case bench.BurstGangs:
		return bench.GangBurst(o.scaleGangs, scaleGPUsPerPod), nil
	case bench.BurstMixed:
		gpus, _ := nodeGPUs(model)
		return bench.MixedBurst(model.NodeCount(), gpus)
	default:
		return nil, fmt.Errorf("%q: want %s or %s", o.inProcessBurst, bench.BurstGangs, bench.BurstMixed)
	}
}

// inProcessRun is the scale run of package perf: kube-scheduler and
// Lockstep alternately bind the burst of jobs in this process against an
// apiserver with the model's nodes, o.inProcessRounds times each. With
// o.cpuProfile set, the whole run is CPU-profiled; with o.inProcessProfiles,
// each scheduler's run is, into out.
func inProcessRun(ctx context.Context, o options, root, out string, jobs []bench.BurstJob) (*bench.InProcessResult, error) {
	model, err := clustermodel.Load(o.inProcessModel)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("[in-process %5.0fs] %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	cfg := perf.Config{
		Root: root, Model: model, Burst: jobs,
		Rounds: o.inProcessRounds, Timeout: o.timeout, Log: say,
		Bound: func(sched string, round int) {
			var paths []string
			if o.memProfile != "" {
				paths = append(paths, fmt.Sprintf("%s.%s.%d", o.memProfile, sched, round))
			}
			if o.inProcessProfiles {
				paths = append(paths, profilePath(out, "heap", sched, round))
			}
			for _, path := range paths {
				if err := writeHeapProfile(path); err != nil {
					say("heap profile %s: %v", path, err)
				}
			}
		},
	}
	// The whole-run profile (--cpuprofile) holds the process's only CPU
	// profile; runtime/pprof allows no second one beside it.
	if o.inProcessProfiles && o.cpuProfile == "" {
		cfg.Profile = func(sched string, round int) func() {
			path := profilePath(out, "cpu", sched, round)
			stop, err := startCPUProfile(path)
			if err != nil {
				say("CPU profile %s: %v", path, err)
				return func() {}
			}
			return func() {
				if err := stop(); err != nil {
					say("CPU profile %s: %v", path, err)
				}
			}
		}
	}
	res, err := perf.Measure(ctx, cfg)
	if err != nil {
		return nil, err
	}
	res.Model = o.inProcessModel
	res.Burst = o.inProcessBurst
	for _, sched := range perf.Schedulers {
		rate, heap, n := res.Median(sched)
		say("%s: median of %d rounds %.1f pods/s, peak heap +%d MiB", sched, n, rate, heap>>20)
	}
	if o.inProcessProfiles {
		say("profiles in %s; read them with go tool pprof -top %s", out, profilePath(out, "cpu", bench.SchedulerLockstep, 1))
	}
	return res, nil
}

// profilePath is where --inprocess-profiles writes a profile of kind (cpu,
// heap) of one scheduler's run.
func profilePath(dir, kind, sched string, round int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%s-round%d.pprof", kind, sched, round))
}

// startCPUProfile starts a CPU profile into path; stop ends it and closes
// the file.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// writeHeapProfile writes the heap profile (in use and allocated since the
// start) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}
