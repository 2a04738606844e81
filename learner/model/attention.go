package model

import (
	"math"
	"slices"
	"sync"

	"github.com/aipo-rl/aipo/learner/blas"
)

// Causal grouped-query attention over packed segments. Shapes: qkv[N,QKV]
// holds per row the H query heads, then KV key heads, then KV value heads
// (D columns each, already rotated); y[N,QD] is the attention output,
// lse[N,H] the log-sum-exp of each query's scaled scores. Query head h reads
// key/value head h/(H/KV). Queries are processed in blocks of qBlock rows so
// that scratch stays qBlock × T, and the backward pass recomputes the
// probabilities from lse instead of storing T×T per head.

const qBlock = 64

// segment is one sequence of the packed batch: rows start..start+n-1.
type segment struct{ start, n int }

// attendBlock computes one head for nq <= qBlock queries at positions
// p0..p0+nq-1 of a sequence whose keys (positions 0..p0+nq-1) are rows of
// k and v: y[nq, D] = softmax(scale * q·k^T, masked causally)·v and
// lse[i*ldl] = log sum exp of row i's scaled scores. s[nq, nk] receives the
// probabilities, zero above the diagonal, when normP; otherwise it is
// scratch left holding exp(score - row max), y's rows being divided by
// their sums after the product (D divisions per row instead of nk). kt,
// when not nil, holds the keys transposed (kt[e*ldkt + j] = k[j*ldkv + e]).
// The same function serves a prefill (p0 = 0) and, with cached keys, an
// incremental decode (nq = 1, p0 = cache length).
func attendBlock(y []float32, ldy int, lse []float32, ldl int, q []float32, ldq int, k, v []float32, ldkv int,
	kt []float32, ldkt int, nq, p0, D int, scale float32, s []float32, normP bool) {
	nk := p0 + nq
	if kt != nil {
		blas.SgemmSerial(false, false, nq, nk, D, scale, q, ldq, kt, ldkt, 0, s, nk)
	} else {
		blas.SgemmSerial(false, true, nq, nk, D, scale, q, ldq, k, ldkv, 0, s, nk)
	}
	var inv [qBlock]float32
	softmaxRows(s, nq, nk, p0, lse, ldl, normP, &inv)
	blas.SgemmSerial(false, false, nq, D, nk, 1, s, nk, v, ldkv, 0, y, ldy)
	if !normP {
		divideRows(y, ldy, nq, D, &inv)
	}
}

// attendBlockBF16 is attendBlock (without kt and normP) over keys and
// values held in bfloat16, a bfloat16 KV cache's: the scores and the
// weighted sum are float32 products of the cached values, widened as they
// are read (blas.SgemmNTBF16, blas.SgemmNNBF16).
func attendBlockBF16(y []float32, ldy int, lse []float32, ldl int, q []float32, ldq int, k, v []uint16, ldkv int,
	nq, p0, D int, scale float32, s []float32) {
	nk := p0 + nq
	blas.SgemmNTBF16(nq, nk, D, scale, q, ldq, k, ldkv, s, nk)
	var inv [qBlock]float32
	softmaxRows(s, nq, nk, p0, lse, ldl, false, &inv)
	blas.SgemmNNBF16(nq, D, nk, s, nk, v, ldkv, y, ldy)
	divideRows(y, ldy, nq, D, &inv)
}

// softmaxRows turns the nq rows of scores s[nq, nk] (query i at position
// p0+i sees keys 0..p0+i) into exp(score - row max), zero past the
// diagonal, writes each row's log-sum-exp to lse[i*ldl] and its sum's
// inverse to inv[i], and with normP divides the row by its sum.
func softmaxRows(s []float32, nq, nk, p0 int, lse []float32, ldl int, normP bool, inv *[qBlock]float32) {
	for i := 0; i < nq; i++ {
		row := s[i*nk : (i+1)*nk]
		valid := row[:p0+i+1]
		m := maxOf(valid)
		expShift(valid, valid, m)
		sum := sum32(valid)
		inv[i] = 1 / sum
		if normP {
			for j := scaleVector(valid, inv[i]); j < len(valid); j++ {
				valid[j] *= inv[i]
			}
		}
		clear(row[p0+i+1:])
		lse[i*ldl] = m + float32(math.Log(float64(sum)))
	}
}

// divideRows scales the nq rows of y[nq, D] by inv: attention's outputs
// divided by their probabilities' sums.
func divideRows(y []float32, ldy, nq, D int, inv *[qBlock]float32) {
	for i := 0; i < nq; i++ {
		yr := y[i*ldy : i*ldy+D]
		for j := scaleVector(yr, inv[i]); j < D; j++ {
			yr[j] *= inv[i]
		}
	}
}

