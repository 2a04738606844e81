//go:build !amd64 || purego

package model

func expShiftVector(dst, src []float32, shift float32) int { return 0 }

func haveExpAVX2Used() bool { return false }
