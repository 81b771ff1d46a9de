package bench

import (
	"cmp"
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
	slices.SortStableFunc(points, func(a, b SweepPoint) int { return cmp.Compare(a.WaitSeconds, b.WaitSeconds) })
	return points
}

// Floors of the tolerances within which a wait is as good as the best
// (docs/benchmarks.md, "The preferredWait sweep"). Two make bench runs of
// one configuration on a 2-core machine differed by up to 1.5% in
// GPU-hours, and two replays of one wait in one run by 0.007 in efficiency
// mean: one multi-node gang of the default trace's 69 multi-GPU jobs
// landing across leaves instead of in one moves the mean by about that.
// With 1% and 0.005, noise moved the suggestion between 30 s and 5 min.
const (
	suggestGPUHoursFloor   = 0.02
	suggestEfficiencyFloor = 0.01
)

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
	// gpuHours and efficiency are the means of its replays (efficiency
	// nil when no replay rated a job).
	gpuHours   float64
	efficiency *float64
}

// byWait groups the points by wait, ascending.
func (s Sweep) byWait() []waitSummary {
	points := s.sorted()
	var out []waitSummary
	for len(points) > 0 {
		n := 1
		for n < len(points) && points[n].WaitSeconds == points[0].WaitSeconds {
			n++
		}
		out = append(out, summarizeWait(points[:n]))
		points = points[n:]
	}
	return out
}

// summarizeWait takes the replays of one wait together.
func summarizeWait(replays []SweepPoint) waitSummary {
	w := waitSummary{wait: replays[0].WaitSeconds, whole: true}
	effSum, rated := 0.0, 0
	for _, p := range replays {
		w.whole = w.whole && p.whole()
		w.gpuHours += p.GPUHours / float64(len(replays))
		if p.EfficiencyMean != nil {
			effSum += *p.EfficiencyMean
			rated++
		}
	}
	if rated > 0 {
		mean := effSum / float64(rated)
		w.efficiency = &mean
	}
	return w
}

// repeats calls f for every two replays of one wait.
func (s Sweep) repeats(f func(a, b SweepPoint)) {
	for i, a := range s.Points {
		for _, b := range s.Points[i+1:] {
			if a.WaitSeconds == b.WaitSeconds {
				f(a, b)
			}
		}
	}
}

// RepeatSpread is the largest relative difference in GPU-hours between two
// replays of one wait (the sweep replays the deployed wait beside the
// comparison's Lockstep replay), or 0 when no wait was replayed twice: the
// noise of this machine, measured in this run.
func (s Sweep) RepeatSpread() float64 {
	spread := 0.0
	s.repeats(func(a, b SweepPoint) {
		if lo := min(a.GPUHours, b.GPUHours); lo > 0 {
			spread = max(spread, (max(a.GPUHours, b.GPUHours)-lo)/lo)
		}
	})
	return spread
}

// RepeatEfficiencySpread is the largest difference in efficiency mean
// between two replays of one wait, or 0.
func (s Sweep) RepeatEfficiencySpread() float64 {
	spread := 0.0
	s.repeats(func(a, b SweepPoint) {
		if a.EfficiencyMean != nil && b.EfficiencyMean != nil {
			spread = max(spread, math.Abs(*a.EfficiencyMean-*b.EfficiencyMean))
		}
	})
	return spread
}

// GPUHoursTolerance is how much more GPU-hours (relative) than the
// sweep's lowest a wait may cost and still count as good as the best: the
// larger of suggestGPUHoursFloor and RepeatSpread.
func (s Sweep) GPUHoursTolerance() float64 {
	return max(suggestGPUHoursFloor, s.RepeatSpread())
}

// EfficiencyTolerance is how far below the sweep's best efficiency mean a
// wait may be and still count as good as the best: the larger of
// suggestEfficiencyFloor and RepeatEfficiencySpread.
func (s Sweep) EfficiencyTolerance() float64 {
	return max(suggestEfficiencyFloor, s.RepeatEfficiencySpread())
}

// Suggestion is the preferredWait a sweep argues for.
type Suggestion struct {
	WaitSeconds float64
	// Outcome says why: one of the Suggest constants.
	Outcome string
}

// Outcomes of Sweep.Suggested.
const (
	// SuggestDeployedGood: the deployed wait is good; it stands.
	SuggestDeployedGood = "deployed-good"
	// SuggestNearestGood: the deployed wait is not good; the good wait
	// nearest it (the shorter on a tie) is suggested.
	SuggestNearestGood = "nearest-good"
	// SuggestDeployedNoneGood: no wait is good (the cheapest is not the
	// best placed), so the sweep gives no reason to move from the
	// deployed wait, which finished every job whole.
	SuggestDeployedNoneGood = "deployed-none-good"
	// SuggestCheapest: no wait is good and the deployed one did not
	// finish whole (or was not swept): the whole wait with the fewest
	// GPU-hours, the currency the sweep is about.
	SuggestCheapest = "cheapest"
)

