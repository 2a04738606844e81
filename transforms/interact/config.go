package interact

import (
	"fmt"
	"math"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
)

// Who writes the result's opening delimiter (Config.OpenerBy).
const (
	OpenerSystem = "system" // the policy stops at the closing tag; the system writes <result>
	OpenerPolicy = "policy" // the policy writes <result> itself and stops just after it
)

// Defaults of Config fields left at zero by Default.
const (
	DefaultMaxInteractions   = 3
	DefaultAnswerTokenBudget = 512
	DefaultMaxResponseTokens = 16384
	DefaultPolicyRetries     = 3
	DefaultBackoffInitial    = 200 * time.Millisecond
	DefaultBackoffMax        = 5 * time.Second
	DefaultPolicyTimeout     = 10 * time.Minute
	// DefaultLimitNotice answers a tag written after max_interactions calls.
	DefaultLimitNotice = "interaction limit reached; continue on your own"
	// WithheldNotice replaces an answer that still held a tag after
	// escaping (it cannot happen with a tokenizer that decodes what it
	// encodes; the check guards against one that does not).
	WithheldNotice = "agent answer withheld"
)

// Config configures the protocol. Default returns the paper's setting.
type Config struct {
	// MaxInteractions is how many calls per trajectory reach an agent
	// (paper: 3). 0 answers every tag with LimitNotice.
	MaxInteractions int `json:"max_interactions"`
	// Unanswered leaves calls unanswered: after a call the policy goes on
	// writing, as at evaluation without collaborators; nothing is
	// inserted and no interaction is recorded (plain RLVR).
	Unanswered bool `json:"unanswered"`
	// OpenerBy is OpenerSystem or OpenerPolicy (see the package doc).
	OpenerBy string `json:"opener_by"`
	// AnswerTokenBudget truncates each answer to this many tokens (the
	// wrappers not counted).
	AnswerTokenBudget int `json:"answer_token_budget"`
	// MaxResponseTokens bounds the response: sampled and inserted tokens
	// together.
	MaxResponseTokens int `json:"max_response_tokens"`
	// Params are the policy's sampling parameters: Temperature, TopP and
	// TopK (temperature 0 is greedy; top_p 1 and top_k 0 are off), and
	// StopStrings, extra stop strings that end the trajectory with finish
	// reason sampling.FinishStop (the demo's answer terminator, for
	// instance). The protocol sets MaxTokens, Seed and StopTokenIDs of
	// each call itself.
	sampling.Params
	// LimitNotice answers tags beyond MaxInteractions.
	LimitNotice string `json:"limit_notice"`
	// PolicyRetries is how many times a failed policy call is repeated
	// (with the same seed) before the trajectory ends with "error".
	PolicyRetries int `json:"policy_retries"`
	// PolicyBackoffInitial and PolicyBackoffMax shape the wait before a
	// retry: exponential with full jitter.
	PolicyBackoffInitial time.Duration `json:"policy_backoff_initial"`
	PolicyBackoffMax     time.Duration `json:"policy_backoff_max"`
	// PolicyTimeout bounds one policy call (0: no bound but the caller's).
	PolicyTimeout time.Duration `json:"policy_timeout"`
	// Split, when Pin is set, names the weights of every policy call
	// (policy.Request.Pinned): the deterministic partial rollout.
	Split Split `json:"split"`
}

// Split pins a trajectory's policy calls to versions: its first Tokens
// policy tokens are sampled by version First and the rest by Next, the
// call that reaches Tokens stopping there and the sample continuing from
// its prompt plus every token so far, by token ids, on Next (counted as
// an interrupted call). Which weights sample each token is then fixed by
// the configuration, not by when a push lands, so a run with partial
// rollouts is the same bits however often it is killed and resumed.
// Tokens 0 samples every token with First.
type Split struct {
	Pin    bool  `json:"pin"`
	Tokens int   `json:"tokens"`
	First  int64 `json:"first"`
	Next   int64 `json:"next"`
}

// Default returns 3 interactions, the system writing <result>, answers of
// at most 512 tokens, responses of at most 16384 tokens (the paper's
// generation budget), temperature 1, top-p 1, top-k off, 3 retries of a
// failed policy call.
func Default() Config {
	return Config{
		MaxInteractions:      DefaultMaxInteractions,
		OpenerBy:             OpenerSystem,
		AnswerTokenBudget:    DefaultAnswerTokenBudget,
		MaxResponseTokens:    DefaultMaxResponseTokens,
		Params:               sampling.Params{Temperature: 1, TopP: 1},
		LimitNotice:          DefaultLimitNotice,
		PolicyRetries:        DefaultPolicyRetries,
		PolicyBackoffInitial: DefaultBackoffInitial,
		PolicyBackoffMax:     DefaultBackoffMax,
		PolicyTimeout:        DefaultPolicyTimeout,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.MaxInteractions < 0:
		return fmt.Errorf("interact: max_interactions %d must not be negative", c.MaxInteractions)
	case c.OpenerBy != OpenerSystem && c.OpenerBy != OpenerPolicy:
		return fmt.Errorf("interact: opener_by %q is unknown: use %q (the system writes <result>) or %q (the policy writes it)", c.OpenerBy, OpenerSystem, OpenerPolicy)
	case c.AnswerTokenBudget < 1:
		return fmt.Errorf("interact: answer_token_budget %d must be at least 1", c.AnswerTokenBudget)
	case c.MaxResponseTokens < 1:
		return fmt.Errorf("interact: max_response_tokens %d must be at least 1", c.MaxResponseTokens)
	case !(c.Temperature >= 0) || math.IsInf(float64(c.Temperature), 0):
		return fmt.Errorf("interact: temperature %v must be finite and >= 0", c.Temperature)
	case !(c.TopP > 0 && c.TopP <= 1):
		return fmt.Errorf("interact: top_p %v must lie in (0, 1]", c.TopP)
	case c.TopK < 0:
		return fmt.Errorf("interact: top_k %d must not be negative (0 is off)", c.TopK)
	case c.PolicyRetries < 0 || c.PolicyRetries > 20:
		return fmt.Errorf("interact: policy_retries %d must be in 0..20", c.PolicyRetries)
	case c.PolicyBackoffInitial < 0 || c.PolicyBackoffMax < 0 || c.PolicyTimeout < 0:
		return fmt.Errorf("interact: policy backoff (%v, %v) and timeout %v must not be negative", c.PolicyBackoffInitial, c.PolicyBackoffMax, c.PolicyTimeout)
	case c.Split.Pin && (c.Split.Tokens < 0 || c.Split.First < 0 || c.Split.Next < c.Split.First):
		return fmt.Errorf("interact: split tokens %d, versions %d then %d: the tokens must not be negative, and the versions not negative nor decreasing", c.Split.Tokens, c.Split.First, c.Split.Next)
	}
	for i, s := range c.StopStrings {
		if s == "" {
			return fmt.Errorf("interact: stop[%d] is empty", i)
		}
		if FindTag(s) >= 0 {
			return fmt.Errorf("interact: stop[%d] %q holds a protocol tag; the protocol sets its own stops", i, s)
		}
	}
	return nil
}
