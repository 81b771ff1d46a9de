package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Tree is the cluster as the picture draws it: top-level domains (spines),
// their leaves, and the nodes of each leaf.
type Tree struct {
	Name   string
	Spines []Spine
}

// Spine is a top-level domain.
type Spine struct {
	Name   string
	Leaves []Leaf
}

// Leaf is a leaf domain and its nodes.
type Leaf struct {
	Name  string
	Nodes []Node
}

// Node is one node and its number of GPUs.
type Node struct {
	Name string
	GPUs int
}

// Job is one TrainingJob's placement: its pods and status.placement.
type Job struct {
	// Name is namespace/name.
	Name       string
	Framework  string
	Domain     string
	Level      string
	Efficiency string
	Ranks      []Rank
	// Held says why a job runs no pods by design, e.g. "WaitingForAdmission:
	// ..." for a job queued in a Kueue LocalQueue no Kueue serves; empty
	// for a job that is placed or on its way.
	Held string
}

// Rank is one pod of a job.
type Rank struct {
	Pod  string
	Node string
	// GPUs are the indices of the pod's lockstep.dev/gpus annotation; empty
	// for a pod without GPUs.
	GPUs []int
}

// GPUCount is the number of GPUs over all of the job's pods.
func (j Job) GPUCount() int {
	n := 0
	for _, r := range j.Ranks {
		n += len(r.GPUs)
	}
	return n
}

// ParseGPUs reads a lockstep.dev/gpus annotation ("0,1,4,5").
func ParseGPUs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		i, err := strconv.Atoi(f)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("bad GPU index %q in %q", f, s)
		}
		out = append(out, i)
	}
	return out, nil
}

