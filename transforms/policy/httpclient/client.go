// Package httpclient is the policy.Client of OpenAI-compatible servers that
// take token-id prompts and return token ids with log-probs: `aipo serve`,
// vLLM, SGLang and llama.cpp's llama-server. It registers the URI schemes
// "http" and "https":
//
//	http://127.0.0.1:8000/v1?model=NAME
//	https://policy.example/v1?model=NAME&token_env=AIPO_POLICY_TOKEN&ca=/etc/aipo/ca.pem
//	http://127.0.0.1:8080/v1?server=llamacpp
//
// The path is the API's base (default /v1). Query parameters: model (the
// served model name; default: the only model of GET /v1/models), server
// (which server answers: auto, aipo, vllm, sglang or llamacpp; see
// below), token_env or token_file (the bearer token, sent as
// "Authorization: Bearer"; never put the token itself in a URI), ca (PEM
// CA file for https), policy_version (see below), partial (see below),
// max_retries and retry_budget (the retry policy shared with the gRPC
// client, remote.Retry; default: up to 20 retries within 30s).
//
// # Servers
//
// The servers agree on /v1/models and on little else: where a completion's
// token ids and log-probs are, and what /tokenize and /detokenize read
// and answer, differ. The client speaks each one's dialect, chosen by the
// server parameter; with server=auto (the default) the first answer of
// /v1/models decides: aipo serve writes aipo_policy_version, and vLLM,
// SGLang and llama-server name themselves in owned_by ("vllm", "sglang",
// "llamacpp"). A listing that names none of them (a proxy in front, an
// unknown server) is spoken to as vLLM, the generic OpenAI completions
// dialect, and the client says so once on standard error; set server= to
// choose. The dialects (servers.go, sglang.go, llamacpp.go cite the
// documents and versions they follow):
//
//   - aipo and vllm: POST /v1/completions with a token-id prompt and
//     vLLM's extensions return_token_ids, return_tokens_as_token_ids,
//     skip_special_tokens=false and include_stop_str_in_output. The ids
//     are read from the choice's token_ids, or else from logprobs.tokens
//     written as "token_id:N" (or logprobs.content[].id / .token), the
//     log-probs from logprobs.token_logprobs (or logprobs.content[].logprob).
//     /tokenize sends prompt and reads tokens, /detokenize sends tokens and
//     reads prompt. The context length is /v1/models' max_model_len.
//   - sglang: SGLang's native POST /generate with input_ids and
//     return_logprob, which pairs every output id with its log-prob in
//     meta_info.output_token_logprobs ([logprob, id, text] each) beside
//     output_ids; /v1/tokenize sends prompt and reads tokens,
//     /v1/detokenize sends tokens and reads text; max_model_len as vLLM.
//   - llamacpp: llama-server's native POST /completion with return_tokens
//     (every sampled id, in tokens) and n_probs (the log-probs, in
//     completion_probabilities[].logprob beside each entry's id), the
//     samplers it applies by default switched off (top_k, top_p, min_p,
//     penalties ... see llamacpp.go); /tokenize sends content and reads
//     tokens, /detokenize sends tokens and reads content; the context is
//     /v1/models' meta.n_ctx (the slot's), else meta.n_ctx_train.
//
// A finish reason "stop" with no stop_reason (SGLang: matched_stop or
// meta_info.finish_reason.matched) is an end of sequence; a numeric one is
// a stop token id (an end of sequence when it was not asked for), a string
// one a stop string. The policy version of an answer is the one the
// server names: aipo_policy_version or X-Aipo-Policy-Version (aipo serve),
// SGLang's weight_version when it is a number (the weight_version of
// its last update_weights_from_disk), or vLLM's weight_version of
// GET /weight_info when it is a number (set by /update_weight_version, as
// policy.sync kind vllm does; read after each completion, so that an
// answer of a server restarted since is never labelled with the version
// it lost); for a server that names none (a vLLM never told a version,
// or restarted: weight_version "default"; llama-server), the endpoint's
// policy_version=N (the version its weights were confirmed to hold when
// they were pushed), else 0.
//
// partial=true (added by aipo train under rollout.partial to a vLLM's
// endpoint, whose pushes pause it with mode abort) streams each vLLM
// completion, so that one aborted at a push keeps every token it
// sampled (finish reason abort, for the caller to continue from), waits
// while GET /is_paused answers true, and labels each answer by the
// weight versions read around it and at its first token
// (generateVLLMPartial); other servers ignore it.
//
// No answer is taken on trust: a completion with no tokens although
// max_tokens > 0, with more tokens than asked for, with ids but no
// log-probs (or a different number of each), with ids that disagree
// between two fields, or with a log-prob that is not a finite number <= 0
// is an error naming the server, the endpoint and the field; so is a
// /tokenize answer with no tokens for non-empty text and an answer that
// lacks the field the dialect reads (a server of another kind than
// configured).
//
// Requests that fail in a way that may pass are retried with exponential
// back-off and jitter, never past the call's context deadline: connection
// refused, reset or closed before a whole answer, and answers 502, 503,
// 504 and 429 (honouring Retry-After when it ends within the deadline and
// the budget). Other answers (4xx, 500) and TLS failures are not retried:
// every request is safe to repeat, but a retry of a completion repeats its
// seed, so a server that failed on it (llama-server answers 500 to some
// prompts) fails the same way again; the caller decides (the rollout
// retries a bounded number of times, then records the trajectory as
// failed). A call whose context has no deadline is bounded by
// remote.CallTimeout per attempt.
//
// vLLM's tokenizer always parses special tokens written in text, so
// Tokenize(text, false) can differ there from the policy's own tokenizer
// for such text. Release reaches aipo serve's /aipo/release; other
// servers evict by themselves. Linking this package (import _
// ".../httpclient") registers the schemes.
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
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/internal/remote"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
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
	kind   string      // the server's dialect (servers.Aipo ...); "" until the first Info under server=auto
	info   policy.Info // first successful answer of /v1/models
	haveIt bool
	// pieces are llama-server's bytes of every token (llamacpp.go), read
	// once when an answer needs them.
	pieces [][]byte

	// version, when set (policy_version=N), is the policy version of
	// answers that name none.
	version *int64
	// noWeightInfo is set once a vLLM answered 404 to /weight_info (a
	// release before its RL routes, or one started without
	// VLLM_SERVER_DEV_MODE): its answers name no version.
	noWeightInfo atomic.Bool
	// partial (partial=true): weight pushes stop the server's
	// completions; a vLLM's answers are labelled by the version read
	// before and after them (generateOpenAI).
	partial bool
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
	kind := q.Get("server")
	q.Del("server")
	switch {
	case kind == "" || kind == ServerAuto:
		kind = ""
	case !slices.Contains(servers.Names(), kind):
		return nil, fmt.Errorf("httpclient: server=%q in %s is not a server this client speaks to (want %s)", kind, secure.RedactURL(u), strings.Join(Servers, ", "))
	}
	var version *int64
	if v := q.Get("policy_version"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("httpclient: policy_version=%q in %s must be a policy version >= 0", v, secure.RedactURL(u))
		}
		version = &n
	}
	q.Del("policy_version")
	partial := false
	if v := q.Get("partial"); v != "" {
		if partial, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("httpclient: partial=%q in %s must be true or false", v, secure.RedactURL(u))
		}
	}
	q.Del("partial")
	if len(q) > 0 {
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("httpclient: unknown query parameter %q in %s (known: model, server, policy_version, partial, %s)", keys[0], secure.RedactURL(u), strings.Join(remote.Known, ", "))
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
		hc: &http.Client{Transport: tr}, kind: kind, version: version, partial: partial}
	// The first answer checks the model (or finds the only one), tells
	// the server's kind and keeps the context length for Generate.
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
	Server  string // the server's kind in words (vLLM, llama-server ...)
	Status  int
	Type    string
	Code    string
	Message string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("http policy %s", e.URL)
	if e.Server != "" {
		s += " (" + e.Server + ")"
	}
	s += fmt.Sprintf(": %d %s", e.Status, http.StatusText(e.Status))
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
	if d, ok := out.(streamDecoder); ok && resp.StatusCode/100 == 2 {
		if err := d.decodeStream(io.LimitReader(resp.Body, maxAnswer)); err != nil {
			if ctx.Err() != nil {
				return nil, false, 0, ctx.Err()
			}
			var re streamReadError
			if errors.As(err, &re) {
				return nil, transient(re.err), 0, fmt.Errorf("http policy %s: reading the streamed answer: %w", url, secure.RedactError(re.err))
			}
			return nil, false, 0, fmt.Errorf("http policy %s: %w", url, err)
		}
		return resp.Header, false, 0, nil
	}
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
		se := &StatusError{URL: url, Status: resp.StatusCode, Server: servers.Display(c.serverKind())}
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

