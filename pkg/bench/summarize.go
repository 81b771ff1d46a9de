package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Options are the tunables of Summarize.
type Options struct {
	// PartialGangAfter is how long a gang may stay partly bound, from its
	// first bind, before it counts as partially placed.
	PartialGangAfter time.Duration
}

// DefaultOptions returns the options Summarize uses: 30 s for
// PartialGangAfter.
func DefaultOptions() Options {
	return Options{PartialGangAfter: 30 * time.Second}
}

// Result is one scheduler's metrics, as docs/benchmarks.md defines them.
// Times are wall-clock seconds of the replay (after trace compression).
// Pointer fields are null when there is nothing to measure.
type Result struct {
	Scheduler string `json:"scheduler"`
	// Jobs and Pods are the trace's: jobs and the sum of their replicas.
	Jobs         int `json:"jobs"`
	Pods         int `json:"pods"`
	PodsBound    int `json:"pods_bound"`
	FinishedJobs int `json:"finished_jobs"`

	// MultiGPUJobs are the fully bound jobs with at least 2 GPUs;
	// EfficiencyJobs those of them the efficiency statistics cover, and
	// UnmodelledJobs those left out because some GPU set is unknown.
	MultiGPUJobs   int      `json:"multi_gpu_jobs"`
	EfficiencyJobs int      `json:"efficiency_jobs"`
	UnmodelledJobs int      `json:"unmodelled_jobs"`
	EfficiencyMean *float64 `json:"efficiency_mean"`
	EfficiencyP10  *float64 `json:"efficiency_p10"`

	// MultiNodeJobs are the fully bound jobs of at least 2 pods.
	MultiNodeJobs int `json:"multi_node_jobs"`
	// OneLeafJobs of them have all their nodes in one leaf domain;
	// OneLeafShare is null when the model has no network level.
	OneLeafJobs  int      `json:"one_leaf_jobs"`
	OneLeafShare *float64 `json:"one_leaf_share"`
	// OneNVLinkDomainJobs have all their nodes in one multi-node NVLink
	// domain; OneNVLinkDomainShare is null when the model has no NVLink
	// level.
	OneNVLinkDomainJobs  int      `json:"one_nvlink_domain_jobs"`
	OneNVLinkDomainShare *float64 `json:"one_nvlink_domain_share"`

	// FullyBoundJobs had all their pods bound; the gang wait percentiles
	// are over them.
	FullyBoundJobs      int      `json:"fully_bound_jobs"`
	NeverFullyBoundJobs int      `json:"never_fully_bound_jobs"`
	GangWaitP50Seconds  *float64 `json:"gang_wait_p50_s"`
	GangWaitP99Seconds  *float64 `json:"gang_wait_p99_s"`

	// MakespanSeconds runs from the first submission to the last finish,
	// or to the end of observation when MakespanIncomplete.
	MakespanSeconds    float64 `json:"makespan_s"`
	MakespanIncomplete bool    `json:"makespan_incomplete"`

	// TimeCompression is the run's (1 when unset). The fields below marked
	// "trace time" are replay times multiplied by it: what the trace's jobs
	// would have taken on a real cluster.
	TimeCompression float64 `json:"time_compression"`
	// MakespanTraceSeconds is MakespanSeconds in trace time.
	MakespanTraceSeconds float64 `json:"makespan_trace_s"`
	// Job completion time, submission to the last pod's finish, over the
	// finished jobs, in trace time. IncompleteJobs, the jobs that did not
	// finish before the end of observation, are not in them.
	JCTMeanSeconds *float64 `json:"jct_mean_s"`
	JCTP50Seconds  *float64 `json:"jct_p50_s"`
	JCTP99Seconds  *float64 `json:"jct_p99_s"`
	IncompleteJobs int      `json:"incomplete_jobs"`
	// GPUHours are the GPUs held by the trace's pods, each from its bind to
	// its finish, deletion or the end of observation, in trace time, over
	// every run of a job. UsefulGPUHours are the part held by whole gangs
	// in their last run: each of a fully bound job's pods from the job's
	// full-bind time on. PreemptionLostGPUHours are the part held by whole
	// gangs that preemption then ended. WasteGPUHours are the rest: GPUs
	// held by pods whose gang was not yet, or never, whole.
	GPUHours       float64 `json:"gpu_hours"`
	UsefulGPUHours float64 `json:"useful_gpu_hours"`
	WasteGPUHours  float64 `json:"waste_gpu_hours"`

	// PreemptedJobs had at least one run ended by preemption; Preemptions
	// are those runs and EvictedPods the pods evicted in them
	// (EarlierRun).
	PreemptedJobs int `json:"preempted_jobs"`
	Preemptions   int `json:"preemptions"`
	EvictedPods   int `json:"evicted_pods"`
	// Preemptors are the jobs that preempted others (EarlierRun.Preemptor);
	// AttributedPreemptions the preemptions that name one, and
	// MostPreemptionsByOne the most any one preemptor caused. A gang-aware
	// scheduler ends one victim run per preemptor where one victim makes
	// room, and never ends a second for a preemptor still waiting for the
	// first.
	Preemptors            int `json:"preemptors,omitempty"`
	AttributedPreemptions int `json:"attributed_preemptions,omitempty"`
	MostPreemptionsByOne  int `json:"most_preemptions_by_one,omitempty"`
	// PreemptionLostGPUHours is the work preemption threw away, in trace
	// time: for each preempted run whose gang was whole, the job's GPUs
	// times how long it had been (its full bind to the first eviction).
	// The restarted job runs that work again.
	PreemptionLostGPUHours float64 `json:"preemption_lost_gpu_hours"`
	// Priorities are the numbers per priority class (Job.Priority), in
	// the order of PriorityClasses, then jobs without a class; null when no
	// job names a class.
	Priorities []PriorityResult `json:"priorities,omitempty"`
	// IdealGPUHours is what the trace's jobs need at their ideal
	// placement: each job's GPUs times its duration, in trace time. It is
	// the same for every scheduler; UsefulGPUHours beyond it are the
	// runtime model's slowdown of worse placements (for finished jobs).
	IdealGPUHours float64 `json:"ideal_gpu_hours"`
	// ModelledGPUHours is what the finished jobs ran by the runtime model:
	// GPUs × duration × JobRun.Slowdown (1 when unset), in trace time.
	// UsefulGPUHours beyond it are the replay's own latency between a gang
	// becoming whole and its pods ending (pods starting, the rendezvous
	// patch, KWOK ending them), which compression multiplies: an artifact
	// of the replay machine, not of the scheduler's placements.
	ModelledGPUHours float64 `json:"modelled_gpu_hours"`
	// UsefulUtilization is UsefulGPUHours over the cluster's GPUs for the
	// whole observation (Run.Start to Run.End); WasteShare is the same for
	// WasteGPUHours.
	UsefulUtilization *float64 `json:"useful_utilization"`
	WasteShare        *float64 `json:"waste_share"`

	// TotalGPUs is the cluster's; Utilization the samples of GPUs held by
	// bound pods (partial gangs included) as fractions of it and
	// UtilizationMean their time-weighted mean.
	TotalGPUs       int                `json:"total_gpus"`
	UtilizationMean *float64           `json:"utilization_mean"`
	Utilization     []UtilizationPoint `json:"utilization"`

	// PodsPerSecond is bound pods over the time from first to last bind.
	PodsPerSecond *float64 `json:"pods_per_second"`
	// PlanTime is Run.PlanTime.
	PlanTime *PlanTime `json:"plan_time,omitempty"`

	// PartialGangs stayed partly bound for more than
	// PartialGangAfterSeconds; DeadlockedGangs held some pods while others
	// were unbound at the end.
	PartialGangAfterSeconds float64 `json:"partial_gang_after_s"`
	PartialGangs            int     `json:"partial_gangs"`
	DeadlockedGangs         int     `json:"deadlocked_gangs"`

	// PerJob are the per-job numbers behind the statistics, in trace order.
	PerJob []JobResult `json:"per_job"`
}

