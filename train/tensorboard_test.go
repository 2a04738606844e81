package train

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/demo"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/tfevents"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/runconfig"
)

// writeRecord writes a metrics record as the run writes it.
func writeRecord(t *testing.T, runDir, kind string, k int64, v any) {
	t.Helper()
	if err := writeJSON(context.Background(), rundir.MetricsRecord(runDir, kind, k), v); err != nil {
		t.Fatal(err)
	}
}

func boardLearnRecord(k int64) LearnMetrics {
	return LearnMetrics{Kind: "learn", Step: k, PolicyVersion: k + 1, Trajectories: 16, Tokens: 300,
		Loss: 0.125 + float64(k), GradNorm: 1.5, LR: 3e-4 * float64(k+1), Seconds: 2,
		LossMetrics: map[string]float64{"pg_loss": -0.25, "ext_prob_mean": 0.3},
		Rollout: analytics.RolloutMeta{"trajectories": "16", "reward_mean": "0.4375", "accuracy": "0.4375", "tokens.response": "400",
			"tokens.external": "40", "tokens.guide": "10", "interactions": "6", "interactions.knowledge": "6",
			"interactions.knowledge.ok": "6", "interactions_per_trajectory": "0.375", "seed": "3", "config_hash": "12345"},
		Mismatch: &loss.Mismatch{Tokens: 100, Sequences: 16, AbsMean: 1e-6, AbsMax: 8e-6, KL: -1e-7, KLK3: 2e-9}}
}

// A learner record's scalars: the update, the rollout's headline numbers
// (the external-token share and the interactions per agent derived from
// its counts), the mismatch, the loss terms; not the step's settings.
func TestRecordScalarsOfALearnerStep(t *testing.T) {
	raw, err := json.Marshal(boardLearnRecord(4))
	if err != nil {
		t.Fatal(err)
	}
	step, vals, err := RecordScalars(raw)
	if err != nil || step != 4 {
		t.Fatalf("step %d, %v", step, err)
	}
	got := map[string]float32{}
	for _, v := range vals {
		got[v.Tag] = v.Value
	}
	want := map[string]float32{
		"train/loss": 4.125, "train/lr": float32(3e-4 * 5), "train/grad_norm": 1.5,
		"train/reward_mean": 0.4375, "train/accuracy": 0.4375, "train/interactions_per_trajectory": 0.375,
		"train/external_token_share": 50.0 / 400, "interactions/knowledge": 6.0 / 16, "interactions/verify": 0,
		"interactions/reason": 0, "mismatch/abs_max": 8e-6, "mismatch/kl_k3": 2e-9, "loss/pg_loss": -0.25,
		"rollout/tokens.external": 40, "rollout/interactions.knowledge.ok": 6, "learner/tokens": 300,
	}
	for tag, w := range want {
		if g, ok := got[tag]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", tag, g, ok, w)
		}
	}
	for _, tag := range []string{"rollout/seed", "rollout/config_hash", "rollout/reward_mean"} {
		if _, ok := got[tag]; ok {
			t.Errorf("%s is written", tag)
		}
	}
}

