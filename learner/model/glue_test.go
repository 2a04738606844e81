package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The vector glue kernels must give the scalar loops' bits on every input,
// special values included. The one freedom is a NaN's payload: when two
// NaNs meet, x86 returns the first operand's, and the compiler orders the
// operands of a commutative scalar operation as it likes; any NaN matches
// any NaN.
func TestGlueKernelsMatchScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 1e-40, -1e-40, 88.8, -104, 3.4e38, -3.4e38}
	gen := func(n int, withSpecial bool) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 4)
			if withSpecial && r.IntN(10) == 0 {
				x[i] = special[r.IntN(len(special))]
			}
		}
		return x
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if got[i] != got[i] && want[i] != want[i] {
				continue
			}
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d]: vector %g (%#x), scalar %g (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
	for _, n := range []int{1, 7, 8, 9, 31, 64, 344, 1001} {
		for _, sp := range []bool{false, true} {
			// SwiGLU forward, recompute and backward.
			g, u, d := gen(n, sp), gen(n, sp), gen(n, sp)
			wantH, wantS := make([]float32, n), make([]float32, n)
			for i, gv := range g {
				s := 1 / (1 + exp32(-gv))
				wantS[i], wantH[i] = s, gv*s*u[i]
			}
			gu := append(append([]float32(nil), g...), u...)
			h, sig := make([]float32, n), make([]float32, n)
			swigluForward(h, sig, gu, 1, n)
			same("swiglu sig", sig, wantS)
			same("swiglu h", h, wantH)
			swigluRecompute(h, sig, gu, 1, n)
			same("swiglu recompute", h, wantH)
			wantDG, wantDU := make([]float32, n), make([]float32, n)
			for i, gv := range g {
				s := wantS[i]
				wantDU[i] = d[i] * gv * s
				wantDG[i] = d[i] * u[i] * s * (1 + gv*(1-s))
			}
			dgu := make([]float32, 2*n)
			swigluBackward(dgu, d, sig, gu, 1, n)
			same("swiglu dg", dgu[:n], wantDG)
			same("swiglu du", dgu[n:], wantDU)

			// Scaling and the maximum.
			x := gen(n, sp)
			c := float32(r.NormFloat64())
			want := make([]float32, n)
			for i, v := range x {
				want[i] = v * c
			}
			got := append([]float32(nil), x...)
			for j := scaleVector(got, c); j < n; j++ {
				got[j] *= c
			}
			same("scale", got, want)
			same("max", []float32{maxOf(x)}, []float32{maxScalar(x)})
		}
	}
	// Element-wise kernels against their scalar loops, and the lane
	// reductions against their Go forms.
	for _, n := range []int{1, 7, 8, 9, 16, 31, 64, 344, 1001} {
		for _, sp := range []bool{false, true} {
			a, b, c, w := gen(n, sp), gen(n, sp), gen(n, sp), gen(n, sp)
			r1, r2 := float32(r.NormFloat64()), float32(r.NormFloat64())

			want := make([]float32, n)
			for i := range want {
				want[i] = a[i] + b[i]
			}
			got := make([]float32, n)
			addInto(got, a, b)
			same("add", got, want)

			for i := range want {
				want[i] = b[i] * (a[i] - r1)
			}
			got = append(got[:0], a...)
			for j := dsVector(got, b, r1); j < n; j++ {
				got[j] = b[j] * (got[j] - r1)
			}
			same("ds", got, want)

			for i := range want {
				want[i] = a[i] * r1 * w[i]
			}
			for j := rmsScaleVector(got, a, w, r1); j < n; j++ {
				got[j] = a[j] * r1 * w[j]
			}
			same("rms scale", got, want)

			for i := range want {
				want[i] = c[i] + (r1*w[i]*b[i] - a[i]*r2)
			}
			got = append(got[:0], c...)
			for j := rmsDxVector(got, b, a, w, r1, r2); j < n; j++ {
				got[j] += r1*w[j]*b[j] - a[j]*r2
			}
			same("rms dx", got, want)

			for _, flip := range []bool{false, true} {
				x1, x2 := append([]float32(nil), a...), append([]float32(nil), b...)
				w1, w2 := make([]float32, n), make([]float32, n)
				for i := range w1 {
					s := w[i]
					if flip {
						s = -s
					}
					w1[i] = a[i]*c[i] - b[i]*s
					w2[i] = b[i]*c[i] + a[i]*s
				}
				for j := ropeVector(x1, x2, c, w, flip); j < n; j++ {
					s := w[j]
					if flip {
						s = -s
					}
					p, q := x1[j], x2[j]
					x1[j], x2[j] = p*c[j]-q*s, q*c[j]+p*s
				}
				same("rope x1", x1, w1)
				same("rope x2", x2, w2)
			}

			m := n &^ 7
			var l1, l2, g1, g2 [8]float32
			sumLanes(&l1, a[:m])
			sumLanesGo(&g1, a[:m])
			same("sum lanes", l1[:], g1[:])
			dotLanes(&l1, a[:m], b[:m])
			dotLanesGo(&g1, a[:m], b[:m])
			same("dot lanes", l1[:], g1[:])
			sumDotShiftLanes(&l1, &l2, a[:m], b[:m], r1)
			sumDotShiftLanesGo(&g1, &g2, a[:m], b[:m], r1)
			same("sum-dot-shift lanes", l1[:], g1[:])
			same("sum-dot-shift lanes (dot)", l2[:], g2[:])
			pv, pg := append([]float32(nil), c...), append([]float32(nil), c...)
			rmsBwdLanes(&l1, pv, b, a, w, r1)
			rmsBwdLanesGo(&g1, pg, b, a, w, r1)
			same("rms backward lanes", l1[:], g1[:])
			same("rms backward pw", pv, pg)
		}
	}
	// Zero maxima of either sign, where VMAXPS and max disagree.
	for _, x := range [][]float32{
		{-1, -2, float32(math.Copysign(0, -1)), -3, -4, -5, -6, -7, 0, -1},
		{float32(math.Copysign(0, -1)), -2, -3, -4, -5, -6, -7, -8, -9},
		{0, -2, -3, -4, -5, -6, -7, float32(math.Copysign(0, -1)), -9},
	} {
		same("max of zeros", []float32{maxOf(x)}, []float32{maxScalar(x)})
	}
}
