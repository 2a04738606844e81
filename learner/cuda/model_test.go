package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/bf16"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
)

// tinyModel is a random model of the tiny Qwen2 fixture configuration (2
// layers, GQA, QKV bias, tied embeddings).
func tinyModel(t *testing.T, seed uint64) *model.Model {
	t.Helper()
	return fixtureModel(t, "tiny_qwen2", seed)
}

// fixtureModel is a random model of the configuration of the CPU model's
// fixture NAME (../model/testdata/NAME_config.json).
func fixtureModel(t *testing.T, name string, seed uint64) *model.Model {
	t.Helper()
	cfg, err := model.LoadConfig("../model/testdata/" + name + "_config.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestParityModelStep runs one training step of the tiny Qwen2-shaped
// fixture configuration (2 layers, GQA, QKV bias, tied embeddings) through
// the GPU model and the CPU model with the AIPO loss and compares the
// log-probabilities, the loss and every parameter's gradient. Tolerances:
// each operation agrees as its own parity test says (1e-5 relative for the
// element kernels, GEMM-order differences of a few ulp); through two
// layers and the loss the differences compound to ~1e-5 of a gradient's
// largest magnitude, so gradients are held to 1e-3 of it per tensor (the
// same bound the PyTorch fixtures use for the CPU model) and log-probs to
// 1e-4.
func TestParityModelStep(t *testing.T) { parityModelStep(t, gpu(t, true), tinyModel(t, 7)) }

// TestParityModelStepLlama3 is TestParityModelStep for the tiny Llama 3
// fixture configuration (rope_scaling "llama3", tied embeddings, no bias):
// the kernels rotate with the rescaled table the host uploads. Same
// tolerances.
func TestParityModelStepLlama3(t *testing.T) {
	parityModelStep(t, gpu(t, true), fixtureModel(t, "tiny_llama3", 7))
}

// qwen3Model is a random model of the tiny Qwen3 fixture configuration (2
// layers, GQA, head_dim 32 where hidden/heads is 16, per-head q/k norms, no
// bias, untied head). Its q_norm and k_norm weights are drawn from [0.5,
// 1.5) rather than left at one, so that a kernel that swapped them, or
// applied one to the other's heads, would show.
func qwen3Model(t *testing.T, seed uint64) *model.Model {
	t.Helper()
	m := fixtureModel(t, "tiny_qwen3", seed)
	r := rand.New(rand.NewPCG(seed, 73))
	n := 0
	for _, p := range m.Params() {
		if strings.HasSuffix(p.Name, "q_norm.weight") || strings.HasSuffix(p.Name, "k_norm.weight") {
			for i := range p.Data {
				p.Data[i] = 0.5 + r.Float32()
			}
			n++
		}
	}
	if n != 2*m.Config().NumHiddenLayers {
		t.Fatalf("the tiny Qwen3 model has %d q/k norm weights, want 2 per layer", n)
	}
	return m
}

// TestParityModelStepQwen3 is TestParityModelStep for the tiny Qwen3
// fixture configuration: the q/k norm kernels in the forward pass, and in
// the backward pass with q_norm's and k_norm's gradients among those
// compared. The norm adds per-head float64 sums (one ulp of float32 apart
// from the CPU's) and a weight gradient summed in another order, well
// inside the same tolerances: log-probs 1e-4, every gradient 1e-3 of its
// tensor's largest magnitude.
func TestParityModelStepQwen3(t *testing.T) {
	parityModelStep(t, gpu(t, true), qwen3Model(t, 7))
}

// TestParityModelStepRolloutCorrection is TestParityModelStep with the
// loss's rollout correction on (token level, truncate at 1.2; the
// sampler's log-probabilities 0.3 from pi_old at random on either side, so
// that some weights are truncated and some not): the device's log-probs
// feed the same weighted loss as the CPU's. Same tolerances.
func TestParityModelStepRolloutCorrection(t *testing.T) {
	lc := loss.DefaultConfig()
	lc.RolloutCorrection = loss.RolloutCorrection{Level: loss.CorrectionToken, Cap: 1.2, Mode: loss.CorrectionTruncate}
	parityModelStepLoss(t, gpu(t, true), tinyModel(t, 7), lc)
}

func parityModelStep(t *testing.T, dv *Device, m *model.Model) {
	t.Helper()
	parityModelStepLoss(t, dv, m, loss.DefaultConfig())
}

func parityModelStepLoss(t *testing.T, dv *Device, m *model.Model, lc loss.Config) {
	t.Helper()
	cfg := m.Config()
	g, err := dv.NewModel(m)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()

	r := rand.New(rand.NewPCG(51, 52))
	lens := []int{17, 40, 7}
	N := 64
	b := model.Batch{Tokens: make([]int32, N), SeqLens: lens}
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(cfg.VocabSize))
	}
	in, _ := lossBatch(r, N)
	if lc.RolloutCorrection.On() {
		in.BehaviorLogProb = make([]float32, N)
		for i := range in.BehaviorLogProb {
			in.BehaviorLogProb[i] = in.OldLogProb[i] + 0.3*float32(2*r.IntN(2)-1)
		}
	}
	lay, err := model.Layout(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	for i, tg := range lay.Targets {
		if tg < 0 {
			in.Source[i] = loss.Untrained
		}
	}
	lossOf := func(out *float64) LossFunc {
		return func(lp, ent []float32) ([]float32, error) {
			x := in
			x.LogProb, x.Entropy = lp, ent
			o, err := loss.Compute(lc, x)
			*out = o.Loss
			return o.GradLogProb, err
		}
	}

	var cpuLoss, gpuLoss float64
	a, err := m.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	grad, err := lossOf(&cpuLoss)(a.LogProbs, a.Entropy)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), a.LogProbs...)
	if err := m.Backward(a, grad); err != nil {
		t.Fatal(err)
	}
	got, _, err := g.ForwardBackward(b, lossOf(&gpuLoss))
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "model log-probs", got, want, 1e-4, 1e-4)
	if math.Abs(gpuLoss-cpuLoss) > 1e-4*(1+math.Abs(cpuLoss)) {
		t.Errorf("loss: GPU %.8g, CPU %.8g", gpuLoss, cpuLoss)
	}
	flat := make([]float32, len(m.GradData()))
	must(t, g.Grads(flat))
	base := uintptr(unsafe.Pointer(&m.GradData()[0]))
	for _, tn := range m.Grads() {
		off := int(uintptr(unsafe.Pointer(&tn.Data[0]))-base) / 4
		closeTo(t, tn.Name, flat[off:off+len(tn.Data)], tn.Data, 1e-3, 1e-3*maxAbs(tn.Data))
	}
}

