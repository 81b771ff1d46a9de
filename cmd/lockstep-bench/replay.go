package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// replayOptions say how one trace replay runs and when it stops.
type replayOptions struct {
	root, model string
	// logDir receives the cluster's logs when a replay fails.
	logDir string
	// stall ends a replay when nothing was submitted, bound or finished for
	// this long while no complete gang runs: what is left waits forever.
	stall   time.Duration
	timeout time.Duration
	// progressEvery is how often a progress line is printed.
	progressEvery time.Duration
	// runtime gives released gangs their runtime on their placement.
	runtime *bench.RuntimeModel
	// compression is the factor the jobs were compressed by, recorded in
	// the run for its trace-time metrics.
	compression float64
	// driver is how the jobs ask for GPUs (jobObjects): bench.GPUDriverDRA
	// for a model whose GPUs NVIDIA's DRA driver serves; otherwise
	// nvidia.com/gpu, from the device plugin.
	driver string
	// profileDir, when set, receives what each scale run's scheduler says
	// of its memory at its first bind and its last (saveProfiles).
	profileDir string
}

// replay runs jobs (already time-compressed) against sched on a fresh local
// cluster and returns what it observed. The cluster is removed afterwards.
func replay(ctx context.Context, o replayOptions, sched scheduler, jobs []bench.Job) (run bench.Run, err error) {
	begin := time.Now()
	label := sched.Name
	if o.driver == bench.GPUDriverDRA {
		label += " DRA"
	}
	say := func(format string, args ...any) {
		fmt.Printf("[%s %5.0fs] %s\n", label, time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	say("starting a fresh cluster from %s", o.model)
	c, err := startCluster(ctx, o.root, o.model, &sched, bench.UsedPriorityClasses(jobs))
	if err != nil {
		return run, err
	}
	defer func() {
		if err != nil {
			dir := filepath.Join(o.logDir, sched.Name)
			if saveErr := c.SaveArtifacts(dir); saveErr == nil {
				err = fmt.Errorf("%w (logs: %s)", err, dir)
			}
		}
		err = errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
	}()
	say("cluster up: %d nodes, topology published, %s running", c.Model.NodeCount(), sched.Name)

	obs := newObserver(c.Clientset, c.Client, benchNamespace, len(jobs), true, o.runtime)
	obs.claimedGPUs = o.driver == bench.GPUDriverDRA
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := obs.start(runCtx); err != nil {
		return run, err
	}

	start := time.Now()
	submitErr := make(chan error, 1)
	go func() { submitErr <- submit(runCtx, c, obs, jobs, start, o.compression, o.driver) }()

	var samples []bench.Sample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastReport := time.Now()
	deadline := start.Add(o.timeout)
	submitting := true
	for {
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case err := <-submitErr:
			if err != nil {
				return run, err
			}
			submitting = false
			continue
		case now := <-tick.C:
			p := obs.progress()
			samples = append(samples, bench.Sample{At: now, BusyGPUs: p.busyGPUs})
			if p.releaseErr != nil {
				return run, p.releaseErr
			}
			if now.Sub(lastReport) >= o.progressEvery {
				say("%d/%d submitted, %d finished, %d running, %d waiting, %d GPUs busy, %d pods evicted", p.submitted, len(jobs), p.finished, p.running, p.waiting, p.busyGPUs, p.evictedPods)
				lastReport = now
			}
			if err := obs.fillGPUs(ctx, c.Client); err != nil {
				return run, err
			}
			switch {
			case submitting:
				continue
			case p.finished == len(jobs):
				say("every job finished")
			case p.releasedUnfinished == 0 && now.Sub(p.lastProgress) >= o.stall:
				say("stopping: %d jobs cannot make progress (nothing bound or finished for %s and no complete gang running)", p.waiting, o.stall)
			case now.After(deadline):
				say("stopping: timeout %s reached with %d jobs unfinished", o.timeout, len(jobs)-p.finished)
			default:
				continue
			}
			cancel()
			run := obs.run(sched.Name, start, now, samples)
			run.TimeCompression = o.compression
			// A lost plan time leaves a cell of the report empty; it is
			// no reason to throw the replay away.
			planTime, scrapeErr := scrapePlanTime(ctx, c)
			if scrapeErr != nil {
				say("plan time not read: %v", scrapeErr)
			}
			run.PlanTime = planTime
			return run, nil
		}
	}
}

// startCluster brings up a fresh local cluster of model with the fake
// topology agent, the priority classes and, when sched is given, the
// controller giving pods sched's name and sched itself.
func startCluster(ctx context.Context, root, model string, sched *scheduler, classes []bench.PriorityClass) (c *localcluster.Cluster, err error) {
	// The benchmarks never darken nodes; the scale models need the longer
	// grace on a small machine.
	c, err = localcluster.Start(ctx, localcluster.Options{RepoRoot: root, Model: model,
		NodeMonitorGracePeriod: localcluster.ScaleNodeMonitorGracePeriod})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
		}
	}()
	// Large models take a while to turn Ready and to get their topology;
	// the node lifecycle clears new nodes' not-ready taints on its slower
	// monitor period (ScaleNodeMonitorGracePeriod's heartbeats), which on
	// a loaded machine (the e2e suite's replay test beside the other
	// shards) has taken over a minute for 32 nodes.
	wait := 3*time.Minute + time.Duration(c.Model.NodeCount())*150*time.Millisecond
	if err := c.WaitNodesReady(ctx, wait); err != nil {
		return c, err
	}
	components := []func() (localcluster.Component, error){c.FakeAgentComponent}
	if sched != nil {
		// The node-critical DaemonSet's pods are the default scheduler's,
		// as on a real cluster; when the stock kube-scheduler is the one
		// under test, it is that scheduler.
		if sched.PodSchedulerName != localcluster.DefaultSchedulerName {
			components = append(components, c.DefaultSchedulerComponent)
		}
		components = append(components,
			func() (localcluster.Component, error) { return c.ControllerComponentFor(sched.PodSchedulerName) },
			func() (localcluster.Component, error) { return sched.component(c) })
	}
	for _, describe := range components {
		comp, err := describe()
		if err != nil {
			return c, err
		}
		if _, err := c.StartComponent(ctx, comp); err != nil {
			return c, err
		}
	}
	if err := c.WaitTopologyPublished(ctx, wait); err != nil {
		return c, err
	}
	if sched != nil {
		// Every run starts where a real cluster is: node-critical pods,
		// which outrank every job, on every node before the first job.
		if err := c.WaitNodeCritical(ctx, wait); err != nil {
			return c, err
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}
	if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return c, fmt.Errorf("creating namespace %s: %w", benchNamespace, err)
	}
	for _, pc := range classes {
		if err := c.Client.Create(ctx, priorityClass(pc)); err != nil {
			return c, fmt.Errorf("creating PriorityClass %s: %w", pc.Name, err)
		}
	}
	return c, nil
}

// submit creates each job's objects (jobObjects) at its submit time after
// start; compression is the jobs' (trainingJob), driver how they ask for
// GPUs.
func submit(ctx context.Context, c *localcluster.Cluster, obs *observer, jobs []bench.Job, start time.Time, compression float64, driver string) error {
	for _, j := range jobs {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(start.Add(j.Submit))):
		}
		obs.submitted(j, time.Now())
		for _, obj := range jobObjects(j, compression, driver) {
			if err := c.Client.Create(ctx, obj); err != nil {
				return fmt.Errorf("submitting job %s: creating %T %s: %w", j.ID, obj, obj.GetName(), err)
			}
		}
	}
	return nil
}
