package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// SweepPlotFile is the plot of the preferredWait sweep.
const SweepPlotFile = "preferred-wait-sweep.png"

// Sweep is Lockstep replayed once per TopologyPlacement preferredWait, the
// rest of its configuration as deployed.
type Sweep struct {
	// DeployedWaitSeconds is deploy/scheduler/config.yaml's preferredWait,
	// in trace time.
	DeployedWaitSeconds float64 `json:"deployed_wait_s"`
	// Points has one replay per wait, and the deployed wait twice when the
	// comparison replayed Lockstep: the two measure this run's noise.
	Points []SweepPoint `json:"points"`
}

// SweepPoint is one replay of the sweep.
type SweepPoint struct {
	// WaitSeconds is the preferredWait in trace time; the replay ran with
	// it divided by the time compression.
	WaitSeconds     float64  `json:"wait_s"`
	Jobs            int      `json:"jobs"`
	FinishedJobs    int      `json:"finished_jobs"`
	JCTMeanSeconds  *float64 `json:"jct_mean_s"`
	JCTP99Seconds   *float64 `json:"jct_p99_s"`
	GPUHours        float64  `json:"gpu_hours"`
	EfficiencyMean  *float64 `json:"efficiency_mean"`
	OneLeafShare    *float64 `json:"one_leaf_share"`
	PartialGangs    int      `json:"partial_gangs"`
	DeadlockedGangs int      `json:"deadlocked_gangs"`
}

// NewSweepPoint takes the sweep's numbers from a Lockstep replay with
// preferredWait wait (trace time).
func NewSweepPoint(wait time.Duration, r Result) SweepPoint {
	return SweepPoint{
		WaitSeconds:     wait.Seconds(),
		Jobs:            r.Jobs,
		FinishedJobs:    r.FinishedJobs,
		JCTMeanSeconds:  r.JCTMeanSeconds,
		JCTP99Seconds:   r.JCTP99Seconds,
		GPUHours:        r.GPUHours,
		EfficiencyMean:  r.EfficiencyMean,
		OneLeafShare:    r.OneLeafShare,
		PartialGangs:    r.PartialGangs,
		DeadlockedGangs: r.DeadlockedGangs,
	}
}

// sorted returns the points by wait.
func (s Sweep) sorted() []SweepPoint {
	points := slices.Clone(s.Points)
	slices.SortStableFunc(points, func(a, b SweepPoint) int {
		switch {
		case a.WaitSeconds < b.WaitSeconds:
			return -1
		case a.WaitSeconds > b.WaitSeconds:
			return 1
		}
		return 0
	})
	return points
}

// suggestGPUHoursFloor is the least GPU-hours tolerance of Suggested. Two
// make bench runs of one configuration on a 2-core machine differed by up
// to 1.5% in GPU-hours (docs/benchmarks.md, "The preferredWait sweep"), so
// a 1% tolerance let noise move the suggestion between 30 s and 5 min.
const suggestGPUHoursFloor = 0.02

// suggestEfficiencyTolerance is how far below the sweep's best efficiency
// mean a point may be and still be as good as the best.
const suggestEfficiencyTolerance = 0.005

// whole reports whether the replay finished every job with no gang left
// partial or deadlocked: only such replays are references.
func (p SweepPoint) whole() bool {
	return p.Jobs > 0 && p.FinishedJobs == p.Jobs && p.PartialGangs == 0 && p.DeadlockedGangs == 0
}

// waitSummary is the replays of one wait taken together.
type waitSummary struct {
	wait float64
	// whole is every replay of the wait whole.
	whole bool
	// gpuHours is their mean; efficiency their lowest mean.
	gpuHours   float64
	efficiency *float64
}

// byWait groups the points by wait, ascending.
func (s Sweep) byWait() []waitSummary {
	var out []waitSummary
	for _, p := range s.sorted() {
		if n := len(out); n == 0 || out[n-1].wait != p.WaitSeconds {
			out = append(out, waitSummary{wait: p.WaitSeconds, whole: true})
		}
		w := &out[len(out)-1]
		w.whole = w.whole && p.whole()
		w.gpuHours += p.GPUHours
		if p.EfficiencyMean != nil && (w.efficiency == nil || *p.EfficiencyMean < *w.efficiency) {
			w.efficiency = p.EfficiencyMean
		}
	}
	for i := range out {
		n := 0
		for _, p := range s.Points {
			if p.WaitSeconds == out[i].wait {
				n++
			}
		}
		out[i].gpuHours /= float64(n)
	}
	return out
}

