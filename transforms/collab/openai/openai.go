package openai

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
)

//go:embed prompts/*.txt
var prompts embed.FS

// maxBody bounds the response bytes read.
const maxBody = 4 << 20

func init() {
	collab.RegisterKind(collab.KindOpenAI, build)
}

func build(_ context.Context, agent collab.Agent, role collab.RoleConfig, cfg collab.Config, env collab.Env) (collab.Collaborator, error) {
	key, err := cfg.Secret(role)
	if err != nil {
		return nil, err
	}
	sys, err := cfg.LoadText(role.System, role.SystemFile)
	if err != nil {
		return nil, err
	}
	user, err := cfg.LoadText(role.Prompt, role.PromptFile)
	if err != nil {
		return nil, err
	}
	return New(Options{
		Agent: agent, Endpoint: role.Endpoint, Model: role.Model, APIKey: key,
		System: sys, Prompt: user, Temperature: role.Temperature, MaxTokens: role.MaxGenerateTokens,
		Documents: role.Documents, Noise: role.NoiseSchedule(), HTTPClient: env.HTTPClient,
		MaxConns: role.MaxConcurrency, CAFile: cfg.Resolve(role.TLSCAFile),
	})
}

// Options configure a Client.
type Options struct {
	Agent    collab.Agent
	Endpoint string // API base ("http://127.0.0.1:8000/v1") or the full chat completions URL
	Model    string
	APIKey   string // sent as "Authorization: Bearer"; empty sends none
	// System and Prompt are the templates of the system and user messages;
	// empty means the built-in text of the agent.
	System, Prompt string
	Temperature    float64
	MaxTokens      int          // generation cap per call; 0 means 256
	Documents      int          // Knowledge: documents per answer; 0 means 1
	Noise          collab.Noise // Knowledge: noise schedule
	HTTPClient     *http.Client // nil: a client of the package's own
	MaxConns       int          // idle connections kept to the endpoint (own client only)
	// CAFile is a PEM file of the CA that signed an https endpoint's
	// certificate (own client only); empty trusts the system roots.
	CAFile string
}

// Client is an LLM collaborator. Safe for concurrent use.
type Client struct {
	opt          Options
	url          string
	shown        string   // url masked (secure.RedactURI), for messages
	secrets      []string // the API key and the query's secret values, masked in what the server answers
	system, user *template.Template
	http         *http.Client

	promptTokens, completionTokens atomic.Int64
}

// New checks the options and parses the templates.
func New(opt Options) (*Client, error) {
	if !opt.Agent.Valid() {
		return nil, fmt.Errorf("openai: unknown agent %q", opt.Agent)
	}
	u, err := chatURL(opt.Endpoint)
	if err != nil {
		return nil, err
	}
	if opt.Model == "" {
		return nil, errors.New("openai: model is empty; set the model name the server serves")
	}
	if opt.MaxTokens <= 0 {
		opt.MaxTokens = collab.DefaultMaxGenerateTokens
	}
	if opt.Documents <= 0 {
		opt.Documents = 1
	}
	c := &Client{opt: opt, url: u, shown: secure.RedactURI(u), secrets: secure.QuerySecrets(u), http: opt.HTTPClient}
	if opt.APIKey != "" {
		c.secrets = append(c.secrets, opt.APIKey)
	}
	// The longest first, so that one holding another is masked whole.
	slices.SortFunc(c.secrets, func(a, b string) int { return len(b) - len(a) })
	if c.system, err = parseTemplate(opt.Agent, "system", opt.System); err != nil {
		return nil, err
	}
	if c.user, err = parseTemplate(opt.Agent, "user", opt.Prompt); err != nil {
		return nil, err
	}
	if opt.CAFile != "" && c.http != nil {
		return nil, errors.New("openai: a CA file applies to the package's own HTTP client, not to a given one")
	}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = max(opt.MaxConns, 2)
		if opt.CAFile != "" {
			if t.TLSClientConfig, err = secure.ClientTLS(opt.CAFile); err != nil {
				return nil, fmt.Errorf("openai: %w", err)
			}
		}
		c.http = &http.Client{Transport: t}
	}
	return c, nil
}

func chatURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("openai: endpoint %q must be an http(s) URL such as http://127.0.0.1:8000/v1", secure.RedactURI(endpoint))
	}
	if u.User != nil {
		return "", fmt.Errorf("openai: endpoint must not hold credentials; use api_key_env or api_key_file")
	}
	if strings.HasSuffix(u.Path, "/chat/completions") {
		return u.String(), nil
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/chat/completions"
	return u.String(), nil
}

// DefaultTemplate returns the built-in template text of an agent's system
// or user message.
func DefaultTemplate(agent collab.Agent, part string) (string, error) {
	b, err := prompts.ReadFile("prompts/" + string(agent) + "." + part + ".txt")
	if err != nil {
		return "", fmt.Errorf("openai: no built-in %s template for %q", part, agent)
	}
	return string(b), nil
}

