package trainer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// bf16Unit is bfloat16's unit roundoff: 8 significant bits (7 stored and
// the implicit one), rounded to nearest, move a value by at most 2⁻⁸ of
// itself.
const bf16Unit = 0x1p-8

// tinyQwen3 is the tiny Qwen3 of the trainer's tests (q/k norm, tied
// head) with a vocabulary of vocab tokens.
func tinyQwen3(vocab int) model.Config {
	mc := tinyConfig(vocab)
	mc.ModelType, mc.HeadDim = "qwen3", 8
	return mc
}

// bf16Samples is a batch of n trajectories of 2 to 12 response tokens
// with mixed sources and advantages, and the sampler's log-probs.
func bf16Samples(seed uint64, n, vocab int) []RLSample {
	r := rand.New(rand.NewPCG(seed, 91))
	out := make([]RLSample, n)
	for i := range out {
		s := RLSample{Sequence: Sequence{Prompt: []int32{1, int32(2 + r.IntN(vocab-2))}}, Advantage: float32(r.NormFloat64())}
		for range 2 + r.IntN(11) {
			s.Response = append(s.Response, int32(2+r.IntN(vocab-2)))
			s.Source = append(s.Source, []loss.Source{loss.Internal, loss.Internal, loss.External}[r.IntN(3)])
		}
		out[i] = s
	}
	return out
}

