package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/internal/storage"
)

// File names of a checkpoint directory beyond the Hugging Face layout.
const (
	OptimizerName    = "optimizer.bin"
	TrainerStateName = "trainer_state.json"
	// CommittedName is written last; a directory without it is not a
	// checkpoint (its writer is still running or died).
	CommittedName = "_COMMITTED"
)

// ErrNotCommitted is returned (wrapped, naming the directory) by Load for a
// directory without a _COMMITTED marker.
var ErrNotCommitted = errors.New("checkpoint is not committed (no " + CommittedName + " marker: its writer is still running or was killed; use an earlier checkpoint or rerun the step that writes it)")

// ErrExists is returned (wrapped) by Save when the directory already holds a
// committed checkpoint; checkpoints are never overwritten.
var ErrExists = errors.New("a committed checkpoint already exists there (checkpoints are immutable; pick another directory or remove it)")

// ErrNoCheckpoint is returned (wrapped) by Latest when a run has no
// committed checkpoint.
var ErrNoCheckpoint = errors.New("no committed checkpoint")

// TrainerState is trainer_state.json: where training stands.
type TrainerState struct {
	Step          int64              `json:"step"`
	PolicyVersion int64              `json:"policy_version"`
	RunID         string             `json:"run_id"`
	Seed          int64              `json:"seed"`
	Metrics       map[string]float64 `json:"metrics,omitempty"`
	CreatedAt     time.Time          `json:"created_at"`
}

// Checkpoint is everything a training run saves at a step.
type Checkpoint struct {
	Config  Config
	Tensors []Tensor
	// Tokenizer maps file names (tokenizer.json, tokenizer_config.json, ...)
	// to their contents, copied into the directory as they are.
	Tokenizer map[string][]byte
	// Optimizer is the optimiser's own serialised state, stored opaquely.
	Optimizer []byte
	Trainer   TrainerState
}

// marker is the content of _COMMITTED: every file of the checkpoint with
// its size and sha256, which Load verifies.
type marker struct {
	Version        int           `json:"version"`
	Step           int64         `json:"step"`
	CreatedAt      time.Time     `json:"created_at"`
	Files          []writtenFile `json:"files"`
	TokenizerFiles []string      `json:"tokenizer_files,omitempty"`
}

// reserved are file names a tokenizer file may not take.
func reserved(name string) bool {
	switch name {
	case ConfigName, WeightsName, WeightsIndexName, OptimizerName, TrainerStateName, CommittedName:
		return true
	}
	return strings.HasPrefix(name, "model-") && strings.HasSuffix(name, ".safetensors")
}

// ReadTokenizerFiles reads files (local or gs://) into the map that
// Checkpoint.Tokenizer expects, keyed by base name.
func ReadTokenizerFiles(ctx context.Context, paths ...string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(paths))
	for _, p := range paths {
		b, err := storage.ReadFile(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("read tokenizer file %s: %w", p, err)
		}
		name := storage.Base(p)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("tokenizer files %v: two share the name %s", paths, name)
		}
		out[name] = b
	}
	return out, nil
}

// Save writes ck to dir with F32 weights in one file (see SaveWith).
func Save(ctx context.Context, dir string, ck Checkpoint) error {
	return SaveWith(ctx, dir, ck, SaveOptions{})
}

// SaveWith writes ck to dir and commits it. Locally every file is written
// into a sibling temporary directory <dir>.tmp-*, which is renamed to dir;
// then _COMMITTED is written. On gs:// the files are written in place and
// _COMMITTED last. Either way, a reader sees the checkpoint only once
// _COMMITTED exists. An uncommitted leftover at dir (a crashed writer) is
// replaced; a committed checkpoint is not (ErrExists).
func SaveWith(ctx context.Context, dir string, ck Checkpoint, opts SaveOptions) error {
	if err := ck.Config.Validate(); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if len(ck.Tensors) == 0 {
		return fmt.Errorf("save checkpoint %s: no tensors", dir)
	}
	for name := range ck.Tokenizer {
		if name == "" || name != filepath.Base(name) || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || reserved(name) {
			return fmt.Errorf("save checkpoint %s: tokenizer file name %q must be a plain file name other than the checkpoint's own files", dir, name)
		}
	}
	committed, err := storage.Exists(ctx, storage.Join(dir, CommittedName))
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if committed {
		return fmt.Errorf("save checkpoint %s: %w", dir, ErrExists)
	}
	if ck.Trainer.CreatedAt.IsZero() {
		ck.Trainer.CreatedAt = time.Now().UTC()
	}
	if storage.IsRemote(dir) {
		return saveRemote(ctx, dir, ck, opts)
	}
	return saveLocal(ctx, dir, ck, opts)
}

