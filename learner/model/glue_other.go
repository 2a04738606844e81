//go:build !amd64 || purego

package model

func swigluFwdVector(h, sig, g, u []float32) int         { return 0 }
func swigluRecVector(h, sig, g, u []float32) int         { return 0 }
func swigluBwdVector(dg, du, d, sig, g, u []float32) int { return 0 }
func scaleVector(x []float32, c float32) int             { return 0 }
func maxVector(x []float32) (float32, int)               { return 0, 0 }
