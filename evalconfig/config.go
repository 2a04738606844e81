package evalconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/yamlset"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/aipo-rl/aipo/transforms/sandbox"
	"gopkg.in/yaml.v3"
)

// Config describes one evaluation run: the YAML file of aipo eval (see
// configs/eval*.yaml), which pipelines/eval runs.
type Config struct {
	// Run names the evaluation in every record ("eval").
	Run string `yaml:"run" json:"run"`
	// Out is the output directory, local or gs:// (required).
	Out string `yaml:"out" json:"out"`
	// DataDir is where presets find their files, at the paths of
	// data/benchmarks (default: the copy bundled in the binary, written
	// out once under the user's cache directory).
	DataDir string `yaml:"data_dir" json:"data_dir"`
	Policy  Policy `yaml:"policy" json:"policy"`
	Chat    Chat   `yaml:"chat" json:"chat"`
	// Sampling is the default for every benchmark.
	Sampling Sampling `yaml:"sampling" json:"sampling"`
	// PassK lists the k of Pass@k ([1, 4, 16]; ks above a benchmark's n
	// are left out).
	PassK []int `yaml:"pass_k" json:"pass_k"`
	// MajK lists the k of maj@k ([4, 16]).
	MajK []int `yaml:"maj_k" json:"maj_k"`
	// ChunkSize is the problems per committed chunk (16).
	ChunkSize int `yaml:"chunk_size" json:"chunk_size"`
	// Concurrency bounds the generate requests in flight per chunk (64).
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// MaxChunks stops a run after this many new chunks (0: all); the next
	// run goes on from there.
	MaxChunks int `yaml:"max_chunks" json:"max_chunks"`
	// Retries is how often a failed generate request is retried (2).
	Retries int            `yaml:"retries" json:"retries"`
	Sandbox sandbox.Config `yaml:"sandbox" json:"sandbox"`
	// Benchmarks to evaluate, in report column order.
	Benchmarks []Benchmark `yaml:"benchmarks" json:"benchmarks"`
}

// Policy names the policy under evaluation.
type Policy struct {
	// URI is any policy.Open endpoint: inproc:///path/to/checkpoint,
	// grpc://host:port, http://host:port/v1?model=NAME.
	URI string `yaml:"uri" json:"uri"`
	// Label is the row name in reports (default: the URI).
	Label string `yaml:"label" json:"label"`
}

// Chat says how a rendered prompt becomes token ids.
type Chat struct {
	// Tokenizer is a tokenizer.json file, a directory holding one, or
	// "builtin". With it, the prompt is rendered in the vocabulary's chat
	// format (learner/tokenizer ApplyChat) as a user turn. Empty: the
	// checkpoint directory of an inproc:///path URI when it holds a
	// tokenizer.json, otherwise the raw template below, tokenised by the
	// policy.
	Tokenizer string `yaml:"tokenizer" json:"tokenizer"`
	// System is an optional system message.
	System string `yaml:"system" json:"system"`
	// Raw forces the raw template even when a tokenizer is available.
	Raw bool `yaml:"raw" json:"raw"`
	// RawTemplate is a text/template over .System and .User (also named
	// .Problem, so that a run's rollout.prompt_template renders its
	// benchmarks as its rollouts), tokenised by the policy with special
	// tokens on (default: ChatML).
	RawTemplate string `yaml:"raw_template" json:"raw_template"`
	// DisableThinking adds Qwen3's empty think block.
	DisableThinking bool `yaml:"disable_thinking" json:"disable_thinking"`
}

// Sampling controls generation: the responses per problem and the
// sampling parameters of every request. Its YAML keys are samples, greedy
// and those of sampling.Params (temperature, top_p, top_k, stop) with two
// of its per-request fields, which here configure every request:
// max_tokens, the response budget, and seed, the base of the per-sample
// seeds. A training run's eval section gives the sampling of its
// benchmark evaluations in one (runconfig's EvalSampling).
type Sampling struct {
	// Samples is n, the responses per problem (default: the benchmark's
	// preset, 16 for AIME and 4 otherwise, as in the paper).
	Samples int `json:"samples"`
	// Greedy adds one greedy response per problem (temperature 0, sample
	// index -1 in the records) to the n samples, scored apart from them:
	// the report's greedy accuracy and the share of greedy responses that
	// call a collaborator. Off by default.
	Greedy bool `json:"greedy"`
	// Params: Temperature (1.0 when the key is left out, as Parse
	// reads it; 0 is greedy), TopP (1.0), TopK (0, off), MaxTokens (the
	// response budget, 16384), Seed (the base of the per-sample seeds) and
	// StopStrings (the key stop: strings that end a response).
	sampling.Params
}

// samplingKey is a key of a Sampling in YAML and JSON with its field.
type samplingKey struct {
	key   string
	field any
}

