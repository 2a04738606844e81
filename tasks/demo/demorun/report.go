package demorun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/color"
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

// Files of the demo report, inside <run>/report.
const (
	ReportMarkdown = "report.md"
	ReportJSON     = "report.json"
	AccuracyPNG    = "heldout_accuracy.png"
)

// Report is the demo's summary: evaluation of the policy alone over the
// training run.
type Report struct {
	Run   string         `json:"run"`
	Evals []records.Eval `json:"evals"`
	// Learn holds, per step, the learner's loss and the rollout's reward
	// and interaction figures as recorded in the metrics files.
	Learn []map[string]any `json:"learn"`
}

// LoadReport reads <run>/metrics.jsonl.
func LoadReport(ctx context.Context, runDir string) (Report, error) {
	b, err := storage.ReadFile(ctx, rundir.MetricsLog(runDir))
	if err != nil {
		return Report{}, fmt.Errorf("demo report: %w (has the run trained a step yet?)", err)
	}
	rep := Report{Run: runDir}
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			return Report{}, fmt.Errorf("demo report: metrics.jsonl line %d: %w", i+1, err)
		}
		switch head.Kind {
		case "eval":
			var e records.Eval
			if err := json.Unmarshal(line, &e); err != nil {
				return Report{}, fmt.Errorf("demo report: metrics.jsonl line %d: %w", i+1, err)
			}
			rep.Evals = append(rep.Evals, e)
		case "learn":
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				return Report{}, fmt.Errorf("demo report: metrics.jsonl line %d: %w", i+1, err)
			}
			rep.Learn = append(rep.Learn, m)
		}
	}
	sort.Slice(rep.Evals, func(i, j int) bool { return rep.Evals[i].Step < rep.Evals[j].Step })
	return rep, nil
}

// Summary is the three-line result printed at the end of the demo.
func (r Report) Summary() string {
	if len(r.Evals) == 0 {
		return "no evaluation recorded"
	}
	first, last := r.Evals[0], r.Evals[len(r.Evals)-1]
	line := func(e records.Eval) string {
		u, _ := e.Score(string(demo.SplitUnseen))
		s, _ := e.Score(string(demo.SplitSeen))
		return fmt.Sprintf("checkpoint %3d: held-out entities greedy %.2f  Avg@%d %.2f  Pass@%d %.2f | seen entities greedy %.2f",
			e.Step, u.Greedy, u.K, u.AvgK, u.K, u.PassK, s.Greedy)
	}
	return strings.Join([]string{
		"policy alone, no collaborators at evaluation:",
		line(first),
		line(last),
	}, "\n")
}

// Markdown renders the report.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Demo report: %s\n\n", r.Run)
	b.WriteString("Accuracy of the policy **alone** (no collaborators) on questions about held-out entities, whose facts the\n")
	b.WriteString("warm start never saw and only the Knowledge Agent knew during training, and on seen entities.\n\n")
	b.WriteString("| checkpoint | held-out greedy | held-out Avg@k | held-out Pass@k | held-out call rate | seen greedy | seen Avg@k |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, e := range r.Evals {
		u, _ := e.Score(string(demo.SplitUnseen))
		s, _ := e.Score(string(demo.SplitSeen))
		fmt.Fprintf(&b, "| %d | %.3f | %.3f ± %.3f | %.3f | %.2f | %.3f | %.3f |\n", e.Step, u.Greedy, u.AvgK, u.StdErrAvg, u.PassK, u.CallRate, s.Greedy, s.AvgK)
	}
	b.WriteString("\n![held-out accuracy](" + AccuracyPNG + ")\n\n")
	b.WriteString("Training dynamics (reward, failed tasks, interactions per agent, external-token share) and the\n")
	b.WriteString("learner's figures (loss, gradient norm, KL, clipped tokens, external-token probability) are in\n")
	b.WriteString("`../analysis/analysis.md` and its plots (`dynamics.png`, `learner.png`).\n")
	return b.String()
}

// AccuracyPlot draws held-out and seen accuracy against the step, the
// legend beside the plot (analytics.PNG), clear of the lines.
func (r Report) AccuracyPlot() ([]byte, error) {
	p, err := r.accuracyPlot()
	if err != nil {
		return nil, err
	}
	return analytics.PNG(p)
}

func (r Report) accuracyPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Policy alone: accuracy vs training step"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "accuracy"
	p.Y.Min, p.Y.Max = 0, 1
	series := []struct {
		name  string
		split string
		get   func(records.SplitScore) float64
		col   color.RGBA
	}{
		{"held-out greedy", string(demo.SplitUnseen), func(s records.SplitScore) float64 { return s.Greedy }, color.RGBA{R: 200, A: 255}},
		{"held-out Avg@k", string(demo.SplitUnseen), func(s records.SplitScore) float64 { return s.AvgK }, color.RGBA{R: 240, G: 140, A: 255}},
		{"seen greedy", string(demo.SplitSeen), func(s records.SplitScore) float64 { return s.Greedy }, color.RGBA{B: 200, A: 255}},
	}
	for _, s := range series {
		var pts plotter.XYs
		for _, e := range r.Evals {
			if sc, ok := e.Score(s.split); ok {
				pts = append(pts, plotter.XY{X: float64(e.Step), Y: s.get(sc)})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = s.col
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return p, nil
}

// Write writes report.md, report.json and the accuracy plot into dir.
func (r Report) Write(ctx context.Context, dir string) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	png, err := r.AccuracyPlot()
	if err != nil {
		return fmt.Errorf("demo report: plot: %w", err)
	}
	for name, data := range map[string][]byte{ReportMarkdown: []byte(r.Markdown()), ReportJSON: js, AccuracyPNG: png} {
		if err := storage.WriteAtomic(ctx, storage.Join(dir, name), data); err != nil {
			return err
		}
	}
	return nil
}
