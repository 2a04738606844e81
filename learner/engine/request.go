package engine

import (
	"errors"
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/internal/sampling"
)

// ErrQueueFull is returned by Generate when Config.MaxQueue requests are
// already waiting; the caller should retry later (HTTP 429,
// RESOURCE_EXHAUSTED).
var ErrQueueFull = errors.New("engine: request queue is full; retry later or raise MaxQueue")

// ErrClosed is returned for requests to, or still running in, a closed
// engine.
var ErrClosed = errors.New("engine: closed")

// Request asks for a continuation of Prefix.
type Request struct {
	Prefix []int32
	Params sampling.Params
	// Session, when not empty, keeps the sequence's KV cache after the
	// request so that a later request of the same session whose Prefix
	// extends this one's Prefix plus output feeds only the new tokens.
	Session string
	// Pinned makes Version's weights sample the request, whatever
	// version the engine serves when it arrives: a version not yet
	// loaded is waited for (until ctx ends), the one before the current
	// is used under Config.KeepPrevious, an older one is an error. A
	// pinned request is never interrupted by a Reload.
	Pinned  bool
	Version int64
}

// Result is what one request sampled.
type Result struct {
	Tokens []int32 // new tokens
	// LogProbs[i] is log p(Tokens[i]) under the unmodified policy: the log
	// softmax of the raw logits, before temperature, top-k and top-p.
	LogProbs []float32
	// TopLogProbs[i] holds, when Params.TopLogprobs asked for them,
	// the most likely tokens at position i with their log-probabilities
	// (the same distribution as LogProbs), most likely first, equal ones
	// in id order.
	TopLogProbs [][]TokenLogProb
	// FinishReason is sampling.FinishEOS, sampling.FinishStop or
	// sampling.FinishLength.
	FinishReason string
	// Stop is the stop string, or the decimal stop token id, that ended
	// generation when FinishReason is sampling.FinishStop.
	Stop string
	// PolicyVersion names the weights that produced every token.
	PolicyVersion int64
	// PrefixTokens is len(Request.Prefix); CachedTokens of them were
	// taken from the session's cache instead of being fed to the model.
	PrefixTokens, CachedTokens int
}

// Token is one sampled token, as GenerateStream reports it.
type Token struct {
	Index   int // position in Result.Tokens
	ID      int32
	LogProb float32
	Top     []TokenLogProb // Result.TopLogProbs[Index]
}

// TokenLogProb is a token with its log-probability.
type TokenLogProb struct {
	ID      int32
	LogProb float32
}

// validate checks a request against the model's vocabulary and context and
// returns the number of new tokens it may produce.
func (r *Request) validate(vocab, maxContext int, haveTokenizer bool) (int, error) {
	n := len(r.Prefix)
	if n == 0 {
		return 0, fmt.Errorf("engine: request has an empty prefix; give at least one token (e.g. BOS)")
	}
	if n >= maxContext {
		return 0, fmt.Errorf("engine: prefix of %d tokens leaves no room in the context of %d; shorten it", n, maxContext)
	}
	for i, t := range r.Prefix {
		if t < 0 || int(t) >= vocab {
			return 0, fmt.Errorf("engine: prefix token %d is %d, outside the vocabulary [0,%d)", i, t, vocab)
		}
	}
	p := &r.Params
	if p.Temperature < 0 || math.IsNaN(float64(p.Temperature)) || math.IsInf(float64(p.Temperature), 0) {
		return 0, fmt.Errorf("engine: temperature %v must be a finite number >= 0", p.Temperature)
	}
	if !(p.TopP >= 0 && p.TopP <= 1) {
		return 0, fmt.Errorf("engine: top_p %v must lie in [0,1] (0 or 1: off)", p.TopP)
	}
	if p.TopK < 0 {
		return 0, fmt.Errorf("engine: top_k %d must be >= 0 (0: off)", p.TopK)
	}
	if p.TopLogprobs < 0 || p.TopLogprobs > vocab {
		return 0, fmt.Errorf("engine: top_logprobs %d must lie in [0, %d] (the vocabulary)", p.TopLogprobs, vocab)
	}
	if p.MaxTokens < 0 {
		return 0, fmt.Errorf("engine: max_tokens %d must be >= 0 (0: up to the context length)", p.MaxTokens)
	}
	for i, t := range p.StopTokenIDs {
		if t < 0 || int(t) >= vocab {
			return 0, fmt.Errorf("engine: stop token id %d (%d) is outside the vocabulary [0,%d)", i, t, vocab)
		}
	}
	for i, s := range p.StopStrings {
		if s == "" {
			return 0, fmt.Errorf("engine: stop string %d is empty", i)
		}
	}
	if len(p.StopStrings) > 0 && !haveTokenizer {
		return 0, fmt.Errorf("engine: stop strings need a tokenizer; this engine has none (give stop token ids)")
	}
	room := maxContext - n
	if p.MaxTokens > 0 {
		room = min(room, p.MaxTokens)
	}
	return room, nil
}
