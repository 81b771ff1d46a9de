package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/internal/perf"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// scaleGPUsPerPod is what each pod of the scale runs asks for: a whole
// 8-GPU node.
const scaleGPUsPerPod = 8

// scaleJobs is the scale run's burst: n gang jobs of 8-GPU pods.
func scaleJobs(n int) []bench.Job {
	jobs := make([]bench.Job, n)
	for i := range jobs {
		jobs[i] = bench.Job{
			ID:             fmt.Sprintf("burst-%03d", i),
			Replicas:       bench.ScaleGangSizes[i%len(bench.ScaleGangSizes)],
			GPUsPerReplica: scaleGPUsPerPod,
			// Pods of the scale run are never released; the duration is moot.
			Duration: time.Hour,
		}
	}
	return jobs
}

// scaleRun measures how fast each scheduler binds the same burst of gangs
// on one cluster of model, brought up once because a 5,000-node cluster
// takes minutes to become Ready. For each scheduler in turn, every job's
// pods are created first with no scheduler running; then the scheduler
// starts and binds them, and pods per second run from the first bind to the
// last, so start-up is not counted. Between schedulers the scheduler and
// controller stop and every job and pod is deleted, so each starts from an
// empty cluster.
//
// With rounds above 1 every scheduler runs the burst that many times, in
// turn, and the result holds each one's medians beside every run: one run
// on a shared machine is noise (ScaleResult.Add).
func scaleRun(ctx context.Context, o replayOptions, scheds []scheduler, jobs []bench.Job, rounds int) (result *bench.ScaleResult, err error) {
	begin := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("[scale %5.0fs] %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	say("starting a cluster from %s", o.model)
	c, err := startCluster(ctx, o.root, o.model, nil, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			dir := filepath.Join(o.logDir, "scale")
			if saveErr := c.SaveArtifacts(dir); saveErr == nil {
				err = fmt.Errorf("%w (logs: %s)", err, dir)
			}
		}
		err = errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
	}()
	say("cluster up: %d nodes with topology", c.Model.NodeCount())

	result = &bench.ScaleResult{Model: o.model, Nodes: c.Model.NodeCount(), Jobs: len(jobs), PodsPerSecond: map[string]float64{}, PeakRSSBytes: map[string]uint64{}}
	for round := 1; round <= max(rounds, 1); round++ {
		for _, sched := range scheds {
			b, err := scaleBurst(ctx, c, o, sched, round, jobs, say)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", sched.Name, round, err)
			}
			result.Pods = b.pods
			run := bench.ScaleRun{Scheduler: sched.Name, Round: round, PodsPerSecond: bench.BindThroughput(b.binds),
				WallSeconds: b.wall.Seconds(), SchedulerCPUSeconds: b.schedulerCPU.Seconds(), ClusterCPUSeconds: b.clusterCPU.Seconds(),
				FirstBindSeconds: b.firstBind.Seconds(), BindSchedulerCPUSeconds: b.window["scheduler"].Seconds(),
				BindClusterCPUSeconds: (total(b.window) - b.window["scheduler"]).Seconds()}
			// Read before clearBurst stops the scheduler: the peak goes
			// with the process.
			if proc, ok := c.Component("scheduler"); ok {
				if run.PeakRSSBytes, err = proc.PeakRSS(); err != nil {
					return nil, fmt.Errorf("%s: reading its peak RSS: %w", sched.Name, err)
				}
			}
			result.Add(run)
			say("%s, round %d: %d pods bound at %.0f pods/s, peak RSS %d MiB; %.1f s from its start to the last bind, CPU %.1f s in it and %.1f s in the rest of the cluster",
				sched.Name, round, len(b.binds), run.PodsPerSecond, run.PeakRSSBytes>>20, run.WallSeconds, run.SchedulerCPUSeconds, run.ClusterCPUSeconds)
			say("%s, round %d: first bind %.1f s after its start, its peak RSS then %d MiB; CPU before it: %s; from it to the last bind: %s; API requests from it to the last bind: %s",
				sched.Name, round, b.firstBind.Seconds(), b.peakRSSAtFirstBind>>20, formatSpent(b.startup), formatSpent(b.window), b.requests.top(10))
			if err := clearBurst(ctx, c); err != nil {
				return nil, err
			}
		}
	}
	return result, nil
}

