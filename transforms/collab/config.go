package collab

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/tasks"
)

// Kinds of collaborator implementations (RoleConfig.Kind) that serve
// models: tasks register kinds of their own that answer in this process
// (RegisterInProcessKind; the demo task's builtin-demo).
const (
	KindOpenAI = "openai"
	KindGRPC   = "grpc"
)

// Config configures the collaborators of a run or of `aipo collaborators
// serve`. A role left out is not available: the policy's calls to it are
// answered with NoticeNotEnabled. Roles may share settings through YAML
// anchors and merge keys (<<: *common).
//
//	knowledge:
//	  kind: openai
//	  endpoint: http://127.0.0.1:8000/v1
//	  model: Qwen/Qwen2.5-7B-Instruct
//	  api_key_env: COLLAB_API_KEY
//	  noise: {start: 0, end: 0.5, total_steps: 200}
//	verify: {kind: builtin-demo}
//	reason: {kind: builtin-demo}
type Config struct {
	Verify    *RoleConfig `yaml:"verify,omitempty"`    // the Verify Agent
	Knowledge *RoleConfig `yaml:"knowledge,omitempty"` // the Knowledge Agent
	Reason    *RoleConfig `yaml:"reason,omitempty"`    // the Reasoning Agent
	// Task is the settings of the task whose in-process roles (a task's
	// own kind, as the demo's builtin-demo) answer about it; it must match
	// the run's task. Unset: the task's default.
	Task tasks.Settings `yaml:"demo_task,omitempty"`
	// CacheEntries bounds the per-run answer cache (entries, over all
	// roles); 0 means 65536. Roles turn their caching on or off with
	// RoleConfig.Cache.
	CacheEntries int `yaml:"cache_entries,omitempty"`

	// baseDir resolves relative file names (prompt and key files): the
	// directory of the config file, when it came from one.
	baseDir string
}

// RoleConfig configures one agent.
type RoleConfig struct {
	// Kind is builtin-demo, openai or grpc.
	Kind string `yaml:"kind"`
	// Endpoint is the server: for openai the API base URL
	// ("http://127.0.0.1:8000/v1"; "/chat/completions" is appended unless
	// present), for grpc "host:port" or "grpc://host:port" (plain text) or
	// "grpcs://host:port" (TLS; see TLSCAFile). Roles with the
	// same endpoint share its concurrency limit and circuit breaker.
	Endpoint string `yaml:"endpoint,omitempty"`
	// Model is the model name sent to an openai endpoint.
	Model string `yaml:"model,omitempty"`
	// System and SystemFile give the system prompt template (inline text
	// or a file, relative to the config file); Prompt and PromptFile the
	// user message template. Go text/template syntax with the fields
	// .Query, .Problem, .Context (empty unless Context sends them), .Noisy
	// and .Documents. Empty: the built-in text of the role
	// (transforms/collab/openai/prompts).
	System     string `yaml:"system,omitempty"`
	SystemFile string `yaml:"system_file,omitempty"`
	Prompt     string `yaml:"prompt,omitempty"`
	PromptFile string `yaml:"prompt_file,omitempty"`
	// APIKeyEnv names an environment variable holding the API key (openai)
	// or bearer token (grpc); APIKeyFile names a file holding it (one line;
	// surrounding space trimmed). Set at most one. Keys are never logged
	// nor put in errors.
	APIKeyEnv  string `yaml:"api_key_env,omitempty"`
	APIKeyFile string `yaml:"api_key_file,omitempty"`
	// TLSCAFile is a PEM file (relative to the config file) of the CA that
	// signed the server's certificate, for a TLS endpoint: grpcs://host:port
	// (grpc) or https://... (openai). Empty trusts the system roots.
	TLSCAFile string `yaml:"tls_ca_file,omitempty"`
	// Temperature of an openai role's sampling; 0 (the default) is greedy.
	Temperature float64 `yaml:"temperature,omitempty"`
	// MaxGenerateTokens caps what an openai role's model generates per call
	// (a cost bound; the rollout truncates answers to its own budget);
	// 0 means 256.
	MaxGenerateTokens int `yaml:"max_generate_tokens,omitempty"`
	// Documents is how many ~30-word documents an openai Knowledge Agent
	// writes per query (ZeroSearch writes five); 0 means 1.
	Documents int `yaml:"documents,omitempty"`
	// Noise is the Knowledge Agent's noise probability (knowledge role only;
	// default none). The demo uses {constant: 0.2}.
	Noise *Noise `yaml:"noise,omitempty"`

	// Timeout bounds each attempt; 0 means 30s ("30s", "500ms").
	Timeout time.Duration `yaml:"timeout,omitempty"`
	// MaxConcurrency bounds the calls in flight to the endpoint; 0 means 16.
	// Roles sharing an endpoint share the smallest of their limits.
	// Ignored for builtin-demo.
	MaxConcurrency int `yaml:"max_concurrency,omitempty"`
	// Retries after a retryable failure; unset means 3, 0 disables.
	Retries *int `yaml:"retries,omitempty"`
	// Backoff shapes the wait between retries.
	Backoff Backoff `yaml:"backoff,omitempty"`
	// Breaker is the endpoint's circuit breaker.
	Breaker Breaker `yaml:"breaker,omitempty"`
	// Cache turns the per-run answer cache on or off; unset means on.
	Cache *bool `yaml:"cache,omitempty"`
	// Context is what of the trajectory the agent is sent besides the
	// query (the paper's interaction context I_j): "query" (only what the
	// policy wrote inside the tag), "problem" (and the problem), or
	// "full" (and the policy's text so far). Unset: full for the verify
	// and reason roles, problem for knowledge, query for builtin-demo
	// (whose answers depend on the query alone). Answers are cached per
	// query and the context sent.
	Context string `yaml:"context,omitempty"`
}

