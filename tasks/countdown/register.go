package countdown

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/aipo-rl/aipo/transforms/trajectories"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// The task's names and the defaults a run drawing from it takes.
const (
	// Kind is the kind of prompt source of the task in a run's
	// data.sources ({kind: countdown}).
	Kind = "countdown"
	// DataSource is the data_source of its prompts, the name its
	// verifier is registered under.
	DataSource = "countdown"
	// Preset is the benchmark preset of the default task's held-out test
	// set (eval.benchmarks: [{preset: countdown}]).
	Preset = "countdown"
	// BatchSize is the puzzles per step of a run on the task.
	BatchSize = 64
	// PromptTokens is the prompt length the memory plan assumes.
	PromptTokens = 24
)

// The task's public registrations: its kind of prompt source and how a
// step draws from it, the verifier of its answers and its benchmark
// preset (its run configuration is configs/countdown.yaml). A program
// links the task with a blank import (cmd/aipo does).
func init() {
	promptsource.RegisterKind(Kind, sourceKind{})
	trajectories.RegisterGenerator(Kind, func(ss promptsource.List) (trajectories.Generator, error) {
		tc, split, err := sourceOf(ss[0])
		if err != nil {
			return nil, err
		}
		t, err := New(tc)
		if err != nil {
			return nil, fmt.Errorf("task: %w", err)
		}
		return generator{task: t, split: split}, nil
	})
	verify.Register(DataSource, Verifier{})
	evalconfig.RegisterPreset(Preset, evalconfig.Preset{
		RelPath: TestFile, Dir: defaultTestDir, Verifier: DataSource, Template: "plain", Samples: 4, Rows: DefaultConfig().Test,
		Fields: promptfile.FieldMap{Problem: promptfile.Names{"problem"}, Answer: promptfile.Names{"answer"}, ID: promptfile.Names{"id"}},
	})
}

// DecodeConfig is the task configuration of settings s (a data.sources
// entry's task): every field must be given.
func DecodeConfig(s tasks.Settings) (Config, error) {
	var c Config
	if err := s.Decode(&c); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

// sourceOf is the task and split of a data.sources entry of the task,
// their defaults when unset.
func sourceOf(s promptsource.Config) (Config, Split, error) {
	tc := DefaultConfig()
	if s.Task != "" {
		var err error
		if tc, err = DecodeConfig(s.Task); err != nil {
			return Config{}, "", fmt.Errorf("task: %w (give every field of the task, or leave task out for the default)", err)
		}
	}
	split := SplitTrain
	if s.Split != "" {
		split = Split(s.Split)
	}
	return tc, split, nil
}

// sourceKind is the task's kind of prompt source: one entry, its task and
// split (train by default; the test split is held out for evaluation).
type sourceKind struct{}

func (sourceKind) Fill(ss promptsource.List) {
	promptsource.FillGenerated(ss, tasks.MustEncode(DefaultConfig()), string(SplitTrain))
}

func (sourceKind) Check(ss promptsource.List) error {
	if err := promptsource.CheckGenerated(ss, Kind, "puzzles", ""); err != nil {
		return err
	}
	s := ss[0]
	if _, _, err := sourceOf(s); err != nil {
		return fmt.Errorf("data.sources[0].%w", err)
	}
	switch Split(s.Split) {
	case SplitTrain, SplitTest, "":
	default:
		return fmt.Errorf("data.sources[0].split: %q is unknown: use train (or test, the held-out puzzles)", s.Split)
	}
	return nil
}

func (sourceKind) Defaults(ss promptsource.List) promptsource.Defaults {
	tc, _, err := sourceOf(ss[0])
	if err != nil {
		tc = DefaultConfig() // Check reports the entry
	}
	return promptsource.Defaults{BatchSize: BatchSize, Task: tasks.MustEncode(tc), PromptTokens: PromptTokens}
}

func (sourceKind) Label(promptsource.List) string { return Kind }

// generator draws the task's puzzles of one split.
type generator struct {
	task  *Task
	split Split
}

func (g generator) Sample(n int, rng *rand.Rand) []schemas.Prompt {
	ps := g.task.Sample(g.split, n, rng)
	out := make([]schemas.Prompt, len(ps))
	for i, p := range ps {
		out[i] = p.schemaPrompt()
	}
	return out
}

// schemaPrompt is the puzzle as a prompt: its id is its key, its solution
// the generator's expression.
func (p Puzzle) schemaPrompt() schemas.Prompt {
	return schemas.Prompt{
		SchemaVersion: schemas.SchemaVersion,
		ID:            p.Key(),
		DataSource:    DataSource,
		Problem:       p.Prompt(),
		Answer:        p.Answer(),
		Solution:      p.Response(),
	}
}

// TestFile is the name of a held-out test set file (WriteTestSet).
const TestFile = "countdown-test.jsonl"

// WriteTestSet writes the task's held-out puzzles to dir/TestFile, one
// JSON object a line with fields id, problem, answer and solution, the
// file the benchmark preset reads (written to a temporary file, then
// renamed).
func (t *Task) WriteTestSet(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, TestFile)
	tmp, err := os.CreateTemp(dir, TestFile+".tmp-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	enc := json.NewEncoder(tmp)
	for i, p := range t.test {
		row := map[string]string{"id": strconv.Itoa(i) + ":" + p.Key(), "problem": p.Prompt(), "answer": p.Answer(), "solution": p.Response()}
		if err := enc.Encode(row); err != nil {
			tmp.Close()
			return "", err
		}
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

var (
	testDirOnce sync.Once
	testDir     string
	testDirErr  error
)

// defaultTestDir is the folder of the default task's held-out test set,
// written once per process under the user's cache folder (the temporary
// folder when there is none), named by a hash of the configuration.
func defaultTestDir() (string, error) {
	testDirOnce.Do(func() {
		cfg := DefaultConfig()
		b, _ := json.Marshal(cfg)
		sum := sha256.Sum256(b)
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		testDir = filepath.Join(base, "aipo", "countdown-"+hex.EncodeToString(sum[:6]))
		if _, err := os.Stat(filepath.Join(testDir, TestFile)); err == nil {
			return
		}
		t, err := New(cfg)
		if err != nil {
			testDirErr = err
			return
		}
		_, testDirErr = t.WriteTestSet(testDir)
	})
	return testDir, testDirErr
}
