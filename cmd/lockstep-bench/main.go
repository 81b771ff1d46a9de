// Command lockstep-bench is `make bench`: it replays a job trace on fresh
// local clusters of fake GPU nodes, once per scheduler (the stock
// kube-scheduler, kube-scheduler with scheduler-plugins' Coscheduling, and
// Lockstep), and reports placement quality, gang waits, utilization and
// throughput side by side; then it replays a trace of two priority classes
// the same way, for the high class's waits and what preemption cost; then
// it measures pods bound per second for a burst of gangs on a large
// cluster model. See docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

type options struct {
	model, trace, out, bin string
	schedulers             string
	gpuDrivers             string
	compression            float64
	stall, timeout         time.Duration

	priorityTrace   string
	priorityTimeout time.Duration

	scaleModel      string
	scaleGangs      int
	scaleSchedulers string
	scaleRounds     int

	inProcessModel    string
	inProcessRounds   int
	inProcessBurst    string
	inProcessProfiles bool
	scaleProfiles     bool
	skipReplay        bool
	cpuProfile        string
	memProfile        string
	sweepWaits        string
	// render, when set, only rewrites that results directory's report.
	render string
}

// defaultSweepWaits are the preferredWait values make bench sweeps, in
// trace time: from not waiting to five minutes, about the trace's median
// job duration.
const defaultSweepWaits = "0s,15s,30s,60s,120s,300s"