// keys are the YAML and JSON keys of a Sampling, in the order its JSON
// writes them, each with its field.
func (s *Sampling) keys() []samplingKey {
	return []samplingKey{{"samples", &s.Samples}, {"temperature", &s.Temperature}, {"top_p", &s.TopP}, {"top_k", &s.TopK},
		{"max_tokens", &s.MaxTokens}, {"seed", &s.Seed}, {"stop", &s.StopStrings}, {"greedy", &s.Greedy}}
}

// YAMLFields maps each YAML key to its field (internal/yamlset.Fielder):
// --set sampling.temperature=0.6 is checked as the key in the file.
func (s *Sampling) YAMLFields() map[string]any {
	out := map[string]any{}
	for _, f := range s.keys() {
		out[f.key] = f.field
	}
	return out
}

// UnmarshalYAML reads the keys of keys; a key left out keeps the
// field's value (Parse starts from the default temperature), an
// unknown key is an error that names it.
func (s *Sampling) UnmarshalYAML(n *yaml.Node) error {
	keys := s.keys()
	names := make([]string, len(keys))
	for i, f := range keys {
		names[i] = f.key
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return nil
	case n.Kind != yaml.MappingNode:
		return fmt.Errorf("line %d: sampling must be a mapping of %s", n.Line, strings.Join(names, ", "))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		j := slices.IndexFunc(keys, func(f samplingKey) bool { return f.key == k.Value })
		if j < 0 {
			return fmt.Errorf("line %d: field %s not found in sampling (its keys: %s)", k.Line, k.Value, strings.Join(names, ", "))
		}
		if err := v.Decode(keys[j].field); err != nil {
			return fmt.Errorf("sampling.%s: %w", k.Value, err)
		}
	}
	return nil
}

// MarshalJSON writes the keys of keys in their order, stop as null when
// it holds none and greedy only when it is on: the layout of reports and
// of the settings a benchmark's fingerprint hashes, so that runs of
// earlier builds resume.
func (s Sampling) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, f := range s.keys() {
		if f.key == "greedy" && !s.Greedy {
			continue
		}
		v, err := json.Marshal(f.field)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(append(b, '"'), f.key...), '"', ':'), v...)
	}
	return append(b, '}'), nil
}

// Defaults of the paper (section 4, B.6).
const (
	DefaultTemperature = 1.0
	DefaultTopP        = 1.0
	DefaultMaxTokens   = 16384
	DefaultChunkSize   = 16
	DefaultConcurrency = 64
)

// DefaultRawTemplate is ChatML, the format of Qwen models.
const DefaultRawTemplate = "{{if .System}}<|im_start|>system\n{{.System}}<|im_end|>\n{{end}}<|im_start|>user\n{{.User}}<|im_end|>\n<|im_start|>assistant\n"

// Load reads a YAML config (local or gs://) with sets applied (see
// Parse). Unknown keys are errors.
func Load(ctx context.Context, path string, sets ...yamlset.Set) (Config, error) {
	b, err := storage.ReadFile(ctx, path)
	if err != nil {
		return Config{}, fmt.Errorf("eval config: %w", err)
	}
	return Parse(b, path, sets...)
}

// Parse parses YAML; name is used in errors. sets (the command
// line's --set, see internal/yamlset) are applied to the YAML before it is
// decoded, so that each is decoded as the key written in the file would
// be.
func Parse(b []byte, name string, sets ...yamlset.Set) (Config, error) {
	withSets, _, err := yamlset.ApplyBytes(b, reflect.TypeFor[Config](), sets)
	if err != nil {
		return Config{}, fmt.Errorf("eval config %s: %w (see configs/eval.yaml for the keys)", name, err)
	}
	c, err := decodeConfig(withSets)
	if err != nil && len(sets) > 0 {
		// A mistake of the file itself is reported at the file's own line
		// numbers, which the document written back with the sets lacks.
		if _, ferr := decodeConfig(b); ferr != nil {
			return Config{}, fmt.Errorf("eval config %s: %w", name, ferr)
		}
		return Config{}, fmt.Errorf("eval config %s with %s: %w", name, yamlset.Describe(sets), err)
	}
	if err != nil {
		return Config{}, fmt.Errorf("eval config %s: %w", name, err)
	}
	return c, nil
}