// eventFiles reads every event file of a run's tensorboard/ (local or
// gs://) with the package's reader: each (step, tag) and its values, one
// per occurrence.
func eventFiles(t *testing.T, runDir string) (files []string, seen map[boardKey][]float32) {
	t.Helper()
	ctx := context.Background()
	files, err := storage.List(ctx, storage.Join(TensorBoardDir(runDir), "events.out.tfevents.*"))
	if err != nil {
		t.Fatal(err)
	}
	seen = map[boardKey][]float32{}
	for _, f := range files {
		b, err := storage.ReadFile(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := tfevents.Read(b)
		if err != nil && !errors.Is(err, tfevents.ErrTruncated) {
			t.Fatalf("%s: %v", f, err)
		}
		if len(ev) == 0 || ev[0].FileVersion != tfevents.FileVersion {
			t.Fatalf("%s does not start with the file version event", f)
		}
		for _, e := range ev {
			for _, s := range e.Scalars {
				k := boardKey{e.Step, s.Tag}
				seen[k] = append(seen[k], s.Value)
			}
		}
	}
	return files, seen
}

// expectedScalars is RecordScalars of every metrics file of a run.
func expectedScalars(t *testing.T, runDir string) map[boardKey]float32 {
	t.Helper()
	ctx := context.Background()
	files, err := storage.List(ctx, storage.Join(runDir, "metrics", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[boardKey]float32{}
	for _, f := range files {
		b, err := storage.ReadFile(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		step, vals, err := RecordScalars(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range vals {
			want[boardKey{step, v.Tag}] = v.Value
		}
	}
	return want
}

// checkEventsOnce checks that the run's event files hold every scalar of
// its metrics records once, and nothing else (read with tfevents.Read:
// on gs:// too).
func checkEventsOnce(t *testing.T, runDir, when string) {
	t.Helper()
	want := expectedScalars(t, runDir)
	if len(want) == 0 {
		t.Fatalf("%s: the run has no metrics records", when)
	}
	_, seen := eventFiles(t, runDir)
	for k, w := range want {
		if g := seen[k]; len(g) != 1 || g[0] != w {
			t.Errorf("%s: step %d %s: %v, want %v once", when, k.step, k.tag, g, w)
		}
	}
	for k := range seen {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: step %d %s written, not in the records", when, k.step, k.tag)
		}
	}
}

// commitCheckpoint marks checkpoint k of a run committed, as far as
// checkpoint.List sees.
func commitCheckpoint(t *testing.T, runDir string, k int64) {
	t.Helper()
	p := filepath.Join(checkpoint.Dir(runDir, k), checkpoint.CommittedName)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The board appends each new record's scalars to its process's file; a
// learner record waits for its checkpoint (a killed attempt's record is
// written again by the next); a second process writes nothing already
// written; one that follows a writer killed inside a record writes the
// lost scalars again, in a file of its own, so that every (step, tag) is
// in the directory once.
func TestBoardWritesEachStepOnce(t *testing.T) {
	ctx := context.Background()
	run := t.TempDir()
	cfg := runconfig.Config{Run: runconfig.Run{Dir: run}}
	commitCheckpoint(t, run, 0)
	commitCheckpoint(t, run, 1)
	writeRecord(t, run, "learn", 0, boardLearnRecord(0))
	writeRecord(t, run, "eval", 0, demo.EvalRecord{Kind: "eval", Step: 0, Splits: []demo.SplitScore{{Split: "unseen", Greedy: 0.25, AvgK: 0.125, PassK: 0.5}}})
	var logs []string
	logf := func(s string) { logs = append(logs, s) }
	b := openBoard(cfg, logf)
	b.sync(ctx)
	// Learner step 1's record of an attempt killed before checkpoint 2
	// was committed: not written; the step learned again (another
	// record) and committed: written.
	orphan := boardLearnRecord(1)
	orphan.Seconds = 99
	writeRecord(t, run, "learn", 1, orphan)
	b.sync(ctx)
	if _, seen := eventFiles(t, run); len(seen[boardKey{1, "learner/seconds"}]) != 0 {
		t.Fatalf("learner step 1 written before its checkpoint was committed")
	}
	writeRecord(t, run, "learn", 1, boardLearnRecord(1))
	commitCheckpoint(t, run, 2)
	writeRecord(t, run, "evalbench", 1, analytics.BenchmarkEvalRecord{Kind: analytics.HeldoutKind, Step: 1,
		Benchmarks: []analytics.HeldoutScore{{Name: "aime24", Avg: 0.1, Pass: map[string]float64{"1": 0.1, "4": 0.3}}}})
	b.sync(ctx)
	files, _ := eventFiles(t, run)
	if len(files) != 1 {
		t.Fatalf("one process wrote %d files: %v", len(files), files)
	}
	checkEventsOnce(t, run, "one process")

	// A second process with nothing new writes no file.
	openBoard(cfg, logf).sync(ctx)
	if f, _ := eventFiles(t, run); len(f) != 1 {
		t.Errorf("a process with nothing to write left %d files", len(f))
	}

	// Killed inside its last record (here: the record of step 1, cut).
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], raw[:len(raw)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	openBoard(cfg, logf).sync(ctx)
	if f, _ := eventFiles(t, run); len(f) != 2 {
		t.Errorf("after a cut record: %d files, want the cut one and the next process's", len(f))
	}
	checkEventsOnce(t, run, "after the cut")
	if len(logs) != 0 {
		t.Errorf("notices: %q", logs)
	}

	// A write that fails (here: tensorboard/ is a file) is said once and
	// does not stop the run; the first sync that can write catches up.
	run2 := t.TempDir()
	cfg2 := runconfig.Config{Run: runconfig.Run{Dir: run2}}
	commitCheckpoint(t, run2, 1)
	writeRecord(t, run2, "learn", 0, boardLearnRecord(0))
	if err := os.WriteFile(TensorBoardDir(run2), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	var notes []string
	b2 := openBoard(cfg2, func(s string) { notes = append(notes, s) })
	b2.sync(ctx)
	b2.sync(ctx)
	if len(notes) != 1 || !strings.Contains(notes[0], "training goes on") {
		t.Errorf("notices of a failing write: %q, want one", notes)
	}
	if err := os.Remove(TensorBoardDir(run2)); err != nil {
		t.Fatal(err)
	}
	b2.sync(ctx)
	checkEventsOnce(t, run2, "after a failed write")

	// Off: no board, and a sync of none does nothing.
	off := false
	cfg.Run.TensorBoard = &off
	if b := openBoard(cfg, logf); b != nil {
		t.Fatal("run.tensorboard false opened a board")
	}
	var none *board
	none.sync(ctx)
}
