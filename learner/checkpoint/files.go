package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
)

// File names of the Hugging Face model layout.
const (
	ConfigName       = "config.json"
	WeightsName      = "model.safetensors"
	WeightsIndexName = "model.safetensors.index.json"
)

// DefaultMaxShardBytes is the shard size above which SaveWeights splits the
// weights into several files (Hugging Face's default is 5 GB as well).
const DefaultMaxShardBytes = 5_000_000_000

// SaveOptions control how weights are written.
type SaveOptions struct {
	// DType is the element type on disk: F32 (the default, exact), BF16 or
	// F16 (rounded to nearest, ties to even).
	DType DType
	// MaxShardBytes is the largest shard SaveWeights writes (data bytes);
	// 0 means DefaultMaxShardBytes. A tensor larger than it gets a shard of
	// its own.
	MaxShardBytes int64
	// Metadata is stored in each file's __metadata__; "format": "pt" is
	// added when absent, as transformers expects it.
	Metadata map[string]string
	// Helpers, when set, are other processes holding the same tensors that
	// write some of the weight shards in parallel with this one, when the
	// weights take more than one shard, and the other parts of the
	// optimiser state, when it is split (SaveWith; ignored otherwise).
	Helpers *ShardHelpers
}

// ShardHelpers hand some of a checkpoint's files to other processes, each
// of which holds the same tensors and writes, with WriteShards, into the
// directory the checkpoint is being written into: weight shards, and its
// own part of the optimiser state (Checkpoint.OptimizerParts). The split
// into shards depends on the tensors, the dtype and MaxShardBytes alone,
// so the weight files are the same whoever writes them.
type ShardHelpers struct {
	// Mine reports whether this process writes shard i (0-based) of n
	// itself; the others are the helpers'.
	Mine func(i, n int) bool
	// Start is called with the directory the files go into and the shard
	// count (1 when the weights are one file and only the optimiser
	// state is split), before this process writes its own files: it tells
	// the helpers to write theirs.
	Start func(ctx context.Context, dir string, n int) error
	// Collect returns, once this process wrote its own files, the files
	// the helpers wrote (name, size and sha256 of every shard Mine does
	// not claim and of every other optimiser part). An error fails the
	// save and nothing is committed.
	Collect func(ctx context.Context) ([]rundir.File, error)
}

func (o SaveOptions) withDefaults() SaveOptions {
	if o.DType == "" {
		o.DType = F32
	}
	if o.MaxShardBytes <= 0 {
		o.MaxShardBytes = DefaultMaxShardBytes
	}
	md := map[string]string{"format": "pt"}
	for k, v := range o.Metadata {
		md[k] = v
	}
	o.Metadata = md
	return o
}

// LoadSafetensors reads one safetensors file (local, through a memory map,
// or gs://) and returns its tensors in file order, converted to float32,
// and its metadata.
func LoadSafetensors(ctx context.Context, path string) ([]Tensor, map[string]string, error) {
	r, err := openWeights(ctx, path)
	if err != nil {
		return nil, nil, fmt.Errorf("open safetensors %s: %w", path, err)
	}
	defer r.Close()
	return decodeSafetensors(path, r, r.Size())
}

// weightsReader is a weights file being read.
type weightsReader interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// openWeights opens a weights file: a local one through a memory map
// (openMapped), a gs:// one read whole (objects offer no mapping).
func openWeights(ctx context.Context, path string) (weightsReader, error) {
	if storage.IsRemote(path) {
		return storage.OpenReaderAt(ctx, path)
	}
	return openMapped(path)
}

func decodeSafetensors(path string, r io.ReaderAt, size int64) ([]Tensor, map[string]string, error) {
	return decodeCounting(path, r, size, nil, nil)
}

// decodeCounting is decodeSafetensors decoding into dest's slices (fresh
// ones when nil) and adding, when counts is not nil, each tensor's element
// count to counts[its dtype].
func decodeCounting(path string, r io.ReaderAt, size int64, counts map[DType]int64, dest TensorDest) ([]Tensor, map[string]string, error) {
	h, err := ParseHeader(path, r, size)
	if err != nil {
		return nil, nil, err
	}
	if counts != nil {
		for _, ti := range h.Tensors {
			if es := ti.DType.Size(); es > 0 {
				counts[ti.DType] += (ti.End - ti.Begin) / int64(es)
			}
		}
	}
	ts, err := readTensorsInto(path, r, h, dest)
	if err != nil {
		return nil, nil, err
	}
	return ts, h.Metadata, nil
}

