// Package policy defines how rollouts reach a policy model: a small,
// token-in token-out client interface and a registry of implementations
// keyed by URI scheme.
//
// The rollout never re-tokenises a conversation: it sends the whole token
// prefix (prompt, the policy's earlier tokens and collaborators' tokens) and
// receives newly sampled token ids with their log-probabilities. Engines that
// keep a KV cache per session (the in-process engine, `aipo serve`) reuse it
// when the new prefix extends the cached one, so a continuation after a
// collaborator's answer costs only the new tokens; engines without sessions
// (vLLM, SGLang over OpenAI HTTP) rely on their prefix caches.
//
// Implementations register themselves by scheme: "grpc" and "http"/"https"
// live in this module's transforms packages; "inproc" (the learner's engine
// in the same process) is registered by the package that links the learner,
// so that transforms never import the learner.
package policy

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/secure"
)

// Request asks for a continuation of Prefix.
type Request struct {
	Prefix []int32
	Params sampling.Params
	// Session, when set, names a conversation whose KV cache the engine may
	// keep between calls; the next call's Prefix normally extends this
	// call's Prefix plus its output. Engines without sessions ignore it.
	Session string
	// Pinned asks that the weights of policy version Version sample the
	// call, whatever version the endpoint serves when it arrives (a newer
	// one is waited for): the deterministic split of partial rollouts
	// (rollout.partial_tokens). Only the in-process engine serves pinned
	// calls; the other clients refuse them.
	Pinned  bool
	Version int64
}

// Result is what one Generate call sampled.
type Result struct {
	Tokens   []int32   // newly sampled tokens
	LogProbs []float32 // log-probability of each sampled token under the sampling policy (before temperature)
	// FinishReason is sampling.FinishEOS, sampling.FinishStop (a stop
	// token or string), sampling.FinishLength (MaxTokens reached) or
	// sampling.FinishAbort (the server stopped the call at a weight push;
	// Tokens are what it sampled so far, possibly none, and the caller
	// continues from Prefix plus Tokens).
	FinishReason string
	// Stop is the stop string or the decimal stop token id that ended the
	// call, when FinishReason is sampling.FinishStop.
	Stop string
	// PolicyVersion identifies the weights that produced the tokens.
	PolicyVersion int64
}

// Client is a policy endpoint. Implementations are safe for concurrent use.
type Client interface {
	// Generate samples a continuation of req.Prefix.
	Generate(ctx context.Context, req Request) (Result, error)
	// Release drops a session's cached state; unknown sessions are ignored.
	Release(ctx context.Context, session string)
	// Tokenize encodes text with the policy's tokenizer. With special false,
	// text that looks like a special token is encoded as plain text.
	Tokenize(ctx context.Context, text string, special bool) ([]int32, error)
	// Detokenize decodes token ids.
	Detokenize(ctx context.Context, ids []int32) (string, error)
	// Info describes the served model.
	Info(ctx context.Context) (Info, error)
	Close() error
}

// Info describes a served policy.
type Info struct {
	Model         string
	PolicyVersion int64
	VocabSize     int
	EOS           []int32
	MaxContext    int
}

// Opener creates a client for a URI of its scheme.
type Opener func(ctx context.Context, uri *url.URL) (Client, error)

var (
	mu      sync.RWMutex
	openers = map[string]Opener{}
)

// Register makes a client implementation available under scheme. It panics
// if the scheme is registered twice (a programming error).
func Register(scheme string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic("policy: scheme registered twice: " + scheme)
	}
	openers[scheme] = open
}

// Open creates a client for uri, e.g. "inproc:///runs/demo/checkpoints/step-000003",
// "grpc://127.0.0.1:7070" or "http://127.0.0.1:8000/v1?model=qwen".
func Open(ctx context.Context, uri string) (Client, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("policy: bad endpoint %q: %w", secure.RedactURI(uri), secure.RedactError(err))
	}
	mu.RLock()
	open, ok := openers[u.Scheme]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("policy: no client for scheme %q in %q (known: %s)", u.Scheme, secure.RedactURI(uri), strings.Join(Schemes(), ", "))
	}
	return open(ctx, u)
}

// Schemes lists the registered schemes.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(openers))
	for s := range openers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
