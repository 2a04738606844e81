package parquetio

import (
	"context"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

// writeTrajectories runs a pipeline that writes rows to dir through the sink
// and checks that it outputs the manifest's path.
func writeTrajectories(t *testing.T, dir string, meta StepMeta, rows []schemas.Trajectory, opts ...WriteOption) {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	out := WriteTrajectories(s, dir, meta, beam.CreateList(s, rows), opts...)
	passert.Equals(s, out, storage.Join(dir, rundir.ManifestName))
	if err := ptest.Run(p); err != nil {
		t.Fatalf("write pipeline for %s failed: %v", dir, err)
	}
}

// listShards returns the base names of every file in dir/shards/.
func listShards(t *testing.T, dir string) []string {
	t.Helper()
	found, err := storage.List(context.Background(), storage.Join(dir, rundir.ShardsName, "*"))
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	names := make([]string, len(found))
	for i, p := range found {
		names[i] = storage.Base(p)
	}
	sort.Strings(names)
	return names
}

// manifestNames returns the base names of the files a manifest lists.
func manifestNames(m schemas.Manifest) []string {
	names := make([]string, len(m.Files))
	for i, f := range m.Files {
		names[i] = storage.Base(f.Path)
	}
	sort.Strings(names)
	return names
}

// TestRoundTrip writes random trajectories through the Beam sink and reads
// them back with the plain Go reader and with the Beam source, on local disk
// and on fake GCS.
func TestRoundTrip(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			dir := rundir.Step(storage.Join(be.root(t), "run-a"), 1)
			rows := randTrajectories(rand.New(rand.NewPCG(1, 2)), 150, 1)
			meta := StepMeta{Run: "run-a", Step: 1, PolicyVersion: 0, Meta: map[string]string{"seed": "1"}}
			writeTrajectories(t, dir, meta, rows, MaxShardRows(40))

			got, m, err := schemas.ReadStep[schemas.Trajectory](ctx, dir)
			if err != nil {
				t.Fatalf("plain reader: %v", err)
			}
			sameRows(t, "plain reader", got, rows)
			if m.Kind != "trajectories" || m.Run != meta.Run || m.Step != meta.Step || m.PolicyVersion != meta.PolicyVersion || !reflect.DeepEqual(m.Meta, meta.Meta) {
				t.Errorf("manifest kind/run/step/policy_version/meta = %q/%q/%d/%d/%v, want trajectories/%q/%d/%d/%v",
					m.Kind, m.Run, m.Step, m.PolicyVersion, m.Meta, meta.Run, meta.Step, meta.PolicyVersion, meta.Meta)
			}
			if m.Rows != int64(len(rows)) || len(m.Files) < 4 {
				t.Errorf("manifest has %d rows in %d files, want %d rows in at least 4 files (MaxShardRows 40)", m.Rows, len(m.Files), len(rows))
			}
			for _, f := range m.Files {
				if f.Rows > 40 {
					t.Errorf("shard %s has %d rows, more than MaxShardRows 40", f.Path, f.Rows)
				}
				if want := rundir.ShardsName + "/" + ContentName(f.SHA256); f.Path != want {
					t.Errorf("shard path %s, want %s (named by its sha256)", f.Path, want)
				}
			}
			if got, want := listShards(t, dir), manifestNames(m); !reflect.DeepEqual(got, want) {
				t.Errorf("files in shards/ = %v, want exactly the manifest's %v", got, want)
			}

			p, s := beam.NewPipelineWithRoot()
			passert.Equals(s, ReadTrajectories(s, dir), beam.CreateList(s, rows))
			if err := ptest.Run(p); err != nil {
				t.Fatalf("Beam source: %v", err)
			}
		})
	}
}

// TestEmptyInput commits a manifest with zero files for an empty input, and
// both readers read zero rows from it.
func TestEmptyInput(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			dir := rundir.Step(be.root(t), 2)
			writeTrajectories(t, dir, StepMeta{Run: "r", Step: 2}, []schemas.Trajectory{})
			got, m, err := schemas.ReadStep[schemas.Trajectory](ctx, dir)
			if err != nil {
				t.Fatalf("plain reader on the empty step: %v", err)
			}
			if len(got) != 0 || len(m.Files) != 0 || m.Rows != 0 {
				t.Fatalf("empty step: read %d rows, manifest lists %d files and %d rows; want 0, 0, 0", len(got), len(m.Files), m.Rows)
			}
			p, s := beam.NewPipelineWithRoot()
			passert.Empty(s, ReadTrajectories(s, dir))
			if err := ptest.Run(p); err != nil {
				t.Fatalf("Beam source on the empty step: %v", err)
			}
		})
	}
}

