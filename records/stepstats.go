package records

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/schemas"
)

// StepStats are the statistics of a rollout step as its manifest's meta
// records them: Meta writes them (every key under its name, each with the
// rule that says when it is present, stated once in stepStatKeys and
// Meta), ReadStepStats reads them back, from the manifests of this build
// and of earlier ones. Every stage that writes or reads a step's
// statistics goes through them; the meta's other keys (the rollout's
// settings: config_hash, seed, group_size, ...) are not statistics and
// ReadStepStats passes over them.
type StepStats struct {
	// Prompts is the groups rolled out (one per prompt drawn).
	Prompts int64
	// Trajectories is every trajectory sampled, failed ones included;
	// TrajectoriesWritten those the step holds.
	Trajectories, TrajectoriesWritten int64
	// GroupsKept and GroupsDropped count the groups written and those
	// dynamic sampling dropped (all rewards equal).
	GroupsKept, GroupsDropped int64
	// Correct counts the trajectories that did not fail and were correct.
	Correct int64
	// Finish counts the trajectories by finish reason (finish.<reason>;
	// schemas.FinishError for the failed ones).
	Finish map[string]int64
	// PolicyCalls and PolicyRetries count the policy's requests and their
	// retries.
	PolicyCalls, PolicyRetries int64
	// PolicyInterrupted counts the policy calls a server stopped at a
	// weight push (rollout.partial), each continued on the new weights;
	// SamplesMixed the trajectories whose policy tokens come from more
	// than one policy version.
	PolicyInterrupted, SamplesMixed int64
	// GroupsCarried counts the groups this step's batch closed without
	// (rollout.carry), carried into the next step; GroupsResumed the
	// groups carried into this step and trained here, and CarrySteps the
	// steps they waited, summed (CarrySteps/GroupsResumed is their mean
	// hold-back; a group carried twice counts 2).
	GroupsCarried, GroupsResumed, CarrySteps int64
	// CarryStepsMax is the most steps one of the groups trained here was
	// held back (the learner widens policy.max_staleness by it).
	CarryStepsMax int64
	// GroupsCarryBound counts the groups carried into this step as often
	// as rollout.carry_max_steps allows, which the step finished whatever
	// the pushes did (the step waited for them).
	GroupsCarryBound int64
	// Interactions counts every collaborator call, AgentInteractions
	// those of each agent (interactions.<agent>) and AgentStatuses those
	// of each agent by status (interactions.<agent>.<status>).
	Interactions      int64
	AgentInteractions map[string]int64
	AgentStatuses     map[string]map[string]int64
	// CollabFailures counts the calls that ended in an error or a
	// timeout; Noisy those answered with deliberate noise.
	CollabFailures, Noisy int64
	// ResponseTokens counts every response token, ExternalTokens,
	// TemplateTokens and GuideTokens those the policy did not sample
	// (tokens.response, tokens.external, tokens.template, tokens.guide).
	ResponseTokens, ExternalTokens, TemplateTokens, GuideTokens int64
	// GuidanceTraces and GuidanceMissing count the guided samples and
	// those whose guidance trace was missing.
	GuidanceTraces, GuidanceMissing int64
	// RewardMean and Accuracy are over the trajectories that did not
	// fail; InteractionsPerTrajectory over all of them;
	// CollabLatencyMsMean over the interactions.
	RewardMean, Accuracy, InteractionsPerTrajectory, CollabLatencyMsMean float64
	// PolicyVersionMin and PolicyVersionMax bound the policy versions
	// that sampled the trajectories.
	PolicyVersionMin, PolicyVersionMax int64
	// FirstError is the step's first failure, on one line and at most
	// maxErrorMeta bytes (and "..."), or "" when no sample failed.
	FirstError string
	// Refill holds dynamic sampling's counts, nil for a step without it.
	Refill *RefillStats
	// DeadLetters is the malformed prompt rows of a step that reads
	// data.sources (DeadLettersMeta writes it); nil for the demo task.
	DeadLetters *int64
	// Check is CheckStep's verdict: CheckPassed, or the refusal; "" before
	// the check.
	Check string
}

// RefillStats are the counts of a step rolled out with dynamic sampling.
type RefillStats struct {
	// Draws is the draws that took at least one prompt.
	Draws int64
	// GroupsSurplus counts the kept groups past the batch (not written).
	GroupsSurplus int64
	// GroupsShort is how many kept groups the step lacks of the batch.
	GroupsShort int64
}

