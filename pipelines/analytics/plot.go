package analytics

import (
	"bytes"
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot file names.
const (
	FailedTasksPNG  = "failed_tasks.png"
	AccuracyPNG     = "accuracy.png"
	InteractionsPNG = "interactions.png"
	DynamicsPNG     = "dynamics.png"
	// MismatchPNG is written when a step has the learner's mismatch
	// measurement.
	MismatchPNG = "mismatch.png"
)

type series struct {
	name  string
	value func(StepMetrics) float64
}

// linePlot draws one line per series against the step, over the steps that
// have trajectories.
func linePlot(title, ylabel string, fraction bool, steps []StepMetrics, ss ...series) (*plot.Plot, error) {
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
		for _, m := range steps {
			if m.Trajectories > 0 {
				xys = append(xys, plotter.XY{X: float64(m.Step), Y: s.value(m)})
			}
		}
		if len(ss) > 1 {
			args = append(args, s.name)
		}
		args = append(args, xys)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, fmt.Errorf("plot %s: %w", title, err)
	}
	if len(ss) > 1 {
		p.Legend.Top = true
	}
	return p, nil
}

// Plots renders the report's PNG files, by file name.
func Plots(rep Report) (map[string][]byte, error) {
	failed, err := linePlot("Batch failed tasks", "fraction of prompts with every sample wrong", true, rep.Steps,
		series{"failed", func(m StepMetrics) float64 { return m.FailedTasks }})
	if err != nil {
		return nil, err
	}
	acc, err := linePlot("Batch accuracy", "correct trajectories / trajectories", true, rep.Steps,
		series{"accuracy", func(m StepMetrics) float64 { return m.Accuracy }})
	if err != nil {
		return nil, err
	}
	inter, err := linePlot("Batch interactions", "interactions per trajectory", false, rep.Steps,
		series{"total", func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Total }},
		series{"verify", func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Verify }},
		series{"knowledge", func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Knowledge }},
		series{"reason", func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Reason }})
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for name, p := range map[string]*plot.Plot{FailedTasksPNG: failed, AccuracyPNG: acc, InteractionsPNG: inter} {
		b, err := PNG(p)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
		out[name] = b
	}
	// The three panels side by side, as in the paper's Fig. 5.
	tiled, err := TiledPNG([][]*plot.Plot{{failed, acc, inter}}, 6*vg.Inch, 4.5*vg.Inch)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", DynamicsPNG, err)
	}
	out[DynamicsPNG] = tiled
	if mp, err := mismatchPlot(rep.Steps); err != nil {
		return nil, err
	} else if mp != nil {
		b, err := PNG(mp)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", MismatchPNG, err)
		}
		out[MismatchPNG] = b
	}
	return out, nil
}

// mismatchPlot draws the learner's train-inference mismatch over the steps
// that have it (nil when none has).
func mismatchPlot(steps []StepMetrics) (*plot.Plot, error) {
	var mean, mx, k3 plotter.XYs
	for _, m := range steps {
		if mm := m.Mismatch; mm != nil {
			x := float64(m.Step)
			mean = append(mean, plotter.XY{X: x, Y: mm.AbsMean})
			mx = append(mx, plotter.XY{X: x, Y: mm.AbsMax})
			k3 = append(k3, plotter.XY{X: x, Y: mm.KLK3})
		}
	}
	if len(mean) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Train-inference mismatch"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "|log p learner - log p sampler|, KL"
	p.Add(plotter.NewGrid())
	p.Y.Min = 0
	if err := plotutil.AddLinePoints(p, "mean |delta|", mean, "max |delta|", mx, "KL (k3)", k3); err != nil {
		return nil, fmt.Errorf("plot %s: %w", MismatchPNG, err)
	}
	p.Legend.Top = true
	return p, nil
}

// TiledPNG renders plots in a grid (rows of panels, each w x h) as one PNG
// image, their axes aligned.
func TiledPNG(rows [][]*plot.Plot, w, h vg.Length) ([]byte, error) {
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	if cols == 0 {
		return nil, fmt.Errorf("no plots to tile")
	}
	img := vgimg.New(vg.Length(cols)*w, vg.Length(len(rows))*h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: cols, PadX: vg.Inch / 4, PadY: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	full := make([][]*plot.Plot, len(rows))
	for i, r := range rows {
		full[i] = make([]*plot.Plot, cols)
		copy(full[i], r)
	}
	canvases := plot.Align(full, tiles, dc)
	for i, r := range full {
		for j, p := range r {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PNG renders a plot as a 6x4-inch PNG image.
func PNG(p *plot.Plot) ([]byte, error) {
	w, err := p.WriterTo(6*vg.Inch, 4*vg.Inch, "png")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
