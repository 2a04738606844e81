package records

import "github.com/aipo-rl/aipo/learner/loss"

// Learn is the learner's record of a step: written by aipo train
// and aipo learn to <run>/metrics/learn-NNNNNN.json (and, one a line, into
// <run>/metrics.jsonl), read back here and by a resumed run.
type Learn struct {
	Kind          string `json:"kind"` // rundir.LearnKind
	Step          int64  `json:"step"`
	PolicyVersion int64  `json:"policy_version"` // of the checkpoint written
	Trajectories  int    `json:"trajectories"`
	Skipped       int    `json:"skipped"` // trajectories without trainable tokens (failed rollouts)
	// Groups is the step's groups (one per prompt), GroupsNoSignal those
	// with no learning signal: every sample's advantage 0 (tied rewards;
	// under rejection SFT, no correct sample). Both 0 in records written
	// before they were counted.
	Groups         int                `json:"groups,omitempty"`
	GroupsNoSignal int                `json:"groups_no_signal,omitempty"`
	Tokens         int                `json:"tokens"`
	Loss           float64            `json:"loss"`
	GradNorm       float64            `json:"grad_norm"`
	LR             float64            `json:"lr"`
	Seconds        float64            `json:"seconds"`
	LossMetrics    map[string]float64 `json:"loss_metrics"`
	Rollout        RolloutMeta        `json:"rollout,omitempty"` // the step manifest's metrics, numbers as numbers
	// Mismatch compares the learner's log-probs of the policy's tokens
	// with the sampler's (absent when the step carries none).
	Mismatch *loss.Mismatch `json:"mismatch,omitempty"`
	// Staleness is the version lag of the trained tokens (absent in
	// records written before it was measured).
	Staleness *Staleness `json:"staleness,omitempty"`
	// Group is how the step was taken (absent in records written before
	// one process took its steps as a group of one, whose one-process
	// steps differed from a group's in float32 rounding).
	Group *Group `json:"group,omitempty"`
}

// Group is the data-parallel group a learner step was taken by: Ranks
// processes (1: one process, the one rank of its own group), each
// mini-batch split into Shards virtual shards, ZeRO stage Zero. A step's
// update is the same bits at every Ranks that divides Shards.
type Group struct {
	Ranks  int `json:"ranks"`
	Shards int `json:"shards"`
	Zero   int `json:"zero"`
}
