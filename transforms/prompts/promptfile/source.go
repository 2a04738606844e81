package promptfile

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Format is the encoding of a prompt file.
type Format string

// Formats. FormatAuto detects the format from the file: Parquet by its
// "PAR1" magic, a JSON array by a leading '[', JSONL otherwise. Gzip
// compression is detected by its magic bytes for the text formats.
const (
	FormatAuto    Format = ""
	FormatJSONL   Format = "jsonl"
	FormatJSON    Format = "json" // one JSON array of objects
	FormatParquet Format = "parquet"
)

// Names is a list of candidate field names, tried in order. In JSON and YAML
// it is written either as a list or as one string with names separated by
// "|" ("problem|question").
type Names []string

// UnmarshalJSON accepts a list of names or a "a|b|c" string.
func (n *Names) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*n = splitNames(s)
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("field names: want a string such as \"problem|question\" or a list of strings: %w", err)
	}
	*n = l
	return nil
}

// UnmarshalYAML accepts a list of names or a "a|b|c" string.
func (n *Names) UnmarshalYAML(v *yaml.Node) error {
	if v.Kind == yaml.ScalarNode {
		*n = splitNames(v.Value)
		return nil
	}
	var l []string
	if err := v.Decode(&l); err != nil {
		return fmt.Errorf("field names (line %d): want a string such as \"problem|question\" or a list of strings: %w", v.Line, err)
	}
	*n = l
	return nil
}

