package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/model"
)

// topRef is the reference selection: every id sorted by logit, largest
// first and equal logits by id (a stable sort), the first n kept.
func topRef(row []float32, n int) []int32 {
	ids := make([]int32, 0, len(row))
	for j, v := range row {
		if !math.IsNaN(float64(v)) {
			ids = append(ids, int32(j))
		}
	}
	slices.SortStableFunc(ids, func(a, b int32) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	return ids[:min(n, len(ids))]
}

func TestTopLogProbsSelection(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		V := 1 + rng.IntN(300)
		row := make([]float32, V)
		for j := range row {
			// Few distinct values, so that ties are common.
			row[j] = float32(rng.IntN(7)) - 3
			if rng.IntN(50) == 0 {
				row[j] = float32(math.NaN())
			}
		}
		n := 1 + rng.IntN(25)
		const lse = 2.5
		got := topLogProbs(row, n, lse)
		want := topRef(row, n)
		if len(got) != len(want) {
			t.Fatalf("trial %d: %d entries, want %d", trial, len(got), len(want))
		}
		for i, id := range want {
			if got[i].ID != id || got[i].LogProb != row[id]-lse {
				t.Fatalf("trial %d entry %d = %+v, want id %d log-prob %g", trial, i, got[i], id, row[id]-lse)
			}
		}
	}
}

// The engine's alternatives are the policy's own distribution at each
// position (log softmax of the raw logits, as LogProbs), checked against
// the learner's logits of the whole sequence; the stream carries the same.
func TestTopLogProbsMatchLearner(t *testing.T) {
	m := peaked(t, tinyConfig(), 5)
	e := start(t, m, nil, Config{EOS: []int32{}})
	prefix := []int32{1, 2, 3}
	const n = 5
	req := Request{Prefix: prefix, Params: sampling.Params{Temperature: 1.3, MaxTokens: 20, Seed: 11, TopLogprobs: n}}
	var streamed []Token
	res, err := e.GenerateStream(testCtx(t), req, func(tk Token) error { streamed = append(streamed, tk); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.TopLogProbs) != len(res.Tokens) || len(streamed) != len(res.Tokens) {
		t.Fatalf("%d tokens, %d top lists, %d streamed", len(res.Tokens), len(res.TopLogProbs), len(streamed))
	}
	seq := append(slices.Clone(prefix), res.Tokens...)
	lg, err := m.Logits(model.Batch{Tokens: seq})
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config().VocabSize
	for i, top := range res.TopLogProbs {
		row := lg[(len(prefix)+i-1)*V : (len(prefix)+i)*V]
		lse := float64(model.LogSumExp(row))
		ref := func(id int32) float64 { return float64(row[id]) - lse }
		if len(top) != n {
			t.Fatalf("position %d: %d alternatives, want %d", i, len(top), n)
		}
		in := map[int32]bool{}
		for k, a := range top {
			if d := math.Abs(float64(a.LogProb) - ref(a.ID)); d > tolLogProb {
				t.Errorf("position %d alternative %d (id %d): log-prob %g, learner %g", i, k, a.ID, a.LogProb, ref(a.ID))
			}
			if k > 0 && a.LogProb > top[k-1].LogProb {
				t.Errorf("position %d: alternatives out of order: %+v", i, top)
			}
			in[a.ID] = true
		}
		// No token left out is more likely than the last one kept, beyond
		// the rounding that separates the engine's logits from the
		// learner's.
		last := ref(top[n-1].ID)
		for id := range int32(V) {
			if !in[id] && ref(id) > last+2*tolLogProb {
				t.Errorf("position %d: id %d (log-prob %g) is missing, more likely than the last kept (%g)", i, id, ref(id), last)
			}
		}
		// The sampled token, when among them, has exactly its LogProbs entry.
		for _, a := range top {
			if a.ID == res.Tokens[i] && a.LogProb != res.LogProbs[i] {
				t.Errorf("position %d: the sampled token's alternative has %g, LogProbs %g", i, a.LogProb, res.LogProbs[i])
			}
		}
		if !slices.Equal(streamed[i].Top, top) {
			t.Errorf("position %d: streamed %+v, result %+v", i, streamed[i].Top, top)
		}
	}
	// Without the request there are none.
	plain, err := e.Generate(testCtx(t), Request{Prefix: prefix, Params: sampling.Params{Temperature: 1.3, MaxTokens: 20, Seed: 11}})
	if err != nil {
		t.Fatal(err)
	}
	if plain.TopLogProbs != nil || !slices.Equal(plain.Tokens, res.Tokens) {
		t.Errorf("without TopLogprobs: %d top lists, tokens %v (want none, and the same tokens %v)", len(plain.TopLogProbs), plain.Tokens, res.Tokens)
	}
	if _, err := e.Generate(testCtx(t), Request{Prefix: prefix, Params: sampling.Params{TopLogprobs: -1}}); err == nil || !strings.Contains(err.Error(), "top_logprobs") {
		t.Errorf("TopLogprobs -1: %v", err)
	}
}
