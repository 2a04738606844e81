package train

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/schemas"
)

// oldRun is a quick demo written by the build of commit 0a26aea, before
// the run directory had one owning package: its markers (_MANIFEST.json,
// _COMMITTED) and records as that build wrote them, cut back to where a
// kill during step 2's rollout leaves a run (steps 0 and 1 committed,
// checkpoint 0 the only one kept, the derived analysis, report and
// TensorBoard files not yet written). Should configs/quick.yaml change,
// so that the run no longer matches the embedded demo, write it again
// with that build and cut it back the same way.
const oldRun = "testdata/run-0a26aea"

// A run written by an earlier build resumes with this one: its committed
// steps are read (their markers verify) and kept as they are, the learner
// replays steps 0 and 1 from checkpoint 0, and the run goes on to step 2,
// checkpoint 3, the final evaluation and the derived files. The final
// weights are not compared with a figure: steps 0 and 1 were sampled on
// another machine's kernels, so no run here gives them.
func TestRunOfAnEarlierBuildResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("resumes the quick demo")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "run")
	copyRun(t, oldRun, dir)
	before := []string{}
	for k := range int64(2) {
		sum, _ := stepDigest(t, oldRun, k)
		before = append(before, sum)
	}
	if _, err := runDemo(claimed(t, ctx, dir), demoOptions{RunDir: dir, Quick: true, Log: func(s string) { t.Log(s) }}); err != nil {
		t.Fatalf("resuming %s: %v", oldRun, err)
	}
	cfg, err := demoConfig(demoOptions{RunDir: dir, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	for k := range cfg.Run.Steps {
		sum, n := stepDigest(t, dir, k)
		if want := cfg.Data.BatchSize * cfg.Rollout.GroupSize; n != want {
			t.Errorf("step %d holds %d trajectories, want %d", k, n, want)
		}
		if k < int64(len(before)) && sum != before[k] {
			t.Errorf("step %d, committed by the earlier build, changed when the run resumed", k)
		}
	}
	if got, err := checkpoint.List(ctx, dir); err != nil || !slices.Equal(got, []int64{0, cfg.Run.Steps}) {
		t.Errorf("checkpoints after the resume: %v (%v), want [0 %d]", got, err, cfg.Run.Steps)
	}
	if _, err := schemas.ReadManifest(ctx, rundir.Step(dir, 0)); err != nil {
		t.Errorf("the earlier build's manifest of step 0: %v", err)
	}
	checkMetricsRebuilt(t, dir, "the resumed run of "+oldRun)
	rep := readReportDigest(t, dir)
	if len(rep.Evals) != 2 || !slices.Equal(rep.Learn, []int64{0, 1, 2}) {
		t.Errorf("the report holds %d evaluations and learner steps %v, want 2 (checkpoints 0 and %d) and [0 1 2]", len(rep.Evals), rep.Learn, cfg.Run.Steps)
	}
}
