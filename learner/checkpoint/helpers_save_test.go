package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
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
