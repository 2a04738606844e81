package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/aipo-rl/aipo/learner/bf16"
	"github.com/aipo-rl/aipo/learner/blas"
)

// roundBF16Into is learner/bf16's rounding (ties to even, NaN kept a
// NaN), value for value, over random values of every exponent, the ties
// and the specials.
func TestRoundBF16IntoIsBF16Round(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	var src []float32
	for range 1 << 16 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	for _, b := range []uint32{0x3f808000, 0x3f818000, 0xbf808000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00001, 0xffa00000, 0, 0x80000000, 1} {
		src = append(src, math.Float32frombits(b))
	}
	dst := make([]float32, len(src))
	roundBF16Into(dst, src)
	for i, v := range src {
		want := bf16.Round(v)
		if math.IsNaN(float64(want)) != math.IsNaN(float64(dst[i])) || !math.IsNaN(float64(want)) && math.Float32bits(want) != math.Float32bits(dst[i]) {
			t.Fatalf("round(%#08x) = %#08x, bf16.Round %#08x", math.Float32bits(v), math.Float32bits(dst[i]), math.Float32bits(want))
		}
	}
}

// The bfloat16 projection's forward and backward products are those of
// the operands rounded to bfloat16 (bf16.Round) and multiplied exactly
// (float64 here), to float32 accumulation: a product of two bfloat16
// values is exact in float32, so the only difference is the float32
// GEMM's adding of K terms, at most about K·2⁻²⁴·Σ|terms|; the test
// allows K·2⁻²³ of Σ|terms| (the rows' sizes and weight slices cut so
// that several slices are summed: narrowSliceFloats made small).
func TestLinearBF16MatchesRoundedReference(t *testing.T) {
	forBF16Paths(t, testLinearBF16MatchesRoundedReference)
}

// forBF16Paths runs test on the bfloat16 products' two paths: the CPU's
// bfloat16 kernels (bf16Native, where the CPU has them) and the float32
// GEMM on the rounded values.
func forBF16Paths(t *testing.T, test func(t *testing.T)) {
	defer func(f func() bool) { bf16Native = f }(bf16Native)
	native := bf16Native()
	if !native {
		t.Logf("this CPU has no bfloat16 kernels (%s): the float32 GEMM's path alone", blas.BF16Kernel())
	}
	for _, on := range []bool{false, true} {
		if on && !native {
			continue
		}
		bf16Native = func() bool { return on }
		t.Run(map[bool]string{true: "native", false: "float32 GEMM"}[on], test)
	}
}

func testLinearBF16MatchesRoundedReference(t *testing.T) {
	defer func(n int) { narrowSliceFloats = n }(narrowSliceFloats)
	narrowSliceFloats = 64 * 40 // slices of 64 rows at I = 40
	r := rand.New(rand.NewPCG(63, 64))
	const N, I, O = 37, 40, 200
	fill := func(n int, s float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(s * r.NormFloat64())
		}
		return x
	}
	in, w, b, dout := fill(N*I, 1), fill(O*I, 0.1), fill(O, 0.1), fill(N*O, 1)
	rd := func(x []float32) []float64 {
		o := make([]float64, len(x))
		for i, v := range x {
			o[i] = float64(bf16.Round(v))
		}
		return o
	}
	rin, rw, rdout := rd(in), rd(w), rd(dout)
	check := func(what string, got []float32, want, scale []float64, K int) {
		t.Helper()
		worst := 0.0
		for i := range got {
			e := math.Abs(float64(got[i])-want[i]) / max(scale[i], 1e-30)
			worst = max(worst, e)
			if e > float64(K)*0x1p-23 {
				t.Fatalf("%s[%d] = %g, rounded reference %g: %.3g of Σ|terms|, bound K·2⁻²³ = %.3g", what, i, got[i], want[i], e, float64(K)*0x1p-23)
			}
		}
		t.Logf("%s: worst %.3g of Σ|terms| (bound %.3g)", what, worst, float64(K)*0x1p-23)
	}
	mem := &arena{pool: &bufPool{}}
	out := make([]float32, N*O)
	linearForwardBF16(out, in, w, nil, b, N, I, O, mem)
	want, scale := make([]float64, N*O), make([]float64, N*O)
	for n := range N {
		for o := range O {
			s, a := float64(b[o]), math.Abs(float64(b[o]))
			for k := range I {
				s += rin[n*I+k] * rw[o*I+k]
				a += math.Abs(rin[n*I+k] * rw[o*I+k])
			}
			want[n*O+o], scale[n*O+o] = s, a
		}
	}
	check("forward", out, want, scale, I+1)

	din, dw, db := make([]float32, N*I), make([]float32, O*I), make([]float32, O)
	for i := range dw {
		dw[i] = 0.5 // the weight gradient adds to what is there
	}
	linearBackwardBF16(din, dw, db, dout, in, w, N, I, O, mem)
	wantIn, scaleIn := make([]float64, N*I), make([]float64, N*I)
	for n := range N {
		for k := range I {
			var s, a float64
			for o := range O {
				s += rdout[n*O+o] * rw[o*I+k]
				a += math.Abs(rdout[n*O+o] * rw[o*I+k])
			}
			wantIn[n*I+k], scaleIn[n*I+k] = s, a
		}
	}
	check("input gradient", din, wantIn, scaleIn, O)
	wantW, scaleW := make([]float64, O*I), make([]float64, O*I)
	for o := range O {
		for k := range I {
			s, a := 0.5, 0.5
			for n := range N {
				s += rdout[n*O+o] * rin[n*I+k]
				a += math.Abs(rdout[n*O+o] * rin[n*I+k])
			}
			wantW[o*I+k], scaleW[o*I+k] = s, a
		}
	}
	check("weight gradient", dw, wantW, scaleW, N+1)
	wantB, scaleB := make([]float64, O), make([]float64, O)
	for o := range O {
		for n := range N {
			wantB[o] += float64(dout[n*O+o]) // the bias's gradient is float32's
			scaleB[o] += math.Abs(float64(dout[n*O+o]))
		}
	}
	check("bias gradient", db, wantB, scaleB, N)
	if mem.pool.live != 0 {
		t.Errorf("the products left %d floats of the pass's buffers taken", mem.pool.live)
	}
}