// Suggested returns the preferredWait the sweep argues for; false when no
// wait of the sweep finished every job whole. A wait is good when every
// replay of it finished every job whole, its mean GPU-hours are within
// GPUHoursTolerance of the lowest whole wait's and its mean efficiency
// within EfficiencyTolerance of the best. The deployed wait stands while it
// is good: a change must be earned by a difference larger than this run's
// noise, or the default would follow the noise from run to run.
func (s Sweep) Suggested() (Suggestion, bool) {
	waits := s.byWait()
	var deployed, cheapest *waitSummary
	bestEff := 0.0
	for i := range waits {
		w := &waits[i]
		if !w.whole {
			continue
		}
		if w.wait == s.DeployedWaitSeconds {
			deployed = w
		}
		if cheapest == nil || w.gpuHours < cheapest.gpuHours {
			cheapest = w
		}
		if w.efficiency != nil {
			bestEff = max(bestEff, *w.efficiency)
		}
	}
	if cheapest == nil {
		return Suggestion{}, false
	}
	hoursTol, effTol := s.GPUHoursTolerance(), s.EfficiencyTolerance()
	good := func(w *waitSummary) bool {
		return w.whole && w.gpuHours <= cheapest.gpuHours*(1+hoursTol) &&
			(w.efficiency == nil || *w.efficiency >= bestEff-effTol)
	}
	if deployed != nil && good(deployed) {
		return Suggestion{WaitSeconds: deployed.wait, Outcome: SuggestDeployedGood}, true
	}
	distance := func(w *waitSummary) float64 { return math.Abs(w.wait - s.DeployedWaitSeconds) }
	var nearest *waitSummary
	for i := range waits {
		if w := &waits[i]; good(w) && (nearest == nil || distance(w) < distance(nearest)) {
			nearest = w
		}
	}
	switch {
	case nearest != nil:
		return Suggestion{WaitSeconds: nearest.wait, Outcome: SuggestNearestGood}, true
	case deployed != nil:
		return Suggestion{WaitSeconds: deployed.wait, Outcome: SuggestDeployedNoneGood}, true
	default:
		return Suggestion{WaitSeconds: cheapest.wait, Outcome: SuggestCheapest}, true
	}
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
	if s.RepeatSpread() > 0 || s.RepeatEfficiencySpread() > 0 {
		fmt.Fprintf(b, "\nReplays of one preferredWait differed by %.1f%% in GPU-hours and %.3f in efficiency mean: this run's noise. ",
			100*s.RepeatSpread(), s.RepeatEfficiencySpread())
	} else {
		b.WriteString("\nNo preferredWait was replayed twice: this run did not measure its noise. ")
	}
	fmt.Fprintf(b, "A wait is good when every replay of it finished every job whole, with mean GPU-hours within %.1f%% of the lowest and mean efficiency within %.3f of the best (each the larger of the noise and a floor of %.0f%% and %.2f).\n",
		100*s.GPUHoursTolerance(), s.EfficiencyTolerance(), 100*suggestGPUHoursFloor, suggestEfficiencyFloor)
	sug, ok := s.Suggested()
	wait := formatWait(&sug.WaitSeconds)
	const ref = ` (docs/benchmarks.md, "The preferredWait sweep")`
	switch {
	case !ok:
		b.WriteString("\nNo preferredWait of the sweep finished every job whole: none is suggested.\n")
	case sug.Outcome == SuggestDeployedGood:
		fmt.Fprintf(b, "\nSuggested preferredWait: **%s, as deployed**: it is good, so no other wait beats it by more than the noise%s.\n", wait, ref)
	case sug.Outcome == SuggestDeployedNoneGood:
		fmt.Fprintf(b, "\nSuggested preferredWait: **%s, as deployed**: no wait is good (the cheapest is not the best placed), so the sweep gives no reason to move%s.\n", wait, ref)
	case sug.Outcome == SuggestCheapest:
		fmt.Fprintf(b, "\nSuggested preferredWait: **%s**, the whole wait with the fewest GPU-hours: no wait is good, and the deployed %s did not finish every job whole%s.\n",
			wait, formatWait(&s.DeployedWaitSeconds), ref)
	default:
		fmt.Fprintf(b, "\nSuggested preferredWait: **%s**, the good wait nearest the deployed %s, which is not good on this trace%s.\n",
			wait, formatWait(&s.DeployedWaitSeconds), ref)
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
