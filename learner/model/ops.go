package model

import (
	"math"

	"github.com/aipo-rl/aipo/learner/blas"
)

// Shapes in this file: N = tokens of the packed batch, C = hidden size,
// V = vocabulary, I/O = input/output features of a linear layer,
// F = intermediate size. Backward functions add into gradients of
// parameters and into dx of inputs marked "accumulates"; other outputs are
// overwritten.

// embeddingForward: out[N,C] = emb[tokens[t], :].
func embeddingForward(out []float32, tokens []int32, emb []float32, C int) {
	parallelFor(len(tokens), 256, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			copy(out[t*C:(t+1)*C], emb[int(tokens[t])*C:])
		}
	})
}

// embeddingBackward: dEmb[V,C] += scatter of dout[N,C] by tokens.
func embeddingBackward(dEmb, dout []float32, tokens []int32, C int) {
	for t, tok := range tokens {
		row := dEmb[int(tok)*C : int(tok+1)*C]
		addInto(row, row, dout[t*C:(t+1)*C])
	}
}

// rmsnormForward: out[N,C] = x * rstd * w, rstd[N] = 1/sqrt(mean(x^2)+eps).
func rmsnormForward(out, rstd, x, w []float32, N, C int, eps float64) {
	parallelFor(N, 64, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			rstd[t] = rmsnormRow(out[t*C:(t+1)*C], x[t*C:(t+1)*C], w, eps)
		}
	})
}

// residualNorm: sum[N,C] = a + b, then rmsnormForward(out, rstd, sum), one
// row at a time while the row is in cache.
func residualNorm(sum, out, rstd, a, b, w []float32, N, C int, eps float64) {
	parallelFor(N, 64, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			s := sum[t*C : (t+1)*C]
			addInto(s, a[t*C:(t+1)*C], b[t*C:(t+1)*C])
			rstd[t] = rmsnormRow(out[t*C:(t+1)*C], s, w, eps)
		}
	})
}

// rmsnormRow normalises one row into o and returns its rstd.
func rmsnormRow(o, xr, w []float32, eps float64) float32 {
	C := len(xr)
	ss := dot32(xr, xr)
	r := float32(1 / math.Sqrt(float64(ss)/float64(C)+eps))
	for i := rmsScaleVector(o, xr, w, r); i < C; i++ {
		o[i] = xr[i] * r * w[i]
	}
	return r
}

// rmsnormBackward: dx[N,C] (accumulates) and dw[C] from dout[N,C]:
// dx = r*w*dy - x * r^3/C * sum(w*dy*x), dw += sum_t dy*x*r.
func rmsnormBackward(dx, dw, dout, x, w, rstd []float32, N, C int) {
	ranges := splitRange(N, workers())
	partial := make([]float32, len(ranges)*C)
	parallelTasks(len(ranges), func(_, k int) {
		pw := partial[k*C : (k+1)*C]
		for t := ranges[k][0]; t < ranges[k][1]; t++ {
			xr, dy := x[t*C:(t+1)*C], dout[t*C:(t+1)*C]
			r := rstd[t]
			// dot = sum (dy*w)*x in lanes; pw += (dy*x)*r.
			var acc [8]float32
			n := C &^ 7
			rmsBwdLanes(&acc, pw, dy, xr, w, r)
			dot := laneTotal(&acc)
			for i := n; i < C; i++ {
				dot += float32(float32(dy[i]*w[i]) * xr[i])
				pw[i] += float32(float32(dy[i]*xr[i]) * r)
			}
			rmsnormDx(dx[t*C:(t+1)*C], dy, xr, w, r, dot, C)
		}
	})
	for k := range ranges {
		if dw != nil { // nil: a frozen base's norm takes no gradient
			addInto(dw, dw, partial[k*C:(k+1)*C])
		}
	}
}

// rmsnormDx adds one row's input gradient, r*w*dy - x*c with c =
// dot*r^3/C, to dxr.
func rmsnormDx(dxr, dy, xr, w []float32, r float32, dot float32, C int) {
	c := dot * r * r * r / float32(C)
	for i := rmsDxVector(dxr, dy, xr, w, r, c); i < C; i++ {
		dxr[i] += float32(r*w[i]*dy[i]) - float32(xr[i]*c)
	}
}

// linearForward: out[N,O] = in[N,I] · w[O,I]^T + b[O] (b may be nil).
func linearForward(out, in, w, b []float32, N, I, O int) {
	blas.Sgemm(false, true, N, O, I, 1, in, I, w, I, 0, out, O)
	addBias(out, b, N, O)
}

// addBias adds b[O] to every row of out[N,O] (nothing when b is nil).
func addBias(out, b []float32, N, O int) {
	if b == nil {
		return
	}
	parallelFor(N, 64, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			o := out[t*O : (t+1)*O]
			addInto(o, o, b)
		}
	})
}

