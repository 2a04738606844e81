// Package grpcclient is the policy.Client of `aipo serve`'s gRPC service
// aipo.v1.Policy, registered under the URI schemes "grpc" (plain text) and
// "grpcs" (TLS):
//
//	grpc://127.0.0.1:7070
//	grpcs://policy.example:7070?ca=/etc/aipo/ca.pem&token_env=AIPO_POLICY_TOKEN
//
// Query parameters: token_env or token_file (the bearer token; never put
// the token itself in a URI), ca (PEM CA file for grpcs; default: the
// system roots), max_retries and retry_budget (the retry policy shared with
// the HTTP client, remote.Retry: by default up to 20 retries within 30s,
// waits from 100ms doubling to 2s with jitter, never past the call's
// deadline). Generate collects the server's token stream into one Result;
// calls refused with RESOURCE_EXHAUSTED (the server's queue is full) or
// UNAVAILABLE (the server is unreachable or restarting) are retried, and
// since a retry repeats the same seed it samples the same tokens. Tokenize,
// Detokenize and Info are retried alike. Sessions
// pass through: the server keeps the session's KV cache and the next call's
// prefix, which extends this one's, feeds only the new tokens. Linking this
// package (import _ ".../grpcclient") registers the schemes.
package grpcclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/schemas/aipov1"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/internal/remote"
)

func init() {
	policy.Register("grpc", open)
	policy.Register("grpcs", open)
}

// Client is a policy.Client over a gRPC connection.
type Client struct {
	target string
	conn   *grpc.ClientConn
	rpc    aipov1.PolicyClient
	retry  remote.Retry
}

var _ policy.Client = (*Client)(nil)

func open(_ context.Context, u *url.URL) (policy.Client, error) {
	if u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("grpcclient: %q must be %s://HOST:PORT with no path", secure.RedactURL(u), u.Scheme)
	}
	q := u.Query()
	set, err := remote.Parse(q)
	if err != nil {
		return nil, fmt.Errorf("grpcclient: %s: %w", secure.RedactURL(u), err)
	}
	if len(q) > 0 {
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("grpcclient: unknown query parameter %q in %s (known: %s)", keys[0], secure.RedactURL(u), strings.Join(remote.Known, ", "))
	}
	opts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}
	tlsOn := u.Scheme == "grpcs"
	if tlsOn {
		cfg, err := set.TLS()
		if err != nil {
			return nil, fmt.Errorf("grpcclient: %s: %w", secure.RedactURL(u), err)
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if set.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(secure.Bearer{Token: set.Token, Secure: tlsOn}))
	}
	c, err := Dial(u.Host, set.Retry.MaxRetries, opts...)
	if err != nil {
		return nil, err
	}
	c.retry = set.Retry
	return c, nil
}

// Dial connects to target (HOST:PORT) with the given options; maxRetries
// bounds the retries of an overloaded or unavailable server (the other
// bounds of remote.DefaultRetry apply).
func Dial(target string, maxRetries int, opts ...grpc.DialOption) (*Client, error) {
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("grpcclient: %s: %w", target, err)
	}
	retry := remote.DefaultRetry
	retry.MaxRetries = maxRetries
	return &Client{target: target, conn: conn, rpc: aipov1.NewPolicyClient(conn), retry: retry}, nil
}

// retriable reports whether a failed call may succeed when repeated.
func retriable(err error) bool {
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.Unavailable:
		return true
	}
	return false
}

// wrap names the server in an error, keeping its status.
func (c *Client) wrap(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("grpc policy %s: %w", c.target, err)
}

func params(p sampling.Params) *aipov1.SampleParams {
	return &aipov1.SampleParams{Temperature: p.Temperature, TopP: p.TopP, TopK: int32(p.TopK), MaxTokens: int32(p.MaxTokens),
		Seed: p.Seed, StopTokenIds: p.StopTokenIDs, Stop: p.StopStrings}
}

// Generate samples a continuation, collecting the server's stream.
func (c *Client) Generate(ctx context.Context, req policy.Request) (policy.Result, error) {
	if req.Pinned {
		return policy.Result{}, fmt.Errorf("policy call pinned to version %d: only the in-process engine serves a call the version it names (rollout.partial_tokens needs the in-process policy)", req.Version)
	}
	in := &aipov1.GenerateRequest{Prefix: req.Prefix, Params: params(req.Params), Session: req.Session}
	return c.call(ctx, func(ctx context.Context) (grpc.ServerStreamingClient[aipov1.GenerateResponse], error) {
		return c.rpc.Generate(ctx, in)
	})
}