// burst is what scaleBurst saw of one scheduler's burst.
type burst struct {
	binds []time.Time
	pods  int
	// wall runs from the scheduler's start to the last bind (read at most
	// one poll later); schedulerCPU is the scheduler process's CPU over
	// it, clusterCPU that of every other process of the local cluster
	// (clusterCPU). On a machine of few cores their sum next to wall says
	// whether the run waited on the CPU, and on whose.
	wall, schedulerCPU, clusterCPU time.Duration
	// firstBind runs from the scheduler's start to its first bind; startup
	// and window are the CPU of every process, the scheduler's included,
	// by name, before the first bind and from it to the end.
	firstBind       time.Duration
	startup, window map[string]time.Duration
	// peakRSSAtFirstBind is the scheduler's peak RSS (VmHWM) at its first
	// bind: start-up's share of the run's peak.
	peakRSSAtFirstBind uint64
	// requests are the API requests the apiserver served from the first
	// bind to the end, by verb and resource (readAPIRequests); nil when
	// they could not be read.
	requests apiRequests
}

// clusterCPU reads the CPU spent so far by every process of the cluster
// but the scheduler: the control plane (kube-apiserver, etcd, KWOK,
// kube-controller-manager run detached, not as our children) and our
// running components (the controller and the agent).
func clusterCPU(c *localcluster.Cluster) (cpuReading, error) {
	pids, err := c.ControlPlanePIDs()
	if err != nil {
		return nil, fmt.Errorf("finding the control plane's processes: %w", err)
	}
	for name, pid := range c.ComponentPIDs() {
		if name != "scheduler" {
			pids[name] = pid
		}
	}
	r := cpuReading{}
	for name, pid := range pids {
		r[name] = processCPU{pid: pid}
	}
	return r.again(), nil
}

// processCPU is one process's CPU at one moment.
type processCPU struct {
	pid int
	cpu time.Duration
}

// cpuReading is the CPU of processes by name at one moment.
type cpuReading map[string]processCPU

// again reads the same processes now.
func (r cpuReading) again() cpuReading {
	now := cpuReading{}
	for name, p := range r {
		now[name] = processCPU{pid: p.pid, cpu: perf.ProcessCPU(p.pid)}
	}
	return now
}

// since is the CPU each process spent from before to r, by name; a process
// that ended or was replaced in between (its CPU went down) is left out.
func (r cpuReading) since(before cpuReading) map[string]time.Duration {
	spent := map[string]time.Duration{}
	for name, p := range r {
		if b, ok := before[name]; ok && b.pid == p.pid && p.cpu >= b.cpu {
			spent[name] = p.cpu - b.cpu
		}
	}
	return spent
}

// total is the sum of spent.
func total(spent map[string]time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range spent {
		sum += d
	}
	return sum
}

// formatSpent lists spent by process, the largest first, for the log.
func formatSpent(spent map[string]time.Duration) string {
	names := slices.Collect(maps.Keys(spent))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(spent[b], spent[a]) })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.1f s", n, spent[n].Seconds())
	}
	return strings.Join(parts, ", ")
}

