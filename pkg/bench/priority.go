package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// PriorityClass is a PriorityClass a trace may name in its priority column.
// The runner creates the classes a trace uses on each replay cluster, so
// every scheduler sees the same priorities.
type PriorityClass struct {
	Name  string
	Value int32
}

// The benchmark's priority classes: a release run and the work it may
// displace.
const (
	PriorityHigh = "bench-high"
	PriorityLow  = "bench-low"
)

// PriorityClasses are the classes a trace may name, highest first: the
// order of the report's Priorities table.
var PriorityClasses = []PriorityClass{
	{Name: PriorityHigh, Value: 1000},
	{Name: PriorityLow, Value: 100},
}

// LookupPriorityClass returns the class of PriorityClasses named name.
func LookupPriorityClass(name string) (PriorityClass, bool) {
	for _, c := range PriorityClasses {
		if c.Name == name {
			return c, true
		}
	}
	return PriorityClass{}, false
}

// UsedPriorityClasses returns the classes jobs name, highest first.
func UsedPriorityClasses(jobs []Job) []PriorityClass {
	var used []PriorityClass
	for _, c := range PriorityClasses {
		for _, j := range jobs {
			if j.Priority == c.Name {
				used = append(used, c)
				break
			}
		}
	}
	return used
}

func checkPriority(name string) error {
	if _, ok := LookupPriorityClass(name); name != "" && !ok {
		names := make([]string, len(PriorityClasses))
		for i, c := range PriorityClasses {
			names[i] = c.Name
		}
		return fmt.Errorf("priority class %q is not one of the benchmark's: name %s, or leave it empty for none", name, strings.Join(names, " or "))
	}
	return nil
}

// PriorityResult is one priority class's part of a Result. Waits are
// wall-clock seconds of the replay, like the Result's gang wait; makespan
// and GPU-hours are in trace time.
type PriorityResult struct {
	// Class is the PriorityClass's name, "" for the jobs without one;
	// Value its priority (0 for none).
	Class string `json:"class"`
	Value int32  `json:"value"`
	Jobs  int    `json:"jobs"`
	// FinishedJobs finished; FullyBoundJobs had their last run's gang whole,
	// and the wait percentiles are over them: submission to that full bind.
	FinishedJobs       int      `json:"finished_jobs"`
	FullyBoundJobs     int      `json:"fully_bound_jobs"`
	GangWaitP50Seconds *float64 `json:"gang_wait_p50_s"`
	GangWaitP99Seconds *float64 `json:"gang_wait_p99_s"`
	// MakespanTraceSeconds runs from the class's first submission to its
	// last finish, or to the end of observation when MakespanIncomplete.
	MakespanTraceSeconds float64 `json:"makespan_trace_s"`
	MakespanIncomplete   bool    `json:"makespan_incomplete"`
	// The class's jobs' preemptions, as victims (Result).
	PreemptedJobs          int     `json:"preempted_jobs"`
	Preemptions            int     `json:"preemptions"`
	EvictedPods            int     `json:"evicted_pods"`
	PreemptionLostGPUHours float64 `json:"preemption_lost_gpu_hours"`
}

// priorityResults groups the run's jobs by priority class (perJob are
// their results, index for index): the classes of PriorityClasses the jobs
// use, then the jobs without a class if there are any; nil when no job
// names a class.
func priorityResults(r Run, perJob []JobResult, compression float64) []PriorityResult {
	used := make([]Job, len(r.Jobs))
	for i, jr := range r.Jobs {
		used[i] = jr.Job
	}
	classes := UsedPriorityClasses(used)
	if len(classes) == 0 {
		return nil
	}
	for _, j := range used {
		if j.Priority == "" {
			classes = append(classes, PriorityClass{})
			break
		}
	}
	out := make([]PriorityResult, len(classes))
	for ci, c := range classes {
		pr := PriorityResult{Class: c.Name, Value: c.Value}
		var waits []float64
		var first, last time.Time
		for i, jr := range r.Jobs {
			if jr.Job.Priority != c.Name {
				continue
			}
			job := perJob[i]
			pr.Jobs++
			if first.IsZero() || jr.Submitted.Before(first) {
				first = jr.Submitted
			}
			if job.Finished {
				pr.FinishedJobs++
				last = latest(last, jr.Finished)
			} else {
				pr.MakespanIncomplete = true
			}
			if job.WaitSeconds != nil {
				pr.FullyBoundJobs++
				waits = append(waits, *job.WaitSeconds)
			}
			if job.Preemptions > 0 {
				pr.PreemptedJobs++
			}
			pr.Preemptions += job.Preemptions
			pr.EvictedPods += job.EvictedPods
			pr.PreemptionLostGPUHours += job.PreemptionLostGPUHours
		}
		if pr.MakespanIncomplete {
			last = r.End
		}
		pr.MakespanTraceSeconds = max(0, last.Sub(first).Seconds()) * compression
		pr.GangWaitP50Seconds = percentile(waits, 50)
		pr.GangWaitP99Seconds = percentile(waits, 99)
		out[ci] = pr
	}
	return out
}

