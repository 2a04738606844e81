package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// cuBLAS constants (cublas_api.h, library_types.h).
const (
	cublasOpN          = 0
	cublasOpT          = 1
	cudaR32F           = 0
	cudaR16BF          = 14
	cublasCompute32F   = 68
	cublasGemmDefault  = -1
	cublasStatusNotSup = 15
)

// blasAPI holds the cuBLAS functions, bound once per process.
type blasAPI struct {
	path, ltPath string // the libcublas and libcublasLt that were loaded

	cublasCreate        func(h *uintptr) int32
	cublasDestroy       func(h uintptr) int32
	cublasSetStream     func(h uintptr, stream uintptr) int32
	cublasGetVersion    func(h uintptr, v *int32) int32
	cublasSgemm         func(h uintptr, ta, tb int32, m, n, k int32, alpha *float32, a uint64, lda int32, b uint64, ldb int32, beta *float32, c uint64, ldc int32) int32
	cublasGemmEx        func(h uintptr, ta, tb int32, m, n, k int32, alpha unsafe.Pointer, a uint64, aType int32, lda int32, b uint64, bType int32, ldb int32, beta unsafe.Pointer, c uint64, cType int32, ldc int32, compute int32, algo int32) int32
	cublasGetStatusName func(s int32) *byte // nil when the library lacks it
	cublasLtGetVersion  func() uint64
}

var (
	blasOnce sync.Once
	blasLib  *blasAPI
	blasErr  error
)

// loadBLAS loads cuBLASLt and cuBLAS (major 13, else 12), once per process.
// cuBLASLt is loaded first, from the same directory, so that libcublas's
// dependency on it resolves to that copy.
func loadBLAS() (*blasAPI, error) {
	blasOnce.Do(func() {
		var tried []string
		for _, major := range []string{"13", "12"} {
			lt := "libcublasLt.so." + major
			cb := "libcublas.so." + major
			// First the dynamic loader's search, then each directory.
			pairs := [][2]string{{lt, cb}}
			for _, d := range cublasDirs() {
				pairs = append(pairs, [2]string{d + "/" + lt, d + "/" + cb})
			}
			for _, p := range pairs {
				hLt, ltPath, err := openLib(lt, []string{p[0]})
				if err != nil {
					tried = append(tried, p[0])
					continue
				}
				h, path, err := openLib(cb, []string{p[1]})
				if err != nil {
					tried = append(tried, p[1])
					continue
				}
				b := &blasAPI{path: path, ltPath: ltPath}
				blasErr = b.bind(h, hLt)
				if blasErr == nil {
					blasLib = b
				}
				return
			}
		}
		blasErr = fmt.Errorf("cuda: cuBLAS not found (libcublasLt.so.13/12 and libcublas.so.13/12); tried %v; set %s to the directory holding them, for example a Python wheel's site-packages/nvidia/cublas/lib",
			tried, LibPathEnv)
	})
	return blasLib, blasErr
}

func (b *blasAPI) bind(h, hLt uintptr) error {
	for _, f := range []struct {
		fn   any
		name string
	}{
		{&b.cublasCreate, "cublasCreate_v2"},
		{&b.cublasDestroy, "cublasDestroy_v2"},
		{&b.cublasSetStream, "cublasSetStream_v2"},
		{&b.cublasGetVersion, "cublasGetVersion_v2"},
		{&b.cublasSgemm, "cublasSgemm_v2"},
		{&b.cublasGemmEx, "cublasGemmEx"},
	} {
		if err := bind(h, b.path, f.name, f.fn); err != nil {
			return err
		}
	}
	if err := bind(hLt, b.ltPath, "cublasLtGetVersion", &b.cublasLtGetVersion); err != nil {
		return err
	}
	if bind(h, b.path, "cublasGetStatusName", &b.cublasGetStatusName) != nil {
		b.cublasGetStatusName = nil
	}
	return nil
}

// err turns a cublasStatus_t into an *Error (nil for success).
func (b *blasAPI) err(call string, s int32) error {
	if s == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(s), Name: fmt.Sprintf("cublasStatus %d", s)}
	if b.cublasGetStatusName != nil {
		if p := b.cublasGetStatusName(s); p != nil {
			e.Name = goString(p)
		}
	}
	if s == cublasStatusNotSup {
		e.Desc = "the operation or data types are not supported"
	}
	return e
}

// setupBLAS creates the handle on the Device's thread and binds it to the
// Device's stream.
func (dv *Device) setupBLAS(b *blasAPI) error {
	dv.blas = b
	if err := b.err("cublasCreate_v2", b.cublasCreate(&dv.blasH)); err != nil {
		return err
	}
	return b.err("cublasSetStream_v2", b.cublasSetStream(dv.blasH, dv.stream))
}