// The products with K^T and V^T (scores, dP) read transposed copies:
// OpenBLAS multiplies A·B at these sizes (64 x 256 x 32) with kernels that
// need no packing, about twice as fast here as A·B^T. The forward pass
// writes them once per segment and key/value head, kvT[2*N*KD]: K^T then
// V^T, each segment's head g a [D, n] block at keysAt; the backward pass
// reads them.

// keysAt is where segment sg's head g starts in either half of kvT.
func keysAt(sg segment, g int, d dims) int { return sg.start*d.KD + g*d.D*sg.n }

// transposeKV writes every segment's K and V heads from qkv into kvT (N tokens).
func transposeKV(kvT, qkv []float32, segs []segment, N int, d dims) {
	parallelTasks(len(segs)*d.KV, func(_, i int) {
		sg, g := segs[i/d.KV], i%d.KV
		at, src := keysAt(sg, g, d), qkv[sg.start*d.QKV+d.QD+g*d.D:]
		transposeInto(kvT[at:at+d.D*sg.n], sg.n, src, d.QKV, sg.n, d.D)
		transposeInto(kvT[N*d.KD+at:N*d.KD+at+d.D*sg.n], sg.n, src[d.KD:], d.QKV, sg.n, d.D)
	})
}

// keepProbsFloats bounds one layer's attention probabilities that the
// forward pass keeps for the backward pass (16 MiB); above it the backward
// pass recomputes them from lse. A variable so that tests can force
// recomputation. Kept, they spare the backward pass a product and an exp
// per score: for the benchmark's 1M model 2.6 MB a layer.
var keepProbsFloats = 1 << 22

// attentionKeeps are the floats the attention's forward pass keeps of a
// layer for its backward pass: the keys and values transposed (kvT), and
// the probabilities when they fit keepProbsFloats (0 otherwise).
func attentionKeeps(segs []segment, d dims) (kvT, probs int) {
	N := 0
	for _, sg := range segs {
		N += sg.n
	}
	_, probs = probsLayout(segs, d)
	return 2 * N * d.KD, probs
}

// probsFloats is the size of a segment of n tokens' probabilities for one
// head: query block i0 keeps nq × (i0+nq) values.
func probsFloats(n int) int {
	t := 0
	for i0 := 0; i0 < n; i0 += qBlock {
		nq := min(qBlock, n-i0)
		t += nq * (i0 + nq)
	}
	return t
}

// probsLayout returns where each segment's probabilities start (head h of
// segment s at at[s] + h*probsFloats(n)) and the total, or nil when the
// total is over keepProbsFloats.
func probsLayout(segs []segment, d dims) (at []int, total int) {
	at = make([]int, len(segs))
	for i, sg := range segs {
		at[i] = total
		total += d.H * probsFloats(sg.n)
	}
	if total > keepProbsFloats {
		return nil, 0
	}
	return at, total
}

// probsAt is where query block i0 of head h of segment si starts.
func probsAt(at []int, segs []segment, si, h, i0 int) int {
	b := i0 / qBlock // every earlier block is full
	return at[si] + h*probsFloats(segs[si].n) + qBlock*qBlock*b*(b+1)/2
}

// attScratch recycles the attention's per-worker scratch (qBlock rows of
// scores, of the longest sequence's length) between the layers and
// passes: allocated per call it would be garbage that the heap holds
// until the next collection.
var attScratch sync.Pool // of *[]float32

// getScratch returns n floats of scratch (contents undefined).
func getScratch(n int) []float32 {
	if p, ok := attScratch.Get().(*[]float32); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]float32, n)
}

// putScratch hands back every non-nil buffer of bufs.
func putScratch(bufs [][]float32) {
	for _, b := range bufs {
		if b != nil {
			attScratch.Put(&b)
		}
	}
}

// attentionForward fills y[N,QD] and lse[N,H] from qkv[N,QKV], kvT[2*N*KD]
// (see keysAt) and, when not nil, probs (see probsLayout).
func attentionForward(y, lse, qkv, kvT, probs []float32, segs []segment, d dims) {
	scale := float32(1 / math.Sqrt(float64(d.D)))
	N := len(lse) / d.H
	transposeKV(kvT, qkv, segs, N, d)
	var pAt []int
	if probs != nil {
		pAt, _ = probsLayout(segs, d)
	}
	type task struct{ seg, h, i0 int }
	var tasks []task
	maxT := 0
	for si, sg := range segs {
		maxT = max(maxT, sg.n)
		for h := 0; h < d.H; h++ {
			for i0 := 0; i0 < sg.n; i0 += qBlock {
				tasks = append(tasks, task{si, h, i0})
			}
		}
	}
	// Largest blocks (the most keys) first, so that the last tasks
	// handed out are small and the cores finish together.
	slices.SortStableFunc(tasks, func(a, b task) int { return b.i0 - a.i0 })
	scratch := make([][]float32, workers())
	defer putScratch(scratch)
	group := d.H / d.KV
	parallelTasks(len(tasks), func(w, i int) {
		tk := tasks[i]
		sg := segs[tk.seg]
		g := tk.h / group
		nq := min(qBlock, sg.n-tk.i0)
		row := sg.start + tk.i0
		var s []float32
		if pAt != nil {
			s = probs[probsAt(pAt, segs, tk.seg, tk.h, tk.i0):]
		} else {
			if scratch[w] == nil {
				scratch[w] = getScratch(qBlock * maxT)
			}
			s = scratch[w]
		}
		attendBlock(y[row*d.QD+tk.h*d.D:], d.QD, lse[row*d.H+tk.h:], d.H,
			qkv[row*d.QKV+tk.h*d.D:], d.QKV,
			qkv[sg.start*d.QKV+d.QD+g*d.D:], qkv[sg.start*d.QKV+d.QD+d.KD+g*d.D:], d.QKV,
			kvT[keysAt(sg, g, d):], sg.n, nq, tk.i0, d.D, scale, s, pAt != nil)
	})
}

