package rollout

// This file holds the policy the pipeline tests roll out: a scripted
// policy.Client (scheme "demoplayer") that plays the demo task by rule, not
// a model. It exists to test the pipeline's plumbing (batching, fan-out,
// scoring, advantages, shards, fault handling); end-to-end runs with the
// real in-process engine are exercised by `aipo train` and the demo.
//
// Its rule, driven by each call's seed: on an empty response it calls the
// Knowledge Agent ("<retrieval>name</retrieval><result>") with probability
// 0.6, or answers directly, right for seen entities and guessing for unseen
// ones; after the agent's answer it completes "v+n=s;" with the value it
// received (a guess when the answer is a notice). It honours stop strings,
// stop tokens, EOS and max_tokens as policy.Client documents.
//
// Faults, from the URI query: fail=P makes the first attempt of a call
// fail with probability P (a retry succeeds); perm=P makes every attempt of
// a call fail with probability P. Both are decided from the call's seed,
// so a re-run sees the same faults.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/policy"
)

func init() {
	policy.Register("demoplayer", openPlayer)
}

type player struct {
	tok        *tokenizer.HF
	task       *demo.Task
	version    int64
	fail, perm float64

	mu      sync.Mutex
	tried   map[int64]bool
	latency func() // called inside every Generate (the benchmark's simulated model time)
}

func openPlayer(_ context.Context, u *url.URL) (policy.Client, error) {
	task, err := demo.New(demo.DefaultConfig())
	if err != nil {
		return nil, err
	}
	p := &player{tok: tokenizer.Builtin(), task: task, version: 3, tried: map[int64]bool{}}
	q := u.Query()
	for name, dst := range map[string]*float64{"fail": &p.fail, "perm": &p.perm} {
		if v := q.Get(name); v != "" {
			if *dst, err = strconv.ParseFloat(v, 64); err != nil {
				return nil, fmt.Errorf("demoplayer: %s=%q: %w", name, v, err)
			}
		}
	}
	if v := q.Get("version"); v != "" {
		p.version, _ = strconv.ParseInt(v, 10, 64)
	}
	if name := q.Get("latency"); name != "" {
		p.latency = latencies[name]
	}
	return p, nil
}

// latencies are the simulated model times the benchmark registers.
var latencies = map[string]func(){}

var errReset = errors.New("connection reset by peer (injected)")

func (p *player) Generate(_ context.Context, req policy.Request) (policy.Result, error) {
	if p.latency != nil {
		p.latency()
	}
	seed := uint64(req.Params.Seed)
	if collab.Uniform(seed, 7) < p.perm {
		return policy.Result{}, errReset
	}
	if collab.Uniform(seed, 8) < p.fail {
		p.mu.Lock()
		first := !p.tried[req.Params.Seed]
		p.tried[req.Params.Seed] = true
		p.mu.Unlock()
		if first {
			return policy.Result{}, errReset
		}
	}
	ids := make([]int, len(req.Prefix))
	for i, id := range req.Prefix {
		ids[i] = int(id)
	}
	text, err := p.tok.Decode(ids, true)
	if err != nil {
		return policy.Result{}, err
	}
	cont := p.continuation(text, seed) + tokenizer.BuiltinEOS
	res := policy.Result{PolicyVersion: p.version}
	eos := int32(p.tok.EOS())
	out := ""
	for _, id := range p.tok.EncodeSpecial(cont) {
		if len(res.Tokens) == req.Params.MaxTokens {
			res.FinishReason = sampling.FinishLength
			return res, nil
		}
		res.Tokens = append(res.Tokens, int32(id))
		res.LogProbs = append(res.LogProbs, -0.1-0.01*float32(len(res.Tokens)%7))
		if int32(id) == eos {
			res.FinishReason = sampling.FinishEOS
			return res, nil
		}
		for _, st := range req.Params.StopTokenIDs {
			if int32(id) == st {
				res.FinishReason, res.Stop = sampling.FinishStop, strconv.Itoa(id)
				return res, nil
			}
		}
		s, _ := p.tok.Decode([]int{id}, true)
		out += s
		for _, st := range req.Params.StopStrings {
			if strings.HasSuffix(out, st) {
				res.FinishReason, res.Stop = sampling.FinishStop, st
				return res, nil
			}
		}
	}
	res.FinishReason = sampling.FinishLength
	return res, nil
}

// continuation is what the player writes after text (prompt + response).
func (p *player) continuation(text string, seed uint64) string {
	q, resp, ok := strings.Cut(text, "?")
	if !ok {
		return ""
	}
	name, nText, _ := strings.Cut(q, "+")
	n, _ := strconv.Atoi(nText)
	rng := rand.New(rand.NewPCG(seed, 1))
	guess := func() int { return 100 + rng.IntN(900) }
	switch {
	case resp == "":
		if collab.Uniform(seed, 9) < 0.6 {
			return demo.TagRetrieval + name + demo.TagRetrievalEnd + demo.TagResult
		}
		v, found := p.task.Lookup(name)
		if !found || !p.seen(name) {
			v = guess()
		}
		return demo.Direct(v, n)
	case strings.HasSuffix(resp, demo.TagResultEnd):
		i := strings.LastIndex(resp, demo.TagResult)
		v, err := strconv.Atoi(resp[i+len(demo.TagResult) : len(resp)-len(demo.TagResultEnd)])
		if err != nil {
			v = guess()
		}
		return demo.Arith(v, n)
	}
	return ""
}

func (p *player) seen(name string) bool {
	for _, e := range p.task.Entities() {
		if e.Name == name {
			return e.Seen
		}
	}
	return false
}

func (p *player) Release(context.Context, string) {}

func (p *player) Tokenize(_ context.Context, text string, special bool) ([]int32, error) {
	var ids []int
	if special {
		ids = p.tok.EncodeSpecial(text)
	} else {
		ids = p.tok.Encode(text)
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

func (p *player) Detokenize(_ context.Context, ids []int32) (string, error) {
	in := make([]int, len(ids))
	for i, id := range ids {
		in[i] = int(id)
	}
	return p.tok.Decode(in, true)
}

func (p *player) Info(context.Context) (policy.Info, error) {
	return policy.Info{Model: "demoplayer", PolicyVersion: p.version, VocabSize: tokenizer.BuiltinVocabSize, EOS: []int32{int32(p.tok.EOS())}}, nil
}

func (p *player) Close() error { return nil }