func main() {
	var o options
	fs := flag.NewFlagSet("lockstep-bench", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: lockstep-bench --model FILE --trace FILE --out DIR [flags]\n\n"+
			"Replays a job trace once per scheduler on fresh local clusters and writes\n"+
			"report.md, results.json and PNG plots to DIR. See docs/benchmarks.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.model, "model", "test/e2e/models/hgx-32-oversubscribed.yaml", "cluster model file of the replay clusters")
	fs.StringVar(&o.trace, "trace", "test/e2e/traces/default.csv", "job trace (CSV, see docs/benchmarks.md)")
	fs.StringVar(&o.out, "out", "_output/bench", "results directory")
	fs.StringVar(&o.bin, "bin", "bin", "directory with our binaries and the tools")
	fs.StringVar(&o.schedulers, "schedulers", "kube-scheduler,coscheduling,lockstep", "schedulers to compare, comma-separated")
	fs.StringVar(&o.gpuDrivers, "gpu-drivers", bench.GPUDriverDevicePlugin, "how the --trace replays' pods get GPUs, comma-separated: "+bench.GPUDriverDevicePlugin+" (the model as written, nvidia.com/gpu) and "+bench.GPUDriverDRA+" (the same model with every pool's GPUs on NVIDIA's DRA driver, each job's replicas claiming theirs through a ResourceClaimTemplate); the DRA replays run after the device-plugin ones, once per --schedulers, for the report's GPU-driver comparison")
	fs.Float64Var(&o.compression, "time-compression", 60, "divide the trace's submit times and durations by this factor")
	fs.DurationVar(&o.stall, "stall", time.Minute, "end a replay when nothing was bound or finished for this long and no complete gang runs")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "longest replay per scheduler")
	fs.StringVar(&o.scaleModel, "scale-model", "", "cluster model of the scale run; empty skips it")
	fs.IntVar(&o.scaleGangs, "scale-gangs", 120, "gang jobs in the scale run's burst")
	fs.StringVar(&o.scaleSchedulers, "scale-schedulers", "kube-scheduler,lockstep", "schedulers of the scale run")
	fs.IntVar(&o.scaleRounds, "scale-rounds", 1, "rounds of the scale run on its one cluster, each running every --scale-schedulers in turn; above 1 the report holds medians and every run")
	fs.BoolVar(&o.scaleProfiles, "scale-profiles", false, "write each scale run's scheduler's heap profile, goroutines, /metrics page and /proc status at its first bind and its last to --out, as kwok-{heap,goroutines,metrics,status}-<scheduler>-round<N>-{first-bind,end}.{pprof,txt} (read from the running scheduler, which costs the run some CPU)")
	fs.StringVar(&o.inProcessModel, "inprocess-model", "", "cluster model of the in-process scale run (internal/perf: schedulers in this process, no KWOK); empty skips it")
	fs.IntVar(&o.inProcessRounds, "inprocess-rounds", 3, "rounds of the in-process scale run, each running kube-scheduler then Lockstep on the --inprocess-burst")
	fs.StringVar(&o.inProcessBurst, "inprocess-burst", bench.BurstGangs, "burst of the in-process scale run: "+bench.BurstGangs+" (--scale-gangs gangs of 16 to 128 GPUs in 8-GPU pods, make bench's) or "+bench.BurstMixed+" (gangs of 8 to 4,096 GPUs in whole-node pods beside single-pod jobs of 1 GPU to a node's, sized to the model)")
	fs.BoolVar(&o.inProcessProfiles, "inprocess-profiles", false, "write a CPU profile of each in-process run (the scheduler's start to its last bind) and a heap profile once it bound every pod to --out, as cpu-<scheduler>-round<N>.pprof and heap-<scheduler>-round<N>.pprof")
	fs.BoolVar(&o.skipReplay, "skip-replay", false, "skip the --trace replays, with every --gpu-drivers (the --priority-trace replay still runs when given)")
	fs.StringVar(&o.priorityTrace, "priority-trace", "", "job trace with priority classes (the priority column) to replay once per scheduler after the --trace replays, for the report's Priorities table; empty skips it")
	fs.DurationVar(&o.priorityTimeout, "priority-timeout", 5*time.Minute, "longest --priority-trace replay per scheduler")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the in-process scale run to this file")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile after each in-process run has bound every pod, to FILE.<scheduler>.<round>")
	fs.StringVar(&o.render, "render", "", "only rewrite report.md and the plots of this results directory from its results.json (after a change of the report's format); runs nothing")
	fs.StringVar(&o.sweepWaits, "sweep-preferred-wait", defaultSweepWaits, "TopologyPlacement preferredWait values (trace time, comma-separated) to replay Lockstep with after the comparison; empty skips the sweep")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}

	// client-go keeps reloading the client certificates of clusters the
	// benchmark already removed and logs every failure; the benchmark
	// reports its own errors.
	klog.SetLogger(logr.Discard())
	// The in-process run's scheduler plugins use controller-runtime.
	ctrllog.SetLogger(logr.Discard())

	if o.render != "" {
		if err := render(o.render); err != nil {
			fmt.Fprintf(os.Stderr, "lockstep-bench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "lockstep-bench: %v\n", err)
		os.Exit(1)
	}
}

// render rewrites dir's report.md and plots from its results.json: the
// numbers of the run that wrote it, in the report's current format.
func render(dir string) error {
	f, err := os.Open(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := bench.ReadJSON(f)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	return r.WriteAll(dir)
}

func run(ctx context.Context, o options) error {
	// Everything is read and checked before any cluster work.
	root, err := filepath.Abs(filepath.Join(o.bin, ".."))
	if err != nil {
		return err
	}
	if o.compression < 1 {
		return fmt.Errorf("--time-compression %g: must be at least 1", o.compression)
	}
	lockstepConfig, preferredWait, deployedWait, err := compressedConfig(root, o.compression, -1)
	if err != nil {
		return err
	}
	sweepWaits, err := parseWaits(o.sweepWaits)
	if err != nil {
		return fmt.Errorf("--sweep-preferred-wait: %w", err)
	}
	scheds, err := selectSchedulers(o.schedulers, lockstepConfig)
	if err != nil {
		return fmt.Errorf("--schedulers: %w", err)
	}
	drivers, err := parseGPUDrivers(o.gpuDrivers)
	if err != nil {
		return fmt.Errorf("--gpu-drivers: %w", err)
	}
	if o.skipReplay {
		drivers = nil
	}
	model, err := clustermodel.Load(o.model)
	if err != nil {
		return err
	}
	jobs, err := loadTrace(o.trace, model)
	if err != nil {
		return err
	}
	jobs = bench.Compress(jobs, o.compression)
	var priorityJobs []bench.Job
	if o.priorityTrace != "" {
		if priorityJobs, err = loadTrace(o.priorityTrace, model); err != nil {
			return err
		}
		priorityJobs = bench.Compress(priorityJobs, o.compression)
		if o.priorityTimeout <= 0 {
			return fmt.Errorf("--priority-timeout %s: must be more than 0", o.priorityTimeout)
		}
	}
	var scaleScheds []scheduler
	if o.scaleModel != "" {
		// The burst has no constraints and no clock to compress.
		deployed, err := localcluster.DeployedSchedulerConfig(root)
		if err != nil {
			return err
		}
		if scaleScheds, err = selectSchedulers(o.scaleSchedulers, deployed); err != nil {
			return fmt.Errorf("--scale-schedulers: %w", err)
		}
		if _, err := clustermodel.Load(o.scaleModel); err != nil {
			return err
		}
		if o.scaleRounds < 1 {
			return fmt.Errorf("--scale-rounds %d: must be at least 1", o.scaleRounds)
		}
	}
	if o.scaleModel != "" || o.inProcessModel != "" {
		if o.scaleGangs < 1 {
			return fmt.Errorf("--scale-gangs %d: must be at least 1", o.scaleGangs)
		}
	}
	var inProcessJobs []bench.BurstJob
	if o.inProcessModel != "" {
		m, err := clustermodel.Load(o.inProcessModel)
		if err != nil {
			return err
		}
		if o.inProcessRounds < 1 {
			return fmt.Errorf("--inprocess-rounds %d: must be at least 1", o.inProcessRounds)
		}
		if inProcessJobs, err = inProcessBurst(o, m); err != nil {
			return fmt.Errorf("--inprocess-burst: %w", err)
		}
	}
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	report := bench.Report{
		Model:           o.model,
		Trace:           o.trace,
		Command:         "lockstep-bench " + strings.Join(os.Args[1:], " "),
		TimeCompression: o.compression,
		Host:            bench.HostDescription(),
		Targets:         bench.DefaultTargets(),
		Notes:           []string{fmt.Sprintf("Lockstep's preferredWait is %s: deploy/scheduler/config.yaml's, divided by the time compression like every duration of the trace.", preferredWait)},
	}
	cluster := benchCluster(model)
	runtime, err := bench.NewRuntimeModel(cluster)
	if err != nil {
		return err
	}
	ro := replayOptions{root: root, model: o.model, logDir: filepath.Join(out, "logs"), stall: o.stall, timeout: o.timeout, progressEvery: 10 * time.Second,
		runtime: runtime, compression: o.compression, driver: bench.GPUDriverDevicePlugin}
	for _, driver := range drivers {
		do := ro
		results := &report.Results
		if driver == bench.GPUDriverDRA {
			name := strings.TrimSuffix(filepath.Base(o.model), filepath.Ext(o.model)) + "-dra.yaml"
			if do.model, err = writeModel(filepath.Join(out, "models", name), model.WithGPUDriver(driver)); err != nil {
				return err
			}
			do.driver, do.logDir = driver, filepath.Join(out, "logs", "dra")
			report.DRA = &bench.DRAReplay{Model: filepath.Join(o.out, "models", name)}
			results = &report.DRA.Results
		}
		for _, s := range scheds {
			observed, err := replay(ctx, do, s, jobs)
			if err != nil {
				return fmt.Errorf("%s replay on %s: %w", driver, s.Name, err)
			}
			result, err := bench.Summarize(cluster, observed)
			if err != nil {
				return fmt.Errorf("summarizing the %s %s replay: %w", driver, s.Name, err)
			}
			*results = append(*results, result)
			// Each replay's result is written at once, so a failed
			// replay or scale run does not lose the others.
			if err := report.WriteAll(out); err != nil {
				return fmt.Errorf("writing the report to %s: %w", out, err)
			}
		}
	}
	if err := report.WriteAll(out); err != nil {
		return fmt.Errorf("writing the report to %s: %w", out, err)
	}
	if o.priorityTrace != "" {
		report.Priority = &bench.PriorityReplay{Trace: o.priorityTrace, Notes: preemptionNotes(scheds, o.compression)}
		po := ro
		po.timeout = o.priorityTimeout
		for _, s := range scheds {
			fmt.Printf("priority trace %s on %s\n", o.priorityTrace, s.Name)
			observed, err := replay(ctx, po, s, priorityJobs)
			if err != nil {
				return fmt.Errorf("priority replay on %s: %w", s.Name, err)
			}
			result, err := bench.Summarize(cluster, observed)
			if err != nil {
				return fmt.Errorf("summarizing the %s priority replay: %w", s.Name, err)
			}
			report.Priority.Results = append(report.Priority.Results, result)
			if err := report.WriteAll(out); err != nil {
				return fmt.Errorf("writing the report to %s: %w", out, err)
			}
		}
	}
	if len(sweepWaits) > 0 {
		report.Sweep = &bench.Sweep{DeployedWaitSeconds: deployedWait.Seconds()}
		for _, wait := range sweepWaits {
			// The comparison's Lockstep replay ran with the deployed wait;
			// the sweep replays it once more, and the two measure how far
			// replays of one configuration differ on this machine, which
			// is the tolerance the suggestion needs.
			if res, ok := resultOf(report.Results, bench.SchedulerLockstep); ok && wait == deployedWait {
				report.Sweep.Points = append(report.Sweep.Points, bench.NewSweepPoint(wait, res))
			}
			cfg, scaled, _, err := compressedConfig(root, o.compression, wait)
			if err != nil {
				return err
			}
			sched, err := selectSchedulers(bench.SchedulerLockstep, cfg)
			if err != nil {
				return err
			}
			fmt.Printf("preferredWait sweep: %s (replay %s)\n", wait, scaled)
			observed, err := replay(ctx, ro, sched[0], jobs)
			if err != nil {
				return fmt.Errorf("sweep replay with preferredWait %s: %w", wait, err)
			}
			result, err := bench.Summarize(cluster, observed)
			if err != nil {
				return fmt.Errorf("summarizing the sweep replay with preferredWait %s: %w", wait, err)
			}
			report.Sweep.Points = append(report.Sweep.Points, bench.NewSweepPoint(wait, result))
			if err := report.WriteAll(out); err != nil {
				return fmt.Errorf("writing the report to %s: %w", out, err)
			}
		}
		if err := report.WriteAll(out); err != nil {
			return fmt.Errorf("writing the report to %s: %w", out, err)
		}
	}
	if o.scaleModel != "" {
		so := ro
		so.model = o.scaleModel
		if o.scaleProfiles {
			so.profileDir = out
		}
		if report.Scale, err = scaleRun(ctx, so, scaleScheds, scaleJobs(o.scaleGangs), o.scaleRounds); err != nil {
			return fmt.Errorf("scale run on %s (replay results are in %s): %w", o.scaleModel, out, err)
		}
		if err := report.WriteAll(out); err != nil {
			return fmt.Errorf("writing the report to %s: %w", out, err)
		}
	}
	if o.inProcessModel != "" {
		if report.InProcess, err = inProcessRun(ctx, o, root, out, inProcessJobs); err != nil {
			return fmt.Errorf("in-process scale run on %s: %w", o.inProcessModel, err)
		}
		if err := report.WriteAll(out); err != nil {
			return fmt.Errorf("writing the report to %s: %w", out, err)
		}
	}
	fmt.Println()
	if err := report.WriteMarkdown(os.Stdout); err != nil {
		return err
	}
	fmt.Printf("\nResults in %s (report.md, results.json, *.png)\n", out)
	return nil
}

// preemptionNotes say how the schedulers preempt and how a preempted job
// comes back, for the Priorities table.
func preemptionNotes(scheds []scheduler, compression float64) []string {
	var keep, drop []string
	for _, s := range scheds {
		if keepsDefaultPreemption(s.config) {
			keep = append(keep, s.Name)
		} else {
			drop = append(drop, s.Name)
		}
	}
	var notes []string
	if len(keep) > 0 {
		notes = append(notes, fmt.Sprintf("Upstream's DefaultPreemption is in the scheduler profile of %s (kube-scheduler's and Coscheduling's default profiles have it): a pending pod evicts lower-priority pods on one node for itself, whichever gangs they belong to.", strings.Join(keep, ", ")))
	}
	if len(drop) > 0 {
		notes = append(notes, fmt.Sprintf("DefaultPreemption is disabled in the scheduler profile of %s, which preempts whole lower-priority gangs for a gang through TopologyPlacement's PostFilter (docs/scheduler.md, \"Preemption\") and keeps upstream's DefaultPreemption for pods outside gangs.", strings.Join(drop, ", ")))
	}
	notes = append(notes, "A preempted job restarts whole at once (the TrainingJob controller's gang restart): a preemption is no failure, so it neither waits out the restart backoff nor counts against backoffLimit.")
	return notes
}

// resultOf returns the result of the named scheduler.
func resultOf(results []bench.Result, scheduler string) (bench.Result, bool) {
	for _, r := range results {
		if r.Scheduler == scheduler {
			return r, true
		}
	}
	return bench.Result{}, false
}

// parseGPUDrivers reads --gpu-drivers: the drivers in replay order,
// device plugin first, without duplicates; at least one.
func parseGPUDrivers(list string) ([]string, error) {
	known := []string{bench.GPUDriverDevicePlugin, bench.GPUDriverDRA}
	var want []string
	for _, f := range strings.Split(list, ",") {
		d := strings.TrimSpace(f)
		if !slices.Contains(known, d) {
			return nil, fmt.Errorf("unknown GPU driver %q; known: %s", d, strings.Join(known, ", "))
		}
		want = append(want, d)
	}
	var out []string
	for _, d := range known {
		if slices.Contains(want, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// writeModel writes m to path, creating its directory, and returns path,
// for a cluster to be started from.
func writeModel(path string, m *clustermodel.Model) (string, error) {
	data, err := m.Marshal()
	if err != nil {
		return "", fmt.Errorf("writing model %s: %w", m.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// loadTrace reads the trace and checks it against the model: topology
// levels must be the model's, and every pod must fit on some node.
func loadTrace(path string, model *clustermodel.Model) ([]bench.Job, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	jobs, err := bench.ParseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	levels := append([]string{lockstep.LevelHost}, model.LevelNames()...)
	_, maxGPUs := nodeGPUs(model)
	var errs []error
	for _, j := range jobs {
		if j.Topology != nil && !slices.Contains(levels, j.Topology.Level) {
			errs = append(errs, fmt.Errorf("job %s: topology level %q is not a level of model %s (%s)", j.ID, j.Topology.Level, model.Name, strings.Join(levels, ", ")))
		}
		if j.GPUsPerReplica > maxGPUs {
			errs = append(errs, fmt.Errorf("job %s: %d GPUs per replica, but the largest node of model %s has %d", j.ID, j.GPUsPerReplica, model.Name, maxGPUs))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s does not fit %s: %w", path, model.Name, err)
	}
	return jobs, nil
}

// nodeGPUs returns the fewest and the most GPUs of the model's GPU nodes'
// profiles; 0, 0 when it has none.
func nodeGPUs(model *clustermodel.Model) (fewest, most int) {
	for _, n := range model.Nodes() {
		p, ok := topology.LookupProfile(n.Labels[lockstep.LabelProfile])
		if !ok || p.GPUCount == 0 {
			continue
		}
		if fewest == 0 || p.GPUCount < fewest {
			fewest = p.GPUCount
		}
		most = max(most, p.GPUCount)
	}
	return fewest, most
}

// benchCluster describes the model's nodes and network for the metrics.
func benchCluster(m *clustermodel.Model) bench.Cluster {
	cfg := m.TopologyConfig()
	c := bench.Cluster{Name: m.Name, Levels: cfg.Levels, Fabric: topology.Fabric{Oversubscription: cfg.Oversubscription}}
	for _, n := range m.Nodes() {
		c.Nodes = append(c.Nodes, bench.Node{Name: n.Name, Labels: n.Labels, Profile: n.Labels[lockstep.LabelProfile]})
	}
	return c
}