// RepeatSpread is the largest relative difference in GPU-hours between two
// replays of one wait (the sweep replays the deployed wait beside the
// comparison's Lockstep replay), or 0 when no wait was replayed twice: the
// noise of this machine, measured in this run.
func (s Sweep) RepeatSpread() float64 {
	spread := 0.0
	for i, a := range s.Points {
		for _, b := range s.Points[i+1:] {
			if a.WaitSeconds != b.WaitSeconds || min(a.GPUHours, b.GPUHours) <= 0 {
				continue
			}
			spread = max(spread, (max(a.GPUHours, b.GPUHours)-min(a.GPUHours, b.GPUHours))/min(a.GPUHours, b.GPUHours))
		}
	}
	return spread
}

// GPUHoursTolerance is how much more GPU-hours than the sweep's lowest a
// wait may cost and still count as good as the best: the larger of
// suggestGPUHoursFloor and RepeatSpread.
func (s Sweep) GPUHoursTolerance() float64 {
	return max(suggestGPUHoursFloor, s.RepeatSpread())
}

// Suggested returns the preferredWait the sweep argues for, and whether it
// is the deployed one. A wait is good when every replay of it finished
// every job whole, its mean GPU-hours are within GPUHoursTolerance of the
// lowest such wait's and its efficiency mean within
// suggestEfficiencyTolerance of the best. The deployed wait stands while it
// is good: a change must be earned by a difference larger than this run's
// noise, or the default would follow the noise from run to run. Otherwise
// the good wait nearest the deployed one (the shorter on a tie) is
// suggested. False when no wait is whole.
func (s Sweep) Suggested() (wait float64, deployed, ok bool) {
	waits := s.byWait()
	leastHours, bestEff := -1.0, 0.0
	for _, w := range waits {
		if !w.whole {
			continue
		}
		if leastHours < 0 || w.gpuHours < leastHours {
			leastHours = w.gpuHours
		}
		if w.efficiency != nil {
			bestEff = max(bestEff, *w.efficiency)
		}
	}
	if leastHours < 0 {
		return 0, false, false
	}
	tolerance := s.GPUHoursTolerance()
	good := func(w waitSummary) bool {
		return w.whole && w.gpuHours <= leastHours*(1+tolerance) &&
			(w.efficiency == nil || *w.efficiency >= bestEff-suggestEfficiencyTolerance)
	}
	distance := func(w float64) float64 { return math.Abs(w - s.DeployedWaitSeconds) }
	found := false
	for _, w := range waits {
		if !good(w) {
			continue
		}
		if w.wait == s.DeployedWaitSeconds {
			return w.wait, true, true
		}
		if !found || distance(w.wait) < distance(wait) {
			wait, found = w.wait, true
		}
	}
	return wait, false, found
}

