//go:build amd64 && !purego

package optim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX2 kernels give the scalar loops' bits: the update of AdamW
// (every lane's operations in the scalar order, no FMA) and the sixteen
// running sums of the squared gradient.
func TestKernelsAVX2MatchScalar(t *testing.T) {
	if !haveAVX2 {
		t.Skip("this CPU has no AVX2: the scalar loops are all that runs")
	}
	r := rand.New(rand.NewPCG(5, 6))
	n := 16*97 + 13 // a tail for the scalar loop after the vector prefix
	fill := func(scale float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * scale)
		}
		return x
	}
	data, grad, m, v := fill(1), fill(1e-2), fill(1e-3), fill(1e-4)
	for i := range v {
		v[i] = float32(math.Abs(float64(v[i])))
	}
	c := DefaultConfig()
	c.WeightDecay, c.LR = 0.1, 1e-2
	k := c.kernelAt(7, 3.5) // clipped: scale below 1
	run := func(avx bool) (d, mm, vv []float32, sq float64) {
		defer func(h bool) { haveAVX2 = h }(haveAVX2)
		haveAVX2 = avx
		d, mm, vv = append([]float32(nil), data...), append([]float32(nil), m...), append([]float32(nil), v...)
		k.apply(d, grad, mm, vv)
		return d, mm, vv, SquaredSum(grad)
	}
	d0, m0, v0, s0 := run(false)
	d1, m1, v1, s1 := run(true)
	moved := 0
	for i := range d0 {
		if math.Float32bits(d0[i]) != math.Float32bits(d1[i]) || math.Float32bits(m0[i]) != math.Float32bits(m1[i]) || math.Float32bits(v0[i]) != math.Float32bits(v1[i]) {
			t.Fatalf("element %d: data %v m %v v %v scalar, %v %v %v AVX2", i, d0[i], m0[i], v0[i], d1[i], m1[i], v1[i])
		}
		if d0[i] != data[i] {
			moved++
		}
	}
	if moved < n/2 {
		t.Fatalf("the update moved %d of %d elements: the comparison shows little", moved, n)
	}
	if math.Float64bits(s0) != math.Float64bits(s1) {
		t.Fatalf("SquaredSum %v scalar, %v AVX2", s0, s1)
	}
}
