package runconfig

import (
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/transforms/trajectories/guidance"
)

// ApplyLUFFY turns a configuration into LUFFY's (arXiv 2504.14945) on
// the same base: plain RLVR whose calls get no answer, one guidance trace per group
// (the prompt's reference solution), its tokens trained with the policy
// shaping pi/(pi+gamma), gamma 0.1, without clip and with the off-policy
// model's probability taken as 1, one token-level mean over the step (the
// 1/Z of LUFFY's objective), no KL.
func (c *Config) ApplyLUFFY() {
	c.Rollout.Unanswered = true
	c.Rollout.Guidance = guidance.Config{Source: guidance.SourceSolution, Traces: 1}
	c.Learner.Loss.External, c.Learner.Loss.Gamma = loss.ExternalLUFFY, loss.DefaultGamma
	c.Learner.Loss.Aggregation = loss.AggTokenMean
	c.Learner.Loss.KLCoef = 0
}