func (s Sweep) writeMarkdown(b *strings.Builder) {
	b.WriteString("\n## preferredWait sweep\n\n")
	fmt.Fprintf(b, "Lockstep alone, once per TopologyPlacement `preferredWait` (trace time; the replay runs it divided by the time compression); deploy/scheduler/config.yaml has %s. Plot: `%s`.\n\n",
		formatWait(&s.DeployedWaitSeconds), SweepPlotFile)
	writeRow(b, []string{"preferredWait", "jobs finished", "JCT mean", "JCT p99", "GPU-hours", "efficiency mean", "multi-node jobs in one leaf", "partially placed gangs"})
	writeRow(b, slices.Repeat([]string{"---"}, 8))
	seen := map[float64]bool{}
	for _, p := range s.sorted() {
		wait := formatWait(&p.WaitSeconds)
		if seen[p.WaitSeconds] {
			wait += " (again)"
		}
		seen[p.WaitSeconds] = true
		leaf := "n/a"
		if p.OneLeafShare != nil {
			leaf = fmt.Sprintf("%.0f%%", 100**p.OneLeafShare)
		}
		writeRow(b, []string{
			wait, fmt.Sprintf("%d/%d", p.FinishedJobs, p.Jobs),
			formatWait(p.JCTMeanSeconds), formatWait(p.JCTP99Seconds), fmt.Sprintf("%.1f", p.GPUHours),
			formatRatio(p.EfficiencyMean), leaf, fmt.Sprint(p.PartialGangs),
		})
	}
	if spread := s.RepeatSpread(); spread > 0 {
		fmt.Fprintf(b, "\nReplays of one preferredWait differed by %.1f%% in GPU-hours: this run's noise. ", 100*spread)
	} else {
		b.WriteString("\nNo preferredWait was replayed twice: this run did not measure its noise. ")
	}
	fmt.Fprintf(b, "A wait counts as good when every replay of it finished every job whole, with GPU-hours within %.1f%% of the lowest (the larger of the measured noise and %.0f%%) and an efficiency mean within %.3f of the best.\n",
		100*s.GPUHoursTolerance(), 100*suggestGPUHoursFloor, suggestEfficiencyTolerance)
	switch wait, deployed, ok := s.Suggested(); {
	case !ok:
		b.WriteString("\nNo preferredWait of the sweep finished every job whole: none is suggested.\n")
	case deployed:
		fmt.Fprintf(b, "\nSuggested preferredWait: **%s, as deployed**: it is good, and no other wait is better by more than the noise (docs/benchmarks.md, \"The preferredWait sweep\").\n", formatWait(&wait))
	default:
		fmt.Fprintf(b, "\nSuggested preferredWait: **%s**, the good wait nearest the deployed %s, which is not good on this trace (docs/benchmarks.md, \"The preferredWait sweep\").\n",
			formatWait(&wait), formatWait(&s.DeployedWaitSeconds))
	}
}

// writePlot writes SweepPlotFile into dir: JCT mean and p99 (minutes) above,
// GPU-hours below, against preferredWait.
func (s Sweep) writePlot(dir string) error {
	points := s.sorted()
	var mean, p99, hours plotter.XYs
	for _, p := range points {
		x := p.WaitSeconds
		if p.JCTMeanSeconds != nil {
			mean = append(mean, plotter.XY{X: x, Y: *p.JCTMeanSeconds / 60})
		}
		if p.JCTP99Seconds != nil {
			p99 = append(p99, plotter.XY{X: x, Y: *p.JCTP99Seconds / 60})
		}
		hours = append(hours, plotter.XY{X: x, Y: p.GPUHours})
	}
	top, bottom := plot.New(), plot.New()
	top.Title.Text = "Lockstep: job completion time vs preferredWait"
	top.Y.Label.Text = "JCT (trace minutes)"
	bottom.Title.Text = "Lockstep: GPU-hours of the trace vs preferredWait"
	bottom.Y.Label.Text = "GPU-hours"
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Label.Text = "preferredWait (trace seconds)"
		p.Add(plotter.NewGrid())
	}
	for i, l := range []struct {
		p      *plot.Plot
		name   string
		points plotter.XYs
	}{{top, "JCT mean", mean}, {top, "JCT p99", p99}, {bottom, "GPU-hours", hours}} {
		if len(l.points) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(l.points)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", SweepPlotFile, l.name, err)
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		line.Width = vg.Points(1.5)
		l.p.Add(line, points)
		l.p.Legend.Add(l.name, line, points)
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.Y.Min = 0
		p.X.Min = min(p.X.Min, 0)
		if p.X.Max <= p.X.Min {
			p.X.Max = p.X.Min + 1
		}
		if p.Y.Max <= p.Y.Min {
			p.Y.Max = p.Y.Min + 1
		}
	}
	img := vgimg.New(8*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4), PadY: vg.Points(12)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	path := filepath.Join(dir, SweepPlotFile)
	if err := writePNG(path, img); err != nil {
		return fmt.Errorf("writing %s: %w", SweepPlotFile, err)
	}
	return nil
}

// writePNG writes img to path as PNG.
func writePNG(path string, img *vgimg.Canvas) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}
