package runconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/yamlset"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/transforms/interact"
)

// Default returns the configuration with every default filled in, except
// what depends on other fields (see Fill) and the required run.dir. Its
// algorithm is the grpo preset (see PresetFor).
func Default() Config {
	ic := interact.Default()
	c := Config{
		Run: Run{Steps: DefaultSteps},
		Policy: Policy{
			Params:            ic.Params,
			MaxResponseTokens: ic.MaxResponseTokens,
			Retries:           ic.PolicyRetries,
			BackoffInitial:    ic.PolicyBackoffInitial,
			BackoffMax:        ic.PolicyBackoffMax,
			Timeout:           ic.PolicyTimeout,
		},
		Rollout: Rollout{
			GroupSize:         DefaultGroupSize,
			MaxInteractions:   ic.MaxInteractions,
			OpenerBy:          ic.OpenerBy,
			TemplateTokens:    TemplateUntrained,
			AnswerTokenBudget: ic.AnswerTokenBudget,
			MaxInFlight:       DefaultMaxInFlight,
			LimitNotice:       ic.LimitNotice,
		},
		Learner: Learner{
			Loss:             loss.DefaultConfig(),
			Optim:            optim.DefaultConfig(),
			MicroBatchTokens: DefaultMicroBatchTokens,
			PPOEpochs:        1,
			MiniBatches:      1,
			Backend:          BackendCPU,
			Precision:        PrecisionFP32,
			Objective:        ObjectiveRL,

			ActivationCheckpointing: trainer.CheckpointingAuto,
			Zero:                    1,
			Deterministic:           true,
		},
		Eval: Eval{
			Every:       DefaultEvalEvery,
			Samples:     DefaultEvalSamples,
			Temperature: 1,
		},
		Checkpoint: Checkpoint{SaveEvery: DefaultSaveEvery, KeepLast: DefaultKeepLast, MaxShardSize: DefaultMaxShardSize},
	}
	if err := c.ApplyBase(loss.BaseGRPO); err != nil {
		panic(err) // the grpo preset always exists
	}
	return c
}

// fieldsHint ends the errors of unknown fields and values.
const fieldsHint = "(every field is listed in the runconfig package documentation; see configs/*.yaml for examples)"

// Parse decodes a YAML configuration onto Default(), so that fields left
// out keep their defaults, rejects unknown fields, fills the derived
// defaults (Fill) and validates the result. name labels errors (the file
// name); relative input files are resolved against baseDir ("" leaves them
// as written). sets (the command line's --set, see internal/yamlset) are
// applied to the file's YAML before it is decoded, so that each goes
// through the decoder and Validate as the key written in the file would.
func Parse(data []byte, name, baseDir string, sets ...yamlset.Set) (Config, error) {
	file := data
	data, doc, err := yamlset.ApplyBytes(data, reflect.TypeFor[Config](), sets)
	if err != nil {
		return Config{}, fmt.Errorf("runconfig: %s: %w %s", name, err, fieldsHint)
	}
	c, err := decode(data, doc)
	if err != nil && len(sets) > 0 {
		// A mistake of the file itself is reported at the file's own line
		// numbers, which the document written back with the sets lacks.
		if _, ferr := decode(file, nil); ferr != nil {
			err = ferr
		}
	}
	if len(sets) > 0 {
		name += " with " + yamlset.Describe(sets)
	}
	if err != nil {
		return Config{}, fmt.Errorf("runconfig: %s: %w", name, err)
	}
	c.baseDir = baseDir
	c.resolvePaths()
	c.Fill()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("runconfig: %s: %w", name, err)
	}
	return c, nil
}

