package engine

import (
	"cmp"
	"math/rand/v2"
	"runtime"
	"slices"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/blas"
	"github.com/aipo-rl/aipo/learner/par"
)

// sampler holds the scratch of sampling; each goroutine that draws owns
// one (newSamplers).
type sampler struct {
	idx   []int32
	probs []float64
}

// newSamplers are the scratch of the goroutines that draw a step's rows,
// one a processor: on a vocabulary of 151,936 the draw (an exponential a
// logit, the log-sum-exp, the top log-probs) costs as much as a small
// model's whole forward pass, and one goroutine drawing 32 rows after
// another left the other cores idle.
func newSamplers() []sampler {
	return make([]sampler, max(1, runtime.GOMAXPROCS(0)))
}

// drawRows runs f for rows 0..n-1 as one parallel region of the learner's
// team (learner/par), one part a sampler, rows in contiguous blocks, and
// returns the draws in row order. Each row's random stream is its own, so
// the draws do not depend on the spread.
func drawRows(smp []sampler, n int, f func(row int, s *sampler) draw) []draw {
	out := make([]draw, n)
	parts := min(len(smp), n)
	par.Run(parts, func(w int) {
		for i := w * n / parts; i < (w+1)*n/parts; i++ {
			out[i] = f(i, &smp[w])
		}
	})
	return out
}

// newRNG is a request's random stream.
func newRNG(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x5851f42d4c957f2d))
}

// argmax is the lowest id among the largest logits.
func argmax(row []float32) int32 {
	best := 0
	for j, v := range row {
		if v > row[best] {
			best = j
		}
	}
	return int32(best)
}

// sample draws a token from row (raw logits) under p. Greedy decoding uses
// no randomness; every other setting takes exactly one draw from rng.
//
// With top-k or top-p the candidates are sorted by probability (equal
// logits in id order, so that the kept set is a function of the logits
// alone) and the draw walks them in that order; without, it walks all ids
// in order. Only the tokens that can be kept are sorted: those whose
// probability is at least a cut-off c, lowered until they number at least
// k (top-k) or hold at least top-p of the mass (top-p alone), since every
// token below c comes after all of them in the sorted order.
func (s *sampler) sample(row []float32, p *sampling.Params, rng *rand.Rand) int32 {
	if p.Temperature == 0 || p.TopK == 1 {
		return argmax(row)
	}
	V := len(row)
	invT := 1 / float64(p.Temperature)
	topK := p.TopK > 0 && p.TopK < V
	topP := p.TopP > 0 && p.TopP < 1
	mx := float64(row[argmax(row)])
	if cap(s.probs) < V {
		s.probs = make([]float64, V)
	}
	probs := s.probs[:V]
	// probs[j] = math.Exp((float64(row[j]) - mx) * invT), vectorised
	// with the same bits.
	blas.ExpShifted(probs, row, mx, invT)
	var total float64
	for _, e := range probs {
		total += e
	}
	if !topK && !topP {
		return pick(probs, nil, total, rng)
	}
	var cand []int32
	var mass float64
	for c := 0x1p-10; ; c *= 0x1p-10 {
		cand, mass = s.idx[:0], 0
		for j, pr := range probs {
			if pr >= c {
				cand = append(cand, int32(j))
				mass += pr
			}
		}
		s.idx = cand
		enough := len(cand) == V
		if topK {
			enough = enough || len(cand) >= p.TopK
		} else {
			enough = enough || mass >= float64(p.TopP)*total
		}
		if enough || c == 0 {
			break
		}
		if c < 0x1p-1000 {
			c = 0 // next round takes everything
		}
	}
	slices.SortFunc(cand, func(a, b int32) int {
		if c := cmp.Compare(row[b], row[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if topK {
		cand = cand[:min(p.TopK, len(cand))]
	}
	mass = 0
	for _, j := range cand {
		mass += probs[j]
	}
	if topP {
		// The shortest head of the candidates whose mass reaches TopP of
		// theirs (at least one token).
		want := float64(p.TopP) * mass
		var cum float64
		n := 0
		for n < len(cand) {
			cum += probs[cand[n]]
			n++
			if cum >= want {
				break
			}
		}
		cand, mass = cand[:n], cum
	}
	return pick(probs, cand, mass, rng)
}

// pick draws from probs restricted to ids (all ids in order when nil),
// whose probabilities sum to mass, with one uniform draw.
func pick(probs []float64, ids []int32, mass float64, rng *rand.Rand) int32 {
	u := rng.Float64() * mass
	var cum float64
	last := int32(-1)
	if ids == nil {
		for j, pr := range probs {
			cum += pr
			if pr > 0 {
				last = int32(j)
			}
			if u < cum {
				return int32(j)
			}
		}
	} else {
		for _, j := range ids {
			cum += probs[j]
			if probs[j] > 0 {
				last = j
			}
			if u < cum {
				return j
			}
		}
	}
	// Rounding left u at the very top: the last token with mass.
	if last < 0 {
		last = 0
		if ids != nil {
			last = ids[0]
		}
	}
	return last
}

// topLogProbs returns the n most likely tokens of row (raw logits), most
// likely first and equal logits in id order, with their log-probabilities
// row[j] - lse (lse: the log-sum-exp of row, as for the sampled token).
// One pass keeps the best n seen so far in order: O(V) for the small n an
// API asks for (at most 20 by the servers' caps).
func topLogProbs(row []float32, n int, lse float32) []TokenLogProb {
	n = min(n, len(row))
	out := make([]TokenLogProb, 0, n)
	for j, v := range row {
		if v != v { // NaN: never among the most likely
			continue
		}
		if len(out) == n && !(v > out[n-1].LogProb) {
			continue
		}
		// The first place holding a smaller logit: equal ones seen
		// earlier (lower ids) stay ahead.
		i := len(out)
		for i > 0 && out[i-1].LogProb < v {
			i--
		}
		if len(out) < n {
			out = append(out, TokenLogProb{})
		}
		copy(out[i+1:], out[i:len(out)-1])
		out[i] = TokenLogProb{ID: int32(j), LogProb: v}
	}
	for i := range out {
		out[i].LogProb -= lse
	}
	return out
}
