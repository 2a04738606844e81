package model

// Float32 reductions run in eight lanes: over the longest prefix whose
// length is a multiple of 8, element i goes to lane i%8; the lanes are then
// combined by laneTotal's fixed tree and the tail is added in order. The
// AVX2 kernels and the Go loops below keep that order, so a reduction has
// the same bits with or without the vector unit, and it runs eight
// independent chains instead of one.
//
// Every product is rounded before it is added (float32(a*b)): Go may fuse
// a*b+c into one instruction on some architectures, and that would change
// the bits.

// laneTotal combines eight lane sums: ((0+4)+(2+6)) + ((1+5)+(3+7)).
func laneTotal(a *[8]float32) float32 {
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

// sumLanesGo adds x (len a multiple of 8) into the lanes.
func sumLanesGo(acc *[8]float32, x []float32) {
	for i := 0; i+8 <= len(x); i += 8 {
		for j := range acc {
			acc[j] += x[i+j]
		}
	}
}

// dotLanesGo adds a[i]*b[i] into the lanes (len a multiple of 8).
func dotLanesGo(acc *[8]float32, a, b []float32) {
	b = b[:len(a)]
	for i := 0; i+8 <= len(a); i += 8 {
		for j := range acc {
			acc[j] += float32(a[i+j] * b[i+j])
		}
	}
}

// sumDotShiftLanesGo adds e[i] into s and e[i]*(v[i]-shift) into sx.
func sumDotShiftLanesGo(s, sx *[8]float32, e, v []float32, shift float32) {
	v = v[:len(e)]
	for i := 0; i+8 <= len(e); i += 8 {
		for j := range s {
			s[j] += e[i+j]
			sx[j] += float32(e[i+j] * (v[i+j] - shift))
		}
	}
}

// rmsBwdLanesGo is one row of RMSNorm's backward reduction: it adds
// (dy*w)*x into the lanes and (dy*x)*r into pw, element-wise.
func rmsBwdLanesGo(acc *[8]float32, pw, dy, x, w []float32, r float32) {
	n := len(dy) &^ 7
	pw, x, w = pw[:n], x[:n], w[:n]
	for i := 0; i < n; i += 8 {
		for j := range acc {
			acc[j] += float32(float32(dy[i+j]*w[i+j]) * x[i+j])
			pw[i+j] += float32(float32(dy[i+j]*x[i+j]) * r)
		}
	}
}

// sum32 is the sum of x.
func sum32(x []float32) float32 {
	var acc [8]float32
	n := len(x) &^ 7
	sumLanes(&acc, x[:n])
	s := laneTotal(&acc)
	for _, v := range x[n:] {
		s += v
	}
	return s
}

// dot32 is the dot product of a and b (len(b) >= len(a)).
func dot32(a, b []float32) float32 {
	var acc [8]float32
	n := len(a) &^ 7
	dotLanes(&acc, a[:n], b[:n])
	s := laneTotal(&acc)
	for i := n; i < len(a); i++ {
		s += float32(a[i] * b[i])
	}
	return s
}

// sumDotShift returns sum(e) and sum(e*(v-shift)).
func sumDotShift(e, v []float32, shift float32) (s, sx float32) {
	var as, asx [8]float32
	n := len(e) &^ 7
	sumDotShiftLanes(&as, &asx, e[:n], v[:n], shift)
	s, sx = laneTotal(&as), laneTotal(&asx)
	for i := n; i < len(e); i++ {
		s += e[i]
		sx += float32(e[i] * (v[i] - shift))
	}
	return s, sx
}

// addInto sets o = a + b element-wise (o may be a or b).
func addInto(o, a, b []float32) {
	a, b = a[:len(o)], b[:len(o)]
	for i := addVector(o, a, b); i < len(o); i++ {
		o[i] = a[i] + b[i]
	}
}