// streamDecoder is an answer that is not one JSON document but a stream
// of server-sent events: once hands it the body of a 2xx answer to read
// as it arrives (each attempt afresh), and it reports a failure to read
// the body as a streamReadError (retried where transient says so).
type streamDecoder interface {
	decodeStream(body io.Reader) error
}

// streamReadError is a failure to read a streamed answer's body (the
// connection reset or closed before its end), as against an answer that
// is not what was expected.
type streamReadError struct{ err error }

func (e streamReadError) Error() string { return e.err.Error() }
func (e streamReadError) Unwrap() error { return e.err }

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

// Generate samples a continuation in the server's dialect.
func (c *Client) Generate(ctx context.Context, req policy.Request) (policy.Result, error) {
	if req.Pinned {
		return policy.Result{}, fmt.Errorf("policy call pinned to version %d: only the in-process engine serves a call the version it names (rollout.partial_tokens needs the in-process policy)", req.Version)
	}
	in, err := c.static(ctx)
	if err != nil {
		return policy.Result{}, err
	}
	maxTokens := req.Params.MaxTokens
	if in.MaxContext > 0 {
		room := in.MaxContext - len(req.Prefix)
		if maxTokens == 0 || maxTokens > room {
			maxTokens = room
		}
	}
	var res policy.Result
	switch c.serverKind() {
	case servers.SGLang:
		res, err = c.generateSGLang(ctx, req, maxTokens)
	case servers.LlamaCpp:
		res, err = c.generateLlamaCpp(ctx, req, maxTokens)
	default:
		res, err = c.generateOpenAI(ctx, req, maxTokens)
	}
	if err != nil {
		return policy.Result{}, err
	}
	if err := c.check(res, maxTokens, in.VocabSize); err != nil {
		return policy.Result{}, err
	}
	return res, nil
}

