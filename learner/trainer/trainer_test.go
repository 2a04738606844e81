package trainer

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

func tinyConfig(vocab int) model.Config {
	return model.Config{
		ModelType: "llama", HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, VocabSize: vocab, MaxPositionEmbeddings: 128,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu",
	}
}

func newLearner(t *testing.T, lr float64, seed uint64) *Learner {
	t.Helper()
	m, err := model.New(tinyConfig(20), seed)
	if err != nil {
		t.Fatal(err)
	}
	oc := optim.DefaultConfig()
	oc.LR = lr
	oc.WeightDecay = 0
	opt, err := optim.New(oc)
	if err != nil {
		t.Fatal(err)
	}
	return &Learner{Policy: m, Opt: opt}
}

// Supervised fine-tuning on a fixed text must drive the loss down by at
// least 90% in 200 steps.
func TestSFTLearnsFixedText(t *testing.T) {
	l := newLearner(t, 3e-3, 1)
	rng := rand.New(rand.NewPCG(3, 4))
	var seqs []Sequence
	for i := 0; i < 4; i++ {
		s := Sequence{Prompt: []int32{1}}
		for j := 0; j < 24; j++ {
			s.Response = append(s.Response, int32(2+rng.IntN(18)))
		}
		seqs = append(seqs, s)
	}
	first, _, err := l.SFTStep(seqs, 256)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 199; i++ {
		if _, _, err := l.SFTStep(seqs, 256); err != nil {
			t.Fatal(err)
		}
	}
	last, err := MeanNLL(l.Policy, seqs, 256)
	if err != nil {
		t.Fatal(err)
	}
	if last > 0.1*first {
		t.Fatalf("SFT loss went from %.4f to %.4f in 200 steps; want a drop of at least 90%%", first, last)
	}
	t.Logf("SFT loss %.4f -> %.4f", first, last)
}

// Packing by a small token budget must give the same update as one big
// micro-batch: the aggregation spans the mini-batch.
func TestRLStepIndependentOfMicroBatching(t *testing.T) {
	samples := rlSamples()
	var grads [2][]float32
	for k, budget := range []int{8, 4096} {
		l := newLearner(t, 1e-2, 5)
		cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: budget, PPOEpochs: 1, MiniBatches: 1}
		cfg.Loss.KLCoef = 0
		if _, err := l.RLStep(cfg, samples); err != nil {
			t.Fatal(err)
		}
		grads[k] = append([]float32(nil), l.Policy.GradData()...)
	}
	// Same arithmetic in another grouping: float32 rounding only, relative
	// to each entry, with a floor at 1e-5 of the largest entry for entries
	// that are sums of cancelling terms.
	scale := 0.0
	for _, g := range grads[1] {
		scale = math.Max(scale, math.Abs(float64(g)))
	}
	worst := 0.0
	for i := range grads[0] {
		d := math.Abs(float64(grads[0][i] - grads[1][i]))
		worst = math.Max(worst, d/(1e-5*scale+math.Abs(float64(grads[1][i]))))
	}
	t.Logf("worst relative difference %.3g (largest entry %.3g)", worst, scale)
	if worst > 1e-3 {
		t.Fatalf("gradient with micro-batches of 8 tokens differs from one micro-batch: worst relative difference %.3g", worst)
	}
}

func rlSamples() []RLSample {
	return []RLSample{
		{Sequence: Sequence{Prompt: []int32{1, 5}, Response: []int32{7, 8, 9, 3}}, Source: []loss.Source{loss.Internal, loss.External, loss.External, loss.Internal}, Advantage: 1},
		{Sequence: Sequence{Prompt: []int32{1, 5}, Response: []int32{6, 6, 2}}, Source: []loss.Source{loss.Internal, loss.Internal, loss.Internal}, Advantage: -1},
		{Sequence: Sequence{Prompt: []int32{1, 4}, Response: []int32{10, 11, 12, 13, 2}}, Source: []loss.Source{loss.Internal, loss.Untrained, loss.External, loss.External, loss.Internal}, Advantage: 0.5},
	}
}

