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
	if !haveExpAVX2 || n == 0 {
		return 0
	}
	_, _, _ = h[n-1], sig[n-1], u[n-1]
	swigluFwdAVX2(&h[0], &sig[0], &g[0], &u[0], n)
	return n
}

func swigluRecVector(h, sig, g, u []float32) int {
	n := len(g) &^ 7
	if !haveExpAVX2 || n == 0 {
		return 0
	}
	_, _, _ = h[n-1], sig[n-1], u[n-1]
	swigluRecAVX2(&h[0], &sig[0], &g[0], &u[0], n)
	return n
}

func swigluBwdVector(dg, du, d, sig, g, u []float32) int {
	n := len(g) &^ 7
	if !haveExpAVX2 || n == 0 {
		return 0
	}
	_, _, _, _, _ = dg[n-1], du[n-1], d[n-1], sig[n-1], u[n-1]
	swigluBwdAVX2(&dg[0], &du[0], &d[0], &sig[0], &g[0], &u[0], n)
	return n
}

func scaleVector(x []float32, c float32) int {
	n := len(x) &^ 7
	if !haveExpAVX2 || n == 0 {
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
	if !haveExpAVX2 || n == 0 {
		return 0, 0
	}
	m, nan := maxAVX2(&x[0], n)
	if nan || m == 0 {
		return 0, 0
	}
	return m, n
}
