package samples

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/schemas"
)

// WithBehavior gives each of step k's samples the behaviour log-probs its
// trajectory recorded (behavior_logprobs: the sampler's log-probability of
// each policy token), so that the learner measures the train-inference
// mismatch and, when rc is on, corrects for it. trajs are the step's
// trajectories as Samples left them (sorted, the trainable ones in the
// order of samples).
//
// A step whose policy tokens all hold exactly 0 carries no behaviour
// log-probs: its writer had none (0 is what the schema stores for tokens
// without one). Its samples get none, so the mismatch is not measured; with
// the correction on that is an error naming the step and the fix. (A single
// policy token may legitimately have log-probability 0 in float32, when the
// policy is certain of it; every token of a sampled step never is.)
func WithBehavior(k int64, trajs []schemas.Trajectory, samples []trainer.RLSample, rc loss.RolloutCorrection) error {
	var kept []schemas.Trajectory
	for _, t := range trajs {
		if Trainable(t) {
			kept = append(kept, t)
		}
	}
	if len(kept) != len(samples) {
		return fmt.Errorf("learn step %d: %d trainable trajectories for %d samples", k, len(kept), len(samples))
	}
	policy, nonzero := 0, false
	for _, t := range kept {
		for j, s := range t.TokenSource {
			if s != schemas.SourcePolicy {
				continue
			}
			policy++
			if j < len(t.BehaviorLogProbs) && t.BehaviorLogProbs[j] != 0 {
				nonzero = true
			}
		}
	}
	if !nonzero {
		if rc.On() && policy > 0 {
			return fmt.Errorf("learn step %d: learner.loss.rollout_correction is on (level %s), but the step's trajectories carry no behaviour log-probs (behavior_logprobs is 0 for all %d policy tokens: the sampler returned none); roll step %d out again with a policy server that returns the log-probs of what it samples (aipo rollout --config <run.yaml> --step %d --force), or set learner.loss.rollout_correction.level: off; checkpoint %d was not written",
				k, rc.Level, policy, k, k, k+1)
		}
		return nil
	}
	for i, t := range kept {
		if len(t.BehaviorLogProbs) != len(t.ResponseIDs) {
			return fmt.Errorf("learn step %d: trajectory %s/%d has %d behaviour log-probs for %d response tokens; roll step %d out again (aipo rollout --config <run.yaml> --step %d --force)",
				k, t.PromptID, t.SampleIndex, len(t.BehaviorLogProbs), len(t.ResponseIDs), k, k)
		}
		samples[i].Behavior = t.BehaviorLogProbs
	}
	return nil
}

// MismatchOf is the learner record's form of an update's mismatch
// measurement: nil when nothing was compared.
func MismatchOf(st trainer.RLStats) *loss.Mismatch {
	if st.Mismatch.Tokens == 0 {
		return nil
	}
	m := st.Mismatch
	return &m
}

// WithVersions gives each of step k's samples the version lag of every
// response token (k minus its token_policy_version; rows without the
// column: their policy_version) and returns the step's staleness record:
// the versions and lags of the trained policy tokens. trajs and samples
// are as WithBehavior takes them.
func WithVersions(k int64, trajs []schemas.Trajectory, samples []trainer.RLSample) (*records.Staleness, error) {
	var kept []*schemas.Trajectory
	for i := range trajs {
		if Trainable(trajs[i]) {
			kept = append(kept, &trajs[i])
		}
	}
	if len(kept) != len(samples) {
		return nil, fmt.Errorf("learn step %d: %d trainable trajectories for %d samples", k, len(kept), len(samples))
	}
	st := &records.Staleness{Versions: map[string]int{}, Tokens: map[string]int{}, Samples: map[string]int{}}
	var lagSum float64
	policy := 0
	for i, t := range kept {
		tv := t.TokenVersions()
		lags := make([]int32, len(tv))
		oldest, newest, seen := int64(0), int64(0), false
		for j, v := range tv {
			if v > k {
				return nil, fmt.Errorf("learn step %d: trajectory %s/%d token %d was sampled by policy version %d, newer than the checkpoint %d this step updates; point policy.endpoint at this run's servers and roll step %d out again (aipo rollout --config <run.yaml> --step %d --force)",
					k, t.PromptID, t.SampleIndex, j, v, k, k, k)
			}
			lags[j] = int32(k - v)
			if t.TokenSource[j] != schemas.SourcePolicy {
				continue
			}
			policy++
			lagSum += float64(k - v)
			st.Versions[records.LagKey(v)]++
			st.Tokens[records.LagKey(k-v)]++
			st.MaxLag = max(st.MaxLag, k-v)
			if !seen {
				oldest, newest, seen = v, v, true
			}
			oldest, newest = min(oldest, v), max(newest, v)
		}
		if seen {
			st.Samples[records.LagKey(k-oldest)]++
			if newest != oldest {
				st.Mixed++
			}
		}
		samples[i].Lag = lags
	}
	if policy > 0 {
		st.MeanLag = lagSum / float64(policy)
	}
	return st, nil
}

// MismatchByLag is the learner record's form of an update's mismatch by
// version lag: nil when nothing was compared.
func MismatchByLag(st trainer.RLStats) map[string]loss.Mismatch {
	if len(st.MismatchByLag) == 0 {
		return nil
	}
	out := make(map[string]loss.Mismatch, len(st.MismatchByLag))
	for lag, m := range st.MismatchByLag {
		out[records.LagKey(int64(lag))] = m
	}
	return out
}
