package model

import "testing"

func TestTransposeInto(t *testing.T) {
	src := []float32{1, 2, 3, 9, 4, 5, 6, 9} // 2 x 3, stride 4
	dst := make([]float32, 3*2)
	transposeInto(dst, 2, src, 4, 2, 3)
	want := []float32{1, 4, 2, 5, 3, 6}
	for i := range want {
		if dst[i] != want[i] {
			t.Fatalf("transpose: got %v, want %v", dst, want)
		}
	}
}
