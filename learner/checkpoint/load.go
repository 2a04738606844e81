package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/optim"
)

// readMarker reads dir/_COMMITTED.
func readMarker(ctx context.Context, dir string) (marker, error) {
	var m marker
	err := rundir.ReadMarker(ctx, rundir.Committed(dir), &m)
	switch {
	case errors.Is(err, rundir.ErrNotCommitted):
		return marker{}, fmt.Errorf("load checkpoint %s: %w", dir, ErrNotCommitted)
	case errors.Is(err, rundir.ErrUnreadable):
		return marker{}, fmt.Errorf("load checkpoint %s: %w", dir, err)
	case err != nil:
		return marker{}, fmt.Errorf("load checkpoint %s: corrupt %s: %w", dir, rundir.CommittedName, err)
	}
	if m.Version != 1 {
		return marker{}, fmt.Errorf("load checkpoint %s: %s version %d not supported (this build reads 1)", dir, rundir.CommittedName, m.Version)
	}
	return m, nil
}

// Load reads the committed checkpoint in dir for training, verifying every
// file's size and sha256 against the marker. Its Tensors are the float32
// master weights (master.safetensors) when the checkpoint has them, else
// model.safetensors (or its shards). A directory without _COMMITTED is
// refused with an error wrapping ErrNotCommitted.
func Load(ctx context.Context, dir string) (Checkpoint, error) {
	return loadCommitted(ctx, dir, true, LoadOptions{})
}

// LoadOptions change what LoadWith reads.
type LoadOptions struct {
	// Into, when set, is called with the checkpoint's config before any
	// weight is read and returns where each tensor is decoded (a model's
	// own storage, so that the weights exist once in memory);
	// Checkpoint.Tensors then alias those slices.
	Into func(Config) (TensorDest, error)
	// SkipOptimizer leaves optimizer.bin unread (Checkpoint.Optimizer
	// nil): OpenOptimizer streams it, verified as it is read.
	SkipOptimizer bool
}

// LoadWith is Load as opts say. Local weight files are read through a
// memory map whose pages are dropped as they are consumed (gs:// objects
// are read whole, verified, then decoded).
func LoadWith(ctx context.Context, dir string, opts LoadOptions) (Checkpoint, error) {
	return loadCommitted(ctx, dir, true, opts)
}