// The RL step with learner.precision bf16 on the CPU (the model's
// bfloat16 products) against the same step in float32, from the same
// weights: its loss, its gradient and the weights it leaves differ from
// float32's by what rounding the products' operands can move them, and
// by more than nothing (the products do round).
//
// The bounds follow from bfloat16's unit roundoff u = 2⁻⁸ (8 significant
// bits, round to nearest). A product with both operands rounded moves by
// at most (2u + u²)·Σ|terms|, and a forward pass has P = 4L+1 products
// in sequence (four projections a layer and the head), each carrying the
// changes before it on through the residual stream; the backward pass
// has as many again, each rounding its output gradient and its weights,
// and one more for a weight's own gradient. Relative to a tensor's
// largest value (for these weights, of standard deviation 0.02, and
// normalised activations, Σ|terms| stays within a few times the largest
// result: the factor 4 BF16LogitBound also takes for the growth through
// the norms and attention) that gives
//
//	the loss and the log-probs:  4·P·2u       (L = 2: 72·2⁻⁸ ≈ 0.28)
//	the gradient:                4·(2P+1)·2u  (L = 2: 152·2⁻⁸ ≈ 0.59)
//
// of their scale (bounds for the worst case, each rounding's change
// adding up with the same sign; measured, the changes are a hundredth of
// them). The step's loss, on-policy (pi = pi_old in both), is the same
// function of the advantages in both, and is held to the log-probs'
// bound. The weights then differ by the update AdamW takes from
// each gradient: its first step moves a weight by lr·g/(|g|+ε), at most
// lr either way whatever g is, so two first steps from the same weights
// differ by at most 2·lr (the weight decay multiplies the same weights
// alike); and only where a gradient is small enough for its sign to flip
// is that reached, so the mean difference is held to a tenth of lr.
func TestRLStepBF16AgainstFloat32(t *testing.T) {
	const vocab, lr = 40, 1e-3
	mc := tinyQwen3(vocab)
	samples := bf16Samples(3, 12, vocab)
	cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 48, PPOEpochs: 1, MiniBatches: 1}
	cfg.Loss.KLCoef = 0.05
	dev, err := backend.Lookup(backend.CPUName)
	if err != nil {
		t.Fatal(err)
	}
	step := func(precision string) (RLStats, []float32, []float32, [][]float32) {
		m, err := model.New(mc, 11)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := model.New(mc, 11)
		if err != nil {
			t.Fatal(err)
		}
		oc := optim.DefaultConfig()
		oc.LR, oc.WeightDecay = lr, 0.01
		opt, err := optim.New(oc)
		if err != nil {
			t.Fatal(err)
		}
		l := &Learner{Policy: m, Ref: ref, Opt: opt}
		d, err := dev.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		release, err := l.On(d, precision)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		if got := m.ComputesInBF16() && ref.ComputesInBF16(); got != (precision == backend.BF16) {
			t.Fatalf("precision %s: the policy and the reference compute in bfloat16: %v", precision, got)
		}
		seqs, err := l.rlSequences(cfg, samples)
		if err != nil {
			t.Fatal(err)
		}
		lp, err := logProbs(l.policy(), seqs, cfg.MicroBatchTokens)
		if err != nil {
			t.Fatal(err)
		}
		st, err := l.RLStep(cfg, samples)
		if err != nil {
			t.Fatal(err)
		}
		return st, append([]float32(nil), m.GradData()...), append([]float32(nil), m.ParamData()...), lp
	}
	st32, g32, w32, lp32 := step(backend.FP32)
	st16, g16, w16, lp16 := step(backend.BF16)

	P := float64(4*mc.NumHiddenLayers + 1)
	fwd, bwd := 4*P*2*bf16Unit, 4*(2*P+1)*2*bf16Unit
	var dlp, slp float64
	for i := range lp32 {
		for j := range lp32[i] {
			dlp = max(dlp, math.Abs(float64(lp16[i][j]-lp32[i][j])))
			slp = max(slp, math.Abs(float64(lp32[i][j])))
		}
	}
	t.Logf("log-probs: bf16 within %.3g of float32's, %.3g of their scale %.3g (bound %.3g)", dlp, dlp/slp, slp, fwd)
	if dlp > fwd*slp {
		t.Errorf("the log-probs differ by %.3g, more than %.3g of their scale %.3g", dlp, fwd, slp)
	}
	dl := math.Abs(st16.Loss - st32.Loss)
	t.Logf("loss: bf16 %.6g, float32 %.6g (%.3g apart; bound %.3g of the log-probs' scale)", st16.Loss, st32.Loss, dl, fwd)
	if dl > fwd*slp {
		t.Errorf("the loss differs by %.3g, more than %.3g of the log-probs' scale %.3g", dl, fwd, slp)
	}
	var dg, sg float64
	for i := range g32 {
		dg = max(dg, math.Abs(float64(g16[i]-g32[i])))
		sg = max(sg, math.Abs(float64(g32[i])))
	}
	t.Logf("gradient: bf16 within %.3g of float32's, %.3g of its scale %.3g (bound %.3g); norms %.6g and %.6g", dg, dg/sg, sg, bwd, st16.GradNorm, st32.GradNorm)
	if dg > bwd*sg {
		t.Errorf("the gradients differ by %.3g, more than %.3g of their scale %.3g", dg, bwd, sg)
	}
	if math.Abs(st16.GradNorm-st32.GradNorm) > bwd*st32.GradNorm {
		t.Errorf("gradient norms %.6g (bf16) and %.6g (float32) differ by more than %.3g of the latter", st16.GradNorm, st32.GradNorm, bwd)
	}
	var dw, sum float64
	for i := range w32 {
		d := math.Abs(float64(w16[i] - w32[i]))
		dw, sum = max(dw, d), sum+d
	}
	mean := sum / float64(len(w32))
	t.Logf("updated weights: bf16 within %.3g of float32's (bound 2·lr = %.3g), mean %.3g (bound lr/10)", dw, 2*lr, mean)
	if dw > 2*lr*(1+1e-3) || mean > lr/10 {
		t.Errorf("the updated weights differ by %.3g at most and %.3g on average: more than 2·lr = %.3g or lr/10", dw, mean, 2*lr)
	}
	if dlp == 0 || dg == 0 || dw == 0 {
		t.Errorf("bf16 changed nothing (log-probs %g, gradients %g, weights %g apart): its products are not in the step", dlp, dg, dw)
	}
}

