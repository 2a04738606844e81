package loss

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Kinks of the per-token terms, as log-ratios (log pi - log pi_old) or log
// probabilities. kinkFreeBatch keeps every token at least kinkMargin away
// from them, and the GSPO sequence log-ratios at least seqKinkMargin away
// from GSPO's clip bounds.
const (
	kinkMargin    = 0.02
	seqKinkMargin = 1e-4
)

func tokenKinks(c Config) []float64 {
	return []float64{math.Log(1 - c.ClipLow), math.Log(1 + c.ClipHigh), math.Log(3)}
}

// randomBatch makes nTraj trajectories of mixed tokens. With kinkFree, the
// Internal log-ratios avoid the clip bounds of DefaultConfig (and dual clip
// 3), External probabilities avoid omega, and every other trajectory's
// Internal log-ratios come in +/- pairs so that its GSPO sequence ratio is
// inside GSPO's clip while the others fall outside it.
func randomBatch(rng *rand.Rand, nTraj int, kinkFree bool) Inputs {
	cfg := DefaultConfig()
	var in Inputs
	uni := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	delta := func() float64 {
		for {
			var d float64
			switch rng.IntN(4) {
			case 0:
				d = uni(-0.15, 0.2)
			case 1:
				d = uni(0.3, 0.8)
			case 2:
				d = uni(-0.8, -0.3)
			default:
				d = uni(1.0, 1.6)
			}
			ok := true
			for _, k := range tokenKinks(cfg) {
				if math.Abs(d-k) < kinkMargin || math.Abs(-d-k) < kinkMargin {
					ok = false
				}
			}
			if ok || !kinkFree {
				return d
			}
		}
	}
	extLogProb := func() float64 {
		for {
			lp := uni(-9, -0.05)
			if !kinkFree || math.Abs(math.Exp(lp)-cfg.Omega) > kinkMargin {
				return lp
			}
		}
	}
	seq := int32(rng.IntN(3))
	for k := 0; k < nTraj; k++ {
		a := uni(0.3, 2)
		if rng.IntN(2) == 0 {
			a = -a
		}
		paired := k%2 == 0
		var pending []float64 // deltas still to place (the second of a pair)
		push := func(src Source, lp, old float64) {
			in.LogProb = append(in.LogProb, float32(lp))
			in.OldLogProb = append(in.OldLogProb, float32(old))
			in.RefLogProb = append(in.RefLogProb, float32(lp+uni(-0.8, 0.8)))
			in.Advantage = append(in.Advantage, float32(a))
			in.Source = append(in.Source, src)
			in.Seq = append(in.Seq, seq)
			in.Entropy = append(in.Entropy, float32(uni(0, 3)))
		}
		for j := rng.IntN(4); j > 0; j-- {
			push(Untrained, 0, 0)
		}
		segments := 1 + rng.IntN(4)
		for s := 0; s < segments; s++ {
			src := Source(1 + rng.IntN(2))
			if s == 0 && k%3 != 2 {
				src = Internal
			}
			if rng.IntN(6) == 0 {
				push(Untrained, 0, 0)
			}
			for j := 1 + rng.IntN(6); j > 0; j-- {
				if src == External {
					lp := extLogProb()
					push(External, lp, lp-uni(-0.5, 0.5))
					continue
				}
				lp := uni(-5, -0.02)
				var d float64
				if paired && len(pending) > 0 {
					d, pending = pending[0], pending[1:]
				} else {
					d = delta()
					if paired {
						pending = append(pending, -d)
					}
				}
				push(Internal, lp, lp-d)
			}
		}
		for _, d := range pending {
			lp := uni(-5, -0.02)
			push(Internal, lp, lp-d)
		}
		if paired {
			// A tiny common shift keeps the sequence ratio off exactly 1.
			lp := uni(-5, -0.02)
			push(Internal, lp, lp-2e-4)
		}
		seq += int32(1 + rng.IntN(2))
	}
	addBehavior(&in)
	return in
}

// addBehavior gives in's Internal tokens a sampler's log-probability:
// pi_old moved by a log-ratio in [-0.6, 0.6] (0 elsewhere, as trajectories
// store it), from a generator of its own so that the other inputs do not
// depend on it. The rollout correction reads only pi_old and pi_behav,
// which the finite differences hold fixed, so it adds no kink.
func addBehavior(in *Inputs) {
	rng := rand.New(rand.NewPCG(uint64(len(in.LogProb)), 77))
	in.BehaviorLogProb = make([]float32, len(in.LogProb))
	for i, s := range in.Source {
		if s == Internal {
			in.BehaviorLogProb[i] = in.OldLogProb[i] - float32(-0.6+1.2*rng.Float64())
		}
	}
}

// assertKinkFree fails if any token of in lies near a kink of cfg's loss,
// so that finite differences are meaningful.
func assertKinkFree(t *testing.T, cfg Config, in Inputs) {
	t.Helper()
	n := len(in.LogProb)
	for i := 0; i < n; i++ {
		lr := float64(in.LogProb[i]) - float64(in.OldLogProb[i])
		switch in.Source[i] {
		case Internal:
			for _, k := range tokenKinks(cfg) {
				if math.Abs(lr-k) < kinkMargin/2 {
					t.Fatalf("test batch: Internal token %d has log-ratio %v within %v of kink %v", i, lr, kinkMargin/2, k)
				}
			}
		case External:
			if math.Abs(math.Exp(float64(in.LogProb[i]))-cfg.Omega) < kinkMargin/2 {
				t.Fatalf("test batch: External token %d has pi near omega", i)
			}
		}
	}
	for i := 0; i < n; {
		j, sum, cnt := i, 0.0, 0
		for ; j < n && in.Seq[j] == in.Seq[i]; j++ {
			if in.Source[j] == Internal {
				sum += float64(in.LogProb[j]) - float64(in.OldLogProb[j])
				cnt++
			}
		}
		if cnt > 0 {
			m := sum / float64(cnt)
			for _, k := range []float64{math.Log(1 - cfg.SeqClipLow), math.Log(1 + cfg.SeqClipHigh)} {
				if math.Abs(m-k) < seqKinkMargin {
					t.Fatalf("test batch: trajectory at token %d has GSPO log-ratio %v within %v of kink %v", i, m, seqKinkMargin, k)
				}
			}
		}
		i = j
	}
}
