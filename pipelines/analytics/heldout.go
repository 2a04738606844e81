package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
)

// HeldoutKind is the kind of the records of held-out benchmark
// evaluations that `aipo train` writes every eval.every steps (the run
// configuration's eval.benchmarks, scored by the eval pipeline).
const HeldoutKind = "eval_benchmarks"

// HeldoutPNG plots Pass@k of every held-out benchmark over steps.
const HeldoutPNG = "heldout.png"

// HeldoutPath is the record of the evaluation of checkpoint k, beside the
// run's other per-step metrics.
func HeldoutPath(runDir string, k int64) string {
	return rundir.MetricsRecord(runDir, rundir.BenchmarkKind, k)
}

// BenchmarkEvalRecord is one evaluation of checkpoint Step of a run on its
// held-out benchmarks: the policy alone, n samples per problem.
type BenchmarkEvalRecord struct {
	Kind          string `json:"kind"` // HeldoutKind
	Step          int64  `json:"step"`
	PolicyVersion int64  `json:"policy_version"`
	// Dir holds the eval pipeline's records and report (report.json,
	// report.md) of the checkpoint.
	Dir        string         `json:"dir"`
	Benchmarks []HeldoutScore `json:"benchmarks"`
	Seconds    float64        `json:"seconds"`
}

// HeldoutScore is one benchmark's scores at one checkpoint.
type HeldoutScore struct {
	Name     string `json:"name"`
	Problems int    `json:"problems"`
	Samples  int    `json:"samples"`
	// Avg is Avg@n; Pass maps k (as text) to the unbiased Pass@k.
	Avg  float64            `json:"avg"`
	Pass map[string]float64 `json:"pass"`
	// Truncated is the share of responses cut at the token budget.
	Truncated float64 `json:"truncated"`
}

// PassAtN is Pass@n, n the benchmark's samples per problem (Avg when n is 1).
func (s HeldoutScore) PassAtN() float64 {
	if v, ok := s.Pass[fmt.Sprint(s.Samples)]; ok {
		return v
	}
	return s.Avg
}

// ReadHeldout reads the held-out evaluations of a run, in step order
// (none when the run evaluated no benchmark).
func ReadHeldout(ctx context.Context, runDir string) ([]BenchmarkEvalRecord, error) {
	files, err := storage.List(ctx, rundir.MetricsRecords(runDir, rundir.BenchmarkKind))
	if err != nil {
		return nil, err
	}
	var out []BenchmarkEvalRecord
	for _, f := range files {
		b, err := storage.ReadFile(ctx, f)
		if err != nil {
			return nil, err
		}
		var r BenchmarkEvalRecord
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&r); err != nil || r.Kind != HeldoutKind {
			return nil, fmt.Errorf("analyze: held-out evaluation %s: not a %s record (%v); remove it and run aipo train again to redo that evaluation", f, HeldoutKind, err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// heldoutMarkdown is the report's section on the held-out benchmarks.
func heldoutMarkdown(rs []BenchmarkEvalRecord) string {
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
func heldoutPlot(rs []BenchmarkEvalRecord) (*plot.Plot, error) {
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
