package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/optim"
)

// A checkpoint whose shards are split among 3 writers (this one writes
// shard i when i mod 3 is 0, two helpers WriteShards the rest into the
// directory Start names) is the one SaveWith writes alone, every file's
// name, size and sha256 in its marker the same; a helper that fails
// leaves the checkpoint uncommitted, its error in SaveWith's.
func TestSaveWithHelpers(t *testing.T) {
	ctx := context.Background()
	ck := tinyCheckpoint(3)
	base := SaveOptions{DType: BF16, MaxShardBytes: 128}
	n, err := WeightShards(ck, base)
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("the test checkpoint takes %d shards at %d bytes; want at least 4", n, base.MaxShardBytes)
	}
	const writers = 3
	owner := func(r int) func(i, n int) bool { return func(i, _ int) bool { return i%writers == r } }
	helped := func(fail error) (SaveOptions, *[]int) {
		var dir string
		var started []int
		o := base
		o.Helpers = &ShardHelpers{
			Mine:  owner(0),
			Start: func(_ context.Context, d string, n int) error { dir = d; started = append(started, n); return nil },
			Collect: func(ctx context.Context) ([]rundir.File, error) {
				var out []rundir.File
				for r := 1; r < writers; r++ {
					fs, err := WriteShards(ctx, dir, ck, base, owner(r))
					if err != nil {
						return nil, err
					}
					if r == writers-1 && fail != nil {
						return nil, fail
					}
					out = append(out, fs...)
				}
				return out, nil
			},
		}
		return o, &started
	}

	alone := filepath.Join(t.TempDir(), "alone")
	if err := SaveWith(ctx, alone, ck, base); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "helped")
	opts, started := helped(nil)
	if err := SaveWith(ctx, dir, ck, opts); err != nil {
		t.Fatal(err)
	}
	if len(*started) != 1 || (*started)[0] != n {
		t.Errorf("Start was called with shard counts %v, want [%d]", *started, n)
	}
	a, err := readMarker(ctx, alone)
	if err != nil {
		t.Fatal(err)
	}
	h, err := readMarker(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Files) != len(h.Files) {
		t.Fatalf("helped checkpoint lists %d files, alone %d", len(h.Files), len(a.Files))
	}
	shards := 0
	for i := range a.Files {
		if a.Files[i] != h.Files[i] {
			t.Errorf("file %d: helped %+v, alone %+v", i, h.Files[i], a.Files[i])
		}
		if strings.HasPrefix(h.Files[i].Path, "model-") {
			shards++
		}
	}
	if shards != n {
		t.Errorf("the marker lists %d shards, want %d", shards, n)
	}
	got, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, ck, got)

	// A helper's failure: nothing committed, the failure named.
	failed := filepath.Join(t.TempDir(), "failed")
	opts, _ = helped(errors.New("rank 2: write model-00003-of-00005.safetensors: disk full"))
	err = SaveWith(ctx, failed, ck, opts)
	if err == nil || !strings.Contains(err.Error(), "rank 2: write model-00003") {
		t.Fatalf("a helper's failure: %v, want it named", err)
	}
	if ok, cerr := Committed(ctx, failed); cerr != nil || ok {
		t.Errorf("after a helper's failure the checkpoint is committed=%v (%v), want uncommitted", ok, cerr)
	}
	if _, serr := os.Stat(failed); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("after a helper's failure %s exists (%v); the temporary directory should be gone", failed, serr)
	}

	// A helper reporting fewer shards than it was left.
	short := filepath.Join(t.TempDir(), "short")
	opts = base
	opts.Helpers = &ShardHelpers{Mine: owner(0), Start: func(context.Context, string, int) error { return nil },
		Collect: func(context.Context) ([]rundir.File, error) { return nil, nil }}
	if err := SaveWith(ctx, short, ck, opts); err == nil || !strings.Contains(err.Error(), "reported no") {
		t.Errorf("helpers reporting nothing: %v, want the missing shards named", err)
	}
}