// attentionBackward fills dqkv[N,QKV] (overwritten) from dy[N,QD], given
// the forward's qkv, y, lse, kvT and probs (nil: recomputed here). One task
// per (segment, key/value head) owns that head's dK and dV rows, so tasks
// never write the same memory.
func attentionBackward(dqkv, dy, qkv, y, lse, kvT, probs []float32, segs []segment, d dims) {
	clear(dqkv)
	scale := float32(1 / math.Sqrt(float64(d.D)))
	N := len(lse) / d.H
	group := d.H / d.KV
	maxT := 0
	for _, sg := range segs {
		maxT = max(maxT, sg.n)
	}
	var pAt []int
	if probs != nil {
		pAt, _ = probsLayout(segs, d)
	}
	// Per worker: dP, then P when it is recomputed.
	scratchLen := qBlock * maxT
	if pAt == nil {
		scratchLen *= 2
	}
	scratch := make([][]float32, workers())
	defer putScratch(scratch)
	parallelTasks(len(segs)*d.KV, func(w, ti int) {
		if scratch[w] == nil {
			scratch[w] = getScratch(scratchLen)
		}
		si, g := ti/d.KV, ti%d.KV
		sg := segs[si]
		base := sg.start * d.QKV
		k := qkv[base+d.QD+g*d.D:]
		dk, dv := dqkv[base+d.QD+g*d.D:], dqkv[base+d.QD+d.KD+g*d.D:]
		kt, vt := kvT[keysAt(sg, g, d):], kvT[N*d.KD+keysAt(sg, g, d):]
		for h := g * group; h < (g+1)*group; h++ {
			for i0 := 0; i0 < sg.n; i0 += qBlock {
				nq := min(qBlock, sg.n-i0)
				nk := i0 + nq
				row := sg.start + i0
				var p []float32
				dp := scratch[w][:nq*nk]
				q, dq := qkv[row*d.QKV+h*d.D:], dqkv[row*d.QKV+h*d.D:]
				dyb, yb := dy[row*d.QD+h*d.D:], y[row*d.QD+h*d.D:]
				if pAt != nil {
					p = probs[probsAt(pAt, segs, si, h, i0):][:nq*nk]
				} else {
					p = scratch[w][qBlock*maxT : qBlock*maxT+nq*nk]
					// P = exp(scale*q·k^T - lse), zero above the diagonal.
					blas.SgemmSerial(false, false, nq, nk, d.D, scale, q, d.QKV, kt, sg.n, 0, p, nk)
					for i := 0; i < nq; i++ {
						l := lse[(row+i)*d.H+h]
						r := p[i*nk : (i+1)*nk]
						expShift(r, r[:i0+i+1], l)
						clear(r[i0+i+1:])
					}
				}
				// dP = dY·V^T; dV += P^T·dY.
				blas.SgemmSerial(false, false, nq, nk, d.D, 1, dyb, d.QD, vt, sg.n, 0, dp, nk)
				blas.SgemmSerial(true, false, nk, d.D, nq, 1, p, nk, dyb, d.QD, 1, dv, d.QKV)
				// dS = P * (dP - sum_j dY·Y), stored over dP.
				for i := 0; i < nq; i++ {
					dot := dot32(dyb[i*d.QD:i*d.QD+d.D], yb[i*d.QD:i*d.QD+d.D])
					pr, dr := p[i*nk:(i+1)*nk], dp[i*nk:(i+1)*nk]
					for j := dsVector(dr, pr, dot); j < len(pr); j++ {
						dr[j] = pr[j] * (dr[j] - dot)
					}
				}
				// dQ = scale*dS·K; dK += scale*dS^T·Q.
				blas.SgemmSerial(false, false, nq, d.D, nk, scale, dp, nk, k, d.QKV, 0, dq, d.QKV)
				blas.SgemmSerial(true, false, nk, d.D, nq, scale, dp, nk, q, d.QKV, 1, dk, d.QKV)
			}
		}
	})
}
