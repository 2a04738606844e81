package analytics

import (
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/schemas"
)

// stepAcc accumulates the facts of one step. It is the value combined per
// step key; every field adds up (or concatenates) under merge.
type stepAcc struct {
	Step          int64
	PolicyVersion int64

	Trajectories, Correct, FinishLength int64
	RewardSum                           float64

	Prompts, FailedPrompts, SolvedPrompts int64

	CallsVerify, CallsKnowledge, CallsReason, CallsOther int64

	Tokens, TokensVerify, TokensKnowledge, TokensReason, TokensTemplate, TokensUnknown int64

	StatusOK, StatusError, StatusTimeout, StatusLimit, StatusOther int64
	KnowledgeOK, KnowledgeNoisy                                    int64

	ResponseLens []int64
	LatenciesMs  []float64

	// PolicyVersions[i] sampled PolicyVersionTokens[i] of the step's policy
	// tokens (versions in increasing order, each once); MixedSamples is how
	// many samples hold policy tokens of more than one version.
	PolicyVersions, PolicyVersionTokens []int64
	MixedSamples                        int64
}

// mergeVersions adds the version counts of b into those of a, in version
// order, into new slices.
func mergeVersions(av, an, bv, bn []int64) ([]int64, []int64) {
	var v, n []int64
	i, j := 0, 0
	for i < len(av) || j < len(bv) {
		switch {
		case j == len(bv) || (i < len(av) && av[i] < bv[j]):
			v, n = append(v, av[i]), append(n, an[i])
			i++
		case i == len(av) || bv[j] < av[i]:
			v, n = append(v, bv[j]), append(n, bn[j])
			j++
		default:
			v, n = append(v, av[i]), append(n, an[i]+bn[j])
			i, j = i+1, j+1
		}
	}
	return v, n
}

// merge adds b into a copy of a. Slices are copied, never shared.
func merge(a, b stepAcc) stepAcc {
	out := a
	if b.Step > out.Step {
		out.Step = b.Step
	}
	out.PolicyVersion = max(a.PolicyVersion, b.PolicyVersion)
	out.Trajectories += b.Trajectories
	out.Correct += b.Correct
	out.FinishLength += b.FinishLength
	out.RewardSum += b.RewardSum
	out.Prompts += b.Prompts
	out.FailedPrompts += b.FailedPrompts
	out.SolvedPrompts += b.SolvedPrompts
	out.CallsVerify += b.CallsVerify
	out.CallsKnowledge += b.CallsKnowledge
	out.CallsReason += b.CallsReason
	out.CallsOther += b.CallsOther
	out.Tokens += b.Tokens
	out.TokensVerify += b.TokensVerify
	out.TokensKnowledge += b.TokensKnowledge
	out.TokensReason += b.TokensReason
	out.TokensTemplate += b.TokensTemplate
	out.TokensUnknown += b.TokensUnknown
	out.StatusOK += b.StatusOK
	out.StatusError += b.StatusError
	out.StatusTimeout += b.StatusTimeout
	out.StatusLimit += b.StatusLimit
	out.StatusOther += b.StatusOther
	out.KnowledgeOK += b.KnowledgeOK
	out.KnowledgeNoisy += b.KnowledgeNoisy
	out.ResponseLens = slices.Concat(a.ResponseLens, b.ResponseLens)
	out.LatenciesMs = slices.Concat(a.LatenciesMs, b.LatenciesMs)
	out.PolicyVersions, out.PolicyVersionTokens = mergeVersions(a.PolicyVersions, a.PolicyVersionTokens, b.PolicyVersions, b.PolicyVersionTokens)
	out.MixedSamples += b.MixedSamples
	return out
}

// Agent names as written in Trajectory.InteractionAgent.
var (
	agentVerify    = schemas.SourceName(schemas.SourceVerify)
	agentKnowledge = schemas.SourceName(schemas.SourceKnowledge)
	agentReason    = schemas.SourceName(schemas.SourceReason)
)

// countVersion counts one policy token of version v (a's versions are
// one trajectory's, kept in version order).
func (a *stepAcc) countVersion(v int64) {
	i, found := slices.BinarySearch(a.PolicyVersions, v)
	if !found {
		a.PolicyVersions = slices.Insert(a.PolicyVersions, i, v)
		a.PolicyVersionTokens = slices.Insert(a.PolicyVersionTokens, i, 0)
		if len(a.PolicyVersions) == 2 {
			a.MixedSamples = 1
		}
	}
	a.PolicyVersionTokens[i]++
}

