package demorun

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/tasks/demo"
)

// Files of the comparison report, inside <dir>/report.
const (
	CompareMarkdown = "compare.md"
	CompareJSON     = "compare.json"
	ComparePNG      = "compare_dynamics.png"
)

// MethodInfo names a method of a comparison.
type MethodInfo struct {
	Name  string `json:"name"`  // directory name, e.g. "aipo-mask"
	Label string `json:"label"` // as in the table, e.g. "AIPO, Mask"
	About string `json:"about"` // one line: what differs from AIPO
}

// CompareRun is one (method, seed) run of a comparison: its evaluations of
// the policy alone and its per-step training dynamics.
type CompareRun struct {
	Method string                  `json:"method"`
	Seed   uint64                  `json:"seed"`
	Dir    string                  `json:"dir"`
	Evals  []records.Eval          `json:"evals"`
	Steps  []analytics.StepMetrics `json:"steps"`
}

// Final is the run's last evaluation.
func (r CompareRun) Final() (records.Eval, bool) {
	if len(r.Evals) == 0 {
		return records.Eval{}, false
	}
	return r.Evals[len(r.Evals)-1], true
}

// LoadCompareRun reads a finished run's evaluations (metrics.jsonl) and its
// analytics (analysis/analysis.json).
func LoadCompareRun(ctx context.Context, method string, seed uint64, dir string) (CompareRun, error) {
	rep, err := LoadReport(ctx, dir)
	if err != nil {
		return CompareRun{}, err
	}
	b, err := storage.ReadFile(ctx, storage.Join(rundir.Analysis(dir), analytics.JSONName))
	if err != nil {
		return CompareRun{}, fmt.Errorf("comparison: %w (run `aipo analyze --run %s`)", err, dir)
	}
	var an analytics.Report
	if err := json.Unmarshal(b, &an); err != nil {
		return CompareRun{}, fmt.Errorf("comparison: %s: %w", storage.Join(rundir.Analysis(dir), analytics.JSONName), err)
	}
	return CompareRun{Method: method, Seed: seed, Dir: dir, Evals: rep.Evals, Steps: an.Steps}, nil
}

// Comparison is the result of `aipo demo --compare`: several methods
// trained from the same warm start, several seeds each, evaluated without
// collaborators.
type Comparison struct {
	Dir     string       `json:"dir"`
	Methods []MethodInfo `json:"methods"`
	Runs    []CompareRun `json:"runs"`
}

// runs returns the runs of a method, by seed.
func (c Comparison) runs(method string) []CompareRun {
	var out []CompareRun
	for _, r := range c.Runs {
		if r.Method == method {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seed < out[j].Seed })
	return out
}

// MeanStd is a mean over seeds with its sample standard deviation (0 with
// one seed).
type MeanStd struct {
	Mean, Std float64
	N         int
}

