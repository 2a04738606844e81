// Package sampling holds what every part of aipo that asks a policy for
// tokens shares: the sampling parameters of one request and the reasons a
// request ends.
//
// Params is the one type of sampling parameters: the policy clients
// (transforms/policy), the learner's engine (learner/engine), the
// interaction protocol (transforms/interact) and the configurations that
// set them (runconfig's policy section, demo's
// evaluation) embed or name it instead of copying its fields. Its
// distribution fields (temperature, top_p, top_k, stop) are the YAML keys
// a configuration embeds inline; the per-request fields (MaxTokens, Seed,
// StopTokenIDs, TopLogprobs) are set by whoever sends the request, from a
// configuration's budget, the run's seed and the tokenizer, and are no
// YAML keys.
package sampling

// Params controls sampling for one request.
type Params struct {
	// Temperature divides the logits; 0 is greedy decoding.
	Temperature float32 `json:"temperature" yaml:"temperature"`
	// TopP keeps the most likely tokens whose probabilities (after
	// temperature and top-k) sum to at least TopP; 0 or 1 is off.
	TopP float32 `json:"top_p" yaml:"top_p"`
	// TopK keeps the K most likely tokens; 0 is off.
	TopK int `json:"top_k" yaml:"top_k"`
	// MaxTokens bounds the new tokens of the request; 0 means up to the
	// context length.
	MaxTokens int `json:"max_tokens" yaml:"-"`
	// Seed seeds the request's random stream: the same seed, prefix and
	// parameters give the same tokens.
	Seed int64 `json:"seed" yaml:"-"`
	// StopTokenIDs end generation after one of them is sampled (it is
	// part of the output).
	StopTokenIDs []int32 `json:"stop_token_ids,omitempty" yaml:"-"`
	// StopStrings end generation once the decoded output contains one of
	// them (the token that completes it is part of the output; the
	// request ends with FinishStop).
	StopStrings []string `json:"stop,omitempty" yaml:"stop,omitempty"`
	// TopLogprobs asks, at every sampled position, for the TopLogprobs
	// most likely tokens with their log-probabilities under the
	// unmodified policy; 0: none. Only the learner's engine answers it.
	TopLogprobs int `json:"top_logprobs,omitempty" yaml:"-"`
}

// Finish reasons: why a request, and the trajectory it ends, stopped.
const (
	// FinishEOS: the policy wrote an end-of-sequence token.
	FinishEOS = "eos"
	// FinishStop: a stop token or stop string ended it.
	FinishStop = "stop"
	// FinishLength: the token budget (MaxTokens, the context, or a
	// response budget) ran out.
	FinishLength = "length"
	// FinishAbort: the server stopped the request before it finished, at a
	// weight push (partial rollouts); the tokens sampled so far are
	// returned with their log-probs under the weights that sampled them,
	// and the caller continues from its prefix plus those tokens. Never a
	// trajectory's finish reason. vLLM names an aborted request so too.
	FinishAbort = "abort"
)