// PriorityReplay is a second replay, of a trace whose jobs name priority
// classes, once per scheduler: how long the high class waits for its gangs
// and what preempting the low class costs.
type PriorityReplay struct {
	Trace string `json:"trace"`
	// Notes say how the schedulers preempt, one sentence each.
	Notes []string `json:"notes,omitempty"`
	// Results are one per scheduler, in run order.
	Results []Result `json:"results"`
}

// classes returns the classes of the results' Priorities, in the order of
// PriorityClasses, then "" (jobs without a class).
func (p *PriorityReplay) classes() []PriorityClass {
	seen := map[string]bool{}
	for _, res := range p.Results {
		for _, pr := range res.Priorities {
			seen[pr.Class] = true
		}
	}
	var out []PriorityClass
	for _, c := range append(slices.Clone(PriorityClasses), PriorityClass{}) {
		if seen[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

// writeMarkdown writes the Priorities section: per class, then for all
// classes together, a row per metric and a column per scheduler.
func (p *PriorityReplay) writeMarkdown(b *strings.Builder) {
	b.WriteString("\n## Priorities\n\n")
	fmt.Fprintf(b, "Trace `%s`, replayed once per scheduler on the model above with the same time compression. Gang waits are the last run's (submission to its gang bound whole), in replay time; a preempted job restarts whole, and its lost GPU-hours are its GPUs times how long its gang had run when evicted.\n\n", p.Trace)
	for _, n := range p.Notes {
		fmt.Fprintf(b, "- %s\n", n)
	}
	if len(p.Notes) > 0 {
		b.WriteString("\n")
	}
	header := []string{"metric"}
	for _, res := range p.Results {
		header = append(header, res.Scheduler)
	}
	writeRow(b, header)
	writeRow(b, slices.Repeat([]string{"---"}, len(header)))
	for _, c := range p.classes() {
		name := c.Name
		if name == "" {
			name = "no class"
		} else {
			name = fmt.Sprintf("%s (%d)", c.Name, c.Value)
		}
		for _, row := range priorityRows() {
			cells := []string{name + ": " + row.name}
			for _, res := range p.Results {
				cell := "n/a"
				if i := slices.IndexFunc(res.Priorities, func(pr PriorityResult) bool { return pr.Class == c.Name }); i >= 0 {
					cell = row.cell(res.Priorities[i])
				}
				cells = append(cells, cell)
			}
			writeRow(b, cells)
		}
	}
	for _, row := range []metricRow{
		{"all: jobs finished", func(r Result) string { return fmt.Sprintf("%d/%d", r.FinishedJobs, r.Jobs) }},
		{"all: jobs preempted (preemptions)", func(r Result) string { return fmt.Sprintf("%d (%d)", r.PreemptedJobs, r.Preemptions) }},
		{"all: pods evicted", func(r Result) string { return fmt.Sprint(r.EvictedPods) }},
		{"all: preemptions per preemptor (most by one)", preemptionsPerPreemptor},
		{"all: GPU-hours lost to preemption (trace time)", func(r Result) string { return fmt.Sprintf("%.1f", r.PreemptionLostGPUHours) }},
		{"all: GPU-hours (trace time)", func(r Result) string { return fmt.Sprintf("%.1f", r.GPUHours) }},
		{"all: makespan (trace time)", func(r Result) string {
			return formatMakespan(r.MakespanTraceSeconds, r.MakespanIncomplete)
		}},
	} {
		cells := []string{row.name}
		for _, res := range p.Results {
			cells = append(cells, row.cell(res))
		}
		writeRow(b, cells)
	}
}

// preemptionsPerPreemptor is the cell of the victim runs each preemptor
// ended, on average and at most: "n/a" when no preemption names its
// preemptor.
func preemptionsPerPreemptor(r Result) string {
	if r.Preemptors == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (%d)", float64(r.AttributedPreemptions)/float64(r.Preemptors), r.MostPreemptionsByOne)
}

// priorityRow is a per-class row of the Priorities table.
type priorityRow struct {
	name string
	cell func(PriorityResult) string
}

func priorityRows() []priorityRow {
	return []priorityRow{
		{"jobs finished", func(p PriorityResult) string { return fmt.Sprintf("%d/%d", p.FinishedJobs, p.Jobs) }},
		{"gang wait, p50", func(p PriorityResult) string { return formatWait(p.GangWaitP50Seconds) }},
		{"gang wait, p99", func(p PriorityResult) string { return formatWait(p.GangWaitP99Seconds) }},
		{"makespan (trace time)", func(p PriorityResult) string {
			return formatMakespan(p.MakespanTraceSeconds, p.MakespanIncomplete)
		}},
		{"jobs preempted (preemptions)", func(p PriorityResult) string { return fmt.Sprintf("%d (%d)", p.PreemptedJobs, p.Preemptions) }},
		{"pods evicted", func(p PriorityResult) string { return fmt.Sprint(p.EvictedPods) }},
		{"GPU-hours lost to preemption (trace time)", func(p PriorityResult) string { return fmt.Sprintf("%.1f", p.PreemptionLostGPUHours) }},
	}
}
