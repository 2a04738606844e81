package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/bf16"
	"github.com/aipo-rl/aipo/learner/blas"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// Parity of each GPU operation with its CPU reference on random inputs.
//
// Tolerances. The kernels are compiled without FMA contraction and repeat
// the CPU's float32 operations in the same order, so where the CPU code has
// no reduction and no transcendental function (residual add, RoPE,
// embedding gather and scatter, casts) the results must be bit-identical.
// Reductions taken in float64 on both sides (RMSNorm's sums, the gradient
// norm) differ only by the order of float64 additions, which can move a
// float32 result by one ulp (~6e-8 relative); float32 reductions in a
// different order (RMSNorm's weight gradient, GEMMs) accumulate about
// sqrt(terms) ulp. The fp32 kernels are therefore held to ~1e-5 relative
// (or 1e-5 of the largest magnitude where cancellation makes single
// elements small). The sigmoid uses expf on the GPU and exp on the CPU,
// both within 2 ulp. For GEMMs the bound is relative to sum|a||b|, the
// scale of the rounding errors of a dot product. bfloat16 inputs carry 8
// significant bits (~3 decimal digits, relative error up to 2^-9); against
// the same bf16 values widened on the CPU, the products are exact in
// float32 and only the accumulation differs (tensor cores accumulate with
// slightly less than float32 precision, hence 1e-4); against the original
// float32 inputs the error is that of rounding the inputs, ~1e-2 of
// sum|a||b|.

func TestParityGemmF32(t *testing.T) {
	dv := gpu(t, true)
	r := rand.New(rand.NewPCG(3, 4))
	for _, sz := range [][3]int{{37, 53, 71}, {256, 384, 512}, {1, 1, 1}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				rowsA, colsA := m, k
				if tA {
					rowsA, colsA = k, m
				}
				rowsB, colsB := k, n
				if tB {
					rowsB, colsB = n, k
				}
				// Padded row strides check that ld is honoured.
				lda, ldb, ldc := colsA+3, colsB+1, n+2
				a, b := randn(r, rowsA*lda, 1), randn(r, rowsB*ldb, 1)
				c := randn(r, m*ldc, 1)
				alpha, beta := float32(0.75), float32(-0.5)
				want := append([]float32(nil), c...)
				blas.SgemmSerial(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc)
				absA, absB := absAll(a), absAll(b)
				scale := make([]float32, m*ldc)
				for i := range scale {
					scale[i] = float32(math.Abs(float64(beta * c[i])))
				}
				blas.SgemmSerial(tA, tB, m, n, k, float32(math.Abs(float64(alpha))), absA, lda, absB, ldb, 1, scale, ldc)

				ga, gb, gc := upload(t, dv, a), upload(t, dv, b), upload(t, dv, c)
				must(t, dv.Gemm(tA, tB, m, n, k, alpha, ga, lda, gb, ldb, beta, gc, ldc))
				got := download(t, gc)
				checkGemm(t, "Gemm f32", sz, tA, tB, got, want, scale, ldc, n, 1e-5)
			}
		}
	}
}