// Context modes of RoleConfig.Context.
const (
	ContextQuery   = "query"
	ContextProblem = "problem"
	ContextFull    = "full"
)

// ContextFor is the context mode of the role of agent a, its default
// filled in.
func (r RoleConfig) ContextFor(a Agent) string {
	switch {
	case r.Context != "":
		return r.Context
	case inProcess(r.Kind):
		return ContextQuery
	case a == Knowledge:
		return ContextProblem
	}
	return ContextFull
}

// trimContext drops from q what mode does not send.
func trimContext(q Query, mode string) Query {
	switch mode {
	case ContextQuery:
		q.Problem, q.Context = "", ""
	case ContextProblem:
		q.Context = ""
	}
	return q
}

// Backoff is exponential with full jitter: before retry n the call waits a
// random time in [0, min(max, initial*2^(n-1))].
type Backoff struct {
	Initial time.Duration `yaml:"initial,omitempty"` // 0 means 100ms
	Max     time.Duration `yaml:"max,omitempty"`     // 0 means 5s
}

// Breaker opens after Failures consecutive retryable failures of the
// endpoint and lets one probe through after Cooldown.
type Breaker struct {
	Failures int           `yaml:"failures,omitempty"` // 0 means 5; negative disables the breaker
	Cooldown time.Duration `yaml:"cooldown,omitempty"` // 0 means 10s
}

// Defaults of RoleConfig fields left at zero.
const (
	DefaultTimeout           = 30 * time.Second
	DefaultMaxConcurrency    = 16
	DefaultRetries           = 3
	DefaultBackoffInitial    = 100 * time.Millisecond
	DefaultBackoffMax        = 5 * time.Second
	DefaultBreakerFailures   = 5
	DefaultBreakerCooldown   = 10 * time.Second
	DefaultMaxGenerateTokens = 256
	DefaultCacheEntries      = 65536
)

// Roles returns the configured roles by agent.
func (c Config) Roles() map[Agent]RoleConfig {
	out := map[Agent]RoleConfig{}
	for a, r := range map[Agent]*RoleConfig{Verify: c.Verify, Knowledge: c.Knowledge, Reason: c.Reason} {
		if r != nil {
			out[a] = *r
		}
	}
	return out
}

