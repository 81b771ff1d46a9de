package bench

import (
	"fmt"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot file names WritePlots writes.
const (
	EfficiencyPlotFile  = "efficiency-cdf.png"
	WaitPlotFile        = "wait-cdf.png"
	UtilizationPlotFile = "utilization.png"
)

// WritePlots writes three PNG plots into dir, one line per scheduler each:
// the CDF of placement efficiency over rated jobs, the CDF of gang wait, and
// GPU utilization over time. A scheduler with nothing to plot has no line.
func (r Report) WritePlots(dir string) error {
	type series struct {
		name   string
		points plotter.XYs
	}
	var eff, wait, util []series
	for _, res := range r.Results {
		var effs, waits []float64
		for _, j := range res.PerJob {
			if j.Efficiency != nil {
				effs = append(effs, *j.Efficiency)
			}
			if j.WaitSeconds != nil {
				waits = append(waits, *j.WaitSeconds)
			}
		}
		eff = append(eff, series{res.Scheduler, cdf(effs)})
		wait = append(wait, series{res.Scheduler, cdf(waits)})
		points := make(plotter.XYs, len(res.Utilization))
		for i, p := range res.Utilization {
			points[i] = plotter.XY{X: p.Seconds, Y: p.Busy}
		}
		util = append(util, series{res.Scheduler, points})
	}

	plots := []struct {
		file, title, x, y string
		lines             []series
		// xMax1 pins the x axis at 1: efficiency is in (0, 1].
		xMax1 bool
		// legendTop and legendLeft put the legend where the lines
		// usually are not.
		legendTop, legendLeft bool
	}{
		{EfficiencyPlotFile, "Placement efficiency (multi-GPU jobs)", "efficiency", "fraction of jobs ≤ x", eff, true, true, true},
		{WaitPlotFile, "Gang wait (submission to last pod bound)", "wait (replay s)", "fraction of jobs ≤ x", wait, false, false, false},
		{UtilizationPlotFile, "GPUs held by pods (incomplete gangs included)", "time since first submission (s)", "busy GPUs / all GPUs", util, false, true, false},
	}
	for _, pl := range plots {
		p := plot.New()
		p.Title.Text = pl.title
		p.X.Label.Text = pl.x
		p.Y.Label.Text = pl.y
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = pl.legendTop, pl.legendLeft
		for i, s := range pl.lines {
			if len(s.points) == 0 {
				continue
			}
			line, err := plotter.NewLine(s.points)
			if err != nil {
				return fmt.Errorf("%s: line of %s: %w", pl.file, s.name, err)
			}
			if pl.file != UtilizationPlotFile {
				line.StepStyle = plotter.PostStep
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i)
			line.Width = vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(s.name, line)
		}
		// Fixed axes after Add, which widens them to the data.
		p.Y.Min, p.Y.Max = 0, 1
		p.X.Min = min(p.X.Min, 0)
		if pl.xMax1 {
			p.X.Max = 1
		}
		if p.X.Max <= p.X.Min {
			p.X.Max = p.X.Min + 1
		}
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, pl.file)); err != nil {
			return fmt.Errorf("writing %s: %w", pl.file, err)
		}
	}
	if r.Sweep != nil {
		return r.Sweep.writePlot(dir)
	}
	return nil
}

// cdf returns the empirical CDF of values as points (v, fraction ≤ v),
// starting at (smallest, 0) so a step line rises at every value.
func cdf(values []float64) plotter.XYs {
	if len(values) == 0 {
		return nil
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	points := make(plotter.XYs, 0, len(sorted)+1)
	points = append(points, plotter.XY{X: sorted[0], Y: 0})
	for i, v := range sorted {
		points = append(points, plotter.XY{X: v, Y: float64(i+1) / float64(len(sorted))})
	}
	return points
}
