package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
)

// lossBatch makes per-row loss inputs of M rows in trajectories of about
// 40 tokens, mixing policy, collaborator and untrained tokens.
func lossBatch(r *rand.Rand, M int) (loss.Inputs, []int32) {
	in := loss.Inputs{
		OldLogProb: make([]float32, M), RefLogProb: make([]float32, M), Advantage: make([]float32, M),
		Source: make([]loss.Source, M), Seq: make([]int32, M),
	}
	targets := make([]int32, M)
	adv := float32(1)
	for i := range M {
		in.Seq[i] = int32(i / 40)
		if i%40 == 0 {
			adv = float32(r.NormFloat64())
		}
		in.Advantage[i] = adv
		switch k := r.IntN(10); {
		case k < 6:
			in.Source[i] = loss.Internal
		case k < 9:
			in.Source[i] = loss.External
		default:
			in.Source[i] = loss.Untrained
		}
		in.OldLogProb[i] = -float32(r.ExpFloat64())
		in.RefLogProb[i] = in.OldLogProb[i] - 0.05*float32(r.NormFloat64())
	}
	return in, targets
}

// LM head tolerances: the logits are GEMM outputs (float32 sums of C
// products in another order than OpenBLAS's, a few ulp of sum|x||w|), the
// row sums are float64 on both sides and exp is expf against exp32 (2
// ulp), so log-probabilities agree to ~1e-5 absolute at these magnitudes;
// the gradients go through two more GEMMs over V or M terms and are held
// to 1e-4 of their largest magnitude.
func TestParityLMHead(t *testing.T) {
	dv := gpu(t, true)
	r := rand.New(rand.NewPCG(41, 42))
	M, C, V := 300, 64, 1000
	xh, w := randn(r, M*C, 1), randn(r, V*C, 0.3)
	in, targets := lossBatch(r, M)
	for i := range targets {
		targets[i] = int32(r.IntN(V))
		if in.Source[i] == loss.Untrained && i%2 == 0 {
			targets[i] = -1 // a row without a target: logp 0, no gradient
		}
	}
	// A chunk of 64 rows: the 300 rows take 5 chunks, the last one short.
	head, err := dv.NewLMHead(V, C, 4*uint64(V)*64)
	if err != nil {
		t.Fatal(err)
	}
	defer head.Free()
	if head.ChunkRows() != 64 {
		t.Fatalf("chunk rows %d, want 64", head.ChunkRows())
	}
	gx, gw, gt := upload(t, dv, xh), upload(t, dv, w), uploadI32(t, dv, targets)

	logp, lse, ent := make([]float32, M), make([]float32, M), make([]float32, M)
	model.HeadForward(logp, lse, ent, xh, w, targets, M, C, V)
	must(t, head.Forward(gx, gw, gt, M))
	glogp, gent := make([]float32, M), make([]float32, M)
	must(t, head.LogProbs(glogp))
	must(t, head.Entropy(gent))
	closeTo(t, "lmhead logp", glogp, logp, 1e-5, 1e-5)
	closeTo(t, "lmhead entropy", gent, ent, 1e-5, 1e-5)

	// The whole fused loss against Forward + loss.Compute + Backward on the CPU.
	cfg := loss.DefaultConfig()
	cin := in
	cin.LogProb, cin.Entropy = logp, ent
	want, err := loss.Compute(cfg, cin)
	if err != nil {
		t.Fatal(err)
	}
	dw0 := randn(r, V*C, 0.1) // dw accumulates
	dxh, dw := make([]float32, M*C), append([]float32(nil), dw0...)
	model.HeadBackward(dxh, dw, xh, w, targets, lse, want.GradLogProb, M, C, V)
	gdxh, gdw := alloc(t, dv, F32, M*C), upload(t, dv, dw0)
	got, err := head.Loss(cfg, in, gx, gw, gt, gdxh, gdw)
	if err != nil {
		t.Fatal(err)
	}
	if d := math.Abs(got.Loss - want.Loss); d > 1e-5*(1+math.Abs(want.Loss)) {
		t.Errorf("fused loss %.8g, CPU %.8g", got.Loss, want.Loss)
	}
	closeTo(t, "lmhead dxh", download(t, gdxh), dxh, 1e-4, 1e-4*maxAbs(dxh))
	closeTo(t, "lmhead dw", download(t, gdw), dw, 1e-4, 1e-4*maxAbs(dw))
}

// TestGPULMHeadMemory runs the fused loss on 16,384 tokens of Qwen's
// 151,936-token vocabulary (hidden size 896, Qwen2.5-0.5B) and checks,
// from the Device's allocation counters, that it needs less than 1 GiB
// beyond its inputs and outputs (the full logits would be 9.3 GiB in
// float32). It also reports the time of one forward+backward.
func TestGPULMHeadMemory(t *testing.T) {
	dv := ownGPU(t)
	r := rand.New(rand.NewPCG(43, 44))
	M, C, V := 16384, 896, 151936
	xh, w := randn(r, M*C, 1), randn(r, V*C, 0.02)
	in, targets := lossBatch(r, M)
	for i := range targets {
		targets[i] = int32(r.IntN(V))
	}
	gx, gw, gt := upload(t, dv, xh), upload(t, dv, w), uploadI32(t, dv, targets)
	gdxh, gdw := alloc(t, dv, F32, M*C), alloc(t, dv, F32, V*C)
	must(t, gdw.Zero())
	must(t, dv.Sync())
	before, _ := dv.MemStats()
	dv.ResetPeak()
	head, err := dv.NewLMHead(V, C, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer head.Free()
	run := func() {
		if _, err := head.Loss(loss.DefaultConfig(), in, gx, gw, gt, gdxh, gdw); err != nil {
			t.Fatal(err)
		}
		must(t, dv.Sync())
	}
	w16 := alloc(t, dv, BF16, V*C)
	must(t, dv.CastToBF16(w16, gw))
	must(t, dv.Sync())
	flops := 4 * 2 * float64(M) * float64(V) * float64(C) // logits twice, dxh, dw
	for _, prec := range []string{"float32", "bfloat16 GEMMs"} {
		if prec != "float32" {
			must(t, head.UseBF16(w16))
		}
		run() // warm-up
		start := time.Now()
		const reps = 3
		for range reps {
			run()
		}
		el := time.Since(start) / reps
		_, peak := dv.MemStats()
		extra := peak - before - w16.Bytes()
		t.Logf("fused LM head + AIPO loss, %d tokens x %d vocab, C=%d, %s: %.1f ms per forward+backward (%.1f TFLOP/s in its GEMMs), peak extra memory %.0f MiB in chunks of %d rows (full logits: %.1f GiB)",
			M, V, C, prec, el.Seconds()*1e3, flops/el.Seconds()/1e12, float64(extra)/(1<<20), head.ChunkRows(), float64(M)*float64(V)*4/(1<<30))
		if extra >= 1<<30 {
			t.Errorf("%s: peak extra memory %d bytes, want below 1 GiB", prec, extra)
		}
	}
}