// LoadConfig reads and validates a YAML config file. Relative file names
// inside it are resolved against its directory.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("collab: reading config: %w", err)
	}
	c, err := ParseConfig(data, path)
	if err != nil {
		return Config{}, err
	}
	c.baseDir = filepath.Dir(path)
	return c, nil
}

// ParseConfig decodes and validates YAML; name labels errors. Unknown
// fields are errors.
func ParseConfig(data []byte, name string) (Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("collab: config %s: %w (fields are described in the collab.Config documentation)", name, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("collab: config %s: %w", name, err)
	}
	return c, nil
}

// WithBaseDir returns c resolving relative file names against dir.
func (c Config) WithBaseDir(dir string) Config { c.baseDir = dir; return c }

// Resolve returns a file name from the config resolved against the
// config's directory.
func (c Config) Resolve(name string) string {
	if name == "" || filepath.IsAbs(name) || c.baseDir == "" {
		return name
	}
	return filepath.Join(c.baseDir, name)
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	roles := c.Roles()
	if len(roles) == 0 {
		return errors.New("no roles configured: set at least one of verify, knowledge, reason")
	}
	if c.CacheEntries < 0 {
		return fmt.Errorf("cache_entries %d must not be negative", c.CacheEntries)
	}
	for _, a := range Agents {
		r, ok := roles[a]
		if !ok {
			continue
		}
		if err := r.validate(a); err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		if c.Task != "" {
			if err := checkTask(r.Kind, c.Task); err != nil {
				return fmt.Errorf("demo_task: %w", err)
			}
		}
	}
	return nil
}

func (r RoleConfig) validate(a Agent) error {
	switch {
	case inProcess(r.Kind):
	case r.Kind == KindOpenAI || r.Kind == KindGRPC:
		if r.Endpoint == "" {
			return fmt.Errorf("kind %s needs an endpoint", r.Kind)
		}
		if r.Kind == KindOpenAI && r.Model == "" {
			return errors.New("kind openai needs a model (the name the server serves)")
		}
	case r.Kind == "":
		return fmt.Errorf("kind is missing (want %s)", strings.Join(kindChoices(), ", "))
	default:
		return fmt.Errorf("unknown kind %q (want %s; a task's own kind needs the task linked into the program)", r.Kind, strings.Join(kindChoices(), ", "))
	}
	if r.APIKeyEnv != "" && r.APIKeyFile != "" {
		return errors.New("set api_key_env or api_key_file, not both")
	}
	if r.TLSCAFile != "" {
		switch {
		case r.Kind == KindGRPC && !strings.HasPrefix(r.Endpoint, "grpcs://"):
			return fmt.Errorf("tls_ca_file is for a TLS endpoint: write the endpoint as grpcs://%s", secure.RedactURI(strings.TrimPrefix(r.Endpoint, "grpc://")))
		case r.Kind == KindOpenAI && !strings.HasPrefix(r.Endpoint, "https://"):
			return errors.New("tls_ca_file is for a TLS endpoint: the endpoint must be an https:// URL")
		case inProcess(r.Kind):
			return errors.New("tls_ca_file applies to kinds grpc and openai only")
		}
	}
	if r.System != "" && r.SystemFile != "" {
		return errors.New("set system or system_file, not both")
	}
	if r.Prompt != "" && r.PromptFile != "" {
		return errors.New("set prompt or prompt_file, not both")
	}
	switch r.Context {
	case "", ContextQuery, ContextProblem, ContextFull:
	default:
		return fmt.Errorf("context %q is unknown (want %s, %s or %s)", r.Context, ContextQuery, ContextProblem, ContextFull)
	}
	if r.Noise != nil {
		if a != Knowledge {
			return errors.New("noise applies to the knowledge role only")
		}
		if err := r.Noise.Validate(); err != nil {
			return err
		}
	}
	switch {
	case r.Timeout < 0:
		return fmt.Errorf("timeout %v must not be negative", r.Timeout)
	case r.MaxConcurrency < 0:
		return fmt.Errorf("max_concurrency %d must not be negative", r.MaxConcurrency)
	case r.Retries != nil && (*r.Retries < 0 || *r.Retries > 20):
		return fmt.Errorf("retries %d must be in 0..20", *r.Retries)
	case r.Backoff.Initial < 0 || r.Backoff.Max < 0:
		return fmt.Errorf("backoff initial %v and max %v must not be negative", r.Backoff.Initial, r.Backoff.Max)
	case r.Breaker.Cooldown < 0:
		return fmt.Errorf("breaker cooldown %v must not be negative", r.Breaker.Cooldown)
	case r.Temperature < 0 || r.Temperature > 2:
		return fmt.Errorf("temperature %g must be in [0,2]", r.Temperature)
	case r.MaxGenerateTokens < 0:
		return fmt.Errorf("max_generate_tokens %d must not be negative", r.MaxGenerateTokens)
	case r.Documents < 0 || r.Documents > 10:
		return fmt.Errorf("documents %d must be in 0..10", r.Documents)
	}
	return nil
}