// TestSameInputSameNames runs the same write pipeline twice over the same
// input into the same directory: the second run produces the same shard
// names and bytes, and leaves nothing else in shards/.
func TestSameInputSameNames(t *testing.T) {
	ctx := context.Background()
	dir := rundir.Step(t.TempDir(), 3)
	rows := randTrajectories(rand.New(rand.NewPCG(3, 4)), 90, 3)
	meta := StepMeta{Run: "run-a", Step: 3, PolicyVersion: 2}
	writeTrajectories(t, dir, meta, rows, MaxShardRows(25))
	first, err := schemas.ReadManifest(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeTrajectories(t, dir, meta, rows, MaxShardRows(25))
	second, err := schemas.ReadManifest(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first.Files, second.Files) {
		t.Fatalf("second run over the same input wrote different shards:\nfirst  %v\nsecond %v", first.Files, second.Files)
	}
	if got, want := listShards(t, dir), manifestNames(second); !reflect.DeepEqual(got, want) {
		t.Errorf("files in shards/ after the rerun = %v, want exactly the manifest's %v", got, want)
	}
}

// TestOrphansNotRead leaves, before the write, a valid shard that no
// manifest lists (a failed bundle attempt) and a temporary file in shards/:
// readers never return their rows, and the commit removes them (or keeps
// them with KeepOrphans).
func TestOrphansNotRead(t *testing.T) {
	ctx := context.Background()
	for _, keep := range []bool{false, true} {
		dir := rundir.Step(t.TempDir(), 4)
		orphan := storage.Join(dir, rundir.ShardsName, "part-00000000000000000000000000000000.parquet")
		if _, err := schemas.WriteShard(ctx, orphan, randTrajectories(rand.New(rand.NewPCG(9, 9)), 5, 4)); err != nil {
			t.Fatal(err)
		}
		tmp := storage.Join(dir, rundir.ShardsName, ".tmp-0123456789abcdef.parquet")
		if err := storage.WriteAtomic(ctx, tmp, []byte("PAR1 half a shard")); err != nil {
			t.Fatal(err)
		}
		rows := randTrajectories(rand.New(rand.NewPCG(5, 6)), 30, 4)
		var opts []WriteOption
		if keep {
			opts = append(opts, KeepOrphans())
		}
		writeTrajectories(t, dir, StepMeta{Run: "run-a", Step: 4}, rows, opts...)
		got, m, err := schemas.ReadStep[schemas.Trajectory](ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		sameRows(t, "rows read beside orphan shards", got, rows)
		want := manifestNames(m)
		if keep {
			want = append(want, storage.Base(orphan), storage.Base(tmp))
			sort.Strings(want)
		}
		if got := listShards(t, dir); !reflect.DeepEqual(got, want) {
			t.Errorf("KeepOrphans=%v: files in shards/ = %v, want %v", keep, got, want)
		}
	}
}

// TestRepeatedShards writes one row per shard with some rows repeated, so
// that several shards have identical content (and name): each copy is kept.
func TestRepeatedShards(t *testing.T) {
	ctx := context.Background()
	dir := rundir.Step(t.TempDir(), 5)
	base := randTrajectories(rand.New(rand.NewPCG(7, 8)), 3, 5)
	rows := []schemas.Trajectory{base[0], base[1], base[0], base[2], base[0], base[1]}
	writeTrajectories(t, dir, StepMeta{Run: "run-a", Step: 5}, rows, MaxShardRows(1))
	got, m, err := schemas.ReadStep[schemas.Trajectory](ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, "rows with repeats", got, rows)
	if len(m.Files) != len(rows) {
		t.Errorf("manifest lists %d files, want %d (one per row with MaxShardRows 1)", len(m.Files), len(rows))
	}
}
