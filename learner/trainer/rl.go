package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// RLConfig controls one reinforcement-learning update.
type RLConfig struct {
	Loss loss.Config
	// MicroBatchTokens bounds the tokens of one forward/backward pass.
	MicroBatchTokens int
	// PPOEpochs is the number of passes over the batch; MiniBatches splits
	// each pass into that many optimiser steps. 1 and 1 is fully on-policy.
	PPOEpochs, MiniBatches int
}

// RLSample is one trajectory prepared for the loss.
type RLSample struct {
	Sequence
	// Source is the loss treatment of each response token.
	Source []loss.Source
	// Advantage is the trajectory's advantage.
	Advantage float32
	// Behavior is the sampler's log-probability of each response token
	// (meaningful for Internal tokens; len(Response) entries), or nil when
	// the sampler's numbers are not known. It is compared with the
	// learner's pi_old (RLStats.Mismatch) and feeds the loss's rollout
	// correction, which needs it for every sample.
	Behavior []float32
	// Lag is each response token's policy version lag: how many versions
	// the weights that sampled (or, for other tokens, preceded) it are
	// behind the policy this update starts from; nil: 0 for every token.
	// Only the mismatch by lag (RLStats.MismatchByLag) and the decoupled
	// objective's proximal policy read it.
	Lag []int32
}

// RLStats summarises an update.
type RLStats struct {
	Loss      float64            // mean loss over optimiser steps
	GradNorm  float64            // last gradient norm before clipping
	Tokens    int                // response tokens trained on
	OptSteps  int                // optimiser steps taken
	Metrics   map[string]float64 // loss metrics averaged over micro-batches
	OldLogMAE float64            // mean |old log-prob - behaviour log-prob| when behaviour log-probs are given
	// Mismatch compares pi_old with the behaviour log-probs over the
	// Internal tokens of the samples that carry them (Tokens 0: none).
	Mismatch loss.Mismatch
	// MismatchByLag is Mismatch over the Internal tokens of each version
	// lag (RLSample.Lag), keyed by the lag.
	MismatchByLag map[int32]loss.Mismatch
}

// Learner holds a policy, its frozen reference and its optimiser.
type Learner struct {
	Policy *model.Model
	Ref    *model.Model // nil: no KL term (Loss.KLCoef must be 0), unless RefCompute is set
	Opt    *optim.AdamW
	// PolicyCompute and RefCompute run the passes of Policy and Ref (nil:
	// on the CPU, CPU(Policy) and CPU(Ref)); On sets them from a backend.
	PolicyCompute, RefCompute Compute
	// RefShare, when set in place of Ref, is this rank's share of the KL
	// reference for ZeRO stage 3 on the devices (NewReferenceShare):
	// OnSharded opens the reference's passes without weights and the
	// group places the share from it, so that the host need not hold
	// the whole reference each time the passes are opened.
	RefShare *ReferenceShare
	// DP, when set (EnableDataParallel), makes the learner one rank of a
	// data-parallel group: RLStepDP updates, and the optimiser state is
	// this rank's share.
	DP *DataParallel
}

// Params returns the host policy's parameters in the optimiser's form.
func (l *Learner) Params() []optim.Param { return backend.OptimParams(l.Policy) }

// logProbs runs forward passes without gradient and returns, per sample, the
// log-probabilities of its response tokens.
func logProbs(c Compute, seqs []Sequence, budget int) ([][]float32, error) {
	order := make([]int, len(seqs))
	for i := range order {
		order[i] = i
	}
	out := make([][]float32, len(seqs))
	return out, logProbsInto(out, c, seqs, order, budget)
}

// logProbsInto sets out[i] for each i of order (packed in that order).
func logProbsInto(out [][]float32, c Compute, seqs []Sequence, order []int, budget int) error {
	for _, mb := range pack(seqs, order, budget) {
		all, err := c.Run(mb.batch, nil)
		if err != nil {
			return err
		}
		mb.split(out, seqs, all)
	}
	return nil
}

