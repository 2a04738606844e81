package trajectories

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Stats are additive counts of a step (one per group, merged by StepMeta).
type Stats struct {
	// Counts holds named counts, written to the manifest's meta as they are
	// (see StatsMeta for the names).
	Counts map[string]int64
	// RewardSum and LatencyMsSum sum the rewards of the trajectories that
	// did not fail and the latencies of collaborator calls.
	RewardSum, LatencyMsSum float64
	// VersionMin and VersionMax bound the policy versions seen (valid when
	// Counts["trajectories"] > 0).
	VersionMin, VersionMax int64
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
	if g.Guided > 0 || g.GuideMissing > 0 {
		c["guidance_traces"] += g.Guided
		c["guidance_missing"] += g.GuideMissing
	}
	for _, t := range g.Trajectories {
		c["trajectories"]++
		c["finish."+t.FinishReason]++
		st.VersionMin, st.VersionMax = min(st.VersionMin, t.PolicyVersion), max(st.VersionMax, t.PolicyVersion)
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

// StatsMeta writes merged stats as manifest meta: every count under its
// name (prompts, trajectories, trajectories_written, groups_kept,
// groups_dropped, correct, finish.<reason>, policy_calls, policy_retries,
// interactions, interactions.<agent>, interactions.<agent>.<status>,
// collab_failures, noisy, tokens.response, tokens.external,
// tokens.template, and with guidance traces guidance_traces,
// guidance_missing and tokens.guide), plus policy_errors (= finish.error), reward_mean and
// accuracy over the trajectories that did not fail, interactions_per_trajectory,
// collab_latency_ms_mean, policy_version_min/max, and first_error (the
// first failure's text, at most 1000 bytes, when a sample failed).
func StatsMeta(s Stats) map[string]string {
	m := map[string]string{}
	keys := make([]string, 0, len(s.Counts))
	for k := range s.Counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m[k] = strconv.FormatInt(s.Counts[k], 10)
	}
	for _, k := range []string{"prompts", "trajectories", "trajectories_written", "groups_kept", "groups_dropped", "interactions", "collab_failures", "policy_retries"} {
		if _, ok := m[k]; !ok {
			m[k] = "0"
		}
	}
	n := s.Counts["trajectories"]
	ok := n - s.Counts["finish."+schemas.FinishError]
	m["policy_errors"] = strconv.FormatInt(s.Counts["finish."+schemas.FinishError], 10)
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	if ok > 0 {
		m["reward_mean"] = f(s.RewardSum / float64(ok))
		m["accuracy"] = f(float64(s.Counts["correct"]) / float64(ok))
	}
	if n > 0 {
		m["interactions_per_trajectory"] = f(float64(s.Counts["interactions"]) / float64(n))
		m["policy_version_min"] = strconv.FormatInt(s.VersionMin, 10)
		m["policy_version_max"] = strconv.FormatInt(s.VersionMax, 10)
	}
	if e := s.FirstError; e != "" {
		if len(e) > maxErrorMeta {
			e = e[:maxErrorMeta] + "..."
		}
		e = strings.Join(strings.Fields(e), " ") // one line, for logs and errors
		m["first_error"] = e
	}
	if k := s.Counts["interactions"]; k > 0 {
		m["collab_latency_ms_mean"] = f(s.LatencyMsSum / float64(k))
	}
	return m
}

// maxErrorMeta bounds the first_error meta.
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
	m := parquetio.StepMeta{Meta: StatsMeta(all)}
	if all.Counts["trajectories"] > 0 {
		m.PolicyVersion = all.VersionMax
	}
	return m
}

// CountMeta turns a count (such as prompts.WriteDeadLetters' output) into
// a StepMeta holding it under name.
//
//	PCollection<int> -> PCollection<parquetio.StepMeta>
func CountMeta(s beam.Scope, name string, counts beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.CountMeta")
	return beam.ParDo(s, &countMetaFn{Name: name}, counts)
}

type countMetaFn struct {
	Name string `json:"name"`
}

func (f *countMetaFn) ProcessElement(n int) parquetio.StepMeta {
	return parquetio.StepMeta{Meta: map[string]string{f.Name: strconv.Itoa(n)}}
}