// One RL step must raise the log-probability of positive-advantage external
// tokens and lower that of a negative-advantage trajectory's tokens.
func TestRLStepRaisesPositiveExternalTokens(t *testing.T) {
	l := newLearner(t, 1e-2, 9)
	samples := rlSamples()
	seqs := make([]Sequence, len(samples))
	for i := range samples {
		seqs[i] = samples[i].Sequence
	}
	before, _ := logProbs(CPU(l.Policy), seqs, 4096)
	cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 4096, PPOEpochs: 1, MiniBatches: 1}
	cfg.Loss.KLCoef = 0
	st, err := l.RLStep(cfg, samples)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := logProbs(CPU(l.Policy), seqs, 4096)
	for _, j := range []int{1, 2} {
		if after[0][j] <= before[0][j] {
			t.Errorf("external token %d of the positive trajectory: log-prob %.4f -> %.4f, want a rise", j, before[0][j], after[0][j])
		}
	}
	var b, a float64
	for j := range before[1] {
		b += float64(before[1][j])
		a += float64(after[1][j])
	}
	if a >= b {
		t.Errorf("negative trajectory: summed log-prob %.4f -> %.4f, want a fall", b, a)
	}
	if st.OptSteps != 1 || st.Tokens != 12 {
		t.Errorf("stats: %d optimiser steps over %d tokens, want 1 over 12", st.OptSteps, st.Tokens)
	}
}

func TestRLStepRejectsBadInput(t *testing.T) {
	l := newLearner(t, 1e-2, 9)
	cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 64, PPOEpochs: 1, MiniBatches: 1}
	s := rlSamples()[:1]
	s[0].Source = s[0].Source[:2]
	if _, err := l.RLStep(cfg, s); err == nil {
		t.Fatal("a sample with fewer sources than response tokens was accepted")
	}
	if _, err := l.RLStep(cfg, rlSamples()); err == nil {
		t.Fatal("a KL term without a reference model was accepted")
	}
}

// Response tokens marked in Skip are context only: with the last tokens of
// a response skipped, the gradient equals that of SFT on the response cut
// before them (attention is causal, so later tokens change nothing before).
func TestSFTSkipTrainsOnlyUnmarkedTokens(t *testing.T) {
	full := Sequence{Prompt: []int32{1, 4}, Response: []int32{5, 6, 7, 8, 9, 10, 11, 12}}
	full.Skip = []bool{false, false, false, false, false, true, true, true}
	cut := Sequence{Prompt: full.Prompt, Response: full.Response[:5]}
	var grads [2][]float32
	for k, s := range []Sequence{full, cut} {
		l := newLearner(t, 1e-3, 9)
		lossVal, _, err := l.SFTStep([]Sequence{s}, 256)
		if err != nil {
			t.Fatal(err)
		}
		if lossVal <= 0 {
			t.Fatalf("SFT loss %v; want a positive mean NLL", lossVal)
		}
		grads[k] = append([]float32(nil), l.Policy.GradData()...)
	}
	worst := 0.0
	for i := range grads[0] {
		// Same positions computed in a longer batch: float32 rounding only.
		worst = math.Max(worst, math.Abs(float64(grads[0][i]-grads[1][i])))
	}
	if worst > 1e-5 {
		t.Fatalf("gradient with skipped tokens differs from the cut sequence's by up to %.3g", worst)
	}
	l := newLearner(t, 1e-3, 9)
	bad := Sequence{Prompt: full.Prompt, Response: full.Response, Skip: []bool{true}}
	if _, _, err := l.SFTStep([]Sequence{bad}, 256); err == nil {
		t.Fatal("SFTStep accepted skip flags of the wrong length")
	}
}