// An optimiser state written in parts by 3 writers (this one part 1, two
// helpers the others, beside their weight shards) is listed by the marker
// and the index, and reads back as the one-process state: Load's bytes
// and OpenOptimizer's stream are those of the whole file, a rank's range
// comes from the parts that hold it, and a damaged part fails the read,
// named.
func TestSaveOptimizerParts(t *testing.T) {
	ctx := context.Background()
	ck := tinyCheckpoint(3)
	base := SaveOptions{DType: BF16, MaxShardBytes: 128}
	whole, tensors, m, v := optimizerState(t, ck)
	var total int64
	for _, ts := range tensors {
		total += int64(ts.Numel)
	}
	const writers = 3
	bounds := []int64{0, total / 3, total / 3, total} // the second part empty
	idx := optim.NewPartIndex(4, tensors, bounds, OptimizerPartName)
	ib, err := json.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	part := func(r int) Checkpoint {
		c := ck
		c.OptimizerParts, c.OptimizerPart, c.OptimizerIndex, c.Optimizer = writers, r, ib, nil
		c.WriteOptimizer = func(w io.Writer) error {
			p := optim.Part{Index: r + 1, Of: writers, Start: bounds[r], End: bounds[r+1]}
			_, err := optim.WritePart(w, 4, optim.DefaultConfig(), p, tensors, func(ti, moment, off int, vals []float32) error {
				src := m[ti]
				if moment == 1 {
					src = v[ti]
				}
				copy(vals, src[off:])
				return nil
			})
			return err
		}
		return c
	}
	owner := func(r int) func(i, n int) bool { return func(i, _ int) bool { return i%writers == r } }
	var into string
	var parts []rundir.File
	opts := base
	opts.Helpers = &ShardHelpers{
		Mine:  owner(0),
		Start: func(_ context.Context, d string, n int) error { into = d; return nil },
		Collect: func(ctx context.Context) ([]rundir.File, error) {
			var out []rundir.File
			for r := 1; r < writers; r++ {
				fs, err := WriteShards(ctx, into, part(r), base, owner(r))
				if err != nil {
					return nil, err
				}
				out = append(out, fs...)
			}
			for _, f := range out {
				if strings.HasPrefix(f.Path, "optimizer-") {
					parts = append(parts, f)
				}
			}
			return out, nil
		},
	}
	dir := filepath.Join(t.TempDir(), "parts")
	if err := SaveWith(ctx, dir, part(0), opts); err != nil {
		t.Fatal(err)
	}
	if len(parts) != writers-1 {
		t.Errorf("the helpers wrote optimiser parts %v, want %d", parts, writers-1)
	}
	mk, err := readMarker(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{OptimizerIndexName, OptimizerPartName(1, 3), OptimizerPartName(2, 3), OptimizerPartName(3, 3)} {
		if !mk.lists(name) {
			t.Errorf("the marker does not list %s", name)
		}
	}
	if mk.lists(OptimizerName) {
		t.Errorf("the marker lists %s beside the parts", OptimizerName)
	}
	if full, err := Full(ctx, dir); err != nil || !full {
		t.Errorf("Full: %v, %v; want a full checkpoint", full, err)
	}
	got, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Optimizer, whole) {
		t.Errorf("Load's optimiser state is %d bytes, not the one-process file's %d", len(got.Optimizer), len(whole))
	}
	rc, err := OpenOptimizer(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	streamed, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(streamed, whole) {
		t.Errorf("OpenOptimizer: %d bytes, %v; want the one-process file's %d", len(streamed), err, len(whole))
	}
	op, err := OpenOptimizerParts(ctx, dir)
	if err != nil || op == nil {
		t.Fatalf("OpenOptimizerParts: %v, %v", op, err)
	}
	lo, hi := total/3-2, total/3+5
	seen := 0
	if err := optim.ReadParts(op.Index, lo, hi, op.Open, func(ti, moment, off int, vals []float32) error {
		src := m[ti]
		if moment == 1 {
			src = v[ti]
		}
		for i, x := range vals {
			if x != src[off+i] {
				t.Fatalf("ReadParts: tensor %d moment %d element %d is %g, want %g", ti, moment, off+i, x, src[off+i])
			}
		}
		seen += len(vals)
		return nil
	}); err != nil || seen != int(2*(hi-lo)) {
		t.Errorf("ReadParts of [%d, %d): %d values, %v", lo, hi, seen, err)
	}

	// A part damaged on disk: the stream fails naming the file.
	p3 := filepath.Join(dir, OptimizerPartName(3, 3))
	b, err := os.ReadFile(p3)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(p3, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err = OpenOptimizer(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	rc.Close()
	if err == nil || !strings.Contains(err.Error(), OptimizerPartName(3, 3)) {
		t.Errorf("a damaged part: %v, want an error naming %s", err, OptimizerPartName(3, 3))
	}

	// Parts without helpers to write them.
	if err := SaveWith(ctx, filepath.Join(t.TempDir(), "alone"), part(0), base); err == nil || !strings.Contains(err.Error(), "no helpers write the others") {
		t.Errorf("parts without helpers: %v", err)
	}
}

// optimizerState is the AdamW state after one step on ck's tensors, as
// one process's file and as its tensors and moments.
func optimizerState(t *testing.T, ck Checkpoint) ([]byte, []optim.TensorState, [][]float32, [][]float32) {
	o, err := optim.New(optim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var params []optim.Param
	for _, ts := range ck.Tensors {
		g := make([]float32, len(ts.Data))
		for i := range g {
			g[i] = float32(i%7) - 3
		}
		params = append(params, optim.Param{Name: ts.Name, Data: append([]float32(nil), ts.Data...), Grad: g})
	}
	for range 4 {
		o.Step(params)
	}
	whole, err := o.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	var tensors []optim.TensorState
	var m, v [][]float32
	if _, err := optim.ReadState(bytes.NewReader(whole), func(_ int64, ts []optim.TensorState) error {
		tensors = ts
		for _, x := range ts {
			m, v = append(m, make([]float32, x.Numel)), append(v, make([]float32, x.Numel))
		}
		return nil
	}, func(ti, moment, off int, vals []float32) error {
		dst := m[ti]
		if moment == 1 {
			dst = v[ti]
		}
		copy(dst[off:], vals)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return whole, tensors, m, v
}
