package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
)

// File names of a checkpoint directory beyond the Hugging Face layout.
const (
	OptimizerName    = "optimizer.bin"
	TrainerStateName = "trainer_state.json"
	// OptimizerIndexName lists the parts of an optimiser state that the
	// ranks of a data-parallel group wrote, each its own
	// (OptimizerPartName), in place of one optimizer.bin
	// (learner/optim's PartIndex).
	OptimizerIndexName = "optimizer.index.json"
	// MasterName holds the float32 master weights, beside model.safetensors,
	// when the model's dtype is not float32: training resumes from it bit
	// for bit, while model.safetensors (in the model's dtype) is what
	// serving and other tools load. One file, never sharded; same tensor
	// names and shapes as the model weights.
	MasterName = "master.safetensors"
)

// OptimizerPartName is the name of part i (1-based) of an optimiser state
// split into n.
func OptimizerPartName(i, n int) string {
	return fmt.Sprintf("optimizer-%05d-of-%05d.bin", i, n)
}

// ErrNotCommitted is returned (wrapped, naming the directory) by Load for a
// directory without a _COMMITTED marker.
// It is a rundir.ErrNotCommitted.
var ErrNotCommitted = rundir.NotCommitted("checkpoint is not committed (no " + rundir.CommittedName + " marker: its writer is still running or was killed; use an earlier checkpoint or rerun the step that writes it)")

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
	// CreatedAt is read from checkpoints of earlier builds and written only
	// when a caller sets it: Save stamps no wall-clock time, so that two
	// identical runs write identical checkpoints, byte for byte.
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// Checkpoint is everything a training run saves at a step.
type Checkpoint struct {
	// Config is written as it is, every key kept, except that torch_dtype
	// names the dtype the weights are saved in and a config without
	// architectures gets its model type's class.
	Config Config
	// Tensors are the float32 weights: on Load, the master weights when
	// the checkpoint has them (see MasterName), else model.safetensors.
	Tensors []Tensor
	// DType is the element type of model.safetensors, the model's own
	// dtype (that of the weights the run started from). Save writes F32
	// when it is empty and Config.TorchDtype does not name bfloat16 or
	// float16 (see ModelDType); Load sets it from config.json.
	DType DType
	// Tokenizer maps file names (tokenizer.json, tokenizer_config.json, and
	// the other files of a Hugging Face directory that travel with the
	// weights unchanged, as generation_config.json) to their contents,
	// copied into the directory as they are.
	Tokenizer map[string][]byte
	// Optimizer is the optimiser's own serialised state, stored opaquely.
	Optimizer []byte
	// WriteOptimizer, when set, streams the optimiser's state into
	// optimizer.bin in place of Optimizer (which must then be empty), so
	// that no copy of it is built in memory.
	WriteOptimizer func(io.Writer) error
	// OptimizerParts, when above 1, has the optimiser state written as that
	// many files, OptimizerPartName(i, OptimizerParts), listed by
	// OptimizerIndex (written as optimizer.index.json), in place of one
	// optimizer.bin: WriteOptimizer streams this process's part, number
	// OptimizerPart+1, and the SaveOptions' Helpers write the others.
	OptimizerParts int
	OptimizerPart  int
	OptimizerIndex []byte
	Trainer        TrainerState
	// WriteTiedHead, on Save, also writes lm_head.weight into
	// model.safetensors (a copy of model.embed_tokens.weight) when the
	// config ties the two and Tensors has no head of its own. vLLM's
	// in-place reload (reload_weights, 0.32.0) gives the embedding its new
	// values but keeps a tied LM head's old ones unless the checkpoint
	// names the head (its layerwise reload puts back the tensors of a
	// layer it loaded nothing into); every reader that ties the weights
	// loads the same model either way (transformers, vLLM at start-up,
	// aipo's loader, which ignores a tied model's head).
	WriteTiedHead bool
	// ServingOnly, on Save, writes the serving checkpoint alone: the
	// Hugging Face directory (model.safetensors in the model's dtype,
	// config.json, the tokenizer files) and trainer_state.json, without
	// the training state (master.safetensors and optimizer.bin; Optimizer
	// and WriteOptimizer are not used). On Load it says that the checkpoint is such a one:
	// Tensors are then the served weights and Optimizer is nil, so a run
	// cannot continue from it bit for bit (a full checkpoint lists
	// optimizer.bin in its marker; see Full).
	ServingOnly bool
	// Adapter, when set, makes the checkpoint a LoRA adapter's (see
	// Adapter): Save writes its files in place of config.json and the
	// model's weights (Config and Tensors are not written); Load sets it
	// for such a checkpoint and leaves Config and Tensors zero (the base
	// is named in the adapter's configuration).
	Adapter *Adapter
}

