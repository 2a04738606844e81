package cuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
)

// loraHost is m with a LoRA adapter of rank 4 on every target attached
// (dropout p, seed 99), B drawn too: a new adapter's B is zero, which
// would leave A's gradient zero and the comparison empty.
func loraHost(t *testing.T, m *model.Model, p float64) *model.Model {
	t.Helper()
	pc, err := peft.NewConfig("tiny", 4, 8, p, nil, peft.InitDefault)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	ad, err := peft.New(pc, model.AdapterDims(m.Config()), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, md := range ad.Modules {
		for i := range md.B {
			md.B[i] = float32(0.05 * r.NormFloat64())
		}
	}
	if err := m.AttachAdapter(ad, 99); err != nil {
		t.Fatal(err)
	}
	m.SetAdapterStep(3)
	return m
}

// TestParityLoRAStep runs one LoRA training step of the tiny Qwen3
// fixture configuration (q/k norms, untied head) through the device model
// (NewLoRA) and the CPU model with the AIPO loss, with a dropout of 0.25,
// and compares the log-probabilities, the adapter's gradients and the
// reference passes (the adapter switched off on the host model, which the
// device's passes follow). The masks are drawn on the device by the
// lora_dropout kernels from the CPU's keys: a mask that differed in one
// feature would move that row's products by a whole feature's term, far
// beyond the tolerances. Tolerances are TestParityModelStep's (each
// kernel and GEMM agrees to a few ulp; through two layers and the loss the
// differences compound to ~1e-5 of a gradient's largest magnitude): log-
// probs 1e-4, each adapter matrix's gradient 1e-3 of its largest
// magnitude. The device holds no gradient of the base: the model's
// gradient buffer is the adapter's size, and the base's tensors have no
// gradient views. With activation checkpointing the device's gradients
// are those without it, bit for bit (the recompute draws the same masks).
func TestParityLoRAStep(t *testing.T) {
	dv := gpu(t, true)
	m := loraHost(t, qwen3Model(t, 7), 0.25)
	g, err := dv.NewLoRA(m, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if g.grads.n != len(m.AdapterParamData()) || g.g.layers != nil || g.g.head != nil || g.g.emb != nil {
		t.Fatalf("the LoRA model holds %d gradient values (the adapter has %d) and base gradient views %v", g.grads.n, len(m.AdapterParamData()), g.g.layers != nil)
	}
	parityLoRA(t, g, m, 1e-4, func(name string, got, want []float32) {
		closeTo(t, name, got, want, 1e-3, 1e-3*maxAbs(want))
	})
	// Activation checkpointing recomputes each layer, drawing the same
	// masks again: the same gradients, bit for bit.
	must(t, g.ZeroGrads())
	g.SetCheckpointing(true)
	lossFn := func(lp, _ []float32) ([]float32, error) {
		out := make([]float32, len(lp))
		for i := range out {
			out[i] = float32(i%5) - 2
		}
		return out, nil
	}
	b := model.Batch{Tokens: []int32{3, 9, 4, 1, 7, 2, 8, 5, 6}, SeqLens: []int{5, 4}}
	if _, _, err := g.ForwardBackward(b, lossFn); err != nil {
		t.Fatal(err)
	}
	ckpt := make([]float32, g.grads.n)
	must(t, g.Grads(ckpt))
	must(t, g.ZeroGrads())
	g.SetCheckpointing(false)
	if _, _, err := g.ForwardBackward(b, lossFn); err != nil {
		t.Fatal(err)
	}
	plain := make([]float32, g.grads.n)
	must(t, g.Grads(plain))
	if !slices.Equal(ckpt, plain) || slices.Equal(plain, make([]float32, len(plain))) {
		t.Errorf("the adapter's gradients with activation checkpointing differ from those without (or are zero)")
	}
}

// TestParityLoRAStepBF16 is TestParityLoRAStep with the base held in
// bfloat16 on the device (NewLoRA with bf16, NewFrozen's upload: the
// projections and head in bfloat16 only) against the CPU model computing
// in bfloat16 (SetComputeBF16: the same rounding of the base's operands),
// the adapter and its gradients float32 on both. The two round the same
// values but sum the products in other orders, so an activation near a
// rounding boundary may round the other way and move what follows by one
// bfloat16 step (2^-8): TestParityModelStepBF16's bounds hold (log-probs
// within 0.05, each gradient matrix within 5% of its norm, relative L2).
func TestParityLoRAStepBF16(t *testing.T) {
	dv := gpu(t, true)
	m := loraHost(t, qwen3Model(t, 7), 0.25)
	g, err := dv.NewLoRA(m, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if !g.use16 || g.params16 != nil || g.w.head != nil {
		t.Fatalf("the bf16 LoRA model's base is not held in bfloat16 alone (use16 %v, float32 head %v)", g.use16, g.w.head != nil)
	}
	m.SetComputeBF16(true)
	defer m.SetComputeBF16(false)
	worst := 0.0
	parityLoRA(t, g, m, 0.05, func(name string, got, want []float32) {
		var d, n float64
		for i := range want {
			d += math.Pow(float64(got[i]-want[i]), 2)
			n += math.Pow(float64(want[i]), 2)
		}
		rel := math.Sqrt(d / n)
		if !(rel <= 0.05) {
			t.Errorf("%s: relative L2 difference %.3g, want at most 0.05", name, rel)
		}
		worst = math.Max(worst, rel)
	})
	t.Logf("adapter gradients: worst relative L2 difference %.3g (bound 0.05)", worst)
}

// parityLoRA compares a training pass and the reference pass of g with
// the CPU's passes of m, log-probs within lpTol, each adapter gradient
// matrix by cmp.
func parityLoRA(t *testing.T, g *Model, m *model.Model, lpTol float64, cmp func(name string, got, want []float32)) {
	t.Helper()
	cfg := m.Config()
	r := rand.New(rand.NewPCG(51, 52))
	N := 48
	b := model.Batch{Tokens: make([]int32, N), SeqLens: []int{17, 24, 7}}
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(cfg.VocabSize))
	}
	in, _ := lossBatch(r, N)
	lay, err := model.Layout(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	for i, tg := range lay.Targets {
		if tg < 0 {
			in.Source[i] = loss.Untrained
		}
	}
	lossFn := func(lp, ent []float32) ([]float32, error) {
		x := in
		x.LogProb, x.Entropy = lp, ent
		o, err := loss.Compute(loss.DefaultConfig(), x)
		return o.GradLogProb, err
	}
	a, err := m.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	grad, err := lossFn(a.LogProbs, a.Entropy)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), a.LogProbs...)
	if err := m.Backward(a, grad); err != nil {
		t.Fatal(err)
	}
	got, _, err := g.ForwardBackward(b, lossFn)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "LoRA log-probs", got, want, lpTol, lpTol)
	flat := make([]float32, g.grads.n)
	must(t, g.Grads(flat))
	off := 0
	for _, tn := range m.AdapterGrads() {
		cmp(tn.Name, flat[off:off+len(tn.Data)], tn.Data)
		off += len(tn.Data)
	}

	// The reference: the base alone, the adapter switched off on the host.
	m.SetAdapterOn(false)
	defer m.SetAdapterOn(true)
	base, _, err := m.Score(b)
	if err != nil {
		t.Fatal(err)
	}
	gotBase, _, err := g.ForwardBackward(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "base log-probs (adapter off)", gotBase, base, lpTol, lpTol)
	if d := maxDiff(base, want); d < 1e-2 {
		t.Errorf("the adapter moves the log-probs by at most %.3g: the comparison does not see it", d)
	}
	// The dropout applied in the training passes: the adapter's pass
	// without it (a scoring pass) gives other log-probs.
	m.SetAdapterOn(true)
	noDrop, _, err := m.Score(b)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(noDrop, want); d < 1e-3 {
		t.Errorf("the dropout moves the training pass's log-probs by at most %.3g: the masks' comparison does not see them", d)
	}
}