// linearBackward: din[N,I] = dout[N,O]·w[O,I] (overwritten; skipped when din
// is nil), dw[O,I] += dout^T·in, db[O] += column sums of dout.
func linearBackward(din, dw, db, dout, in, w []float32, N, I, O int) {
	dW := blas.Gemm{TransA: true, M: O, N: I, K: N, Alpha: 1, A: dout, Lda: O, B: in, Ldb: I, Beta: 1, C: dw, Ldc: I}
	if din != nil {
		// The two products are of equal work: each on its own core.
		blas.SgemmPair(blas.Gemm{M: N, N: I, K: O, Alpha: 1, A: dout, Lda: O, B: w, Ldb: I, C: din, Ldc: I}, dW)
	} else {
		dW.Run()
	}
	if db != nil {
		parallelFor(O, 64, func(lo, hi int) {
			for t := 0; t < N; t++ {
				addInto(db[lo:hi], db[lo:hi], dout[t*O+lo:t*O+hi])
			}
		})
	}
}

// swigluForward: h[N,F] = silu(g) * u where gu[N,2F] holds g then u per
// row; sig[N,F] = sigmoid(g) is kept so that the backward pass needs no exp.
func swigluForward(h, sig, gu []float32, N, F int) {
	parallelFor(N, 16, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			g, u := gu[2*t*F:(2*t+1)*F], gu[(2*t+1)*F:(2*t+2)*F]
			o, sg := h[t*F:(t+1)*F], sig[t*F:(t+1)*F]
			// exp32(-g), kept in sg until the sigmoid replaces it.
			expNeg(sg, g)
			for i := swigluFwdVector(o, sg, g, u); i < len(g); i++ {
				gv := g[i]
				s := 1 / (1 + sg[i])
				sg[i] = s
				o[i] = gv * s * u[i]
			}
		}
	})
}

// swigluRecompute: h[N,F] = g * sig * u, the forward output rebuilt from
// the kept sigmoid.
func swigluRecompute(h, sig, gu []float32, N, F int) {
	parallelFor(N, 16, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			g, u := gu[2*t*F:(2*t+1)*F], gu[(2*t+1)*F:(2*t+2)*F]
			o, sg := h[t*F:(t+1)*F], sig[t*F:(t+1)*F]
			for i := swigluRecVector(o, sg, g, u); i < len(g); i++ {
				o[i] = g[i] * sg[i] * u[i]
			}
		}
	})
}

// swigluBackward: dgu[N,2F] (overwritten) from dh[N,F]:
// dg = dh*u*s*(1+g*(1-s)), du = dh*g*s, s = sig = sigmoid(g).
func swigluBackward(dgu, dh, sig, gu []float32, N, F int) {
	parallelFor(N, 16, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			g, u := gu[2*t*F:(2*t+1)*F], gu[(2*t+1)*F:(2*t+2)*F]
			dg, du, d := dgu[2*t*F:(2*t+1)*F], dgu[(2*t+1)*F:(2*t+2)*F], dh[t*F:(t+1)*F]
			sg := sig[t*F : (t+1)*F]
			for i := swigluBwdVector(dg, du, d, sg, g, u); i < len(g); i++ {
				gv, s := g[i], sg[i]
				du[i] = d[i] * gv * s
				dg[i] = d[i] * u[i] * s * (1 + gv*(1-s))
			}
		}
	})
}

// residualForward: out[n] = a[n] + b[n].
func residualForward(out, a, b []float32) {
	parallelFor(len(out), 1<<14, func(lo, hi int) {
		addInto(out[lo:hi], a[lo:hi], b[lo:hi])
	})
}

// The residual's backward is the identity: the same gradient flows to both
// inputs, so callers reuse the gradient buffer instead of calling a function.

// splitRange cuts [0,n) into at most parts equal ranges.
func splitRange(n, parts int) [][2]int {
	step := max((n+parts-1)/max(parts, 1), 1)
	var out [][2]int
	for lo := 0; lo < n; lo += step {
		out = append(out, [2]int{lo, min(lo+step, n)})
	}
	return out
}

// exp32 is e^x in float32 arithmetic, within 2 ulp of math.Exp over the
// float32 range (checked by TestExp32): x = n*ln2 + r with |r| <= ln2/2
// (n rounded by the 1.5*2^23 trick, ln2 split Cody-Waite style), e^r by
// its degree-7 Taylor polynomial, then scaled by 2^n through the exponent
// bits. math.Exp in float64 made up a third of a small model's step.
func exp32(x float32) float32 {
	if !(x >= -87.33654 && x <= 88.37626) { // also NaN
		return exp32Slow(x)
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125
		ln2lo = 1.42860682030941723212e-6
		magic = 12582912 // 1.5*2^23: adding it rounds to an integer
	)
	f := x*log2e + magic
	n := int32(math.Float32bits(f)) - 0x4B400000
	fn := f - magic
	r := x - fn*ln2hi - fn*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	return p * math.Float32frombits(uint32(n+127)<<23)
}

// exp32Slow covers NaN, overflow and results below the normal range.
func exp32Slow(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72284:
		return float32(math.Inf(1))
	case x < -103.97208:
		return 0
	}
	return float32(math.Exp(float64(x)))
}
