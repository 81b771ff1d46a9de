package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Report is the comparison of one trace replayed against several schedulers.
type Report struct {
	Model string `json:"model"`
	Trace string `json:"trace"`
	// Command is the command line that produced the report.
	Command         string  `json:"command"`
	TimeCompression float64 `json:"time_compression"`
	// Host describes the machine, e.g. "2 CPU cores, linux/amd64".
	Host string `json:"host"`
	// Results are one per scheduler, in run order.
	Results []Result     `json:"results"`
	Scale   *ScaleResult `json:"scale,omitempty"`
	// InProcess is the in-process scale run (internal/perf).
	InProcess *InProcessResult `json:"in_process,omitempty"`
	// Sweep is Lockstep's preferredWait sweep, if one ran.
	Sweep *Sweep `json:"sweep,omitempty"`
	// Priority is the replay of a trace with priority classes, if one ran.
	Priority *PriorityReplay `json:"priority,omitempty"`
	// DRA is the trace replayed with the model's GPUs on NVIDIA's DRA
	// driver, if it was; absent from reports written before it existed.
	DRA     *DRAReplay `json:"dra,omitempty"`
	Targets Targets    `json:"targets"`
	// Notes say how the run differs from a deployment, one sentence each.
	Notes []string `json:"notes,omitempty"`
}

// Targets are what Lockstep's run must reach.
type Targets struct {
	// EfficiencyMean is the least mean placement efficiency.
	EfficiencyMean float64 `json:"efficiency_mean"`
	// PartialGangs and DeadlockedGangs are the most allowed.
	PartialGangs    int `json:"partial_gangs"`
	DeadlockedGangs int `json:"deadlocked_gangs"`
	// ScaleThroughputRatio is the least ratio of Lockstep's pods bound per
	// second to kube-scheduler's in the scale runs (KWOK and in-process).
	ScaleThroughputRatio float64 `json:"scale_throughput_ratio"`
	// ScaleMemoryRatio is the most ratio of Lockstep's peak memory to
	// kube-scheduler's in the scale runs: peak RSS of the scheduler
	// process in the KWOK run, peak heap growth in the in-process run.
	ScaleMemoryRatio float64 `json:"scale_memory_ratio"`
	// GPUHoursRatio is the most ratio of Lockstep's GPU-hours to
	// kube-scheduler's on the same trace.
	GPUHoursRatio float64 `json:"gpu_hours_ratio"`
}

// DefaultTargets returns Lockstep's targets (issue 15): efficiency mean at
// least 0.97, no partially placed or deadlocked gang, at most 0.9 times
// kube-scheduler's GPU-hours, and at scale at least kube-scheduler's bind
// throughput with at most 1.2 times its memory.
func DefaultTargets() Targets {
	return Targets{EfficiencyMean: 0.97, ScaleThroughputRatio: 1.0, ScaleMemoryRatio: 1.2, GPUHoursRatio: 0.9}
}

// Target statuses.
const (
	TargetMet         = "met"
	TargetMissed      = "missed"
	TargetNotMeasured = "not measured"
)

// TargetCheck is one target, evaluated against Lockstep's result.
type TargetCheck struct {
	Target string `json:"target"`
	Want   string `json:"want"`
	Got    string `json:"got"`
	// Status is TargetMet, TargetMissed or TargetNotMeasured.
	Status string `json:"status"`
}

