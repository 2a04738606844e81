//go:build !amd64 || purego

package model

func swigluFwdVector(h, sig, g, u []float32) int           { return 0 }
func swigluRecVector(h, sig, g, u []float32) int           { return 0 }
func swigluBwdVector(dg, du, d, sig, g, u []float32) int   { return 0 }
func scaleVector(x []float32, c float32) int               { return 0 }
func maxVector(x []float32) (float32, int)                 { return 0, 0 }
func addVector(o, a, b []float32) int                      { return 0 }
func dsVector(dp, p []float32, dot float32) int            { return 0 }
func rmsScaleVector(o, x, w []float32, r float32) int      { return 0 }
func rmsDxVector(dx, dy, x, w []float32, r, c float32) int { return 0 }
func ropeVector(x1, x2, c, s []float32, flip bool) int     { return 0 }
func sumLanes(acc *[8]float32, x []float32)                { sumLanesGo(acc, x) }
func dotLanes(acc *[8]float32, a, b []float32)             { dotLanesGo(acc, a, b) }
func rmsBwdLanes(acc *[8]float32, pw, dy, x, w []float32, r float32) {
	rmsBwdLanesGo(acc, pw, dy, x, w, r)
}
func sumDotShiftLanes(s, sx *[8]float32, e, v []float32, shift float32) {
	sumDotShiftLanesGo(s, sx, e, v, shift)
}
