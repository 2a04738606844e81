//go:build cgo && !purego

package blas

/*
#cgo LDFLAGS: -ldnnl -lgomp
#include <stdlib.h>
#include "bf16gemm.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// BF16Matrix is a weight matrix W [O][I] held in bfloat16, packed once in
// the layout oneDNN's matmul kernels read, for products X·Wᵀ of bfloat16
// rows X with float32 results (the kernels accumulate in float32). Its
// columns are cut into as many parts as the process has cores, packed
// apart, so that a product runs one part a goroutine with oneDNN on one
// thread: the process keeps one pool of workers, the Go scheduler's (see
// the package doc), and no OpenMP threads spin between calls.
//
// On a CPU without bfloat16 instructions (BF16Available false) but with
// AVX2 and FMA or AVX-512 (RowDotsAvailable), the matrix keeps W's rows as
// given and Mul multiplies through RowDotsBF16 instead, each weight
// widened exactly to float32 as it is loaded: the same products (a
// bfloat16 times a bfloat16 is exact in float32), accumulated in float32 in
// RowDots' fixed order, reading the same bytes of weights.
type BF16Matrix struct {
	O, I  int
	parts []bf16Part
	rows  []uint16 // W's rows, where the products run by RowDotsBF16
}

type bf16Part struct {
	o0, n  int
	p      *C.bf16_packed
	layout int // index into bf16Layouts: parts packed alike share primitives
}

// bf16Bufs hold the results of one part's rows before they go to their
// columns of the output.
var bf16Bufs = sync.Pool{New: func() any { return new([]float32) }}

// bf16Rows hold the last rows of a product padded with zero rows.
var bf16Rows = sync.Pool{New: func() any { return new([]uint16) }}

// bf16PartElems is the fewest weights (1M, 2 MiB in bfloat16) a column
// part of a BF16Matrix holds: at Qwen3-0.6B's width the projections are 2
// to 6M and go in one part a core, a tiny model's in one part.
const bf16PartElems = 1 << 20

var bf16Cache struct {
	sync.Mutex
	layouts []*C.bf16_packed // each layout seen (bf16_layout copies), never freed
	prims   map[bf16Key]*C.bf16_prim
}

type bf16Key struct{ layout, n int }

// PackBF16 packs W [O][I], given as bfloat16 values (the high halves of
// float32 values, as RoundBF16 writes them), for BF16Matrix.Mul. It fails
// where BF16Available is false.
//
// Without native bfloat16 products the matrix keeps w itself (the caller
// must not change it afterwards) for RowDotsBF16; it fails where neither
// runs (BF16MatrixAvailable).
func PackBF16(w []uint16, O, I int) (*BF16Matrix, error) {
	if !BF16MatrixAvailable() {
		return nil, errors.New("blas: bfloat16 products need oneDNN with AMX or AVX512-BF16 kernels, or AVX2 and FMA for aipo's own, which this CPU lacks (" + BF16Kernel() + ")")
	}
	if O <= 0 || I <= 0 || len(w) < O*I {
		return nil, fmt.Errorf("blas: PackBF16 of %d values as %d x %d", len(w), O, I)
	}
	if !BF16Available() {
		return &BF16Matrix{O: O, I: I, rows: w[: O*I : O*I]}, nil
	}
	m := &BF16Matrix{O: O, I: I}
	// A matrix smaller than bf16PartElems a core is one part: waking a
	// goroutine on another core costs more than such a product.
	nparts := max(1, min(runtime.GOMAXPROCS(0), O/64, O*I/bf16PartElems))
	// Parts a multiple of 64 columns wide (oneDNN's widest column block),
	// the last taking the rest.
	step := (O/nparts + 63) / 64 * 64
	for o0 := 0; o0 < O; o0 += step {
		n := min(step, O-o0)
		p, err := packPart(w[o0*I:(o0+n)*I], n, I)
		if err != nil {
			m.free()
			return nil, err
		}
		m.parts = append(m.parts, bf16Part{o0: o0, n: n, p: p, layout: layoutOf(p)})
	}
	ps := make([]*C.bf16_packed, len(m.parts))
	for i := range m.parts {
		ps[i] = m.parts[i].p
	}
	runtime.AddCleanup(m, func(ps []*C.bf16_packed) {
		for _, p := range ps {
			C.bf16_free(p)
		}
	}, ps)
	return m, nil
}

func packPart(w []uint16, n, k int) (*C.bf16_packed, error) {
	var errBuf [256]C.char
	p := C.bf16_pack((*C.uint16_t)(unsafe.Pointer(&w[0])), C.int(n), C.int(k), &errBuf[0], C.int(len(errBuf)))
	if p == nil {
		return nil, fmt.Errorf("blas: packing a %d x %d bfloat16 matrix: %s", n, k, C.GoString(&errBuf[0]))
	}
	return p, nil
}

func (m *BF16Matrix) free() {
	for _, pt := range m.parts {
		C.bf16_free(pt.p)
	}
	m.parts = nil
}

// layoutOf is the index of p's layout in the cache, adding it when new.
func layoutOf(p *C.bf16_packed) int {
	bf16Cache.Lock()
	defer bf16Cache.Unlock()
	for i, q := range bf16Cache.layouts {
		if C.bf16_same_layout(p, q) != 0 {
			return i
		}
	}
	// A copy of the layout alone, which outlives p (the primitives made
	// for it serve every matrix packed alike).
	bf16Cache.layouts = append(bf16Cache.layouts, C.bf16_layout(p))
	return len(bf16Cache.layouts) - 1
}

// prim is the primitive for bf16RowBlock rows of layout l, n columns
// wide, written in rows of their own width.
func prim(l, n int) (*C.bf16_prim, error) {
	bf16Cache.Lock()
	defer bf16Cache.Unlock()
	k := bf16Key{l, n}
	if q := bf16Cache.prims[k]; q != nil {
		return q, nil
	}
	var errBuf [256]C.char
	q := C.bf16_prim_new(bf16Cache.layouts[l], C.int(bf16RowBlock), C.int(n), &errBuf[0], C.int(len(errBuf)))
	if q == nil {
		return nil, fmt.Errorf("blas: a bfloat16 product of %d rows: %s", bf16RowBlock, C.GoString(&errBuf[0]))
	}
	if bf16Cache.prims == nil {
		bf16Cache.prims = map[bf16Key]*C.bf16_prim{}
	}
	bf16Cache.prims[k] = q
	return q, nil
}

// Mul computes out[r*ldo+j] = Σ_l x[r*I+l]·W[j][l] for the n rows of the
// bfloat16 x, j < O, accumulating in float32. The rows go through oneDNN
// in blocks of bf16RowBlock, the last padded with zero rows: oneDNN's
// kernels choose how to cut the sum over l by the number of rows (its AMX
// kernels add in another order for 1 row than for 2 at some widths), and
// compute a row alike at every position of a block, so that a row's
// results are the same bits whatever n is and wherever the row sits
// (TestBF16MulIsBatchInvariant). A block of 32 rows costs about what one
// row does on AMX, whose cost a step is reading the weights.
func (m *BF16Matrix) Mul(out []float32, ldo int, x []uint16, n int) error {
	if n == 0 {
		return nil
	}
	if ldo < m.O || len(x) < n*m.I || len(out) < (n-1)*ldo+m.O {
		return fmt.Errorf("blas: BF16Matrix.Mul of %d rows: %d inputs for width %d, %d outputs with stride %d for %d columns", n, len(x), m.I, len(out), ldo, m.O)
	}
	if m.rows != nil {
		m.mulRows(out, ldo, x, n)
		return nil
	}
	run := func(pt bf16Part) error {
		q, err := prim(pt.layout, pt.n)
		if err != nil {
			return err
		}
		// oneDNN's fast kernels write whole rows of the part's own width,
		// and every product has bf16RowBlock rows: a part narrower than the
		// output, or the last rows of a product, go through buffers (the
		// rows padded with zeros).
		var xb []uint16
		var ob []float32
		if n%bf16RowBlock != 0 {
			buf := bf16Rows.Get().(*[]uint16)
			defer bf16Rows.Put(buf)
			if need := bf16RowBlock * m.I; cap(*buf) < need {
				*buf = make([]uint16, need)
			}
			xb = (*buf)[:bf16RowBlock*m.I]
		}
		for r0 := 0; r0 < n; r0 += bf16RowBlock {
			rows := min(bf16RowBlock, n-r0)
			src, dst := x[r0*m.I:], out[r0*ldo+pt.o0:]
			if rows < bf16RowBlock {
				copy(xb, x[r0*m.I:(r0+rows)*m.I])
				clear(xb[rows*m.I:])
				src = xb
			}
			direct := pt.n == ldo && rows == bf16RowBlock
			if !direct {
				if ob == nil {
					buf := bf16Bufs.Get().(*[]float32)
					defer bf16Bufs.Put(buf)
					if need := bf16RowBlock * pt.n; cap(*buf) < need {
						*buf = make([]float32, need)
					}
					ob = (*buf)[:bf16RowBlock*pt.n]
				}
				dst = ob
			}
			if s := C.bf16_run(q, pt.p, (*C.uint16_t)(unsafe.Pointer(&src[0])), (*C.float)(&dst[0])); s != 0 {
				return fmt.Errorf("blas: a bfloat16 product of %d rows: oneDNN status %d", rows, int(s))
			}
			if !direct {
				for r := range rows {
					copy(out[(r0+r)*ldo+pt.o0:(r0+r)*ldo+pt.o0+pt.n], ob[r*pt.n:(r+1)*pt.n])
				}
			}
		}
		return nil
	}
	if len(m.parts) == 1 {
		return run(m.parts[0])
	}
	errs := make([]error, len(m.parts))
	var wg sync.WaitGroup
	for i := 1; i < len(m.parts); i++ {
		wg.Go(func() { errs[i] = run(m.parts[i]) })
	}
	errs[0] = run(m.parts[0])
	wg.Wait()
	return errors.Join(errs...)
}

// bf16Wide holds the rows of a product widened to float32 (mulRows).
var bf16Wide = sync.Pool{New: func() any { return new([]float32) }}

// mulRows is Mul by RowDotsBF16: x's rows widened (exactly) once, the
// columns cut into as many slices as the process has cores, each a
// multiple of 12 columns (whole tiles of RowDots' widths: 6 and 4 with
// AVX-512, 3 and 4 with AVX2), one goroutine a slice. Every output is computed by the same operations in
// any slice and beside any rows, so a row's results do not depend on n or
// on its position.
func (m *BF16Matrix) mulRows(out []float32, ldo int, x []uint16, n int) {
	buf := bf16Wide.Get().(*[]float32)
	defer bf16Wide.Put(buf)
	need := n * m.I
	if cap(*buf) < need {
		*buf = make([]float32, need)
	}
	xw := (*buf)[:need]
	for i, h := range x[:need] {
		xw[i] = widenBF16(h)
	}
	const tile = 12
	parts := max(1, min(runtime.GOMAXPROCS(0), m.O/tile, m.O*m.I/bf16PartElems))
	step := (m.O/parts + tile - 1) / tile * tile
	run := func(o0 int) {
		o1 := min(o0+step, m.O)
		RowDotsBF16(n, o1-o0, m.I, xw, m.I, m.rows[o0*m.I:], m.I, out[o0:], ldo)
	}
	var wg sync.WaitGroup
	for o0 := step; o0 < m.O; o0 += step {
		wg.Go(func() { run(o0) })
	}
	run(0)
	wg.Wait()
}

// RoundBF16 writes the bfloat16 nearest each value of src to dst (ties to
// even), as PyTorch's .to(torch.bfloat16) rounds.
func RoundBF16(dst []uint16, src []float32) {
	if len(dst) < len(src) {
		panic("blas: RoundBF16 destination shorter than its source")
	}
	if len(src) == 0 {
		return
	}
	C.bf16_round((*C.uint16_t)(unsafe.Pointer(&dst[0])), (*C.float)(&src[0]), C.long(len(src)))
}

// bf16Probe packs a small matrix and makes one product's primitive, once:
// the kernel oneDNN picks says whether the CPU runs bfloat16 natively.
var bf16Probe = sync.OnceValues(func() (string, error) {
	var v [32]C.char
	C.bf16_version(&v[0], C.int(len(v)))
	version := "oneDNN " + C.GoString(&v[0])
	w := make([]uint16, 64*64)
	p, err := packPart(w, 64, 64)
	if err != nil {
		return version, err
	}
	defer C.bf16_free(p)
	var errBuf [256]C.char
	q := C.bf16_prim_new(p, bf16RowBlock, 64, &errBuf[0], C.int(len(errBuf)))
	if q == nil {
		return version, errors.New(C.GoString(&errBuf[0]))
	}
	defer C.bf16_prim_free(q)
	return version + " " + C.GoString(C.bf16_impl(q)), nil
})

// BF16Available reports whether bfloat16 products run natively here: a
// cgo build with oneDNN, whose kernel for them uses AMX or AVX512-BF16.
func BF16Available() bool {
	k, err := bf16Probe()
	return err == nil && (strings.Contains(k, "amx_bf16") || strings.Contains(k, "avx512_core_bf16"))
}

// BF16MatrixAvailable reports whether BF16Matrix products run here:
// natively (BF16Available), or by RowDotsBF16 on a CPU with AVX2 and FMA
// or AVX-512 but no bfloat16 instructions.
func BF16MatrixAvailable() bool { return BF16Available() || RowDotsAvailable() }

// BF16MatrixKernel names what multiplies a BF16Matrix here, for start-up
// logs: oneDNN's kernel, or RowDotsBF16 at its vector width with the
// reason oneDNN's is not used.
func BF16MatrixKernel() string {
	if BF16Available() || !RowDotsAvailable() {
		return BF16Kernel()
	}
	return "aipo's " + RowDotsKernel() + " products of bfloat16 weights widened to float32 (" + BF16Kernel() + ": no AMX or AVX512-BF16 kernel)"
}

// BF16Kernel names oneDNN's version and the kernel of bfloat16 products
// (or why there is none), for start-up logs.
func BF16Kernel() string {
	k, err := bf16Probe()
	if err != nil {
		return k + ": " + err.Error()
	}
	return k
}
