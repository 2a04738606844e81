// Package blas holds the numeric kernels the CPU learner and decoder spend
// their time in: the single-precision matrix multiply, a fixed-order
// product and a vectorised exp.
//
// Sgemm has two implementations chosen at build time: OpenBLAS through cgo
// (the default whenever cgo is enabled and the purego tag is absent) and a
// tiled, parallel pure-Go kernel (CGO_ENABLED=0 or -tags purego). Backend
// names the one linked in, for start-up logs.
//
// Threading: OpenBLAS runs single-threaded and Sgemm splits each call
// across GOMAXPROCS goroutines itself, so the process has one pool of
// workers, the Go scheduler's. Callers that already run one task per core
// (attention heads) use SgemmSerial. Measured side by side
// (BenchmarkSgemm, 1024×1376×512, 2 cores) the goroutine split ran at
// 120 GFLOP/s against 100 GFLOP/s for OpenBLAS's own two threads, and it
// avoids oversubscription when OpenBLAS is called from several goroutines
// and OpenBLAS threads spinning while Go code runs between calls.
//
// RowDots is the one product not left to the BLAS: X·Wᵀ with every output
// computed by one fixed sequence of vector operations (AVX-512 or AVX2,
// chosen at start-up), so that a row's results do not depend on the rows
// beside it. A serving engine's decode step needs that for seeded samples
// to repeat under any load; OpenBLAS's Haswell kernels compute a row by its
// position among the rows, and no BLAS promises otherwise.
//
// BF16Matrix is a weight matrix packed in bfloat16 for oneDNN's matmul
// kernels (Debian's libdnnl 2.6.3: AMX tiles or AVX512-BF16 dot products,
// float32 accumulation), the products of the bfloat16 decode path. Chosen
// by measurement over OpenBLAS, whose 0.3.21 build in Debian has no
// sbgemm: on 2 cores of an AMX Xeon a 32-row step of Qwen3-0.6B's
// gate-and-up projection takes a quarter of RowDots' float32 time
// (BenchmarkDecodeProducts). Each product runs one column part a
// goroutine, oneDNN on one thread, so that no OpenMP team spins between
// calls.
//
// ExpShifted is math.Exp over a row of logits, eight at a time with
// AVX-512 by the very operations math.Exp performs on amd64, so the same
// bits: the token draw's probabilities, which must not change for a seed.
//
// OpenBLAS 0.3.21 does not recognise recent Xeons (Emerald Rapids, CPU
// model 207) and falls back to its SSE3 "Prescott" kernels, about 6x
// slower; at start-up the package re-selects the AVX-512 (SkylakeX) or
// AVX2 (Haswell) kernels when the CPU has them, unless OPENBLAS_CORETYPE
// is set.
package blas