// TestParityModelStepBF16 is TestParityModelStep with bfloat16 GEMM
// operands (UseBF16). Rounding each operand to 8 significant bits moves a
// dot product by about 2^-9 of sum|a||b| (the errors are independent, so
// much less in practice); through two layers the log-probs stay within
// 0.05 and every gradient tensor within 5% of its norm (relative L2 error)
// of the float32 CPU model.
func TestParityModelStepBF16(t *testing.T) { parityModelStepBF16(t, gpu(t, true), tinyModel(t, 7)) }

// TestParityModelStepQwen3BF16 is TestParityModelStepBF16 for the tiny
// Qwen3 configuration: the q/k norm reads the float32 output of a
// bfloat16 GEMM and its weights stay float32. Same tolerances.
func TestParityModelStepQwen3BF16(t *testing.T) {
	parityModelStepBF16(t, gpu(t, true), qwen3Model(t, 7))
}

func parityModelStepBF16(t *testing.T, dv *Device, m *model.Model) {
	t.Helper()
	g, err := dv.NewModel(m)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	must(t, g.UseBF16())
	r := rand.New(rand.NewPCG(53, 54))
	b := model.Batch{Tokens: make([]int32, 48), SeqLens: []int{30, 18}}
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(m.Config().VocabSize))
	}
	grad := func(lp, _ []float32) ([]float32, error) {
		out := make([]float32, len(lp))
		for i := range out {
			out[i] = -1 / float32(len(lp))
		}
		return out, nil
	}
	a, err := m.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), a.LogProbs...)
	gw, _ := grad(want, nil)
	if err := m.Backward(a, gw); err != nil {
		t.Fatal(err)
	}
	got, _, err := g.ForwardBackward(b, grad)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "bf16 log-probs", got, want, 0, 0.05)
	flat := make([]float32, len(m.GradData()))
	must(t, g.Grads(flat))
	base := uintptr(unsafe.Pointer(&m.GradData()[0]))
	worst := 0.0
	for _, tn := range m.Grads() {
		off := int(uintptr(unsafe.Pointer(&tn.Data[0]))-base) / 4
		var diff, norm float64
		for i, w := range tn.Data {
			d := float64(flat[off+i] - w)
			diff += d * d
			norm += float64(w) * float64(w)
		}
		rel := math.Sqrt(diff / max(norm, 1e-30))
		if rel > 0.05 {
			t.Errorf("%s: relative L2 error %.3g of the bf16 gradient, want <= 0.05", tn.Name, rel)
		}
		worst = max(worst, rel)
		if strings.Contains(tn.Name, "_norm.") && !strings.Contains(tn.Name, "layernorm") {
			t.Logf("%s: relative L2 error %.3g of the bf16 gradient", tn.Name, rel)
		}
	}
	t.Logf("bf16 gradients: worst relative L2 error %.3g over %d tensors (want <= 0.05)", worst, len(m.Grads()))
}