// writeAll writes every file of ck into dir and returns the marker.
func writeAll(ctx context.Context, dir string, ck Checkpoint, opts SaveOptions) (marker, error) {
	m := marker{Version: 1, Step: ck.Trainer.Step, CreatedAt: ck.Trainer.CreatedAt}
	cfg, err := ck.Config.Marshal()
	if err != nil {
		return m, err
	}
	ts, err := json.MarshalIndent(ck.Trainer, "", "  ")
	if err != nil {
		return m, err
	}
	small := []struct {
		name string
		data []byte
	}{{ConfigName, cfg}, {TrainerStateName, append(ts, '\n')}, {OptimizerName, ck.Optimizer}}
	names := make([]string, 0, len(ck.Tokenizer))
	for n := range ck.Tokenizer {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		small = append(small, struct {
			name string
			data []byte
		}{n, ck.Tokenizer[n]})
	}
	m.TokenizerFiles = names
	for _, f := range small {
		wf, err := writeBytes(ctx, storage.Join(dir, f.name), f.data)
		if err != nil {
			return m, err
		}
		m.Files = append(m.Files, wf)
	}
	wfs, err := saveWeights(ctx, dir, ck.Tensors, opts)
	if err != nil {
		return m, err
	}
	m.Files = append(m.Files, wfs...)
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	return m, nil
}

func commit(ctx context.Context, dir string, m marker) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := storage.WriteAtomic(ctx, storage.Join(dir, CommittedName), append(b, '\n')); err != nil {
		return fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	return nil
}

func saveLocal(ctx context.Context, dir string, ck Checkpoint, opts SaveOptions) error {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	m, err := writeAll(ctx, tmp, ck, opts)
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if err := storage.SyncDir(tmp); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	// Whatever sits at dir now is uncommitted (checked above): a crashed
	// writer's leftover, safe to replace.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("save checkpoint %s: remove uncommitted leftover: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if err := storage.SyncDir(parent); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	return commit(ctx, dir, m)
}

func saveRemote(ctx context.Context, dir string, ck Checkpoint, opts SaveOptions) error {
	// Objects of an earlier, uncommitted attempt would otherwise linger
	// (say, shards of a different count).
	old, err := storage.List(ctx, storage.Join(dir, "*"))
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	m, err := writeAll(ctx, dir, ck, opts)
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	keep := map[string]bool{}
	for _, f := range m.Files {
		keep[f.Path] = true
	}
	for _, p := range old {
		if !keep[storage.Base(p)] {
			if err := storage.Remove(ctx, p); err != nil {
				return fmt.Errorf("save checkpoint %s: remove stale %s: %w", dir, p, err)
			}
		}
	}
	return commit(ctx, dir, m)
}

// readMarker reads dir/_COMMITTED.
func readMarker(ctx context.Context, dir string) (marker, error) {
	p := storage.Join(dir, CommittedName)
	b, err := storage.ReadFile(ctx, p)
	if err != nil {
		if errors.Is(err, storage.ErrNotExist) {
			return marker{}, fmt.Errorf("load checkpoint %s: %w", dir, ErrNotCommitted)
		}
		return marker{}, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	var m marker
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return marker{}, fmt.Errorf("load checkpoint %s: corrupt %s: %w", dir, CommittedName, err)
	}
	if m.Version != 1 {
		return marker{}, fmt.Errorf("load checkpoint %s: %s version %d not supported (this build reads 1)", dir, CommittedName, m.Version)
	}
	return m, nil
}

// Load reads the committed checkpoint in dir, verifying every file's size
// and sha256 against the marker. A directory without _COMMITTED is refused
// with an error wrapping ErrNotCommitted.
func Load(ctx context.Context, dir string) (Checkpoint, error) {
	m, err := readMarker(ctx, dir)
	if err != nil {
		return Checkpoint{}, err
	}
	files := make(map[string][]byte, len(m.Files))
	for _, f := range m.Files {
		if f.Path != filepath.Base(f.Path) || f.Path == "" {
			return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s lists %q, not a file of the directory", dir, CommittedName, f.Path)
		}
		p := storage.Join(dir, f.Path)
		b, err := storage.ReadFile(ctx, p)
		if err != nil {
			return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s, listed in %s: %w", dir, f.Path, CommittedName, err)
		}
		if int64(len(b)) != f.Bytes {
			return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s is %d bytes, %s says %d (corrupt or overwritten)", dir, p, len(b), CommittedName, f.Bytes)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
			return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s has sha256 %s, %s says %s (corrupt)", dir, p, got, CommittedName, f.SHA256)
		}
		files[f.Path] = b
	}
	need := func(name string) ([]byte, error) {
		b, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("load checkpoint %s: %s does not list %s", dir, CommittedName, name)
		}
		return b, nil
	}
	var ck Checkpoint
	b, err := need(ConfigName)
	if err != nil {
		return Checkpoint{}, err
	}
	if ck.Config, err = ParseConfig(b); err != nil {
		return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s: %w", dir, ConfigName, err)
	}
	if b, err = need(TrainerStateName); err != nil {
		return Checkpoint{}, err
	}
	if err := json.Unmarshal(b, &ck.Trainer); err != nil {
		return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s: %w", dir, TrainerStateName, err)
	}
	if ck.Optimizer, err = need(OptimizerName); err != nil {
		return Checkpoint{}, err
	}
	if len(m.TokenizerFiles) > 0 {
		ck.Tokenizer = map[string][]byte{}
	}
	for _, n := range m.TokenizerFiles {
		if ck.Tokenizer[n], err = need(n); err != nil {
			return Checkpoint{}, err
		}
	}
	if ck.Tensors, err = loadWeightsFrom(ctx, dir, bytesSource(files)); err != nil {
		return Checkpoint{}, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	return ck, nil
}

