package promptsource

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
)

// Kinds of prompt source (Config.Kind).
const (
	// KindFile reads a prompt file: the kind of an entry that names none.
	KindFile = "file"
)

// Config is one entry of a run's data.sources: a kind of prompt source
// and its settings. The settings of every kind share the entry; each kind
// refuses the others'.
//
//	sources:
//	  - {path: train.jsonl, data_source: math}   # kind file (the default)
//	  - {kind: demo, split: all}                  # a task's kind (tasks/demo)
type Config struct {
	// Kind is the kind of source, a name registered with RegisterKind:
	// file (empty: the default) or a task's (demo, countdown).
	Kind string `yaml:"kind,omitempty"`
	// Source is a file source's file and field mapping (path, format,
	// preset, fields, data_source; see promptfile.Source).
	promptfile.Source `yaml:",inline"`
	// Task is a task's settings, which its kind decodes and checks (the
	// demo's: seed, num_entities, ...); unset: the task's default.
	Task tasks.Settings `yaml:"task,omitempty"`
	// Split is the part of a task a source draws from (the demo's all,
	// seen or unseen); its kind names the splits and the default.
	Split string `yaml:"split,omitempty"`
}

// KindName is the entry's kind, KindFile when it names none.
func (c Config) KindName() string {
	if c.Kind == "" {
		return KindFile
	}
	return c.Kind
}

// List is a run's data.sources. A run draws its prompts from sources of
// one kind, which answers for all of them (see Kind).
type List []Config

// Kind is the kind of every entry, looked up in the registry. It fails
// when there is no entry, a kind is not registered, or the entries are of
// more than one kind.
func (ss List) Kind() (Kind, error) {
	if len(ss) == 0 {
		return nil, fmt.Errorf("data.sources is empty: list prompt files (path, preset or fields, data_source), or a task ({kind: demo}; known kinds: %s)", strings.Join(KindNames(), ", "))
	}
	name := ss[0].KindName()
	for i, s := range ss {
		if s.KindName() != name {
			return nil, fmt.Errorf("data.sources[%d]: kind %s after kind %s (data.sources[0]): a run draws its prompts from sources of one kind", i, s.KindName(), name)
		}
	}
	k, ok := lookupKind(name)
	if !ok {
		return nil, fmt.Errorf("data.sources[0].kind: %q is unknown: use %s", ss[0].Kind, strings.Join(KindNames(), " or "))
	}
	return k, nil
}

// Fill sets the defaults of the entries (their kind's Fill); entries whose
// kind is unknown are left as they are, for Check to report.
func (ss List) Fill() {
	if k, err := ss.Kind(); err == nil {
		k.Fill(ss)
	}
}

// Check reports the first invalid entry, naming it by its path in the run
// configuration (data.sources[i].field).
func (ss List) Check() error {
	k, err := ss.Kind()
	if err != nil {
		return err
	}
	return k.Check(ss)
}

// Defaults are the run settings the sources' kind gives a run that leaves
// them out; the zero Defaults when Kind fails.
func (ss List) Defaults() Defaults {
	k, err := ss.Kind()
	if err != nil {
		return Defaults{}
	}
	return k.Defaults(ss)
}

// Label names the sources in a step's manifest (its "data" meta).
func (ss List) Label() string {
	k, err := ss.Kind()
	if err != nil {
		return ""
	}
	return k.Label(ss)
}

// A Kind is a kind of prompt source: what its data.sources entries hold
// and the defaults a run drawing from them takes. Its methods get every
// entry of the run's data.sources, all of the kind. How a step draws its
// prompts from them is the rollout's (transforms/prompts' RegisterDraw).
type Kind interface {
	// Fill sets the defaults of the entries in place; it is idempotent.
	Fill(ss List)
	// Check reports the first invalid entry (after Fill), naming the
	// field at fault as data.sources[i].field and what to write instead.
	Check(ss List) error
	// Defaults are the run settings the entries imply.
	Defaults(ss List) Defaults
	// Label names the entries in a step's manifest.
	Label(ss List) string
}

// Defaults are what a run drawing its prompts from a kind's sources takes
// for the settings it leaves out.
type Defaults struct {
	// BatchSize is data.batch_size's default.
	BatchSize int
	// Collaborators are the agents of a run that configures none (no role:
	// the run has none). Their Task, when set, is the task in-process
	// agents answer about; a run that configures agents without one gets
	// it, and one that sets another is refused.
	Collaborators collab.Config
	// Task is the settings of the task the prompts are drawn from (its
	// defaults filled in); nil for prompts read from files.
	Task tasks.Settings
	// Splits are the splits of the task that eval.splits may name; nil
	// for prompt files.
	Splits []string
	// EvalSplits is eval.splits' default: splits the training loop
	// evaluates the policy alone on.
	EvalSplits []string
	// EvalBenchmark is the eval pipeline's benchmark of a split: the
	// training loop scores the policy alone on eval.splits through the
	// eval pipeline, as on eval.benchmarks, each split read like any
	// benchmark preset. nil for prompt files (evaluated with
	// eval.benchmarks alone).
	EvalBenchmark func(split string) (SplitBenchmark, error)
	// InitialModel is the config.json (Hugging Face form) of the model a
	// run on the task starts from when it names none (the task's warm
	// start), with InitialModelNote saying so in a plan; nil when the
	// run must name its own.
	InitialModel     []byte
	InitialModelNote string
	// PromptTokens is the length of a prompt, in tokens, that the memory
	// plan assumes (aipo plan --prompt-tokens overrides it).
	PromptTokens int
}

// SplitBenchmark is the benchmark of a task's split: a preset the task
// registers with the eval pipeline (evalconfig.RegisterPreset) and, when
// the run's task is not the one the preset was written for (other
// settings), the file of the split of the run's task, which replaces the
// preset's. The preset then gives the rest: the file's fields, the
// verifier and the template.
type SplitBenchmark struct {
	Preset string
	Path   string
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// RegisterKind makes a kind of prompt source available to data.sources
// under name. It panics if name is empty or registered twice (programming
// errors).
func RegisterKind(name string, k Kind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if name == "" || k == nil {
		panic(fmt.Sprintf("promptsource.RegisterKind(%q, %v): name and kind must be set", name, k))
	}
	if _, dup := kinds[name]; dup {
		panic("promptsource: source kind registered twice: " + name)
	}
	kinds[name] = k
}

func lookupKind(name string) (Kind, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	k, ok := kinds[name]
	return k, ok
}

// KindNames lists the registered kinds, sorted.
func KindNames() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]string, 0, len(kinds))
	for n := range kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