// scaleBurst runs one scheduler's part of the scale run.
func scaleBurst(ctx context.Context, c *localcluster.Cluster, o replayOptions, sched scheduler, round int, jobs []bench.Job, say func(string, ...any)) (burst, error) {
	want := 0
	for _, j := range jobs {
		want += j.Replicas
	}
	obs := newObserver(c.Clientset, c.Client, benchNamespace, len(jobs), false, nil)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := obs.start(runCtx); err != nil {
		return burst{}, err
	}
	ctrl, err := c.ControllerComponentFor(sched.PodSchedulerName)
	if err != nil {
		return burst{}, err
	}
	if _, err := c.StartComponent(ctx, ctrl); err != nil {
		return burst{}, err
	}
	if err := submit(runCtx, c, obs, jobs, time.Now(), 1, o.driver); err != nil {
		return burst{}, err
	}
	err = localcluster.Poll(ctx, 500*time.Millisecond, 5*time.Minute, fmt.Sprintf("the controller to create %d pods", want), func(context.Context) (bool, error) {
		_, have := obs.bindTimes()
		return have >= want, nil
	})
	if err != nil {
		return burst{}, err
	}
	say("%s: %d jobs, %d pods pending; starting the scheduler", sched.Name, len(jobs), want)
	comp, err := sched.component(c)
	if err != nil {
		return burst{}, err
	}
	cluster, err := clusterCPU(c)
	if err != nil {
		return burst{}, err
	}
	start := time.Now()
	proc, err := c.StartComponent(ctx, comp)
	if err != nil {
		return burst{}, err
	}
	// The scheduler as one more process of the readings: its CPU is read
	// with the cluster's, at the first bind and at the end.
	cluster["scheduler"] = processCPU{pid: proc.Pid()}
	var atFirst cpuReading
	var requestsAtFirst apiRequests
	var b burst
	var lastCount int
	lastChange := time.Now()
	// Polled often: the reading at the first bind is taken at most one
	// interval after it, inside a bind window of a few seconds.
	err = localcluster.Poll(ctx, 100*time.Millisecond, o.timeout, "every pod bound", func(context.Context) (bool, error) {
		binds, _ := obs.bindTimes()
		if len(binds) > 0 && atFirst == nil {
			atFirst = cluster.again()
			b.peakRSSAtFirstBind, _ = proc.PeakRSS()
			requestsAtFirst = readAPIRequests(ctx, c)
			saveProfiles(ctx, c, o.profileDir, sched.Name, round, "first-bind", say)
		}
		if len(binds) != lastCount {
			lastCount, lastChange = len(binds), time.Now()
		}
		if len(binds) == want {
			return true, nil
		}
		if time.Since(lastChange) > o.stall {
			return false, fmt.Errorf("%d of %d pods bound, none for %s", len(binds), want, o.stall)
		}
		return false, nil
	})
	atEnd := cluster.again()
	saveProfiles(ctx, c, o.profileDir, sched.Name, round, "end", say)
	if requestsAtFirst != nil {
		b.requests = readAPIRequests(ctx, c).since(requestsAtFirst)
	}
	whole := atEnd.since(cluster)
	b.schedulerCPU = whole["scheduler"]
	delete(whole, "scheduler")
	b.clusterCPU = total(whole)
	b.binds, b.pods = obs.bindTimes()
	if len(b.binds) > 0 {
		b.wall = slices.MaxFunc(b.binds, time.Time.Compare).Sub(start)
		b.firstBind = slices.MinFunc(b.binds, time.Time.Compare).Sub(start)
	}
	if atFirst != nil {
		b.startup, b.window = atFirst.since(cluster), atEnd.since(atFirst)
	}
	return b, err
}

