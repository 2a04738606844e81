package engine

import (
	"math"
	"math/rand/v2"
	"sort"
)

// sampler holds the scratch of sampling; the scheduler owns one.
type sampler struct {
	idx   []int32
	probs []float64
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
func (s *sampler) sample(row []float32, p *SampleParams, rng *rand.Rand) int32 {
	if p.Temperature == 0 || p.TopK == 1 {
		return argmax(row)
	}
	V := len(row)
	invT := 1 / float64(p.Temperature)
	topK := p.TopK > 0 && p.TopK < V
	topP := p.TopP > 0 && p.TopP < 1
	s.idx = s.idx[:0]
	for j := range row {
		s.idx = append(s.idx, int32(j))
	}
	if topK || topP {
		// Most likely first; equal logits in id order, so that the kept set
		// is a function of the logits alone.
		sort.Slice(s.idx, func(a, b int) bool {
			la, lb := row[s.idx[a]], row[s.idx[b]]
			return la > lb || (la == lb && s.idx[a] < s.idx[b])
		})
		if topK {
			s.idx = s.idx[:p.TopK]
		}
	}
	mx := row[argmax(row)]
	s.probs = s.probs[:0]
	var sum float64
	for _, j := range s.idx {
		e := math.Exp((float64(row[j]) - float64(mx)) * invT)
		s.probs = append(s.probs, e)
		sum += e
	}
	if topP {
		// Keep the shortest head of the sorted candidates whose mass
		// reaches TopP (at least one token).
		want := float64(p.TopP) * sum
		var cum float64
		n := 0
		for n < len(s.probs) {
			cum += s.probs[n]
			n++
			if cum >= want {
				break
			}
		}
		s.idx, s.probs, sum = s.idx[:n], s.probs[:n], cum
	}
	u := rng.Float64() * sum
	var cum float64
	for i, pr := range s.probs {
		cum += pr
		if u < cum {
			return s.idx[i]
		}
	}
	// Rounding left u at the very top: the last token with mass.
	for i := len(s.probs) - 1; i >= 0; i-- {
		if s.probs[i] > 0 {
			return s.idx[i]
		}
	}
	return s.idx[0]
}
