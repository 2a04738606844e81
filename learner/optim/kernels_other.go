//go:build !amd64 || purego

package optim

func (k *kernel) applyVector(data, grad, m, v []float32) int { return 0 }

func squaredSumVector(acc *[16]float64, g []float32) int { return 0 }