// A pass with bfloat16 products moves the log-probabilities and the
// gradients away from float32's by the rounding of the products'
// operands and no more (bound: TestRLStepBF16AgainstFloat32 in
// learner/trainer, which holds a whole step to it), and not at all when
// it is off again: SetComputeBF16(false) is the float32 pass bit for bit.
func TestComputeBF16OnAndOff(t *testing.T) {
	r := rand.New(rand.NewPCG(65, 66))
	cfg := tinyConfig()
	b := randomBatch(r, cfg.VocabSize, 30, 17)
	b.Targets = make([]int32, len(b.Tokens))
	for i := range b.Targets {
		b.Targets[i] = int32(r.IntN(cfg.VocabSize))
	}
	pass := func(bf bool) ([]float32, []float32) {
		m, err := New(cfg, 3)
		if err != nil {
			t.Fatal(err)
		}
		m.SetComputeBF16(true)
		m.SetComputeBF16(bf)
		a, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		lp := append([]float32(nil), a.LogProbs...)
		g := make([]float32, len(b.Tokens))
		for i := range g {
			g[i] = -1
		}
		if err := m.Backward(a, g); err != nil {
			t.Fatal(err)
		}
		return lp, append([]float32(nil), m.GradData()...)
	}
	lp32, g32 := pass(false)
	lp16, g16 := pass(true)
	m, err := New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := m.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range lp32 {
		if math.Float32bits(lp32[i]) != math.Float32bits(ref.LogProbs[i]) {
			t.Fatalf("log-prob %d with bfloat16 turned off again: %g, float32 pass %g", i, lp32[i], ref.LogProbs[i])
		}
	}
	var dl, dg, sg float64
	for i := range lp32 {
		dl = max(dl, math.Abs(float64(lp16[i]-lp32[i])))
	}
	for i := range g32 {
		dg = max(dg, math.Abs(float64(g16[i]-g32[i])))
		sg = max(sg, math.Abs(float64(g32[i])))
	}
	if dl == 0 || dg == 0 {
		t.Fatalf("bfloat16 products changed nothing (log-probs %g, gradients %g): they are not in the pass", dl, dg)
	}
	t.Logf("bfloat16 against float32: log-probs within %.3g, gradients within %.3g of their largest %.3g", dl, dg, sg)
}

// A model held in bfloat16 for scoring (HoldBF16, the frozen reference of
// a bfloat16 checkpoint) scores with bfloat16 products as its float32-held
// copy does, bit for bit, on both paths, its weights cut in one slice or
// many: the reference and the policy of step 0 give the same
// log-probabilities in bf16 as in float32.
func TestHoldBF16ScoresAsComputeBF16(t *testing.T) {
	if !columnSlicesExact() {
		t.Logf("BLAS %s slices columns inexactly: HoldBF16 declines (TestHoldBF16ScoresBitIdentical); the held path is taken whatever the kernels", blas.Backend())
	}
	forBF16Paths(t, func(t *testing.T) {
		for _, name := range []string{"tiny_qwen2", "tiny_qwen3"} {
			f32, _ := loadFixture(t, name)
			want, got := bf16Copy(t, f32), bf16Copy(t, f32)
			if !got.holdBF16() {
				t.Fatal("holdBF16 refused bfloat16-exact weights")
			}
			want.SetComputeBF16(true)
			got.SetComputeBF16(true)
			C := got.Config().HiddenSize
			b := randomBatch(rand.New(rand.NewPCG(5, 6)), got.Config().VocabSize, 37, 5, 22)
			for _, slice := range []int{narrowSliceFloats, 64*C + 5} {
				func() {
					defer func(s int) { narrowSliceFloats = s }(narrowSliceFloats)
					narrowSliceFloats = slice
					wlp, went, err := want.Score(b)
					if err != nil {
						t.Fatal(err)
					}
					glp, gent, err := got.Score(b)
					if err != nil {
						t.Fatal(err)
					}
					for i := range wlp {
						if math.Float32bits(glp[i]) != math.Float32bits(wlp[i]) || math.Float32bits(gent[i]) != math.Float32bits(went[i]) {
							t.Fatalf("%s, slices of %d: token %d: log-prob %v entropy %v held in bfloat16, %v %v in float32", name, slice, i, glp[i], gent[i], wlp[i], went[i])
						}
					}
				}()
			}
		}
	})
}
