package demorun

import (
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/records"
)

// The accuracy plot's legend sits beside the plot: the seen-entity line at
// 1.0 runs along the top of the data area, where the legend used to be.
func TestAccuracyPlotLegendClearOfTheData(t *testing.T) {
	rep := Report{Evals: []records.Eval{
		{Step: 0, Splits: []records.SplitScore{{Split: "unseen", Greedy: 0, AvgK: 0}, {Split: "seen", Greedy: 1}}},
		{Step: 200, Splits: []records.SplitScore{{Split: "unseen", Greedy: 0.95, AvgK: 0.9}, {Split: "seen", Greedy: 1}}},
	}}
	p, err := rep.accuracyPlot()
	if err != nil {
		t.Fatal(err)
	}
	data, legend := analytics.DrawClear(p, draw.New(vgimg.New(6*vg.Inch, 4*vg.Inch)))
	if legend.Size().X <= 0 {
		t.Fatal("no legend drawn")
	}
	if legend.Min.X < data.Max.X {
		t.Errorf("legend %+v overlaps the data area %+v", legend, data)
	}
	if _, err := rep.AccuracyPlot(); err != nil {
		t.Fatal(err)
	}
}
