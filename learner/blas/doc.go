// Package blas holds the single-precision matrix multiply that the CPU
// learner spends its time in.
//
// Sgemm has two implementations chosen at build time: OpenBLAS through cgo
// (the default whenever cgo is enabled and the purego tag is absent) and a
// tiled, parallel pure-Go kernel (CGO_ENABLED=0 or -tags purego). Backend
// names the one linked in, for start-up logs.
//
// Both run OpenBLAS (or the Go kernel) single-threaded inside and spread one
// call across Go goroutines themselves, so that the process has one pool of
// workers: the Go scheduler's. Callers that are already running on every
// core (attention heads in parallel) use SgemmSerial instead.
package blas
