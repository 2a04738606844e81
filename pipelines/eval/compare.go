package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Comparison file names.
const (
	CompareJSON     = "compare.json"
	CompareMarkdown = "compare.md"
	ComparePNG      = "compare.png"
)

// Comparison sets reports side by side: the Avg@n of every benchmark per
// report, and the difference of each report from the first.
type Comparison struct {
	Labels     []string        `json:"labels"`
	Benchmarks []string        `json:"benchmarks"`
	Rows       []ComparisonRow `json:"rows"`
}

// ComparisonRow is one report's scores and deltas (in fractions; NaN-free:
// a benchmark a report lacks is absent from its maps).
type ComparisonRow struct {
	Label  string             `json:"label"`
	Avg    map[string]float64 `json:"avg"`
	StdErr map[string]float64 `json:"stderr"`
	// Delta is Avg minus the first report's Avg, per benchmark present in
	// both; "overall" holds the difference of the macro averages.
	Delta   map[string]float64 `json:"delta,omitempty"`
	Overall float64            `json:"overall"`
}

// Compare builds the comparison of reports (the first is the baseline).
func Compare(rs []*Report) (Comparison, error) {
	if len(rs) == 0 {
		return Comparison{}, fmt.Errorf("eval compare: no reports")
	}
	c := Comparison{Benchmarks: benchNames(rs)}
	for i, r := range rs {
		row := ComparisonRow{Label: r.Label, Avg: map[string]float64{}, StdErr: map[string]float64{}, Overall: r.Overall.Avg.Mean}
		if i > 0 {
			row.Delta = map[string]float64{"overall": r.Overall.Avg.Mean - rs[0].Overall.Avg.Mean}
		}
		for _, n := range c.Benchmarks {
			bs, ok := r.Bench(n)
			if !ok || bs.Scored == 0 {
				continue
			}
			row.Avg[n], row.StdErr[n] = bs.Avg.Mean, bs.Avg.StdErr
			if i > 0 {
				if b0, ok := rs[0].Bench(n); ok && b0.Scored > 0 {
					row.Delta[n] = bs.Avg.Mean - b0.Avg.Mean
				}
			}
		}
		c.Labels = append(c.Labels, r.Label)
		c.Rows = append(c.Rows, row)
	}
	return c, nil
}

// CompareMarkdownText renders reports side by side in the Table 1 layout
// with a delta row under every report but the first.
func CompareMarkdownText(rs []*Report) string {
	var b strings.Builder
	b.WriteString("# Evaluation comparison\n\n")
	b.WriteString(table1(rs, true))
	fmt.Fprintf(&b, "\nScores in percent (Avg@n, mean ± standard error over problems); Δ rows are differences from %s in points.\n", mdEscape(rs[0].Label))
	for _, r := range rs {
		if !r.Complete {
			fmt.Fprintf(&b, "\n%s is incomplete (some chunks were not committed).\n", mdEscape(r.Label))
		}
	}
	return b.String()
}

// WriteComparison writes compare.json, compare.md and compare.png into dir.
func WriteComparison(ctx context.Context, dir string, rs []*Report) error {
	c, err := Compare(rs)
	if err != nil {
		return err
	}
	j, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	png, err := Chart(rs)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{CompareJSON: append(j, '\n'), CompareMarkdown: []byte(CompareMarkdownText(rs)), ComparePNG: png} {
		if err := storage.WriteAtomic(ctx, storage.Join(dir, name), data); err != nil {
			return fmt.Errorf("eval compare: %w", err)
		}
	}
	return nil
}

// Chart draws Avg@n per benchmark as grouped bars, one group per benchmark
// and one bar per report, with standard-error whiskers, as a PNG.
func Chart(rs []*Report) ([]byte, error) {
	names := benchNames(rs)
	p := plot.New()
	p.Title.Text = "Avg@n by benchmark"
	p.Y.Label.Text = "accuracy (%)"
	p.Y.Min, p.Y.Max = 0, 100
	p.Add(plotter.NewGrid())
	width := vg.Points(min(40, 240/float64(max(1, len(rs)*len(names)))+8))
	for i, r := range rs {
		vals := make(plotter.Values, len(names))
		errs := make(plotter.YErrors, len(names))
		xys := make(plotter.XYs, len(names))
		for j, n := range names {
			if bs, ok := r.Bench(n); ok && bs.Scored > 0 {
				vals[j] = 100 * bs.Avg.Mean
				errs[j].Low, errs[j].High = 100*bs.Avg.StdErr, 100*bs.Avg.StdErr
			}
			xys[j] = plotter.XY{X: float64(j), Y: vals[j]}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, fmt.Errorf("eval chart: %w", err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		off := (float64(i) - float64(len(rs)-1)/2) * float64(width)
		bars.Offset = vg.Length(off)
		p.Add(bars)
		if len(rs) > 1 {
			p.Legend.Add(r.Label, bars)
		}
		whisk, err := plotter.NewYErrorBars(struct {
			plotter.XYer
			plotter.YErrorer
		}{xys, errs})
		if err == nil {
			whisk.LineStyle.Width = vg.Points(1)
			// The whiskers sit on the bars' centres: shift them by the
			// same offset in data units after the plot is laid out.
			p.Add(&shifted{whisk, vg.Length(off)})
		}
	}
	p.NominalX(names...)
	p.Legend.Top = true
	c := vgimg.PngCanvas{Canvas: vgimg.New(vg.Points(120+90*float64(len(names))), 4*vg.Inch)}
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("eval chart: %w", err)
	}
	return buf.Bytes(), nil
}

// shifted draws a plotter moved horizontally by an offset in canvas units.
type shifted struct {
	*plotter.YErrorBars
	off vg.Length
}

func (s *shifted) Plot(c draw.Canvas, p *plot.Plot) {
	c.Min.X += s.off
	c.Max.X += s.off
	s.YErrorBars.Plot(c, p)
}