// marker is the content of _COMMITTED: every file of the checkpoint with
// its size and sha256, which Load verifies.
type marker struct {
	Version        int           `json:"version"`
	Step           int64         `json:"step"`
	CreatedAt      time.Time     `json:"created_at,omitzero"` // see TrainerState.CreatedAt
	Files          []rundir.File `json:"files"`
	TokenizerFiles []string      `json:"tokenizer_files,omitempty"`
}

// reserved are file names a tokenizer file may not take.
func reserved(name string) bool {
	switch name {
	case ConfigName, WeightsName, WeightsIndexName, MasterName, OptimizerName, OptimizerIndexName, TrainerStateName, rundir.CommittedName,
		AdapterConfigName, AdapterWeightsName:
		return true
	}
	return strings.HasPrefix(name, "model-") && strings.HasSuffix(name, ".safetensors") || isOptimizerPart(name)
}

// Files of a Hugging Face model directory that travel with the weights
// unchanged, in Checkpoint.Tokenizer.
const (
	TokenizerName       = "tokenizer.json"
	TokenizerConfigName = "tokenizer_config.json"
	// GenerationConfigName holds the sampling defaults (eos_token_id,
	// temperature, ...) that transformers and vLLM read beside config.json.
	GenerationConfigName = "generation_config.json"
)

