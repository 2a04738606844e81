package parquetio

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

// readErr runs a pipeline that reads dirs with the Beam source and returns
// its error, failing the test if it succeeds.
func readErr(t *testing.T, dirs ...string) string {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	passert.Count(s, ReadTrajectories(s, dirs...), "rows", 0)
	err := ptest.Run(p)
	if err == nil {
		t.Fatalf("reading %v succeeded, want an error", dirs)
	}
	// The runner's error holds the whole plan; log only the DoFn's message.
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.Contains(line, "parquetio:") {
			t.Logf("the source failed as expected: %s", strings.TrimSpace(line))
		}
	}
	return err.Error()
}

// TestMissingManifest: a step with shards but no manifest (its writer was
// killed before the commit) fails the source with an error naming the
// directory and saying that the step is not committed.
func TestMissingManifest(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			dir := rundir.Step(be.root(t), 6)
			shard := storage.Join(dir, rundir.ShardsName, "part-00000.parquet")
			if _, err := schemas.WriteShard(ctx, shard, randTrajectories(rand.New(rand.NewPCG(1, 1)), 3, 6)); err != nil {
				t.Fatal(err)
			}
			msg := readErr(t, dir)
			if !strings.Contains(msg, dir) || !strings.Contains(msg, schemas.ErrNoManifest.Error()) {
				t.Fatalf("error does not name %s and %q:\n%s", dir, schemas.ErrNoManifest, msg)
			}
		})
	}
}

// TestCorruptShard flips one byte in a committed shard: the source fails
// with an error naming that shard.
func TestCorruptShard(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			dir := rundir.Step(be.root(t), 7)
			rows := randTrajectories(rand.New(rand.NewPCG(2, 2)), 20, 7)
			m, err := schemas.WriteStep(ctx, dir, [][]schemas.Trajectory{rows[:10], rows[10:]}, schemas.Manifest{Run: "run-a", Step: 7})
			if err != nil {
				t.Fatal(err)
			}
			bad := storage.Join(dir, m.Files[1].Path)
			b, err := storage.ReadFile(ctx, bad)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x40
			if err := storage.WriteAtomic(ctx, bad, b); err != nil {
				t.Fatal(err)
			}
			msg := readErr(t, dir)
			if !strings.Contains(msg, bad) || !strings.Contains(msg, "corrupt") {
				t.Fatalf("error does not report %s as corrupt:\n%s", bad, msg)
			}
		})
	}
}

// TestPromptsAndEvalRecords round-trips the other two row types through the
// sink and the source in one pipeline each, and checks that reading a step
// as the wrong kind fails.
func TestPromptsAndEvalRecords(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	prompts, evals := randPrompts(rng, 60), randEvalRecords(rng, 70)
	pdir, edir := storage.Join(root, "prompts"), storage.Join(root, "eval")

	p, s := beam.NewPipelineWithRoot()
	WritePrompts(s, pdir, StepMeta{Run: "data"}, beam.CreateList(s, prompts), MaxShardRows(16))
	WriteEvalRecords(s, edir, StepMeta{Run: "run-a", Step: 3, PolicyVersion: 3}, beam.CreateList(s, evals), MaxShardRows(16))
	if err := ptest.Run(p); err != nil {
		t.Fatalf("write pipeline: %v", err)
	}
	gotP, mp, err := schemas.ReadStep[schemas.Prompt](ctx, pdir)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, "prompts, plain reader", gotP, prompts)
	gotE, me, err := schemas.ReadStep[schemas.EvalRecord](ctx, edir)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, "eval records, plain reader", gotE, evals)
	if mp.Kind != "prompts" || me.Kind != "eval" {
		t.Errorf("manifest kinds %q and %q, want prompts and eval", mp.Kind, me.Kind)
	}

	p, s = beam.NewPipelineWithRoot()
	passert.Equals(s, ReadPrompts(s, pdir), beam.CreateList(s, prompts))
	passert.Equals(s, ReadEvalRecords(s, edir), beam.CreateList(s, evals))
	if err := ptest.Run(p); err != nil {
		t.Fatalf("Beam source: %v", err)
	}

	msg := readErr(t, pdir)
	if !strings.Contains(msg, pdir) || !strings.Contains(msg, "holds prompts, not trajectories") {
		t.Fatalf("reading prompts as trajectories: error does not say so:\n%s", msg)
	}
}
