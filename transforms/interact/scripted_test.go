package interact

// This file holds a scripted policy.Client: a test double for the
// protocol's branching only. It replays fixed texts piece by piece, honours
// stop strings, stop token ids, EOS and max_tokens the way the interface
// documents, and records every request it receives. End-to-end runs with
// the real in-process engine are exercised by `aipo train` and the demo.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/transforms/policy"
)

const (
	eosID   int32 = 300
	eosText       = "<eos>"
	tagBase int32 = 301 // single-token tags, in AllTags order
)

// scriptTok is a byte-level tokenizer with EOS and, when single is set, the
// protocol tags as single added tokens (as the built-in vocabulary has
// them).
type scriptTok struct{ single bool }

func (t scriptTok) specials() []string {
	s := []string{eosText}
	if t.single {
		s = append(s, AllTags()...)
	}
	return s
}

func (t scriptTok) idOf(special string) int32 {
	if special == eosText {
		return eosID
	}
	for i, tag := range AllTags() {
		if tag == special {
			return tagBase + int32(i)
		}
	}
	panic(special)
}

func (t scriptTok) encode(text string, special bool) []int32 {
	var out []int32
	for len(text) > 0 {
		matched := false
		if special {
			for _, s := range t.specials() {
				if strings.HasPrefix(text, s) {
					out = append(out, t.idOf(s))
					text = text[len(s):]
					matched = true
					break
				}
			}
		}
		if !matched {
			out = append(out, int32(text[0]))
			text = text[1:]
		}
	}
	return out
}

func (t scriptTok) decode(ids []int32) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b.WriteByte(byte(id))
		case id == eosID:
		case id >= tagBase && int(id-tagBase) < len(AllTags()) && t.single:
			b.WriteString(AllTags()[id-tagBase])
		default:
			return "", fmt.Errorf("unknown token %d", id)
		}
	}
	return b.String(), nil
}

// scripted replays pieces: Generate call k of a session emits the tokens of
// pieces[k] (encoded with special parsing on) until a stop condition.
type scripted struct {
	tok     scriptTok
	pieces  []string
	version int64
	// versions, when set, is the policy version of each call of a session
	// (version past its end).
	versions []int64
	// fail, when set, is asked before each Generate attempt (n counts the
	// attempts of the session from 0) and may return an error.
	fail func(session string, n int) error

	mu       sync.Mutex
	calls    map[string]int // successful Generate calls per session
	attempts map[string]int
	reqs     []policy.Request
	released []string
}

func newScripted(single bool, pieces ...string) *scripted {
	return &scripted{tok: scriptTok{single: single}, pieces: pieces, version: 7,
		calls: map[string]int{}, attempts: map[string]int{}}
}

// logProb is the log-probability the double reports for token i of a call
// with seed: a fixed, recognisable function.
func logProb(seed int64, i int) float32 { return -float32((seed+int64(i))%97+1) / 100 }

func (s *scripted) Generate(ctx context.Context, req policy.Request) (policy.Result, error) {
	s.mu.Lock()
	n := s.attempts[req.Session]
	s.attempts[req.Session]++
	s.reqs = append(s.reqs, policy.Request{Prefix: append([]int32(nil), req.Prefix...), Params: req.Params, Session: req.Session,
		Pinned: req.Pinned, Version: req.Version})
	k := s.calls[req.Session]
	s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(req.Session, n); err != nil {
			return policy.Result{}, err
		}
	}
	if k >= len(s.pieces) {
		return policy.Result{}, fmt.Errorf("script has %d pieces, call %d asked for another", len(s.pieces), k)
	}
	s.mu.Lock()
	s.calls[req.Session]++
	s.mu.Unlock()
	ids := s.tok.encode(s.pieces[k], true)
	res := policy.Result{PolicyVersion: s.version}
	if k < len(s.versions) {
		res.PolicyVersion = s.versions[k]
	}
	if req.Pinned {
		res.PolicyVersion = req.Version // the weights the call names
	}
	for i, id := range ids {
		if len(res.Tokens) == req.Params.MaxTokens {
			res.FinishReason = sampling.FinishLength
			return res, nil
		}
		res.Tokens = append(res.Tokens, id)
		res.LogProbs = append(res.LogProbs, logProb(req.Params.Seed, i))
		if id == eosID {
			res.FinishReason = sampling.FinishEOS
			return res, nil
		}
		for _, st := range req.Params.StopTokenIDs {
			if id == st {
				res.FinishReason, res.Stop = sampling.FinishStop, fmt.Sprint(id)
				return res, nil
			}
		}
		text, _ := s.tok.decode(res.Tokens)
		for _, st := range req.Params.StopStrings {
			if strings.HasSuffix(text, st) {
				res.FinishReason, res.Stop = sampling.FinishStop, st
				return res, nil
			}
		}
	}
	res.FinishReason = sampling.FinishLength
	return res, nil
}

func (s *scripted) Release(_ context.Context, session string) {
	s.mu.Lock()
	s.released = append(s.released, session)
	s.mu.Unlock()
}

func (s *scripted) Tokenize(_ context.Context, text string, special bool) ([]int32, error) {
	return s.tok.encode(text, special), nil
}

func (s *scripted) Detokenize(_ context.Context, ids []int32) (string, error) {
	return s.tok.decode(ids)
}

func (s *scripted) Info(context.Context) (policy.Info, error) {
	return policy.Info{Model: "scripted", PolicyVersion: s.version, VocabSize: 320, EOS: []int32{eosID}}, nil
}

func (s *scripted) Close() error { return nil }

func (s *scripted) requests() []policy.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]policy.Request(nil), s.reqs...)
}

var errTransient = errors.New("connection reset by peer (injected)")
