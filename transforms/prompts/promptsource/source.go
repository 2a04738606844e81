package promptsource

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
)

// Kinds of prompt source (Config.Kind).
const (
	// KindFile reads a prompt file: the kind of an entry that names none.
	KindFile = "file"
	// KindDemo draws questions from the built-in demo task
	// (internal/demotask).
	KindDemo = "demo"
)

// Config is one entry of a run's data.sources: a kind of prompt source
// and its settings. The settings of every kind share the entry; each kind
// refuses the others'.
//
//	sources:
//	  - {path: train.jsonl, data_source: math}   # kind file (the default)
//	  - {kind: demo, split: all}                  # the built-in demo task
type Config struct {
	// Kind is the kind of source, a name registered with RegisterKind:
	// file (empty: the default) or demo.
	Kind string `yaml:"kind,omitempty"`
	// Source is a file source's file and field mapping (path, format,
	// preset, fields, data_source; see promptfile.Source).
	promptfile.Source `yaml:",inline"`
	// Task sizes a demo source's task: default demotask.DefaultConfig();
	// when set it must be complete.
	Task *demotask.Config `yaml:"task,omitempty"`
	// Split is the entities a demo source's questions are about: all
	// (default), seen or unseen.
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
		return nil, fmt.Errorf("data.sources is empty: list prompt files (path, preset or fields, data_source), or the demo task ({kind: demo})")
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
	// the run has none). Their DemoTask, when set, is the task built-in
	// agents answer about; a run that configures agents without one gets
	// it, and one that sets another is refused.
	Collaborators collab.Config
	// Task is the generated task the prompts are drawn from; nil for
	// prompts read from files. The training loop evaluates the policy
	// alone on its splits (eval.splits), and the run's warm start is
	// trained on it (aipo demo).
	Task *demotask.Config
	// EvalSplits is eval.splits' default: splits of Task.
	EvalSplits []string
	// PromptTokens is the length of a prompt, in tokens, that the memory
	// plan assumes (aipo plan --prompt-tokens overrides it).
	PromptTokens int
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