// RLStep applies cfg's update to the learner from samples. Old log-probs
// are recomputed with the policy as it is on entry (pi_old), reference
// log-probs with l.Ref.
//
// There is one step function: a learner that is no rank of a group
// (EnableDataParallel) takes its steps as the one rank of its own
// (EnableSingle with the default split: SingleShards, one virtual shard
// summed in place, ZeRO stage 1: the memory of a step without a group),
// and a run moves between one process and N ranks with its state as it
// is. One process given DefaultShards (EnableSingle before the first
// step) computes the bits of every group that divides them.
func (l *Learner) RLStep(cfg RLConfig, samples []RLSample) (RLStats, error) {
	if l.DP == nil {
		if err := l.EnableSingle(DPConfig{}); err != nil {
			return RLStats{}, err
		}
	}
	return l.RLStepDP(context.Background(), cfg, samples)
}

// rlSequences checks an RL update's configuration and samples and returns
// the samples' sequences, each indexed by its position.
func (l *Learner) rlSequences(cfg RLConfig, samples []RLSample) ([]Sequence, error) {
	if len(samples) == 0 {
		return nil, errors.New("trainer: no samples to learn from")
	}
	if cfg.MicroBatchTokens <= 0 || cfg.PPOEpochs <= 0 || cfg.MiniBatches <= 0 {
		return nil, fmt.Errorf("trainer: micro_batch_tokens, ppo_epochs and mini_batches must be positive (got %d, %d, %d)", cfg.MicroBatchTokens, cfg.PPOEpochs, cfg.MiniBatches)
	}
	if cfg.Loss.KLCoef != 0 && l.ref() == nil {
		return nil, errors.New("trainer: the loss has a KL term but no reference model was given")
	}
	seqs := make([]Sequence, len(samples))
	for i, s := range samples {
		if len(s.Prompt) == 0 {
			return nil, fmt.Errorf("trainer: sample %d has an empty prompt (at least one token, e.g. BOS, must precede the response)", i)
		}
		if len(s.Source) != len(s.Response) {
			return nil, fmt.Errorf("trainer: sample %d has %d response tokens but %d sources", i, len(s.Response), len(s.Source))
		}
		if s.Lag != nil && len(s.Lag) != len(s.Response) {
			return nil, fmt.Errorf("trainer: sample %d has %d response tokens but %d version lags", i, len(s.Response), len(s.Lag))
		}
		if s.Behavior != nil && len(s.Behavior) != len(s.Response) {
			return nil, fmt.Errorf("trainer: sample %d has %d response tokens but %d behaviour log-probs", i, len(s.Response), len(s.Behavior))
		}
		if s.Behavior == nil && cfg.Loss.RolloutCorrection.On() {
			return nil, fmt.Errorf("trainer: sample %d has no behaviour log-probs, but the loss's rollout correction (level %s) weighs every policy token by pi_old/pi_behav; give the sampler's log-probs or turn the correction off", i, cfg.Loss.RolloutCorrection.Level)
		}
		seqs[i] = s.Sequence
		seqs[i].Index = i
	}
	return seqs, nil
}

// runMicroBatch runs the forward and backward passes of one micro-batch
// with inputs in, its loss weighted by w (its share of the mini-batch's
// aggregation), adding to the gradients, and returns the loss's output.
func runMicroBatch(c Compute, cfg loss.Config, mb microBatch, in loss.Inputs, w float64) (loss.Output, error) {
	var out loss.Output
	_, err := c.Run(mb.batch, func(lp, _ []float32) ([]float32, error) {
		for j, pos := range mb.scored {
			in.LogProb[j] = lp[pos]
		}
		var err error
		if out, err = loss.Compute(cfg, in); err != nil {
			return nil, fmt.Errorf("trainer: loss: %w", err)
		}
		grad := make([]float32, len(mb.batch.Tokens))
		for j, pos := range mb.scored {
			grad[pos] = float32(w) * out.GradLogProb[j]
		}
		return grad, nil
	})
	return out, err
}