// Committed reports whether dir holds a committed checkpoint.
func Committed(ctx context.Context, dir string) (bool, error) {
	return storage.Exists(ctx, storage.Join(dir, CommittedName))
}

// Dir is the directory of the checkpoint of a run at a step:
// <run>/checkpoints/step-000007.
func Dir(runDir string, step int64) string {
	return storage.Join(runDir, "checkpoints", fmt.Sprintf("step-%06d", step))
}

// Latest returns the committed checkpoint of runDir with the highest step
// (uncommitted directories are ignored). With none it returns an error
// wrapping ErrNoCheckpoint.
func Latest(ctx context.Context, runDir string) (dir string, step int64, err error) {
	glob := storage.Join(runDir, "checkpoints", "step-*", CommittedName)
	paths, err := storage.List(ctx, glob)
	if err != nil {
		return "", 0, fmt.Errorf("list checkpoints of %s: %w", runDir, err)
	}
	step = -1
	for _, p := range paths {
		d := storage.Dir(p)
		s, ok := strings.CutPrefix(storage.Base(d), "step-")
		if !ok {
			continue
		}
		k, err := strconv.ParseInt(s, 10, 64)
		if err != nil || k < 0 {
			continue // step-000007.tmp-123 and other strays
		}
		if k > step {
			dir, step = d, k
		}
	}
	if step < 0 {
		return "", 0, fmt.Errorf("%s: %w under %s", runDir, ErrNoCheckpoint, storage.Join(runDir, "checkpoints"))
	}
	return dir, step, nil
}

// LoadWeights loads a model's configuration and tensors from any of:
//   - a directory in Hugging Face layout (ours, or a downloaded model
//     without our extras): config.json plus model.safetensors or shards;
//     a directory with a _COMMITTED marker is loaded (and verified) as a
//     checkpoint; one with trainer_state.json but no marker, or a .tmp-
//     name, is an unfinished save and refused (ErrNotCommitted);
//   - a .safetensors file; config.json beside it is read when present,
//     otherwise the returned Config is the zero value (ModelType == "");
//   - a llama2.c legacy .bin (see LoadLlama2C).
func LoadWeights(ctx context.Context, path string) (Config, []Tensor, error) {
	switch {
	case strings.HasSuffix(path, ".bin"):
		return LoadLlama2C(ctx, path)
	case strings.HasSuffix(path, ".safetensors"):
		ts, _, err := LoadSafetensors(ctx, path)
		if err != nil {
			return Config{}, nil, err
		}
		cp := storage.Join(storage.Dir(path), ConfigName)
		ok, err := storage.Exists(ctx, cp)
		if err != nil || !ok {
			return Config{}, ts, err
		}
		c, err := LoadConfig(ctx, cp)
		return c, ts, err
	}
	dir := strings.TrimSuffix(path, "/")
	if strings.Contains(storage.Base(dir), ".tmp-") {
		return Config{}, nil, fmt.Errorf("load weights %s: a temporary directory of an unfinished save: %w", path, ErrNotCommitted)
	}
	committed, err := Committed(ctx, dir)
	if err != nil {
		return Config{}, nil, fmt.Errorf("load weights %s: %w", path, err)
	}
	if committed {
		ck, err := Load(ctx, dir)
		return ck.Config, ck.Tensors, err
	}
	// Our extras without the marker: a checkpoint whose writer has not
	// finished. A downloaded model has neither.
	if ours, err := storage.Exists(ctx, storage.Join(dir, TrainerStateName)); err == nil && ours {
		return Config{}, nil, fmt.Errorf("load weights %s: %w", path, ErrNotCommitted)
	}
	c, err := LoadConfig(ctx, storage.Join(dir, ConfigName))
	if err != nil {
		return Config{}, nil, fmt.Errorf("load weights %s (want a model directory, a .safetensors file or a llama2.c .bin): %w", path, err)
	}
	ts, err := LoadWeightsDir(ctx, dir)
	return c, ts, err
}
