package model

import (
	"math"

	"github.com/aipo-rl/aipo/learner/blas"
)

// The language-model head: logits[M,V] = xh[M,C] · head[V,C]^T over the M
// rows that have a target (xh gathers those rows of the final norm's
// output), then a log-softmax read at the target. The logits are made a
// tile at a time: all of them when M×V fits chunkFloats, else all M rows
// by a slice of the vocabulary (fewer rows when M is so large that the
// slice would be narrower than minSliceCols). Each product then multiplies
// every row with a slice of the head that is packed once a pass, where
// tiles of a few rows by the whole vocabulary had the BLAS pack the whole
// head again for every tile. A row's log-sum-exp and entropy are its
// slices' shifted sums, combined in float64 in slice order (for one slice,
// logSoftmax's arithmetic bit for bit). The tiling depends on M and V
// alone, never on the number of threads or on what the pass keeps, so
// that Forward, Score and checkpointed passes give the same bits.
//
// A pass to be differentiated keeps, for the leading tiles that fit
// keepLogitsFloats together (all of them at the 1,024 rows of a
// 32,000-token vocabulary), the exponentials its sums took, exp(logit -
// the slice's maximum); its backward pass makes the others again from
// recomputed logits, the same values, and turns each into the softmax with
// one multiply by exp(maximum - lse). With activation checkpointing on it
// keeps none, as its layers keep only their inputs. So a 151k vocabulary
// never needs M×V floats, and whether a tile was kept changes no bit.

// keepLogitsFloats bounds the logits that a pass to be differentiated
// keeps for its backward pass (128 MiB: the 1,024 rows of a 32,000-token
// vocabulary); a variable so that tests can force recomputed tiles.
var keepLogitsFloats = 1 << 25

// chunkFloats bounds a tile of logits (16 MiB); a variable so that tests
// can force many tiles.
var chunkFloats = 1 << 22

// minSliceCols is the narrowest vocabulary slice of a tile (for M so large
// that chunkFloats/M is narrower, tiles take fewer rows instead): below it
// a product's columns are too few to run at the GEMM's full rate. A
// variable so that tests can force many slices.
var minSliceCols = 1024

// headMode says what the forward pass of the head keeps.
type headMode int

const (
	headAuto   headMode = iota // the leading tiles' logits when the pass keeps everything (keepAll)
	headChunk                  // nothing: the backward pass recomputes every tile
	headLogits                 // raw logits of every row, for Logits
)

type headActs struct {
	xh     []float32 // [M, C]
	lse    []float32 // [M]
	logits []float32 // headLogits: [M, V]
	kept   []float32 // the kept tiles' exp(logit - shift) (headTiles), each tile's [n, w] block at its offset
	shift  []float32 // [M, slices]: each row's maximum logit in each slice
	budget int       // the floats the forward pass could keep (headTiles' budget)
}

func (h headActs) floats() int {
	return len(h.xh) + len(h.lse) + len(h.logits) + len(h.kept) + len(h.shift)
}

// keepBudget is the logits a pass in mode that keeps keep holds for its
// backward pass.
func keepBudget(mode headMode, keep keepMode) int {
	if mode == headAuto && keep == keepAll {
		return keepLogitsFloats
	}
	return 0
}

// headTile is the rows and vocabulary columns of a tile of the head of M
// rows and a vocabulary of V: all of them when M×V fits chunkFloats, else
// a tile of at most chunkFloats (or of one row by minSliceCols, when even
// that is more). Slices narrower than the vocabulary are multiples of
// sliceAlign, the widths whose products the bfloat16-held head computes
// bit for bit as the float32 head's. slices is the number of the
// vocabulary's slices (headSlices): cols columns each, never crossing a
// vocabulary block of blockRows rows, each block's last one narrower.
func headTile(M, V, blockRows int) (rows, cols, slices int) {
	M = max(M, 1)
	if M*V <= chunkFloats {
		rows, cols = M, V
	} else {
		cols = chunkFloats / M / sliceAlign * sliceAlign
		cols = min(V, max(cols, minSliceCols, sliceAlign))
		rows = min(M, max(1, chunkFloats/cols))
	}
	return rows, cols, len(headSlices(V, cols, blockRows))
}

// vslice is the vocabulary columns [v0, v0+w) of a slice.
type vslice struct{ v0, w int }

