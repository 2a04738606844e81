// Package httpclient is the policy.Client of OpenAI-compatible servers that
// take token-id prompts and return token ids with log-probs: `aipo serve`,
// vLLM and SGLang. It registers the URI schemes "http" and "https":
//
//	http://127.0.0.1:8000/v1?model=NAME
//	https://policy.example/v1?model=NAME&token_env=AIPO_POLICY_TOKEN&ca=/etc/aipo/ca.pem
//
// The path is the API's base (default /v1). Query parameters: model (the
// served model name; default: the only model of GET /v1/models),
// token_env or token_file (the bearer token, sent as "Authorization:
// Bearer"; never put the token itself in a URI), ca (PEM CA file for
// https), max_retries and retry_budget (the retry policy shared with the
// gRPC client, remote.Retry; default: up to 20 retries within 30s).
//
// Generate posts to /v1/completions a token-id prompt with max_tokens,
// temperature, top_p, top_k, seed, stop, stop_token_ids and logprobs, and
// vLLM's extensions return_token_ids, return_tokens_as_token_ids,
// skip_special_tokens=false and include_stop_str_in_output (servers that
// do not know a field ignore it). It reads the sampled ids from the
// choice's token_ids, or else from logprobs.tokens written as
// "token_id:N", and the log-probs from logprobs.token_logprobs. A finish
// reason "stop" with no stop_reason (SGLang: matched_stop) is an end of
// sequence; a numeric one is a stop token id (an end of sequence when it
// was not asked for), a string one a stop string. The policy
// version comes from aipo_policy_version (aipo serve; other servers: 0).
// Requests that fail in a way that may pass are retried with exponential
// back-off and jitter, never past the call's context deadline: connection
// refused, reset or closed before a whole answer, and answers 502, 503,
// 504 and 429 (honouring Retry-After when it ends within the deadline and
// the budget). Other answers (4xx, 500) and TLS failures are not retried.
// Every request is safe to repeat: a retry of a completion repeats its
// seed, and the servers keep no state per request. A call whose context
// has no deadline is bounded by remote.CallTimeout per attempt.
//
// Tokenize and Detokenize use vLLM's /tokenize and /detokenize beside the
// base path (aipo serve offers them too). vLLM's tokenizer always parses
// special tokens written in text, so Tokenize(text, false) can differ
// there from the policy's own tokenizer for such text. Release reaches
// aipo serve's /aipo/release; other servers evict by themselves. Linking
// this package (import _ ".../httpclient") registers the schemes.
package httpclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/internal/remote"
)

func init() {
	policy.Register("http", open)
	policy.Register("https", open)
}

// Client is a policy.Client over an OpenAI-compatible HTTP API.
type Client struct {
	base  string // http://host:port/v1
	root  string // http://host:port
	model string
	token string
	retry remote.Retry
	hc    *http.Client

	mu     sync.Mutex
	info   policy.Info // first successful answer of /v1/models
	haveIt bool
	aipo   bool // the server is aipo serve
}

var _ policy.Client = (*Client)(nil)

