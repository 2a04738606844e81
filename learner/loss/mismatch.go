package loss

import "math"

// Mismatch measures the train-inference mismatch of a batch: the learner's
// log-probabilities of the policy's own tokens (pi_old, recomputed at the
// start of the step) against the ones the sampler returned (pi_behav).
// Only Internal tokens count; collaborator and template tokens have no
// behaviour log-probability. The KL estimates are of KL(pi_behav ||
// pi_old) from tokens sampled by pi_behav, as veRL's mismatch_kl and
// mismatch_k3_kl (verl/trainer/ppo/mismatch_helper.py at commit
// 10350b613de7625d759a48e582573749484ef861 of github.com/volcengine/verl).
type Mismatch struct {
	// Tokens is the number of Internal tokens compared.
	Tokens int `json:"tokens"`
	// Sequences is the number of trajectories holding them.
	Sequences int `json:"sequences"`
	// AbsMean is mean |log pi_old - log pi_behav|.
	AbsMean float64 `json:"abs_mean"`
	// AbsMax is max |log pi_old - log pi_behav|.
	AbsMax float64 `json:"abs_max"`
	// KL is the k1 estimate mean(log pi_behav - log pi_old); it can be
	// negative on a finite sample.
	KL float64 `json:"kl"`
	// KLK3 is the k3 estimate mean(r - 1 - log r), r = pi_old/pi_behav
	// (log r guarded to [-20, 20]); never negative.
	KLK3 float64 `json:"kl_k3"`
}

// MeasureMismatch compares old (the learner's log-probabilities) with
// behavior (the sampler's) over the Internal tokens of src, grouping tokens
// into trajectories by seq (contiguous, as in Inputs). All four slices have
// one entry per token.
func MeasureMismatch(old, behavior []float32, src []Source, seq []int32) Mismatch {
	var m Mismatch
	var absSum, k1Sum, k3Sum float64
	var prev int32
	for i := range src {
		if src[i] != Internal {
			continue
		}
		if m.Tokens == 0 || seq[i] != prev {
			m.Sequences++
			prev = seq[i]
		}
		d := float64(old[i]) - float64(behavior[i])
		m.Tokens++
		absSum += math.Abs(d)
		m.AbsMax = math.Max(m.AbsMax, math.Abs(d))
		k1Sum += -d
		x := guardLogRho(d)
		k3Sum += math.Exp(x) - 1 - x
	}
	if m.Tokens > 0 {
		n := float64(m.Tokens)
		m.AbsMean, m.KL, m.KLK3 = absSum/n, k1Sum/n, k3Sum/n
	}
	return m
}
