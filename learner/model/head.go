package model

import (
	"math"

	"github.com/aipo-rl/aipo/learner/blas"
)

// The language-model head: logits[M,V] = xh[M,C] · head[V,C]^T over the M
// rows that have a target (xh gathers those rows of the final norm's
// output), then a log-softmax read at the target. When M×V fits in
// keepLogitsFloats the forward pass keeps the probabilities for the
// backward pass; otherwise logits exist only chunkFloats at a time and the
// backward pass recomputes them, so a 151k vocabulary never needs M×V floats.

// keepLogitsFloats bounds the probabilities kept for backward (64 MiB); a
// variable so that tests can force the chunked head.
var keepLogitsFloats = 1 << 24

// chunkFloats bounds the logits that exist at once when they are not kept
// (16 MiB); a variable so that tests can force many chunks.
var chunkFloats = 1 << 22

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
// (headAuto); otherwise both passes make the logits a chunk at a time.
func keepsLogits(M, V int) bool { return M*V <= keepLogitsFloats }

// chunkRows is the rows of logits a head of M rows and a vocabulary of V
// makes at once: all of them (whole), or a chunk of chunkFloats.
func chunkRows(M, V int, whole bool) int {
	if whole {
		return max(M, 1)
	}
	return max(1, chunkFloats/V)
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
	whole := mode != headChunk
	cr := chunkRows(M, d.V, whole)
	buf := a.mem.get(min(cr, M) * d.V)
	if whole {
		a.head.logits, a.head.probs = buf, mode == headAuto
	}
	for r0 := 0; r0 < M; r0 += cr {
		n := min(cr, M-r0)
		lg := buf[:n*d.V]
		if whole {
			lg = buf[r0*d.V : (r0+n)*d.V]
		}
		if nw := m.narrow; nw != nil {
			narrowMatmul(lg, xh[r0*d.C:], nw.head, n, d.C, d.V, &a.mem)
		} else {
			blas.Sgemm(false, true, n, d.V, d.C, 1, xh[r0*d.C:], d.C, m.w.head, d.C, 0, lg, d.V)
		}
		parallelFor(n, 8, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				r := r0 + i
				t := int(p.rows[r])
				lse, logp, ent, ok := headRowForward(lg[i*d.V:(i+1)*d.V], p.targets[t], mode == headAuto)
				a.head.lse[r] = lse
				if ok {
					a.LogProbs[t], a.Entropy[t] = logp, ent
				}
			}
		})
	}
	if !whole {
		a.mem.put(buf) // the backward pass recomputes its chunks in a buffer of its own
	}
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

// headRowBackward turns one row into d loss / d logits = g*(onehot(tgt) -
// softmax): the row holds the probabilities (probs) or the logits, whose
// softmax is exp(row - lse); a row without a target becomes zero.
func headRowBackward(row []float32, tgt int32, g, lse float32, probs bool) {
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
	row[tgt] += g
}

// logSoftmax returns log sum exp(x) and the entropy of softmax(x),
// -sum p log p = lse - sum p*x; with toProbs it overwrites x with softmax(x).
// It evaluates exp once per element.
func logSoftmax(x []float32, toProbs bool) (lse, entropy float32) {
	mx := maxOf(x)
	// float32 sums over blocks of 256, float64 across blocks: accurate for
	// a 151k vocabulary without a float64 conversion per element.
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
	if toProbs {
		inv := float32(1 / s)
		for j := scaleVector(x, inv); j < len(x); j++ {
			x[j] *= inv
		}
	}
	l := math.Log(s)
	return mx + float32(l), float32(l - sx/s)
}

// headBackward turns gradLogProb[N] into dlogits = g*(onehot(target) -
// softmax) chunk by chunk, adds dlogits^T·xh to the head's gradient and
// returns the gradient of the final norm's output, dlnf[N,C], allocated
// from tmp.
func (m *Model) headBackward(a *Activations, gradLogProb []float32, tmp *arena) []float32 {
	d, p := m.d, a.b
	M := len(p.rows)
	xh := a.head.xh
	whole := a.head.logits != nil
	cr := chunkRows(M, d.V, whole)
	dxh := tmp.get(M * d.C)
	buf := a.head.logits
	if !whole {
		buf = tmp.get(min(cr, M) * d.V)
	}
	for r0 := 0; r0 < M; r0 += cr {
		n := min(cr, M-r0)
		var lg []float32
		if whole {
			lg = buf[r0*d.V : (r0+n)*d.V]
		} else {
			lg = buf[:n*d.V]
			blas.Sgemm(false, true, n, d.V, d.C, 1, xh[r0*d.C:], d.C, m.w.head, d.C, 0, lg, d.V)
		}
		probs := a.head.probs
		parallelFor(n, 8, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				r := r0 + i
				t := int(p.rows[r])
				headRowBackward(lg[i*d.V:(i+1)*d.V], p.targets[t], gradLogProb[t], a.head.lse[r], probs)
			}
		})
		blas.Sgemm(false, false, n, d.C, d.V, 1, lg, d.V, m.w.head, d.C, 0, dxh[r0*d.C:], d.C)
		blas.Sgemm(true, false, d.V, d.C, n, 1, lg, d.V, xh[r0*d.C:], d.C, 1, m.gradsNow().head, d.C)
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