// summarize reduces one trajectory to its contribution to its step.
func summarize(t schemas.Trajectory) stepAcc {
	a := stepAcc{Step: t.Step, PolicyVersion: t.PolicyVersion, Trajectories: 1, RewardSum: float64(t.Reward)}
	if t.Correct {
		a.Correct = 1
	}
	if t.FinishReason == sampling.FinishLength {
		a.FinishLength = 1
	}
	a.Tokens = int64(len(t.TokenSource))
	for i, s := range t.TokenSource {
		switch s {
		case schemas.SourcePolicy:
			a.countVersion(t.TokenVersion(i))
		case schemas.SourceVerify:
			a.TokensVerify++
		case schemas.SourceKnowledge:
			a.TokensKnowledge++
		case schemas.SourceReason:
			a.TokensReason++
		case schemas.SourceTemplate:
			a.TokensTemplate++
		default:
			a.TokensUnknown++
		}
	}
	a.ResponseLens = []int64{int64(len(t.ResponseIDs))}
	for i, agent := range t.InteractionAgent {
		switch agent {
		case agentVerify:
			a.CallsVerify++
		case agentKnowledge:
			a.CallsKnowledge++
		case agentReason:
			a.CallsReason++
		default:
			a.CallsOther++
		}
		status := at(t.InteractionStatus, i)
		switch status {
		case schemas.StatusOK:
			a.StatusOK++
		case schemas.StatusError:
			a.StatusError++
		case schemas.StatusTimeout:
			a.StatusTimeout++
		case schemas.StatusLimit:
			a.StatusLimit++
		default:
			a.StatusOther++
		}
		if status != schemas.StatusLimit && i < len(t.InteractionLatencyMs) {
			a.LatenciesMs = append(a.LatenciesMs, float64(t.InteractionLatencyMs[i]))
		}
		if agent == agentKnowledge && status == schemas.StatusOK {
			a.KnowledgeOK++
			if i < len(t.InteractionNoisy) && t.InteractionNoisy[i] {
				a.KnowledgeNoisy++
			}
		}
	}
	return a
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// promptTally counts the samples of one prompt in one step.
type promptTally struct {
	Step, Samples, Correct int64
}

func mergeTally(a, b promptTally) promptTally {
	return promptTally{Step: max(a.Step, b.Step), Samples: a.Samples + b.Samples, Correct: a.Correct + b.Correct}
}

// tallyAcc turns a prompt's tally into its contribution to its step.
func tallyAcc(p promptTally) stepAcc {
	a := stepAcc{Step: p.Step, Prompts: 1}
	if p.Correct == 0 {
		a.FailedPrompts = 1
	}
	if p.Correct == p.Samples {
		a.SolvedPrompts = 1
	}
	return a
}

// AgentCounts holds a per-agent quantity.
type AgentCounts struct {
	Verify    float64 `json:"verify"`
	Knowledge float64 `json:"knowledge"`
	Reason    float64 `json:"reason"`
	Other     float64 `json:"other"`
	Total     float64 `json:"total"`
}

// StatusCounts counts interactions by status.
type StatusCounts struct {
	OK      int64 `json:"ok"`
	Error   int64 `json:"error"`
	Timeout int64 `json:"timeout"`
	Limit   int64 `json:"limit"`
	Other   int64 `json:"other"`
}

// StepMetrics are the reported metrics of one step (see the package doc
// for their definitions). Ratios of an empty denominator are 0.
type StepMetrics struct {
	Step          int64 `json:"step"`
	PolicyVersion int64 `json:"policy_version"`
	Trajectories  int64 `json:"trajectories"`
	Prompts       int64 `json:"prompts"`

	Accuracy       float64 `json:"accuracy"`
	FailedTasks    float64 `json:"failed_tasks"`
	SolvedAllTasks float64 `json:"solved_all_tasks"`
	MeanReward     float64 `json:"mean_reward"`

	InteractionsPerTrajectory AgentCounts `json:"interactions_per_trajectory"`
	Interactions              int64       `json:"interactions"`

	ResponseTokens     int64   `json:"response_tokens"`
	ExternalTokenShare float64 `json:"external_token_share"`
	// ExternalTokenShareByAgent splits ExternalTokenShare by the agent that
	// wrote the tokens (Other: token sources this build does not know).
	ExternalTokenShareByAgent AgentCounts `json:"external_token_share_by_agent"`
	TemplateTokenShare        float64     `json:"template_token_share"`

	ResponseLengthP50 float64 `json:"response_length_p50"`
	ResponseLengthP95 float64 `json:"response_length_p95"`

	CollaboratorCalls int64        `json:"collaborator_calls"`
	LatencyMsP50      float64      `json:"latency_ms_p50"`
	LatencyMsP95      float64      `json:"latency_ms_p95"`
	ErrorRate         float64      `json:"error_rate"`
	Status            StatusCounts `json:"status"`

	KnowledgeAnswers int64   `json:"knowledge_answers"`
	NoisyDocShare    float64 `json:"noisy_doc_share"`

	LengthFinishShare float64 `json:"length_finish_share"`

	// PolicyVersionTokens counts the step's policy tokens by the policy
	// version that sampled them (token_policy_version; keys decimal): the
	// mix of versions the step trains on. MixedSamples counts the samples
	// whose policy tokens come from more than one version (continued
	// across a weight push).
	PolicyVersionTokens map[string]int64 `json:"policy_version_tokens,omitempty"`
	MixedSamples        int64            `json:"mixed_samples"`

	// Mismatch is the learner's measurement of the train-inference
	// mismatch on this step's trajectories, from its record
	// (metrics/learn-NNNNNN.json); absent when there is none.
	Mismatch *Mismatch `json:"mismatch,omitempty"`
	// Learner is the learner's record of its update on the step (nil when
	// the step has not been learned from).
	Learner *LearnerMetrics `json:"learner,omitempty"`
}

func ratio(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// percentile is the nearest-rank p-th percentile of sorted values (0 for
// none): the value at rank ceil(p/100*n).
func percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// finalize turns a step's accumulator into its metrics.
func finalize(a stepAcc) StepMetrics {
	lens := make([]float64, len(a.ResponseLens))
	for i, l := range a.ResponseLens {
		lens[i] = float64(l)
	}
	sort.Float64s(lens)
	lat := slices.Clone(a.LatenciesMs)
	sort.Float64s(lat)
	calls := a.CallsVerify + a.CallsKnowledge + a.CallsReason + a.CallsOther
	external := a.TokensVerify + a.TokensKnowledge + a.TokensReason + a.TokensUnknown
	made := a.StatusOK + a.StatusError + a.StatusTimeout + a.StatusOther
	n := a.Trajectories
	return StepMetrics{
		Step:           a.Step,
		PolicyVersion:  a.PolicyVersion,
		Trajectories:   n,
		Prompts:        a.Prompts,
		Accuracy:       ratio(a.Correct, n),
		FailedTasks:    ratio(a.FailedPrompts, a.Prompts),
		SolvedAllTasks: ratio(a.SolvedPrompts, a.Prompts),
		MeanReward:     safeDiv(a.RewardSum, float64(n)),
		InteractionsPerTrajectory: AgentCounts{
			Verify: ratio(a.CallsVerify, n), Knowledge: ratio(a.CallsKnowledge, n),
			Reason: ratio(a.CallsReason, n), Other: ratio(a.CallsOther, n), Total: ratio(calls, n),
		},
		Interactions:       calls,
		ResponseTokens:     a.Tokens,
		ExternalTokenShare: ratio(external, a.Tokens),
		ExternalTokenShareByAgent: AgentCounts{
			Verify: ratio(a.TokensVerify, a.Tokens), Knowledge: ratio(a.TokensKnowledge, a.Tokens),
			Reason: ratio(a.TokensReason, a.Tokens), Other: ratio(a.TokensUnknown, a.Tokens), Total: ratio(external, a.Tokens),
		},
		TemplateTokenShare:  ratio(a.TokensTemplate, a.Tokens),
		ResponseLengthP50:   percentile(lens, 50),
		ResponseLengthP95:   percentile(lens, 95),
		CollaboratorCalls:   made,
		LatencyMsP50:        percentile(lat, 50),
		LatencyMsP95:        percentile(lat, 95),
		ErrorRate:           ratio(made-a.StatusOK, made),
		Status:              StatusCounts{OK: a.StatusOK, Error: a.StatusError, Timeout: a.StatusTimeout, Limit: a.StatusLimit, Other: a.StatusOther},
		KnowledgeAnswers:    a.KnowledgeOK,
		NoisyDocShare:       ratio(a.KnowledgeNoisy, a.KnowledgeOK),
		LengthFinishShare:   ratio(a.FinishLength, n),
		PolicyVersionTokens: versionMap(a.PolicyVersions, a.PolicyVersionTokens),
		MixedSamples:        a.MixedSamples,
	}
}

func versionMap(v, n []int64) map[string]int64 {
	if len(v) == 0 {
		return nil
	}
	out := make(map[string]int64, len(v))
	for i := range v {
		out[strconv.FormatInt(v[i], 10)] = n[i]
	}
	return out
}

func safeDiv(x, d float64) float64 {
	if d == 0 {
		return 0
	}
	return x / d
}
