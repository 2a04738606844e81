package analytics

import (
	"bytes"
	"fmt"

	"github.com/aipo-rl/aipo/records"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
)

// HeldoutPNG plots Pass@k of every held-out benchmark over steps.
const HeldoutPNG = "heldout.png"

// heldoutMarkdown is the report's section on the held-out benchmarks.
func heldoutMarkdown(rs []records.BenchmarkEval) string {
	if len(rs) == 0 {
		return ""
	}
	var b bytes.Buffer
	b.WriteString("\n## Held-out benchmarks (policy alone)\n\n")
	b.WriteString("Every eval.every steps the checkpoint is evaluated alone on eval.benchmarks (no collaborator answers); ")
	b.WriteString("Pass@k is the unbiased estimate from n samples per problem. A rising Pass@n is the capability boundary expanding.\n\n")
	b.WriteString("![held-out](" + HeldoutPNG + ")\n\n")
	b.WriteString("| step | benchmark | problems | n | Avg@n | Pass@1 | Pass@n | truncated |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		for _, s := range r.Benchmarks {
			p1, ok := s.Pass["1"]
			if !ok {
				p1 = s.Avg
			}
			fmt.Fprintf(&b, "| %d | %s | %d | %d | %.3f | %.3f | %.3f | %.3f |\n", r.Step, s.Name, s.Problems, s.Samples, s.Avg, p1, s.PassAtN(), s.Truncated)
		}
	}
	return b.String()
}

// heldoutPlot draws Pass@n of every benchmark over steps.
func heldoutPlot(rs []records.BenchmarkEval) (*plot.Plot, error) {
	var names []string
	seen := map[string]bool{}
	for _, r := range rs {
		for _, s := range r.Benchmarks {
			if !seen[s.Name] {
				seen[s.Name] = true
				names = append(names, s.Name)
			}
		}
	}
	var ss []stepSeries
	for _, n := range names {
		var pts []stepPoint
		label := n
		for _, r := range rs {
			for _, s := range r.Benchmarks {
				if s.Name == n {
					pts = append(pts, stepPoint{r.Step, s.PassAtN()})
					label = fmt.Sprintf("%s Pass@%d", n, s.Samples)
				}
			}
		}
		ss = append(ss, stepSeries{label, pts})
	}
	return pointsPlot("Held-out benchmarks (policy alone)", "Pass@n", true, ss...)
}

type stepPoint struct {
	step  int64
	value float64
}

type stepSeries struct {
	name   string
	points []stepPoint
}

// pointsPlot draws one line per series of (step, value) points.
func pointsPlot(title, ylabel string, fraction bool, ss ...stepSeries) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	p.Y.Min = 0
	if fraction {
		p.Y.Max = 1
	}
	args := make([]any, 0, 2*len(ss))
	for _, s := range ss {
		var xys plotter.XYs
		for _, pt := range s.points {
			xys = append(xys, plotter.XY{X: float64(pt.step), Y: pt.value})
		}
		args = append(args, s.name, xys)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, fmt.Errorf("plot %s: %w", title, err)
	}
	p.Legend.Top = true
	return p, nil
}
