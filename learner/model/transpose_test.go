package model

import "testing"

func TestTransposeInto(t *testing.T) {
	for _, rows := range []int{1, 2, 7, 8, 9, 16, 21} {
		for _, cols := range []int{1, 3, 32} {
			lds, ldd := cols+2, rows+3
			src := make([]float32, rows*lds)
			for i := range src {
				src[i] = float32(i)
			}
			dst := make([]float32, cols*ldd)
			for i := range dst {
				dst[i] = -1
			}
			transposeInto(dst, ldd, src, lds, rows, cols)
			for j := 0; j < cols; j++ {
				for i := 0; i < ldd; i++ {
					want := float32(-1)
					if i < rows {
						want = src[i*lds+j]
					}
					if dst[j*ldd+i] != want {
						t.Fatalf("%dx%d: dst[%d][%d] = %v, want %v", rows, cols, j, i, dst[j*ldd+i], want)
					}
				}
			}
		}
	}
}
