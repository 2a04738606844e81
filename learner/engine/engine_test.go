package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// TestGreedyMatchesRecomputeAndLearnerLogProbs: on the tiny model
// (TestGreedyMatchesRecomputeAndLearnerLogProbsStories260K: on
// stories260K), greedy generation gives the tokens of recomputing the
// whole sequence each step, and the learner's log-probs.
func TestGreedyMatchesRecomputeAndLearnerLogProbs(t *testing.T) {
	checkGreedyAndLogProbs(t, peaked(t, tinyConfig(), 1), [][]int32{{257, 72, 105}, {257}, {259, 10, 20, 30, 40, 50, 60, 70}})
}

// checkGreedyAndLogProbs generates 70 greedy tokens after each prompt on m
// and checks them against greedy recomputation, and their log-probs
// against the learner's.
func checkGreedyAndLogProbs(t *testing.T, m *model.Model, prompts [][]int32) {
	t.Helper()
	e := start(t, m, nil, Config{EOS: []int32{}})
	ctx := testCtx(t)
	for _, p := range prompts {
		res, err := e.Generate(ctx, Request{Prefix: p, Params: sampling.Params{MaxTokens: 70}})
		if err != nil {
			t.Fatal(err)
		}
		want := greedyRecompute(t, m, p, 70)
		if i := sameTokens(res.Tokens, want); i >= 0 {
			t.Fatalf("prompt %v: engine token %d differs from greedy recomputation:\n got %v\nwant %v", p, i, res.Tokens, want)
		}
		if res.FinishReason != sampling.FinishLength || res.PolicyVersion != 1 {
			t.Errorf("finish %q version %d, want length and 1", res.FinishReason, res.PolicyVersion)
		}
		checkLogProbs(t, fmt.Sprintf("prompt %v", p), res.LogProbs, learnerLogProbs(t, m, p, res.Tokens))
	}
}