func splitNames(s string) Names {
	var out Names
	for _, p := range strings.Split(s, "|") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// FieldMap says which source fields become which Prompt columns.
type FieldMap struct {
	// Problem: candidates for the problem text (required in every row).
	Problem Names `json:"problem,omitempty" yaml:"problem,omitempty"`
	// Answer: candidates for the reference answer (required in every row,
	// surrounding space trimmed;
	// a number is written as text, 27.0 as "27").
	Answer Names `json:"answer,omitempty" yaml:"answer,omitempty"`
	// Solution: candidates for a worked solution (optional).
	Solution Names `json:"solution,omitempty" yaml:"solution,omitempty"`
	// ID: candidates for the row id (optional; the record index otherwise).
	ID Names `json:"id,omitempty" yaml:"id,omitempty"`
	// AnswerMarker, when set, takes the answer from the text after the last
	// occurrence of the marker in the answer field ("#### " for GSM8K); the
	// text before it becomes the solution unless a solution field is found.
	AnswerMarker string `json:"answer_marker,omitempty" yaml:"answer_marker,omitempty"`
	// Drop names source fields that are not kept in Extra.
	Drop Names `json:"drop,omitempty" yaml:"drop,omitempty"`
	// Keep names source fields kept in Extra although a mapped field was
	// read from inside them ("extra_info" when the id is
	// "extra_info.index").
	Keep Names `json:"keep,omitempty" yaml:"keep,omitempty"`
	// Messages says the problem field is a chat message list
	// ([{role, content}, ...], veRL's prompt column): the problem is the
	// content of its last user message, and a row whose field is not such
	// a list is dead-lettered (not_messages). The whole list is kept in
	// Extra when it holds more than that message.
	Messages bool `json:"messages,omitempty" yaml:"messages,omitempty"`
	// DataSource: candidates for a per-row data_source (veRL's
	// data_source column), used when the Source sets none: the row's
	// value, matched to a verifier's name (verify.Canonical: "openai/gsm8k"
	// is gsm8k), becomes the row's data_source; a row without one, or whose
	// value no verifier knows, is dead-lettered (unknown_data_source).
	DataSource Names `json:"data_source,omitempty" yaml:"data_source,omitempty"`
}

// DefaultFields is the mapping used when a Source has neither a preset nor
// a problem field: the names most prompt datasets use.
var DefaultFields = FieldMap{
	Problem:  Names{"problem", "question", "prompt", "text"},
	Answer:   Names{"answer", "final_answer", "reward_model.ground_truth"},
	Solution: Names{"solution"},
	ID:       Names{"id", "unique_id", "problem_id", "task_id"},
}

// Source is one prompt file and how to read it.
type Source struct {
	// Path of the file: a local path or gs://bucket/object.
	Path string `json:"path" yaml:"path,omitempty"`
	// Format of the file; detected when empty.
	Format Format `json:"format,omitempty" yaml:"format,omitempty"`
	// Preset names a built-in mapping (see Presets); it fills Fields and
	// DataSource where they are empty.
	Preset string `json:"preset,omitempty" yaml:"preset,omitempty"`
	// Fields is the field mapping; DefaultFields when empty and no preset.
	Fields FieldMap `json:"fields,omitempty" yaml:"fields,omitempty"`
	// DataSource is written into every row of the file (required, directly
	// or through the preset, unless Fields.DataSource reads it per row; set,
	// it overrides the rows' own).
	DataSource string `json:"data_source,omitempty" yaml:"data_source,omitempty"`
}

// Preset is a built-in mapping for a known dataset.
type Preset struct {
	Fields     FieldMap
	DataSource string
	// RelPath is where the dataset lies under a data folder laid out as
	// data/benchmarks (which bundles the evaluation sets).
	RelPath string
	// Rows is the number of good rows the bundled copy yields.
	Rows int
}

// Presets are the built-in mappings, by name. Each matches the bundled file
// named by its RelPath as-is.
var Presets = map[string]Preset{
	"aime24": {
		Fields:     FieldMap{Problem: Names{"problem", "question"}, Answer: Names{"answer"}, Solution: Names{"solution"}, ID: Names{"id"}},
		DataSource: "aime24", RelPath: "math/aime24/test.jsonl", Rows: 30,
	},
	// aime25 reads the copy whose LaTeX escapes were repaired (\f and \t had
	// become control characters in three problems upstream).
	"aime25": {
		Fields:     FieldMap{Problem: Names{"problem"}, Answer: Names{"answer"}, ID: Names{"id"}},
		DataSource: "aime25", RelPath: "math/aime25/test.escfixed.jsonl", Rows: 30,
	},
	"amc23": {
		Fields:     FieldMap{Problem: Names{"problem", "question"}, Answer: Names{"answer"}, ID: Names{"id"}},
		DataSource: "amc23", RelPath: "math/amc23/test.jsonl", Rows: 40,
	},
	"math500": {
		Fields:     FieldMap{Problem: Names{"problem"}, Answer: Names{"answer"}, Solution: Names{"solution"}, ID: Names{"unique_id"}},
		DataSource: "math500", RelPath: "math/math500/test.jsonl", Rows: 500,
	},
	"gsm8k": {
		Fields:     FieldMap{Problem: Names{"question"}, Answer: Names{"answer"}, AnswerMarker: "#### "},
		DataSource: "gsm8k", RelPath: "math/gsm8k/test.jsonl", Rows: 1319,
	},
	"gsm8k_train": {
		Fields:     FieldMap{Problem: Names{"question"}, Answer: Names{"answer"}, AnswerMarker: "#### "},
		DataSource: "gsm8k", RelPath: "math/gsm8k/train.jsonl", Rows: 7473,
	},
	// deepscaler_math is DeepScaleR's copy of the MATH train split; four of
	// its 7474 rows have no answer (two null, two empty) and are
	// dead-lettered.
	"deepscaler_math": {
		Fields:     FieldMap{Problem: Names{"problem"}, Answer: Names{"answer"}, Solution: Names{"solution"}},
		DataSource: "deepscaler_math", RelPath: "math/train_deepscaler/math.json", Rows: 7470,
	},
	"aime_1983_2023": {
		Fields:     FieldMap{Problem: Names{"problem"}, Answer: Names{"answer"}, Solution: Names{"solution"}},
		DataSource: "aime_1983_2023", RelPath: "math/train_deepscaler/aime_1983_2023.json", Rows: 975,
	},
	// verl is the layout of veRL's preprocessed datasets and of
	// DAPO-Math-17k, in Parquet or JSONL, read as is: data_source per row
	// (picking its verifier), prompt as a chat message list, ability,
	// reward_model.{style, ground_truth}, extra_info (index, a reference
	// solution). `aipo data convert` writes the bundled benchmarks in it.
	"verl": {Fields: VERLFields},
}

// VERLFields is the mapping of the verl preset.
var VERLFields = FieldMap{
	Problem:    Names{"prompt"},
	Messages:   true,
	Answer:     Names{"reward_model.ground_truth"},
	Solution:   Names{"extra_info.solution"},
	ID:         Names{"extra_info.id", "extra_info.index", "id", "index"},
	DataSource: Names{"data_source"},
	Keep:       Names{"reward_model", "extra_info"},
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

// FromPreset returns a Source for a preset at path; an empty path means the
// preset's bundled copy under dataDir.
func FromPreset(name, path, dataDir string) (Source, error) {
	p, ok := Presets[name]
	if !ok {
		return Source{}, fmt.Errorf("prompt preset %q does not exist (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	if path == "" {
		if dataDir == "" {
			return Source{}, fmt.Errorf("prompt preset %q: no path and no data folder given", name)
		}
		path = strings.TrimRight(dataDir, "/") + "/" + p.RelPath
	}
	return Source{Path: path, Preset: name}, nil
}

// Resolve applies the preset and the defaults and checks the result.
func (s Source) Resolve() (Source, error) {
	if s.Path == "" {
		return s, fmt.Errorf("prompt source: path is empty")
	}
	if s.Preset != "" {
		p, ok := Presets[s.Preset]
		if !ok {
			return s, fmt.Errorf("prompt source %s: preset %q does not exist (known: %s)", s.Path, s.Preset, strings.Join(PresetNames(), ", "))
		}
		if len(s.Fields.Problem) == 0 && len(s.Fields.Answer) == 0 {
			drop, keep := s.Fields.Drop, s.Fields.Keep
			s.Fields = p.Fields
			if len(drop) > 0 {
				s.Fields.Drop = drop
			}
			if len(keep) > 0 {
				s.Fields.Keep = keep
			}
		}
		if s.DataSource == "" {
			s.DataSource = p.DataSource
		}
	}
	if len(s.Fields.Problem) == 0 {
		s.Fields.Problem = DefaultFields.Problem
	}
	if len(s.Fields.Answer) == 0 {
		s.Fields.Answer = DefaultFields.Answer
	}
	if s.Preset == "" && len(s.Fields.ID) == 0 {
		s.Fields.ID = DefaultFields.ID
	}
	if s.Preset == "" && len(s.Fields.Solution) == 0 {
		s.Fields.Solution = DefaultFields.Solution
	}
	if s.DataSource == "" && len(s.Fields.DataSource) == 0 {
		return s, fmt.Errorf("prompt source %s: data_source is empty (set data_source, or a preset: %s)", s.Path, strings.Join(PresetNames(), ", "))
	}
	switch s.Format {
	case FormatAuto, FormatJSONL, FormatJSON, FormatParquet:
	default:
		return s, fmt.Errorf("prompt source %s: format %q unknown (want jsonl, json, parquet, or empty to detect)", s.Path, s.Format)
	}
	return s, nil
}
