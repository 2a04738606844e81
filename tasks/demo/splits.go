package demo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
)

// Splits are the task's splits, in the order a run lists them.
var Splits = []Split{SplitAll, SplitSeen, SplitUnseen}

// EvalSamples is the samples per question of the task's presets (Avg@8
// and Pass@8, what configs/demo.yaml's eval section asks for).
const EvalSamples = 8

// Preset is the name of the benchmark preset of a split of the default
// task (eval.benchmarks: [{preset: demo-unseen}]): every question of the
// split, scored by the task's verifier.
func Preset(split Split) string { return "demo-" + string(split) }

// SplitFile is the name of a split's file (WriteSplits).
func SplitFile(split Split) string { return "demo-" + string(split) + ".jsonl" }

// registerPresets registers the preset of each split.
func registerPresets() {
	t, err := New(DefaultConfig())
	if err != nil {
		panic(err) // the default configuration is valid
	}
	for _, split := range Splits {
		evalconfig.RegisterPreset(Preset(split), evalconfig.Preset{
			RelPath: SplitFile(split), Dir: func() (string, error) { return splitDir(DefaultConfig()) },
			Verifier: DataSource, Template: "plain", Samples: EvalSamples, Rows: len(t.AllQuestions(split)),
			Fields: promptfile.FieldMap{Problem: promptfile.Names{"problem"}, Answer: promptfile.Names{"answer"}, ID: promptfile.Names{"id"}},
		})
	}
}

// evalBenchmark is the benchmark of split of the task tc, for a run's
// eval.splits: the split's preset, with the file of tc's split when tc is
// not the default task.
func evalBenchmark(tc Config) func(string) (promptsource.SplitBenchmark, error) {
	return func(s string) (promptsource.SplitBenchmark, error) {
		split := Split(s)
		sb := promptsource.SplitBenchmark{Preset: Preset(split)}
		if _, ok := evalconfig.Presets[sb.Preset]; !ok {
			return sb, fmt.Errorf("demo: no split %q (use all, seen or unseen)", s)
		}
		if tc == DefaultConfig() {
			return sb, nil
		}
		dir, err := splitDir(tc)
		if err != nil {
			return sb, err
		}
		sb.Path = filepath.Join(dir, SplitFile(split))
		return sb, nil
	}
}

// WriteSplits writes every question of each split to dir/SplitFile(split),
// one JSON object a line with fields id, problem and answer, in ID order:
// the files the task's presets read (each written to a temporary file,
// then renamed).
func (t *Task) WriteSplits(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, split := range Splits {
		tmp, err := os.CreateTemp(dir, SplitFile(split)+".tmp-*")
		if err != nil {
			return err
		}
		enc := json.NewEncoder(tmp)
		for _, q := range t.AllQuestions(split) {
			if err = enc.Encode(map[string]string{"id": q.ID, "problem": q.Prompt, "answer": strconv.Itoa(q.Answer)}); err != nil {
				break
			}
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), filepath.Join(dir, SplitFile(split)))
		}
		if err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("demo: write the %s split: %w", split, err)
		}
	}
	return nil
}

var (
	splitDirsMu sync.Mutex
	splitDirs   = map[Config]string{}
)

// splitDir is the folder of the split files of task tc, written once per
// process under the user's cache folder (the temporary folder when there
// is none), named by a hash of the configuration.
func splitDir(tc Config) (string, error) {
	splitDirsMu.Lock()
	defer splitDirsMu.Unlock()
	if d, ok := splitDirs[tc]; ok {
		return d, nil
	}
	b, _ := json.Marshal(tc)
	sum := sha256.Sum256(b)
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "aipo", "demo-"+hex.EncodeToString(sum[:6]))
	t, err := New(tc)
	if err != nil {
		return "", err
	}
	if err := t.WriteSplits(dir); err != nil {
		return "", err
	}
	splitDirs[tc] = dir
	return dir, nil
}
