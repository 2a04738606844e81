package evalconfig

import (
	"fmt"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/data/benchmarks"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// Code verifiers (the others are transforms/verify data sources).
const (
	VerifierMBPP      = "mbpp"
	VerifierHumanEval = "humaneval"
)

// Preset is a built-in benchmark: its file under the data folder (by
// default the copy bundled in the binary, data/benchmarks), field
// mapping, verifier, template, default samples and report breakdowns.
type Preset struct {
	// RelPath is the file under the data folder, or under Dir's.
	RelPath string
	// Dir, when set, gives the folder holding RelPath instead of the data
	// folder: a task that generates its held-out problems writes them
	// there (data_dir does not apply).
	Dir       func() (string, error)
	Fields    promptfile.FieldMap
	Verifier  string
	Template  string
	Samples   int
	Rows      int // problems in the bundled file
	Breakdown []string
}

func names(s ...string) promptfile.Names { return promptfile.Names(s) }

// Presets are the built-in benchmarks. Samples follow the paper (Avg@16 on
// AIME, Avg@4 elsewhere).
var Presets = map[string]Preset{
	"aime24": {RelPath: "math/aime24/test.jsonl", Verifier: "aime24", Template: "math", Samples: 16, Rows: 30,
		Fields: promptfile.FieldMap{Problem: names("problem", "question"), Answer: names("answer"), ID: names("id"), Drop: names("solution", "url", "question")}},
	// The copy whose LaTeX escapes were repaired upstream of three problems.
	"aime25": {RelPath: "math/aime25/test.escfixed.jsonl", Verifier: "aime25", Template: "math", Samples: 16, Rows: 30,
		Fields: promptfile.FieldMap{Problem: names("problem"), Answer: names("answer"), ID: names("id")}},
	"amc23": {RelPath: "math/amc23/test.jsonl", Verifier: "amc23", Template: "math", Samples: 4, Rows: 40,
		Fields: promptfile.FieldMap{Problem: names("problem", "question"), Answer: names("answer"), ID: names("id"), Drop: names("url", "question")}},
	"math500": {RelPath: "math/math500/test.jsonl", Verifier: "math500", Template: "math", Samples: 4, Rows: 500,
		Fields:    promptfile.FieldMap{Problem: names("problem"), Answer: names("answer"), ID: names("unique_id"), Drop: names("solution")},
		Breakdown: []string{"subject", "level"}},
	"gsm8k": {RelPath: "math/gsm8k/test.jsonl", Verifier: "gsm8k", Template: "math", Samples: 4, Rows: 1319,
		Fields: promptfile.FieldMap{Problem: names("question"), Answer: names("answer"), AnswerMarker: "#### "}},
	// MBPP, all 974 problems; the three asserts of test_list are the tests
	// (challenge_test_list is not used, as in the original evaluation).
	"mbpp": {RelPath: "code/mbpp/mbpp.jsonl", Verifier: VerifierMBPP, Template: "mbpp", Samples: 4, Rows: 974,
		Fields: promptfile.FieldMap{Problem: names("text"), Answer: names("code"), ID: names("task_id")}},
	"mbpp_sanitized": {RelPath: "code/mbpp/sanitized-mbpp.json", Verifier: VerifierMBPP, Template: "mbpp", Samples: 4, Rows: 427,
		Fields: promptfile.FieldMap{Problem: names("prompt"), Answer: names("code"), ID: names("task_id")}},
	// HumanEval's answer column is the entry point: the canonical solution
	// is kept verbatim in the extra fields (the answer column is trimmed,
	// which would cut the indentation of its first line).
	"humaneval": {RelPath: "code/humaneval/HumanEval.jsonl.gz", Verifier: VerifierHumanEval, Template: "humaneval", Samples: 4, Rows: 164,
		Fields: promptfile.FieldMap{Problem: names("prompt"), Answer: names("entry_point"), ID: names("task_id")}},
}

// RegisterPreset adds a task's benchmark preset under name, from the
// task's init function (Presets is read without a lock). It panics if the
// name is taken or the preset has no file or verifier (programming
// errors).
func RegisterPreset(name string, p Preset) {
	if _, dup := Presets[name]; dup {
		panic("evalconfig: preset registered twice: " + name)
	}
	if name == "" || p.RelPath == "" || p.Verifier == "" {
		panic(fmt.Sprintf("evalconfig.RegisterPreset(%q): name, RelPath and Verifier must be set", name))
	}
	Presets[name] = p
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	out := make([]string, 0, len(Presets))
	for n := range Presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Check reports whether b resolves: its preset exists, it names a file (or
// its preset finds one under dataDir, "" for the shared data folder), its
// verifier and template are known. The error names what to fix.
func (b Benchmark) Check(dataDir string) error {
	if b.key() == "" {
		return fmt.Errorf("benchmark has neither name nor preset (presets: %s)", strings.Join(PresetNames(), ", "))
	}
	if b.Preset != "" {
		if _, ok := Presets[b.Preset]; !ok {
			return fmt.Errorf("benchmark %s: preset %q unknown (known: %s)", b.key(), b.Preset, strings.Join(PresetNames(), ", "))
		}
	}
	_, err := Config{DataDir: dataDir}.WithDefaults().Resolve(b)
	return err
}

// Key is the benchmark's name in reports and directories: its name, or
// its preset.
func (b Benchmark) Key() string { return b.key() }

// Resolved is a benchmark with its preset and the run's defaults applied:
// the file to read with its mapping, and a verifier and template that
// exist.
type Resolved struct {
	Name      string
	Source    promptfile.Source
	Verifier  string
	Template  string
	Samples   int
	MaxTokens int
	Limit     int
	Breakdown []string
}

// Code reports whether the benchmark runs programs (in the sandbox).
func (r Resolved) Code() bool { return r.Verifier == VerifierMBPP || r.Verifier == VerifierHumanEval }

// Resolve applies the preset and the run's defaults (c after WithDefaults)
// to b. The error names what to fix.
func (c Config) Resolve(b Benchmark) (Resolved, error) {
	r := Resolved{Name: b.key(), Verifier: b.Verifier, Template: b.Template, Samples: b.Samples,
		MaxTokens: b.MaxTokens, Limit: b.Limit, Breakdown: b.Breakdown}
	src := promptfile.Source{Path: b.Path, Format: b.Format, Fields: b.Fields, DataSource: r.Name}
	if b.Preset != "" {
		p := Presets[b.Preset]
		if src.Path == "" {
			dir := c.DataDir
			if p.Dir != nil {
				d, err := p.Dir()
				if err != nil {
					return r, fmt.Errorf("benchmark %s: preset %s: %w (or set path)", r.Name, b.Preset, err)
				}
				dir = d
			} else if dir == "" {
				// The copy bundled in the binary (data/benchmarks).
				d, err := benchmarks.Dir()
				if err != nil {
					return r, fmt.Errorf("benchmark %s: preset %s: %w (set data_dir to a folder holding %s, or path)", r.Name, b.Preset, err, p.RelPath)
				}
				dir = d
			}
			src.Path = storage.Join(dir, p.RelPath)
		}
		if len(src.Fields.Problem) == 0 && len(src.Fields.Answer) == 0 {
			src.Fields = p.Fields
		}
		if r.Verifier == "" {
			r.Verifier = p.Verifier
		}
		if r.Template == "" {
			r.Template = p.Template
		}
		if r.Samples == 0 {
			r.Samples = c.Sampling.Samples
		}
		if r.Samples == 0 {
			r.Samples = p.Samples
		}
		if r.Breakdown == nil {
			r.Breakdown = p.Breakdown
		}
	}
	if src.Path == "" {
		return r, fmt.Errorf("benchmark %s: no path and no preset (presets: %s)", r.Name, strings.Join(PresetNames(), ", "))
	}
	if r.Samples == 0 {
		r.Samples = c.Sampling.Samples
	}
	if r.Samples == 0 {
		r.Samples = 4
	}
	if r.MaxTokens == 0 {
		r.MaxTokens = c.Sampling.MaxTokens
	}
	if r.Verifier == "" {
		r.Verifier = "math"
	}
	if r.Template == "" {
		r.Template = "plain"
	}
	if !r.Code() {
		if _, err := verify.ForDataSource(r.Verifier); err != nil {
			return r, fmt.Errorf("benchmark %s: %w (or use %s / %s for code)", r.Name, err, VerifierMBPP, VerifierHumanEval)
		}
	}
	if _, err := ParseTemplate(r.Template); err != nil {
		return r, fmt.Errorf("benchmark %s: %w", r.Name, err)
	}
	r.Source = src
	return r, nil
}
