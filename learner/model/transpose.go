package model

// transposeInto writes dst[j*ldd + i] = src[i*lds + j] for i < rows, j < cols.
func transposeInto(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	for i := 0; i < rows; i++ {
		row := src[i*lds : i*lds+cols]
		for j, v := range row {
			dst[j*ldd+i] = v
		}
	}
}
