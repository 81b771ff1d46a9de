package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/lockstep-dev/lockstep/internal/perf"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
)

// inProcessRun is the scale run of package perf: kube-scheduler and
// Lockstep alternately bind the burst of gangs in this process against an
// apiserver with the model's nodes, o.inProcessRounds times each. With
// o.cpuProfile set, the whole run is CPU-profiled.
func inProcessRun(ctx context.Context, o options, root string) (*bench.InProcessResult, error) {
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
	res, err := perf.Measure(ctx, perf.Config{
		Root: root, Model: model, Gangs: o.scaleGangs, GPUsPerPod: scaleGPUsPerPod,
		Rounds: o.inProcessRounds, Timeout: o.timeout, Log: say,
		Bound: func(sched string, round int) {
			if o.memProfile == "" {
				return
			}
			path := fmt.Sprintf("%s.%s.%d", o.memProfile, sched, round)
			if err := writeHeapProfile(path); err != nil {
				say("heap profile %s: %v", path, err)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	res.Model = o.inProcessModel
	for _, sched := range perf.Schedulers {
		rate, heap, n := res.Median(sched)
		say("%s: median of %d rounds %.1f pods/s, peak heap +%d MiB", sched, n, rate, heap>>20)
	}
	return res, nil
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