// saveProfiles writes, to dir when set, what the running scheduler says of
// its memory: its heap profile (in use at its last collection, and
// allocated since its start) and its goroutines by stack from its secure
// port's /debug/pprof (enableProfiling, on by default), its /metrics page
// (the Go runtime's memory statistics among them) and its /proc status
// (RSS by kind), as kwok-{heap,goroutines,metrics,status}-<scheduler>-
// round<N>-<at>.{pprof,txt}. The scheduler's CPU for them counts in the
// run, so only runs asked for profiles pay it. A failure is logged: the
// run's numbers stand without.
func saveProfiles(ctx context.Context, c *localcluster.Cluster, dir, sched string, round int, at string, say func(string, ...any)) {
	if dir == "" {
		return
	}
	name := func(kind, ext string) string {
		return filepath.Join(dir, fmt.Sprintf("kwok-%s-%s-round%d-%s.%s", kind, sched, round, at, ext))
	}
	save := func(path string, read func() ([]byte, error)) {
		body, err := read()
		if err == nil {
			err = os.WriteFile(path, body, 0o644)
		}
		if err != nil {
			say("%s, round %d: %s at %s: %v", sched, round, filepath.Base(path), at, err)
		}
	}
	save(name("heap", "pprof"), func() ([]byte, error) { return schedulerGet(ctx, c, "/debug/pprof/heap") })
	save(name("goroutines", "txt"), func() ([]byte, error) { return schedulerGet(ctx, c, "/debug/pprof/goroutine?debug=1") })
	save(name("metrics", "txt"), func() ([]byte, error) { return schedulerGet(ctx, c, "/metrics") })
	save(name("status", "txt"), func() ([]byte, error) {
		p, ok := c.Component(schedulerComponent)
		if !ok {
			return nil, fmt.Errorf("component %s is not running", schedulerComponent)
		}
		return os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	})
}

// clearBurst stops the scheduler and the controller and deletes every job
// and pod of the burst, waiting until the pods are gone.
func clearBurst(ctx context.Context, c *localcluster.Cluster) error {
	for _, name := range []string{"scheduler", "controller"} {
		if err := c.KillComponent(name); err != nil {
			return err
		}
	}
	// A collection delete of hundreds of objects on an apiserver still
	// busy with 5,000 nodes can fail midway (a reset HTTP/2 stream, a
	// timeout) after deleting some; it is repeated until the namespace is
	// empty rather than losing the run's results.
	var lastErr error
	err := localcluster.Poll(ctx, time.Second, 5*time.Minute, "the burst's jobs and pods to go", func(ctx context.Context) (bool, error) {
		if lastErr = c.Client.DeleteAllOf(ctx, &v1alpha1.TrainingJob{}, client.InNamespace(benchNamespace)); lastErr != nil {
			lastErr = fmt.Errorf("deleting the burst's jobs: %w", lastErr)
			return false, nil
		}
		if lastErr = c.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(benchNamespace), client.GracePeriodSeconds(0)); lastErr != nil {
			lastErr = fmt.Errorf("deleting the burst's pods: %w", lastErr)
			return false, nil
		}
		pods := &corev1.PodList{}
		if lastErr = c.Client.List(ctx, pods, client.InNamespace(benchNamespace)); lastErr != nil {
			return false, nil
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil && lastErr != nil {
		return fmt.Errorf("%w (last error: %w)", err, lastErr)
	}
	return err
}

// apiRequests are counts of the requests the apiserver completed, by "VERB
// resource[/subresource]".
type apiRequests map[string]float64

// readAPIRequests reads the apiserver's apiserver_request_total by verb and
// resource; nil when its metrics cannot be read or parsed, which costs the
// run only the breakdown. It is a diagnosis of a bind window: which writes
// and reads the cluster served besides the binds. The read at the first
// bind is one metrics scrape, whose cost the apiserver's CPU in the window
// includes: a fraction of a second against the window's several.
func readAPIRequests(ctx context.Context, c *localcluster.Cluster) apiRequests {
	body, err := c.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil
	}
	return parseAPIRequests(body)
}

// parseAPIRequests reads apiserver_request_total of the apiserver's
// metrics text by verb and resource; nil when it does not parse.
func parseAPIRequests(body []byte) apiRequests {
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	out := apiRequests{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		var verb, resource, sub string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		key := verb + " " + resource
		if sub != "" {
			key += "/" + sub
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// since is the requests completed from before to r.
func (r apiRequests) since(before apiRequests) apiRequests {
	out := apiRequests{}
	for k, v := range r {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// top lists the n most frequent requests, the most frequent first.
func (r apiRequests) top(n int) string {
	if r == nil {
		return "not read"
	}
	keys := slices.Collect(maps.Keys(r))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(r[b], r[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, n)
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, r[k]))
	}
	return strings.Join(parts, ", ")
}
