package model

import (
	"math"

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
// lse[i*ldl] = log sum exp of row i's scaled scores. s[nq, nk] is scratch;
// it ends holding the unnormalised exp(score - row max), y's rows being
// divided by their sums after the product. The same function serves a
// prefill (p0 = 0) and, with cached keys, an incremental decode (nq = 1,
// p0 = cache length). kt, when not nil, holds the keys transposed
// (kt[d*ldkt + j] = k[j*ldkv + d]) for the score product.
func attendBlock(y []float32, ldy int, lse []float32, ldl int, q []float32, ldq int, k, v []float32, ldkv int,
	kt []float32, ldkt int, nq, p0, D int, scale float32, s []float32) {
	nk := p0 + nq
	if kt != nil {
		blas.SgemmSerial(false, false, nq, nk, D, scale, q, ldq, kt, ldkt, 0, s, nk)
	} else {
		blas.SgemmSerial(false, true, nq, nk, D, scale, q, ldq, k, ldkv, 0, s, nk)
	}
	// The rows of s become exp(score - max); y's rows are divided by
	// their sums after the product (D divisions per row instead of nk).
	var inv [qBlock]float32
	for i := 0; i < nq; i++ {
		row := s[i*nk : (i+1)*nk]
		valid := row[:p0+i+1]
		m := maxOf(valid)
		expShift(valid, valid, m)
		sum := sum32(valid)
		inv[i] = 1 / sum
		clear(row[p0+i+1:])
		lse[i*ldl] = m + float32(math.Log(float64(sum)))
	}
	blas.SgemmSerial(false, false, nq, D, nk, 1, s, nk, v, ldkv, 0, y, ldy)
	for i := 0; i < nq; i++ {
		yr := y[i*ldy : i*ldy+D]
		for j := scaleVector(yr, inv[i]); j < D; j++ {
			yr[j] *= inv[i]
		}
	}
}

// The products with K^T and V^T (scores, dP) read transposed copies:
// OpenBLAS multiplies A·B at these sizes (64 x 256 x 32) with kernels that
// need no packing, about twice as fast here as A·B^T, and one copy per
// segment and head serves every query block of both passes' heads.

// keysTransposed writes segment sg's keys of key/value head g, transposed,
// into kt: [D, sg.n] starting at keysAt(sg, g, d), so kt[at + e*sg.n + j]
// is element e of key j. src is qkv or a buffer laid out like it.
func keysTransposed(kt, src []float32, off int, sg segment, g int, d dims) {
	at := keysAt(sg, g, d)
	transposeInto(kt[at:at+d.D*sg.n], sg.n, src[sg.start*d.QKV+off+g*d.D:], d.QKV, sg.n, d.D)
}

// keysAt is where keysTransposed puts segment sg's head g in a buffer of N*KD floats.
func keysAt(sg segment, g int, d dims) int { return sg.start*d.KD + g*d.D*sg.n }

// attentionForward fills y[N,QD] and lse[N,H] from qkv[N,QKV]; kt[N*KD] is
// scratch for the transposed keys.
func attentionForward(y, lse, qkv, kt []float32, segs []segment, d dims) {
	scale := float32(1 / math.Sqrt(float64(d.D)))
	parallelTasks(len(segs)*d.KV, func(_, i int) {
		keysTransposed(kt, qkv, d.QD, segs[i/d.KV], i%d.KV, d)
	})
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
	scratch := make([][]float32, workers())
	group := d.H / d.KV
	parallelTasks(len(tasks), func(w, i int) {
		if scratch[w] == nil {
			scratch[w] = make([]float32, qBlock*maxT)
		}
		tk := tasks[i]
		sg := segs[tk.seg]
		g := tk.h / group
		nq := min(qBlock, sg.n-tk.i0)
		row := sg.start + tk.i0
		attendBlock(y[row*d.QD+tk.h*d.D:], d.QD, lse[row*d.H+tk.h:], d.H,
			qkv[row*d.QKV+tk.h*d.D:], d.QKV,
			qkv[sg.start*d.QKV+d.QD+g*d.D:], qkv[sg.start*d.QKV+d.QD+d.KD+g*d.D:], d.QKV,
			kt[keysAt(sg, g, d):], sg.n, nq, tk.i0, d.D, scale, scratch[w])
	})
}

// attentionBackward fills dqkv[N,QKV] (overwritten) from dy[N,QD], given
// the forward's qkv, y and lse. One task per (segment, key/value head) owns
// that head's dK and dV rows, so tasks never write the same memory.
func attentionBackward(dqkv, dy, qkv, y, lse []float32, segs []segment, d dims) {
	clear(dqkv)
	scale := float32(1 / math.Sqrt(float64(d.D)))
	group := d.H / d.KV
	maxT := 0
	for _, sg := range segs {
		maxT = max(maxT, sg.n)
	}
	scratch := make([][]float32, workers())
	parallelTasks(len(segs)*d.KV, func(w, ti int) {
		if scratch[w] == nil {
			scratch[w] = make([]float32, 2*qBlock*maxT+2*d.D*maxT)
		}
		sg, g := segs[ti/d.KV], ti%d.KV
		base := sg.start * d.QKV
		k, v := qkv[base+d.QD+g*d.D:], qkv[base+d.QD+d.KD+g*d.D:]
		dk, dv := dqkv[base+d.QD+g*d.D:], dqkv[base+d.QD+d.KD+g*d.D:]
		// K and V transposed, [D, sg.n] each (see keysTransposed).
		kt := scratch[w][2*qBlock*maxT : 2*qBlock*maxT+d.D*sg.n]
		vt := scratch[w][2*qBlock*maxT+d.D*maxT : 2*qBlock*maxT+d.D*maxT+d.D*sg.n]
		transposeInto(kt, sg.n, k, d.QKV, sg.n, d.D)
		transposeInto(vt, sg.n, v, d.QKV, sg.n, d.D)
		for h := g * group; h < (g+1)*group; h++ {
			for i0 := 0; i0 < sg.n; i0 += qBlock {
				nq := min(qBlock, sg.n-i0)
				nk := i0 + nq
				row := sg.start + i0
				p, dp := scratch[w][:nq*nk], scratch[w][qBlock*maxT:qBlock*maxT+nq*nk]
				q, dq := qkv[row*d.QKV+h*d.D:], dqkv[row*d.QKV+h*d.D:]
				dyb, yb := dy[row*d.QD+h*d.D:], y[row*d.QD+h*d.D:]
				// P = exp(scale*q·k^T - lse), zero above the diagonal.
				blas.SgemmSerial(false, false, nq, nk, d.D, scale, q, d.QKV, kt, sg.n, 0, p, nk)
				for i := 0; i < nq; i++ {
					l := lse[(row+i)*d.H+h]
					r := p[i*nk : (i+1)*nk]
					expShift(r, r[:i0+i+1], l)
					clear(r[i0+i+1:])
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
