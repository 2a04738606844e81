package records

import (
	"strconv"

	"github.com/aipo-rl/aipo/learner/loss"
)

// Staleness is how far behind the checkpoint a learner step updates (step
// k's, policy version k) the weights were that sampled the step's trained
// tokens, from each token's policy version (token_policy_version). A lag
// is k minus a token's version.
type Staleness struct {
	// Versions counts the trained policy tokens by the policy version that
	// sampled them: the mix of versions the step trained on (keys decimal).
	Versions map[string]int `json:"versions"`
	// Tokens counts the trained policy tokens by version lag (keys decimal).
	Tokens map[string]int `json:"tokens"`
	// Samples counts the trained samples by the lag of their oldest policy
	// token (keys decimal).
	Samples map[string]int `json:"samples"`
	// Mixed is how many trained samples hold policy tokens of more than one
	// version (continued across a weight push).
	Mixed int `json:"mixed"`
	// MeanLag is the mean lag over the trained policy tokens; MaxLag the
	// largest.
	MeanLag float64 `json:"mean_lag"`
	MaxLag  int64   `json:"max_lag"`
	// MismatchByLag is the learner's train-inference mismatch measured over
	// the policy tokens of each lag (keys decimal): how the gap between
	// the sampler's and the learner's log-probs grows as tokens go
	// off-policy. Absent when the step carries no behaviour log-probs.
	MismatchByLag map[string]loss.Mismatch `json:"mismatch_by_lag,omitempty"`
}

// LagKey is the key of a lag or a version in Staleness's maps.
func LagKey(v int64) string { return strconv.FormatInt(v, 10) }
