//go:build amd64 && !purego

package model

import "golang.org/x/sys/cpu"

// haveExpAVX2 selects the AVX2 kernel of expShift.
var haveExpAVX2 = cpu.X86.HasAVX2

//go:noescape
func expShiftAVX2(dst, src *float32, n int, shift float32) (done int)

// expShiftVector writes dst[i] = exp32(src[i]-shift) for a prefix of src
// and returns its length.
func expShiftVector(dst, src []float32, shift float32) int {
	if !haveExpAVX2 || len(src) < 8 {
		return 0
	}
	return expShiftAVX2(&dst[0], &src[0], len(src), shift)
}

func haveExpAVX2Used() bool { return haveExpAVX2 }
