package schemas

import (
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/internal/sampling"
)

// InteractionAgents are the values of Trajectory.InteractionAgent: the names
// of the external token sources.
var InteractionAgents = [...]string{SourceNames[SourceVerify], SourceNames[SourceKnowledge], SourceNames[SourceReason]}

// Validate checks the row invariants that readers rely on and returns an
// error naming the first column that breaks one:
//   - schema_version is one this build reads;
//   - response_ids, token_source and behavior_logprobs have equal length;
//   - token_policy_version is empty or as long as response_ids, holds no
//     negative version, and policy_version is its oldest policy token's;
//   - every token source is a known one, and behavior_logprobs is 0 for every
//     token the policy did not sample and finite for the ones it did;
//   - the interaction_* columns have equal length;
//   - interaction_agent and interaction_status hold known values;
//   - interaction spans [start, end) lie inside response_ids, in call order
//     without overlap, and cover only external tokens;
//   - finish_reason is a known value.
func (t *Trajectory) Validate() error {
	if t.SchemaVersion < 1 || t.SchemaVersion > SchemaVersion {
		return fmt.Errorf("schema_version %d is not supported (this build reads 1..%d)", t.SchemaVersion, SchemaVersion)
	}
	n := len(t.ResponseIDs)
	if len(t.TokenSource) != n {
		return fmt.Errorf("token_source has %d entries, response_ids has %d (one source per response token)", len(t.TokenSource), n)
	}
	if len(t.BehaviorLogProbs) != n {
		return fmt.Errorf("behavior_logprobs has %d entries, response_ids has %d (one log-prob per response token)", len(t.BehaviorLogProbs), n)
	}
	if err := t.validateTokenVersions(); err != nil {
		return err
	}
	for i, s := range t.TokenSource {
		if s < 0 || int(s) >= len(SourceNames) {
			return fmt.Errorf("token_source[%d] is %d, want 0..%d (%v)", i, s, len(SourceNames)-1, SourceNames)
		}
		lp := t.BehaviorLogProbs[i]
		if s != SourcePolicy && lp != 0 {
			return fmt.Errorf("behavior_logprobs[%d] is %g for a %s token, want 0 (only policy tokens have a behaviour log-prob)", i, lp, SourceName(s))
		}
		if math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0) {
			return fmt.Errorf("behavior_logprobs[%d] is %g, want a finite log-probability", i, lp)
		}
	}
	k := len(t.InteractionAgent)
	for _, c := range [...]struct {
		name string
		n    int
	}{
		{"interaction_query", len(t.InteractionQuery)},
		{"interaction_result", len(t.InteractionResult)},
		{"interaction_status", len(t.InteractionStatus)},
		{"interaction_latency_ms", len(t.InteractionLatencyMs)},
		{"interaction_span_start", len(t.InteractionSpanStart)},
		{"interaction_span_end", len(t.InteractionSpanEnd)},
		{"interaction_noisy", len(t.InteractionNoisy)},
	} {
		if c.n != k {
			return fmt.Errorf("%s has %d entries, interaction_agent has %d (one entry per interaction)", c.name, c.n, k)
		}
	}
	prevEnd := int32(0)
	for i := range k {
		if !knownAgent(t.InteractionAgent[i]) {
			return fmt.Errorf("interaction_agent[%d] is %q, want one of %v", i, t.InteractionAgent[i], InteractionAgents)
		}
		switch t.InteractionStatus[i] {
		case StatusOK, StatusError, StatusTimeout, StatusLimit:
		default:
			return fmt.Errorf("interaction_status[%d] is %q, want %s, %s, %s or %s", i, t.InteractionStatus[i], StatusOK, StatusError, StatusTimeout, StatusLimit)
		}
		a, b := t.InteractionSpanStart[i], t.InteractionSpanEnd[i]
		if a < prevEnd || a > b || int(b) > n {
			return fmt.Errorf("interaction_span_start/end[%d] is [%d,%d), want prev end %d <= start <= end <= len(response_ids) %d", i, a, b, prevEnd, n)
		}
		for j := a; j < b; j++ {
			if t.TokenSource[j] == SourcePolicy {
				return fmt.Errorf("interaction_span_start/end[%d] [%d,%d) covers policy token %d (spans hold only external tokens)", i, a, b, j)
			}
		}
		prevEnd = b
	}
	switch t.FinishReason {
	case sampling.FinishEOS, sampling.FinishStop, sampling.FinishLength, FinishError:
	default:
		return fmt.Errorf("finish_reason is %q, want %s, %s, %s or %s", t.FinishReason, sampling.FinishEOS, sampling.FinishStop, sampling.FinishLength, FinishError)
	}
	return nil
}

func knownAgent(a string) bool {
	for _, s := range InteractionAgents {
		if a == s {
			return true
		}
	}
	return false
}

// validateTokenVersions checks token_policy_version against response_ids
// and policy_version (the oldest version that sampled a policy token).
func (t *Trajectory) validateTokenVersions() error {
	tv := t.TokenPolicyVersion
	if len(tv) == 0 {
		return nil
	}
	if len(tv) != len(t.ResponseIDs) {
		return fmt.Errorf("token_policy_version has %d entries, response_ids has %d (one version per response token, or none for one version per row)", len(tv), len(t.ResponseIDs))
	}
	oldest, policy := int64(0), false
	for i, v := range tv {
		if v < 0 {
			return fmt.Errorf("token_policy_version[%d] is %d, want a policy version >= 0", i, v)
		}
		if t.TokenSource[i] == SourcePolicy && (!policy || v < oldest) {
			oldest, policy = v, true
		}
	}
	if policy && oldest != t.PolicyVersion {
		return fmt.Errorf("policy_version is %d, but the oldest version in token_policy_version of a policy token is %d (policy_version names the oldest weights that sampled the row)", t.PolicyVersion, oldest)
	}
	return nil
}