func TestParityGemmBF16(t *testing.T) {
	dv := gpu(t, true)
	r := rand.New(rand.NewPCG(5, 6))
	for _, sz := range [][3]int{{37, 53, 71}, {128, 256, 384}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				rowsA, colsA := m, k
				if tA {
					rowsA, colsA = k, m
				}
				rowsB, colsB := k, n
				if tB {
					rowsB, colsB = n, k
				}
				lda, ldb, ldc := colsA, colsB+2, n
				a32, b32 := randn(r, rowsA*lda, 1), randn(r, rowsB*ldb, 1)
				a16, b16 := toBF16(a32), toBF16(b32)
				aw, bw := fromBF16(a16), fromBF16(b16)
				want := make([]float32, m*ldc)
				blas.SgemmSerial(tA, tB, m, n, k, 1, aw, lda, bw, ldb, 0, want, ldc)
				exact := make([]float32, m*ldc)
				blas.SgemmSerial(tA, tB, m, n, k, 1, a32, lda, b32, ldb, 0, exact, ldc)
				scale := make([]float32, m*ldc)
				blas.SgemmSerial(tA, tB, m, n, k, 1, absAll(aw), lda, absAll(bw), ldb, 0, scale, ldc)

				ga, gb := uploadBF16(t, dv, a16), uploadBF16(t, dv, b16)
				gc := alloc(t, dv, F32, m*ldc)
				must(t, dv.GemmBF16(tA, tB, m, n, k, 1, ga, lda, gb, ldb, 0, gc, ldc))
				got := download(t, gc)
				checkGemm(t, "GemmBF16 f32 out vs widened bf16", sz, tA, tB, got, want, scale, ldc, n, 1e-4)
				checkGemm(t, "GemmBF16 f32 out vs f32 inputs", sz, tA, tB, got, exact, scale, ldc, n, 1e-2)

				// bf16 output: one more rounding, 2^-8 relative.
				gc16 := alloc(t, dv, BF16, m*ldc)
				must(t, dv.GemmBF16(tA, tB, m, n, k, 1, ga, lda, gb, ldb, 0, gc16, ldc))
				out16 := make([]uint16, m*ldc)
				must(t, gc16.CopyToUint16(out16))
				closeTo(t, "GemmBF16 bf16 out", fromBF16(out16), want, 1.0/256, 1e-4*maxAbs(scale))
			}
		}
	}
}

// checkGemm compares the m×n results of row stride ld with tolerance
// tol*scale, scale being alpha*|A||B| + |beta*C|.
func checkGemm(t *testing.T, what string, sz [3]int, tA, tB bool, got, want, scale []float32, ld, n int, tol float64) {
	t.Helper()
	bad := 0
	for i := 0; i < sz[0]; i++ {
		for j := 0; j < n; j++ {
			k := i*ld + j
			if d := math.Abs(float64(got[k] - want[k])); !(d <= tol*float64(scale[k])+1e-30) {
				if bad == 0 {
					t.Errorf("%s m,n,k=%v transA=%v transB=%v: C[%d,%d] = %g, want %g (tolerance %g)", what, sz, tA, tB, i, j, got[k], want[k], tol*float64(scale[k]))
				}
				bad++
			}
		}
	}
	if bad > 1 {
		t.Errorf("%s m,n,k=%v transA=%v transB=%v: %d elements out of tolerance", what, sz, tA, tB, bad)
	}
}

func absAll(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(math.Abs(float64(v)))
	}
	return out
}

func toBF16(x []float32) []uint16 {
	out := make([]uint16, len(x))
	for i, v := range x {
		out[i] = bf16.FromFloat32(v)
	}
	return out
}

func fromBF16(x []uint16) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = bf16.ToFloat32(v)
	}
	return out
}

func TestParityRMSNorm(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(7, 8))
	for _, sz := range [][2]int{{1, 1}, {5, 96}, {33, 896}, {7, 1537}} {
		N, C := sz[0], sz[1]
		const eps = 1e-6
		x, w := randn(r, N*C, 2), randn(r, C, 1)
		out, rstd := make([]float32, N*C), make([]float32, N)
		model.RMSNormForward(out, rstd, x, w, N, C, eps)
		gx, gw := upload(t, dv, x), upload(t, dv, w)
		gout, grstd := alloc(t, dv, F32, N*C), alloc(t, dv, F32, N)
		must(t, dv.RMSNormForward(gout, grstd, gx, gw, N, C, eps))
		closeTo(t, "rmsnorm rstd", download(t, grstd), rstd, 1e-6, 0)
		closeTo(t, "rmsnorm out", download(t, gout), out, 1e-5, 0)

		// Backward accumulates into dx and dw: start them non-zero.
		dout, dx0, dw0 := randn(r, N*C, 1), randn(r, N*C, 1), randn(r, C, 1)
		dx, dw := append([]float32(nil), dx0...), append([]float32(nil), dw0...)
		model.RMSNormBackward(dx, dw, dout, x, w, rstd, N, C)
		gdx, gdw := upload(t, dv, dx0), upload(t, dv, dw0)
		must(t, dv.RMSNormBackward(gdx, gdw, upload(t, dv, dout), gx, gw, upload(t, dv, rstd), N, C))
		closeTo(t, "rmsnorm dx", download(t, gdx), dx, 1e-5, 1e-5*maxAbs(dx))
		closeTo(t, "rmsnorm dw", download(t, gdw), dw, 1e-5, 1e-5*maxAbs(dw))
	}
}