// Failed is the trajectories that failed (finish reason
// schemas.FinishError).
func (s StepStats) Failed() int64 { return s.Finish[schemas.FinishError] }

// ok is the trajectories that did not fail.
func (s StepStats) ok() int64 { return s.Trajectories - s.Failed() }

// FirstFailure is the step's first failure, or "(not recorded)".
func (s StepStats) FirstFailure() string {
	if s.FirstError == "" {
		return "(not recorded)"
	}
	return s.FirstError
}

// FailureWarning is the once-per-step warning for a committed step some of
// whose samples failed (within rollout.max_failed_fraction), or that
// dynamic sampling could not fill (groups_short), from its manifest meta;
// "" when neither happened.
func FailureWarning(step int64, meta map[string]string) string {
	st, err := ReadStepStats(meta)
	if err != nil {
		return fmt.Sprintf("warning: step %d: %v", step, err)
	}
	var lines []string
	if failed := st.Failed(); failed > 0 {
		lines = append(lines, fmt.Sprintf("warning: step %d: %d of %d samples failed and were not trained on (within rollout.max_failed_fraction); the first failure: %s",
			step, failed, st.Trajectories, st.FirstFailure()))
	}
	if r := st.Refill; r != nil && r.GroupsShort > 0 {
		lines = append(lines, fmt.Sprintf("warning: step %d: dynamic sampling kept %d groups, %d short of data.batch_size, after %d draw(s) of %d prompts (%d dropped with all-equal rewards); the dataset or advantage.max_refill_rounds ran out",
			step, st.GroupsKept, r.GroupsShort, r.Draws, st.Prompts, st.GroupsDropped))
	}
	return strings.Join(lines, "\n")
}

// Scored reports whether RewardMean and Accuracy hold means: the step has
// a trajectory that did not fail.
func (s StepStats) Scored() bool { return s.ok() > 0 }

// The meta keys of StepStats whose names are not generated (the finish
// reasons, agents and statuses are).
const (
	metaDeadLetters = "dead_letters"
	// CheckedMeta is the meta key CheckStep sets (StepStats.Check); commit
	// with parquetio.RequireMeta(CheckedMeta) so that no manifest is
	// written when the check failed.
	CheckedMeta           = "step_check"
	metaFirstError        = "first_error"
	metaPolicyErrors      = "policy_errors"
	MetaPrefixFinish      = "finish."
	MetaPrefixInteraction = "interactions."
)

// stepStatKey is a meta key of a StepStats holding an integer or a
// number: the field and when Meta writes it.
type stepStatKey struct {
	key     string
	integer func(*StepStats) *int64
	number  func(*StepStats) *float64
	present func(StepStats) bool
}

func always(StepStats) bool { return true }

func positive(f func(*StepStats) *int64) func(StepStats) bool {
	return func(s StepStats) bool { return *f(&s) > 0 }
}

func withTrajectories(s StepStats) bool { return s.Trajectories > 0 }

func guided(s StepStats) bool { return s.GuidanceTraces+s.GuidanceMissing > 0 }