// Continue appends tokens to a session's conversation on the server (its
// previous prefix plus output) and resumes sampling.
func (c *Client) Continue(ctx context.Context, session string, tokens []int32, p sampling.Params) (policy.Result, error) {
	in := &aipov1.ContinueRequest{Session: session, Tokens: tokens, Params: params(p)}
	return c.call(ctx, func(ctx context.Context) (grpc.ServerStreamingClient[aipov1.GenerateResponse], error) {
		return c.rpc.Continue(ctx, in)
	})
}

func (c *Client) call(ctx context.Context, start func(context.Context) (grpc.ServerStreamingClient[aipov1.GenerateResponse], error)) (policy.Result, error) {
	return unary(ctx, c, func(ctx context.Context) (policy.Result, error) { return collect(ctx, start) })
}

// unary runs one call under the retry policy: attempts bounded by
// remote.Attempt, retried while retriable and the policy allows.
func unary[T any](ctx context.Context, c *Client, fn func(context.Context) (T, error)) (T, error) {
	rs := c.retry.Start()
	for {
		actx, cancel := remote.Attempt(ctx)
		v, err := fn(actx)
		cancel()
		if err == nil {
			return v, nil
		}
		if !retriable(err) || !rs.Next(ctx, 0) {
			var zero T
			return zero, c.wrap(err)
		}
	}
}

func collect(ctx context.Context, start func(context.Context) (grpc.ServerStreamingClient[aipov1.GenerateResponse], error)) (policy.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := start(ctx)
	if err != nil {
		return policy.Result{}, err
	}
	var res policy.Result
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return policy.Result{}, status.Error(codes.Unavailable, "the stream ended without its final message")
		}
		if err != nil {
			return policy.Result{}, err
		}
		if len(m.Logprobs) != len(m.Tokens) {
			return policy.Result{}, fmt.Errorf("a stream message has %d tokens and %d log-probs", len(m.Tokens), len(m.Logprobs))
		}
		res.Tokens = append(res.Tokens, m.Tokens...)
		res.LogProbs = append(res.LogProbs, m.Logprobs...)
		if m.Done {
			res.FinishReason, res.Stop, res.PolicyVersion = m.FinishReason, m.Stop, m.PolicyVersion
			return res, nil
		}
	}
}

// Release drops a session's state on the server; failures are ignored
// (the server evicts idle sessions by itself).
func (c *Client) Release(ctx context.Context, session string) {
	c.rpc.Release(ctx, &aipov1.ReleaseRequest{Session: session})
}

// Tokenize encodes text with the server's tokenizer.
func (c *Client) Tokenize(ctx context.Context, text string, special bool) ([]int32, error) {
	r, err := unary(ctx, c, func(ctx context.Context) (*aipov1.TokenizeResponse, error) {
		return c.rpc.Tokenize(ctx, &aipov1.TokenizeRequest{Text: text, Special: special})
	})
	if err != nil {
		return nil, c.wrap(err)
	}
	return r.Tokens, nil
}

// Detokenize decodes ids with the server's tokenizer.
func (c *Client) Detokenize(ctx context.Context, ids []int32) (string, error) {
	r, err := unary(ctx, c, func(ctx context.Context) (*aipov1.DetokenizeResponse, error) {
		return c.rpc.Detokenize(ctx, &aipov1.DetokenizeRequest{Tokens: ids})
	})
	if err != nil {
		return "", c.wrap(err)
	}
	return r.Text, nil
}

// Info describes the served model (the Health call).
func (c *Client) Info(ctx context.Context) (policy.Info, error) {
	h, err := unary(ctx, c, func(ctx context.Context) (*aipov1.PolicyHealthResponse, error) {
		return c.rpc.Health(ctx, &aipov1.PolicyHealthRequest{})
	})
	if err != nil {
		return policy.Info{}, c.wrap(err)
	}
	return policy.Info{Model: h.Model, PolicyVersion: h.PolicyVersion, VocabSize: int(h.VocabSize), EOS: h.Eos, MaxContext: int(h.MaxContext)}, nil
}

// Reload asks the server to serve the committed checkpoint in dir and
// returns the new policy version. It is retried like the other calls when
// the server is unavailable or overloaded (loading the same checkpoint
// twice serves it once).
func (c *Client) Reload(ctx context.Context, dir string) (int64, error) {
	r, err := unary(ctx, c, func(ctx context.Context) (*aipov1.ReloadResponse, error) {
		return c.rpc.Reload(ctx, &aipov1.ReloadRequest{Checkpoint: dir})
	})
	if err != nil {
		return 0, err
	}
	return r.PolicyVersion, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
