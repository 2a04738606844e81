package model

import (
	"sync"

	"github.com/aipo-rl/aipo/learner/blas"
)

// expShift writes dst[i] = exp32(src[i]-shift) for every i (dst may be
// src; len(dst) >= len(src)). On amd64 with AVX2 the blocks of 8 run
// vectorised with exp32's exact operations, so the results are the same
// bits as the scalar loop's on every machine.
func expShift(dst, src []float32, shift float32) { expShiftSign(dst, src, shift, false) }

// expNeg writes dst[i] = exp32(-src[i]) (dst may be src).
func expNeg(dst, src []float32) { expShiftSign(dst, src, 0, true) }

func expShiftSign(dst, src []float32, shift float32, neg bool) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); {
		i += expShiftVector(dst[i:], src[i:], shift, neg)
		if i < len(src) {
			// A block the AVX2 kernel declined (a value between exp32's
			// fast range and its bounds for 0 and +Inf, or NaN): the
			// AVX-512 one covers every value, at once for the rest.
			i += expShiftWide(dst[i:], src[i:], shift, neg)
		}
		// Without either kernel: scalar.
		end := min(i+8, len(src))
		for ; i < end; i++ {
			s := src[i]
			if neg {
				s = -s
			}
			dst[i] = exp32(s - shift)
		}
	}
}

// maxOf returns the largest element of x (non-empty) with the builtin max's
// semantics: NaN if any element is NaN, +0 over -0. Those make max
// order-independent, so four running maxima give the same bits as one
// while not waiting on each other.
func maxOf(x []float32) float32 {
	m, done := maxVector(x)
	if done == 0 {
		return maxScalar(x)
	}
	for _, v := range x[done:] {
		m = max(m, v)
	}
	return m
}

// maxScalar is maxOf without the vector kernel.
func maxScalar(x []float32) float32 {
	m0 := x[0]
	m1, m2, m3 := m0, m0, m0
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0 = max(m0, x[i])
		m1 = max(m1, x[i+1])
		m2 = max(m2, x[i+2])
		m3 = max(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = max(m0, x[i])
	}
	return max(max(m0, m1), max(m2, m3))
}

// wideScratch holds the operands of blas.Exp32Shift: 256 inputs, then 256
// results.
var wideScratch = sync.Pool{New: func() any { return new([512]float32) }}

// expShiftWide is blas.Exp32Shift of src into dst (the length it wrote),
// through pooled scratch: a slice handed to C escapes to the heap, and
// callers' stack buffers (logSoftmax's block) must stay where they are.
func expShiftWide(dst, src []float32, shift float32, neg bool) int {
	if !blas.ExpVectorAvailable() {
		return 0 // no copies for nothing: the caller goes on in scalar
	}
	buf := wideScratch.Get().(*[512]float32)
	defer wideScratch.Put(buf)
	done := 0
	for done < len(src) {
		n := min(256, len(src)-done)
		in, out := buf[:n], buf[256:256+n]
		copy(in, src[done:done+n])
		w := blas.Exp32Shift(out, in, shift, neg)
		copy(dst[done:done+w], out[:w])
		done += w
		if w < n {
			break
		}
	}
	return done
}