// ReadModelFiles reads, from a Hugging Face model directory (local or
// gs://), the files a checkpoint carries along unchanged: tokenizer.json,
// which must be there, and tokenizer_config.json and
// generation_config.json when they are.
func ReadModelFiles(ctx context.Context, dir string) (map[string][]byte, error) {
	files, err := ReadTokenizerFiles(ctx, storage.Join(dir, TokenizerName))
	if err != nil {
		return nil, err
	}
	more, err := readOptional(ctx, dir, TokenizerConfigName, GenerationConfigName)
	if err != nil {
		return nil, err
	}
	for n, b := range more {
		files[n] = b
	}
	return files, nil
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

// Save writes ck to dir (see SaveWith), its weights in ck.DType (or the
// dtype ck.Config's torch_dtype names), sharded above DefaultMaxShardBytes.
func Save(ctx context.Context, dir string, ck Checkpoint) error {
	return SaveWith(ctx, dir, ck, SaveOptions{})
}

// ModelDType is the dtype that config.json's torch_dtype (or dtype) names
// when it is one that safetensors files here are written in: BF16 for
// "bfloat16", F16 for "float16", and F32 otherwise (float32, absent, or a
// type the learner does not write).
func ModelDType(c Config) DType {
	t := c.TorchDtype
	if t == "" {
		t = c.Dtype
	}
	switch t {
	case "bfloat16":
		return BF16
	case "float16":
		return F16
	}
	return F32
}

// modelDType is the dtype ck's model.safetensors is written in.
func (ck Checkpoint) modelDType() DType {
	if ck.DType != "" {
		return ck.DType
	}
	return ModelDType(ck.Config)
}

// SaveWith writes ck to dir and commits it: config.json (torch_dtype naming
// the dtype of model.safetensors), the weights in opts.DType (when empty,
// ck's model dtype), and, when that is not F32, the float32 weights as well
// in master.safetensors, which Load prefers; then the optimiser and
// trainer state and the tokenizer files. Locally every file is written
// into a sibling temporary directory .<name>.tmp-<owner>-*, which is renamed to dir;
// then _COMMITTED is written. On gs:// the files are written in place and
// _COMMITTED last. Either way, a reader sees the checkpoint only once
// _COMMITTED exists. An uncommitted leftover at dir (a crashed writer's,
// recognised by its trainer_state.json) is replaced; a committed checkpoint
// is not (ErrExists), nor is a non-empty location holding anything else.
func SaveWith(ctx context.Context, dir string, ck Checkpoint, opts SaveOptions) error {
	if err := ck.Config.Validate(); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if len(ck.Tensors) == 0 && (ck.Adapter == nil || len(ck.Adapter.Tensors) == 0) {
		return fmt.Errorf("save checkpoint %s: no tensors", dir)
	}
	if opts.DType == "" {
		opts.DType = ck.modelDType()
	}
	for name := range ck.Tokenizer {
		if name == "" || name != filepath.Base(name) || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || reserved(name) {
			return fmt.Errorf("save checkpoint %s: tokenizer file name %q must be a plain file name other than the checkpoint's own files", dir, name)
		}
	}
	committed, err := Committed(ctx, dir)
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if committed {
		return fmt.Errorf("save checkpoint %s: %w", dir, ErrExists)
	}
	if storage.IsRemote(dir) {
		return saveRemote(ctx, dir, ck, opts)
	}
	return saveLocal(ctx, dir, ck, opts)
}

// WeightShards is the number of weight files SaveWith(ck, opts) writes:
// 1 (model.safetensors) or the count of model-0000i-of-0000n.safetensors
// shards. It depends on ck's tensors, the dtype and opts.MaxShardBytes
// alone.
func WeightShards(ck Checkpoint, opts SaveOptions) (int, error) {
	if opts.DType == "" {
		opts.DType = ck.modelDType()
	}
	shards, _, err := ck.weightShards("", opts)
	return len(shards), err
}

// WriteShards is a helper's part of SaveWith(ck, opts) when opts.Helpers
// hands it files (see ShardHelpers): it writes into dir, the directory
// the saving process's Start named, the weight shards i of n for which
// mine(i, n) holds (none when the weights fit in one file, which the
// saving process writes itself) and, when ck.OptimizerParts is above 1,
// its part of the optimiser state (ck.OptimizerPart, streamed by
// ck.WriteOptimizer); it returns their files (name, size, sha256) for the
// saving process's Collect. ck must hold the tensors the saving process
// holds, and opts its options.
func WriteShards(ctx context.Context, dir string, ck Checkpoint, opts SaveOptions, mine func(i, n int) bool) ([]rundir.File, error) {
	if opts.DType == "" {
		opts.DType = ck.modelDType()
	}
	shards, opts, err := ck.weightShards(dir, opts)
	if err != nil {
		return nil, err
	}
	var out []rundir.File
	if len(shards) > 1 {
		for i, ts := range shards {
			if !mine(i, len(shards)) {
				continue
			}
			f, err := writeShard(ctx, dir, ShardName(i+1, len(shards)), ts, opts)
			if err != nil {
				return out, err
			}
			out = append(out, f)
		}
	}
	if ck.OptimizerParts > 1 && !ck.ServingOnly {
		if ck.WriteOptimizer == nil {
			return out, fmt.Errorf("optimiser part %d of %d: nothing streams it", ck.OptimizerPart+1, ck.OptimizerParts)
		}
		f, err := writeFile(ctx, storage.Join(dir, OptimizerPartName(ck.OptimizerPart+1, ck.OptimizerParts)), true, ck.WriteOptimizer)
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, nil
}

// writeAll writes every file of ck into dir and returns the marker. Files
// left to helpers (opts.Helpers: weight shards, other optimiser parts) are
// written meanwhile by them and listed once Collect reports them all.
func writeAll(ctx context.Context, dir string, ck Checkpoint, opts SaveOptions) (marker, error) {
	m := marker{Version: 1, Step: ck.Trainer.Step, CreatedAt: ck.Trainer.CreatedAt}
	cfg, err := forWeights(ck.Config, opts.withDefaults().DType).Marshal()
	if err != nil {
		return m, err
	}
	ts, err := trainerStateJSON(ck.Trainer)
	if err != nil {
		return m, err
	}
	shards, wopts, err := ck.weightShards(dir, opts)
	if err != nil {
		return m, err
	}
	mine, helped, err := startHelpers(ctx, dir, ck, len(shards), opts.Helpers)
	if err != nil {
		return m, err
	}
	// trainer_state.json goes first: on gs:// the files land in place one
	// object at a time, and a later save recognises what a writer killed
	// part way left behind by it (saveRemote).
	wf, err := writeBytes(ctx, storage.Join(dir, TrainerStateName), append(ts, '\n'))
	if err != nil {
		return m, err
	}
	m.Files = append(m.Files, wf)
	small := []namedBytes{{ConfigName, cfg}}
	if ck.Adapter != nil {
		small = nil
		files, err := writeAdapter(ctx, dir, ck.Adapter)
		if err != nil {
			return m, err
		}
		m.Files = append(m.Files, files...)
	}
	if !ck.ServingOnly {
		files, more, err := writeOptimizer(ctx, dir, ck)
		if err != nil {
			return m, err
		}
		m.Files = append(m.Files, files...)
		small = append(small, more...)
	}
	m.TokenizerFiles = sortedNames(ck.Tokenizer)
	for _, n := range m.TokenizerFiles {
		small = append(small, namedBytes{n, ck.Tokenizer[n]})
	}
	for _, f := range small {
		wf, err := writeBytes(ctx, storage.Join(dir, f.name), f.data)
		if err != nil {
			return m, err
		}
		m.Files = append(m.Files, wf)
	}
	if ck.Adapter == nil { // (the adapter's files take the model's place)
		wfs, err := writeWeights(ctx, dir, shards, wopts, mine)
		if err != nil {
			return m, fmt.Errorf("save weights to %s: %w", dir, err)
		}
		m.Files = append(m.Files, wfs...)
	}
	if opts.DType != F32 && !ck.ServingOnly && ck.Adapter == nil {
		wf, err := writeMasters(ctx, dir, ck.Tensors, opts.withDefaults().Metadata)
		if err != nil {
			return m, err
		}
		m.Files = append(m.Files, wf)
	}
	got, err := collectHelpers(ctx, dir, opts.Helpers, helped)
	if err != nil {
		return m, err
	}
	m.Files = append(m.Files, got...)
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	return m, nil
}

// writeOptimizer writes ck's optimiser state: optimizer.bin streamed, or
// this process's part of a split state; it returns the files written and
// the small ones still to write (optimizer.bin's bytes, the parts' index).
func writeOptimizer(ctx context.Context, dir string, ck Checkpoint) ([]rundir.File, []namedBytes, error) {
	switch {
	case ck.OptimizerParts > 1:
		if len(ck.Optimizer) > 0 || ck.WriteOptimizer == nil || len(ck.OptimizerIndex) == 0 {
			return nil, nil, fmt.Errorf("an optimiser state split into %d parts needs this process's part streamed (WriteOptimizer) and the parts' index, and no state bytes", ck.OptimizerParts)
		}
		wf, err := writeFile(ctx, storage.Join(dir, OptimizerPartName(ck.OptimizerPart+1, ck.OptimizerParts)), true, ck.WriteOptimizer)
		if err != nil {
			return nil, nil, err
		}
		return []rundir.File{wf}, []namedBytes{{OptimizerIndexName, ck.OptimizerIndex}}, nil
	case ck.WriteOptimizer == nil:
		return nil, []namedBytes{{OptimizerName, ck.Optimizer}}, nil
	}
	if len(ck.Optimizer) > 0 {
		return nil, nil, fmt.Errorf("the checkpoint has both optimiser state bytes and a function streaming it; give one")
	}
	wf, err := writeFile(ctx, storage.Join(dir, OptimizerName), true, ck.WriteOptimizer)
	if err != nil {
		return nil, nil, err
	}
	return []rundir.File{wf}, nil, nil
}

// startHelpers tells h's helpers, when there is anything for them (weight
// shards beyond one, optimiser parts beyond this process's), to write
// their files into dir. It returns which weight shards this process
// writes and the names of the files left to the helpers.
func startHelpers(ctx context.Context, dir string, ck Checkpoint, shards int, h *ShardHelpers) (func(int) bool, map[string]bool, error) {
	all := func(int) bool { return true }
	parts := 0
	if !ck.ServingOnly && ck.OptimizerParts > 1 {
		parts = ck.OptimizerParts
		if ck.OptimizerPart < 0 || ck.OptimizerPart >= parts {
			return nil, nil, fmt.Errorf("optimiser part %d of %d does not exist", ck.OptimizerPart+1, parts)
		}
	}
	if shards <= 1 && parts == 0 {
		return all, nil, nil
	}
	if h == nil {
		if parts > 0 {
			return nil, nil, fmt.Errorf("the optimiser state is split into %d parts and no helpers write the others", parts)
		}
		return all, nil, nil
	}
	helped := map[string]bool{}
	mine := all
	if shards > 1 {
		mine = func(i int) bool { return h.Mine(i, shards) }
		for i := range shards {
			if !mine(i) {
				helped[ShardName(i+1, shards)] = true
			}
		}
	}
	for i := range parts {
		if i != ck.OptimizerPart {
			helped[OptimizerPartName(i+1, parts)] = true
		}
	}
	if err := h.Start(ctx, dir, shards); err != nil {
		return nil, nil, fmt.Errorf("save checkpoint files to %s: %w", dir, err)
	}
	return mine, helped, nil
}

// collectHelpers waits for the files left to h's helpers and checks that
// they are exactly those (helped, by name).
func collectHelpers(ctx context.Context, dir string, h *ShardHelpers, helped map[string]bool) ([]rundir.File, error) {
	if len(helped) == 0 {
		return nil, nil
	}
	got, err := h.Collect(ctx)
	if err != nil {
		return nil, fmt.Errorf("save checkpoint files to %s: %w", dir, err)
	}
	for _, f := range got {
		if !helped[f.Path] {
			return nil, fmt.Errorf("save checkpoint files to %s: a helper reported %s, which is not one of the files left to the helpers", dir, f.Path)
		}
		delete(helped, f.Path)
	}
	if len(helped) > 0 {
		return nil, fmt.Errorf("save checkpoint files to %s: the helpers reported no %v", dir, slices.Sorted(maps.Keys(helped)))
	}
	return got, nil
}

// namedBytes is a small file of a checkpoint: its name and content.
type namedBytes struct {
	name string
	data []byte
}

// trainerStateJSON is trainer_state.json's content (without the final
// newline). A metric that JSON cannot hold (NaN, ±Inf) is an error.
func trainerStateJSON(st TrainerState) ([]byte, error) {
	for k, v := range st.Metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("trainer state metric %q is %g, which JSON cannot hold (drop it or record it as a string elsewhere)", k, v)
		}
	}
	return json.MarshalIndent(st, "", "  ")
}

