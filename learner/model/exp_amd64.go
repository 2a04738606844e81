//go:build amd64 && !purego

package model

import "golang.org/x/sys/cpu"

// haveAVX2 selects the AVX2 kernels of expShift and the glue (glue_amd64.s).
var haveAVX2 = cpu.X86.HasAVX2

//go:noescape
func expShiftAVX2(dst, src *float32, n int, shift float32, neg uint32) (done int)

// expShiftVector writes dst[i] = exp32(src[i]-shift), or exp32(-src[i]-shift)
// with neg, for a prefix of src and returns its length.
func expShiftVector(dst, src []float32, shift float32, neg bool) int {
	if !haveAVX2 || len(src) == 0 {
		return 0
	}
	_ = dst[len(src)-1]
	var sign uint32
	if neg {
		sign = 1 << 31
	}
	return expShiftAVX2(&dst[0], &src[0], len(src), shift, sign)
}

func vectorGlueUsed() bool { return haveAVX2 }