// BLASInfo reports the cuBLAS in use: the library paths and versions
// (cublasGetVersion: major*10000 + minor*100 + patch for CUDA 12 and 13).
func (dv *Device) BLASInfo() (path, ltPath string, version int, ltVersion uint64, err error) {
	if dv.blas == nil {
		return "", "", 0, 0, fmt.Errorf("cuda: this device was opened without cuBLAS")
	}
	var v int32
	err = dv.do(func() error { return dv.blas.err("cublasGetVersion_v2", dv.blas.cublasGetVersion(dv.blasH, &v)) })
	return dv.blas.path, dv.blas.ltPath, int(v), dv.blas.cublasLtGetVersion(), err
}

// Gemm computes C = alpha*op(A)*op(B) + beta*C on F32 buffers with the
// row-major convention and arguments of learner/blas.Sgemm: op(A) is m×k,
// op(B) k×n, C m×n, and lda, ldb, ldc are row strides as stored. It runs
// cublasSgemm_v2 (full float32, no TF32) on the Device's stream. cuBLAS is
// column-major, and a row-major matrix is its transpose in column-major,
// so C^T = op(B)^T·op(A)^T is computed: B and A swap places, as do m and n.
func (dv *Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a *Buffer, lda int, b *Buffer, ldb int, beta float32, c *Buffer, ldc int) error {
	if err := dv.checkGemm(F32, F32, transA, transB, m, n, k, a, lda, b, ldb, c, ldc); err != nil || m == 0 || n == 0 {
		return err
	}
	return dv.do(func() error {
		return dv.blas.err("cublasSgemm_v2", dv.blas.cublasSgemm(dv.blasH, op(transB), op(transA), int32(n), int32(m), int32(k),
			&alpha, b.ptr, int32(ldb), a.ptr, int32(lda), &beta, c.ptr, int32(ldc)))
	})
}

// GemmBF16 is Gemm with bfloat16 A and B and a float32 or bfloat16 C,
// accumulating in float32 (cublasGemmEx, CUBLAS_COMPUTE_32F). The products
// are exact in float32; the result differs from Gemm on the widened inputs
// only by the order of the float32 additions.
func (dv *Device) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a *Buffer, lda int, b *Buffer, ldb int, beta float32, c *Buffer, ldc int) error {
	ct := F32
	if c != nil && c.dt == BF16 {
		ct = BF16
	}
	if err := dv.checkGemm(BF16, ct, transA, transB, m, n, k, a, lda, b, ldb, c, ldc); err != nil || m == 0 || n == 0 {
		return err
	}
	cType := int32(cudaR32F)
	if ct == BF16 {
		cType = cudaR16BF
	}
	return dv.do(func() error {
		return dv.blas.err("cublasGemmEx", dv.blas.cublasGemmEx(dv.blasH, op(transB), op(transA), int32(n), int32(m), int32(k),
			unsafe.Pointer(&alpha), b.ptr, cudaR16BF, int32(ldb), a.ptr, cudaR16BF, int32(lda),
			unsafe.Pointer(&beta), c.ptr, cType, int32(ldc), cublasCompute32F, cublasGemmDefault))
	})
}

func op(t bool) int32 {
	if t {
		return cublasOpT
	}
	return cublasOpN
}

// checkGemm validates a GEMM's arguments as learner/blas does, returning
// errors instead of panicking since the sizes may come from a device-side
// plan.
func (dv *Device) checkGemm(in, out DType, transA, transB bool, m, n, k int, a *Buffer, lda int, b *Buffer, ldb int, c *Buffer, ldc int) error {
	if dv.blas == nil {
		return fmt.Errorf("cuda: this device was opened without cuBLAS")
	}
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("cuda: gemm: negative size m=%d n=%d k=%d", m, n, k)
	}
	const maxInt32 = 1<<31 - 1
	if m > maxInt32 || n > maxInt32 || k > maxInt32 || lda > maxInt32 || ldb > maxInt32 || ldc > maxInt32 {
		return fmt.Errorf("cuda: gemm: a size or stride exceeds a C int")
	}
	rowsA, colsA := m, k
	if transA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if transB {
		rowsB, colsB = n, k
	}
	for _, x := range []struct {
		name           string
		buf            *Buffer
		dt             DType
		rows, cols, ld int
	}{{"A", a, in, rowsA, colsA, lda}, {"B", b, in, rowsB, colsB, ldb}, {"C", c, out, m, n, ldc}} {
		if err := x.buf.usable(); err != nil {
			return fmt.Errorf("cuda: gemm: %s: %w", x.name, err)
		}
		if x.buf.dev != dv {
			return fmt.Errorf("cuda: gemm: %s belongs to another device", x.name)
		}
		if x.buf.dt != x.dt {
			return fmt.Errorf("cuda: gemm: %s holds %s, want %s", x.name, x.buf.dt, x.dt)
		}
		if x.ld < max(x.cols, 1) {
			return fmt.Errorf("cuda: gemm: ld%s=%d is below the %d columns of %s", x.name, x.ld, x.cols, x.name)
		}
		if x.rows > 0 && x.cols > 0 && (x.rows-1)*x.ld+x.cols > x.buf.n {
			return fmt.Errorf("cuda: gemm: %s has %d elements, needs %d (%d×%d, ld %d)", x.name, x.buf.n, (x.rows-1)*x.ld+x.cols, x.rows, x.cols, x.ld)
		}
	}
	return nil
}
