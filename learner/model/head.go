package model

import (
	"math"

	"github.com/aipo-rl/aipo/learner/blas"
)

// The language-model head: logits[M,V] = xh[M,C] · head[V,C]^T over the M
// rows that have a target (xh gathers those rows of the final norm's
// output), then a log-softmax read at the target. When M×V fits in
// keepLogitsFloats the forward pass keeps the probabilities for the
// backward pass; otherwise logits exist only one tile at a time (at most
// chunkFloats) and the backward pass recomputes them, so a 151k vocabulary
// never needs M×V floats.
//
// A tile is R rows by a slice of Vs columns of the vocabulary. The slices
// are as wide as the budget allows with all M rows in one tile: each
// product then multiplies every row with a slice of the head that is packed
// once a pass, where tiles of whole rows (a few hundred rows, the whole
// vocabulary) packed the whole head again for every tile, at a cost beside
// the arithmetic of a few hundred rows. A row's log-sum-exp and entropy are
// its slices' shifted sums, combined in float64 in slice order; with one
// slice they are logSoftmax's, bit for bit. The tiling depends on M and V
// alone, never on the number of threads.

// keepLogitsFloats bounds the probabilities kept for backward (64 MiB); a
// variable so that tests can force the chunked head.
var keepLogitsFloats = 1 << 24

// chunkFloats bounds the logits that exist at once when they are not kept
// (16 MiB); a variable so that tests can force many tiles.
var chunkFloats = 1 << 22

// minSliceCols is the narrowest vocabulary slice of a tile (for M so large
// that chunkFloats/M is narrower, tiles take fewer rows instead): below it
// a product's columns are too few to run at the GEMM's full rate. A
// variable so that tests can force many slices.
var minSliceCols = 1024

// headMode says what the forward pass leaves in headActs.logits.
type headMode int

const (
	headAuto   headMode = iota // probabilities when they fit, else nothing
	headChunk                  // nothing: the backward pass recomputes
	headLogits                 // raw logits of every row, for Logits
)

type headActs struct {
	xh     []float32 // [M, C]
	lse    []float32 // [M]
	logits []float32 // [M, V]: probabilities (headAuto) or logits (headLogits); nil when chunked
	probs  bool
}

func (h headActs) floats() int { return len(h.xh) + len(h.lse) + len(h.logits) }

// keepsLogits says whether the forward pass of a head of M rows and a
// vocabulary of V keeps the rows' probabilities for the backward pass
// (headAuto); otherwise both passes make the logits a tile at a time.
func keepsLogits(M, V int) bool { return M*V <= keepLogitsFloats }

// headTile is the rows and vocabulary columns of logits that a head of M
// rows and a vocabulary of V makes at once: all of them (whole), or a tile
// of at most chunkFloats (or of one row by minSliceCols, when even that
// is more). Slices narrower than the vocabulary are multiples of
// sliceAlign, the widths whose products the bfloat16-held head computes
// bit for bit as the float32 head's.
func headTile(M, V int, whole bool) (rows, cols int) {
	M = max(M, 1)
	if whole || M*V <= chunkFloats {
		return M, V
	}
	cols = chunkFloats / M / sliceAlign * sliceAlign
	cols = min(V, max(cols, minSliceCols, sliceAlign))
	return min(M, max(1, chunkFloats/cols)), cols
}

// headTileFloats is the floats of headTile's tile.
func headTileFloats(M, V int, whole bool) int {
	r, c := headTile(M, V, whole)
	return r * c
}

// headLogitsTile writes lg[n,cols] = xh[n,C] · head[v0:v0+cols, C]^T.
func (m *Model) headLogitsTile(lg, xh []float32, n, v0, cols int, mem *arena) {
	C := m.d.C
	if nw := m.narrow; nw != nil {
		narrowMatmul(lg, xh, nw.head[v0*C:], n, C, cols, mem)
		return
	}
	blas.Sgemm(false, true, n, cols, C, 1, xh, C, m.w.head[v0*C:], C, 0, lg, cols)
}

