//go:build !cgo || purego

package blas

import (
	"fmt"
	"runtime"
	"sync"
)

// Backend names the matrix multiply linked into this binary.
func Backend() string {
	return fmt.Sprintf("pure-go, %d goroutines", runtime.GOMAXPROCS(0))
}

// Block sizes of the Go kernel: a kc×nc panel of op(B) (128 KiB) is packed
// row-major so that the inner loops stream it from L2.
const (
	kc = 128
	nc = 256
)

var panelPool = sync.Pool{New: func() any { s := make([]float32, kc*nc); return &s }}

// sgemm is the pure-Go kernel: C = beta*C, then for each panel of op(B)
// pairs of rows of C accumulate alpha*A(i,p)*B(p,:) four p at a time.
func sgemm(transA, transB bool, m, n, k int, alpha float32, aa []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	scaleC(m, n, beta, c, ldc)
	if k == 0 || alpha == 0 {
		return
	}
	pp := panelPool.Get().(*[]float32)
	defer panelPool.Put(pp)
	panel := *pp
	for j0 := 0; j0 < n; j0 += nc {
		nb := min(nc, n-j0)
		for p0 := 0; p0 < k; p0 += kc {
			kb := min(kc, k-p0)
			packB(transB, b, ldb, p0, j0, kb, nb, panel)
			i := 0
			for ; i+2 <= m; i += 2 {
				c0 := c[i*ldc+j0 : i*ldc+j0+nb]
				c1 := c[(i+1)*ldc+j0 : (i+1)*ldc+j0+nb]
				p := 0
				for ; p+4 <= kb; p += 4 {
					var a [8]float32
					for q := 0; q < 4; q++ {
						a[q] = alpha * elemA(transA, aa, lda, i, p0+p+q)
						a[4+q] = alpha * elemA(transA, aa, lda, i+1, p0+p+q)
					}
					axpy4x2(c0, c1, &a, panel[p*nb:(p+4)*nb], nb)
				}
				for ; p < kb; p++ {
					x0 := alpha * elemA(transA, aa, lda, i, p0+p)
					x1 := alpha * elemA(transA, aa, lda, i+1, p0+p)
					brow := panel[p*nb : (p+1)*nb]
					for j, v := range brow {
						c0[j] += x0 * v
						c1[j] += x1 * v
					}
				}
			}
			for ; i < m; i++ {
				crow := c[i*ldc+j0 : i*ldc+j0+nb]
				p := 0
				for ; p+4 <= kb; p += 4 {
					a0 := alpha * elemA(transA, aa, lda, i, p0+p)
					a1 := alpha * elemA(transA, aa, lda, i, p0+p+1)
					a2 := alpha * elemA(transA, aa, lda, i, p0+p+2)
					a3 := alpha * elemA(transA, aa, lda, i, p0+p+3)
					axpy4(crow, a0, a1, a2, a3, panel[p*nb:(p+4)*nb], nb)
				}
				for ; p < kb; p++ {
					a0 := alpha * elemA(transA, aa, lda, i, p0+p)
					brow := panel[p*nb : (p+1)*nb]
					for j, v := range brow {
						crow[j] += a0 * v
					}
				}
			}
		}
	}
}

func elemA(transA bool, a []float32, lda, i, p int) float32 {
	if transA {
		return a[p*lda+i]
	}
	return a[i*lda+p]
}

// packB copies rows p0..p0+kb and columns j0..j0+nb of op(B) into panel,
// row-major with stride nb.
func packB(transB bool, b []float32, ldb, p0, j0, kb, nb int, panel []float32) {
	for p := 0; p < kb; p++ {
		dst := panel[p*nb : (p+1)*nb]
		if !transB {
			copy(dst, b[(p0+p)*ldb+j0:])
			continue
		}
		for j := range dst {
			dst[j] = b[(j0+j)*ldb+p0+p]
		}
	}
}

// axpy4 is c[j] += a0*b[j] + a1*b[nb+j] + a2*b[2nb+j] + a3*b[3nb+j]: one
// load and store of c per four multiply-adds.
func axpy4(c []float32, a0, a1, a2, a3 float32, b []float32, nb int) {
	b0 := b[:nb]
	b1 := b[nb : 2*nb]
	b2 := b[2*nb : 3*nb]
	b3 := b[3*nb : 4*nb]
	c = c[:nb]
	for j := range c {
		c[j] += a0*b0[j] + a1*b1[j] + a2*b2[j] + a3*b3[j]
	}
}

// axpy4x2 is axpy4 for two rows of C at once (a[0:4] for c0, a[4:8] for
// c1), so each loaded value of B feeds two multiply-adds.
func axpy4x2(c0, c1 []float32, a *[8]float32, b []float32, nb int) {
	b0 := b[:nb]
	b1 := b[nb : 2*nb]
	b2 := b[2*nb : 3*nb]
	b3 := b[3*nb : 4*nb]
	c0 = c0[:nb]
	c1 = c1[:nb]
	a0, a1, a2, a3, a4, a5, a6, a7 := a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
	for j := range c0 {
		x0, x1, x2, x3 := b0[j], b1[j], b2[j], b3[j]
		c0[j] += a0*x0 + a1*x1 + a2*x2 + a3*x3
		c1[j] += a4*x0 + a5*x1 + a6*x2 + a7*x3
	}
}

// setLibraryThreads exists for the benchmarks shared with the OpenBLAS
// build; the Go kernel has no threads of its own.
func setLibraryThreads(int) {}
