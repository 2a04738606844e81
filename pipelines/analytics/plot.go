package analytics

import (
	"bytes"
	"fmt"
	"math"

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
	LearnerPNG  = "learner.png"
)

type series struct {
	name string
	// value is the series' value at a step, NaN where it has none.
	value func(StepMetrics) float64
}

// yAxis is how a plot's vertical axis is bounded.
type yAxis int

const (
	fromZero yAxis = iota // [0, data max]
	fraction              // [0, 1]
	free                  // the data's range (losses can be negative)
)

// linePlot draws one line per series against the step, over the steps where
// the series has a value (rollout series: the steps with trajectories).
// A series without any value is left out; a plot with none is nil.
func linePlot(title, ylabel string, y yAxis, steps []StepMetrics, ss ...series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	switch y {
	case fromZero:
		p.Y.Min = 0
	case fraction:
		p.Y.Min, p.Y.Max = 0, 1
	}
	var args []any
	lines := 0
	for _, s := range ss {
		var xys plotter.XYs
		for _, m := range steps {
			if v := s.value(m); !math.IsNaN(v) {
				xys = append(xys, plotter.XY{X: float64(m.Step), Y: v})
			}
		}
		if len(xys) == 0 {
			continue
		}
		args = append(args, s.name, xys)
		lines++
	}
	if lines == 0 {
		return nil, nil
	}
	if lines == 1 {
		args = args[1:] // one line needs no legend
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, fmt.Errorf("plot %s: %w", title, err)
	}
	return p, nil
}

// rolloutValue is a rollout series: defined on the steps with trajectories.
func rolloutValue(f func(StepMetrics) float64) func(StepMetrics) float64 {
	return func(m StepMetrics) float64 {
		if m.Trajectories == 0 {
			return math.NaN()
		}
		return f(m)
	}
}

// learnerValue is a learner series: the figure key of the learner's record
// (or one of its top-level numbers), where the step has one.
func learnerValue(key string) func(StepMetrics) float64 {
	return func(m StepMetrics) float64 {
		if m.Learner == nil {
			return math.NaN()
		}
		switch key {
		case "loss":
			return m.Learner.Loss
		case "grad_norm":
			return m.Learner.GradNorm
		case "lr":
			return m.Learner.LR
		}
		v, ok := m.Learner.Metrics[key]
		if !ok {
			return math.NaN()
		}
		return v
	}
}