// JobResult is one job's numbers.
type JobResult struct {
	ID        string `json:"id"`
	GPUs      int    `json:"gpus"`
	Replicas  int    `json:"replicas"`
	PodsBound int    `json:"pods_bound"`
	// WaitSeconds is submission to full bind; null when never fully bound.
	WaitSeconds *float64 `json:"wait_s"`
	// Efficiency is null unless the job is fully bound, has at least 2 GPUs
	// and known GPU sets.
	Efficiency *float64 `json:"efficiency"`
	// Domain is the ID of the narrowest domain holding the job's nodes once
	// fully bound ("host=<node>" on one node).
	Domain     string `json:"domain,omitempty"`
	Partial    bool   `json:"partial,omitempty"`
	Deadlocked bool   `json:"deadlocked,omitempty"`
	Finished   bool   `json:"finished"`
	// JCTSeconds is submission to the last pod's finish, in trace time;
	// null when the job did not finish.
	JCTSeconds *float64 `json:"jct_s"`
	// GPUHours and UsefulGPUHours are the job's part of the Result's.
	GPUHours       float64 `json:"gpu_hours"`
	UsefulGPUHours float64 `json:"useful_gpu_hours"`
	// Slowdown is JobRun.Slowdown: how much longer than its trace duration
	// the runtime model ran it; null when it never ran.
	Slowdown *float64 `json:"slowdown"`
	// Priority is Job.Priority.
	Priority string `json:"priority,omitempty"`
	// Preemptions, EvictedPods and PreemptionLostGPUHours are the job's
	// part of the Result's.
	Preemptions int `json:"preemptions,omitempty"`
	// PreemptedBy names the preemptor of each preemption, in order ("" where
	// unknown; EarlierRun.Preemptor).
	PreemptedBy            []string `json:"preempted_by,omitempty"`
	EvictedPods            int      `json:"evicted_pods,omitempty"`
	PreemptionLostGPUHours float64  `json:"preemption_lost_gpu_hours,omitempty"`
}