// TestGPUTrainStepThroughput times one forward+backward of a randomly
// initialised Qwen2.5-0.5B-shaped model (24 layers, hidden 896, 14/2
// heads, 151,936-token vocabulary) over 4 packed sequences of 1,024 tokens
// and reports tokens/s and the model FLOP utilisation against the H200's
// dense bf16 peak (989 TFLOP/s), in float32 and with bfloat16 GEMM
// operands (UseBF16), to set beside scripts/torch_baselines.py's PyTorch
// eager bf16 figure for the same shapes.
func TestGPUTrainStepThroughput(t *testing.T) {
	trainStepThroughput(t, "Qwen2.5-0.5B", model.Config{ModelType: "qwen2", HiddenSize: 896, IntermediateSize: 4864,
		NumHiddenLayers: 24, NumAttentionHeads: 14, NumKeyValueHeads: 2, VocabSize: 151936, MaxPositionEmbeddings: 4096,
		RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, HiddenAct: "silu"})
}

// TestGPUTrainStepThroughputQwen3 is TestGPUTrainStepThroughput for a
// Qwen3-0.6B-shaped model (28 layers, hidden 1024, 16/8 heads of head_dim
// 128, so 2048 query columns, SwiGLU 3072, tied 151,936-token vocabulary,
// per-head q/k norms): the q/k norm kernels at a real model's shapes.
func TestGPUTrainStepThroughputQwen3(t *testing.T) {
	trainStepThroughput(t, "Qwen3-0.6B", model.Config{ModelType: "qwen3", HiddenSize: 1024, IntermediateSize: 3072,
		NumHiddenLayers: 28, NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 151936,
		MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, HiddenAct: "silu"})
}

func trainStepThroughput(t *testing.T, shapes string, cfg model.Config) {
	dv := gpu(t, true)
	m, err := model.New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := dv.NewModel(m)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	lens := []int{1024, 1024, 1024, 1024}
	N := 4096
	r := rand.New(rand.NewPCG(61, 62))
	b := model.Batch{Tokens: make([]int32, N), SeqLens: lens}
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(cfg.VocabSize))
	}
	nll := func(lp, _ []float32) ([]float32, error) {
		grad := make([]float32, len(lp))
		for i := range grad {
			grad[i] = -1 / float32(N)
		}
		return grad, nil
	}
	// 6 FLOPs per weight and token, and attention's QK^T and PV (2 FLOPs
	// per query column and causal pair each, times 3 with the backward).
	C, F, L, V := float64(cfg.HiddenSize), float64(cfg.IntermediateSize), float64(cfg.NumHiddenLayers), float64(cfg.VocabSize)
	QD, KD := float64(cfg.NumAttentionHeads*cfg.Head()), float64(cfg.NumKeyValueHeads*cfg.Head())
	mm := L*(C*(QD+2*KD)+QD*C+3*C*F) + V*C
	pairs := 4 * 1024.0 * 1025 / 2
	flops := 6*mm*float64(N) + 12*L*QD*pairs
	for _, prec := range []string{"float32", "bfloat16 GEMMs"} {
		if prec != "float32" {
			must(t, g.UseBF16())
		}
		if _, _, err := g.ForwardBackward(b, nll); err != nil { // warm-up
			t.Fatal(err)
		}
		const reps = 3
		start := time.Now()
		for range reps {
			if _, _, err := g.ForwardBackward(b, nll); err != nil {
				t.Fatal(err)
			}
		}
		el := time.Since(start).Seconds() / reps
		t.Logf("train step, %s shapes, %d tokens (4 x 1024), %s: %.1f ms, %.0f tokens/s, %.1f TFLOP/s, MFU %.2f%% of 989 TFLOP/s bf16",
			shapes, N, prec, el*1e3, float64(N)/el, flops/el/1e12, 100*flops/el/989e12)
	}
}

// TestParityGreedyDecode serves the tiny Qwen2 configuration with
// learner/engine on the CPU and on the GPU (Decoder) and checks that greedy
// decoding gives the same 64 tokens for each of two prompts sent at once,
// so that batched prefill and decode steps through the GPU caches are
// covered.
func TestParityGreedyDecode(t *testing.T) { parityGreedyDecode(t, gpu(t, true), tinyModel(t, 9)) }

