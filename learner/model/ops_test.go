package model

import (
	"math"
	"testing"
)

func TestExp32(t *testing.T) {
	worst, at := 0.0, float32(0)
	for x := float32(-103); x < 88.7; x += 0.0013 {
		want := math.Exp(float64(x))
		got := float64(exp32(x))
		// ulp of the float32 result
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		if want < 1.2e-38 {
			ulp = 1.5e-45 // subnormal results: absolute spacing
		}
		if e := math.Abs(got-want) / ulp; e > worst {
			worst, at = e, x
		}
	}
	if worst > 2 {
		t.Fatalf("exp32(%v) is %.2f ulp from math.Exp; want <= 2", at, worst)
	}
	for _, c := range []struct{ x, want float32 }{{0, 1}, {-200, 0}, {100, float32(math.Inf(1))}} {
		if got := exp32(c.x); got != c.want {
			t.Errorf("exp32(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if got := exp32(float32(math.NaN())); got == got {
		t.Errorf("exp32(NaN) = %v, want NaN", got)
	}
}
