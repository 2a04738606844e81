package cuda

import "math"

// The CPU references of the parity tests. learner/model keeps its
// operators unexported, so these are line-for-line transcriptions of the
// serial arithmetic of learner/model/ops.go and rope.go (function named in
// each comment); if those change, change these too. learner/optim and
// learner/blas are called directly.

// refRMSNormForward is model.rmsnormForward.
func refRMSNormForward(out, rstd, x, w []float32, N, C int, eps float64) {
	for t := 0; t < N; t++ {
		xr := x[t*C : (t+1)*C]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		r := float32(1 / math.Sqrt(ss/float64(C)+eps))
		rstd[t] = r
		o := out[t*C : (t+1)*C]
		for i, v := range xr {
			o[i] = v * r * w[i]
		}
	}
}

// refRMSNormBackward is model.rmsnormBackward with one worker.
func refRMSNormBackward(dx, dw, dout, x, w, rstd []float32, N, C int) {
	pw := make([]float32, C)
	for t := 0; t < N; t++ {
		xr, dy, dxr := x[t*C:(t+1)*C], dout[t*C:(t+1)*C], dx[t*C:(t+1)*C]
		r := rstd[t]
		var dot float64
		for i, v := range xr {
			dot += float64(dy[i]) * float64(w[i]) * float64(v)
			pw[i] += dy[i] * v * r
		}
		c := float32(dot) * r * r * r / float32(C)
		for i, v := range xr {
			dxr[i] += r*w[i]*dy[i] - v*c
		}
	}
	for i, v := range pw {
		dw[i] += v
	}
}

// refSwiGLUForward is model.swigluForward, with math.Exp in place of the
// CPU's exp32 (which is within 2 ulp of it).
func refSwiGLUForward(h, sig, gu []float32, N, F int) {
	for t := 0; t < N; t++ {
		g, u := gu[2*t*F:(2*t+1)*F], gu[(2*t+1)*F:(2*t+2)*F]
		o, sg := h[t*F:(t+1)*F], sig[t*F:(t+1)*F]
		for i, gv := range g {
			s := 1 / (1 + float32(math.Exp(float64(-gv))))
			sg[i] = s
			o[i] = gv * s * u[i]
		}
	}
}

// refSwiGLUBackward is model.swigluBackward.
func refSwiGLUBackward(dgu, dh, sig, gu []float32, N, F int) {
	for t := 0; t < N; t++ {
		g, u := gu[2*t*F:(2*t+1)*F], gu[(2*t+1)*F:(2*t+2)*F]
		dg, du, d := dgu[2*t*F:(2*t+1)*F], dgu[(2*t+1)*F:(2*t+2)*F], dh[t*F:(t+1)*F]
		sg := sig[t*F : (t+1)*F]
		for i, gv := range g {
			s := sg[i]
			du[i] = d[i] * gv * s
			dg[i] = d[i] * u[i] * s * (1 + gv*(1-s))
		}
	}
}

// refRopeTable is model.newRopeTable(D, theta).upTo(n).
func refRopeTable(D int, theta float64, n int) (cos, sin []float32) {
	half := D / 2
	for p := 0; p < n; p++ {
		for i := 0; i < half; i++ {
			a := float64(p) * (1 / math.Pow(theta, float64(2*i)/float64(D)))
			cos = append(cos, float32(math.Cos(a)))
			sin = append(sin, float32(math.Sin(a)))
		}
	}
	return cos, sin
}

// refRope is model.ropeForward (backward: model.ropeBackward).
func refRope(backward bool, x []float32, ld int, pos []int32, nHeads, D int, cos, sin []float32) {
	half := D / 2
	for r := range pos {
		c := cos[int(pos[r])*half : int(pos[r]+1)*half]
		s := sin[int(pos[r])*half : int(pos[r]+1)*half]
		for h := 0; h < nHeads; h++ {
			x1 := x[r*ld+h*D : r*ld+h*D+half]
			x2 := x[r*ld+h*D+half : r*ld+h*D+D]
			for i := range c {
				a, b := x1[i], x2[i]
				if backward {
					x1[i] = a*c[i] + b*s[i]
					x2[i] = b*c[i] - a*s[i]
				} else {
					x1[i] = a*c[i] - b*s[i]
					x2[i] = b*c[i] + a*s[i]
				}
			}
		}
	}
}

// refEmbeddingBackward is model.embeddingBackward.
func refEmbeddingBackward(dEmb, dout []float32, tokens []int32, C int) {
	for t, tok := range tokens {
		row := dEmb[int(tok)*C : int(tok+1)*C]
		for i, v := range dout[t*C : (t+1)*C] {
			row[i] += v
		}
	}
}

// refToBF16 is checkpoint.Float32ToBF16 (that package imports more than
// these tests need).
func refToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func refFromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
