package engine

import (
	"math"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
)

// softmaxRef is the reference distribution: softmax(logits/T) restricted to
// keep (renormalised), in float64.
func softmaxRef(logits []float32, T float64, keep map[int]bool) []float64 {
	p := make([]float64, len(logits))
	var sum float64
	for j, l := range logits {
		if keep != nil && !keep[j] {
			continue
		}
		p[j] = math.Exp(float64(l) / T)
		sum += p[j]
	}
	for j := range p {
		p[j] /= sum
	}
	return p
}

// checkFrequencies draws n samples and compares each token's frequency with
// want within 5 standard deviations of a binomial count (a false alarm
// about once in 3 million tokens checked; any wrong cut or temperature
// moves some frequency by far more at n = 100000).
func checkFrequencies(t *testing.T, logits []float32, p sampling.Params, want []float64) {
	t.Helper()
	const n = 100000
	var s sampler
	rng := newRNG(p.Seed)
	count := make([]int, len(logits))
	for i := 0; i < n; i++ {
		count[s.sample(logits, &p, rng)]++
	}
	for j, c := range count {
		sd := math.Sqrt(n * want[j] * (1 - want[j]))
		if d := math.Abs(float64(c) - n*want[j]); d > 5*sd+1e-9 {
			t.Errorf("%+v: token %d drawn %d times in %d, expected %.0f (sd %.1f)", p, j, c, n, n*want[j], sd)
		}
	}
}

func TestSamplerDistributions(t *testing.T) {
	logits := []float32{2.0, 1.5, 0.3, -1.0, 1.5, 0.0}
	t.Run("temperature", func(t *testing.T) {
		checkFrequencies(t, logits, sampling.Params{Temperature: 0.7, Seed: 1}, softmaxRef(logits, 0.7, nil))
		checkFrequencies(t, logits, sampling.Params{Temperature: 1, Seed: 2}, softmaxRef(logits, 1, nil))
	})
	t.Run("top-k", func(t *testing.T) {
		// The three largest: 2.0 (id 0) and the tie 1.5 (ids 1 and 4).
		checkFrequencies(t, logits, sampling.Params{Temperature: 1, TopK: 3, Seed: 3}, softmaxRef(logits, 1, map[int]bool{0: true, 1: true, 4: true}))
		// Ties are cut in id order: top-2 keeps ids 0 and 1.
		checkFrequencies(t, logits, sampling.Params{Temperature: 1, TopK: 2, Seed: 4}, softmaxRef(logits, 1, map[int]bool{0: true, 1: true}))
	})
	t.Run("top-p", func(t *testing.T) {
		full := softmaxRef(logits, 1, nil) // 0.33, 0.20, 0.06, 0.02, 0.20, 0.04
		if full[0] >= 0.5 || full[0]+full[1] < 0.5 {
			t.Fatalf("fixture probabilities %v no longer straddle 0.5", full)
		}
		checkFrequencies(t, logits, sampling.Params{Temperature: 1, TopP: 0.5, Seed: 5}, softmaxRef(logits, 1, map[int]bool{0: true, 1: true}))
		// top-p after top-k after temperature.
		hot := softmaxRef(logits, 2, map[int]bool{0: true, 1: true, 4: true})
		if hot[0]+hot[1] >= 0.9 {
			t.Fatalf("fixture probabilities %v: top-p 0.9 would not need the third token", hot)
		}
		checkFrequencies(t, logits, sampling.Params{Temperature: 2, TopK: 3, TopP: 0.9, Seed: 6}, hot)
	})
}

func TestSamplerGreedyAndSeeds(t *testing.T) {
	var s sampler
	tie := []float32{1, 3, 3, 2}
	for _, p := range []sampling.Params{{}, {Temperature: 1, TopK: 1}} {
		if got := s.sample(tie, &p, newRNG(1)); got != 1 {
			t.Errorf("%+v on %v picked %d, want 1 (the lowest id of the maxima)", p, tie, got)
		}
	}
	logits := []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}
	p := sampling.Params{Temperature: 1, Seed: 42}
	draw := func(seed int64) []int32 {
		rng := newRNG(seed)
		var out []int32
		for i := 0; i < 50; i++ {
			out = append(out, s.sample(logits, &p, rng))
		}
		return out
	}
	a, b, c := draw(42), draw(42), draw(43)
	if sameTokens(a, b) >= 0 {
		t.Errorf("seed 42 drew %v then %v", a, b)
	}
	if sameTokens(a, c) < 0 {
		t.Errorf("seeds 42 and 43 drew the same 50 tokens %v", a)
	}
}
