package schemas

import "strconv"

// SchemaVersion is written into every row and every manifest. Bump it when a
// column is added, removed or changes meaning; readers refuse versions they do
// not know. Version 2 added token_policy_version; shards of version 1 (which
// lack the column) read with it empty, meaning one version, policy_version,
// for every token of the row.
const SchemaVersion = 2

// Token sources: who wrote a response token. Stored as int8 per token in
// Trajectory.TokenSource.
const (
	SourcePolicy    int8 = 0 // sampled by the policy (internal token)
	SourceVerify    int8 = 1 // written by the Verify Agent (external)
	SourceKnowledge int8 = 2 // written by the Knowledge Agent (external)
	SourceReason    int8 = 3 // written by the Reasoning Agent (external)
	SourceTemplate  int8 = 4 // written by the system: <result> wrappers, notices
	SourceGuide     int8 = 5 // an off-policy guidance trace (a reference solution or a teacher's answer; LUFFY)
)

// SourceNames maps a token source to its name in configs, reports and errors.
var SourceNames = [...]string{"policy", "verify", "knowledge", "reason", "template", "guide"}

// SourceName returns the name of a token source, or "unknown(N)".
func SourceName(s int8) string {
	if s >= 0 && int(s) < len(SourceNames) {
		return SourceNames[s]
	}
	return "unknown(" + strconv.Itoa(int(s)) + ")"
}

// Interaction status values (Trajectory.InteractionStatus).
const (
	StatusOK      = "ok"      // the collaborator answered
	StatusError   = "error"   // the call failed; the result holds a notice
	StatusTimeout = "timeout" // the call ran past its deadline
	StatusLimit   = "limit"   // max_interactions reached; answered with a fixed notice
)

// FinishError is the finish reason (Trajectory.FinishReason) of a rollout
// that failed; its reward is 0. The others are the policy's own
// (sampling.FinishEOS, FinishStop, FinishLength).
const FinishError = "error"

// Trajectory is one sampled response to one prompt, with token-level
// provenance. The per-token columns (ResponseIDs, TokenSource,
// BehaviorLogProbs) have equal length; the interaction columns (Interaction*)
// have equal length, one entry per collaborator call, in call order. See the
// package documentation for the meaning of every column.
type Trajectory struct {
	SchemaVersion int32  `parquet:"schema_version"`
	Run           string `parquet:"run,dict"`
	Step          int64  `parquet:"step"`
	PolicyVersion int64  `parquet:"policy_version"`
	PromptID      string `parquet:"prompt_id"`
	SampleIndex   int32  `parquet:"sample_index"`
	DataSource    string `parquet:"data_source,dict"`

	PromptIDs        []int32   `parquet:"prompt_ids,list"`
	ResponseIDs      []int32   `parquet:"response_ids,list"`
	TokenSource      []int8    `parquet:"token_source,list"`
	BehaviorLogProbs []float32 `parquet:"behavior_logprobs,list"`
	// TokenPolicyVersion is the policy version of each response token: for
	// a policy token the weights that sampled it, for any other token the
	// version the sample was on when it was appended. Empty means every
	// token is at PolicyVersion (shards of schema version 1, and writers
	// that sample a row with one version). See TokenVersions.
	TokenPolicyVersion []int64 `parquet:"token_policy_version,list"`
	ResponseText       string  `parquet:"response_text"`

	InteractionAgent     []string  `parquet:"interaction_agent,list"`
	InteractionQuery     []string  `parquet:"interaction_query,list"`
	InteractionResult    []string  `parquet:"interaction_result,list"`
	InteractionStatus    []string  `parquet:"interaction_status,list"`
	InteractionLatencyMs []float32 `parquet:"interaction_latency_ms,list"`
	InteractionSpanStart []int32   `parquet:"interaction_span_start,list"`
	InteractionSpanEnd   []int32   `parquet:"interaction_span_end,list"`
	InteractionNoisy     []bool    `parquet:"interaction_noisy,list"`

	Reward       float32 `parquet:"reward"`
	Correct      bool    `parquet:"correct"`
	Advantage    float32 `parquet:"advantage"`
	FinishReason string  `parquet:"finish_reason,dict"`
}

// TokenVersions returns the policy version of every response token:
// TokenPolicyVersion, or PolicyVersion repeated when the row carries none.
func (t *Trajectory) TokenVersions() []int64 {
	if len(t.TokenPolicyVersion) == len(t.ResponseIDs) && len(t.ResponseIDs) > 0 {
		return t.TokenPolicyVersion
	}
	out := make([]int64, len(t.ResponseIDs))
	for i := range out {
		out[i] = t.PolicyVersion
	}
	return out
}

// TokenVersion is the policy version of response token i (see
// TokenVersions).
func (t *Trajectory) TokenVersion(i int) int64 {
	if len(t.TokenPolicyVersion) > 0 {
		return t.TokenPolicyVersion[i]
	}
	return t.PolicyVersion
}

// Prompt is one training or evaluation problem after field mapping.
type Prompt struct {
	SchemaVersion int32  `parquet:"schema_version"`
	ID            string `parquet:"id"`
	DataSource    string `parquet:"data_source,dict"`
	Problem       string `parquet:"problem"`
	Answer        string `parquet:"answer"`
	Solution      string `parquet:"solution,optional"`
	// Extra holds the source row's other fields as a JSON object (subject,
	// level, tests, ...), so that nothing in the input is lost.
	Extra string `parquet:"extra,optional"`
}

// EvalRecord is one sample of one benchmark problem scored by a verifier.
type EvalRecord struct {
	SchemaVersion int32   `parquet:"schema_version"`
	Run           string  `parquet:"run,dict"`
	Checkpoint    string  `parquet:"checkpoint,dict"`
	PolicyVersion int64   `parquet:"policy_version"`
	Benchmark     string  `parquet:"benchmark,dict"`
	ProblemID     string  `parquet:"problem_id"`
	SampleIndex   int32   `parquet:"sample_index"`
	Seed          int64   `parquet:"seed"`
	Prompt        string  `parquet:"prompt"`
	Response      string  `parquet:"response"`
	Extracted     string  `parquet:"extracted"`
	Answer        string  `parquet:"answer"`
	Correct       bool    `parquet:"correct"`
	Score         float32 `parquet:"score"`
	Verdict       string  `parquet:"verdict"`
	FinishReason  string  `parquet:"finish_reason,dict"`
	ResponseLen   int32   `parquet:"response_len"`
	LatencyMs     float32 `parquet:"latency_ms"`
}