// decode decodes data strictly onto Default() and the preset its
// learner.loss.base names. Unknown keys are named by their dotted path and
// line in doc (data's node tree; nil: data is parsed again for it).
func decode(data []byte, doc *yaml.Node) (Config, error) {
	c := Default()
	// learner.loss.base chooses the defaults of every algorithm field; the
	// fields the file writes then override them.
	if base := peekBase(data); base != "" {
		if err := c.ApplyBase(base); err != nil {
			return Config{}, err
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		// Unknown keys are named by their dotted path, with the field meant.
		if doc == nil {
			doc = &yaml.Node{}
			if yaml.Unmarshal(data, doc) != nil {
				doc = nil
			}
		}
		if doc != nil {
			if unknown := unknownFields(doc, reflect.TypeOf(c)); len(unknown) > 0 {
				parts := make([]string, len(unknown))
				for i, u := range unknown {
					parts[i] = u.String()
				}
				return Config{}, fmt.Errorf("%s %s", strings.Join(parts, "; "), fieldsHint)
			}
		}
		return Config{}, fmt.Errorf("%w %s", err, fieldsHint)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("the file holds more than one YAML document; put the whole run in one")
	}
	return c, nil
}

// Load reads and parses the configuration file at p (local or gs://),
// with sets applied (see Parse). Relative input files inside a local file
// are resolved against its directory.
func Load(ctx context.Context, p string, sets ...yamlset.Set) (Config, error) {
	data, err := storage.ReadFile(ctx, p)
	if err != nil {
		return Config{}, fmt.Errorf("runconfig: reading %s: %w", p, err)
	}
	base := ""
	if !storage.IsRemote(p) {
		if abs, err := filepath.Abs(filepath.Dir(p)); err == nil {
			base = abs
		}
	}
	return Parse(data, p, base, sets...)
}

// BaseDir is the directory relative input files were resolved against.
func (c Config) BaseDir() string { return c.baseDir }

func (c *Config) resolve(name string) string {
	if name == "" || c.baseDir == "" || storage.IsRemote(name) || filepath.IsAbs(name) || strings.Contains(name, "://") {
		return name
	}
	return filepath.Join(c.baseDir, name)
}

// resolvePaths makes relative input file names absolute against baseDir.
func (c *Config) resolvePaths() {
	for i := range c.Data.Sources {
		c.Data.Sources[i].Path = c.resolve(c.Data.Sources[i].Path)
	}
	for i := range c.Eval.Benchmarks {
		c.Eval.Benchmarks[i].Path = c.resolve(c.Eval.Benchmarks[i].Path)
	}
	c.Rollout.SystemPromptFile = c.resolve(c.Rollout.SystemPromptFile)
	if c.Learner.LoRA != nil {
		c.Learner.LoRA.Adapter = c.resolve(c.Learner.LoRA.Adapter)
	}
	if c.Rollout.ChatTemplate != ChatTemplateNone {
		c.Rollout.ChatTemplate = c.resolve(c.Rollout.ChatTemplate)
	}
	if c.baseDir != "" {
		c.Collaborators = c.Collaborators.WithBaseDir(c.baseDir)
	}
}

// Fill sets the defaults that depend on other fields: run.name from
// run.dir, the data section's shorthand written out as a source
// (DemoShorthand), the sources' own defaults (the demo's task and split),
// what the sources' kind gives a run that leaves it out (promptsource.Defaults:
// data.batch_size, 256 for files and 32 for the demo; the collaborators
// when none are configured, for the demo all three built in with the
// Knowledge Agent wrong 20% of the time, and the task built-in agents
// answer about; eval.splits), data.dead_letter_dir,
// eval.max_response_tokens, and the budget of advantage.overlong when it
// is on and left at 0 (policy.max_response_tokens, a fifth of it as the
// penalty zone). It is idempotent.
func (c *Config) Fill() {
	if c.Reward.Strict == nil {
		strict := true
		c.Reward.Strict = &strict
	}
	if c.Run.Name == "" && c.Run.Dir != "" {
		c.Run.Name = path.Base(strings.TrimRight(filepath.ToSlash(c.Run.Dir), "/"))
	}
	c.Data.fillSources()
	def := c.Data.Sources.Defaults()
	if c.Data.BatchSize == 0 {
		c.Data.BatchSize = def.BatchSize
	}
	if c.Data.DeadLetterDir == "" && c.Run.Dir != "" {
		c.Data.DeadLetterDir = rundir.DeadLetters(c.Run.Dir)
	}
	if len(c.Collaborators.Roles()) == 0 && len(def.Collaborators.Roles()) > 0 {
		base := c.baseDir
		c.Collaborators = def.Collaborators
		if base != "" {
			c.Collaborators = c.Collaborators.WithBaseDir(base)
		}
	}
	if c.Collaborators.Task == "" && def.Collaborators.Task != "" {
		c.Collaborators.Task = def.Collaborators.Task
	}
	if len(c.Eval.Splits) == 0 {
		c.Eval.Splits = def.EvalSplits
	}
	if c.Eval.MaxResponseTokens == 0 {
		c.Eval.MaxResponseTokens = c.Policy.MaxResponseTokens
	}
	c.fillOverlong()
	if c.Learner.LoRA != nil {
		c.Learner.LoRA.fill()
	}
	if c.Rollout.Guidance.On() && c.Rollout.Guidance.Traces == 0 {
		c.Rollout.Guidance.Traces = 1
	}
}

// Hash is the sha256 (hex) of the configuration written back as YAML: the
// same settings give the same hash.
// The policy endpoint is left out: where the policy is served (aipo
// train's own engine on each step's checkpoint, or servers that may move)
// does not change the run.
func (c Config) Hash() string {
	c.Policy.Endpoint = ""
	b, err := yaml.Marshal(c)
	if err != nil {
		return "unhashable: " + err.Error()
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// YAML writes the configuration (defaults filled) as YAML.
func (c Config) YAML() ([]byte, error) { return yaml.Marshal(c) }

// Interact returns the interaction protocol's configuration.
func (c Config) Interact() interact.Config {
	ic := interact.Default()
	ic.MaxInteractions = c.Rollout.MaxInteractions
	ic.Unanswered = c.Rollout.Unanswered
	ic.OpenerBy = c.Rollout.OpenerBy
	ic.AnswerTokenBudget = c.Rollout.AnswerTokenBudget
	ic.MaxResponseTokens = c.Policy.MaxResponseTokens
	ic.Params = c.Policy.Params
	ic.StopStrings = append([]string(nil), c.Policy.StopStrings...)
	ic.LimitNotice = c.Rollout.LimitNotice
	ic.PolicyRetries = c.Policy.Retries
	ic.PolicyBackoffInitial, ic.PolicyBackoffMax = c.Policy.BackoffInitial, c.Policy.BackoffMax
	ic.PolicyTimeout = c.Policy.Timeout
	return ic
}

// SystemPrompt returns the system prompt template: the inline text, the
// file's contents, or "" for the built-in one.
func (c Config) SystemPrompt(ctx context.Context) (string, error) {
	if c.Rollout.SystemPromptFile == "" {
		return c.Rollout.SystemPrompt, nil
	}
	b, err := storage.ReadFile(ctx, c.Rollout.SystemPromptFile)
	if err != nil {
		return "", fmt.Errorf("runconfig: rollout.system_prompt_file: %w", err)
	}
	return string(b), nil
}

// DeadLetterPath is the dead-letter file of step k.
func (c Config) DeadLetterPath(k int64) string {
	return rundir.DeadLetter(c.Data.DeadLetterDir, k)
}