// check refuses a result that cannot be trained on: no tokens although
// some were asked for (every finish, an end of sequence included, writes
// at least the token that ended it; a call stopped at a weight push may
// have sampled none), more than asked for, ids without
// log-probs or outside the vocabulary, log-probs that are not finite and
// <= 0 (a small positive rounding is tolerated).
func (c *Client) check(res policy.Result, maxTokens, vocab int) error {
	who := c.who()
	switch {
	case maxTokens > 0 && len(res.Tokens) == 0 && res.FinishReason != sampling.FinishAbort:
		return fmt.Errorf("%s: the completion has no tokens although max_tokens is %d (finish reason %q); the server returned an empty result", who, maxTokens, res.FinishReason)
	case maxTokens > 0 && len(res.Tokens) > maxTokens:
		return fmt.Errorf("%s: the completion has %d tokens, more than max_tokens %d", who, len(res.Tokens), maxTokens)
	case len(res.LogProbs) != len(res.Tokens):
		return fmt.Errorf("%s: the completion has %d token ids but %d log-probs", who, len(res.Tokens), len(res.LogProbs))
	}
	for i, id := range res.Tokens {
		if id < 0 || (vocab > 0 && int(id) >= vocab) {
			return fmt.Errorf("%s: token %d of the completion is id %d, outside the vocabulary of %d", who, i, id, vocab)
		}
	}
	for i, lp := range res.LogProbs {
		if math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0) || lp > maxLogProb {
			return fmt.Errorf("%s: the log-prob of token %d (id %d) is %v, not a finite number <= 0", who, i, res.Tokens[i], lp)
		}
	}
	return nil
}

// maxLogProb tolerates a log-prob a hair above 0: servers compute them in
// float32 (log of a softmax that rounds to 1 can come out at +1e-7).
const maxLogProb = 1e-4

// finish maps a server's finish reason and stop reason (JSON: null, a
// number or a string) to the Result's.
func finish(who, reason string, stop json.RawMessage, p sampling.Params, res *policy.Result) error {
	switch reason {
	case "length":
		res.FinishReason = sampling.FinishLength
		return nil
	case "abort":
		// Stopped at a weight push (aipo serve with
		// --interrupt-on-reload, vLLM's aborted request).
		res.FinishReason = sampling.FinishAbort
		return nil
	case "stop":
	default:
		return fmt.Errorf("%s: finish reason %q (want stop, length or abort)", who, reason)
	}
	var r any
	if len(stop) > 0 {
		d := json.NewDecoder(bytes.NewReader(stop))
		d.UseNumber()
		d.Decode(&r)
	}
	switch r := r.(type) {
	case nil:
		res.FinishReason = sampling.FinishEOS
	case json.Number:
		res.FinishReason, res.Stop = sampling.FinishStop, r.String()
		// A server may name an end-of-sequence id given as a stop id.
		if id, err := r.Int64(); err == nil && !slices.Contains(p.StopTokenIDs, int32(id)) {
			res.FinishReason, res.Stop = sampling.FinishEOS, ""
		}
	case string:
		res.FinishReason, res.Stop = sampling.FinishStop, r
	default:
		return fmt.Errorf("%s: the stop reason %s is neither a token id nor a string", who, stop)
	}
	return nil
}

// Release drops a session's cache on aipo serve; other servers keep no
// sessions.
func (c *Client) Release(ctx context.Context, session string) {
	if _, err := c.static(ctx); err != nil || session == "" {
		return
	}
	if c.serverKind() != servers.Aipo {
		return
	}
	var out map[string]any
	c.meta(ctx, http.MethodPost, c.root+"/aipo/release", map[string]any{"session": session}, &out)
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