// headForward fills a.LogProbs, a.Entropy and a.head.
func (m *Model) headForward(a *Activations, mode headMode) {
	d, p := m.d, a.b
	M := len(p.rows)
	xh := a.mem.get(M * d.C)
	parallelFor(M, 256, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(p.rows[r])
			copy(xh[r*d.C:(r+1)*d.C], a.lnf[t*d.C:])
		}
	})
	// The rows are gathered: the final norm's output is not read again.
	a.mem.put(a.lnf)
	a.lnf = nil
	a.head = headActs{xh: xh, lse: a.mem.get(M)}
	if mode == headAuto && !keepsLogits(M, d.V) {
		mode = headChunk
	}
	if mode != headChunk {
		lg := a.mem.get(M * d.V)
		a.head.logits, a.head.probs = lg, mode == headAuto
		m.headLogitsTile(lg, xh, M, 0, d.V, &a.mem)
		parallelFor(M, 8, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				t := int(p.rows[r])
				lse, logp, ent, ok := headRowForward(lg[r*d.V:(r+1)*d.V], p.targets[t], mode == headAuto)
				a.head.lse[r] = lse
				if ok {
					a.LogProbs[t], a.Entropy[t] = logp, ent
				}
			}
		})
		return
	}
	m.headForwardTiled(a, xh)
}

// headForwardTiled is headForward's chunked pass: each tile's rows get
// their slice's shifted sums and, where the slice holds it, the target's
// logit; each row's sums are combined once its last slice is done.
func (m *Model) headForwardTiled(a *Activations, xh []float32) {
	d, p := m.d, a.b
	M := len(p.rows)
	R, cols := headTile(M, d.V, false)
	slices := (d.V + cols - 1) / cols
	buf := a.mem.get(R * cols)
	sums := make([]shiftedSums, R*slices)
	target := make([]float32, R)
	for r0 := 0; r0 < M; r0 += R {
		n := min(R, M-r0)
		for s := range slices {
			v0 := s * cols
			w := min(cols, d.V-v0)
			lg := buf[:n*w]
			m.headLogitsTile(lg, xh[r0*d.C:], n, v0, w, &a.mem)
			parallelFor(n, 8, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					row := lg[i*w : (i+1)*w]
					sums[i*slices+s] = sumsOf(row, false)
					if j := int(p.targets[p.rows[r0+i]]) - v0; j >= 0 && j < w {
						target[i] = row[j]
					}
				}
			})
		}
		parallelFor(n, 64, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				r := r0 + i
				t := int(p.rows[r])
				lse, ent := combineSums(sums[i*slices : (i+1)*slices])
				a.head.lse[r] = lse
				if p.targets[t] >= 0 {
					a.LogProbs[t], a.Entropy[t] = target[i]-lse, ent
				}
			}
		})
	}
	a.mem.put(buf) // the backward pass recomputes its tiles in a buffer of its own
}

// headRowForward reduces one row of logits: its lse and, when the target
// is not negative (ok), the target's log-probability and the entropy. With
// toProbs the row becomes softmax(row).
func headRowForward(row []float32, tgt int32, toProbs bool) (lse, logp, ent float32, ok bool) {
	var target float32
	if tgt >= 0 {
		target = row[tgt]
	}
	lse, ent = logSoftmax(row, toProbs)
	if tgt < 0 {
		return lse, 0, 0, false
	}
	return lse, target - lse, ent, true
}

// headRowBackward turns one row, or the slice of it from column v0, into
// d loss / d logits = g*(onehot(tgt) - softmax): the slice holds the
// probabilities (probs) or the logits, whose softmax is exp(row - lse); a
// row without a target becomes zero.
func headRowBackward(row []float32, v0 int, tgt int32, g, lse float32, probs bool) {
	if tgt < 0 {
		clear(row)
		return
	}
	if !probs {
		expShift(row, row, lse)
	}
	ng := -g
	for j := scaleVector(row, ng); j < len(row); j++ {
		row[j] *= ng
	}
	if j := int(tgt) - v0; j >= 0 && j < len(row) {
		row[j] += g
	}
}

// shiftedSums are what a row's log-softmax needs of a slice x of it:
// mx = max(x), s = sum exp(x-mx) and sx = sum exp(x-mx)*(x-mx).
type shiftedSums struct {
	mx    float32
	s, sx float64
}

