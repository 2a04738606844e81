//go:build amd64 && !purego

package model

//go:noescape
func swigluFwdAVX2(h, sig, gate, u *float32, n int)

//go:noescape
func swigluRecAVX2(h, sig, gate, u *float32, n int)

//go:noescape
func swigluBwdAVX2(dg, du, d, sig, gate, u *float32, n int)

//go:noescape
func scaleAVX2(x *float32, n int, c float32)

//go:noescape
func maxAVX2(x *float32, n int) (m float32, nan bool)

// The *Vector functions run the AVX2 kernel over the longest prefix that is
// a multiple of 8 and return its length; the caller finishes the tail with
// the scalar loop. Without AVX2 they do nothing and return 0.

func swigluFwdVector(h, sig, g, u []float32) int {
	n := len(g) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _ = h[n-1], sig[n-1], u[n-1]
	swigluFwdAVX2(&h[0], &sig[0], &g[0], &u[0], n)
	return n
}

func swigluRecVector(h, sig, g, u []float32) int {
	n := len(g) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _ = h[n-1], sig[n-1], u[n-1]
	swigluRecAVX2(&h[0], &sig[0], &g[0], &u[0], n)
	return n
}

func swigluBwdVector(dg, du, d, sig, g, u []float32) int {
	n := len(g) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _, _, _ = dg[n-1], du[n-1], d[n-1], sig[n-1], u[n-1]
	swigluBwdAVX2(&dg[0], &du[0], &d[0], &sig[0], &g[0], &u[0], n)
	return n
}

func scaleVector(x []float32, c float32) int {
	n := len(x) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	scaleAVX2(&x[0], n, c)
	return n
}

// maxVector returns the max of a prefix of x and its length, or 0 when
// the scalar loop must decide: no AVX2, fewer than 8 elements, a NaN, or a
// zero maximum (whose sign VMAXPS does not settle as max does).
func maxVector(x []float32) (float32, int) {
	n := len(x) &^ 7
	if !haveAVX2 || n == 0 {
		return 0, 0
	}
	m, nan := maxAVX2(&x[0], n)
	if nan || m == 0 {
		return 0, 0
	}
	return m, n
}

//go:noescape
func addAVX2(o, a, b *float32, n int)

//go:noescape
func dsAVX2(dp, p *float32, n int, dot float32)

//go:noescape
func rmsScaleAVX2(o, x, w *float32, n int, r float32)

//go:noescape
func rmsDxAVX2(dx, dy, x, w *float32, n int, r, c float32)

//go:noescape
func ropeAVX2(x1, x2, c, s *float32, n int, flip uint32)

//go:noescape
func sumLanesAVX2(acc, x *float32, n int)

//go:noescape
func dotLanesAVX2(acc, a, b *float32, n int)

//go:noescape
func sumDotShiftLanesAVX2(s, sx, e, v *float32, n int, shift float32)

//go:noescape
func rmsBwdLanesAVX2(acc, pw, dy, x, w *float32, n int, r float32)

// addVector: o = a + b over a prefix.
func addVector(o, a, b []float32) int {
	n := len(o) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1]
	addAVX2(&o[0], &a[0], &b[0], n)
	return n
}

// dsVector: dp = p*(dp-dot) over a prefix.
func dsVector(dp, p []float32, dot float32) int {
	n := len(p) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_ = dp[n-1]
	dsAVX2(&dp[0], &p[0], n, dot)
	return n
}

// rmsScaleVector: o = (x*r)*w over a prefix.
func rmsScaleVector(o, x, w []float32, r float32) int {
	n := len(x) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _ = o[n-1], w[n-1]
	rmsScaleAVX2(&o[0], &x[0], &w[0], n, r)
	return n
}

// rmsDxVector: dx += (r*w)*dy - x*c over a prefix.
func rmsDxVector(dx, dy, x, w []float32, r, c float32) int {
	n := len(x) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _ = dx[n-1], dy[n-1], w[n-1]
	rmsDxAVX2(&dx[0], &dy[0], &x[0], &w[0], n, r, c)
	return n
}

// ropeVector rotates the pairs (x1[i], x2[i]) by (c[i], s[i]) over a
// prefix: x1 = x1*c - x2*s, x2 = x2*c + x1*s, with s negated when flip.
func ropeVector(x1, x2, c, s []float32, flip bool) int {
	n := len(c) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _ = x1[n-1], x2[n-1], s[n-1]
	var f uint32
	if flip {
		f = 1 << 31
	}
	ropeAVX2(&x1[0], &x2[0], &c[0], &s[0], n, f)
	return n
}

func sumLanes(acc *[8]float32, x []float32) {
	if !haveAVX2 {
		sumLanesGo(acc, x)
	} else if len(x) > 0 {
		sumLanesAVX2(&acc[0], &x[0], len(x)&^7)
	}
}

func dotLanes(acc *[8]float32, a, b []float32) {
	if !haveAVX2 {
		dotLanesGo(acc, a, b)
	} else if n := len(a) &^ 7; n > 0 {
		_ = b[n-1]
		dotLanesAVX2(&acc[0], &a[0], &b[0], n)
	}
}

func sumDotShiftLanes(s, sx *[8]float32, e, v []float32, shift float32) {
	if !haveAVX2 {
		sumDotShiftLanesGo(s, sx, e, v, shift)
	} else if n := len(e) &^ 7; n > 0 {
		_ = v[n-1]
		sumDotShiftLanesAVX2(&s[0], &sx[0], &e[0], &v[0], n, shift)
	}
}

func rmsBwdLanes(acc *[8]float32, pw, dy, x, w []float32, r float32) {
	if !haveAVX2 {
		rmsBwdLanesGo(acc, pw, dy, x, w, r)
	} else if n := len(dy) &^ 7; n > 0 {
		_, _, _ = pw[n-1], x[n-1], w[n-1]
		rmsBwdLanesAVX2(&acc[0], &pw[0], &dy[0], &x[0], &w[0], n, r)
	}
}