// OpenOptimizer streams the optimiser state of the committed checkpoint in
// dir in learner/optim's one-process format, verified against the marker
// as it is read: optimizer.bin, or the parts the ranks of a data-parallel
// group wrote, joined (byte for byte the file one process writes for the
// same state). Reading it to the end is what verifies it; Close stops it.
func OpenOptimizer(ctx context.Context, dir string) (io.ReadCloser, error) {
	m, err := readMarker(ctx, dir)
	if err != nil {
		return nil, err
	}
	if m.lists(OptimizerName) {
		return m.openVerified(ctx, dir, OptimizerName)
	}
	parts, err := openParts(ctx, dir, m)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := optim.JoinParts(pw, parts.Index, parts.Open)
		if err != nil {
			err = fmt.Errorf("load checkpoint %s: optimiser state: %w", dir, err)
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// OptimizerParts is the optimiser state of a checkpoint written in parts
// (Checkpoint.OptimizerParts): the index, and Open, which streams one
// part, verified against the marker as it is read to the end.
type OptimizerParts struct {
	Index optim.PartIndex
	Open  func(file string) (io.ReadCloser, error)
}

// OpenOptimizerParts gives the parts of the optimiser state of the
// committed checkpoint in dir, so that a rank reads those that hold its
// share alone (optim.ReadParts); nil when the state is one optimizer.bin
// (OpenOptimizer streams it).
func OpenOptimizerParts(ctx context.Context, dir string) (*OptimizerParts, error) {
	m, err := readMarker(ctx, dir)
	if err != nil {
		return nil, err
	}
	if m.lists(OptimizerName) {
		return nil, nil
	}
	return openParts(ctx, dir, m)
}

// openParts reads and checks the parts' index of the checkpoint in dir,
// whose marker is m.
func openParts(ctx context.Context, dir string, m marker) (*OptimizerParts, error) {
	if !m.lists(OptimizerIndexName) {
		return nil, fmt.Errorf("load checkpoint %s: %s lists neither %s nor %s: it is a serving checkpoint, without the optimiser state", dir, rundir.CommittedName, OptimizerName, OptimizerIndexName)
	}
	rc, err := m.openVerified(ctx, dir, OptimizerIndexName)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	x, err := optim.ParsePartIndex(b)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %s: %w", dir, OptimizerIndexName, err)
	}
	for _, p := range x.Parts {
		if !isOptimizerPart(p.File) || !m.lists(p.File) {
			return nil, fmt.Errorf("load checkpoint %s: %s names the part %q, which %s does not list as an optimiser part", dir, OptimizerIndexName, p.File, rundir.CommittedName)
		}
	}
	return &OptimizerParts{Index: x, Open: func(file string) (io.ReadCloser, error) { return m.openVerified(ctx, dir, file) }}, nil
}

// openVerified streams the file name of the checkpoint in dir, whose
// marker m must list it, checking its size and sha256 as it is read.
func (m marker) openVerified(ctx context.Context, dir, name string) (io.ReadCloser, error) {
	for _, f := range m.Files {
		if f.Path != name {
			continue
		}
		p := storage.Join(dir, f.Path)
		r, err := storage.OpenRead(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("load checkpoint %s: %s, listed in %s: %w", dir, f.Path, rundir.CommittedName, err)
		}
		return &verifiedReader{r: r, h: sha256.New(), path: p, want: f}, nil
	}
	return nil, fmt.Errorf("load checkpoint %s: %s does not list %s", dir, rundir.CommittedName, name)
}

// verifiedReader hashes what it reads and checks it against the marker's
// entry at the end.
type verifiedReader struct {
	r    io.ReadCloser
	h    hash.Hash
	n    int64
	path string
	want rundir.File
}

func (v *verifiedReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.want.Bytes {
		return n, v.want.Check(v.path, v.n, "", rundir.CommittedName)
	}
	if err == io.EOF {
		if err := v.want.Check(v.path, v.n, hex.EncodeToString(v.h.Sum(nil)), rundir.CommittedName); err != nil {
			return n, err
		}
	}
	return n, err
}

func (v *verifiedReader) Close() error { return v.r.Close() }

// LoadServed reads a model directory for serving: a committed checkpoint
// (verified as by Load) with the weights of model.safetensors, in the
// model's dtype, as every other tool sees them, not the float32 masters;
// or a plain Hugging Face directory, as one downloads from the Hub
// (config.json, model.safetensors or shards with
// model.safetensors.index.json, tokenizer.json and tokenizer_config.json
// when present, generation_config.json when present; no marker, no
// trainer state, whose zero TrainerState it returns). A directory with
// trainer_state.json but no marker is an unfinished checkpoint
// (ErrNotCommitted).
func LoadServed(ctx context.Context, dir string) (Checkpoint, error) {
	dir = strings.TrimSuffix(dir, "/")
	committed, err := Committed(ctx, dir)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("load %s: %w", dir, err)
	}
	if committed {
		return loadCommitted(ctx, dir, false, LoadOptions{})
	}
	if strings.Contains(storage.Base(dir), ".tmp-") {
		return Checkpoint{}, fmt.Errorf("load %s: a temporary directory of an unfinished save: %w", dir, ErrNotCommitted)
	}
	if ours, err := storage.Exists(ctx, storage.Join(dir, TrainerStateName)); err == nil && ours {
		return Checkpoint{}, fmt.Errorf("load %s: it has %s but %w", dir, TrainerStateName, ErrNotCommitted)
	}
	cp := storage.Join(dir, ConfigName)
	if ok, err := storage.Exists(ctx, cp); err == nil && !ok {
		return Checkpoint{}, fmt.Errorf("load %s: no %s, so not a Hugging Face model directory (config.json, model.safetensors or model.safetensors.index.json with its shards, tokenizer.json), and no %s, so not a committed checkpoint either: %w", dir, ConfigName, rundir.CommittedName, ErrNotCommitted)
	}
	c, err := LoadConfig(ctx, cp)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("load model directory %s: %w", dir, err)
	}
	ts, dt, err := loadWeightsDir(ctx, dir)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("load model directory %s: %w", dir, err)
	}
	files, err := readOptional(ctx, dir, TokenizerName, TokenizerConfigName, GenerationConfigName)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("load model directory %s: %w", dir, err)
	}
	c.TorchDtype = dt.TorchName()
	if c.Dtype != "" {
		c.Dtype = c.TorchDtype
	}
	return Checkpoint{Config: c, Tensors: ts, DType: dt, Tokenizer: files}, nil
}

