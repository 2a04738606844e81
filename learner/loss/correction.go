package loss

import (
	"fmt"
	"math"
)

// Rollout correction: the policy tokens of a batch were sampled by an
// inference engine (the behaviour policy, pi_behav) whose numbers differ
// from the learner's own forward pass at the same weights (other kernels,
// other precision, or older weights). The surrogate's pi_old is the
// learner's recomputation, so the update is off-policy by the behaviour
// ratio
//
//	rho = pi_old / pi_behav  (per policy token),
//
// and truncated importance sampling multiplies each policy token's surrogate
// term by a bounded, stop-gradient function of rho. This follows veRL's
// rollout importance sampling (docs/advance/rollout_is.md and
// verl/trainer/ppo/mismatch_helper.py at commit
// 10350b613de7625d759a48e582573749484ef861 of github.com/volcengine/verl:
// rollout_is_level token|sequence|geometric, rollout_is_mode
// truncate|mask, rollout_is_threshold with the lower bound 1/threshold, and
// the weights applied as pg_losses * rollout_is_weights in core_algos.py).
// veRL 0.9.1 keeps the token and sequence levels in
// verl/trainer/ppo/rollout_corr_helper.py, truncate as rollout_is_threshold
// and mask as its rejection sampling (rollout_rs token_k1 / seq_sum_k1);
// verl_test.go holds this file to them.

// Rollout-correction levels (RolloutCorrection.Level): how rho is formed.
const (
	// CorrectionOff applies no correction (the default).
	CorrectionOff = "off"
	// CorrectionToken uses each policy token's own ratio rho_t.
	CorrectionToken = "token"
	// CorrectionSequence uses the product of the ratios over the
	// trajectory's policy tokens, exp(sum_t log rho_t), for each of them.
	CorrectionSequence = "sequence"
	// CorrectionGeometric uses the geometric mean of the ratios over the
	// trajectory's policy tokens, exp(mean_t log rho_t), for each of them.
	CorrectionGeometric = "geometric"
)

// Rollout-correction modes (RolloutCorrection.Mode): what happens to a
// ratio outside the bounds.
const (
	// CorrectionTruncate caps the weight at Cap: w = min(rho, Cap) (TIS).
	// Small ratios are kept as they are.
	CorrectionTruncate = "truncate"
	// CorrectionMask leaves tokens whose rho lies outside [1/Cap, Cap] out
	// of the loss altogether (as if untrained: no policy term, no KL, not
	// counted by the aggregation); the others keep w = rho.
	CorrectionMask = "mask"
	// CorrectionMaskHigh leaves tokens whose rho exceeds Cap out of the
	// loss and keeps every other with w = rho, however small. At token
	// level this is AReaL's decoupled PPO objective (arXiv 2505.24298;
	// areal/utils/functional.py ppo_actor_loss_fn with a proximal policy
	// and behav_imp_weight_cap): the surrogate's ratio is taken against
	// the proximal policy, here pi_old, recomputed by the learner from the
	// weights the step starts with, and each policy token's term is
	// weighted by pi_prox / pi_behav, the tokens above the cap masked.
	CorrectionMaskHigh = "mask_high"
)

// maxLogRho bounds |log rho| (token, or sequence/geometric aggregate)
// before exponentiation, as veRL's SAFETY_BOUND does.
const maxLogRho = 20

// RolloutCorrection configures the truncated importance-sampling correction
// of the train-inference mismatch. It needs Inputs.BehaviorLogProb. The
// weight multiplies the policy (surrogate) term of Internal tokens only:
// External tokens were not sampled by the policy and have no behaviour
// log-probability, and the KL term is not weighted (as in veRL).
type RolloutCorrection struct {
	// Level is "off" (default; "" also means off), "token", "sequence" or
	// "geometric".
	Level string `yaml:"level" json:"level"`
	// Cap is the upper bound C of the weight, > 1 (default 2; veRL
	// recommends 1.5-5 for token, 2-10 for sequence and 1.0002-1.001 for
	// geometric). Mask mode's lower bound is 1/C.
	Cap float64 `yaml:"cap" json:"cap"`
	// Mode is "truncate" (default), "mask" or "mask_high" (with level
	// token: decoupled PPO).
	Mode string `yaml:"mode" json:"mode"`
}

// DefaultRolloutCorrection is off, with the cap and mode that apply once a
// level is chosen.
func DefaultRolloutCorrection() RolloutCorrection {
	return RolloutCorrection{Level: CorrectionOff, Cap: 2, Mode: CorrectionTruncate}
}