func meanStd(xs []float64) MeanStd {
	if len(xs) == 0 {
		return MeanStd{Mean: math.NaN()}
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	if len(xs) > 1 {
		v /= float64(len(xs) - 1)
	}
	return MeanStd{Mean: m, Std: math.Sqrt(v), N: len(xs)}
}

func (m MeanStd) String() string {
	if m.N == 0 {
		return "n/a"
	}
	if m.N == 1 {
		return fmt.Sprintf("%.3f", m.Mean)
	}
	return fmt.Sprintf("%.3f ± %.3f", m.Mean, m.Std)
}

// FinalScore is a method's final-checkpoint score on a split, over seeds.
func (c Comparison) FinalScore(method string, split string, get func(records.SplitScore) float64) MeanStd {
	var xs []float64
	for _, r := range c.runs(method) {
		if e, ok := r.Final(); ok {
			if s, ok := e.Score(split); ok {
				xs = append(xs, get(s))
			}
		}
	}
	return meanStd(xs)
}

// InteractionPhases summarises a run's interactions per trajectory: the
// mean over the first and last tenth of its steps and the peak of the
// moving average over a tenth, with the step where it occurred.
type InteractionPhases struct {
	Start, Peak, End float64
	PeakStep         int64
}

// Phases measures the rise, fall and settling of the interactions.
func Phases(steps []analytics.StepMetrics) (InteractionPhases, bool) {
	var xs []float64
	var ks []int64
	for _, s := range steps {
		if s.Trajectories > 0 {
			xs = append(xs, s.InteractionsPerTrajectory.Total)
			ks = append(ks, s.Step)
		}
	}
	if len(xs) == 0 {
		return InteractionPhases{}, false
	}
	w := max(1, len(xs)/10)
	ma := movingAverage(xs, w)
	p := InteractionPhases{Start: mean(xs[:w]), End: mean(xs[len(xs)-w:]), Peak: math.Inf(-1)}
	for i, v := range ma {
		if v > p.Peak {
			p.Peak, p.PeakStep = v, ks[i]
		}
	}
	return p, true
}

func mean(xs []float64) float64 { return meanStd(xs).Mean }

// movingAverage is the trailing mean over w points (fewer at the start).
func movingAverage(xs []float64, w int) []float64 {
	out := make([]float64, len(xs))
	var s float64
	for i, x := range xs {
		s += x
		if i >= w {
			s -= xs[i-w]
		}
		out[i] = s / float64(min(i+1, w))
	}
	return out
}

// Markdown renders the comparison: the Table-2-like accuracy table, the
// per-seed results, and the interaction phases.
func (c Comparison) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Method comparison: %s\n\n", c.Dir)
	b.WriteString("Every method starts from the same warm-start checkpoint and trains on the same task; seeds change the\n")
	b.WriteString("prompt order, the sampling and the Knowledge Agent's noise. Accuracy is that of the final checkpoint\n")
	b.WriteString("**without collaborators** (calls get no answer), mean ± standard deviation over seeds; k samples at\n")
	b.WriteString("temperature 1 give Avg@k and the unbiased Pass@k. Held-out entities are those whose facts the warm start\n")
	b.WriteString("never saw and only the Knowledge Agent knew during training.\n\n")
	k := 0
	for _, r := range c.Runs {
		if e, ok := r.Final(); ok && len(e.Splits) > 0 {
			k = e.Splits[0].K
		}
	}
	fmt.Fprintf(&b, "| method | seeds | held-out Avg@%d | held-out Pass@%d | held-out greedy | seen Avg@%d | seen Pass@%d |\n", k, k, k, k)
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	avg := func(s records.SplitScore) float64 { return s.AvgK }
	pass := func(s records.SplitScore) float64 { return s.PassK }
	greedy := func(s records.SplitScore) float64 { return s.Greedy }
	for _, m := range c.Methods {
		u := c.FinalScore(m.Name, string(demo.SplitUnseen), avg)
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n", m.Label, u.N, u,
			c.FinalScore(m.Name, string(demo.SplitUnseen), pass), c.FinalScore(m.Name, string(demo.SplitUnseen), greedy),
			c.FinalScore(m.Name, string(demo.SplitSeen), avg), c.FinalScore(m.Name, string(demo.SplitSeen), pass))
	}
	b.WriteString("\n## Methods\n\n")
	for _, m := range c.Methods {
		fmt.Fprintf(&b, "- **%s** (`%s`): %s\n", m.Label, m.Name, m.About)
	}
	b.WriteString("\n## Interactions per trajectory during training\n\n")
	b.WriteString("Start and end are means over the first and last tenth of the steps; the peak is the highest moving\n")
	b.WriteString("average over a tenth of the steps. The paper reports rise, fall and settle under AIPO.\n\n")
	b.WriteString("| method | seed | start | peak (step) | end |\n|---|---:|---:|---:|---:|\n")
	for _, m := range c.Methods {
		for _, r := range c.runs(m.Name) {
			if p, ok := Phases(r.Steps); ok {
				fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f (%d) | %.2f |\n", m.Label, r.Seed, p.Start, p.Peak, p.PeakStep, p.End)
			}
		}
	}
	b.WriteString("\n## Every run\n\n")
	b.WriteString("| method | seed | final step | held-out greedy | held-out Avg@k | held-out Pass@k | seen greedy | seen Avg@k | run |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, m := range c.Methods {
		for _, r := range c.runs(m.Name) {
			e, ok := r.Final()
			if !ok {
				fmt.Fprintf(&b, "| %s | %d | no evaluation | | | | | | `%s` |\n", m.Label, r.Seed, r.Dir)
				continue
			}
			u, _ := e.Score(string(demo.SplitUnseen))
			s, _ := e.Score(string(demo.SplitSeen))
			fmt.Fprintf(&b, "| %s | %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | `%s` |\n", m.Label, r.Seed, e.Step, u.Greedy, u.AvgK, u.PassK, s.Greedy, s.AvgK, r.Dir)
		}
	}
	b.WriteString("\n![training dynamics, side by side](" + ComparePNG + ")\n\n")
	b.WriteString("Lines are means over seeds; batch series are smoothed over a tenth of the steps. Each run's own report\n")
	b.WriteString("and analysis are in its directory.\n")
	return b.String()
}

// palette gives each method a distinct colour.
var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, {R: 0xd6, G: 0x27, B: 0x28, A: 255}, {R: 0x2c, G: 0xa0, B: 0x2c, A: 255},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 255}, {R: 0x94, G: 0x67, B: 0xbd, A: 255}, {R: 0x8c, G: 0x56, B: 0x4b, A: 255},
	{R: 0xe3, G: 0x77, B: 0xc2, A: 255}, {R: 0x7f, G: 0x7f, B: 0x7f, A: 255},
}