// TestSessionContinuation: prefix, generate, append external tokens,
// generate; the second call feeds only the new tokens and equals a fresh
// request on the concatenation.
func TestSessionContinuation(t *testing.T) {
	m := peaked(t, tinyConfig(), 2)
	e := start(t, m, nil, Config{EOS: []int32{}})
	ctx := testCtx(t)
	prefix := []int32{257, 5, 6, 7, 8, 9}
	first, err := e.Generate(ctx, Request{Prefix: prefix, Session: "s", Params: sampling.Params{MaxTokens: 12}})
	if err != nil {
		t.Fatal(err)
	}
	external := []int32{261, 40, 41, 42, 262}
	cont := append(append(append([]int32(nil), prefix...), first.Tokens...), external...)
	second, err := e.Generate(ctx, Request{Prefix: cont, Session: "s", Params: sampling.Params{MaxTokens: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(prefix) + len(first.Tokens) - 1; second.CachedTokens != want {
		t.Errorf("continuation reused %d cached tokens, want %d (all but the last sampled token)", second.CachedTokens, want)
	}
	fresh, err := e.Generate(ctx, Request{Prefix: cont, Params: sampling.Params{MaxTokens: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.CachedTokens != 0 {
		t.Errorf("request without session reused %d tokens", fresh.CachedTokens)
	}
	if i := sameTokens(second.Tokens, fresh.Tokens); i >= 0 {
		t.Fatalf("continued sequence differs from one generated from scratch at token %d:\n got %v\nwant %v", i, second.Tokens, fresh.Tokens)
	}
	if want := greedyRecompute(t, m, cont, 20); sameTokens(second.Tokens, want) >= 0 {
		t.Fatalf("continued sequence %v differs from greedy recomputation %v", second.Tokens, want)
	}
	checkLogProbs(t, "continuation", second.LogProbs, learnerLogProbs(t, m, cont, second.Tokens))

	// A prefix that departs from the cache reuses the common part.
	other := append(append([]int32(nil), cont[:8]...), 99, 98)
	third, err := e.Generate(ctx, Request{Prefix: other, Session: "s", Params: sampling.Params{MaxTokens: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if third.CachedTokens != 8 {
		t.Errorf("diverging prefix reused %d cached tokens, want the 8 in common", third.CachedTokens)
	}
	if want := greedyRecompute(t, m, other, 10); sameTokens(third.Tokens, want) >= 0 {
		t.Fatalf("after a diverging prefix: %v, greedy recomputation %v", third.Tokens, want)
	}
	// After Release nothing is reused.
	e.Release("s")
	again, err := e.Generate(ctx, Request{Prefix: other, Session: "s", Params: sampling.Params{MaxTokens: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if again.CachedTokens != 0 {
		t.Errorf("after Release the session reused %d tokens", again.CachedTokens)
	}
}

// runAll runs reqs concurrently and returns their results in order.
func runAll(t *testing.T, e *Engine, reqs []Request) []Result {
	t.Helper()
	ctx := testCtx(t)
	out := make([]Result, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = e.Generate(ctx, reqs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return out
}

func randomPrompts(n, V int, seed uint64) [][]int32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([][]int32, n)
	for i := range out {
		p := make([]int32, 1+r.IntN(60))
		for j := range p {
			p[j] = int32(r.IntN(V))
		}
		out[i] = p
	}
	return out
}

// TestBatch32EqualsOneAtATime: 32 greedy requests decoded together give
// the tokens each gives alone.
func TestBatch32EqualsOneAtATime(t *testing.T) {
	m := peaked(t, tinyConfig(), 4)
	prompts := randomPrompts(32, tokenizer.BuiltinVocabSize, 8)
	var reqs []Request
	for _, p := range prompts {
		reqs = append(reqs, Request{Prefix: p, Params: sampling.Params{MaxTokens: 30}})
	}
	e := start(t, m, nil, Config{EOS: []int32{}, MaxBatch: 32})
	got := runAll(t, e, reqs)
	if st := e.Stats(); st.Steps > 200 {
		t.Errorf("32 requests of 30 tokens took %d steps; they were not batched", st.Steps)
	}
	for i, r := range reqs {
		res, err := e.Generate(testCtx(t), r)
		if err != nil {
			t.Fatal(err)
		}
		if j := sameTokens(got[i].Tokens, res.Tokens); j >= 0 {
			t.Fatalf("request %d: token %d differs between batch of 32 and alone:\n got %v\nwant %v", i, j, got[i].Tokens, res.Tokens)
		}
	}
}

func TestStopsAndFinishReasons(t *testing.T) {
	tok := tokenizer.Builtin()
	m := peaked(t, tinyConfig(), 6)
	e := start(t, m, tok, Config{EOS: []int32{}})
	ctx := testCtx(t)
	p := []int32{257, 65, 66, 67}
	base, err := e.Generate(ctx, Request{Prefix: p, Params: sampling.Params{MaxTokens: 30}})
	if err != nil {
		t.Fatal(err)
	}
	T := base.Tokens
	first := func(id int32) int {
		for i, x := range T {
			if x == id {
				return i
			}
		}
		return -1
	}
	t.Run("stop token", func(t *testing.T) {
		res, err := e.Generate(ctx, Request{Prefix: p, Params: sampling.Params{MaxTokens: 30, StopTokenIDs: []int32{T[6]}}})
		if err != nil {
			t.Fatal(err)
		}
		want := T[:first(T[6])+1]
		if sameTokens(res.Tokens, want) >= 0 || res.FinishReason != sampling.FinishStop || res.Stop != fmt.Sprint(T[6]) {
			t.Fatalf("stop token %d: got %v %q %q, want %v stop %q", T[6], res.Tokens, res.FinishReason, res.Stop, want, fmt.Sprint(T[6]))
		}
	})
	t.Run("stop string", func(t *testing.T) {
		full, _ := e.Detokenize(T)
		pre, _ := e.Detokenize(T[:4])
		s := full[len(pre)-1 : len(pre)+1] // spans tokens 3 and 4
		res, err := e.Generate(ctx, Request{Prefix: p, Params: sampling.Params{MaxTokens: 30, StopStrings: []string{"\x00never", s}}})
		if err != nil {
			t.Fatal(err)
		}
		text, _ := e.Detokenize(res.Tokens)
		before, _ := e.Detokenize(res.Tokens[:len(res.Tokens)-1])
		if res.FinishReason != sampling.FinishStop || res.Stop != s || !strings.Contains(text, s) || strings.Contains(before, s) || len(res.Tokens) > 5 {
			t.Fatalf("stop string %q: got %q (%v) finish %q stop %q; want output ending at its first occurrence", s, text, res.Tokens, res.FinishReason, res.Stop)
		}
	})
	t.Run("eos", func(t *testing.T) {
		e2 := start(t, m, tok, Config{EOS: []int32{T[9]}})
		res, err := e2.Generate(ctx, Request{Prefix: p, Params: sampling.Params{MaxTokens: 30}})
		if err != nil {
			t.Fatal(err)
		}
		if sameTokens(res.Tokens, T[:first(T[9])+1]) >= 0 || res.FinishReason != sampling.FinishEOS {
			t.Fatalf("eos %d: got %v %q", T[9], res.Tokens, res.FinishReason)
		}
	})
	t.Run("length and context", func(t *testing.T) {
		res, err := e.Generate(ctx, Request{Prefix: p, Params: sampling.Params{MaxTokens: 4}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tokens) != 4 || res.FinishReason != sampling.FinishLength {
			t.Fatalf("max_tokens 4: %d tokens, finish %q", len(res.Tokens), res.FinishReason)
		}
		e3 := start(t, m, tok, Config{EOS: []int32{}, MaxContext: 10})
		res, err = e3.Generate(ctx, Request{Prefix: p})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tokens) != 6 || res.FinishReason != sampling.FinishLength {
			t.Fatalf("context 10 with a 4-token prefix: %d tokens, finish %q; want 6, length", len(res.Tokens), res.FinishReason)
		}
	})
	t.Run("default eos from tokenizer", func(t *testing.T) {
		e4 := start(t, m, tok, Config{})
		info := e4.Info()
		want := map[int32]bool{int32(tok.EOS()): true}
		for _, id := range tok.StopIDs() {
			want[int32(id)] = true
		}
		if len(info.EOS) != len(want) {
			t.Fatalf("EOS %v, want the tokenizer's EOS and chat stop ids %v", info.EOS, want)
		}
		for _, id := range info.EOS {
			if !want[id] {
				t.Fatalf("EOS %v holds %d, not a stop id of the tokenizer", info.EOS, id)
			}
		}
	})
}

func TestStreamMatchesResult(t *testing.T) {
	e := start(t, peaked(t, tinyConfig(), 3), nil, Config{EOS: []int32{}})
	var got []Token
	res, err := e.GenerateStream(testCtx(t), Request{Prefix: []int32{1, 2, 3}, Params: sampling.Params{Temperature: 1, MaxTokens: 25, Seed: 3}},
		func(tk Token) error { got = append(got, tk); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(res.Tokens) {
		t.Fatalf("streamed %d tokens, result has %d", len(got), len(res.Tokens))
	}
	for i, tk := range got {
		if tk.Index != i || tk.ID != res.Tokens[i] || tk.LogProb != res.LogProbs[i] {
			t.Fatalf("streamed token %d = %+v, result has id %d log-prob %g", i, tk, res.Tokens[i], res.LogProbs[i])
		}
	}
	stop := errors.New("client went away")
	_, err = e.GenerateStream(testCtx(t), Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 200}},
		func(tk Token) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("callback error: Generate returned %v, want %v", err, stop)
	}
}

func TestBadRequests(t *testing.T) {
	e := start(t, peaked(t, tinyConfig(), 3), nil, Config{MaxContext: 50})
	ctx := testCtx(t)
	cases := []struct {
		req  Request
		want string
	}{
		{Request{}, "empty prefix"},
		{Request{Prefix: make([]int32, 50)}, "no room in the context"},
		{Request{Prefix: []int32{1, 269}}, "prefix token 1 is 269, outside the vocabulary"},
		{Request{Prefix: []int32{-1}}, "outside the vocabulary"},
		{Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: -1}}, "max_tokens -1"},
		{Request{Prefix: []int32{1}, Params: sampling.Params{Temperature: -1}}, "temperature"},
		{Request{Prefix: []int32{1}, Params: sampling.Params{TopP: 1.5}}, "top_p"},
		{Request{Prefix: []int32{1}, Params: sampling.Params{TopK: -2}}, "top_k"},
		{Request{Prefix: []int32{1}, Params: sampling.Params{StopTokenIDs: []int32{999}}}, "stop token id"},
		{Request{Prefix: []int32{1}, Params: sampling.Params{StopStrings: []string{"x"}}}, "need a tokenizer"},
	}
	for _, tc := range cases {
		if _, err := e.Generate(ctx, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Generate(%+v) error = %v, want one mentioning %q", tc.req, err, tc.want)
		}
	}
	if _, err := e.Tokenize("x", false); err == nil {
		t.Error("Tokenize without a tokenizer succeeded")
	}
	if err := e.Reload(peaked(t, model.Config{ModelType: "llama", HiddenSize: 16, IntermediateSize: 8, NumHiddenLayers: 1,
		NumAttentionHeads: 2, NumKeyValueHeads: 2, VocabSize: 300, MaxPositionEmbeddings: 64, RMSNormEps: 1e-6, RopeTheta: 1e4,
		HiddenAct: "silu"}, 1), 2); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("Reload with another vocabulary: %v", err)
	}
	if _, err := New(peaked(t, tinyConfig(), 1), nil, 1, Config{MaxContext: 1000}); err == nil || !strings.Contains(err.Error(), "MaxContext") {
		t.Errorf("New with MaxContext beyond the model: %v", err)
	}
}

// A stop string begun in the prefix and completed by the first new token
// stops generation there (a call continued after an interruption may have
// stopped inside one); one wholly in the prefix does not.
func TestStopStringAcrossThePrefix(t *testing.T) {
	tok := tokenizer.Builtin()
	m := peaked(t, tinyConfig(), 6)
	e := start(t, m, tok, Config{EOS: []int32{}})
	ctx := testCtx(t)
	p := []int32{257, 65, 66, 67}
	base, err := e.Generate(ctx, Request{Prefix: p, Params: sampling.Params{MaxTokens: 12}})
	if err != nil {
		t.Fatal(err)
	}
	T := base.Tokens
	bytesOf := func(ids ...int32) string {
		var s []byte
		for _, id := range ids {
			s = append(s, tok.TokenBytes(int(id))...)
		}
		return string(s)
	}
	cont := append(append([]int32(nil), p...), T[:2]...)
	across := bytesOf(T[1], T[2])
	r, err := e.Generate(ctx, Request{Prefix: cont, Params: sampling.Params{MaxTokens: 10, StopStrings: []string{across}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.FinishReason != sampling.FinishStop || len(r.Tokens) != 1 || r.Tokens[0] != T[2] {
		t.Fatalf("stop string %q across the prefix's end: %v finish %q, want the single token %d, finish stop", across, r.Tokens, r.FinishReason, T[2])
	}
	inside := bytesOf(T[0], T[1])
	r, err = e.Generate(ctx, Request{Prefix: cont, Params: sampling.Params{MaxTokens: 1, StopStrings: []string{inside}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.FinishReason != sampling.FinishLength {
		t.Fatalf("stop string %q wholly in the prefix: finish %q after %v, want length", inside, r.FinishReason, r.Tokens)
	}
}
