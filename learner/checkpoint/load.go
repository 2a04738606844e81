package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
)

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
		if f.Path != filepath.Base(f.Path) || f.Path == "" || f.Path == "." || f.Path == ".." || strings.ContainsAny(f.Path, `/\`) {
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
		return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s: %w", dir, storage.Join(dir, ConfigName), err)
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