// stepStatKeys are the meta keys of the fixed fields of StepStats, each
// with its presence: the counts written whatever they hold, those written
// once the step has a group, a trajectory or a guided sample, those
// written when positive, and the means over what they average.
var stepStatKeys = func() []stepStatKey {
	i := func(key string, f func(*StepStats) *int64, present func(StepStats) bool) stepStatKey {
		if present == nil {
			present = positive(f)
		}
		return stepStatKey{key: key, integer: f, present: present}
	}
	n := func(key string, f func(*StepStats) *float64, present func(StepStats) bool) stepStatKey {
		return stepStatKey{key: key, number: f, present: present}
	}
	return []stepStatKey{
		i("prompts", func(s *StepStats) *int64 { return &s.Prompts }, always),
		i("trajectories", func(s *StepStats) *int64 { return &s.Trajectories }, always),
		i("trajectories_written", func(s *StepStats) *int64 { return &s.TrajectoriesWritten }, always),
		i("groups_kept", func(s *StepStats) *int64 { return &s.GroupsKept }, always),
		i("groups_dropped", func(s *StepStats) *int64 { return &s.GroupsDropped }, always),
		i("interactions", func(s *StepStats) *int64 { return &s.Interactions }, always),
		i("collab_failures", func(s *StepStats) *int64 { return &s.CollabFailures }, always),
		i("policy_retries", func(s *StepStats) *int64 { return &s.PolicyRetries }, always),
		// Every group counts its policy calls.
		i("policy_calls", func(s *StepStats) *int64 { return &s.PolicyCalls }, func(s StepStats) bool { return s.Prompts > 0 }),
		i("policy_interrupted", func(s *StepStats) *int64 { return &s.PolicyInterrupted }, nil),
		i("samples_mixed", func(s *StepStats) *int64 { return &s.SamplesMixed }, nil),
		i("groups_carried", func(s *StepStats) *int64 { return &s.GroupsCarried }, nil),
		i("groups_resumed", func(s *StepStats) *int64 { return &s.GroupsResumed }, nil),
		i("carry_steps", func(s *StepStats) *int64 { return &s.CarrySteps }, nil),
		i("carry_steps_max", func(s *StepStats) *int64 { return &s.CarryStepsMax }, nil),
		i("groups_carry_bound", func(s *StepStats) *int64 { return &s.GroupsCarryBound }, nil),
		i("tokens.response", func(s *StepStats) *int64 { return &s.ResponseTokens }, withTrajectories),
		i("correct", func(s *StepStats) *int64 { return &s.Correct }, nil),
		i("noisy", func(s *StepStats) *int64 { return &s.Noisy }, nil),
		i("tokens.external", func(s *StepStats) *int64 { return &s.ExternalTokens }, nil),
		i("tokens.template", func(s *StepStats) *int64 { return &s.TemplateTokens }, nil),
		i("tokens.guide", func(s *StepStats) *int64 { return &s.GuideTokens }, nil),
		i("guidance_traces", func(s *StepStats) *int64 { return &s.GuidanceTraces }, guided),
		i("guidance_missing", func(s *StepStats) *int64 { return &s.GuidanceMissing }, guided),
		n("reward_mean", func(s *StepStats) *float64 { return &s.RewardMean }, StepStats.Scored),
		n("accuracy", func(s *StepStats) *float64 { return &s.Accuracy }, StepStats.Scored),
		n("interactions_per_trajectory", func(s *StepStats) *float64 { return &s.InteractionsPerTrajectory }, withTrajectories),
		n("collab_latency_ms_mean", func(s *StepStats) *float64 { return &s.CollabLatencyMsMean }, func(s StepStats) bool { return s.Interactions > 0 }),
		i("policy_version_min", func(s *StepStats) *int64 { return &s.PolicyVersionMin }, withTrajectories),
		i("policy_version_max", func(s *StepStats) *int64 { return &s.PolicyVersionMax }, withTrajectories),
	}
}()

// refillKeys are the keys of RefillStats, all present when Refill is set.
var refillKeys = []struct {
	key   string
	field func(*RefillStats) *int64
}{
	{"draws", func(r *RefillStats) *int64 { return &r.Draws }},
	{"groups_surplus", func(r *RefillStats) *int64 { return &r.GroupsSurplus }},
	{"groups_short", func(r *RefillStats) *int64 { return &r.GroupsShort }},
}

// formatNumber writes a mean as the meta holds it (6 significant digits).
func formatNumber(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }

// Meta writes s as manifest meta: the keys of stepStatKeys when present,
// finish.<reason> for every reason with trajectories and policy_errors
// (finish.error) always, interactions.<agent> and
// interactions.<agent>.<status> when positive, first_error when a sample
// failed, the keys of RefillStats with dynamic sampling, dead_letters for a
// step that reads data.sources and step_check once checked.
func (s StepStats) Meta() map[string]string {
	m := map[string]string{}
	for _, k := range stepStatKeys {
		switch {
		case !k.present(s):
		case k.integer != nil:
			m[k.key] = strconv.FormatInt(*k.integer(&s), 10)
		default:
			m[k.key] = formatNumber(*k.number(&s))
		}
	}
	for reason, n := range s.Finish {
		if n > 0 {
			m[MetaPrefixFinish+reason] = strconv.FormatInt(n, 10)
		}
	}
	m[metaPolicyErrors] = strconv.FormatInt(s.Failed(), 10)
	for a, n := range s.AgentInteractions {
		if n > 0 {
			m[MetaPrefixInteraction+a] = strconv.FormatInt(n, 10)
		}
	}
	for a, byStatus := range s.AgentStatuses {
		for st, n := range byStatus {
			if n > 0 {
				m[MetaPrefixInteraction+a+"."+st] = strconv.FormatInt(n, 10)
			}
		}
	}
	if s.FirstError != "" {
		m[metaFirstError] = s.FirstError
	}
	if r := s.Refill; r != nil {
		for _, k := range refillKeys {
			m[k.key] = strconv.FormatInt(*k.field(r), 10)
		}
	}
	if s.DeadLetters != nil {
		maps.Copy(m, DeadLettersMeta(*s.DeadLetters))
	}
	if s.Check != "" {
		m[CheckedMeta] = s.Check
	}
	return m
}