// seedMean averages, step by step, a series over the runs that have it.
func seedMean(runs []CompareRun, points func(CompareRun) map[int64]float64) plotter.XYs {
	sum, n := map[int64]float64{}, map[int64]int{}
	for _, r := range runs {
		for k, v := range points(r) {
			sum[k] += v
			n[k]++
		}
	}
	var xys plotter.XYs
	for k, s := range sum {
		xys = append(xys, plotter.XY{X: float64(k), Y: s / float64(n[k])})
	}
	sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
	return xys
}

// smooth applies the trailing moving average over a tenth of the points.
func smooth(xys plotter.XYs) plotter.XYs {
	ys := make([]float64, len(xys))
	for i, p := range xys {
		ys[i] = p.Y
	}
	ma := movingAverage(ys, max(1, len(ys)/10))
	out := make(plotter.XYs, len(xys))
	for i := range xys {
		out[i] = plotter.XY{X: xys[i].X, Y: ma[i]}
	}
	return out
}

// Plots renders the training dynamics of every method side by side:
// held-out accuracy alone, batch accuracy, batch failed tasks and
// interactions per trajectory.
func (c Comparison) Plots() ([]byte, error) {
	batch := func(get func(analytics.StepMetrics) float64) func(CompareRun) map[int64]float64 {
		return func(r CompareRun) map[int64]float64 {
			out := map[int64]float64{}
			for _, s := range r.Steps {
				if s.Trajectories > 0 {
					out[s.Step] = get(s)
				}
			}
			return out
		}
	}
	panels := []struct {
		title, ylabel string
		fraction      bool
		smoothed      bool
		points        func(CompareRun) map[int64]float64
	}{
		{"Held-out entities, policy alone", "Avg@k without collaborators", true, false, func(r CompareRun) map[int64]float64 {
			out := map[int64]float64{}
			for _, e := range r.Evals {
				if s, ok := e.Score(string(demo.SplitUnseen)); ok {
					out[e.Step] = s.AvgK
				}
			}
			return out
		}},
		{"Batch accuracy", "correct trajectories / trajectories", true, true, batch(func(m analytics.StepMetrics) float64 { return m.Accuracy })},
		{"Batch failed tasks", "prompts with every sample wrong", true, true, batch(func(m analytics.StepMetrics) float64 { return m.FailedTasks })},
		{"Batch interactions", "interactions per trajectory", false, true, batch(func(m analytics.StepMetrics) float64 { return m.InteractionsPerTrajectory.Total })},
	}
	var row []*plot.Plot
	for pi, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "step"
		p.Y.Label.Text = pn.ylabel
		p.Add(plotter.NewGrid())
		p.Y.Min = 0
		if pn.fraction {
			p.Y.Max = 1
		}
		for i, m := range c.Methods {
			xys := seedMean(c.runs(m.Name), pn.points)
			if len(xys) == 0 {
				continue
			}
			if pn.smoothed {
				xys = smooth(xys)
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, fmt.Errorf("comparison plot %q, %s: %w", pn.title, m.Label, err)
			}
			l.Color = palette[i%len(palette)]
			l.Width = vg.Points(1.5)
			p.Add(l)
			// One legend, on the failed-tasks panel: its upper half is
			// empty once training has started; colours are the same in
			// every panel.
			if pi == 2 {
				p.Legend.Add(m.Label, l)
			}
		}
		p.Legend.Top = true
		row = append(row, p)
	}
	return analytics.TiledPNG([][]*plot.Plot{row[:2], row[2:]}, 7*vg.Inch, 4.5*vg.Inch)
}

// Write writes compare.md, compare.json and the dynamics plot into dir.
func (c Comparison) Write(ctx context.Context, dir string) error {
	js, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	png, err := c.Plots()
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{CompareMarkdown: []byte(c.Markdown()), CompareJSON: append(js, '\n'), ComparePNG: png} {
		if err := storage.WriteAtomic(ctx, storage.Join(dir, name), data); err != nil {
			return err
		}
	}
	return nil
}

// Summary is the comparison's terminal result: held-out accuracy alone per
// method, and where the report is.
func (c Comparison) Summary() string {
	lines := []string{"held-out entities, policy alone (final checkpoint, Avg@k over seeds):"}
	for _, m := range c.Methods {
		u := c.FinalScore(m.Name, string(demo.SplitUnseen), func(s records.SplitScore) float64 { return s.AvgK })
		lines = append(lines, fmt.Sprintf("  %-22s %s", m.Label, u))
	}
	lines = append(lines, "report: "+storage.Join(rundir.Report(c.Dir), CompareMarkdown))
	return strings.Join(lines, "\n")
}
