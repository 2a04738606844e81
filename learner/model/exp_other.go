//go:build !amd64 || purego

package model

func expShiftVector(dst, src []float32, shift float32, neg bool) int { return 0 }

func vectorGlueUsed() bool { return false }