func TestParitySwiGLU(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(9, 10))
	N, F := 19, 1000
	gu := randn(r, 2*N*F, 3)
	gu[0], gu[1] = 100, -100 // saturated sigmoids
	h, sig := make([]float32, N*F), make([]float32, N*F)
	model.SwiGLUForward(h, sig, gu, N, F)
	ggu := upload(t, dv, gu)
	gh, gsig := alloc(t, dv, F32, N*F), alloc(t, dv, F32, N*F)
	must(t, dv.SwiGLUForward(gh, gsig, ggu, N, F))
	closeTo(t, "swiglu sig", download(t, gsig), sig, 1e-6, 1e-30)
	closeTo(t, "swiglu h", download(t, gh), h, 1e-5, 1e-30)

	dh := randn(r, N*F, 1)
	dgu := make([]float32, 2*N*F)
	model.SwiGLUBackward(dgu, dh, sig, gu, N, F)
	gdgu := alloc(t, dv, F32, 2*N*F)
	// The backward gets the CPU's sigmoid so that it is checked alone;
	// its arithmetic has no reductions or exp, hence bit equality.
	must(t, dv.SwiGLUBackward(gdgu, upload(t, dv, dh), upload(t, dv, sig), ggu, N, F))
	closeTo(t, "swiglu dgu", download(t, gdgu), dgu, 0, 0)
}

func TestParityResidual(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(11, 12))
	a, b := randn(r, 100003, 1), randn(r, 100003, 1)
	want := make([]float32, len(a))
	for i := range a {
		want[i] = a[i] + b[i]
	}
	out := alloc(t, dv, F32, len(a))
	must(t, dv.ResidualForward(out, upload(t, dv, a), upload(t, dv, b)))
	closeTo(t, "residual", download(t, out), want, 0, 0)

	must(t, dv.Scale(out, 0.5))
	for i := range want {
		want[i] *= 0.5
	}
	closeTo(t, "scale", download(t, out), want, 0, 0)
}

func TestParityRoPE(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(13, 14))
	// Rows hold q heads then k heads (as a fused projection would); only
	// the first nHeads heads are rotated, the rest must stay untouched.
	N, nHeads, D := 23, 3, 64
	ld := 5 * D
	cos, sin := model.RopeTable(D, 1e6, 4096)
	pos := make([]int32, N)
	for i := range pos {
		pos[i] = int32(r.IntN(4096))
	}
	pos[0] = 0
	x := randn(r, N*ld, 1)
	gpos, gcos, gsin := uploadI32(t, dv, pos), upload(t, dv, cos), upload(t, dv, sin)
	for _, backward := range []bool{false, true} {
		want := append([]float32(nil), x...)
		if backward {
			model.RopeBackward(want, ld, pos, nHeads, D, cos, sin)
		} else {
			model.RopeForward(want, ld, pos, nHeads, D, cos, sin)
		}
		gx := upload(t, dv, x)
		if backward {
			must(t, dv.RoPEBackward(gx, ld, gpos, nHeads, D, gcos, gsin))
		} else {
			must(t, dv.RoPEForward(gx, ld, gpos, nHeads, D, gcos, gsin))
		}
		name := "rope forward"
		if backward {
			name = "rope backward"
		}
		closeTo(t, name, download(t, gx), want, 0, 0)
	}
}

