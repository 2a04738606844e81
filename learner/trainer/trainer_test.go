package trainer

import (
	"math"
	"math/rand/v2"
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