// readOptional reads those of names that exist in dir, keyed by name.
func readOptional(ctx context.Context, dir string, names ...string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, n := range names {
		p := storage.Join(dir, n)
		b, err := storage.ReadFile(ctx, p)
		switch {
		case err == nil:
			out[n] = b
		case !errors.Is(err, storage.ErrNotExist):
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
	}
	return out, nil
}

// isWeightsFile reports whether name is one of the model-dtype weight
// files: model.safetensors, its shards or their index.
func isWeightsFile(name string) bool {
	return name == WeightsName || name == WeightsIndexName || (strings.HasPrefix(name, "model-") && strings.HasSuffix(name, ".safetensors"))
}

// loadCommitted is Load (masters: tensors from master.safetensors when
// listed) or the committed case of LoadServed (tensors from the model
// weights). Files whose content is not needed are verified as they stream
// by, not kept; the weights used are, locally, mapped, verified through
// the mapping and decoded from it.
func loadCommitted(ctx context.Context, dir string, masters bool, opts LoadOptions) (Checkpoint, error) {
	m, err := readMarker(ctx, dir)
	if err != nil {
		return Checkpoint{}, err
	}
	useMaster := masters && m.lists(MasterName)
	cf := &committedFiles{dir: dir, files: make(map[string][]byte, len(m.Files)), mapped: map[string]*mappedFile{}}
	defer cf.close()
	for _, f := range m.Files {
		if err := cf.verify(ctx, f, useMaster, opts.SkipOptimizer); err != nil {
			return Checkpoint{}, err
		}
	}
	ck, err := cf.metadata(m, opts.SkipOptimizer)
	if err != nil {
		return Checkpoint{}, err
	}
	if ck.Adapter != nil {
		if !masters {
			if ServeAdapter == nil {
				return Checkpoint{}, fmt.Errorf("load checkpoint %s: a LoRA adapter's, and this program cannot merge adapters (it does not link learner/peft)", dir)
			}
			return ServeAdapter(ctx, dir, ck)
		}
		return ck, nil
	}
	var dest TensorDest
	if opts.Into != nil {
		if dest, err = opts.Into(ck.Config); err != nil {
			return Checkpoint{}, fmt.Errorf("load checkpoint %s: %w", dir, err)
		}
	}
	if ck.Tensors, err = cf.tensors(ctx, useMaster, dest); err != nil {
		return Checkpoint{}, fmt.Errorf("load checkpoint %s: %w", dir, err)
	}
	return ck, nil
}

// lists reports whether the marker lists the file name.
// full reports whether m lists the optimiser state, in one file or in
// parts.
func (m marker) full() bool {
	return m.lists(OptimizerName) || m.lists(OptimizerIndexName)
}

// isOptimizerFile reports whether name is a file of the optimiser state.
func isOptimizerFile(name string) bool {
	return name == OptimizerName || name == OptimizerIndexName || isOptimizerPart(name)
}

func (m marker) lists(name string) bool {
	for _, f := range m.Files {
		if f.Path == name {
			return true
		}
	}
	return false
}

// committedFiles are the files of the committed checkpoint in dir that a
// load keeps, verified against its marker: local weight files mapped, the
// others read into memory.
type committedFiles struct {
	dir    string
	files  map[string][]byte
	mapped map[string]*mappedFile
}

// close unmaps the mapped files.
func (c *committedFiles) close() {
	for _, mf := range c.mapped {
		mf.Close()
	}
}

// verify checks the listed file f (its name, size and sha256), keeping it
// when the load needs it: the weights in use (the masters under useMaster,
// else the model weights) and every file but the other weights. Under
// skipOptimizer optimizer.bin is left for OpenOptimizer.
func (c *committedFiles) verify(ctx context.Context, f rundir.File, useMaster, skipOptimizer bool) error {
	if f.Path != filepath.Base(f.Path) || f.Path == "" || f.Path == "." || f.Path == ".." || strings.ContainsAny(f.Path, `/\`) {
		return fmt.Errorf("load checkpoint %s: %s lists %q, not a file of the directory", c.dir, rundir.CommittedName, f.Path)
	}
	if skipOptimizer && isOptimizerFile(f.Path) {
		return nil // OpenOptimizer verifies it as it streams
	}
	p := storage.Join(c.dir, f.Path)
	keep, weights := true, false
	switch {
	case f.Path == MasterName:
		keep, weights = useMaster, true
	case isWeightsFile(f.Path):
		keep, weights = !useMaster, f.Path != WeightsIndexName
	}
	var got string
	var n int64
	if keep && weights && !storage.IsRemote(c.dir) {
		mf, err := openMapped(p)
		if err != nil {
			return fmt.Errorf("load checkpoint %s: %s, listed in %s: %w", c.dir, f.Path, rundir.CommittedName, err)
		}
		c.mapped[f.Path] = mf
		h := sha256.New()
		if n, err = io.CopyBuffer(h, io.NewSectionReader(mf, 0, mf.Size()), make([]byte, 1<<20)); err != nil {
			return fmt.Errorf("load checkpoint %s: %s: %w", c.dir, p, err)
		}
		got = hex.EncodeToString(h.Sum(nil))
	} else {
		var b []byte
		var err error
		if got, n, b, err = readHashed(ctx, p, keep); err != nil {
			return fmt.Errorf("load checkpoint %s: %s, listed in %s: %w", c.dir, f.Path, rundir.CommittedName, err)
		}
		if keep {
			c.files[f.Path] = b
		}
	}
	if err := f.Check(p, n, got, rundir.CommittedName); err != nil {
		return fmt.Errorf("load checkpoint %s: %w", c.dir, err)
	}
	return nil
}

// optimizer is the optimiser state in learner/optim's one-process format:
// optimizer.bin's bytes, or the parts joined.
func (c *committedFiles) optimizer() ([]byte, error) {
	if b, ok := c.files[OptimizerName]; ok {
		return b, nil
	}
	b, err := c.need(OptimizerIndexName)
	if err != nil {
		return nil, err
	}
	x, err := optim.ParsePartIndex(b)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %s: %w", c.dir, OptimizerIndexName, err)
	}
	var out bytes.Buffer
	if _, err := optim.JoinParts(&out, x, func(file string) (io.ReadCloser, error) {
		b, err := c.need(file)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}); err != nil {
		return nil, fmt.Errorf("load checkpoint %s: optimiser state: %w", c.dir, err)
	}
	return out.Bytes(), nil
}

// need is the content of the kept file name, which the marker must list.
func (c *committedFiles) need(name string) ([]byte, error) {
	b, ok := c.files[name]
	if !ok {
		return nil, fmt.Errorf("load checkpoint %s: %s does not list %s", c.dir, rundir.CommittedName, name)
	}
	return b, nil
}

// metadata is the checkpoint without its tensors: config, trainer state,
// optimizer state (unless skipOptimizer) and tokenizer files. A serving
// checkpoint lists no optimizer.bin (and no masters).
func (c *committedFiles) metadata(m marker, skipOptimizer bool) (Checkpoint, error) {
	var ck Checkpoint
	var b []byte
	var err error
	if m.lists(AdapterConfigName) {
		if ck.Adapter, err = c.adapter(); err != nil {
			return Checkpoint{}, err
		}
	} else {
		if b, err = c.need(ConfigName); err != nil {
			return Checkpoint{}, err
		}
		if ck.Config, err = ParseConfig(b); err != nil {
			return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s: %w", c.dir, storage.Join(c.dir, ConfigName), err)
		}
		ck.DType = ModelDType(ck.Config)
	}
	if b, err = c.need(TrainerStateName); err != nil {
		return Checkpoint{}, err
	}
	if err := json.Unmarshal(b, &ck.Trainer); err != nil {
		return Checkpoint{}, fmt.Errorf("load checkpoint %s: %s: %w", c.dir, TrainerStateName, err)
	}
	ck.ServingOnly = !m.full()
	if !ck.ServingOnly && !skipOptimizer {
		if ck.Optimizer, err = c.optimizer(); err != nil {
			return Checkpoint{}, err
		}
	}
	if len(m.TokenizerFiles) > 0 {
		ck.Tokenizer = map[string][]byte{}
	}
	for _, n := range m.TokenizerFiles {
		if ck.Tokenizer[n], err = c.need(n); err != nil {
			return Checkpoint{}, err
		}
	}
	return ck, nil
}

// open serves the kept files as a fileSource: mapped weights from their
// mapping, the rest from memory.
func (c *committedFiles) open(ctx context.Context, name string) (io.ReaderAt, int64, error) {
	if mf, ok := c.mapped[name]; ok {
		return mf, mf.Size(), nil
	}
	return bytesSource(c.files)(ctx, name)
}

// tensors decodes the weights in use into dest (nil: new slices): the
// masters under useMaster, else the model weights.
func (c *committedFiles) tensors(ctx context.Context, useMaster bool, dest TensorDest) ([]Tensor, error) {
	if !useMaster {
		return loadWeightsFrom(ctx, c.dir, c.open, dest)
	}
	r, size, err := c.open(ctx, MasterName)
	if err != nil {
		return nil, err
	}
	ts, _, err := decodeCounting(storage.Join(c.dir, MasterName), r, size, nil, dest)
	return ts, err
}

// readHashed reads path, returning its sha256 (hex), its size and, when
// keep is set, its content; otherwise the bytes are only hashed.
func readHashed(ctx context.Context, path string, keep bool) (string, int64, []byte, error) {
	if keep {
		b, err := storage.ReadFile(ctx, path)
		if err != nil {
			return "", 0, nil, err
		}
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:]), int64(len(b)), b, nil
	}
	r, err := storage.OpenReaderAt(ctx, path)
	if err != nil {
		return "", 0, nil, err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(r, 0, r.Size()))
	if err != nil {
		return "", 0, nil, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil, nil
}

// Committed reports whether dir holds a committed checkpoint.
func Committed(ctx context.Context, dir string) (bool, error) {
	return storage.Exists(ctx, rundir.Committed(dir))
}

// Latest returns the committed checkpoint of runDir with the highest step
// (uncommitted directories are ignored). With none it returns an error
// wrapping ErrNoCheckpoint.
func Latest(ctx context.Context, runDir string) (dir string, step int64, err error) {
	steps, err := List(ctx, runDir)
	if err != nil {
		return "", 0, err
	}
	if len(steps) == 0 {
		return "", 0, fmt.Errorf("%s: %w under %s", runDir, ErrNoCheckpoint, rundir.Checkpoints(runDir))
	}
	step = steps[len(steps)-1]
	return rundir.Checkpoint(runDir, step), step, nil
}

// List returns the steps of runDir's committed checkpoints, ascending
// (uncommitted directories and strays such as step-000007.tmp-123 are
// left out).
func List(ctx context.Context, runDir string) ([]int64, error) {
	paths, err := storage.List(ctx, rundir.CheckpointFiles(runDir, rundir.CommittedName))
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of %s: %w", runDir, err)
	}
	var steps []int64
	for _, p := range paths {
		if k, ok := rundir.ParseStepName(storage.Base(storage.Dir(p))); ok {
			steps = append(steps, k)
		}
	}
	slices.Sort(steps)
	return slices.Compact(steps), nil
}

// LoadWeights loads a model's configuration and tensors from any of:
//   - a directory in Hugging Face layout (ours, or a downloaded model
//     without our extras): config.json plus model.safetensors or shards;
//     its Config's torch_dtype is set to the dtype the weights are stored
//     in (that of most elements: BF16, F16 or F32), whatever the file said;
//     a directory with a _COMMITTED marker is loaded (and verified) as a
//     checkpoint, with its float32 master weights when it has them; one with trainer_state.json but no marker, or a .tmp-
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
	ts, dt, err := loadWeightsDir(ctx, dir)
	if err != nil {
		return Config{}, nil, err
	}
	// torch_dtype names what the files hold, which a checkpoint seeded
	// from the directory then saves model.safetensors in.
	c.TorchDtype = dt.TorchName()
	if c.Dtype != "" {
		c.Dtype = c.TorchDtype
	}
	return c, ts, nil
}