// TestParityGreedyDecodeLlama3 is TestParityGreedyDecode for the tiny
// Llama 3 configuration: 64 greedy tokens reach positions far past its
// original context of 16, where the rescaled frequencies matter. The
// weights (norms aside) are scaled up eightfold, as the CPU model's
// peakedModel does, so that the next-token distributions are peaked: then
// the greedy tokens depend on the positions (with the unscaled table they
// change) and have no near-ties that rounding could flip.
func TestParityGreedyDecodeLlama3(t *testing.T) {
	parityGreedyDecode(t, gpu(t, true), peaked(fixtureModel(t, "tiny_llama3", 9)))
}

// TestParityGreedyDecodeQwen3 is TestParityGreedyDecodeLlama3 for the tiny
// Qwen3 configuration (weights but the norms scaled eightfold for peaked
// distributions): the decoder normalises each new query and key head
// before rotating it and caches the normalised, rotated keys, as the CPU
// engine does.
func TestParityGreedyDecodeQwen3(t *testing.T) {
	parityGreedyDecode(t, gpu(t, true), peaked(qwen3Model(t, 9)))
}

// TestParityDecodeLogitsQwen3 compares the decoder's logits with the CPU
// model's through a batched prefill of two prompts and 12 cached steps
// (each sequence extended by the CPU's greedy token), so that a mismatch
// shows as a number before it could flip a token. Tolerance: the logits
// come out of the same layers as TestParityModelStepQwen3's log-probs, a
// few float32 ulp per operation compounded through two layers, held to
// 1e-4 of the largest logit's magnitude.
func TestParityDecodeLogitsQwen3(t *testing.T) {
	dv := gpu(t, true)
	m := qwen3Model(t, 11)
	V := m.Config().VocabSize
	dec, err := dv.NewDecoder(m)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Free()
	cc := []*model.KVCache{m.NewKVCache(), m.NewKVCache()}
	gc := []backend.Cache{dec.NewCache(), dec.NewCache()}
	next := [][]int32{{1, 5, 9, 17, 3}, {2, 2, 40, 7, 11, 60, 13, 8, 90}}
	var want, got []float32
	for step := range 13 {
		wl, err := m.Extend(cc, next, nil)
		if err != nil {
			t.Fatal(err)
		}
		gl, err := dec.Extend(gc, next, nil)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		want, got = append(want, wl...), append(got, gl...)
		for i := range next {
			next[i] = []int32{int32(argmax(wl[i*V : (i+1)*V]))}
		}
	}
	closeTo(t, "qwen3 decoder logits (prefill and 12 cached steps)", got, want, 0, 1e-4*maxAbs(want))
}

