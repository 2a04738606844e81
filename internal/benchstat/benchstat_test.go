package benchstat

import (
	"math"
	"testing"
)

func TestSummaries(t *testing.T) {
	if got := Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3 values: %v", got)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4 values: %v", got)
	}
	if !math.IsNaN(Median(nil)) || !math.IsNaN(Mean(nil)) {
		t.Error("median or mean of nothing is not NaN")
	}
	s := Of(Ratios([]float64{2, 9, 4}, []float64{1, 3, 4}))
	if s.Median != 2 || s.Min != 1 || s.Max != 3 || s.N != 3 {
		t.Errorf("ratios summarised as %+v, want median 2 in [1, 3] over 3", s)
	}
	if got := s.Format("%.2f"); got != "2.00 [1.00-3.00]" {
		t.Errorf("Format: %q", got)
	}
	if got := Of([]float64{7}).Format("%.1f"); got != "7.0" {
		t.Errorf("one round: %q", got)
	}
}