// sortedNames are the names of files, sorted.
func sortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// writeMasters writes the float32 master weights, master.safetensors,
// into dir.
func writeMasters(ctx context.Context, dir string, tensors []Tensor, md map[string]string) (rundir.File, error) {
	return writeFile(ctx, storage.Join(dir, MasterName), true, func(w io.Writer) error {
		_, err := WriteSafetensors(w, tensors, F32, md)
		return err
	})
}

// ServedTensors are the tensors Save writes into model.safetensors:
// Tensors, with lm_head.weight added as WriteTiedHead asks.
func (ck Checkpoint) ServedTensors() []Tensor {
	if ck.Adapter != nil {
		return nil // a LoRA checkpoint serves its adapter (see Adapter)
	}
	if !ck.WriteTiedHead || !ck.Config.TieWordEmbeddings {
		return ck.Tensors
	}
	var embed *Tensor
	for i, t := range ck.Tensors {
		switch t.Name {
		case "lm_head.weight":
			return ck.Tensors
		case "model.embed_tokens.weight":
			embed = &ck.Tensors[i]
		}
	}
	if embed == nil {
		return ck.Tensors
	}
	return append(slices.Clip(ck.Tensors), Tensor{Name: "lm_head.weight", Shape: embed.Shape, Data: embed.Data})
}