// WithDefaults returns r with zero fields set to their defaults.
func (r RoleConfig) WithDefaults() RoleConfig {
	if r.Timeout == 0 {
		r.Timeout = DefaultTimeout
	}
	if r.MaxConcurrency == 0 {
		r.MaxConcurrency = DefaultMaxConcurrency
	}
	if r.Retries == nil {
		n := DefaultRetries
		r.Retries = &n
	}
	if r.Backoff.Initial == 0 {
		r.Backoff.Initial = DefaultBackoffInitial
	}
	if r.Backoff.Max == 0 {
		r.Backoff.Max = DefaultBackoffMax
	}
	if r.Breaker.Failures == 0 {
		r.Breaker.Failures = DefaultBreakerFailures
	}
	if r.Breaker.Cooldown == 0 {
		r.Breaker.Cooldown = DefaultBreakerCooldown
	}
	if r.Cache == nil {
		on := true
		r.Cache = &on
	}
	if r.MaxGenerateTokens == 0 {
		r.MaxGenerateTokens = DefaultMaxGenerateTokens
	}
	if r.Documents == 0 {
		r.Documents = 1
	}
	return r
}

// NoiseSchedule returns the role's noise schedule (none when unset).
func (r RoleConfig) NoiseSchedule() Noise {
	if r.Noise == nil {
		return ConstantNoise(0)
	}
	return *r.Noise
}

// Secret reads the role's API key or bearer token from the environment
// variable or file it names; "" when neither is set. Errors name the
// variable or file, never the value.
func (c Config) Secret(r RoleConfig) (string, error) {
	return ReadSecret(r.APIKeyEnv, c.Resolve(r.APIKeyFile))
}

// ReadSecret reads a secret from an environment variable or a file (at most
// one given). Errors name the variable or file, never the value.
func ReadSecret(env, file string) (string, error) {
	switch {
	case env != "" && file != "":
		return "", errors.New("collab: give the secret by environment variable or by file, not both")
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok || strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("collab: environment variable %s (api_key_env) is not set or empty", env)
		}
		return strings.TrimSpace(v), nil
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				return "", fmt.Errorf("collab: reading secret file %s: %w", file, pe.Err)
			}
			return "", fmt.Errorf("collab: reading secret file %s failed", file)
		}
		v := strings.TrimSpace(string(data))
		if v == "" || strings.ContainsAny(v, "\r\n") {
			return "", fmt.Errorf("collab: secret file %s must hold one non-empty line", file)
		}
		return v, nil
	}
	return "", nil
}

// LoadText returns inline text, or the contents of file (resolved against
// the config directory), or "" when both are empty.
func (c Config) LoadText(inline, file string) (string, error) {
	if file == "" {
		return inline, nil
	}
	data, err := os.ReadFile(c.Resolve(file))
	if err != nil {
		return "", fmt.Errorf("collab: reading template: %w", err)
	}
	return string(data), nil
}