// formatGPUs writes GPU indices compactly: "0-7", "0-3,6".
func formatGPUs(gpus []int) string {
	if len(gpus) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(gpus); {
		j := i
		for j+1 < len(gpus) && gpus[j+1] == gpus[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(gpus[i]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", gpus[i], gpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteTable prints one row per pod; the job, its domain and efficiency are
// on the job's first row only.
func WriteTable(w io.Writer, jobs []Job) error {
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tRANK (POD)\tNODE\tGPUS\tDOMAIN\tEFFICIENCY")
	for _, j := range jobs {
		for i, r := range j.Ranks {
			job, domain, eff := "", "", ""
			if i == 0 {
				job, domain, eff = j.Name, orDash(j.Domain), orDash(j.Efficiency)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", job, r.Pod, orDash(r.Node), formatGPUs(r.GPUs), domain, eff)
		}
		if len(j.Ranks) == 0 {
			domain := orDash(j.Domain)
			if j.Held != "" {
				domain = "held (see below)"
			}
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%s\t%s\n", j.Name, domain, orDash(j.Efficiency))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// tabwriter pads the empty trailing cells of continuation rows.
	lines := strings.SplitAfter(buf.String(), "\n")
	for i, l := range lines {
		if strings.HasSuffix(l, "\n") {
			lines[i] = strings.TrimRight(l, " \n") + "\n"
		}
	}
	if _, err := io.WriteString(w, strings.Join(lines, "")); err != nil {
		return err
	}
	for _, j := range jobs {
		if j.Held != "" {
			if _, err := fmt.Fprintf(w, "%s is held: %s\n", j.Name, j.Held); err != nil {
				return err
			}
		}
	}
	return nil
}

// palette holds well-separated colours, one per job (cycled beyond 12).
var palette = []string{
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
	"#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#e7969c",
}

// Layout of the picture, in pixels.
const (
	margin     = 20
	titleH     = 30
	spineY     = 50
	spineH     = 28
	leafY      = 120
	leafHeadH  = 26
	rowH       = 18
	cell       = 13
	cellGap    = 2
	labelW     = 64
	markerW    = 16
	panelPad   = 8
	panelGap   = 16
	legendRowH = 20
)

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// WriteSVG draws the tree with each job's GPUs in the job's colour, pods
// without GPUs as a dot beside their node, and a legend.
func WriteSVG(w io.Writer, t Tree, jobs []Job) error {
	maxGPUs := 1
	maxNodes := 0
	leaves := 0
	for _, s := range t.Spines {
		for _, l := range s.Leaves {
			leaves++
			maxNodes = max(maxNodes, len(l.Nodes))
			for _, n := range l.Nodes {
				maxGPUs = max(maxGPUs, n.GPUs)
			}
		}
	}
	panelW := 2*panelPad + labelW + maxGPUs*(cell+cellGap) + markerW
	panelH := leafHeadH + maxNodes*rowH + panelPad
	width := 2*margin + max(1, leaves)*panelW + max(0, leaves-1)*panelGap
	legendY := leafY + panelH + 30
	height := legendY + 20 + len(jobs)*legendRowH + margin
	width = max(width, 560)

	// Who sits where: colour per GPU cell, and CPU-only pods per node.
	type slot struct {
		node string
		gpu  int
	}
	owner := map[slot]int{}
	podOf := map[slot]string{}
	cpuPods := map[string][]int{} // node -> job indices
	for ji, j := range jobs {
		for _, r := range j.Ranks {
			if r.Node == "" {
				continue
			}
			if len(r.GPUs) == 0 {
				cpuPods[r.Node] = append(cpuPods[r.Node], ji)
			}
			for _, g := range r.GPUs {
				owner[slot{r.Node, g}] = ji + 1
				podOf[slot{r.Node, g}] = r.Pod
			}
		}
	}
	color := func(ji int) string { return palette[ji%len(palette)] }

	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="%d" font-size="16" font-weight="bold" fill="#111827">%s</text>`+"\n", margin, margin+10, esc(t.Name))

	x := margin
	for _, s := range t.Spines {
		spineW := len(s.Leaves)*panelW + max(0, len(s.Leaves)-1)*panelGap
		sx := x + spineW/2
		bw := 120
		p(`<g class="spine">` + "\n")
		p(`<rect x="%d" y="%d" width="%d" height="%d" rx="5" fill="#374151"/>`+"\n", sx-bw/2, spineY, bw, spineH)
		p(`<text x="%d" y="%d" text-anchor="middle" fill="#ffffff" font-weight="bold">%s</text>`+"\n", sx, spineY+18, esc(s.Name))
		for li, l := range s.Leaves {
			lx := x + li*(panelW+panelGap)
			p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#9ca3af" stroke-width="1.5"/>`+"\n", sx, spineY+spineH, lx+panelW/2, leafY)
			p(`<g class="leaf">` + "\n")
			p(`<rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="#f9fafb" stroke="#d1d5db"/>`+"\n", lx, leafY, panelW, panelH)
			p(`<text x="%d" y="%d" text-anchor="middle" font-weight="bold" fill="#374151">%s</text>`+"\n", lx+panelW/2, leafY+17, esc(l.Name))
			for ni, n := range l.Nodes {
				ry := leafY + leafHeadH + ni*rowH
				p(`<text x="%d" y="%d" fill="#4b5563">%s</text>`+"\n", lx+panelPad, ry+cell-2, esc(n.Name))
				for g := 0; g < n.GPUs; g++ {
					cx := lx + panelPad + labelW + g*(cell+cellGap)
					fill, title := "#e5e7eb", fmt.Sprintf("%s GPU %d: free", n.Name, g)
					if ji := owner[slot{n.Name, g}]; ji > 0 {
						fill = color(ji - 1)
						title = fmt.Sprintf("%s GPU %d: %s (%s)", n.Name, g, jobs[ji-1].Name, podOf[slot{n.Name, g}])
					}
					p(`<rect x="%d" y="%d" width="%d" height="%d" rx="2" fill="%s"><title>%s</title></rect>`+"\n", cx, ry, cell, cell, fill, esc(title))
				}
				for k, ji := range cpuPods[n.Name] {
					mx := lx + panelPad + labelW + n.GPUs*(cell+cellGap) + 6 + k*4
					p(`<circle cx="%d" cy="%d" r="4" fill="%s" stroke="#ffffff"><title>%s: %s (no GPUs)</title></circle>`+"\n", mx, ry+cell/2, color(ji), esc(n.Name), esc(jobs[ji].Name))
				}
			}
			p("</g>\n")
		}
		p("</g>\n")
		x += spineW + panelGap
	}

	p(`<g class="legend">` + "\n")
	p(`<text x="%d" y="%d" font-weight="bold" fill="#111827">Jobs</text>`+"\n", margin, legendY)
	for ji, j := range jobs {
		ly := legendY + 12 + ji*legendRowH
		p(`<rect x="%d" y="%d" width="14" height="14" rx="2" fill="%s"/>`+"\n", margin, ly, color(ji))
		detail := fmt.Sprintf("%s, %d pods, %d GPUs", orDash(j.Framework), len(j.Ranks), j.GPUCount())
		if j.Domain != "" {
			detail += ", " + j.Domain
		}
		if j.Efficiency != "" {
			detail += ", efficiency " + j.Efficiency
		}
		p(`<text x="%d" y="%d" fill="#111827"><tspan font-weight="bold">%s</tspan> <tspan fill="#4b5563">(%s)</tspan></text>`+"\n", margin+22, ly+11, esc(j.Name), esc(detail))
	}
	p(`<rect x="%d" y="%d" width="14" height="14" rx="2" fill="#e5e7eb"/>`+"\n", width/2+40, legendY-11)
	p(`<text x="%d" y="%d" fill="#4b5563">free GPU; a dot beside a node is a pod without GPUs</text>`+"\n", width/2+60, legendY)
	p("</g>\n</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