// commit writes _COMMITTED, only if absent, after checking that the run's
// lease (when ctx carries one) still names this writer.
func commit(ctx context.Context, dir string, m marker) error {
	if err := rundir.WriteMarker(ctx, rundir.Committed(dir), m); err != nil {
		if errors.Is(err, storage.ErrExist) {
			return fmt.Errorf("commit checkpoint %s: %w (another writer committed it meanwhile)", dir, ErrExists)
		}
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
	tmp, err := os.MkdirTemp(parent, storage.TempName(filepath.Base(dir)))
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
	// Whatever sits at dir now is uncommitted (checked above). It is
	// replaced only when it is a crashed writer's leftover.
	if entries, err := os.ReadDir(dir); err == nil {
		if err := checkLeftover(dir, entries); err != nil {
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("save checkpoint %s: remove uncommitted leftover: %w", dir, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if err := storage.SyncDir(parent); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	storage.Changed(dir)
	return commit(ctx, dir, m)
}

func saveRemote(ctx context.Context, dir string, ck Checkpoint, opts SaveOptions) error {
	// Objects of an earlier, uncommitted attempt would otherwise linger
	// (say, shards of a different count).
	old, err := storage.List(ctx, storage.Join(dir, "*"))
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", dir, err)
	}
	if len(old) > 0 {
		hasState := false
		for _, p := range old {
			hasState = hasState || storage.Base(p) == TrainerStateName
		}
		if !hasState {
			return fmt.Errorf("save checkpoint %s: the location already holds %d objects and no %s; refusing to overwrite what is not a checkpoint (pick an empty location)", dir, len(old), TrainerStateName)
		}
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

// checkLeftover allows replacing an existing local directory only when it
// is empty or an uncommitted checkpoint (trainer_state.json present, no
// subdirectories), never an unrelated directory passed by mistake.
func checkLeftover(dir string, entries []os.DirEntry) error {
	if len(entries) == 0 {
		return nil
	}
	hasState := false
	for _, e := range entries {
		if e.IsDir() {
			return fmt.Errorf("save checkpoint %s: the directory exists and holds a subdirectory %s; refusing to replace what is not a checkpoint (pick an empty location)", dir, e.Name())
		}
		hasState = hasState || e.Name() == TrainerStateName
	}
	if !hasState {
		return fmt.Errorf("save checkpoint %s: the directory exists, is not empty and holds no %s; refusing to replace what is not a checkpoint (pick an empty location)", dir, TrainerStateName)
	}
	return nil
}

// isOptimizerPart reports whether name has the form of OptimizerPartName.
func isOptimizerPart(name string) bool {
	var i, n int
	_, err := fmt.Sscanf(name, "optimizer-%05d-of-%05d.bin", &i, &n)
	return err == nil && name == OptimizerPartName(i, n)
}