func open(ctx context.Context, u *url.URL) (policy.Client, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("httpclient: %q has no host; want %s://HOST:PORT/v1?model=NAME", secure.RedactURL(u), u.Scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("httpclient: %q carries user information; give the token with token_env or token_file", secure.RedactURL(u))
	}
	q := u.Query()
	set, err := remote.Parse(q)
	if err != nil {
		return nil, fmt.Errorf("httpclient: %s: %w", secure.RedactURL(u), err)
	}
	model := q.Get("model")
	q.Del("model")
	if len(q) > 0 {
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("httpclient: unknown query parameter %q in %s (known: model, %s)", keys[0], secure.RedactURL(u), strings.Join(remote.Known, ", "))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	if u.Scheme == "https" {
		if tr.TLSClientConfig, err = set.TLS(); err != nil {
			return nil, fmt.Errorf("httpclient: %s: %w", secure.RedactURL(u), err)
		}
	}
	path := strings.TrimSuffix(u.Path, "/")
	if path == "" {
		path = "/v1"
	}
	root := u.Scheme + "://" + u.Host
	c := &Client{base: root + path, root: root + strings.TrimSuffix(path, "/v1"), model: model, token: set.Token, retry: set.Retry,
		hc: &http.Client{Transport: tr}}
	// The first answer checks the model (or finds the only one) and keeps
	// the context length for Generate.
	in, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	c.model = in.Model
	return c, nil
}

// StatusError is a non-2xx answer, with the server's OpenAI-shaped error.
type StatusError struct {
	URL     string
	Status  int
	Type    string
	Code    string
	Message string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("http policy %s: %d %s", e.URL, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// maxAnswer bounds the body of an answer read into memory.
const maxAnswer = 64 << 20

// do sends body (when not nil) to url as JSON and decodes the answer into
// out, retrying failures that may pass under the client's retry policy.
func (c *Client) do(ctx context.Context, method, url string, body, out any) (http.Header, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	rs := c.retry.Start()
	for {
		h, retry, hint, err := c.once(ctx, method, url, payload, out)
		if err == nil {
			return h, nil
		}
		if !retry || !rs.Next(ctx, hint) {
			return nil, err
		}
	}
}

// meta is do for a metadata call, bounded by remote.MetaTimeout; a server
// that does not answer within it is named in the error.
func (c *Client) meta(ctx context.Context, method, url string, body, out any) (http.Header, error) {
	mctx, cancel := remote.Meta(ctx)
	defer cancel()
	h, err := c.do(mctx, method, url, body, out)
	if err != nil && ctx.Err() == nil && errors.Is(mctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("http policy %s: no answer to %s %s within %s (the server accepts connections but does not answer; check it and the address): %w",
			c.base, method, secure.RedactURL(mustURL(url)), remote.MetaTimeout, err)
	}
	return h, err
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{Opaque: "(unparsable)"}
	}
	return u
}

// once makes one attempt; it reports whether a failure may pass when
// repeated, and the server's Retry-After.
func (c *Client) once(ctx context.Context, method, url string, payload []byte, out any) (http.Header, bool, time.Duration, error) {
	actx, cancel := remote.Attempt(ctx)
	defer cancel()
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(actx, method, url, rd)
	if err != nil {
		return nil, false, 0, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, 0, ctx.Err()
		}
		return nil, transient(err), 0, fmt.Errorf("http policy %s: %w", url, secure.RedactError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, 0, ctx.Err()
		}
		return nil, transient(err), 0, fmt.Errorf("http policy %s: reading the answer: %w", url, err)
	}
	if len(b) > maxAnswer {
		return nil, false, 0, fmt.Errorf("http policy %s: the answer exceeds %d MiB", url, maxAnswer>>20)
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{URL: url, Status: resp.StatusCode}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			} `json:"error"`
			Message string `json:"message"` // some servers' flat shape
		}
		if json.Unmarshal(b, &e) == nil {
			se.Message, se.Type = e.Error.Message, e.Error.Type
			if se.Message == "" {
				se.Message = e.Message
			}
			if e.Error.Code != nil {
				se.Code = fmt.Sprint(e.Error.Code)
			}
		}
		if se.Message == "" {
			se.Message = strings.TrimSpace(string(b[:min(len(b), 300)]))
		}
		// A server (or a proxy before it) that quotes the request's
		// Authorization header must not put the token into an error.
		if c.token != "" {
			se.Message = strings.ReplaceAll(se.Message, c.token, "[redacted]")
		}
		return nil, retryStatus(resp.StatusCode), remote.RetryAfter(resp.Header.Get("Retry-After"), time.Now()), se
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, false, 0, fmt.Errorf("http policy %s: the answer is not the JSON expected: %w", url, err)
	}
	return resp.Header, false, 0, nil
}

// retryStatus reports whether an answer with status may succeed when the
// request is repeated: an overloaded (429), restarting or unreachable
// (502, 503, 504) server. Other statuses are the request's fault or the
// server's bug, which repeating does not fix.
func retryStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// transient reports whether a failure to get an answer may pass: the
// connection was refused, reset, aborted or closed before the whole
// answer, or connecting timed out or failed on the network; a name that
// does not resolve, a TLS failure (an untrusted certificate, a server that
// does not speak TLS) or a malformed answer does not get better.
func transient(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTemporary || dns.IsTimeout
	}
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cv) || errors.As(err, &rh) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return false
	}
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ENETUNREACH, syscall.EHOSTUNREACH, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return true
	}
	// The server closed a kept-alive connection just as the request went
	// out on it (a server shutting down does this to every idle one).
	// net/http retries that itself only for requests it deems idempotent,
	// not POSTs, and exports no value for it: the request was not read.
	if strings.Contains(err.Error(), errServerClosedIdle) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errServerClosedIdle is net/http's message for a request sent on a
