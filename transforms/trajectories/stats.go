package trajectories

import (
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Stats are additive counts of a step (one per group, merged by StepMeta),
// from which records.StepStats makes the step's statistics.
type Stats struct {
	// Counts holds named counts, under the names of their records.StepStats meta
	// keys.
	Counts map[string]int64
	// RewardSum and LatencyMsSum sum the rewards of the trajectories that
	// did not fail and the latencies of collaborator calls.
	RewardSum, LatencyMsSum float64
	// VersionMin and VersionMax bound the policy versions seen (valid when
	// Counts["trajectories"] > 0).
	VersionMin, VersionMax int64
	// CarryStepsMax is the most steps a group of the step was carried
	// past before it (rollout.carry).
	CarryStepsMax int64
	// FirstError is the first failure of the step ("prompt <id> sample
	// <j>: <why>"; the smallest such text when groups merge, so that it
	// does not depend on bundle order), or "" when no sample failed.
	FirstError string
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	if o.Counts["trajectories"] > 0 {
		if s.Counts["trajectories"] == 0 {
			s.VersionMin, s.VersionMax = o.VersionMin, o.VersionMax
		} else {
			s.VersionMin, s.VersionMax = min(s.VersionMin, o.VersionMin), max(s.VersionMax, o.VersionMax)
		}
	}
	if s.Counts == nil {
		s.Counts = map[string]int64{}
	}
	for k, v := range o.Counts {
		s.Counts[k] += v
	}
	s.CarryStepsMax = max(s.CarryStepsMax, o.CarryStepsMax)
	s.RewardSum += o.RewardSum
	s.LatencyMsSum += o.LatencyMsSum
	if o.FirstError != "" && (s.FirstError == "" || o.FirstError < s.FirstError) {
		s.FirstError = o.FirstError
	}
}

// GroupStats counts one group; kept says whether its trajectories are
// written.
func GroupStats(g Group, kept bool) Stats {
	c := map[string]int64{"prompts": 1}
	st := Stats{Counts: c, VersionMin: math.MaxInt64, VersionMax: math.MinInt64}
	if kept {
		c["groups_kept"]++
		c["trajectories_written"] += int64(len(g.Trajectories))
	} else {
		c["groups_dropped"]++
	}
	for j, e := range g.Errors {
		if e != "" {
			st.FirstError = fmt.Sprintf("prompt %s sample %d: %s", g.Prompt.ID, j, e)
			break
		}
	}
	c["policy_calls"] += g.PolicyCalls
	c["policy_retries"] += g.PolicyRetries
	if g.CarriedSteps > 0 {
		c["groups_resumed"]++
		c["carry_steps"] += g.CarriedSteps
		st.CarryStepsMax = g.CarriedSteps
	}
	if g.AtCarryBound {
		c["groups_carry_bound"]++
	}
	if g.PolicyInterrupted > 0 {
		c["policy_interrupted"] += g.PolicyInterrupted
	}
	if g.Guided > 0 || g.GuideMissing > 0 {
		c["guidance_traces"] += g.Guided
		c["guidance_missing"] += g.GuideMissing
	}
	for _, t := range g.Trajectories {
		c["trajectories"]++
		c["finish."+t.FinishReason]++
		st.VersionMin, st.VersionMax = min(st.VersionMin, t.PolicyVersion), max(st.VersionMax, t.PolicyVersion)
		if mixedVersions(&t) {
			c["samples_mixed"]++
		}
		if t.FinishReason != schemas.FinishError {
			st.RewardSum += float64(t.Reward)
			if t.Correct {
				c["correct"]++
			}
		}
		c["tokens.response"] += int64(len(t.ResponseIDs))
		for _, s := range t.TokenSource {
			switch s {
			case schemas.SourcePolicy:
			case schemas.SourceTemplate:
				c["tokens.template"]++
			case schemas.SourceGuide:
				c["tokens.guide"]++
			default:
				c["tokens.external"]++
			}
		}
		for i, a := range t.InteractionAgent {
			status := t.InteractionStatus[i]
			c["interactions"]++
			c["interactions."+a]++
			c["interactions."+a+"."+status]++
			if status == schemas.StatusError || status == schemas.StatusTimeout {
				c["collab_failures"]++
			}
			if t.InteractionNoisy[i] {
				c["noisy"]++
			}
			st.LatencyMsSum += float64(t.InteractionLatencyMs[i])
		}
	}
	return st
}

// maxErrorMeta bounds records.StepStats.FirstError.
const maxErrorMeta = 1000

// StepMeta merges every group's Stats into one parquetio.StepMeta (the
// metrics and the largest policy version), for
// parquetio.WriteTrajectoriesMeta. It emits one element even when there
// are no groups.
//
//	PCollection<Stats> -> PCollection<parquetio.StepMeta>
func StepMeta(s beam.Scope, stats beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.StepMeta")
	return beam.ParDo(s, mergeStats, beam.Impulse(s), beam.SideInput{Input: stats})
}

func mergeStats(_ []byte, iter func(*Stats) bool) parquetio.StepMeta {
	var all Stats
	var st Stats
	for iter(&st) {
		all.Add(st)
	}
	m := parquetio.StepMeta{Meta: all.StepStats().Meta()}
	if all.Counts["trajectories"] > 0 {
		m.PolicyVersion = all.VersionMax
	}
	return m
}

// DeadLettersMeta turns the count of a step's malformed prompt rows
// (prompts.WriteDeadLetters' output) into a StepMeta holding it as
// records.StepStats.DeadLetters, for CheckStep to merge.
//
//	PCollection<int> -> PCollection<parquetio.StepMeta>
func DeadLettersMeta(s beam.Scope, counts beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.DeadLettersMeta")
	return beam.ParDo(s, deadLettersStepMeta, counts)
}

func deadLettersStepMeta(n int) parquetio.StepMeta {
	return parquetio.StepMeta{Meta: records.DeadLettersMeta(int64(n))}
}

// mixedVersions reports whether t's policy tokens come from more than one
// policy version (it was continued across a weight push).
func mixedVersions(t *schemas.Trajectory) bool {
	first, seen := int64(0), false
	for i, s := range t.TokenSource {
		if s != schemas.SourcePolicy || len(t.TokenPolicyVersion) == 0 {
			continue
		}
		v := t.TokenPolicyVersion[i]
		if seen && v != first {
			return true
		}
		first, seen = v, true
	}
	return false
}