// decodeConfig decodes YAML strictly onto the defaults Parse starts
// from.
func decodeConfig(b []byte) (Config, error) {
	c := Config{Sampling: Sampling{Params: sampling.Params{Temperature: DefaultTemperature}}}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// WithDefaults fills zero fields: what a run of c uses.
func (c Config) WithDefaults() Config {
	if c.Run == "" {
		c.Run = "eval"
	}
	if c.Policy.Label == "" {
		c.Policy.Label = secure.RedactURI(c.Policy.URI)
	}
	if c.Sampling.TopP == 0 {
		c.Sampling.TopP = DefaultTopP
	}
	if c.Sampling.MaxTokens == 0 {
		c.Sampling.MaxTokens = DefaultMaxTokens
	}
	if len(c.PassK) == 0 {
		c.PassK = []int{1, 4, 16}
	}
	if len(c.MajK) == 0 {
		c.MajK = []int{4, 16}
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Retries == 0 {
		c.Retries = 2
	}
	if c.Chat.RawTemplate == "" {
		c.Chat.RawTemplate = DefaultRawTemplate
	}
	return c
}

// Validate checks the config and names what is wrong and how to fix it.
func (c Config) Validate() error {
	if c.Out == "" {
		return fmt.Errorf("eval config: out is empty (the output directory, local or gs://)")
	}
	if c.Policy.URI == "" {
		return fmt.Errorf("eval config: policy.uri is empty (inproc:///path/to/checkpoint, grpc://host:port or http://host:port/v1?model=NAME)")
	}
	s := c.Sampling
	if s.Samples < 0 || s.MaxTokens < 0 || s.TopK < 0 {
		return fmt.Errorf("eval config: sampling samples %d, max_tokens %d and top_k %d must not be negative", s.Samples, s.MaxTokens, s.TopK)
	}
	if s.Temperature < 0 {
		return fmt.Errorf("eval config: sampling.temperature %v must be >= 0", s.Temperature)
	}
	if s.TopP < 0 || s.TopP > 1 {
		return fmt.Errorf("eval config: sampling.top_p %v must lie in (0, 1]", s.TopP)
	}
	if c.ChunkSize < 0 || c.Concurrency < 0 || c.MaxChunks < 0 || c.Retries < 0 {
		return fmt.Errorf("eval config: chunk_size, concurrency, max_chunks and retries must not be negative")
	}
	for _, k := range append(append([]int(nil), c.PassK...), c.MajK...) {
		if k < 1 {
			return fmt.Errorf("eval config: pass_k and maj_k values must be at least 1, got %d", k)
		}
	}
	if len(c.Benchmarks) == 0 {
		return fmt.Errorf("eval config: no benchmarks (add e.g. `benchmarks: [{preset: math500}]`; presets: %s)", strings.Join(PresetNames(), ", "))
	}
	seen := map[string]bool{}
	for i, b := range c.Benchmarks {
		name := b.key()
		if name == "" {
			return fmt.Errorf("eval config: benchmarks[%d] has neither name nor preset", i)
		}
		if strings.ContainsAny(name, "/\\ ") {
			return fmt.Errorf("eval config: benchmark name %q must not contain slashes or spaces", name)
		}
		if seen[name] {
			return fmt.Errorf("eval config: benchmark %q listed twice (give the second a different name)", name)
		}
		seen[name] = true
		if b.Samples < 0 || b.Limit < 0 {
			return fmt.Errorf("eval config: benchmark %s: samples and limit must not be negative", name)
		}
		if b.Preset != "" {
			if _, ok := Presets[b.Preset]; !ok {
				return fmt.Errorf("eval config: benchmark %s: preset %q unknown (known: %s)", name, b.Preset, strings.Join(PresetNames(), ", "))
			}
		}
	}
	return nil
}

// Benchmark is one benchmark of a run: a preset, a file with its mapping,
// or a preset with some fields overridden.
type Benchmark struct {
	// Name is the report column and directory name (default: the preset).
	Name   string `yaml:"name" json:"name"`
	Preset string `yaml:"preset" json:"preset"`
	// Path of the file (default: the preset's file under data_dir).
	Path   string              `yaml:"path" json:"path"`
	Format promptfile.Format   `yaml:"format" json:"format"`
	Fields promptfile.FieldMap `yaml:"fields" json:"fields"`
	// Verifier is "mbpp", "humaneval" (code run in the sandbox) or a
	// transforms/verify data source ("math", "gsm8k", "mc", "integer", ...).
	Verifier string `yaml:"verifier" json:"verifier"`
	// Template is a built-in template name (math, mbpp, humaneval, plain)
	// or a text/template over .Problem, .ID, .Tests and .Extra.
	Template string `yaml:"template" json:"template"`
	// Samples overrides sampling.samples for this benchmark.
	Samples int `yaml:"samples" json:"samples"`
	// MaxTokens overrides sampling.max_tokens for this benchmark.
	MaxTokens int `yaml:"max_tokens" json:"max_tokens"`
	// Limit keeps the first Limit problems (0: all).
	Limit int `yaml:"limit" json:"limit"`
	// Breakdown names source fields (kept in the prompt's extra fields)
	// whose values get their own rows in the report, e.g. [subject, level].
	Breakdown []string `yaml:"breakdown" json:"breakdown"`
}

func (b Benchmark) key() string {
	if b.Name != "" {
		return b.Name
	}
	return b.Preset
}