func parseTemplate(agent collab.Agent, part, text string) (*template.Template, error) {
	if text == "" {
		var err error
		if text, err = DefaultTemplate(agent, part); err != nil {
			return nil, err
		}
	}
	t, err := template.New(string(agent) + "." + part).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("openai: %s %s template: %w", agent, part, err)
	}
	// Render once with sample data so that a template naming a field that
	// does not exist fails now, not on the first call.
	if err := t.Execute(io.Discard, templateData{Query: "q", Problem: "p", Context: "c", Documents: 1}); err != nil {
		return nil, fmt.Errorf("openai: %s %s template: %w (fields: .Query, .Problem, .Context, .Noisy, .Documents)", agent, part, err)
	}
	return t, nil
}

// templateData is what the templates see.
type templateData struct {
	Query     string
	Problem   string // empty unless the role's context sends it
	Context   string // the policy's text before the call, likewise
	Noisy     bool
	Documents int
}

// Deterministic reports whether answers depend on the query text only:
// greedy sampling and no noise.
func (c *Client) Deterministic() bool {
	return c.opt.Temperature == 0 && (c.opt.Agent != collab.Knowledge || c.opt.Noise.IsZero())
}

// Usage returns the prompt and completion tokens the server reported so far.
func (c *Client) Usage() (prompt, completion int64) {
	return c.promptTokens.Load(), c.completionTokens.Load()
}

// Close drops idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model       string    `json:"model"`
	Messages    []message `json:"messages"`
	Temperature float64   `json:"temperature"`
	MaxTokens   int       `json:"max_tokens"`
	Seed        int64     `json:"seed"`
	Stream      bool      `json:"stream"`
}

// Answer asks the model.
func (c *Client) Answer(ctx context.Context, q collab.Query) (collab.Answer, error) {
	data := templateData{Query: q.Text, Problem: q.Problem, Context: q.Context, Documents: c.opt.Documents}
	if c.opt.Agent == collab.Knowledge {
		data.Noisy = c.opt.Noise.Noisy(q)
	}
	var sys, user bytes.Buffer
	if err := c.system.Execute(&sys, data); err != nil {
		return collab.Answer{}, guard.Errorf(guard.KindInternal, "openai: system template: %w", err)
	}
	if err := c.user.Execute(&user, data); err != nil {
		return collab.Answer{}, guard.Errorf(guard.KindInternal, "openai: user template: %w", err)
	}
	body, err := json.Marshal(chatRequest{
		Model:       c.opt.Model,
		Messages:    []message{{"system", strings.TrimSpace(sys.String())}, {"user", strings.TrimSpace(user.String())}},
		Temperature: c.opt.Temperature, MaxTokens: c.opt.MaxTokens, Seed: int64(q.Seed >> 1),
	})
	if err != nil {
		return collab.Answer{}, guard.Errorf(guard.KindInternal, "openai: encoding request: %w", err)
	}
	text, err := c.post(ctx, body)
	if err != nil {
		return collab.Answer{}, err
	}
	return collab.Answer{Text: text, Noisy: data.Noisy, Status: schemas.StatusOK}, nil
}

func (c *Client) post(ctx context.Context, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return "", guard.Errorf(guard.KindInternal, "openai: %w", secure.RedactError(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.opt.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opt.APIKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", c.transportError(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return "", c.transportError(err)
	}
	if len(raw) > maxBody {
		return "", guard.Errorf(guard.KindMalformed, "openai: response from %s larger than %d bytes", c.shown, maxBody)
	}
	if resp.StatusCode != http.StatusOK {
		return "", &guard.Error{
			Kind: guard.HTTPKind(resp.StatusCode), Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
			Err: fmt.Errorf("openai: %s answered %s: %s", c.shown, resp.Status, c.redact(errorMessage(raw))),
		}
	}
	text, prompt, completion, err := parseChat(raw)
	c.promptTokens.Add(prompt)
	c.completionTokens.Add(completion)
	if err != nil {
		var ge *guard.Error
		if errors.As(err, &ge) {
			ge.Err = fmt.Errorf("openai: %s: %s", c.shown, c.redact(ge.Err.Error()))
			return "", ge
		}
		return "", err
	}
	// A server that quotes the request's headers or URL back (a debugging
	// proxy, an echo endpoint) must not put a secret into the trajectory.
	return c.mask(text), nil
}

// transportError classifies a failure to send or read, keeping the key
// out of the message.
func (c *Client) transportError(err error) error {
	e := guard.Classify(err)
	secure.RedactError(err)
	return &guard.Error{Kind: e.Kind, Err: fmt.Errorf("openai: %s: %s: %w", c.shown, c.redact(err.Error()), errorsOnly(err))}
}

// errorsOnly keeps err's chain for errors.Is (context, syscall) while the
// message is written separately.
func errorsOnly(err error) error { return quiet{err} }

type quiet struct{ err error }

func (q quiet) Error() string { return "request failed" }
func (q quiet) Unwrap() error { return q.err }

// mask replaces every secret of the client in s.
func (c *Client) mask(s string) string {
	for _, v := range c.secrets {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// redact masks s and shortens it for a message.
func (c *Client) redact(s string) string {
	s = c.mask(s)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// retryAfter parses a Retry-After header given in seconds (dates are
// ignored).
func retryAfter(h string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}