// TestParityDecodeBF16 compares a bfloat16 decoder (NewDecoderBF16:
// bfloat16 projections, head and KV cache) with the CPU model in float32,
// through a batched prefill of two prompts and 12 cached steps, on each
// family, the model's weights rounded to bfloat16 first (as a bfloat16
// checkpoint holds them, so that the two differ by the decoder's
// roundings alone). Tolerance: model.BF16LogitBound, the bound every
// bfloat16 decoder is held to (TestDecodeBF16Tolerance holds the CPU's).
// Its caches take half the bytes a position of a float32 decoder's.
func TestParityDecodeBF16(t *testing.T) {
	dv := gpu(t, true)
	for name, m := range map[string]*model.Model{"tiny_qwen2": tinyModel(t, 13), "tiny_qwen3": qwen3Model(t, 13),
		"tiny_llama3": fixtureModel(t, "tiny_llama3", 13)} {
		t.Run(name, func(t *testing.T) {
			for _, p := range m.Params() {
				for i, v := range p.Data {
					p.Data[i] = bf16.Round(v)
				}
			}
			V := m.Config().VocabSize
			dec, err := dv.NewDecoderBF16(m)
			must(t, err)
			defer dec.Free()
			f32, err := dv.NewDecoder(m)
			must(t, err)
			half, full := dec.BytesPerToken(), f32.BytesPerToken()
			must(t, f32.Free())
			if 2*half != full {
				t.Errorf("a bfloat16 decoder's cache takes %d bytes a position, a float32 one's %d: not half", half, full)
			}
			cc := []*model.KVCache{m.NewKVCache(), m.NewKVCache()}
			gc := []backend.Cache{dec.NewCache(), dec.NewCache()}
			next := [][]int32{{1, 5, 9, 17, 3}, {2, 2, 40, 7, 11, 60, 13, 8, 90}}
			tol, worst := model.BF16LogitBound(m), 0.0
			for step := range 13 {
				wl, err := m.Extend(cc, next, nil)
				must(t, err)
				gl, err := dec.Extend(gc, next, nil)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				for i := range wl {
					d := math.Abs(float64(gl[i] - wl[i]))
					if d > tol || math.IsNaN(d) {
						t.Fatalf("step %d: logit %d is %g in bfloat16, %g in float32: beyond the bound %.3g", step, i, gl[i], wl[i], tol)
					}
					worst = max(worst, d)
				}
				for i := range next {
					next[i] = []int32{int32(argmax(wl[i*V : (i+1)*V]))}
				}
			}
			t.Logf("%s: largest logit difference %.3g, bound %.3g", name, worst, tol)
		})
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// peaked scales m's weights but the norms eightfold (as the CPU model's
// peakedModel does), so that the next-token distributions are peaked and
// greedy decoding has no near-ties that rounding could flip.
func peaked(m *model.Model) *model.Model {
	for _, p := range m.Params() {
		if !strings.HasSuffix(p.Name, "norm.weight") {
			for i := range p.Data {
				p.Data[i] *= 8
			}
		}
	}
	return m
}

// TestSupports needs no device: the model families the kernels compute
// (Qwen2, Llama 3, Qwen3 with its q/k norm) pass; a configuration that is
// none of them is refused with the configuration's own error.
func TestSupports(t *testing.T) {
	for _, name := range []string{"tiny_qwen2", "tiny_llama3", "tiny_qwen3"} {
		if err := Supports(fixtureModel(t, name, 1).Config()); err != nil {
			t.Errorf("Supports(%s) = %v, want nil", name, err)
		}
	}
	cfg := fixtureModel(t, "tiny_qwen2", 1).Config()
	cfg.ModelType = "gpt2"
	if err := Supports(cfg); err == nil || !strings.Contains(err.Error(), "model_type") {
		t.Errorf("Supports(gpt2) = %v, want the model_type error", err)
	}
}

func parityGreedyDecode(t *testing.T, dv *Device, m *model.Model) {
	t.Helper()
	dec, err := dv.NewDecoder(m)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Free()
	cpu, err := engine.New(m, nil, 1, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	gpuEng, err := engine.NewOn(dec, nil, 1, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer gpuEng.Close()
	prompts := [][]int32{{1, 5, 9, 17, 3}, {2, 2, 40, 7, 11, 60, 13, 8, 90}}
	req := func(p []int32) engine.Request {
		return engine.Request{Prefix: p, Params: sampling.Params{Temperature: 0, MaxTokens: 64}}
	}
	generate := func(e *engine.Engine) [][]int32 {
		out := make([][]int32, len(prompts))
		var wg sync.WaitGroup
		for i, p := range prompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.Generate(context.Background(), req(p))
				if err != nil {
					t.Error(err)
					return
				}
				out[i] = res.Tokens
			}()
		}
		wg.Wait()
		return out
	}
	want, got := generate(cpu), generate(gpuEng)
	for i := range prompts {
		if len(want[i]) != 64 || !slices.Equal(got[i], want[i]) {
			t.Errorf("prompt %d: GPU greedy tokens %v, CPU %v", i, got[i], want[i])
		}
	}
}

// TestGPUScratchReuse checks that a second training step and a second
// decoding step take their activations from the scratch pool: the device
// memory held does not grow, and ReleaseScratch gives it back.
func TestGPUScratchReuse(t *testing.T) {
	dv := ownGPU(t)
	m := tinyModel(t, 11)
	g, err := dv.NewModel(m)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	b := model.Batch{Tokens: []int32{1, 2, 3, 4, 5, 6, 7, 8}, SeqLens: []int{5, 3}}
	half := func(lp, _ []float32) ([]float32, error) {
		out := make([]float32, len(lp))
		for i := range out {
			out[i] = 0.5
		}
		return out, nil
	}
	step := func() uint64 {
		if _, _, err := g.ForwardBackward(b, half); err != nil {
			t.Fatal(err)
		}
		live, _ := dv.MemStats()
		return live
	}
	first := step()
	if again := step(); again != first {
		t.Errorf("device memory held after a second step: %d bytes, after the first %d", again, first)
	}
	must(t, dv.ReleaseScratch())
	if live, _ := dv.MemStats(); live >= first {
		t.Errorf("ReleaseScratch left %d bytes held (%d before)", live, first)
	}
}
