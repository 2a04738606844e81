package demorun

import (
	"math"
	"testing"

	"github.com/aipo-rl/aipo/pipelines/analytics"
)

func TestMeanStd(t *testing.T) {
	m := meanStd([]float64{0.9, 0.95, 1.0})
	if math.Abs(m.Mean-0.95) > 1e-12 || math.Abs(m.Std-0.05) > 1e-12 || m.N != 3 {
		t.Fatalf("meanStd = %+v, want mean 0.95, sample std 0.05, n 3", m)
	}
	if s := meanStd(nil).String(); s != "n/a" {
		t.Errorf("no seeds print %q, want n/a", s)
	}
	if s := meanStd([]float64{0.5}).String(); s != "0.500" {
		t.Errorf("one seed prints %q, want 0.500 (no spread)", s)
	}
}

// A rise, fall and settle of the interactions is read off as start < peak
// > end, with the step of the peak.
func TestPhases(t *testing.T) {
	var steps []analytics.StepMetrics
	for k := 0; k < 100; k++ {
		v := 0.5 + float64(k)/100
		if k > 50 {
			v = 1.0 - float64(k-50)/100
		}
		s := analytics.StepMetrics{Step: int64(k), Trajectories: 8}
		s.InteractionsPerTrajectory.Total = v
		steps = append(steps, s)
	}
	steps = append(steps, analytics.StepMetrics{Step: 100}) // no trajectories: ignored
	p, ok := Phases(steps)
	if !ok {
		t.Fatal("no phases")
	}
	if math.Abs(p.Start-0.545) > 1e-9 || math.Abs(p.End-0.555) > 1e-9 || p.Peak < 0.95 || p.PeakStep < 50 || p.PeakStep > 56 {
		t.Fatalf("phases %+v: want start 0.545, end 0.555, a peak near 0.96 just after step 50", p)
	}
	if _, ok := Phases(nil); ok {
		t.Error("phases of no steps")
	}
}