// addMetrics adds a micro-batch's loss metrics to sums (NaNs, metrics a
// micro-batch cannot compute, left out).
func addMetrics(sums, m map[string]float64) {
	for k, v := range m {
		if !math.IsNaN(v) {
			sums[k] += v
		}
	}
}

// measureMismatch compares pi_old with the behaviour log-probs of the
// samples that carry them, over all of them at once.
func measureMismatch(samples []RLSample, old [][]float32) loss.Mismatch {
	var o, b []float32
	var src []loss.Source
	var seq []int32
	for i, s := range samples {
		if s.Behavior == nil {
			continue
		}
		o = append(o, old[i]...)
		b = append(b, s.Behavior...)
		src = append(src, s.Source...)
		for range s.Response {
			seq = append(seq, int32(i))
		}
	}
	return loss.MeasureMismatch(o, b, src, seq)
}

// measureMismatchByLag is measureMismatch over the tokens of each version
// lag; nil when no sample carries behaviour log-probs.
func measureMismatchByLag(samples []RLSample, old [][]float32) map[int32]loss.Mismatch {
	type acc struct {
		o, b []float32
		src  []loss.Source
		seq  []int32
	}
	by := map[int32]*acc{}
	for i, s := range samples {
		if s.Behavior == nil {
			continue
		}
		for j := range s.Response {
			lag := int32(0)
			if s.Lag != nil {
				lag = s.Lag[j]
			}
			a := by[lag]
			if a == nil {
				a = &acc{}
				by[lag] = a
			}
			a.o, a.b = append(a.o, old[i][j]), append(a.b, s.Behavior[j])
			a.src, a.seq = append(a.src, s.Source[j]), append(a.seq, int32(i))
		}
	}
	var out map[int32]loss.Mismatch
	for lag, a := range by {
		m := loss.MeasureMismatch(a.o, a.b, a.src, a.seq)
		if m.Tokens == 0 {
			continue
		}
		if out == nil {
			out = map[int32]loss.Mismatch{}
		}
		out[lag] = m
	}
	return out
}

// withLogProb returns in with LogProb replaced.
func withLogProb(in loss.Inputs, lp []float32) loss.Inputs {
	in.LogProb = lp
	return in
}

func buildInputs(mb microBatch, samples []RLSample, old, ref [][]float32) loss.Inputs {
	n := len(mb.scored)
	in := loss.Inputs{
		LogProb:    make([]float32, n),
		OldLogProb: make([]float32, 0, n),
		RefLogProb: make([]float32, 0, n),
		// Zeros stand for samples without behaviour log-probs: the loss
		// reads them only with the rollout correction on, and RLStep
		// refuses such samples then.
		BehaviorLogProb: make([]float32, 0, n),
		Advantage:       make([]float32, 0, n),
		Source:          make([]loss.Source, 0, n),
		Seq:             make([]int32, 0, n),
	}
	for _, i := range mb.seqs {
		s := samples[i]
		in.OldLogProb = append(in.OldLogProb, old[i]...)
		if s.Behavior != nil {
			in.BehaviorLogProb = append(in.BehaviorLogProb, s.Behavior...)
		} else {
			in.BehaviorLogProb = append(in.BehaviorLogProb, make([]float32, len(s.Response))...)
		}
		if ref != nil {
			in.RefLogProb = append(in.RefLogProb, ref[i]...)
		} else {
			in.RefLogProb = append(in.RefLogProb, old[i]...)
		}
		in.Source = append(in.Source, s.Source...)
		for range s.Response {
			in.Advantage = append(in.Advantage, s.Advantage)
			in.Seq = append(in.Seq, int32(i))
		}
	}
	return in
}