// HostDescription describes the machine running the benchmark, for
// Report.Host.
func HostDescription() string {
	return fmt.Sprintf("%d CPU cores, %s/%s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
}

// result returns the result of the named scheduler.
func (r Report) result(scheduler string) (Result, bool) {
	i := slices.IndexFunc(r.Results, func(res Result) bool { return res.Scheduler == scheduler })
	if i < 0 {
		return Result{}, false
	}
	return r.Results[i], true
}

// CheckTargets evaluates the targets against the SchedulerLockstep result
// and, for throughput, the scale run.
func (r Report) CheckTargets() []TargetCheck {
	t := r.Targets
	lockstep, ran := r.result(SchedulerLockstep)
	check := func(target, want string, measured bool, got string, met bool) TargetCheck {
		c := TargetCheck{Target: target, Want: want, Got: "—", Status: TargetNotMeasured}
		if measured {
			c.Got, c.Status = got, TargetMissed
			if met {
				c.Status = TargetMet
			}
		}
		return c
	}
	var checks []TargetCheck
	eff := lockstep.EfficiencyMean
	checks = append(checks, check("placement efficiency, mean", fmt.Sprintf("≥ %.2f", t.EfficiencyMean),
		ran && eff != nil, formatRatio(eff), eff != nil && *eff >= t.EfficiencyMean))
	checks = append(checks, check("partially placed gangs", fmt.Sprintf("≤ %d", t.PartialGangs),
		ran, fmt.Sprint(lockstep.PartialGangs), lockstep.PartialGangs <= t.PartialGangs))
	checks = append(checks, check("gangs deadlocked at the end", fmt.Sprintf("≤ %d", t.DeadlockedGangs),
		ran, fmt.Sprint(lockstep.DeadlockedGangs), lockstep.DeadlockedGangs <= t.DeadlockedGangs))
	kube, kubeRan := r.result(SchedulerKube)
	hoursMeasured := ran && kubeRan && kube.GPUHours > 0
	hoursGot := ""
	if hoursMeasured {
		hoursGot = fmt.Sprintf("%.2f× (%.1f vs %.1f GPU-h)", lockstep.GPUHours/kube.GPUHours, lockstep.GPUHours, kube.GPUHours)
		if lockstep.IncompleteJobs > 0 {
			// Unfinished jobs would have cost more: a ratio over an
			// incomplete Lockstep replay flatters it, so it cannot meet
			// the target. kube-scheduler's unfinished jobs only make the
			// comparison harder for Lockstep.
			hoursGot += fmt.Sprintf(", %d of Lockstep's jobs unfinished", lockstep.IncompleteJobs)
		}
	}
	checks = append(checks, check("GPU-hours, vs kube-scheduler", fmt.Sprintf("≤ %.2f×", t.GPUHoursRatio),
		hoursMeasured, hoursGot, hoursMeasured && lockstep.IncompleteJobs == 0 && lockstep.GPUHours <= t.GPUHoursRatio*kube.GPUHours))
	var ours, theirs float64
	var measured bool
	if r.Scale != nil {
		var ok1, ok2 bool
		ours, ok1 = r.Scale.PodsPerSecond[SchedulerLockstep]
		theirs, ok2 = r.Scale.PodsPerSecond[SchedulerKube]
		measured = ok1 && ok2 && theirs > 0
	}
	got := ""
	if measured {
		got = fmt.Sprintf("%.2f× (%.1f vs %.1f pods/s%s)", ours/theirs, ours, theirs, r.Scale.mediansOf())
	}
	checks = append(checks, check("pods bound per second at scale, vs kube-scheduler", fmt.Sprintf("≥ %.2f×", t.ScaleThroughputRatio),
		measured, got, measured && ours >= t.ScaleThroughputRatio*theirs))

	var ourRSS, theirRSS uint64
	measured = false
	if r.Scale != nil {
		var ok1, ok2 bool
		ourRSS, ok1 = r.Scale.PeakRSSBytes[SchedulerLockstep]
		theirRSS, ok2 = r.Scale.PeakRSSBytes[SchedulerKube]
		measured = ok1 && ok2 && theirRSS > 0
	}
	got = ""
	if measured {
		got = fmt.Sprintf("%.2f× (%s vs %s%s)", float64(ourRSS)/float64(theirRSS), formatMiB(ourRSS), formatMiB(theirRSS), r.Scale.mediansOf())
	}
	checks = append(checks, check("peak RSS at scale, vs kube-scheduler", fmt.Sprintf("≤ %.2f×", t.ScaleMemoryRatio),
		measured, got, measured && float64(ourRSS) <= t.ScaleMemoryRatio*float64(theirRSS)))

	var ourHeap, theirHeap uint64
	var rounds int
	measured = false
	if ip := r.InProcess; ip != nil {
		var n1, n2 int
		ours, ourHeap, n1 = ip.Median(SchedulerLockstep)
		theirs, theirHeap, n2 = ip.Median(SchedulerKube)
		rounds = min(n1, n2)
		measured = rounds > 0 && theirs > 0
	}
	got = ""
	if measured {
		got = fmt.Sprintf("%.2f× (%.1f vs %.1f pods/s, median of %d rounds)", ours/theirs, ours, theirs, rounds)
	}
	checks = append(checks, check("pods bound per second in process, vs kube-scheduler", fmt.Sprintf("≥ %.2f×", t.ScaleThroughputRatio),
		measured, got, measured && ours >= t.ScaleThroughputRatio*theirs))
	measured = measured && theirHeap > 0
	got = ""
	if measured {
		got = fmt.Sprintf("%.2f× (%s vs %s)", float64(ourHeap)/float64(theirHeap), formatMiB(ourHeap), formatMiB(theirHeap))
	}
	checks = append(checks, check("peak heap in process, vs kube-scheduler", fmt.Sprintf("≤ %.2f×", t.ScaleMemoryRatio),
		measured, got, measured && float64(ourHeap) <= t.ScaleMemoryRatio*float64(theirHeap)))
	return checks
}

// formatMiB writes bytes in MiB.
func formatMiB(b uint64) string {
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// WriteJSON writes the report as indented JSON, with the evaluated targets
// under "target_checks".
func (r Report) WriteJSON(w io.Writer) error {
	out := struct {
		Report
		TargetChecks []TargetCheck `json:"target_checks"`
	}{r, r.CheckTargets()}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return nil
}

// ReadJSON reads a report written by WriteJSON.
func ReadJSON(r io.Reader) (Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return Report{}, fmt.Errorf("reading the JSON report: %w", err)
	}
	return rep, nil
}

// WriteMarkdown writes the report: a header, one table with a row per metric
// and a column per scheduler, the scale run, then the targets.
func (r Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# Lockstep benchmark\n\n")
	fmt.Fprintf(&b, "Model `%s`, trace `%s`, time compression %s×, on %s.\n", r.Model, r.Trace, formatFloat(r.TimeCompression), r.Host)
	if r.Command != "" {
		fmt.Fprintf(&b, "\n```\n%s\n```\n", r.Command)
	}
	b.WriteString("\nRows marked (trace time) are replay times multiplied by the time compression: what the trace's jobs take on a real cluster. Other times are wall-clock times of the compressed replay.\n\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}

	header := []string{"metric"}
	for _, res := range r.Results {
		header = append(header, res.Scheduler)
	}
	writeRow(&b, header)
	writeRow(&b, slices.Repeat([]string{"---"}, len(header)))
	for _, row := range metricRows() {
		cells := []string{row.name}
		if row.name == partialRowName && len(r.Results) > 0 {
			cells[0] = fmt.Sprintf("%s (> %g s)", partialRowName, r.Results[0].PartialGangAfterSeconds)
		}
		for _, res := range r.Results {
			cells = append(cells, row.cell(res))
		}
		writeRow(&b, cells)
	}

	if r.DRA != nil {
		r.DRA.writeMarkdown(&b, r.Results)
	}

	if s := r.Scale; s != nil {
		b.WriteString("\n## Scale\n\n")
		fmt.Fprintf(&b, "Model `%s`: %d nodes, %d jobs, %d pods", s.Model, s.Nodes, s.Jobs, s.Pods)
		if s.Rounds > 1 {
			fmt.Fprintf(&b, "; %d rounds on one cluster, medians first", s.Rounds)
		}
		if len(s.Runs) > 0 {
			b.WriteString(", then each run in the order they ran, with the CPU spent from the scheduler's start to its last bind and, as cores, from its first bind to its last: the window pods/s is measured over")
		}
		b.WriteString(".\n\n")
		writeRow(&b, []string{"scheduler", "pods bound per second", "peak RSS"})
		writeRow(&b, []string{"---", "---", "---"})
		for _, name := range r.scaleOrder() {
			rss := "—"
			if v, ok := s.PeakRSSBytes[name]; ok {
				rss = formatMiB(v)
			}
			writeRow(&b, []string{name, fmt.Sprintf("%.1f", s.PodsPerSecond[name]), rss})
		}
		if len(s.Runs) > 0 {
			b.WriteString("\n")
			writeRow(&b, []string{"round", "scheduler", "pods bound per second", "peak RSS", "start to first bind", "start to last bind", "scheduler CPU", "rest of the cluster's CPU", "cores from the first bind (scheduler + rest)"})
			writeRow(&b, []string{"---", "---", "---", "---", "---", "---", "---", "---", "---"})
			for _, run := range s.Runs {
				first, wall, sched, rest, window := "—", "—", "—", "—", "—"
				if run.WallSeconds > 0 {
					wall = fmt.Sprintf("%.1f s", run.WallSeconds)
					sched = fmt.Sprintf("%.1f s (%.1f cores)", run.SchedulerCPUSeconds, run.SchedulerCPUSeconds/run.WallSeconds)
					rest = fmt.Sprintf("%.1f s (%.1f cores)", run.ClusterCPUSeconds, run.ClusterCPUSeconds/run.WallSeconds)
				}
				if run.FirstBindSeconds > 0 {
					first = fmt.Sprintf("%.1f s", run.FirstBindSeconds)
					if w := run.WallSeconds - run.FirstBindSeconds; w > 0 {
						window = fmt.Sprintf("%.1f + %.1f", run.BindSchedulerCPUSeconds/w, run.BindClusterCPUSeconds/w)
					}
				}
				writeRow(&b, []string{fmt.Sprint(run.Round), run.Scheduler, fmt.Sprintf("%.1f", run.PodsPerSecond), formatMiB(run.PeakRSSBytes), first, wall, sched, rest, window})
			}
		}
	}

	if r.InProcess != nil {
		r.InProcess.writeMarkdown(&b)
	}

	if r.Priority != nil {
		r.Priority.writeMarkdown(&b)
	}

	if r.Sweep != nil {
		r.Sweep.writeMarkdown(&b)
	}

	b.WriteString("\n## Lockstep targets\n\n")
	writeRow(&b, []string{"target", "want", "got", "status"})
	writeRow(&b, []string{"---", "---", "---", "---"})
	for _, c := range r.CheckTargets() {
		writeRow(&b, []string{c.Target, c.Want, c.Got, c.Status})
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing the Markdown report: %w", err)
	}
	return nil
}

// writeCPURows writes, for runs that recorded them, the CPU the scheduler
// and the control plane spent and when each part of the pods was bound.
func writeCPURows(b *strings.Builder, runs []InProcessRun) {
	var rows [][]string
	for _, run := range runs {
		if run.WallSeconds == 0 || len(run.BoundBy) != 10 {
			continue
		}
		rows = append(rows, []string{fmt.Sprint(run.Round), run.Scheduler, fmt.Sprintf("%.1f s", run.WallSeconds),
			fmt.Sprintf("%.1f s", run.SchedulerCPUSeconds), fmt.Sprintf("%.1f s", run.ControlPlaneCPUSeconds),
			fmt.Sprintf("%.1f / %.1f / %.1f s", run.BoundBy[0], run.BoundBy[4], run.BoundBy[9])})
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nCPU during each run (from the scheduler's start to its last bind; the scheduler's process and the control plane, kube-apiserver and etcd, share the machine) and when 10%, 50% and all of the pods were bound:\n\n")
	writeRow(b, []string{"round", "scheduler", "run", "scheduler CPU", "control plane CPU", "10% / 50% / 100% bound"})
	writeRow(b, []string{"---", "---", "---", "---", "---", "---"})
	for _, r := range rows {
		writeRow(b, r)
	}
}

// writeMarkdown writes the in-process scale run's section: the burst's
// mix of job sizes when recorded, each run, the medians and their ratios,
// Lockstep's to kube-scheduler's, which the targets are stated in.
func (ip *InProcessResult) writeMarkdown(b *strings.Builder) {
	b.WriteString("\n## Scale, in process\n\n")
	fmt.Fprintf(b, "Model `%s`: %d nodes, %d pods; the schedulers run in turn in one process against one apiserver, %d rounds.\n\n", ip.Model, ip.Nodes, ip.Pods, ip.Rounds)
	if len(ip.Mix) > 0 {
		fmt.Fprintf(b, "Burst `%s`: %d jobs, each one PodGroup; by GPUs per job:\n\n", ip.Burst, ip.Jobs)
		writeRow(b, []string{"GPUs per job", "jobs", "pods"})
		writeRow(b, []string{"---", "---", "---"})
		for _, m := range ip.Mix {
			writeRow(b, []string{fmt.Sprint(m.GPUs), fmt.Sprint(m.Jobs), fmt.Sprint(m.Pods)})
		}
		b.WriteString("\n")
	}
	writeRow(b, []string{"round", "scheduler", "pods bound per second", "peak heap"})
	writeRow(b, []string{"---", "---", "---", "---"})
	for _, run := range ip.Runs {
		writeRow(b, []string{fmt.Sprint(run.Round), run.Scheduler, fmt.Sprintf("%.1f", run.PodsPerSecond), formatMiB(run.PeakHeapBytes)})
	}
	for _, name := range []string{SchedulerKube, SchedulerLockstep} {
		if rate, heap, n := ip.Median(name); n > 0 {
			writeRow(b, []string{"median", name, fmt.Sprintf("%.1f", rate), formatMiB(heap)})
		}
	}
	ours, ourHeap, n1 := ip.Median(SchedulerLockstep)
	theirs, theirHeap, n2 := ip.Median(SchedulerKube)
	if n1 > 0 && n2 > 0 && theirs > 0 && theirHeap > 0 {
		fmt.Fprintf(b, "\nLockstep / kube-scheduler, medians: %.2f× the pods bound per second, %.2f× the peak heap.\n",
			ours/theirs, float64(ourHeap)/float64(theirHeap))
	}
	writeCPURows(b, ip.Runs)
}

// scaleOrder lists the scale run's schedulers in the order of Results, then
// the others by name.
func (r Report) scaleOrder() []string {
	var names, rest []string
	for _, res := range r.Results {
		if _, ok := r.Scale.PodsPerSecond[res.Scheduler]; ok && !slices.Contains(names, res.Scheduler) {
			names = append(names, res.Scheduler)
		}
	}
	for name := range r.Scale.PodsPerSecond {
		if !slices.Contains(names, name) {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

const partialRowName = "partially placed gangs"

// metricRow is a row of the Markdown table.
type metricRow struct {
	name string
	cell func(Result) string
}

// metricRows returns the rows of the Markdown table, in order.
func metricRows() []metricRow {
	return []metricRow{
		{"jobs finished", func(r Result) string { return fmt.Sprintf("%d/%d", r.FinishedJobs, r.Jobs) }},
		{"placement efficiency, mean", func(r Result) string { return formatRatio(r.EfficiencyMean) }},
		{"placement efficiency, p10", func(r Result) string { return formatRatio(r.EfficiencyP10) }},
		{"multi-GPU jobs rated (unmodelled)", func(r Result) string {
			return fmt.Sprintf("%d/%d (%d)", r.EfficiencyJobs, r.MultiGPUJobs, r.UnmodelledJobs)
		}},
		{"multi-node jobs in one leaf", func(r Result) string { return formatShare(r.OneLeafShare, r.OneLeafJobs, r.MultiNodeJobs) }},
		{"multi-node jobs in one NVLink domain", func(r Result) string {
			return formatShare(r.OneNVLinkDomainShare, r.OneNVLinkDomainJobs, r.MultiNodeJobs)
		}},
		{"job completion time, mean (trace time)", func(r Result) string { return formatJCT(r.JCTMeanSeconds, r) }},
		{"job completion time, p50 (trace time)", func(r Result) string { return formatJCT(r.JCTP50Seconds, r) }},
		{"job completion time, p99 (trace time)", func(r Result) string { return formatJCT(r.JCTP99Seconds, r) }},
		{"GPU-hours (trace time)", func(r Result) string {
			s := fmt.Sprintf("%.1f", r.GPUHours)
			if r.IncompleteJobs > 0 {
				s += fmt.Sprintf(" (%d unfinished: the rest of their work not counted)", r.IncompleteJobs)
			}
			return s
		}},
		{"GPU-hours the trace needs at ideal placement", func(r Result) string { return fmt.Sprintf("%.1f", r.IdealGPUHours) }},
		{"GPU-hours of finished jobs by the runtime model", func(r Result) string { return fmt.Sprintf("%.1f", r.ModelledGPUHours) }},
		{"useful GPU utilization (whole gangs)", func(r Result) string { return formatPercent(r.UsefulUtilization) }},
		{"GPU time held by incomplete gangs (waste)", func(r Result) string {
			if r.WasteShare == nil {
				return "n/a"
			}
			return fmt.Sprintf("%.1f GPU-h (%.1f%%)", r.WasteGPUHours, 100**r.WasteShare)
		}},
		{"makespan (trace time)", func(r Result) string { return formatMakespan(r.MakespanTraceSeconds, r.MakespanIncomplete) }},
		{"gang wait, p50", func(r Result) string { return formatWait(r.GangWaitP50Seconds) }},
		{"gang wait, p99", func(r Result) string { return formatWait(r.GangWaitP99Seconds) }},
		{"jobs never fully bound", func(r Result) string { return fmt.Sprint(r.NeverFullyBoundJobs) }},
		{"makespan (replay)", func(r Result) string { return formatMakespan(r.MakespanSeconds, r.MakespanIncomplete) }},
		{"GPUs held, time-weighted mean (incomplete gangs included)", func(r Result) string { return formatPercent(r.UtilizationMean) }},
		{"pods bound per second", func(r Result) string {
			if r.PodsPerSecond == nil {
				return "n/a"
			}
			return fmt.Sprintf("%.1f", *r.PodsPerSecond)
		}},
		{partialRowName, func(r Result) string { return fmt.Sprint(r.PartialGangs) }},
		{"gangs deadlocked at the end", func(r Result) string { return fmt.Sprint(r.DeadlockedGangs) }},
	}
}

func writeRow(b *strings.Builder, cells []string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
	}
	b.WriteString("\n")
}

func formatRatio(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", *v)
}

func formatPercent(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// formatJCT is formatWait, saying how many jobs the statistic leaves out
// because they did not finish.
func formatJCT(seconds *float64, r Result) string {
	s := formatWait(seconds)
	if r.IncompleteJobs > 0 {
		s += fmt.Sprintf(" (%d unfinished not counted)", r.IncompleteJobs)
	}
	return s
}

func formatShare(v *float64, part, whole int) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%% (%d/%d)", 100**v, part, whole)
}

// formatWait writes seconds as "2.5 s" below a minute and as a Go duration
// rounded to the second above, "6m52s".
func formatWait(seconds *float64) string {
	switch {
	case seconds == nil:
		return "n/a"
	case *seconds < 59.95:
		return fmt.Sprintf("%.1f s", *seconds)
	default:
		return time.Duration(*seconds * float64(time.Second)).Round(time.Second).String()
	}
}

// formatMakespan is formatWait, marked as a lower bound when the makespan
// ended with observation.
func formatMakespan(seconds float64, incomplete bool) string {
	s := formatWait(&seconds)
	if incomplete {
		s = "≥ " + s + " (incomplete)"
	}
	return s
}

func formatFloat(v float64) string { return strings.TrimSuffix(fmt.Sprintf("%g", v), ".0") }

// WriteAll writes report.md, results.json and the plots into dir, creating
// it if needed.
func (r Report) WriteAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the report directory: %w", err)
	}
	write := func(name string, fn func(io.Writer) error) (err error) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		return fn(f)
	}
	if err := write("report.md", r.WriteMarkdown); err != nil {
		return err
	}
	if err := write("results.json", r.WriteJSON); err != nil {
		return err
	}
	return r.WritePlots(dir)
}

// mediansOf says, for a check's figure, that it is a median of rounds.
func (s *ScaleResult) mediansOf() string {
	if s.Rounds < 2 {
		return ""
	}
	return fmt.Sprintf(", median of %d rounds", s.Rounds)
}