// UtilizationPoint is one utilization sample.
type UtilizationPoint struct {
	// Seconds is the time since Run.Start.
	Seconds float64 `json:"t_s"`
	// Busy is the fraction of the cluster's GPUs held by pods.
	Busy float64 `json:"busy"`
}

// ScaleResult is a scale run: one big trace replayed for bind throughput
// only.
type ScaleResult struct {
	Model string `json:"model"`
	Nodes int    `json:"nodes"`
	Jobs  int    `json:"jobs"`
	Pods  int    `json:"pods"`
	// PodsPerSecond is BindThroughput per scheduler name.
	PodsPerSecond map[string]float64 `json:"pods_per_second"`
	// PeakRSSBytes is each scheduler process's peak resident memory
	// (VmHWM) over its run.
	PeakRSSBytes map[string]uint64 `json:"peak_rss_bytes,omitempty"`
	// Rounds is how many times every scheduler ran the burst on the one
	// cluster, and Runs each run in the order they ran; then both maps
	// above hold each scheduler's medians (Add). Zero and empty in
	// results of single-run reports, whose maps hold the one run.
	Rounds int        `json:"rounds,omitempty"`
	Runs   []ScaleRun `json:"runs,omitempty"`
}

// ScaleRun is one scheduler's burst in one round of the scale run.
type ScaleRun struct {
	Scheduler     string  `json:"scheduler"`
	Round         int     `json:"round"`
	PodsPerSecond float64 `json:"pods_per_second"`
	PeakRSSBytes  uint64  `json:"peak_rss_bytes,omitempty"`
	// WallSeconds runs from the scheduler's start to its last bind;
	// SchedulerCPUSeconds is the scheduler process's CPU over it, and
	// ClusterCPUSeconds that of every other process of the local cluster
	// (API server, etcd, KWOK, controllers, the agent). Zero in results of
	// runs before they were recorded.
	WallSeconds         float64 `json:"wall_seconds,omitempty"`
	SchedulerCPUSeconds float64 `json:"scheduler_cpu_seconds,omitempty"`
	ClusterCPUSeconds   float64 `json:"cluster_cpu_seconds,omitempty"`
	// FirstBindSeconds runs from the scheduler's start to its first bind
	// (start-up, which pods/s leaves out); the Bind CPU fields are the CPU
	// of the same processes from the first bind to the last, the window
	// pods/s is measured over. Zero in results of runs before they were
	// recorded.
	FirstBindSeconds        float64 `json:"first_bind_seconds,omitempty"`
	BindSchedulerCPUSeconds float64 `json:"bind_scheduler_cpu_seconds,omitempty"`
	BindClusterCPUSeconds   float64 `json:"bind_cluster_cpu_seconds,omitempty"`
}

