package engine

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// tolLogProb bounds |engine log-prob - learner log-prob|. Both are
// logit - LogSumExp(logits) with the same arithmetic; the logits differ
// only by float32 rounding of differently shaped matrix products (cached
// decode against the whole sequence at once), observed below 1e-4 on
// stories260K; 5e-4 is a margin of five and far below the 1e-2 that a
// wrong position or mask produces.
const tolLogProb = 5e-4

// tinyConfig is a small Qwen2-style model over the built-in vocabulary.
func tinyConfig() model.Config {
	return model.Config{ModelType: "qwen2", HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, VocabSize: tokenizer.BuiltinVocabSize, MaxPositionEmbeddings: 256, RMSNormEps: 1e-6,
		RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}
}

// peaked returns a random model whose weights are scaled up so that its
// next-token distributions are far from uniform: greedy decoding has no
// near-ties for rounding to flip.
func peaked(t testing.TB, cfg model.Config, seed uint64) *model.Model {
	t.Helper()
	m, err := model.New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		if !strings.HasSuffix(p.Name, "norm.weight") {
			for i := range p.Data {
				p.Data[i] *= 8
			}
		}
	}
	return m
}

func start(t testing.TB, m *model.Model, tok tokenizer.Tokenizer, cfg Config) *Engine {
	t.Helper()
	e, err := New(m, tok, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// testCtx bounds every test's waits.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// greedyRecompute is the reference: n greedy tokens after prefix, each
// from model.Logits over the whole sequence so far.
func greedyRecompute(t testing.TB, m *model.Model, prefix []int32, n int) []int32 {
	t.Helper()
	seq := append([]int32(nil), prefix...)
	V := m.Config().VocabSize
	for i := 0; i < n; i++ {
		lg, err := m.Logits(model.Batch{Tokens: seq})
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, argmax(lg[(len(seq)-1)*V:]))
	}
	return seq[len(prefix):]
}

// learnerLogProbs are Forward's log-probs of out after prefix.
func learnerLogProbs(t testing.TB, m *model.Model, prefix, out []int32) []float32 {
	t.Helper()
	seq := append(append([]int32(nil), prefix...), out...)
	a, err := m.Forward(model.Batch{Tokens: seq})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	return append([]float32(nil), a.LogProbs[len(prefix)-1:len(seq)-1]...)
}

func sameTokens(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func checkLogProbs(t testing.TB, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d log-probs, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > tolLogProb || math.IsNaN(d) {
			t.Fatalf("%s: log-prob of token %d is %g, the learner's %g (diff %.3g > %g)", what, i, got[i], want[i], d, tolLogProb)
		}
	}
}
