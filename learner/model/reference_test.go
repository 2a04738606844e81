package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The exported head reference (which learner/cuda is checked against)
// against a float64 log-softmax and central finite differences.
func TestHeadReference(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	M, C, V := 6, 8, 50
	xh, w := make([]float32, M*C), make([]float32, V*C)
	for i := range xh {
		xh[i] = float32(r.NormFloat64())
	}
	for i := range w {
		w[i] = float32(r.NormFloat64()) * 0.5
	}
	targets := []int32{3, 0, 49, -1, 17, 17}
	g := []float32{0.5, -1, 2, 7, 0.25, -0.75}
	logp := func(xh, w []float32) []float64 {
		out := make([]float64, M)
		for m := range M {
			if targets[m] < 0 {
				continue
			}
			z := make([]float64, V)
			mx := math.Inf(-1)
			for v := range V {
				for c := range C {
					z[v] += float64(xh[m*C+c]) * float64(w[v*C+c])
				}
				mx = math.Max(mx, z[v])
			}
			s := 0.0
			for _, x := range z {
				s += math.Exp(x - mx)
			}
			out[m] = z[targets[m]] - mx - math.Log(s)
		}
		return out
	}
	lp, lse, ent := make([]float32, M), make([]float32, M), make([]float32, M)
	HeadForward(lp, lse, ent, xh, w, targets, M, C, V)
	want := logp(xh, w)
	for m := range M {
		if math.Abs(float64(lp[m])-want[m]) > 1e-5*(1+math.Abs(want[m])) {
			t.Errorf("row %d: logp %g, float64 reference %g", m, lp[m], want[m])
		}
		if targets[m] < 0 && (lp[m] != 0 || ent[m] != 0) {
			t.Errorf("row %d without a target: logp %g, entropy %g; want 0", m, lp[m], ent[m])
		}
		if targets[m] >= 0 && !(ent[m] > 0 && float64(ent[m]) <= math.Log(float64(V))+1e-5) {
			t.Errorf("row %d: entropy %g outside (0, log V]", m, ent[m])
		}
	}

	// d/dx of sum_m g_m*logp_m: HeadBackward against central differences.
	dxh, dw := make([]float32, M*C), make([]float32, V*C)
	HeadBackward(dxh, dw, xh, w, targets, lse, g, M, C, V)
	objective := func(xh, w []float32) float64 {
		s := 0.0
		for m, v := range logp(xh, w) {
			s += float64(g[m]) * v
		}
		return s
	}
	const h = 1e-2
	check := func(name string, p []float32, grad []float32, idx []int) {
		for _, i := range idx {
			old := p[i]
			p[i] = old + h
			up := objective(xh, w)
			p[i] = old - h
			down := objective(xh, w)
			p[i] = old
			fd := (up - down) / (2 * h)
			if math.Abs(float64(grad[i])-fd) > 2e-3*(1+math.Abs(fd)) {
				t.Errorf("%s[%d]: gradient %g, finite difference %g", name, i, grad[i], fd)
			}
		}
	}
	check("dxh", xh, dxh, []int{0, 5, 13, 3*C + 2, M*C - 1})
	check("dw", w, dw, []int{0, 3*C + 1, 17*C + 4, 49*C + 7, V*C - 1})
}