// TestParityQKNorm checks the per-head q/k norm (Qwen3) against
// learner/model's qkNormForward and qkNormBackward, for head widths below,
// at and above a warp's 32 lanes and not a multiple of them, with several
// rows per block of the weight gradient's partial sums (N up to 70 > 2*32).
// Tolerances as for RMSNorm: the rstd 1e-6 relative (the GPU sums squares
// in float64, the CPU in float32 lanes), the output and the input gradient
// 1e-5 relative (1e-5 of the largest for the gradient, whose elements
// cancel), the weight gradient, a float32 sum over N*(H or KV) terms in
// another order, 1e-5 of its largest. The value heads must come back
// untouched: they are compared bit for bit as part of the rows.
func TestParityQKNorm(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(71, 72))
	for _, sz := range [][4]int{{1, 1, 1, 2}, {5, 4, 2, 32}, {70, 3, 1, 48}, {33, 8, 2, 128}} {
		N, H, KV, D := sz[0], sz[1], sz[2], sz[3]
		const eps = 1e-6
		ld, heads := (H+2*KV)*D, N*(H+KV)
		qkv, w := randn(r, N*ld, 2), randn(r, 2*D, 1)
		want, raw, rstd := append([]float32(nil), qkv...), make([]float32, heads*D), make([]float32, heads)
		model.QKNormForward(want, raw, rstd, w, N, H, KV, D, eps)
		gw := upload(t, dv, w)
		gqkv, graw, grstd := upload(t, dv, qkv), alloc(t, dv, F32, heads*D), alloc(t, dv, F32, heads)
		must(t, dv.QKNormForward(gqkv, graw, grstd, gw, N, ld, H, KV, D, eps))
		name := fmt.Sprintf("qk norm N=%d H=%d KV=%d D=%d", N, H, KV, D)
		closeTo(t, name+" rstd", download(t, grstd), rstd, 1e-6, 0)
		closeTo(t, name+" raw", download(t, graw), raw, 0, 0)
		closeTo(t, name+" out", download(t, gqkv), want, 1e-5, 0)
		// Without raw and rstd (a decoding step) the output is the same.
		gqkv2 := upload(t, dv, qkv)
		must(t, dv.QKNormForward(gqkv2, nil, nil, gw, N, ld, H, KV, D, eps))
		closeTo(t, name+" out, nothing kept", download(t, gqkv2), download(t, gqkv), 0, 0)

		// The backward pass replaces dqkv's query and key heads and
		// accumulates into dw: start it non-zero.
		dqkv, dw0 := randn(r, N*ld, 1), randn(r, 2*D, 1)
		dx, dw := append([]float32(nil), dqkv...), append([]float32(nil), dw0...)
		model.QKNormBackward(dx, dw, raw, rstd, w, N, H, KV, D)
		gdx, gdw := upload(t, dv, dqkv), upload(t, dv, dw0)
		partial := alloc(t, dv, F32, qkNormPartials(N, D))
		must(t, dv.QKNormBackward(gdx, gdw, upload(t, dv, raw), upload(t, dv, rstd), gw, partial, N, ld, H, KV, D))
		gotDx := download(t, gdx)
		closeTo(t, name+" dx", gotDx, dx, 1e-5, 1e-5*maxAbs(dx))
		closeTo(t, name+" dw", download(t, gdw), dw, 0, 1e-5*maxAbs(dw))
		var gotV, wantV []float32
		for i := range N {
			v := i*ld + (H+KV)*D
			gotV, wantV = append(gotV, gotDx[v:(i+1)*ld]...), append(wantV, dqkv[v:(i+1)*ld]...)
		}
		closeTo(t, name+" value gradients untouched", gotV, wantV, 0, 0)
	}
	// Heads that do not fit the rows are refused before any launch.
	b := alloc(t, dv, F32, 64)
	if err := dv.QKNormForward(b, nil, nil, b, 1, 64, 2, 1, 32, 1e-6); err == nil {
		t.Error("QKNormForward accepted 3 heads of 32 columns in rows of 64")
	}
}

