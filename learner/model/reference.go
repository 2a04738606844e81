package model

import "github.com/aipo-rl/aipo/learner/blas"

// The model's CPU operators, exported as the reference that other backends
// (learner/cuda) are checked against: the very code that trains here, not a
// copy. Shapes and conventions are those of the unexported functions each
// one calls (ops.go, rope.go).

// RMSNormForward is rmsnormForward: out[N,C] = x*rstd*w, rstd[N].
func RMSNormForward(out, rstd, x, w []float32, N, C int, eps float64) {
	rmsnormForward(out, rstd, x, w, N, C, eps)
}

// RMSNormBackward is rmsnormBackward: dx (accumulates) and dw (accumulates).
func RMSNormBackward(dx, dw, dout, x, w, rstd []float32, N, C int) {
	rmsnormBackward(dx, dw, dout, x, w, rstd, N, C)
}

// SwiGLUForward is swigluForward: h[N,F] = silu(g)*u, sig[N,F] = sigmoid(g),
// gu[N,2F] holding g then u per row.
func SwiGLUForward(h, sig, gu []float32, N, F int) { swigluForward(h, sig, gu, N, F) }

// SwiGLUBackward is swigluBackward: dgu[N,2F] from dh[N,F].
func SwiGLUBackward(dgu, dh, sig, gu []float32, N, F int) { swigluBackward(dgu, dh, sig, gu, N, F) }

// RopeTable returns the cos and sin rows [n, D/2] of the rotary embedding
// with base theta (rotate_half pairing: element i with i+D/2).
func RopeTable(D int, theta float64, n int) (cos, sin []float32) {
	return newRopeTable(D, theta, nil).upTo(n)
}

// RopeTableOf returns the cos and sin rows [n, head_dim/2] that a model of
// cfg rotates with: base rope_theta and, when set, rope_scaling's rescaled
// frequencies.
func RopeTableOf(cfg Config, n int) (cos, sin []float32) {
	return newRopeTable(cfg.Head(), cfg.RopeTheta, cfg.RopeScaling).upTo(n)
}

// RopeForward is ropeForward: rotates heads of x[N,ld] in place.
func RopeForward(x []float32, ld int, pos []int32, nHeads, D int, cos, sin []float32) {
	ropeForward(x, ld, nil, pos, nHeads, D, cos, sin)
}

// RopeBackward is ropeBackward: the transposed rotation, in place.
func RopeBackward(dx []float32, ld int, pos []int32, nHeads, D int, cos, sin []float32) {
	ropeBackward(dx, ld, pos, nHeads, D, cos, sin)
}

// QKNormForward is qkNormForward on rows qkv[N,(H+2*KV)*D]: the query and
// key heads normalised in place with w[2D] (q_norm then k_norm); raw
// [N*(H+KV)*D] and rstd [N*(H+KV)] receive what QKNormBackward reads, or
// are nil.
func QKNormForward(qkv, raw, rstd, w []float32, N, H, KV, D int, eps float64) {
	qkNormForward(qkv, raw, rstd, w, N, attDims(H, KV, D), eps)
}

// QKNormBackward is qkNormBackward: dqkv's query and key head gradients
// replaced in place by those before the norm, dw[2D] accumulates.
func QKNormBackward(dqkv, dw, raw, rstd, w []float32, N, H, KV, D int) {
	qkNormBackward(dqkv, dw, raw, rstd, w, N, attDims(H, KV, D))
}

// EmbeddingBackward is embeddingBackward: dEmb[V,C] += scatter of dout.
func EmbeddingBackward(dEmb, dout []float32, tokens []int32, C int) {
	embeddingBackward(dEmb, dout, tokens, C)
}

// AttentionForward is attentionForward for packed causal sequences of the
// given lengths: y[N,H*D] and lse[N,H] from qkv[N,(H+2*KV)*D].
func AttentionForward(y, lse, qkv []float32, seqLens []int, H, KV, D int) {
	d := attDims(H, KV, D)
	attentionForward(y, lse, qkv, make([]float32, 2*len(lse)/H*d.KD), nil, segmentsOf(seqLens), d)
}

// AttentionBackward is attentionBackward: dqkv (overwritten) from dy and
// the forward's qkv, y and lse.
func AttentionBackward(dqkv, dy, qkv, y, lse []float32, seqLens []int, H, KV, D int) {
	d := attDims(H, KV, D)
	// The transposed keys and values the forward pass would have kept.
	segs := segmentsOf(seqLens)
	N := len(lse) / H
	kvT := make([]float32, 2*N*d.KD)
	transposeKV(kvT, qkv, segs, N, d)
	attentionBackward(dqkv, dy, qkv, y, lse, kvT, nil, segs, d)
}

func segmentsOf(seqLens []int) []segment {
	segs := make([]segment, len(seqLens))
	pos := 0
	for i, n := range seqLens {
		segs[i] = segment{start: pos, n: n}
		pos += n
	}
	return segs
}

func attDims(H, KV, D int) dims {
	d := dims{H: H, KV: KV, D: D, QD: H * D, KD: KV * D}
	d.QKV = d.QD + 2*d.KD
	return d
}

// HeadForward is headForward's arithmetic on M rows that all have a
// target slot: logits = xh[M,C]·w[V,C]^T, then per row lse, the target's
// log-probability and the entropy (logp and ent 0 where the target is
// negative).
func HeadForward(logp, lse, ent, xh, w []float32, targets []int32, M, C, V int) {
	logits := make([]float32, M*V)
	blas.Sgemm(false, true, M, V, C, 1, xh, C, w, C, 0, logits, V)
	for r := range M {
		lse[r], logp[r], ent[r], _ = headRowForward(logits[r*V:(r+1)*V], targets[r])
	}
}

// HeadBackward is headBackward's arithmetic (the chunked path):
// dlogits = g*(onehot(target) - softmax), dxh[M,C] = dlogits·w
// (overwritten), dw[V,C] += dlogits^T·xh.
func HeadBackward(dxh, dw, xh, w []float32, targets []int32, lse, g []float32, M, C, V int) {
	lg := make([]float32, M*V)
	blas.Sgemm(false, true, M, V, C, 1, xh, C, w, C, 0, lg, V)
	for r := range M {
		headRowBackward(lg[r*V:(r+1)*V], targets[r], g[r], lse[r])
	}
	blas.Sgemm(false, false, M, C, V, 1, lg, V, w, C, 0, dxh, C)
	blas.Sgemm(true, false, V, C, M, 1, lg, V, xh, C, 1, dw, C)
}
