//go:build !cgo || purego

package blas

// bf16MatrixKinds: a build without cgo multiplies no BF16Matrix.
func bf16MatrixKinds() []string { return nil }

// packKind is PackBF16, which fails in a build without cgo.
func packKind(kind string, w []uint16, O, I int) (*BF16Matrix, error) { return PackBF16(w, O, I) }