// On reports whether the correction applies.
func (r RolloutCorrection) On() bool { return r.Level != "" && r.Level != CorrectionOff }

// Validate reports the first invalid field, naming it and the fix.
func (r RolloutCorrection) Validate() error {
	switch r.Level {
	case "", CorrectionOff:
		return nil
	case CorrectionToken, CorrectionSequence, CorrectionGeometric:
	default:
		return fmt.Errorf("loss: Config.RolloutCorrection.Level %q is unknown: use one of off, token, sequence, geometric", r.Level)
	}
	if !(r.Cap > 1) || math.IsInf(r.Cap, 0) {
		return fmt.Errorf("loss: Config.RolloutCorrection.Cap = %v must be finite and > 1 (the weight's upper bound; e.g. 2 for token level, 1.001 for geometric)", r.Cap)
	}
	switch r.Mode {
	case CorrectionTruncate, CorrectionMask, CorrectionMaskHigh:
	default:
		return fmt.Errorf("loss: Config.RolloutCorrection.Mode %q is unknown: use truncate, mask or mask_high", r.Mode)
	}
	return nil
}

// correctionWeight turns a (guarded) log rho into the weight of the
// token's policy term and whether the token stays in the loss.
func correctionWeight(logRho, cap float64, mode string) (w float64, keep bool) {
	rho := math.Exp(logRho)
	switch mode {
	case CorrectionMask:
		if rho < 1/cap || rho > cap {
			return 0, false
		}
		return rho, true
	case CorrectionMaskHigh:
		if rho > cap {
			return 0, false
		}
		return rho, true
	}
	return math.Min(rho, cap), true
}

// guardLogRho clamps a log ratio to [-maxLogRho, maxLogRho].
func guardLogRho(x float64) float64 {
	return math.Max(-maxLogRho, math.Min(maxLogRho, x))
}

// correctionSums accumulates the correction's metrics.
type correctionSums struct {
	on                bool
	tokens            int // Internal tokens
	kept              int // of them, in the loss
	rhoSum, weightSum float64
	high, low, masked int
	cap               float64
}

func (c *correctionSums) add(logRho, w float64, keep bool) {
	c.tokens++
	rho := math.Exp(logRho)
	c.rhoSum += rho
	if rho > c.cap {
		c.high++
	}
	if rho < 1/c.cap {
		c.low++
	}
	if keep {
		c.kept++
		c.weightSum += w
	} else {
		c.masked++
	}
}

func (c *correctionSums) finish(out map[string]float64) {
	if !c.on {
		return
	}
	out[MetricISRatioMean] = frac(c.rhoSum, c.tokens)
	out[MetricISWeightMean] = frac(c.weightSum, c.kept)
	out[MetricISFracHigh] = frac(float64(c.high), c.tokens)
	out[MetricISFracLow] = frac(float64(c.low), c.tokens)
	out[MetricISMaskedFrac] = frac(float64(c.masked), c.tokens)
}

// correctionRuns computes, for the fused form, every token's weight and
// whether it stays in the loss; Internal tokens only (others get 1, true).
// It works per contiguous trajectory, as Compute's inputs lay them out.
func correctionRuns(rc RolloutCorrection, in *Inputs, sums *correctionSums) (w []float64, keep []bool) {
	n := len(in.LogProb)
	w = make([]float64, n)
	keep = make([]bool, n)
	for i := 0; i < n; {
		j, sum, cnt := i, 0.0, 0
		for ; j < n && in.Seq[j] == in.Seq[i]; j++ {
			if in.Source[j] == Internal {
				sum += float64(in.OldLogProb[j]) - float64(in.BehaviorLogProb[j])
				cnt++
			}
		}
		agg := sum
		if rc.Level == CorrectionGeometric && cnt > 0 {
			agg = sum / float64(cnt)
		}
		for k := i; k < j; k++ {
			if in.Source[k] != Internal {
				w[k], keep[k] = 1, true
				continue
			}
			lr := agg
			if rc.Level == CorrectionToken {
				lr = float64(in.OldLogProb[k]) - float64(in.BehaviorLogProb[k])
			}
			lr = guardLogRho(lr)
			w[k], keep[k] = correctionWeight(lr, rc.Cap, rc.Mode)
			sums.add(lr, w[k], keep[k])
		}
		i = j
	}
	return w, keep
}