// headSlices cuts a vocabulary of V into slices of cols columns inside
// each block of blockRows rows (vocabBlockRows): a pass that reads one
// block at a time (a sharded model's) computes every slice from one
// block's weights, and every model of the configuration slices alike.
func headSlices(V, cols, blockRows int) []vslice {
	var out []vslice
	for b0 := 0; b0 < V; b0 += blockRows {
		end := min(V, b0+blockRows)
		for v0 := b0; v0 < end; v0 += cols {
			out = append(out, vslice{v0, min(cols, end-v0)})
		}
	}
	return out
}

// tileAt is one tile of the head: rows [r0, r0+n) by vocabulary columns
// [v0, v0+w), slice s of block b, its logits kept at off in
// headActs.kept, or recomputed by the backward pass when off is -1.
type tileAt struct{ r0, n, v0, w, s, b, off int }

// headTiles lists the tiles of the head of M rows and a vocabulary of V in
// the order every pass visits them (each slice's row chunks in turn, the
// slices in vocabulary order, so a block's tiles come together), the
// leading ones kept while they fit budget floats together: kept is their
// floats, recompute whether any tile is left to recompute.
func headTiles(M, V, blockRows, budget int) (tiles []tileAt, kept int, recompute bool) {
	R, cols, _ := headTile(M, V, blockRows)
	for s, sl := range headSlices(V, cols, blockRows) {
		for r0 := 0; r0 < M; r0 += R {
			t := tileAt{r0, min(R, M-r0), sl.v0, sl.w, s, sl.v0 / blockRows, -1}
			if !recompute && kept+t.n*t.w <= budget {
				t.off, kept = kept, kept+t.n*t.w
			} else {
				recompute = true
			}
			tiles = append(tiles, t)
		}
	}
	return tiles, kept, recompute
}

// headLogitsTile writes lg[n,cols] = xh[n,C] · head[v0:v0+cols, C]^T, the
// columns inside one vocabulary block.
func (m *Model) headLogitsTile(lg, xh []float32, n, v0, cols int, mem *arena) {
	C := m.d.C
	if nw := m.narrow; nw != nil {
		if m.computeBF16 {
			m.headLogitsBF16(lg, cols, xh, nil, nw.head[v0*C:], n, cols, mem)
			return
		}
		narrowMatmul(lg, xh, nw.head[v0*C:], n, C, cols, mem)
		return
	}
	rows, _ := vocabBlocks(m.d)
	b := v0 / rows
	w := m.headRows(b)
	if m.computeBF16 {
		m.headLogitsBF16(lg, cols, xh, w[(v0-b*rows)*C:], nil, n, cols, mem)
		return
	}
	blas.Sgemm(false, true, n, cols, C, 1, xh, C, w[(v0-b*rows)*C:], C, 0, lg, cols)
}