// DeadLettersMeta is the meta of a step's dead-letter count alone
// (StepStats.DeadLetters), which CheckStep merges with the rest of the step's
// statistics.
func DeadLettersMeta(n int64) map[string]string {
	return map[string]string{metaDeadLetters: strconv.FormatInt(n, 10)}
}

// ReadStepStats reads the statistics of a step's manifest meta (written by
// Meta, or by an earlier build): a key left out leaves its field zero (nil
// for Refill and DeadLetters, which say whether the step had them), a key
// that is not a statistic is passed over, and a statistic that does not
// parse is an error naming it.
func ReadStepStats(meta map[string]string) (StepStats, error) {
	var s StepStats
	r := statMeta(meta)
	for _, k := range stepStatKeys {
		v, ok := meta[k.key]
		if !ok {
			continue
		}
		if k.integer != nil {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return StepStats{}, r.bad(k.key, err)
			}
			*k.integer(&s) = n
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return StepStats{}, r.bad(k.key, err)
		}
		*k.number(&s) = x
	}
	if err := r.countsByKey(&s); err != nil {
		return StepStats{}, err
	}
	s.FirstError = meta[metaFirstError]
	if _, ok := meta[refillKeys[0].key]; ok {
		s.Refill = &RefillStats{}
		for _, k := range refillKeys {
			n, err := r.count(k.key)
			if err != nil {
				return StepStats{}, err
			}
			*k.field(s.Refill) = n
		}
	}
	if _, ok := meta[metaDeadLetters]; ok {
		n, err := r.count(metaDeadLetters)
		if err != nil {
			return StepStats{}, err
		}
		s.DeadLetters = &n
	}
	s.Check = meta[CheckedMeta]
	return s, nil
}

// statMeta reads a manifest's meta as step statistics.
type statMeta map[string]string

func (m statMeta) bad(k string, err error) error {
	return fmt.Errorf("step statistics: meta %s = %q: %v (the manifest's meta was changed by hand or by another writer; roll the step out again)", k, m[k], err)
}

func (m statMeta) count(k string) (int64, error) {
	n, err := strconv.ParseInt(m[k], 10, 64)
	if err != nil {
		return 0, m.bad(k, err)
	}
	return n, nil
}

// countsByKey reads the counts whose key names what is counted: finish
// reasons, and interactions by agent and by agent and status.
func (m statMeta) countsByKey(s *StepStats) error {
	for k := range m {
		if reason, ok := strings.CutPrefix(k, MetaPrefixFinish); ok {
			n, err := m.count(k)
			if err != nil {
				return err
			}
			if s.Finish == nil {
				s.Finish = map[string]int64{}
			}
			s.Finish[reason] = n
		}
		rest, ok := strings.CutPrefix(k, MetaPrefixInteraction)
		if !ok {
			continue
		}
		n, err := m.count(k)
		if err != nil {
			return err
		}
		agent, status, ok := strings.Cut(rest, ".")
		if !ok {
			if s.AgentInteractions == nil {
				s.AgentInteractions = map[string]int64{}
			}
			s.AgentInteractions[rest] = n
			continue
		}
		if s.AgentStatuses == nil {
			s.AgentStatuses = map[string]map[string]int64{}
		}
		if s.AgentStatuses[agent] == nil {
			s.AgentStatuses[agent] = map[string]int64{}
		}
		s.AgentStatuses[agent][status] = n
	}
	return nil
}

// IsStepStatText reports whether the meta key k is a statistic that holds
// text (first_error, step_check), which a reader must not take for a
// number even when it looks like one.
func IsStepStatText(k string) bool { return k == metaFirstError || k == CheckedMeta }