// Plots renders the report's PNG files, by file name.
func Plots(rep Report) (map[string][]byte, error) {
	failed, err := linePlot("Batch failed tasks", "fraction of prompts with every sample wrong", fraction, rep.Steps,
		series{"failed", rolloutValue(func(m StepMetrics) float64 { return m.FailedTasks })})
	if err != nil {
		return nil, err
	}
	acc, err := linePlot("Batch accuracy", "correct trajectories / trajectories", fraction, rep.Steps,
		series{"accuracy", rolloutValue(func(m StepMetrics) float64 { return m.Accuracy })})
	if err != nil {
		return nil, err
	}
	inter, err := linePlot("Batch interactions", "interactions per trajectory", fromZero, rep.Steps,
		series{"total", rolloutValue(func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Total })},
		series{"verify", rolloutValue(func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Verify })},
		series{"knowledge", rolloutValue(func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Knowledge })},
		series{"reason", rolloutValue(func(m StepMetrics) float64 { return m.InteractionsPerTrajectory.Reason })})
	if err != nil {
		return nil, err
	}
	learner, err := learnerPlots(rep.Steps)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for name, p := range map[string]*plot.Plot{FailedTasksPNG: failed, AccuracyPNG: acc, InteractionsPNG: inter} {
		if p == nil {
			continue // no step with trajectories
		}
		b, err := PNG(p)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
		out[name] = b
	}
	// The three panels side by side, as in the paper's Fig. 5.
	if failed != nil {
		tiled, err := TiledPNG([][]*plot.Plot{{failed, acc, inter}}, 6*vg.Inch, 4.5*vg.Inch)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", DynamicsPNG, err)
		}
		out[DynamicsPNG] = tiled
	}
	if len(learner) > 0 {
		var rows [][]*plot.Plot
		for i := 0; i < len(learner); i += 3 {
			rows = append(rows, learner[i:min(i+3, len(learner))])
		}
		tiled, err := TiledPNG(rows, 6*vg.Inch, 4.5*vg.Inch)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", LearnerPNG, err)
		}
		out[LearnerPNG] = tiled
	}
	if mp, err := mismatchPlot(rep.Steps); err != nil {
		return nil, err
	} else if mp != nil {
		b, err := PNG(mp)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", MismatchPNG, err)
		}
		out[MismatchPNG] = b
	}
	if len(rep.Heldout) > 0 {
		h, err := heldoutPlot(rep.Heldout)
		if err != nil {
			return nil, err
		}
		if out[HeldoutPNG], err = PNG(h); err != nil {
			return nil, fmt.Errorf("render %s: %w", HeldoutPNG, err)
		}
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

// learnerPlots are the panels of learner.png: loss, gradient norm, KL,
// clipped tokens and external tokens (the train-inference mismatch has
// mismatch.png). Panels without data are left out.
func learnerPlots(steps []StepMetrics) ([]*plot.Plot, error) {
	specs := []struct {
		title, ylabel string
		y             yAxis
		ss            []series
	}{
		{"Learner loss", "loss", free, []series{{"loss", learnerValue("loss")}}},
		{"Gradient norm", "global L2 norm (before clipping)", fromZero, []series{{"grad norm", learnerValue("grad_norm")}}},
		{"KL", "nats per token", free, []series{{"to pi_old (approx.)", learnerValue("approx_kl_old")}, {"to reference", learnerValue("kl_ref")}}},
		{"Clipped tokens", "fraction of trained tokens", fraction, []series{
			{"low", learnerValue("clip_frac_low")}, {"high", learnerValue("clip_frac_high")}, {"dual", learnerValue("clip_frac_dual")}}},
		{"External tokens", "probability / fraction", fraction, []series{
			{"mean probability", learnerValue("ext_prob_mean")}, {"under omega", learnerValue("ext_under_omega_frac")}}},
	}
	var out []*plot.Plot
	for _, sp := range specs {
		p, err := linePlot(sp.title, sp.ylabel, sp.y, steps, sp.ss...)
		if err != nil {
			return nil, err
		}
		if p != nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// legendGap separates a plot from the legend at its right.
const legendGap = 6 // points

// DrawClear draws p into c with its legend, when it has entries, in a
// column at the right of the plot, outside the axes, so that it covers no
// data. It returns the data area and the legend's extent.
func DrawClear(p *plot.Plot, c draw.Canvas) (data, legend vg.Rectangle) {
	leg := p.Legend
	w := leg.Rectangle(c).Size().X
	if w == 0 {
		p.Draw(c)
		return p.DataCanvas(c).Rectangle, vg.Rectangle{}
	}
	pc := c
	pc.Max.X -= w + vg.Points(legendGap)
	p.Legend = plot.NewLegend()
	p.Draw(pc)
	p.Legend = leg
	dc := p.DataCanvas(pc)
	lc := c
	lc.Min.X = pc.Max.X + vg.Points(legendGap)
	lc.Max.Y = dc.Max.Y
	leg.Top, leg.Left, leg.XOffs, leg.YOffs = true, true, 0, 0
	leg.Draw(lc)
	return dc.Rectangle, leg.Rectangle(lc)
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
				DrawClear(p, canvases[i][j])
			}
		}
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PNG renders a plot as a 6x4-inch PNG image, its legend clear of the
// data (DrawClear).
func PNG(p *plot.Plot) ([]byte, error) {
	img := vgimg.New(6*vg.Inch, 4*vg.Inch)
	DrawClear(p, draw.New(img))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