// withBehavior returns samples carrying behaviour log-probs: pi_old of l's
// policy (as the learner computes it with micro-batches of budget tokens,
// so bit for bit) moved by shift on every Internal token, 0 elsewhere.
func withBehavior(t *testing.T, l *Learner, samples []RLSample, budget int, shift float32) []RLSample {
	t.Helper()
	seqs := make([]Sequence, len(samples))
	for i := range samples {
		seqs[i] = samples[i].Sequence
		seqs[i].Index = i
	}
	// pi_old as the step computes it: each of RLStep's virtual shards
	// (SingleShards: the mini-batch whole) packed on its own (a sequence
	// packed with others may round otherwise).
	old := make([][]float32, len(seqs))
	for _, order := range shardSamples(seqs, 1, SingleShards)[0] {
		if err := logProbsInto(old, CPU(l.Policy), seqs, order, budget); err != nil {
			t.Fatal(err)
		}
	}
	out := append([]RLSample(nil), samples...)
	for i := range out {
		b := make([]float32, len(out[i].Response))
		for j, s := range out[i].Source {
			if s == loss.Internal {
				b[j] = old[i][j] + shift
			}
		}
		out[i].Behavior = b
	}
	return out
}

// RLStep measures the train-inference mismatch over the policy's tokens of
// the samples that carry behaviour log-probs: 0 when the sampler's numbers
// are the learner's, the shift when they are moved by one, with the k1 and
// k3 estimates of KL(pi_behav || pi_old) it implies.
func TestRLStepMeasuresMismatch(t *testing.T) {
	cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 4096, PPOEpochs: 1, MiniBatches: 1}
	cfg.Loss.KLCoef = 0
	l := newLearner(t, 1e-2, 9)
	st, err := l.RLStep(cfg, withBehavior(t, l, rlSamples(), cfg.MicroBatchTokens, 0))
	if err != nil {
		t.Fatal(err)
	}
	// Internal tokens of rlSamples: 2 + 3 + 2.
	if m := st.Mismatch; m.Tokens != 7 || m.Sequences != 3 || m.AbsMax != 0 || m.AbsMean != 0 || m.KL != 0 || m.KLK3 != 0 || st.OldLogMAE != 0 {
		t.Errorf("behaviour = pi_old: mismatch %+v, OldLogMAE %v, want 7 tokens of 3 sequences and zeros", m, st.OldLogMAE)
	}

	l = newLearner(t, 1e-2, 9)
	s := withBehavior(t, l, rlSamples(), cfg.MicroBatchTokens, 0.1)
	s[2].Behavior = nil // not known: left out of the measurement
	st, err = l.RLStep(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	m := st.Mismatch
	// Each |delta| is 0.1 up to the float32 rounding of pi_old + 0.1 (half
	// an ulp of numbers below 8: 5e-7).
	const tol = 1e-6
	k3 := math.Exp(-0.1) - 1 + 0.1
	if m.Tokens != 5 || m.Sequences != 2 || math.Abs(m.AbsMean-0.1) > tol || math.Abs(m.AbsMax-0.1) > tol ||
		math.Abs(m.KL-0.1) > tol || math.Abs(m.KLK3-k3) > tol || st.OldLogMAE != m.AbsMean {
		t.Errorf("behaviour = pi_old + 0.1 on two samples: mismatch %+v (OldLogMAE %v), want 5 tokens of 2 sequences, |delta| 0.1, KL 0.1, k3 %.6g", m, st.OldLogMAE, k3)
	}
}

