package trajectories

import (
	"strings"

	"github.com/aipo-rl/aipo/records"
)

// StepStats turns the merged counts of a step into its statistics: the
// means over what they average, the policy versions when there are
// trajectories, and the first failure on one line of at most maxErrorMeta
// bytes.
func (s Stats) StepStats() records.StepStats {
	c := s.Counts
	st := records.StepStats{
		Prompts: c["prompts"], Trajectories: c["trajectories"], TrajectoriesWritten: c["trajectories_written"],
		GroupsKept: c["groups_kept"], GroupsDropped: c["groups_dropped"], Correct: c["correct"],
		PolicyCalls: c["policy_calls"], PolicyRetries: c["policy_retries"], Interactions: c["interactions"],
		PolicyInterrupted: c["policy_interrupted"], SamplesMixed: c["samples_mixed"],
		GroupsCarried: c["groups_carried"], GroupsResumed: c["groups_resumed"], CarrySteps: c["carry_steps"], CarryStepsMax: s.CarryStepsMax, GroupsCarryBound: c["groups_carry_bound"],
		CollabFailures: c["collab_failures"], Noisy: c["noisy"],
		ResponseTokens: c["tokens.response"], ExternalTokens: c["tokens.external"], TemplateTokens: c["tokens.template"], GuideTokens: c["tokens.guide"],
		GuidanceTraces: c["guidance_traces"], GuidanceMissing: c["guidance_missing"],
	}
	for k := range c {
		if reason, ok := strings.CutPrefix(k, records.MetaPrefixFinish); ok {
			if st.Finish == nil {
				st.Finish = map[string]int64{}
			}
			st.Finish[reason] = c[k]
		}
		rest, ok := strings.CutPrefix(k, records.MetaPrefixInteraction)
		if !ok {
			continue
		}
		if agent, status, ok := strings.Cut(rest, "."); ok {
			if st.AgentStatuses == nil {
				st.AgentStatuses = map[string]map[string]int64{}
			}
			if st.AgentStatuses[agent] == nil {
				st.AgentStatuses[agent] = map[string]int64{}
			}
			st.AgentStatuses[agent][status] = c[k]
		} else {
			if st.AgentInteractions == nil {
				st.AgentInteractions = map[string]int64{}
			}
			st.AgentInteractions[rest] = c[k]
		}
	}
	if ok := st.Trajectories - st.Failed(); ok > 0 {
		st.RewardMean = s.RewardSum / float64(ok)
		st.Accuracy = float64(st.Correct) / float64(ok)
	}
	if n := st.Trajectories; n > 0 {
		st.InteractionsPerTrajectory = float64(st.Interactions) / float64(n)
		st.PolicyVersionMin, st.PolicyVersionMax = s.VersionMin, s.VersionMax
	}
	if k := st.Interactions; k > 0 {
		st.CollabLatencyMsMean = s.LatencyMsSum / float64(k)
	}
	if e := s.FirstError; e != "" {
		if len(e) > maxErrorMeta {
			e = e[:maxErrorMeta] + "..."
		}
		st.FirstError = strings.Join(strings.Fields(e), " ") // one line, for logs and errors
	}
	return st
}