// At learner.precision bf16 the CPU holds the frozen reference in
// bfloat16 whatever its values (backend Eval: model.HoldBF16Rounded),
// half its float32 bytes, and the KL term it gives stays within a stated
// bound of the one a float32 reference (float32 weights, float32
// products) gives.
//
// The reference's log-probs r16 differ from the float32 reference's r32
// by what its bfloat16 products move them (TestRLStepBF16AgainstFloat32's
// forward bound, 4·P·2u of their scale for P = 4L+1 products in
// sequence) and by the rounding of the embedding's rows, which a
// float32-held model looks up unrounded: one more rounding of the
// residual stream's input, carried through the same products, counted as
// one more product, 4·(P+1)·2u. The KL term of a token is k3(x) = eˣ - x
// - 1 with x = r - logp (loss.K3), whose slope eˣ - 1 is monotone in x:
// between r32 and r16 it is at most the larger of |e^(x32) - 1| and
// |e^(x16) - 1|, so each token's k3 moves by at most that times
// |r16 - r32| (the mean value theorem), and the mean term by at most the
// mean of those; the test holds the measured change to it and the
// log-probs to theirs.
func TestReferenceHeldInBF16KL(t *testing.T) {
	const vocab = 40
	mc := tinyQwen3(vocab)
	samples := bf16Samples(5, 12, vocab)
	cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 48, PPOEpochs: 1, MiniBatches: 1}
	cfg.Loss.KLCoef = 0 // (the sequences alone: the test scores the references itself)
	dev, err := backend.Lookup(backend.CPUName)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pol, err := model.New(mc, 11)
	if err != nil {
		t.Fatal(err)
	}
	l := &Learner{Policy: pol}
	seqs, err := l.rlSequences(cfg, samples)
	if err != nil {
		t.Fatal(err)
	}
	logp, err := logProbs(CPU(pol), seqs, cfg.MicroBatchTokens)
	if err != nil {
		t.Fatal(err)
	}
	score := func(precision string) ([][]float32, *model.Model) {
		ref, err := model.New(mc, 12) // random float32 weights: no bfloat16 values
		if err != nil {
			t.Fatal(err)
		}
		c, err := d.Eval(ref, precision)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		lp, err := logProbs(c, seqs, cfg.MicroBatchTokens)
		if err != nil {
			t.Fatal(err)
		}
		return lp, ref
	}
	r32, m32 := score(backend.FP32)
	r16, m16 := score(backend.BF16)
	if m32.HeldInBF16() || !m16.HeldInBF16() {
		t.Fatalf("held in bfloat16: float32 reference %v, bf16 reference %v; want false and true", m32.HeldInBF16(), m16.HeldInBF16())
	}
	P := float64(4*mc.NumHiddenLayers + 1)
	bound := 4 * (P + 1) * 2 * bf16Unit
	var dr, scale, k32, k16, dkBound float64
	n := 0
	for i := range r32 {
		for j := range r32[i] {
			p := float64(logp[i][j])
			a, b := float64(r32[i][j]), float64(r16[i][j])
			dr = max(dr, math.Abs(b-a))
			scale = max(scale, math.Abs(a))
			ka, _ := loss.K3(p, a)
			kb, _ := loss.K3(p, b)
			k32 += ka
			k16 += kb
			slope := max(math.Abs(math.Exp(a-p)-1), math.Abs(math.Exp(b-p)-1))
			dkBound += slope * math.Abs(b-a)
			n++
		}
	}
	k32, k16, dkBound = k32/float64(n), k16/float64(n), dkBound/float64(n)
	t.Logf("reference log-probs: bf16-held within %.3g of float32's (scale %.3g, bound %.3g of it); mean KL term %.6g against %.6g, changed by %.3g (bound %.3g)",
		dr, scale, bound, k16, k32, math.Abs(k16-k32), dkBound)
	if dr == 0 {
		t.Error("the bf16-held reference scores float32's bits: its products were not bfloat16")
	}
	if dr > bound*scale {
		t.Errorf("the bf16-held reference's log-probs differ from float32's by %g, more than %g (%g of their scale %g)", dr, bound*scale, bound, scale)
	}
	// (A float64 sum of a few hundred terms: its own rounding is far
	// below the bound's scale.)
	if math.Abs(k16-k32) > dkBound*(1+1e-9)+1e-12 {
		t.Errorf("the mean KL term moved by %g with the bf16-held reference, more than the mean value theorem allows, %g", math.Abs(k16-k32), dkBound)
	}
}
