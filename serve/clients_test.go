package serve

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	_ "github.com/aipo-rl/aipo/transforms/policy/httpclient"
)

func openClient(t *testing.T, uri string) policy.Client {
	t.Helper()
	c, err := policy.Open(ctxT(t, 10*time.Second), uri)
	if err != nil {
		t.Fatalf("open %s: %v", uri, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClientsMatchEngine checks that the gRPC and HTTP clients, through
// the server, sample exactly what the in-process engine samples for the
// same prefix, parameters and seed: tokens, log-probs, finish reasons.
func TestClientsMatchEngine(t *testing.T) {
	r := start(t, Options{})
	ref := direct(t, r.checkpoint)
	ctx := ctxT(t, 60*time.Second)
	clients := map[string]policy.Client{
		"grpc": openClient(t, "grpc://"+r.grpcAddr),
		"http": openClient(t, "http://"+r.httpAddr+"/v1?model=tiny"),
	}
	text := "<|im_start|>user\nwhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
	want, _ := ref.Tokenize(text, true)
	plain, _ := ref.Tokenize("<|im_end|>", false)
	cases := []sampling.Params{
		{MaxTokens: 12},
		{Temperature: 1, TopP: 0.9, MaxTokens: 20, Seed: 7},
		{Temperature: 0.8, TopK: 5, MaxTokens: 20, Seed: 3},
		{Temperature: 1.2, MaxTokens: 40, Seed: 11, StopStrings: []string{"e"}},
		{Temperature: 1, MaxTokens: 40, Seed: 5, StopTokenIDs: []int32{101, 32, 111}},
		{Temperature: 1, Seed: 9}, // up to the context
	}
	for name, c := range clients {
		got, err := c.Tokenize(ctx, text, true)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: Tokenize(special) = %v, %v; engine %v", name, got, err, want)
		}
		if got, err := c.Tokenize(ctx, "<|im_end|>", false); err != nil || !slices.Equal(got, plain) {
			t.Fatalf("%s: Tokenize(plain) = %v, %v; engine %v", name, got, err, plain)
		}
		if back, err := c.Detokenize(ctx, want); err != nil || back != text {
			t.Fatalf("%s: Detokenize = %q, %v; want %q", name, back, err, text)
		}
		in, err := c.Info(ctx)
		if err != nil || in.Model != "tiny" || in.PolicyVersion != 3 || in.VocabSize != tokenizer.BuiltinVocabSize || in.MaxContext != 128 || len(in.EOS) == 0 {
			t.Fatalf("%s: Info = %+v, %v", name, in, err)
		}
		finishes := map[string]bool{}
		for i, p := range cases {
			res, err := c.Generate(ctx, policy.Request{Prefix: want, Params: p})
			if err != nil {
				t.Fatalf("%s case %d: %v", name, i, err)
			}
			exp, err := ref.Generate(ctx, engine.Request{Prefix: want, Params: sampling.Params{Temperature: p.Temperature, TopP: p.TopP,
				TopK: p.TopK, MaxTokens: p.MaxTokens, Seed: p.Seed, StopTokenIDs: p.StopTokenIDs, StopStrings: p.StopStrings}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tokens, exp.Tokens) || !slices.Equal(res.LogProbs, exp.LogProbs) ||
				res.FinishReason != exp.FinishReason || res.Stop != exp.Stop || res.PolicyVersion != 3 {
				t.Fatalf("%s case %d (%+v):\n got  %v %v %s %q v%d\n want %v %v %s %q v%d", name, i, p,
					res.Tokens, res.LogProbs, res.FinishReason, res.Stop, res.PolicyVersion, exp.Tokens, exp.LogProbs, exp.FinishReason, exp.Stop, exp.PolicyVersion)
			}
			finishes[res.FinishReason] = true
		}
		if !finishes[sampling.FinishLength] || !finishes[sampling.FinishStop] {
			t.Fatalf("%s: the cases ended only as %v; they should cover length and stop", name, finishes)
		}
	}
}

// TestContinueSession checks Continue against the engine given the same
// history of calls, and the session's cache reuse.
func TestContinueSession(t *testing.T) {
	r := start(t, Options{})
	ref := direct(t, r.checkpoint)
	ctx := ctxT(t, 30*time.Second)
	c := openClient(t, "grpc://"+r.grpcAddr).(*grpcclient.Client)
	prefix, _ := ref.Tokenize("<|bos|>The answer", true)
	p := sampling.Params{Temperature: 1, MaxTokens: 6, Seed: 21}
	ep := sampling.Params{Temperature: 1, MaxTokens: 6, Seed: 21}
	first, err := c.Generate(ctx, policy.Request{Prefix: prefix, Params: p, Session: "conv"})
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := ref.Tokenize(" Verified: 4.", false)
	second, err := c.Continue(ctx, "conv", answer, p)
	if err != nil {
		t.Fatal(err)
	}
	e1, err := ref.Generate(ctx, engine.Request{Prefix: prefix, Params: ep, Session: "conv"})
	if err != nil {
		t.Fatal(err)
	}
	full := slices.Concat(prefix, e1.Tokens, answer)
	e2, err := ref.Generate(ctx, engine.Request{Prefix: full, Params: ep, Session: "conv"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first.Tokens, e1.Tokens) || !slices.Equal(second.Tokens, e2.Tokens) || !slices.Equal(second.LogProbs, e2.LogProbs) {
		t.Fatalf("Continue sampled %v then %v; the engine with the same history %v then %v", first.Tokens, second.Tokens, e1.Tokens, e2.Tokens)
	}
	if e2.CachedTokens == 0 {
		t.Fatalf("the engine reused no cached tokens for the continued session")
	}
	if st := r.srv.Engine().Stats(); st.Reused < int64(len(prefix)) {
		t.Fatalf("the server's engine reused %d cached tokens, want at least the prefix's %d", st.Reused, len(prefix))
	}
	// Generate with the full prefix in the same session is the same call.
	c.Release(ctx, "conv")
	if _, err := c.Continue(ctx, "conv", answer, p); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "Generate with the whole prefix") {
		t.Fatalf("Continue of a released session: %v, want NOT_FOUND naming the fix", err)
	}
	if n, _ := r.srv.hist.size(); n != 0 {
		t.Fatalf("%d conversations kept after Release", n)
	}
}

// TestBadInput checks that invalid requests are refused with errors that
// name the problem, over gRPC (HTTP: TestHTTPErrors).
func TestBadInput(t *testing.T) {
	r := start(t, Options{})
	ctx := ctxT(t, 30*time.Second)
	c := openClient(t, "grpc://"+r.grpcAddr)
	long := make([]int32, 130)
	cases := []struct {
		req  policy.Request
		want string
	}{
		{policy.Request{Prefix: long}, "leaves no room in the context of 128"},
		{policy.Request{Prefix: []int32{1, 99999}}, "outside the vocabulary"},
		{policy.Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: -1}}, "max_tokens -1 must be >= 0"},
		{policy.Request{Prefix: nil}, "empty prefix"},
		{policy.Request{Prefix: []int32{1}, Params: sampling.Params{TopP: 2}}, "top_p"},
	}
	for _, tc := range cases {
		_, err := c.Generate(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Generate(%v...): %v; want INVALID_ARGUMENT mentioning %q", tc.req.Params, err, tc.want)
		}
	}
	if _, err := c.Detokenize(ctx, []int32{-1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Detokenize(-1): %v", err)
	}
	gc := c.(*grpcclient.Client)
	if _, err := gc.Reload(ctx, t.TempDir()); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not committed") {
		t.Errorf("Reload of an empty directory: %v", err)
	}
	if in, _ := c.Info(ctx); in.PolicyVersion != 3 {
		t.Errorf("a failed reload changed the version to %d", in.PolicyVersion)
	}
	if _, err := policy.Open(ctx, "grpc://127.0.0.1:1?colour=red"); err == nil || !strings.Contains(err.Error(), `unknown query parameter "colour"`) {
		t.Errorf("open with an unknown parameter: %v", err)
	}
	if _, err := policy.Open(ctx, "http://"+r.httpAddr+"/v1?model=other"); err == nil || !strings.Contains(err.Error(), `does not serve model "other"`) {
		t.Errorf("open of an unknown model: %v", err)
	}
}

// TestBearerToken checks that a wrong or missing token is refused on both
// protocols, the right one accepted, and that the token is never echoed.
func TestBearerToken(t *testing.T) {
	const secret = "s3cret-token-value"
	r := start(t, Options{Token: secret})
	ctx := ctxT(t, 30*time.Second)
	t.Setenv("AIPO_TEST_GOOD", secret)
	t.Setenv("AIPO_TEST_BAD", "wrong")
	prefix := []int32{1, 2, 3}
	for _, base := range []string{"grpc://" + r.grpcAddr + "?", "http://" + r.httpAddr + "/v1?model=tiny&"} {
		good := openClient(t, base+"token_env=AIPO_TEST_GOOD")
		if _, err := good.Generate(ctx, policy.Request{Prefix: prefix, Params: sampling.Params{MaxTokens: 2}}); err != nil {
			t.Fatalf("%s with the right token: %v", base, err)
		}
		for _, q := range []string{"token_env=AIPO_TEST_BAD&max_retries=0", "max_retries=0"} {
			uri := base + q
			c, err := policy.Open(ctx, uri)
			if err == nil {
				_, err = c.Generate(ctx, policy.Request{Prefix: prefix, Params: sampling.Params{MaxTokens: 2}})
				c.Close()
			}
			if err == nil {
				t.Fatalf("%s: a request without the right token was served", uri)
			}
			if !strings.Contains(err.Error(), "401") && status.Code(errors.Unwrap(err)) != codes.Unauthenticated && status.Code(err) != codes.Unauthenticated {
				t.Fatalf("%s: %v; want 401 / UNAUTHENTICATED", uri, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error carries the token: %v", err)
			}
		}
	}
}