// connection the server had just closed as idle.
const errServerClosedIdle = "http: server closed idle connection"

// completion is the part of a completions answer the client reads.
type completion struct {
	Choices []struct {
		FinishReason string          `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`  // vLLM, aipo serve
		MatchedStop  json.RawMessage `json:"matched_stop"` // SGLang
		TokenIDs     []int32         `json:"token_ids"`
		Logprobs     *struct {
			Tokens        []string   `json:"tokens"`
			TokenLogprobs []*float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	PolicyVersion *int64 `json:"aipo_policy_version"`
}

// Generate samples a continuation through /v1/completions.
func (c *Client) Generate(ctx context.Context, req policy.Request) (policy.Result, error) {
	p := req.Params
	body := map[string]any{
		"model": c.model, "prompt": req.Prefix, "temperature": p.Temperature, "seed": p.Seed, "logprobs": 1,
		"return_token_ids": true, "return_tokens_as_token_ids": true, "skip_special_tokens": false, "include_stop_str_in_output": true,
	}
	if p.TopP > 0 && p.TopP < 1 {
		body["top_p"] = p.TopP
	}
	if p.TopK > 0 {
		body["top_k"] = p.TopK
	}
	maxTokens := p.MaxTokens
	if in, err := c.static(ctx); err == nil && in.MaxContext > 0 {
		room := in.MaxContext - len(req.Prefix)
		if maxTokens == 0 || maxTokens > room {
			maxTokens = room
		}
	}
	if maxTokens > 0 {
		body["max_tokens"] = maxTokens
	}
	if len(p.StopTokenIDs) > 0 {
		body["stop_token_ids"] = p.StopTokenIDs
	}
	if len(p.StopStrings) > 0 {
		body["stop"] = p.StopStrings
	}
	if req.Session != "" {
		body["aipo_session"] = req.Session
	}
	var out completion
	h, err := c.do(ctx, http.MethodPost, c.base+"/completions", body, &out)
	if err != nil {
		return policy.Result{}, err
	}
	return c.result(&out, h, p)
}

func (c *Client) result(out *completion, h http.Header, p policy.SampleParams) (policy.Result, error) {
	url := c.base + "/completions"
	if len(out.Choices) != 1 {
		return policy.Result{}, fmt.Errorf("http policy %s: the answer has %d choices, want 1", url, len(out.Choices))
	}
	ch := out.Choices[0]
	if ch.Logprobs == nil {
		return policy.Result{}, fmt.Errorf("http policy %s: the answer has no logprobs; the server must return log-probs of completions (vLLM: do not set --max-logprobs 0)", url)
	}
	var res policy.Result
	res.Tokens = ch.TokenIDs
	if res.Tokens == nil {
		for i, t := range ch.Logprobs.Tokens {
			s, ok := strings.CutPrefix(t, "token_id:")
			id, err := strconv.ParseInt(s, 10, 32)
			if !ok || err != nil {
				return policy.Result{}, fmt.Errorf("http policy %s: token %d is %q, not token_id:N; start vLLM with --return-tokens-as-token-ids or use a server that returns token_ids", url, i, t)
			}
			res.Tokens = append(res.Tokens, int32(id))
		}
	}
	if len(ch.Logprobs.TokenLogprobs) != len(res.Tokens) {
		return policy.Result{}, fmt.Errorf("http policy %s: %d tokens but %d log-probs", url, len(res.Tokens), len(ch.Logprobs.TokenLogprobs))
	}
	for _, lp := range ch.Logprobs.TokenLogprobs {
		if lp == nil {
			return policy.Result{}, fmt.Errorf("http policy %s: a sampled token has no log-prob", url)
		}
		res.LogProbs = append(res.LogProbs, float32(*lp))
	}
	switch ch.FinishReason {
	case "length":
		res.FinishReason = policy.FinishLength
	case "stop":
		var reason any
		raw := ch.StopReason
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			raw = ch.MatchedStop
		}
		if len(raw) > 0 {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			d.Decode(&reason)
		}
		switch r := reason.(type) {
		case nil:
			res.FinishReason = policy.FinishEOS
		case json.Number:
			res.FinishReason, res.Stop = policy.FinishStop, r.String()
			// A server may name an end-of-sequence id given as a stop id.
			if id, err := r.Int64(); err == nil && !slices.Contains(p.StopTokenIDs, int32(id)) {
				res.FinishReason, res.Stop = policy.FinishEOS, ""
			}
		case string:
			res.FinishReason, res.Stop = policy.FinishStop, r
		default:
			return policy.Result{}, fmt.Errorf("http policy %s: stop_reason %s is neither a token id nor a string", url, ch.StopReason)
		}
	default:
		return policy.Result{}, fmt.Errorf("http policy %s: finish_reason %q (want stop or length)", url, ch.FinishReason)
	}
	switch {
	case out.PolicyVersion != nil:
		res.PolicyVersion = *out.PolicyVersion
	case h.Get("X-Aipo-Policy-Version") != "":
		res.PolicyVersion, _ = strconv.ParseInt(h.Get("X-Aipo-Policy-Version"), 10, 64)
	}
	return res, nil
}

// Release drops a session's cache on aipo serve; other servers keep no
// sessions.
func (c *Client) Release(ctx context.Context, session string) {
	if _, err := c.static(ctx); err != nil || session == "" {
		return
	}
	c.mu.Lock()
	aipo := c.aipo
	c.mu.Unlock()
	if !aipo {
		return
	}
	var out map[string]any
	c.meta(ctx, http.MethodPost, c.root+"/aipo/release", map[string]any{"session": session}, &out)
}

// Tokenize encodes text through /tokenize.
func (c *Client) Tokenize(ctx context.Context, text string, special bool) ([]int32, error) {
	var out struct {
		Tokens []int32 `json:"tokens"`
	}
	body := map[string]any{"model": c.model, "prompt": text, "add_special_tokens": false, "parse_special": special}
	if _, err := c.meta(ctx, http.MethodPost, c.root+"/tokenize", body, &out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

// Detokenize decodes ids through /detokenize.
func (c *Client) Detokenize(ctx context.Context, ids []int32) (string, error) {
	var out struct {
		Prompt string `json:"prompt"`
	}
	if ids == nil {
		ids = []int32{}
	}
	if _, err := c.meta(ctx, http.MethodPost, c.root+"/detokenize", map[string]any{"model": c.model, "tokens": ids}, &out); err != nil {
		return "", err
	}
	return out.Prompt, nil
}

// Info describes the model from /v1/models: its name, max_model_len and,
// from aipo serve, the policy version, vocabulary size and EOS ids.
func (c *Client) Info(ctx context.Context) (policy.Info, error) {
	var out struct {
		Data []struct {
			ID            string  `json:"id"`
			MaxModelLen   int     `json:"max_model_len"`
			PolicyVersion *int64  `json:"aipo_policy_version"`
			VocabSize     int     `json:"aipo_vocab_size"`
			EOS           []int32 `json:"aipo_eos"`
		} `json:"data"`
	}
	if _, err := c.meta(ctx, http.MethodGet, c.base+"/models", nil, &out); err != nil {
		return policy.Info{}, err
	}
	var names []string
	for _, m := range out.Data {
		if m.ID == c.model || (c.model == "" && len(out.Data) == 1) {
			in := policy.Info{Model: m.ID, VocabSize: m.VocabSize, EOS: m.EOS, MaxContext: m.MaxModelLen}
			if m.PolicyVersion != nil {
				in.PolicyVersion = *m.PolicyVersion
			}
			c.mu.Lock()
			if !c.haveIt {
				c.info, c.haveIt, c.aipo = in, true, m.PolicyVersion != nil
			}
			c.mu.Unlock()
			return in, nil
		}
		names = append(names, m.ID)
	}
	if c.model == "" {
		return policy.Info{}, fmt.Errorf("http policy %s: the server has %d models (%s); name one with ?model=NAME", c.base, len(names), strings.Join(names, ", "))
	}
	return policy.Info{}, fmt.Errorf("http policy %s: the server does not serve model %q (it serves: %s)", c.base, c.model, strings.Join(names, ", "))
}

// static is the first successful Info (the context length and vocabulary
// do not change).
func (c *Client) static(ctx context.Context) (policy.Info, error) {
	c.mu.Lock()
	in, ok := c.info, c.haveIt
	c.mu.Unlock()
	if ok {
		return in, nil
	}
	return c.Info(ctx)
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// IsStatus reports whether err is a StatusError with the given status.
func IsStatus(err error, status int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == status
}
