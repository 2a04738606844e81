package model

import (
	"math"

	"github.com/aipo-rl/aipo/learner/blas"
)

// The language-model head: logits[M,V] = xh[M,C] · head[V,C]^T over the M
// rows that have a target (xh gathers those rows of the final norm's
// output), then a log-softmax read at the target. When M×V exceeds
// keepLogitsFloats the logits exist only chunkRows rows at a time and the
// backward pass recomputes them, so a 151k vocabulary never needs M×V floats.

const keepLogitsFloats = 1 << 24 // 64 MiB of logits kept for the backward pass

// chunkFloats bounds the logits that exist at once when they are not kept
// (16 MiB); a variable so that tests can force many chunks.
var chunkFloats = 1 << 22

type headActs struct {
	xh     []float32 // [M, C]
	lse    []float32 // [M]
	logits []float32 // [M, V] when kept, else nil
}

func (h headActs) floats() int { return len(h.xh) + len(h.lse) + len(h.logits) }

func (m *Model) chunkRows(M int, kept bool) int {
	if kept {
		return M
	}
	return max(1, chunkFloats/m.d.V)
}

// headForward fills a.LogProbs, a.Entropy and a.head.
func (m *Model) headForward(a *Activations, keepLogits int) {
	d, p := m.d, a.b
	M := len(p.rows)
	xh := make([]float32, M*d.C)
	parallelFor(M, 256, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(p.rows[r])
			copy(xh[r*d.C:(r+1)*d.C], a.lnf[t*d.C:])
		}
	})
	a.head = headActs{xh: xh, lse: make([]float32, M)}
	kept := M*d.V <= keepLogits
	cr := m.chunkRows(M, kept)
	buf := make([]float32, min(cr, M)*d.V)
	if kept {
		a.head.logits = buf
	}
	for r0 := 0; r0 < M; r0 += cr {
		n := min(cr, M-r0)
		lg := buf[:n*d.V]
		blas.Sgemm(false, true, n, d.V, d.C, 1, xh[r0*d.C:], d.C, m.w.head, d.C, 0, lg, d.V)
		parallelFor(n, 8, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := lg[i*d.V : (i+1)*d.V]
				lse, ent := logSumExpEntropy(row)
				r := r0 + i
				a.head.lse[r] = lse
				t := int(p.rows[r])
				if tgt := p.targets[t]; tgt >= 0 {
					a.LogProbs[t] = row[tgt] - lse
					a.Entropy[t] = ent
				}
			}
		})
	}
}

// logSumExpEntropy returns log sum exp(x) and the entropy of softmax(x),
// -sum p log p = lse - sum p*x.
func logSumExpEntropy(x []float32) (lse, entropy float32) {
	mx := x[0]
	for _, v := range x {
		mx = max(mx, v)
	}
	var s, sx float64
	for _, v := range x {
		e := exp32(v - mx)
		s += float64(e)
		sx += float64(e * (v - mx))
	}
	l := math.Log(s)
	return mx + float32(l), float32(l - sx/s)
}

// headBackward turns gradLogProb[N] into dlogits = g*(onehot(target) -
// softmax) chunk by chunk, adds dlogits^T·xh to the head's gradient and
// returns the gradient of the final norm's output, dlnf[N,C].
func (m *Model) headBackward(a *Activations, gradLogProb []float32) []float32 {
	d, p := m.d, a.b
	M := len(p.rows)
	xh := a.head.xh
	kept := a.head.logits != nil
	cr := m.chunkRows(M, kept)
	buf := a.head.logits
	if !kept {
		buf = make([]float32, min(cr, M)*d.V)
	}
	dxh := make([]float32, M*d.C)
	for r0 := 0; r0 < M; r0 += cr {
		n := min(cr, M-r0)
		lg := buf[r0*d.V*boolInt(kept) : (r0*boolInt(kept)+n)*d.V]
		if !kept {
			blas.Sgemm(false, true, n, d.V, d.C, 1, xh[r0*d.C:], d.C, m.w.head, d.C, 0, lg, d.V)
		}
		parallelFor(n, 8, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := lg[i*d.V : (i+1)*d.V]
				r := r0 + i
				t := int(p.rows[r])
				tgt := p.targets[t]
				if tgt < 0 {
					clear(row)
					continue
				}
				g, lse := gradLogProb[t], a.head.lse[r]
				for j, v := range row {
					row[j] = -g * exp32(v-lse)
				}
				row[tgt] += g
			}
		})
		blas.Sgemm(false, false, n, d.C, d.V, 1, lg, d.V, m.w.head, d.C, 0, dxh[r0*d.C:], d.C)
		blas.Sgemm(true, false, d.V, d.C, n, 1, lg, d.V, xh[r0*d.C:], d.C, 1, m.g.head, d.C)
	}
	dlnf := make([]float32, len(p.tokens)*d.C)
	parallelFor(M, 256, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := int(p.rows[r])
			copy(dlnf[t*d.C:(t+1)*d.C], dxh[r*d.C:])
		}
	})
	return dlnf
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