// SaveSafetensors writes tensors as one safetensors file. Locally the file
// is replaced atomically (temporary file, sync, rename); on gs:// the object
// appears when complete.
func SaveSafetensors(ctx context.Context, path string, tensors []Tensor, opts SaveOptions) error {
	opts = opts.withDefaults()
	_, err := writeFile(ctx, path, false, func(w io.Writer) error {
		_, err := WriteSafetensors(w, tensors, opts.DType, opts.Metadata)
		return err
	})
	return err
}

// writeFile writes path through fill, durably, and returns its size and,
// when hashed, its sha256. Local files go through a temporary file renamed
// into place.
func writeFile(ctx context.Context, path string, hashed bool, fill func(io.Writer) error) (rundir.File, error) {
	wf := rundir.File{Path: storage.Base(path)}
	var final func() error
	var w io.Writer
	var abort func()
	if storage.IsRemote(path) {
		// Cancelling the writer's context before Close abandons the upload,
		// so a failed write leaves no truncated object behind.
		wctx, cancel := context.WithCancel(ctx)
		sw, err := storage.Create(wctx, path)
		if err != nil {
			cancel()
			return wf, fmt.Errorf("create %s: %w", path, err)
		}
		w = sw
		final = func() error { defer cancel(); return sw.Close() }
		abort = func() { cancel(); sw.Close() }
	} else {
		dir := filepath.Dir(path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return wf, err
		}
		f, err := os.CreateTemp(dir, storage.TempName(filepath.Base(path)))
		if err != nil {
			return wf, err
		}
		w = f
		abort = func() { f.Close(); os.Remove(f.Name()) }
		final = func() error {
			if err := f.Sync(); err != nil {
				abort()
				return err
			}
			if err := f.Close(); err != nil {
				os.Remove(f.Name())
				return err
			}
			if err := os.Rename(f.Name(), path); err != nil {
				os.Remove(f.Name())
				return err
			}
			return storage.SyncDir(dir)
		}
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	hw := &rundir.HashWriter{W: bw}
	if hashed {
		hw = rundir.NewHashWriter(bw)
	}
	if err := fill(hw); err != nil {
		abort()
		return wf, fmt.Errorf("write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		abort()
		return wf, fmt.Errorf("write %s: %w", path, err)
	}
	if err := final(); err != nil {
		return wf, fmt.Errorf("commit %s: %w", path, err)
	}
	return hw.File(wf.Path), nil
}

func writeBytes(ctx context.Context, path string, b []byte) (rundir.File, error) {
	return writeFile(ctx, path, true, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// shardIndex is model.safetensors.index.json.
type shardIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// ShardName is the Hugging Face name of shard i (1-based) of n.
func ShardName(i, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n)
}

// planShards splits tensors, in order, into runs of at most maxBytes data
// bytes each (a larger tensor alone in its run).
func planShards(tensors []Tensor, es int, maxBytes int64) [][]Tensor {
	var shards [][]Tensor
	var cur []Tensor
	var size int64
	for _, t := range tensors {
		b := int64(len(t.Data) * es)
		if len(cur) > 0 && size+b > maxBytes {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += b
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	return shards
}

// SaveWeights writes tensors into dir in the Hugging Face layout: one
// model.safetensors when they fit in opts.MaxShardBytes, otherwise
// model-0000i-of-0000n.safetensors shards and model.safetensors.index.json.
// It returns the names of the files written (relative to dir).
func SaveWeights(ctx context.Context, dir string, tensors []Tensor, opts SaveOptions) ([]string, error) {
	files, err := saveWeights(ctx, dir, tensors, opts)
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Path
	}
	return names, err
}

func saveWeights(ctx context.Context, dir string, tensors []Tensor, opts SaveOptions) ([]rundir.File, error) {
	shards, opts, err := weightShards(dir, tensors, opts)
	if err != nil {
		return nil, err
	}
	return writeWeights(ctx, dir, shards, opts, func(int) bool { return true })
}

// writeWeights writes the weights split into shards: model.safetensors
// when there is one, else the shards i for which mine(i) holds (the others
// are left to helpers) and model.safetensors.index.json. opts has its
// defaults.
func writeWeights(ctx context.Context, dir string, shards [][]Tensor, opts SaveOptions, mine func(i int) bool) ([]rundir.File, error) {
	if len(shards) == 1 {
		f, err := writeShard(ctx, dir, WeightsName, shards[0], opts)
		if err != nil {
			return nil, err
		}
		return []rundir.File{f}, nil
	}
	idx := shardIndex{Metadata: map[string]any{}, WeightMap: map[string]string{}}
	var total int64
	var out []rundir.File
	for i, ts := range shards {
		name := ShardName(i+1, len(shards))
		for _, t := range ts {
			idx.WeightMap[t.Name] = name
			total += int64(len(t.Data) * opts.DType.Size())
		}
		if !mine(i) {
			continue
		}
		f, err := writeShard(ctx, dir, name, ts, opts)
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	idx.Metadata["total_size"] = total
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return out, err
	}
	f, err := writeBytes(ctx, storage.Join(dir, WeightsIndexName), append(b, '\n'))
	if err != nil {
		return out, err
	}
	return append(out, f), nil
}

// weightShards checks tensors and opts and splits the tensors into the
// shards saveWeights writes; it returns opts with its defaults.
func weightShards(dir string, tensors []Tensor, opts SaveOptions) ([][]Tensor, SaveOptions, error) {
	opts = opts.withDefaults()
	if err := validateSet(tensors); err != nil {
		return nil, opts, fmt.Errorf("save weights to %s: %w", dir, err)
	}
	if opts.DType.Size() == 0 {
		return nil, opts, fmt.Errorf("save weights to %s: dtype %q not supported (use F32, BF16 or F16)", dir, opts.DType)
	}
	return planShards(tensors, opts.DType.Size(), opts.MaxShardBytes), opts, nil
}

// writeShard writes the safetensors file name of dir holding ts.
func writeShard(ctx context.Context, dir, name string, ts []Tensor, opts SaveOptions) (rundir.File, error) {
	return writeFile(ctx, storage.Join(dir, name), true, func(w io.Writer) error {
		_, err := WriteSafetensors(w, ts, opts.DType, opts.Metadata)
		return err
	})
}

// fileSource reads the files of a model directory; a checkpoint's loader
// verifies each file against its commit marker before parsing it.
type fileSource func(ctx context.Context, name string) (io.ReaderAt, int64, error)

// plainSource opens files of dir without verification (local ones
// through a memory map).
func plainSource(dir string, opened *[]io.Closer) fileSource {
	return func(ctx context.Context, name string) (io.ReaderAt, int64, error) {
		r, err := openWeights(ctx, storage.Join(dir, name))
		if err != nil {
			return nil, 0, err
		}
		*opened = append(*opened, r)
		return r, r.Size(), nil
	}
}

// storedDType is the dtype of most elements in counts (F32 when empty); a
// tie goes to the wider type.
func storedDType(counts map[DType]int64) DType {
	best := F32
	for _, d := range []DType{F32, BF16, F16} {
		if counts[d] > counts[best] {
			best = d
		}
	}
	return best
}

// loadWeightsFrom loads model.safetensors, or the shards listed by
// model.safetensors.index.json when that exists, into dest's slices
// (fresh ones when nil).
func loadWeightsFrom(ctx context.Context, dir string, open fileSource, dest TensorDest) ([]Tensor, error) {
	return loadWeightsCounting(ctx, dir, open, nil, dest)
}

// loadWeightsCounting is loadWeightsFrom counting elements by dtype (see
// decodeCounting).
func loadWeightsCounting(ctx context.Context, dir string, open fileSource, counts map[DType]int64, dest TensorDest) ([]Tensor, error) {
	ir, isize, err := open(ctx, WeightsIndexName)
	switch {
	case errors.Is(err, storage.ErrNotExist):
		r, size, err := open(ctx, WeightsName)
		if err != nil {
			return nil, fmt.Errorf("weights in %s: neither %s nor %s can be read: %w", dir, WeightsName, WeightsIndexName, err)
		}
		ts, _, err := decodeCounting(storage.Join(dir, WeightsName), r, size, counts, dest)
		return ts, err
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", storage.Join(dir, WeightsIndexName), err)
	}
	ib := make([]byte, isize)
	if err := readFull(ir, ib, 0); err != nil {
		return nil, fmt.Errorf("read %s: %w", storage.Join(dir, WeightsIndexName), err)
	}
	var idx shardIndex
	if err := json.Unmarshal(ib, &idx); err != nil {
		return nil, fmt.Errorf("%s: not a valid shard index: %w", storage.Join(dir, WeightsIndexName), err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is empty", storage.Join(dir, WeightsIndexName))
	}
	byShard := map[string]map[string]bool{}
	for name, shard := range idx.WeightMap {
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." {
			return nil, fmt.Errorf("%s: tensor %q maps to %q, which is not a file name in the same directory", storage.Join(dir, WeightsIndexName), name, shard)
		}
		if byShard[shard] == nil {
			byShard[shard] = map[string]bool{}
		}
		byShard[shard][name] = true
	}
	shardNames := make([]string, 0, len(byShard))
	for s := range byShard {
		shardNames = append(shardNames, s)
	}
	sort.Strings(shardNames)
	var out []Tensor
	for _, s := range shardNames {
		p := storage.Join(dir, s)
		r, size, err := open(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("shard %s listed in %s: %w", p, WeightsIndexName, err)
		}
		ts, _, err := decodeCounting(p, r, size, counts, dest)
		if err != nil {
			return nil, err
		}
		want := byShard[s]
		for _, t := range ts {
			if !want[t.Name] {
				if other, ok := idx.WeightMap[t.Name]; ok {
					return nil, fmt.Errorf("shard %s holds tensor %q, which %s places in %s", p, t.Name, WeightsIndexName, other)
				}
				return nil, fmt.Errorf("shard %s holds tensor %q, which %s does not list", p, t.Name, WeightsIndexName)
			}
			delete(want, t.Name)
		}
		if len(want) > 0 {
			missing := make([]string, 0, len(want))
			for n := range want {
				missing = append(missing, n)
			}
			sort.Strings(missing)
			return nil, fmt.Errorf("shard %s lacks tensors that %s places there: %v", p, WeightsIndexName, missing)
		}
		out = append(out, ts...)
	}
	return out, nil
}

// LoadWeightsDir loads the weights of a Hugging Face model directory
// (single file or sharded); it does not require a commit marker.
func LoadWeightsDir(ctx context.Context, dir string) ([]Tensor, error) {
	var opened []io.Closer
	defer func() {
		for _, c := range opened {
			c.Close()
		}
	}()
	return loadWeightsFrom(ctx, dir, plainSource(dir, &opened), nil)
}

// loadWeightsDir is LoadWeightsDir also returning the dtype most of the
// weights are stored in (see storedDType).
func loadWeightsDir(ctx context.Context, dir string) ([]Tensor, DType, error) {
	var opened []io.Closer
	defer func() {
		for _, c := range opened {
			c.Close()
		}
	}()
	counts := map[DType]int64{}
	ts, err := loadWeightsCounting(ctx, dir, plainSource(dir, &opened), counts, nil)
	return ts, storedDType(counts), err
}

// bytesSource serves files already read (and verified) into memory.
func bytesSource(files map[string][]byte) fileSource {
	return func(_ context.Context, name string) (io.ReaderAt, int64, error) {
		b, ok := files[name]
		if !ok {
			return nil, 0, fmt.Errorf("%s: %w", name, storage.ErrNotExist)
		}
		return bytes.NewReader(b), int64(len(b)), nil
	}
}

// WeightsPath names the weights of the model directory dir in messages:
// its model.safetensors.index.json when there is one, else its
// model.safetensors.
func WeightsPath(ctx context.Context, dir string) string {
	dir = strings.TrimSuffix(dir, "/")
	if ok, err := storage.Exists(ctx, storage.Join(dir, WeightsIndexName)); err == nil && ok {
		return storage.Join(dir, WeightsIndexName)
	}
	return storage.Join(dir, WeightsName)
}
