package model

// transposeInto writes dst[j*ldd + i] = src[i*lds + j] for i < rows, j < cols.
// Eight source rows at a time, so that each destination row gets eight
// consecutive values per visit instead of one.
func transposeInto(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	i := 0
	for ; i+8 <= rows; i += 8 {
		r0, r1 := src[i*lds:i*lds+cols], src[(i+1)*lds:(i+1)*lds+cols]
		r2, r3 := src[(i+2)*lds:(i+2)*lds+cols], src[(i+3)*lds:(i+3)*lds+cols]
		r4, r5 := src[(i+4)*lds:(i+4)*lds+cols], src[(i+5)*lds:(i+5)*lds+cols]
		r6, r7 := src[(i+6)*lds:(i+6)*lds+cols], src[(i+7)*lds:(i+7)*lds+cols]
		for j := range cols {
			d := dst[j*ldd+i : j*ldd+i+8]
			d[0], d[1], d[2], d[3] = r0[j], r1[j], r2[j], r3[j]
			d[4], d[5], d[6], d[7] = r4[j], r5[j], r6[j], r7[j]
		}
	}
	for ; i < rows; i++ {
		for j, v := range src[i*lds : i*lds+cols] {
			dst[j*ldd+i] = v
		}
	}
}
