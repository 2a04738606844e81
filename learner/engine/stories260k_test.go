//go:build shareddata

package engine

import (
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/model"
)

// stories260K loads the shared llama2.c model, found by walking up from the
// package directory to shared/data, or skips.
func stories260K(t testing.TB) *model.Model {
	t.Helper()
	path := shareddata.Path(t, "models/stories260K/stories260K.bin")
	m, err := model.LoadLlama2C(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGreedyMatchesRecomputeAndLearnerLogProbsStories260K is
// TestGreedyMatchesRecomputeAndLearnerLogProbs on stories260K.
func TestGreedyMatchesRecomputeAndLearnerLogProbsStories260K(t *testing.T) {
	checkGreedyAndLogProbs(t, stories260K(t), [][]int32{{1, 403, 407, 261, 378, 426}, {1}})
}

// TestSampledLogProbsMatchLearner: with temperature, top-k and top-p the
// reported log-probs are still those of the unmodified policy.
func TestSampledLogProbsMatchLearner(t *testing.T) {
	m := stories260K(t)
	e := start(t, m, nil, Config{EOS: []int32{}})
	p := []int32{1, 403, 407}
	res, err := e.Generate(testCtx(t), Request{Prefix: p, Params: sampling.Params{Temperature: 1.3, TopK: 40, TopP: 0.8, MaxTokens: 60, Seed: 7}})
	if err != nil {
		t.Fatal(err)
	}
	checkLogProbs(t, "sampled", res.LogProbs, learnerLogProbs(t, m, p, res.Tokens))
}

// TestSeedsReproducibleUnderLoad: sampled requests give bit-identical
// tokens and log-probs alone and among 40 concurrent requests of mixed
// lengths and parameters.
func TestSeedsReproducibleUnderLoad(t *testing.T) {
	m := stories260K(t)
	V := m.Config().VocabSize
	prompts := randomPrompts(40, V, 3)
	var reqs []Request
	for i, p := range prompts {
		reqs = append(reqs, Request{Prefix: p, Params: sampling.Params{Temperature: 1, TopP: []float32{1, 0.9}[i%2],
			TopK: []int{0, 50}[i%2], MaxTokens: 10 + 7*(i%5), Seed: int64(1000 + i)}})
	}
	alone := start(t, m, nil, Config{EOS: []int32{}, PrefillChunk: 16, StepTokens: 32})
	want := make([]Result, len(reqs))
	for i, r := range reqs {
		res, err := alone.Generate(testCtx(t), r)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res
	}
	loaded := start(t, m, nil, Config{EOS: []int32{}, PrefillChunk: 16, StepTokens: 32, MaxBatch: 24})
	got := runAll(t, loaded, reqs)
	for i := range reqs {
		if j := sameTokens(got[i].Tokens, want[i].Tokens); j >= 0 {
			t.Fatalf("request %d (seed %d): token %d differs under load:\n got %v\nwant %v", i, reqs[i].Params.Seed, j, got[i].Tokens, want[i].Tokens)
		}
		for j := range got[i].LogProbs {
			if got[i].LogProbs[j] != want[i].LogProbs[j] {
				t.Fatalf("request %d: log-prob %d is %v under load, %v alone", i, j, got[i].LogProbs[j], want[i].LogProbs[j])
			}
		}
	}
	if st := loaded.Stats(); st.Steps >= alone.Stats().Steps {
		t.Errorf("concurrent run took %d steps, the one-at-a-time run %d: requests were not batched", st.Steps, alone.Stats().Steps)
	}
	// Other seeds give other samples.
	r0 := reqs[0]
	r0.Params.Seed++
	res, err := alone.Generate(testCtx(t), r0)
	if err != nil {
		t.Fatal(err)
	}
	if sameTokens(res.Tokens, want[0].Tokens) < 0 {
		t.Errorf("seeds %d and %d sampled the same %d tokens", r0.Params.Seed-1, r0.Params.Seed, len(res.Tokens))
	}
}
