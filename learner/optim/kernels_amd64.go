//go:build amd64 && !purego

package optim

import "golang.org/x/sys/cpu"

var haveAVX2 = cpu.X86.HasAVX2

//go:noescape
func applyAVX2(data, grad, m, v *float32, n int, k *kernel)

//go:noescape
func squaredSumLanesAVX2(acc *[16]float64, x *float32, n int)

// applyVector is kernel.apply over a prefix of data, whose length it
// returns (a multiple of 8; 0 without AVX2).
func (k *kernel) applyVector(data, grad, m, v []float32) int {
	n := len(data) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _ = grad[n-1], m[n-1], v[n-1]
	applyAVX2(&data[0], &grad[0], &m[0], &v[0], n, k)
	return n
}

// squaredSumVector adds g[i]^2 into acc[i%16] over a prefix of g, whose
// length it returns (a multiple of 16; 0 without AVX2).
func squaredSumVector(acc *[16]float64, g []float32) int {
	n := len(g) &^ 15
	if !haveAVX2 || n == 0 {
		return 0
	}
	squaredSumLanesAVX2(acc, &g[0], n)
	return n
}
