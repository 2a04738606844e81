package model

// Qwen3's per-head RMS norms: after the q, k, v projection and before the
// rotary embedding, each of a row's H query heads is normalised with the
// weight q_norm[D] and each of its KV key heads with k_norm[D] (values are
// not normalised). In qkv[N,QKV] the query and key heads of a row are the
// first H+KV blocks of D columns.

// qkNormForward normalises, in place, the query and key heads of every row
// of qkv[N,QKV]; w[2D] holds q_norm then k_norm. When raw is not nil it
// receives the heads as they were, [N, QD+KD], and rstd[N, H+KV] each
// head's 1/sqrt(mean(x^2)+eps), for qkNormBackward.
func qkNormForward(qkv, raw, rstd, w []float32, N int, d dims, eps float64) {
	nh := d.H + d.KV
	qw, kw := w[:d.D], w[d.D:2*d.D]
	parallelFor(N, 64, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			row := qkv[t*d.QKV : t*d.QKV+nh*d.D]
			if raw != nil {
				copy(raw[t*nh*d.D:(t+1)*nh*d.D], row)
			}
			for h := 0; h < nh; h++ {
				x, wt := row[h*d.D:(h+1)*d.D], qw
				if h >= d.H {
					wt = kw
				}
				r := rmsnormRow(x, x, wt, eps)
				if rstd != nil {
					rstd[t*nh+h] = r
				}
			}
		}
	})
}

// qkNormBackward replaces, in place, the gradient with respect to the
// normalised query and key heads in dqkv[N,QKV] by the gradient with
// respect to the heads before the norm, and adds the weights' gradient to
// dw[2D] (q_norm then k_norm), given the forward's raw and rstd.
func qkNormBackward(dqkv, dw, raw, rstd, w []float32, N int, d dims) {
	nh, D := d.H+d.KV, d.D
	ranges := splitRange(N, workers())
	partial := make([]float32, len(ranges)*2*D)
	parallelTasks(len(ranges), func(_, k int) {
		pw := partial[k*2*D : (k+1)*2*D]
		dy := make([]float32, D)
		for t := ranges[k][0]; t < ranges[k][1]; t++ {
			for h := 0; h < nh; h++ {
				off := 0
				if h >= d.H {
					off = D
				}
				dxr := dqkv[t*d.QKV+h*D : t*d.QKV+(h+1)*D]
				copy(dy, dxr)
				clear(dxr)
				rmsnormRowBackward(dxr, pw[off:off+D], dy, raw[(t*nh+h)*D:(t*nh+h+1)*D], w[off:off+D], rstd[t*nh+h])
			}
		}
	})
	for k := range ranges {
		if dw != nil { // nil: a frozen base's norm takes no gradient
			addInto(dw, dw, partial[k*2*D:(k+1)*2*D])
		}
	}
}

// rmsnormRowBackward is one row of rmsnormBackward: dxr (accumulates) from
// dy, and pw += dy*x*r, for the row xr normalised with w and rstd r.
func rmsnormRowBackward(dxr, pw, dy, xr, w []float32, r float32) {
	C := len(xr)
	var acc [8]float32
	n := C &^ 7
	rmsBwdLanes(&acc, pw, dy, xr, w, r)
	dot := laneTotal(&acc)
	for i := n; i < C; i++ {
		dot += float32(float32(dy[i]*w[i]) * xr[i])
		pw[i] += float32(float32(dy[i]*xr[i]) * r)
	}
	rmsnormDx(dxr, dy, xr, w, r, dot, C)
}