// sumsOf returns x's shiftedSums; with toProbs it overwrites x with
// exp(x-mx). It evaluates exp once per element: float32 sums over blocks
// of 256, float64 across blocks, accurate for a 151k vocabulary without a
// float64 conversion per element.
func sumsOf(x []float32, toProbs bool) shiftedSums {
	mx := maxOf(x)
	var s, sx float64
	for b0 := 0; b0 < len(x); b0 += 256 {
		blk := x[b0:min(b0+256, len(x))]
		var es [256]float32
		e := es[:len(blk)]
		expShift(e, blk, mx)
		bs, bsx := sumDotShift(e, blk, mx)
		if toProbs {
			copy(blk, e)
		}
		s += float64(bs)
		sx += float64(bsx)
	}
	return shiftedSums{mx, s, sx}
}

// combineSums returns the log-sum-exp and the entropy of a row from its
// slices' sums, in slice order: each slice's sums shifted to the row's
// maximum (for one slice, exactly logSoftmax's arithmetic).
func combineSums(parts []shiftedSums) (lse, entropy float32) {
	mx := parts[0].mx
	for _, q := range parts[1:] {
		mx = max(mx, q.mx)
	}
	var s, sx float64
	for _, q := range parts {
		sh := float64(q.mx - mx)
		f := math.Exp(sh)
		s += f * q.s
		sx += f * (q.sx + sh*q.s)
	}
	l := math.Log(s)
	return mx + float32(l), float32(l - sx/s)
}

// logSoftmax returns log sum exp(x) and the entropy of softmax(x),
// -sum p log p = lse - sum p*x; with toProbs it overwrites x with softmax(x).
func logSoftmax(x []float32, toProbs bool) (lse, entropy float32) {
	q := sumsOf(x, toProbs)
	if toProbs {
		inv := float32(1 / q.s)
		for j := scaleVector(x, inv); j < len(x); j++ {
			x[j] *= inv
		}
	}
	return combineSums([]shiftedSums{q})
}

// headBackward turns gradLogProb[N] into dlogits = g*(onehot(target) -
// softmax) a tile at a time (the whole when the forward pass kept them),
// adds dlogits^T·xh to the head's gradient and returns the gradient of the
// final norm's output, dlnf[N,C], allocated from tmp. dxh sums the
// slices' products in slice order.
func (m *Model) headBackward(a *Activations, gradLogProb []float32, tmp *arena) []float32 {
	d, p := m.d, a.b
	M := len(p.rows)
	xh := a.head.xh
	whole := a.head.logits != nil
	R, cols := headTile(M, d.V, whole)
	dxh := tmp.get(M * d.C)
	buf := a.head.logits
	if !whole {
		buf = tmp.get(R * cols)
	}
	probs := a.head.probs
	for r0 := 0; r0 < M; r0 += R {
		n := min(R, M-r0)
		for v0 := 0; v0 < d.V; v0 += cols {
			w := min(cols, d.V-v0)
			lg := buf[:n*w]
			if !whole {
				m.headLogitsTile(lg, xh[r0*d.C:], n, v0, w, tmp)
			}
			parallelFor(n, 8, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					r := r0 + i
					t := int(p.rows[r])
					headRowBackward(lg[i*w:(i+1)*w], v0, p.targets[t], gradLogProb[t], a.head.lse[r], probs)
				}
			})
			var beta float32
			if v0 > 0 {
				beta = 1
			}
			// The input and weight gradients' products are of equal
			// work: each on its own core.
			blas.SgemmPair(
				blas.Gemm{M: n, N: d.C, K: w, Alpha: 1, A: lg, Lda: w, B: m.w.head[v0*d.C:], Ldb: d.C, Beta: beta, C: dxh[r0*d.C:], Ldc: d.C},
				blas.Gemm{TransA: true, M: w, N: d.C, K: n, Alpha: 1, A: lg, Lda: w, B: xh[r0*d.C:], Ldb: d.C, Beta: 1, C: m.gradsNow().head[v0*d.C:], Ldc: d.C})
		}
	}
	if !whole {
		tmp.put(buf)
	}
	dlnf := tmp.zeroed(len(p.tokens) * d.C)
	parallelFor(M, 256, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(p.rows[r])
			copy(dlnf[t*d.C:(t+1)*d.C], dxh[r*d.C:])
		}
	})
	tmp.put(dxh)
	return dlnf
}