// headForward fills a.LogProbs, a.Entropy and a.head, for a pass whose
// layers keep keep.
func (m *Model) headForward(a *Activations, mode headMode, keep keepMode) {
	d, p := m.d, a.b
	M := len(p.rows)
	xh := a.mem.get(M * d.C)
	parallelFor(M, 256, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(p.rows[r])
			copy(xh[r*d.C:(r+1)*d.C], a.lnf[t*d.C:])
		}
	})
	if m.computeBF16 {
		// The head's products read the rows in bfloat16, the logits'
		// and the weight gradient's alike.
		roundBF16Into(xh, xh)
	}
	// The rows are gathered: the final norm's output is not read again.
	a.mem.put(a.lnf)
	a.lnf = nil
	a.head = headActs{xh: xh, lse: a.mem.get(M), budget: keepBudget(mode, keep)}
	if mode == headLogits {
		lg := a.mem.get(M * d.V)
		a.head.logits = lg
		if m.narrow != nil {
			m.headLogitsTile(lg, xh, M, 0, d.V, &a.mem)
		} else if m.computeBF16 {
			_, k := vocabBlocks(d)
			for b := range k {
				lo, hi := m.blockRange(b)
				m.headLogitsBF16(lg[lo:], d.V, xh, m.headRows(b), nil, M, hi-lo, &a.mem)
			}
		} else {
			// Block by block, each product the columns of the
			// whole one (Sgemm's bits: it never cuts the sum over
			// the hidden size).
			_, k := vocabBlocks(d)
			for b := range k {
				lo, hi := m.blockRange(b)
				blas.Sgemm(false, true, M, hi-lo, d.C, 1, xh, d.C, m.headRows(b), d.C, 0, lg[lo:], d.V)
			}
		}
		parallelFor(M, 8, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				t := int(p.rows[r])
				lse, logp, ent, ok := headRowForward(lg[r*d.V:(r+1)*d.V], p.targets[t])
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

// headForwardTiled is headForward's pass over the tiles: each tile's rows
// get their slice's shifted sums and, where the slice holds it, the
// target's logit; each row's sums are combined, in slice order, once
// every tile is done.
func (m *Model) headForwardTiled(a *Activations, xh []float32) {
	d, p := m.d, a.b
	M := len(p.rows)
	vb := vocabBlockRows(d)
	tiles, kept, recompute := headTiles(M, d.V, vb, a.head.budget)
	R, cols, slices := headTile(M, d.V, vb)
	a.head.kept, a.head.shift = a.mem.get(kept), a.mem.get(M*slices)
	var buf []float32
	if recompute {
		buf = a.mem.get(R * cols)
	}
	sums := make([]shiftedSums, M*slices)
	target := make([]float32, M)
	_, blocks := vocabBlocks(d)
	for i, tl := range tiles {
		if i == 0 || tl.b != tiles[i-1].b {
			m.readBlocks(tiles, i, blocks)
		}
		r0, n, v0, w, s := tl.r0, tl.n, tl.v0, tl.w, tl.s
		var lg []float32
		if tl.off >= 0 {
			lg = a.head.kept[tl.off : tl.off+n*w]
		} else {
			lg = buf[:n*w]
		}
		m.headLogitsTile(lg, xh[r0*d.C:], n, v0, w, &a.mem)
		parallelFor(n, 8, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := lg[i*w : (i+1)*w]
				if j := int(p.targets[p.rows[r0+i]]) - v0; j >= 0 && j < w {
					target[r0+i] = row[j]
				}
				q := sumsOf(row, tl.off >= 0)
				sums[(r0+i)*slices+s] = q
				a.head.shift[(r0+i)*slices+s] = q.mx
			}
		})
	}
	m.readBlocks(tiles, len(tiles), blocks)
	parallelFor(M, 64, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(p.rows[r])
			lse, ent := combineSums(sums[r*slices : (r+1)*slices])
			a.head.lse[r] = lse
			if p.targets[t] >= 0 {
				a.LogProbs[t], a.Entropy[t] = target[r]-lse, ent
			}
		}
	})
	if recompute {
		a.mem.put(buf) // the backward pass recomputes its tiles in a buffer of its own
	}
}

// headRowForward reduces one row of logits: its lse and, when the target
// is not negative (ok), the target's log-probability and the entropy.
func headRowForward(row []float32, tgt int32) (lse, logp, ent float32, ok bool) {
	lse, ent = logSoftmax(row)
	if tgt < 0 {
		return lse, 0, 0, false
	}
	return lse, row[tgt] - lse, ent, true
}

// headRowBackward turns one row of logits into d loss / d logits =
// g*(onehot(tgt) - softmax), the softmax being exp(row - lse); a row
// without a target becomes zero. (The reference's arithmetic, HeadBackward;
// the model's passes turn a tile's slices with headSliceBackward.)
func headRowBackward(row []float32, tgt int32, g, lse float32) {
	if tgt < 0 {
		clear(row)
		return
	}
	expShift(row, row, lse)
	scaleAddTarget(row, -g, int(tgt), g)
}

// headSliceBackward turns the slice from column v0 of a row into its part
// of d loss / d logits = g*(onehot(tgt) - softmax): e holds exp(logit -
// shift), or the logits themselves when exp is set, and the softmax is e
// times exp(shift - lse); a row without a target becomes zero.
func headSliceBackward(e []float32, exp bool, v0 int, tgt int32, g, shift, lse float32) {
	if tgt < 0 {
		clear(e)
		return
	}
	if exp {
		expShift(e, e, shift)
	}
	f := float32(math.Exp(float64(shift - lse)))
	scaleAddTarget(e, -g*f, int(tgt)-v0, g)
}

// scaleAddTarget multiplies row by c and adds g at column j when the row
// has it.
func scaleAddTarget(row []float32, c float32, j int, g float32) {
	for i := scaleVector(row, c); i < len(row); i++ {
		row[i] *= c
	}
	if j >= 0 && j < len(row) {
		row[j] += g
	}
}