func TestParityEmbedding(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(15, 16))
	V, C, N := 50, 96, 300 // N > V: many repeated tokens
	emb := randn(r, V*C, 1)
	tokens := make([]int32, N)
	for i := range tokens {
		tokens[i] = int32(r.IntN(V))
	}
	want := make([]float32, N*C)
	for t2, tok := range tokens {
		copy(want[t2*C:(t2+1)*C], emb[int(tok)*C:])
	}
	gtok, gemb := uploadI32(t, dv, tokens), upload(t, dv, emb)
	out := alloc(t, dv, F32, N*C)
	must(t, dv.EmbeddingForward(out, gtok, gemb, C))
	closeTo(t, "embedding forward", download(t, out), want, 0, 0)

	dout, dEmb0 := randn(r, N*C, 1), randn(r, V*C, 1)
	dEmb := append([]float32(nil), dEmb0...)
	model.EmbeddingBackward(dEmb, dout, tokens, C)
	gdEmb := upload(t, dv, dEmb0)
	must(t, dv.EmbeddingBackward(gdEmb, upload(t, dv, dout), gtok, C))
	closeTo(t, "embedding backward", download(t, gdEmb), dEmb, 0, 0)

	// Out-of-range ids: NaN rows forward, skipped backward, no fault.
	bad := uploadI32(t, dv, []int32{-1, int32(V), 3})
	out3 := alloc(t, dv, F32, 3*C)
	must(t, dv.EmbeddingForward(out3, bad, gemb, C))
	got := download(t, out3)
	for i := 0; i < 2*C; i++ {
		if !math.IsNaN(float64(got[i])) {
			t.Fatalf("row of an out-of-range token: element %d is %g, want NaN", i, got[i])
		}
	}
	closeTo(t, "embedding of a valid token after bad ones", got[2*C:], emb[3*C:4*C], 0, 0)
	must(t, dv.EmbeddingBackward(gdEmb, out3, bad, C)) // NaN rows of ids -1 and V are skipped
	after := download(t, gdEmb)
	for i := range after {
		if i/C != 3 && math.Float32bits(after[i]) != math.Float32bits(dEmb[i]) {
			t.Fatalf("scatter of out-of-range ids changed element %d", i)
		}
	}
}

func TestParityCast(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(17, 18))
	x := randn(r, 5000, 10)
	x = append(x, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), // exact ties: to even
		math.MaxFloat32, math.SmallestNonzeroFloat32)
	want := toBF16(x)
	gx := upload(t, dv, x)
	g16 := alloc(t, dv, BF16, len(x))
	must(t, dv.CastToBF16(g16, gx))
	got := make([]uint16, len(x))
	must(t, g16.CopyToUint16(got))
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cast of %g (%#x): got %#x, want %#x", x[i], math.Float32bits(x[i]), got[i], want[i])
		}
	}
	back := alloc(t, dv, F32, len(x))
	must(t, dv.CastToF32(back, g16))
	closeTo(t, "bf16 to f32", download(t, back), fromBF16(want), 0, 0)
}

func TestParityGradNorm(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(19, 20))
	sizes := []int{1, 255, 256, 70001, 1 << 20, 0}
	var params []optim.Param
	var bufs []*Buffer
	for i, n := range sizes {
		g := randn(r, n, float32(i+1))
		params = append(params, optim.Param{Name: string(rune('a' + i)), Data: make([]float32, n), Grad: g})
		bufs = append(bufs, upload(t, dv, g))
	}
	want := optim.GradNorm(params)
	got, err := dv.GradNorm(bufs)
	must(t, err)
	if math.Abs(got-want) > 1e-12*want {
		t.Errorf("GradNorm = %.17g, want %.17g", got, want)
	}
	t.Logf("GradNorm = %.17g (CPU %.17g)", got, want)
}

