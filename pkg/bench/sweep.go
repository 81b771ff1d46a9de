package bench

import (
	"errors"
	"fmt"
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
	DeployedWaitSeconds float64      `json:"deployed_wait_s"`
	Points              []SweepPoint `json:"points"`
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

// Tolerances of Suggested: about the spread of repeated replays of one
// configuration on a 2-core machine, so a point inside them is as good as
// the best one.
const (
	suggestGPUHoursTolerance   = 0.01
	suggestEfficiencyTolerance = 0.005
)

// Suggested returns the preferredWait the sweep argues for: the longest
// wait whose replay finished every job whole (no partial or deadlocked
// gangs) with an efficiency mean within suggestEfficiencyTolerance of the
// sweep's best and GPU-hours within suggestGPUHoursTolerance of its
// lowest. The longest, because a longer wait is what lets a Preferred gang
// hold out for a tight domain when one frees soon; past where it costs
// GPU-hours or efficiency, the trace says it does not pay. False when no
// point qualifies.
func (s Sweep) Suggested() (SweepPoint, bool) {
	var bestEff, leastHours float64
	leastHours = -1
	whole := func(p SweepPoint) bool {
		return p.Jobs > 0 && p.FinishedJobs == p.Jobs && p.PartialGangs == 0 && p.DeadlockedGangs == 0
	}
	for _, p := range s.Points {
		if !whole(p) {
			continue
		}
		if p.EfficiencyMean != nil {
			bestEff = max(bestEff, *p.EfficiencyMean)
		}
		if leastHours < 0 || p.GPUHours < leastHours {
			leastHours = p.GPUHours
		}
	}
	var pick SweepPoint
	found := false
	for _, p := range s.sorted() {
		if !whole(p) || p.GPUHours > leastHours*(1+suggestGPUHoursTolerance) {
			continue
		}
		if p.EfficiencyMean != nil && *p.EfficiencyMean < bestEff-suggestEfficiencyTolerance {
			continue
		}
		pick, found = p, true
	}
	return pick, found
}

func (s Sweep) writeMarkdown(b *strings.Builder) {
	b.WriteString("\n## preferredWait sweep\n\n")
	fmt.Fprintf(b, "Lockstep alone, once per TopologyPlacement `preferredWait` (trace time; the replay runs it divided by the time compression); deploy/scheduler/config.yaml has %s. Plot: `%s`.\n\n",
		formatWait(&s.DeployedWaitSeconds), SweepPlotFile)
	writeRow(b, []string{"preferredWait", "jobs finished", "JCT mean", "JCT p99", "GPU-hours", "efficiency mean", "multi-node jobs in one leaf", "partially placed gangs"})
	writeRow(b, slices.Repeat([]string{"---"}, 8))
	for _, p := range s.sorted() {
		leaf := "n/a"
		if p.OneLeafShare != nil {
			leaf = fmt.Sprintf("%.0f%%", 100**p.OneLeafShare)
		}
		writeRow(b, []string{
			formatWait(&p.WaitSeconds), fmt.Sprintf("%d/%d", p.FinishedJobs, p.Jobs),
			formatWait(p.JCTMeanSeconds), formatWait(p.JCTP99Seconds), fmt.Sprintf("%.1f", p.GPUHours),
			formatRatio(p.EfficiencyMean), leaf, fmt.Sprint(p.PartialGangs),
		})
	}
	if p, ok := s.Suggested(); ok {
		fmt.Fprintf(b, "\nSuggested preferredWait: **%s**, the longest wait that finished every job whole with an efficiency mean within %.3f of the best and GPU-hours within %.0f%% of the lowest (docs/benchmarks.md, \"The preferredWait sweep\").\n",
			formatWait(&p.WaitSeconds), suggestEfficiencyTolerance, 100*suggestGPUHoursTolerance)
	} else {
		b.WriteString("\nNo preferredWait of the sweep finished every job whole: none is suggested.\n")
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