// Add records run and sets its scheduler's pods/s and peak RSS to the
// median of its runs: on a shared machine one run's ratio is noise.
func (s *ScaleResult) Add(run ScaleRun) {
	s.Runs = append(s.Runs, run)
	s.Rounds = max(s.Rounds, run.Round)
	var rates []float64
	var rss []uint64
	for _, r := range s.Runs {
		if r.Scheduler == run.Scheduler {
			rates = append(rates, r.PodsPerSecond)
			rss = append(rss, r.PeakRSSBytes)
		}
	}
	if s.PodsPerSecond == nil {
		s.PodsPerSecond = map[string]float64{}
	}
	if s.PeakRSSBytes == nil {
		s.PeakRSSBytes = map[string]uint64{}
	}
	s.PodsPerSecond[run.Scheduler] = median(rates)
	if m := median(rss); m > 0 {
		s.PeakRSSBytes[run.Scheduler] = m
	}
}

// median is the middle of xs, or the mean of the two middle values of an
// even count; zero for none. xs is sorted in place.
func median[T float64 | uint64](xs []T) T {
	n := len(xs)
	if n == 0 {
		return 0
	}
	slices.Sort(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Summarize computes a run's metrics with DefaultOptions.
func Summarize(c Cluster, r Run) (Result, error) {
	return SummarizeWithOptions(c, r, DefaultOptions())
}

// SummarizeWithOptions computes a run's metrics.
func SummarizeWithOptions(c Cluster, r Run, opts Options) (Result, error) {
	if r.Start.IsZero() || r.End.Before(r.Start) {
		return Result{}, fmt.Errorf("run of %s: start %v and end %v: want a start and an end not before it", r.Scheduler, r.Start, r.End)
	}
	m, err := newClusterModel(c)
	if err != nil {
		return Result{}, err
	}
	compression := 1.0
	if r.TimeCompression > 1 {
		compression = r.TimeCompression
	}
	res := Result{
		Scheduler:               r.Scheduler,
		TimeCompression:         compression,
		Jobs:                    len(r.Jobs),
		TotalGPUs:               m.totalGPUs,
		PartialGangAfterSeconds: opts.PartialGangAfter.Seconds(),
		PerJob:                  make([]JobResult, len(r.Jobs)),
		PlanTime:                r.PlanTime,
	}
	var efficiencies, waits, jcts []float64
	var usefulGPUSeconds, heldGPUSeconds, lostGPUSeconds, idealGPUSeconds, modelledGPUSeconds float64
	var binds []time.Time
	var lastFinish time.Time
	byPreemptor := map[string]int{}
	allFinished := true
	for i, jr := range r.Jobs {
		job := jr.Job
		if err := job.Validate(); err != nil {
			return Result{}, fmt.Errorf("run of %s: %w", r.Scheduler, err)
		}
		if jr.Submitted.IsZero() {
			return Result{}, fmt.Errorf("run of %s: job %s has no submission time", r.Scheduler, job.ID)
		}
		res.Pods += job.Replicas
		idealGPUSeconds += float64(job.GPUs()) * job.Duration.Seconds()
		out := JobResult{ID: job.ID, GPUs: job.GPUs(), Replicas: job.Replicas, Finished: !jr.Finished.IsZero(), Priority: job.Priority}

		bound := boundPods(jr.Pods)
		out.PodsBound = len(bound)
		res.PodsBound += len(bound)
		for _, p := range bound {
			binds = append(binds, p.Bound)
		}
		if out.Finished {
			res.FinishedJobs++
			lastFinish = latest(lastFinish, jr.Finished)
			jct := jr.Finished.Sub(jr.Submitted).Seconds() * compression
			out.JCTSeconds = &jct
			jcts = append(jcts, jct)
			modelledGPUSeconds += float64(job.GPUs()) * job.Duration.Seconds() * max(1, jr.Slowdown)
		} else {
			allFinished = false
		}
		if jr.Slowdown > 0 {
			out.Slowdown = &jr.Slowdown
		}

		full := len(bound) >= job.Replicas
		if full {
			placed := bound[:job.Replicas]
			fullAt := placed[len(placed)-1].Bound
			wait := fullAt.Sub(jr.Submitted).Seconds()
			out.WaitSeconds = &wait
			waits = append(waits, wait)
			res.FullyBoundJobs++
			if err := m.rateJob(&res, &out, placed); err != nil {
				return Result{}, fmt.Errorf("run of %s: job %s: %w", r.Scheduler, job.ID, err)
			}
			if out.Efficiency != nil {
				efficiencies = append(efficiencies, *out.Efficiency)
			}
		} else {
			res.NeverFullyBoundJobs++
		}
		held, useful := gpuSeconds(job, bound, r.End)
		var lost float64
		for _, er := range jr.EarlierRuns {
			erBound := boundPods(er.Pods)
			for _, p := range erBound {
				binds = append(binds, p.Bound)
			}
			h, l := earlierRunGPUSeconds(job, er, erBound, r.End)
			held += h
			lost += l
			if er.Preempted() {
				out.Preemptions++
				out.EvictedPods += er.EvictedPods
				if er.Preemptor != "" {
					byPreemptor[er.Preemptor]++
				}
				out.PreemptedBy = append(out.PreemptedBy, er.Preemptor)
			}
		}
		heldGPUSeconds += held
		usefulGPUSeconds += useful
		lostGPUSeconds += lost
		out.GPUHours = held * compression / 3600
		out.UsefulGPUHours = useful * compression / 3600
		out.PreemptionLostGPUHours = lost * compression / 3600
		if out.Preemptions > 0 {
			res.PreemptedJobs++
			res.Preemptions += out.Preemptions
			res.EvictedPods += out.EvictedPods
		}

		if job.Replicas >= 2 && len(bound) > 0 {
			until := r.End
			if full {
				until = bound[job.Replicas-1].Bound
			}
			out.Partial = until.Sub(bound[0].Bound) > opts.PartialGangAfter
			out.Deadlocked = !full && holdsGPUsAt(bound, r.End)
		}
		if out.Partial {
			res.PartialGangs++
		}
		if out.Deadlocked {
			res.DeadlockedGangs++
		}
		res.PerJob[i] = out
	}

	res.EfficiencyJobs = len(efficiencies)
	res.EfficiencyMean = mean(efficiencies)
	res.EfficiencyP10 = percentile(efficiencies, 10)
	res.GangWaitP50Seconds = percentile(waits, 50)
	res.GangWaitP99Seconds = percentile(waits, 99)
	if m.leafLevel > 0 {
		res.OneLeafShare = share(res.OneLeafJobs, res.MultiNodeJobs)
	}
	if m.nvlinkLevel > 0 {
		res.OneNVLinkDomainShare = share(res.OneNVLinkDomainJobs, res.MultiNodeJobs)
	}
	if allFinished {
		if len(r.Jobs) > 0 {
			res.MakespanSeconds = lastFinish.Sub(r.Start).Seconds()
		}
	} else {
		res.MakespanSeconds = r.End.Sub(r.Start).Seconds()
		res.MakespanIncomplete = true
	}
	res.MakespanTraceSeconds = res.MakespanSeconds * compression
	res.IncompleteJobs = res.Jobs - res.FinishedJobs
	res.JCTMeanSeconds = mean(jcts)
	res.JCTP50Seconds = percentile(jcts, 50)
	res.JCTP99Seconds = percentile(jcts, 99)
	res.GPUHours = heldGPUSeconds * compression / 3600
	res.UsefulGPUHours = usefulGPUSeconds * compression / 3600
	res.IdealGPUHours = idealGPUSeconds * compression / 3600
	res.ModelledGPUHours = modelledGPUSeconds * compression / 3600
	res.PreemptionLostGPUHours = lostGPUSeconds * compression / 3600
	res.Preemptors = len(byPreemptor)
	for _, n := range byPreemptor {
		res.AttributedPreemptions += n
		res.MostPreemptionsByOne = max(res.MostPreemptionsByOne, n)
	}
	wasteGPUSeconds := heldGPUSeconds - usefulGPUSeconds - lostGPUSeconds
	res.WasteGPUHours = wasteGPUSeconds * compression / 3600
	if capacity := float64(m.totalGPUs) * r.End.Sub(r.Start).Seconds(); capacity > 0 {
		useful, waste := usefulGPUSeconds/capacity, wasteGPUSeconds/capacity
		res.UsefulUtilization, res.WasteShare = &useful, &waste
	}
	res.Priorities = priorityResults(r, res.PerJob, compression)
	res.Utilization, res.UtilizationMean = utilization(r.Utilization, r.Start, m.totalGPUs)
	if rate := BindThroughput(binds); rate > 0 {
		res.PodsPerSecond = &rate
	}
	return res, nil
}

// rateJob fills the placement metrics of a fully bound job from the pods
// that completed its gang.
func (m *clusterModel) rateJob(res *Result, out *JobResult, placed []PodRun) error {
	nodes := make([]string, 0, len(placed))
	for _, p := range placed {
		if p.Node == "" {
			return fmt.Errorf("pod %s has a bind time but no node", p.Name)
		}
		if !slices.Contains(nodes, p.Node) {
			nodes = append(nodes, p.Node)
		}
	}
	dom, err := m.tree.LowestCommonDomain(nodes)
	if err != nil {
		return fmt.Errorf("locating the job's nodes: %w", err)
	}
	out.Domain = dom.DisplayID()
	if len(placed) >= 2 {
		res.MultiNodeJobs++
		if m.leafLevel > 0 && dom.Level <= m.leafLevel {
			res.OneLeafJobs++
		}
		if m.nvlinkLevel > 0 && dom.Level <= m.nvlinkLevel && !m.tree.Path(nodes[0])[m.nvlinkLevel].Synthetic {
			res.OneNVLinkDomainJobs++
		}
	}
	if out.GPUs < 2 {
		return nil
	}
	res.MultiGPUJobs++
	eff, err := m.efficiency(placed)
	switch {
	case errors.Is(err, ErrUnmodelled):
		res.UnmodelledJobs++
		return nil
	case err != nil:
		return err
	}
	out.Efficiency = &eff
	return nil
}

// gpuSeconds returns the GPU-seconds (replay time) the job's bound pods held
// until end: in all, and while the gang was whole. Each pod holds its GPUs
// from its bind to its finish, or to end if it had not finished. The gang is
// whole from its full-bind time (the bind of its replicas-th pod); its first
// replicas pods' time from then on is useful. Everything else, pods waiting
// for the rest of a gang and pods of gangs never whole, is waste.
func gpuSeconds(job Job, bound []PodRun, end time.Time) (held, useful float64) {
	g := float64(job.GPUsPerReplica)
	until := func(p PodRun) time.Time {
		if p.Finished.IsZero() || p.Finished.After(end) {
			return end
		}
		return p.Finished
	}
	for _, p := range bound {
		held += g * max(0, until(p).Sub(p.Bound).Seconds())
	}
	if len(bound) >= job.Replicas {
		fullAt := bound[job.Replicas-1].Bound
		for _, p := range bound[:job.Replicas] {
			useful += g * max(0, until(p).Sub(fullAt).Seconds())
		}
	}
	return held, useful
}

// earlierRunGPUSeconds returns the GPU-seconds (replay time) an earlier run
// of job held until end (bound are its bound pods, earliest first), and
// the part of them preemption threw away: the job's GPUs from the run's
// full bind to its first eviction. A run never whole lost no work; its
// GPUs were waste already.
func earlierRunGPUSeconds(job Job, er EarlierRun, bound []PodRun, end time.Time) (held, lost float64) {
	held, _ = gpuSeconds(job, bound, end)
	if !er.Preempted() || er.Evicted.IsZero() || len(bound) < job.Replicas {
		return held, 0
	}
	fullAt := bound[job.Replicas-1].Bound
	lost = float64(job.GPUs()) * max(0, er.Evicted.Sub(fullAt).Seconds())
	return held, min(lost, held)
}

// boundPods returns the pods that were bound, earliest first.
func boundPods(pods []PodRun) []PodRun {
	var bound []PodRun
	for _, p := range pods {
		if !p.Bound.IsZero() {
			bound = append(bound, p)
		}
	}
	slices.SortStableFunc(bound, func(a, b PodRun) int { return a.Bound.Compare(b.Bound) })
	return bound
}

// holdsGPUsAt reports whether some bound pod had not finished by end.
func holdsGPUsAt(bound []PodRun, end time.Time) bool {
	for _, p := range bound {
		if p.Finished.IsZero() || p.Finished.After(end) {
			return true
		}
	}
	return false
}

// BindThroughput returns binds per second: the number of binds over the
// time from the first to the last; 0 with fewer than two distinct times.
func BindThroughput(binds []time.Time) float64 {
	if len(binds) < 2 {
		return 0
	}
	first, last := binds[0], binds[0]
	for _, b := range binds[1:] {
		if b.Before(first) {
			first = b
		}
		last = latest(last, b)
	}
	span := last.Sub(first).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(len(binds)) / span
}

// utilization converts samples to fractions of total GPUs over time since
// start, sorted by time, and their time-weighted mean: each sample holds
// until the next, over the span from the first sample to the last (a single
// sample is its own mean).
func utilization(samples []Sample, start time.Time, total int) ([]UtilizationPoint, *float64) {
	if len(samples) == 0 || total <= 0 {
		return nil, nil
	}
	sorted := slices.Clone(samples)
	slices.SortStableFunc(sorted, func(a, b Sample) int { return a.At.Compare(b.At) })
	points := make([]UtilizationPoint, len(sorted))
	for i, s := range sorted {
		points[i] = UtilizationPoint{Seconds: s.At.Sub(start).Seconds(), Busy: float64(s.BusyGPUs) / float64(total)}
	}
	span := points[len(points)-1].Seconds - points[0].Seconds
	if span <= 0 {
		sum := 0.0
		for _, p := range points {
			sum += p.Busy
		}
		m := sum / float64(len(points))
		return points, &m
	}
	weighted := 0.0
	for i, p := range points[:len(points)-1] {
		weighted += p.Busy * (points[i+1].Seconds - p.Seconds)
	}
	m := weighted / span
	return points, &m
}

// percentile is the nearest-rank percentile: the ⌈p/100·n⌉-th smallest
// value; nil for no values.
func percentile(values []float64, p float64) *float64 {
	if len(values) == 0 {
		return nil
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	v := sorted[min(max(rank, 1), len(sorted))-1]
	return &v
}

func mean(values []float64) *float64 {
	if len(values) == 0 {
		return nil
	}
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	m := sum / float64(len(values))
	return &m
}

func share(part, whole int) *float64 {
	if whole == 0 {
		return nil
	}
	s := float64(part) / float64(whole)
	return &s
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// InProcessResult is the in-process scale run (internal/perf): each
// scheduler binds the same burst on the same apiserver several times,
// alternating, with no KWOK process or other component beside it.
type InProcessResult struct {
	Model string `json:"model"`
	Nodes int    `json:"nodes"`
	// Burst names the burst (BurstGangs, BurstMixed); empty in results of
	// runs before it was recorded, which were BurstGangs.
	Burst string `json:"burst,omitempty"`
	// Jobs is the burst's jobs (PodGroups), Mix their sizes; zero and
	// empty in results of runs before they were recorded.
	Jobs   int           `json:"jobs,omitempty"`
	Mix    []BurstBucket `json:"mix,omitempty"`
	Pods   int           `json:"pods"`
	Rounds int           `json:"rounds"`
	// Runs are in the order they ran.
	Runs []InProcessRun `json:"runs"`
}

// InProcessRun is one scheduler's run of one round.
type InProcessRun struct {
	Scheduler string `json:"scheduler"`
	Round     int    `json:"round"`
	Pods      int    `json:"pods"`
	// PodsPerSecond is BindThroughput: first bind to last.
	PodsPerSecond float64 `json:"pods_per_second"`
	// PeakHeapBytes is the most heap in use during the run above what was
	// in use before the scheduler started.
	PeakHeapBytes uint64 `json:"peak_heap_bytes"`
	// WallSeconds is the run from the scheduler's start to its last bind;
	// SchedulerCPUSeconds the CPU the benchmark's process spent in it (the
	// scheduler, and the pod informer that sees the binds), and
	// ControlPlaneCPUSeconds that of kube-apiserver and etcd. They share
	// the machine: a scheduler that leaves cores idle is waiting on
	// something other than CPU. Zero in results of runs before they were
	// recorded.
	WallSeconds            float64 `json:"wall_seconds,omitempty"`
	SchedulerCPUSeconds    float64 `json:"scheduler_cpu_seconds,omitempty"`
	ControlPlaneCPUSeconds float64 `json:"control_plane_cpu_seconds,omitempty"`
	// BoundBy is BindProgress of the run's binds: seconds from the
	// scheduler's start until each tenth of the pods was bound.
	BoundBy []float64 `json:"bound_by,omitempty"`
}

// BindProgress returns the seconds from start until 10%, 20%, …, 100% of
// binds had happened.
func BindProgress(binds []time.Time, start time.Time) []float64 {
	if len(binds) == 0 {
		return nil
	}
	sorted := slices.SortedFunc(slices.Values(binds), time.Time.Compare)
	out := make([]float64, 10)
	for i := range out {
		k := ((i+1)*len(sorted)+9)/10 - 1
		out[i] = sorted[k].Sub(start).Seconds()
	}
	return out
}

// Median returns the median pods/s and peak heap of a scheduler's runs,
// and how many runs it had.
func (r *InProcessResult) Median(scheduler string) (podsPerSecond float64, peakHeap uint64, runs int) {
	var rates []float64
	var heaps []uint64
	for _, run := range r.Runs {
		if run.Scheduler == scheduler {
			rates = append(rates, run.PodsPerSecond)
			heaps = append(heaps, run.PeakHeapBytes)
		}
	}
	return median(rates), median(heaps), len(rates)
}