// The rollout correction reaches the update: with pi_behav = pi_old it
// changes nothing; with every policy token's rho = e^0.5 above the cap
// 1.2 (token level, truncate) and only policy tokens in the loss (External
// masked, no KL), the loss is linear in the weights, so the gradient is
// 1.2 times the uncorrected one. A sample without behaviour log-probs is
// refused while the correction is on.
func TestRLStepRolloutCorrection(t *testing.T) {
	base := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 8, PPOEpochs: 1, MiniBatches: 1}
	base.Loss.KLCoef, base.Loss.External = 0, loss.ExternalMask
	on := base
	on.Loss.RolloutCorrection = loss.RolloutCorrection{Level: loss.CorrectionToken, Cap: 1.2, Mode: loss.CorrectionTruncate}
	grad := func(cfg RLConfig, shift float32) []float32 {
		l := newLearner(t, 1e-2, 5)
		if _, err := l.RLStep(cfg, withBehavior(t, l, rlSamples(), cfg.MicroBatchTokens, shift)); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), l.Policy.GradData()...)
	}
	off := grad(base, 0)
	same := grad(on, 0)
	scaled := grad(on, -0.5)
	scale := 0.0
	for _, g := range off {
		scale = math.Max(scale, math.Abs(float64(g)))
	}
	for i := range off {
		if same[i] != off[i] {
			t.Fatalf("rho = 1: gradient entry %d is %v with the correction, %v without", i, same[i], off[i])
		}
		// float32 rounding of the chained products: relative 1e-5 with a
		// floor at 1e-6 of the largest entry.
		if want := 1.2 * float64(off[i]); math.Abs(float64(scaled[i])-want) > 1e-5*math.Abs(want)+1e-6*scale {
			t.Fatalf("rho = e^0.5 truncated at 1.2: gradient entry %d is %v, want 1.2 x %v", i, scaled[i], off[i])
		}
	}

	l := newLearner(t, 1e-2, 5)
	s := withBehavior(t, l, rlSamples(), on.MicroBatchTokens, 0)
	s[1].Behavior = nil
	if _, err := l.RLStep(on, s); err == nil || !strings.Contains(err.Error(), "sample 1 has no behaviour log-probs") {
		t.Fatalf("a sample without behaviour log-probs under the correction: %v", err)
	}
	s[1].Behavior = []float32{0}
	if _, err := l.RLStep(base, s); err == nil || !strings.Contains(err.Error(), "1 behaviour log-probs") {
		t.Fatalf("a sample with 1 behaviour log-prob for 3 tokens: %v", err)
	}
}

// RLStep splits the mismatch by each token's version lag: the tokens
// whose behaviour log-probs are shifted by 0.2 (lag 1) show that shift,
// the others (lag 0) none, and the two parts add up to the whole.
func TestRLStepMismatchByLag(t *testing.T) {
	cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 4096, PPOEpochs: 1, MiniBatches: 1}
	cfg.Loss.KLCoef = 0
	l := newLearner(t, 1e-2, 9)
	s := withBehavior(t, l, rlSamples(), cfg.MicroBatchTokens, 0)
	lag1 := 0
	for i := range s {
		s[i].Lag = make([]int32, len(s[i].Response))
		for j := range s[i].Response {
			if j%2 == 1 {
				s[i].Lag[j] = 1
				s[i].Behavior[j] += 0.2
				if s[i].Source[j] == loss.Internal {
					lag1++
				}
			}
		}
	}
	st, err := l.RLStep(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	by := st.MismatchByLag
	if len(by) != 2 {
		t.Fatalf("mismatch by lag has lags %v, want 0 and 1", by)
	}
	if m := by[0]; m.AbsMax != 0 || m.Tokens+by[1].Tokens != st.Mismatch.Tokens {
		t.Errorf("lag 0: %+v, want no mismatch, and its tokens with lag 1's (%d) the whole's %d", m, by[1].Tokens, st.Mismatch.Tokens)
	}
	const tol = 1e-6 // float32 rounding of pi_old + 0.2
	if m := by[1]; m.Tokens != lag1 || math.Abs(m.AbsMean-0.2) > tol || math.Abs(m.KL-0.2) > tol {
		t.Errorf("lag 1: %+v, want %d tokens shifted by 0.2 (k1 0.2)", m, lag1)
	}
	s[0].Lag = s[0].Lag[1:]
	if _, err := l.RLStep(cfg, s); err == nil || !strings.Contains(err.Error(), "version lags") {
		t.Errorf("a sample with fewer lags than tokens: %v, want an error naming the version lags", err)
	}
}
