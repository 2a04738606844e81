package schemas

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// roundTrip writes rows as a step under dir in shards of per rows and reads
// them back through ReadStep and shard by shard through OpenStep.
func roundTrip(t *testing.T, dir string, rows []Trajectory, per int) {
	t.Helper()
	ctx := context.Background()
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			t.Fatalf("generated row %d is invalid: %v", i, err)
		}
	}
	m, err := WriteStep(ctx, dir, splitRows(rows, per), Manifest{Run: "rt", Step: 7, PolicyVersion: 6})
	if err != nil {
		t.Fatalf("WriteStep %s: %v", dir, err)
	}
	if m.Rows != int64(len(rows)) || m.Kind != "trajectories" || m.Step != 7 {
		t.Fatalf("manifest: rows %d kind %q step %d, want %d trajectories step 7", m.Rows, m.Kind, m.Step, len(rows))
	}
	got, gm, err := ReadStep[Trajectory](ctx, dir)
	if err != nil {
		t.Fatalf("ReadStep %s: %v", dir, err)
	}
	if gm.Rows != m.Rows || len(gm.Files) != len(m.Files) {
		t.Fatalf("ReadStep manifest: %d rows in %d files, want %d in %d", gm.Rows, len(gm.Files), m.Rows, len(m.Files))
	}
	checkRowsEqual(t, "ReadStep "+dir, rows, got)

	s, err := OpenStep(ctx, dir)
	if err != nil {
		t.Fatalf("OpenStep %s: %v", dir, err)
	}
	var all []Trajectory
	for i := range s.NumFiles() {
		b, err := s.ReadFile(ctx, i)
		if err != nil {
			t.Fatalf("Step.ReadFile(%d): %v", i, err)
		}
		bulk, err := ReadTrajectoriesBulk(b)
		if err != nil {
			t.Fatalf("ReadTrajectoriesBulk(shard %d): %v", i, err)
		}
		gen, err := readGeneric[Trajectory](b)
		if err != nil {
			t.Fatalf("generic reader (shard %d): %v", i, err)
		}
		checkRowsEqual(t, fmt.Sprintf("bulk vs generic reader, shard %d", i), gen, bulk)
		all = append(all, bulk...)
	}
	checkRowsEqual(t, "OpenStep + ReadFile "+dir, rows, all)
}

func TestRoundTripLocal(t *testing.T) {
	rows := randomTrajectories(1, 600)
	// Shards of 250 rows hold one row group of several pages per list column;
	// the second step's single shard spans two row groups.
	roundTrip(t, rundir.Step(filepath.Join(t.TempDir(), "run"), 7), rows, 250)
	big := randomTrajectories(2, RowGroupRows+300)
	roundTrip(t, rundir.Step(filepath.Join(t.TempDir(), "run"), 8), big, len(big))
}

func TestRoundTripEmptyStep(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "step-000000")
	if _, err := WriteStep(ctx, dir, [][]Trajectory{{}}, Manifest{}); err != nil {
		t.Fatalf("WriteStep with an empty shard: %v", err)
	}
	got, m, err := ReadStep[Trajectory](ctx, dir)
	if err != nil {
		t.Fatalf("ReadStep: %v", err)
	}
	if len(got) != 0 || m.Rows != 0 || len(m.Files) != 1 {
		t.Fatalf("empty step: %d rows, manifest rows %d files %d; want 0, 0, 1", len(got), m.Rows, len(m.Files))
	}
}

func TestRoundTripPromptsAndEval(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 3))
	prompts := make([]Prompt, 300)
	evals := make([]EvalRecord, 300)
	for i := range prompts {
		prompts[i] = Prompt{SchemaVersion: SchemaVersion, ID: fmt.Sprint("p", i), DataSource: "math/dapo",
			Problem: randText(rng, 30), Answer: fmt.Sprint(rng.IntN(1000)), Extra: `{"level":3}`}
		if i%2 == 0 {
			prompts[i].Solution = randText(rng, 50)
		}
		evals[i] = EvalRecord{SchemaVersion: SchemaVersion, Run: "r", Checkpoint: "step-000010", Benchmark: "aime24",
			ProblemID: fmt.Sprint(i / 4), SampleIndex: int32(i % 4), Seed: int64(i), Prompt: randText(rng, 20),
			Response: randText(rng, 200), Extracted: "42", Answer: "42", Correct: i%3 == 0, Score: float32(i%3) / 2,
			Verdict: "equal", FinishReason: sampling.FinishEOS, ResponseLen: int32(rng.IntN(4000)), LatencyMs: 12.5}
	}
	pdir := filepath.Join(t.TempDir(), "prompts")
	if _, err := WriteStep(ctx, pdir, splitRows(prompts, 128), Manifest{}); err != nil {
		t.Fatal(err)
	}
	gp, _, err := ReadStep[Prompt](ctx, pdir)
	if err != nil {
		t.Fatalf("ReadStep[Prompt]: %v", err)
	}
	checkRowsEqual(t, "prompts", prompts, gp)

	edir := filepath.Join(t.TempDir(), "eval")
	if _, err := WriteStep(ctx, edir, splitRows(evals, 100), Manifest{}); err != nil {
		t.Fatal(err)
	}
	ge, _, err := ReadStep[EvalRecord](ctx, edir)
	if err != nil {
		t.Fatalf("ReadStep[EvalRecord]: %v", err)
	}
	checkRowsEqual(t, "eval records", evals, ge)

	// A step of another kind is refused by name.
	_, _, err = ReadStep[Trajectory](ctx, edir)
	if err == nil || !strings.Contains(err.Error(), "holds eval, not trajectories") {
		t.Fatalf("ReadStep[Trajectory] on an eval step: err %v, want one saying it holds eval", err)
	}
}

// startFakeGCS runs fake-gcs-server in process on 127.0.0.1, points
// STORAGE_EMULATOR_HOST at it and creates bucket.
func startFakeGCS(t *testing.T, bucket string) {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http", Host: "127.0.0.1", PublicHost: "127.0.0.1", Writer: discard{},
	})
	if err != nil {
		t.Fatalf("start fake-gcs-server: %v", err)
	}
	t.Cleanup(srv.Stop)
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatalf("fake-gcs-server URL %q: %v", srv.URL(), err)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", u.Host)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestRoundTripGCS(t *testing.T) {
	startFakeGCS(t, "aipo-test")
	rows := randomTrajectories(4, 300)
	dir := rundir.Step("gs://aipo-test/runs/rt", 7)
	roundTrip(t, dir, rows, 100)

	ctx := context.Background()
	shards, err := storage.List(ctx, dir+"/"+rundir.ShardsName+"/part-*.parquet")
	if err != nil || len(shards) != 3 {
		t.Fatalf("list shards on gs://: %v %v, want 3 files", shards, err)
	}
	// A missing manifest on gs:// is ErrNoManifest, as locally.
	_, _, err = ReadStep[Trajectory](ctx, rundir.Step("gs://aipo-test/runs/rt", 8))
	if !errors.Is(err, ErrNoManifest) {
		t.Fatalf("ReadStep of an uncommitted gs:// step: %v, want ErrNoManifest", err)
	}
}