// shiftedSums are what a row's log-softmax needs of a slice x of it:
// mx = max(x), s = sum exp(x-mx) and sx = sum exp(x-mx)*(x-mx).
type shiftedSums struct {
	mx    float32
	s, sx float64
}

// sumsOf returns x's shiftedSums; with keepExp it overwrites x with
// exp(x-mx). It evaluates exp once per element: float32 sums over blocks
// of 256, float64 across blocks, accurate for a 151k vocabulary without a
// float64 conversion per element.
func sumsOf(x []float32, keepExp bool) shiftedSums {
	mx := maxOf(x)
	var s, sx float64
	for b0 := 0; b0 < len(x); b0 += 256 {
		blk := x[b0:min(b0+256, len(x))]
		var es [256]float32
		e := es[:len(blk)]
		expShift(e, blk, mx)
		bs, bsx := sumDotShift(e, blk, mx)
		if keepExp {
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
// -sum p log p = lse - sum p*x.
func logSoftmax(x []float32) (lse, entropy float32) {
	return combineSums([]shiftedSums{sumsOf(x, false)})
}

// readBlocks reads, in order, the head's blocks before tile i's (every
// block up to the last, at i = len(tiles)) that no tile before i read:
// a pass reads every block, as UnitPlan says, also those without a tile.
func (m *Model) readBlocks(tiles []tileAt, i, blocks int) {
	if !m.readsUnits() {
		return
	}
	from := 0
	if i > 0 {
		from = tiles[i-1].b + 1
	}
	to := blocks
	if i < len(tiles) {
		to = tiles[i].b + 1
	}
	for b := from; b < to; b++ {
		m.headRows(b)
	}
}

// headGrad is what the head's backward pass leaves for a deferred
// weight gradient (deferHeadGrad): its activations, whose kept tiles
// then hold d loss / d logits, and the log-prob gradient.
type headGrad struct {
	a           *Activations
	gradLogProb []float32
}

// headBackward turns gradLogProb[N] into dlogits = g*(onehot(target) -
// softmax) a tile at a time (kept or recomputed), adds dlogits^T·xh to the
// head's gradient and returns the gradient of the final norm's output,
// dlnf[N,C], allocated from tmp. dxh sums the slices' products in slice
// order. A model whose gradients a feed takes hands an untied head's
// gradient over block by block; with a tied head (deferHeadGrad) it adds
// nothing to the head's gradient here: headWeightGrad makes it at the end
// of the pass, and the returned headGrad carries what that needs.
func (m *Model) headBackward(a *Activations, gradLogProb []float32, tmp *arena) ([]float32, *headGrad) {
	d, p := m.d, a.b
	M := len(p.rows)
	xh := a.head.xh
	x := unitsIndex(m.cfg)
	deferred := m.deferHeadGrad()
	dxh := tmp.get(M * d.C)
	vb := vocabBlockRows(d)
	tiles, _, recompute := headTiles(M, d.V, vb, a.head.budget)
	R, cols, slices := headTile(M, d.V, vb)
	var buf []float32
	if recompute {
		buf = tmp.get(R * cols)
	}
	_, blocks := vocabBlocks(d)
	next := 0 // the next block the pass reads
	// done ends the blocks before block b: read (an untied head's
	// gradient of a block without a tile is handed over as zeros).
	done := func(b int) {
		for ; next < b; next++ {
			if m.readsUnits() {
				m.headRows(next)
			}
			if m.shard != nil && !deferred && !m.frozen() {
				m.headGradRows(next)
				m.gradDone(x.head(next))
			}
		}
	}
	for _, tl := range tiles {
		done(tl.b)
		r0, n, v0, w, s := tl.r0, tl.n, tl.v0, tl.w, tl.s
		var lg []float32
		if tl.off >= 0 {
			lg = a.head.kept[tl.off : tl.off+n*w]
		} else {
			lg = buf[:n*w]
			m.headLogitsTile(lg, xh[r0*d.C:], n, v0, w, tmp)
		}
		parallelFor(n, 8, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				r := r0 + i
				t := int(p.rows[r])
				headSliceBackward(lg[i*w:(i+1)*w], tl.off < 0, v0, p.targets[t], gradLogProb[t], a.head.shift[r*slices+s], a.head.lse[r])
			}
		})
		var beta float32
		if s > 0 {
			beta = 1
		}
		lo, _ := m.blockRange(tl.b)
		hw := m.headRows(tl.b)[(v0-lo)*d.C:]
		if m.computeBF16 {
			// The logits' gradient in bfloat16 (a kept tile keeps it
			// so for a deferred weight gradient), the head's rows
			// rounded as the product reads them; xh is bfloat16.
			roundBF16Into(lg, lg)
			var gHead []float32 // nil: a frozen base's head takes no gradient
			if !deferred && !m.frozen() {
				gHead = m.headGradRows(tl.b)[(v0-lo)*d.C:]
			}
			m.headBackBF16(dxh[r0*d.C:], gHead, lg, xh[r0*d.C:], hw, n, w, beta, tmp)
			continue
		}
		dx := blas.Gemm{M: n, N: d.C, K: w, Alpha: 1, A: lg, Lda: w, B: hw, Ldb: d.C, Beta: beta, C: dxh[r0*d.C:], Ldc: d.C}
		if deferred {
			// The weight gradient waits (headWeightGrad): the input's
			// product cut as the pair below cuts it, the same bits.
			blas.SgemmOfPair(dx, true)
			continue
		}
		if m.frozen() { // (a frozen base's head takes no gradient)
			dx.Run()
			continue
		}
		// The input and weight gradients' products are of equal work:
		// each on its own core.
		gHead := m.headGradRows(tl.b)[(v0-lo)*d.C:]
		blas.SgemmPair(dx,
			blas.Gemm{TransA: true, M: w, N: d.C, K: n, Alpha: 1, A: lg, Lda: w, B: xh[r0*d.C:], Ldb: d.C, Beta: 1, C: gHead, Ldc: d.C})
	}
	done(blocks)
	if recompute {
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
	if deferred {
		return dlnf, &headGrad{a: a, gradLogProb: gradLogProb}
	}
	return dlnf, nil
}

// headWeightGrad adds to block b's gradient the head's part,
// dlogits^T·xh over the block's tiles in headBackward's order, the same
// products: a kept tile holds dlogits since headBackward, another is
// recomputed from the block's weights (which the pass reads here, as
// UnitPlan says).
func (m *Model) headWeightGrad(h *headGrad, b int, tmp *arena) {
	a := h.a
	d, p := m.d, a.b
	M := len(p.rows)
	xh := a.head.xh
	vb := vocabBlockRows(d)
	tiles, _, _ := headTiles(M, d.V, vb, a.head.budget)
	R, cols, slices := headTile(M, d.V, vb)
	m.headRows(b)
	g := m.headGradRows(b)
	lo, _ := m.blockRange(b)
	var buf []float32
	for _, tl := range tiles {
		if tl.b != b {
			continue
		}
		r0, n, v0, w, s := tl.r0, tl.n, tl.v0, tl.w, tl.s
		var lg []float32
		if tl.off >= 0 {
			lg = a.head.kept[tl.off : tl.off+n*w]
		} else {
			if buf == nil {
				buf = tmp.get(R * cols)
			}
			lg = buf[:n*w]
			m.headLogitsTile(lg, xh[r0*d.C:], n, v0, w, tmp)
			parallelFor(n, 8, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					r := r0 + i
					t := int(p.rows[r])
					headSliceBackward(lg[i*w:(i+1)*w], true, v0, p.targets[t], h.gradLogProb[t], a.head.shift[r*slices+s], a.head.lse[r])
				}
			})
			if m.computeBF16 {
				roundBF16Into(lg, lg) // as headBackward rounded it
			}
		}
		if m.computeBF16 {
			m.headWeightGradBF16(g[(v0-lo)*d.C:], lg, xh[r0*d.C:], n, w, tmp)
			continue
		}
		// Cut as headBackward's pair cuts it in a model that is not
		// sharded: the same bits on every CPU.
		blas.SgemmOfPair(blas.Gemm{TransA: true, M: w, N: d.C, K: n, Alpha: 1, A: lg, Lda: w, B: xh[r0*d.C:], Ldb: d.C, Beta: 1, C: g[(v0-lo)*d.C:], Ldc: d.C}, false)
	}
	if buf != nil {
		tmp.put(buf)
	}
}