// TestParityAdamW runs three optimiser steps with clipping active against
// learner/optim.AdamW, the norm and the clip scale computed on the GPU.
func TestParityAdamW(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(21, 22))
	cfg := optim.DefaultConfig()
	cfg.LR = 1e-3
	cfg.GradClip = 1
	cfg.WarmupSteps = 2
	cfg.Schedule = optim.ScheduleWarmupCosine
	cfg.TotalSteps = 10
	opt, err := optim.New(cfg)
	must(t, err)
	sizes := []int{1000, 37, 65536 + 5}
	var params []optim.Param
	var p, g, m, v []*Buffer
	for i, n := range sizes {
		data := randn(r, n, 0.1)
		params = append(params, optim.Param{Name: string(rune('a' + i)), Data: data, Grad: make([]float32, n)})
		p = append(p, upload(t, dv, data))
		g = append(g, alloc(t, dv, F32, n))
		mb, vb := alloc(t, dv, F32, n), alloc(t, dv, F32, n)
		must(t, mb.Zero())
		must(t, vb.Zero())
		m, v = append(m, mb), append(v, vb)
	}
	for step := 0; step < 3; step++ {
		for i := range params {
			copy(params[i].Grad, randn(r, sizes[i], 0.05))
			must(t, g[i].CopyFromFloat32(params[i].Grad))
		}
		steps := opt.Steps()
		wantNorm := opt.Step(params)
		norm, err := dv.GradNorm(g)
		must(t, err)
		if math.Abs(norm-wantNorm) > 1e-12*wantNorm {
			t.Errorf("step %d: norm %.17g, CPU %.17g", step, norm, wantNorm)
		}
		s := NewAdamWStep(cfg, steps, ClipScale(norm, cfg.GradClip))
		if s.Scale >= 1 {
			t.Fatalf("step %d: the norm %g does not exercise clipping", step, norm)
		}
		for i := range params {
			must(t, dv.AdamW(p[i], g[i], m[i], v[i], s))
		}
		// p depends on both moments, so matching p over three steps
		// checks m and v too.
		for i := range params {
			closeTo(t, "adamw p", download(t, p[i]), params[i].Data, 1e-6, 1e-9)
		}
	}
}

// TestGPUGemmThroughput times 4096³ GEMMs in float32 and bfloat16 on
// matrices of ones, whose products are exactly k, and reports TFLOP/s.
func TestGPUGemmThroughput(t *testing.T) {
	dv := gpu(t, true)
	const n = 4096
	ones := make([]float32, n*n)
	for i := range ones {
		ones[i] = 1
	}
	a := upload(t, dv, ones)
	c := alloc(t, dv, F32, n*n)
	a16 := alloc(t, dv, BF16, n*n)
	must(t, dv.CastToBF16(a16, a))
	for _, bf16 := range []bool{false, true} {
		run := func() error {
			if bf16 {
				return dv.GemmBF16(false, true, n, n, n, 1, a16, n, a16, n, 0, c, n)
			}
			return dv.Gemm(false, true, n, n, n, 1, a, n, a, n, 0, c, n)
		}
		must(t, run()) // warm-up
		must(t, dv.Sync())
		const reps = 10
		start := time.Now()
		for i := 0; i < reps; i++ {
			must(t, run())
		}
		must(t, dv.Sync())
		el := time.Since(start)
		got := download(t, c)
		for _, k := range []int{0, n*n/2 + 17, n*n - 1} {
			if got[k] != n {
				t.Fatalf("bf16=%v: C[%d] = %g, want %d", bf16, k, got[k], n)
			}
		}
		t.Logf("GEMM %d³ bf16=%v: %.1f TFLOP/s", n, bf16, 2*float64(n)*n*n*reps/el.Seconds()/1e12)
	}
}

// The KL kernel computes in float64 like loss.K3; exp on the GPU and Go's
// math.Exp are both within 1 ulp in float64, far below float32's rounding
// of the outputs, so they agree to 1 float32 ulp (1.2e-7 relative), with
// values across both clamps and the cap.
func TestParityKL(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(81, 82))
	n := 10007
	logp, ref := make([]float32, n), make([]float32, n)
	for i := range logp {
		logp[i] = -float32(r.ExpFloat64() * 3)
		ref[i] = logp[i] + float32(r.NormFloat64())
	}
	logp[0], ref[0] = -30, 0 // d above the clamp
	logp[1], ref[1] = 0, -30 // d below the clamp
	logp[2], ref[2] = -5, -0 // k above the cap
	wantK, wantG := make([]float32, n), make([]float32, n)
	for i := range logp {
		k, g := loss.K3(float64(logp[i]), float64(ref[i]))
		wantK[i], wantG[i] = float32(k), float32(g)
	}
	gk, gg := alloc(t, dv, F32, n), alloc(t, dv, F32, n)
	must(t, dv.KLK3(gk, gg, upload(t, dv, logp), upload(t, dv, ref)))
	closeTo(t, "k3", download(t, gk), wantK, 2.4e-7, 1e-30)
	closeTo(t, "k3 gradient", download(t, gg), wantG, 2.4e-7, 1e-30)
}
