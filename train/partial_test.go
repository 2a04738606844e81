package train

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
)

// The quick demo, asynchronous with partial rollouts on the in-process
// engine: one engine serves every step and is advanced to each new
// checkpoint while the next step's rollout may still be sampling. No
// sample is lost (every step holds batch x group trajectories); step k's
// policy tokens come from versions k-1 and k only (step 0's from 0); the
// learner's staleness record counts exactly the step's trained policy
// tokens by version; and the tokens of the checkpoint the learner updates
// (lag 0, continuations included) carry the behaviour log-probs the
// learner computes for them, to float32 noise. Whether a push lands while
// a sample generates depends on timing (the demo's responses are short,
// its rollouts mostly the pipeline's own work): the interruption itself
// is forced in serve's TestPartialRolloutAcrossReload; here its count is
// logged and held against the samples that mix versions.
func TestQuickDemoPartialRollouts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir() + "/partial"
	ctx = claimed(t, ctx, dir)
	mutate := func(c *runconfig.Config) { c.Run.Async, c.Rollout.Partial = true, true }
	if _, err := runDemo(ctx, demoOptions{RunDir: dir, Quick: true, Mutate: mutate, Log: func(s string) { t.Log(s) }}); err != nil {
		t.Fatal(err)
	}
	cfg, err := demoConfig(demoOptions{RunDir: dir, Quick: true, Mutate: mutate})
	if err != nil {
		t.Fatal(err)
	}
	interrupted, mixed := int64(0), 0
	for k := int64(0); k < cfg.Run.Steps; k++ {
		trajs, m, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(dir, k))
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		if want := int64(cfg.Data.BatchSize * cfg.Rollout.GroupSize); m.Rows != want {
			t.Errorf("step %d holds %d trajectories, want %d (none dropped)", k, m.Rows, want)
		}
		st, err := records.ReadStepStats(m.Meta)
		if err != nil {
			t.Fatal(err)
		}
		interrupted += st.PolicyInterrupted
		versions := map[string]int{}
		for _, tr := range trajs {
			if tr.FinishReason == schemas.FinishError {
				continue
			}
			seen := map[int64]bool{}
			for i, v := range tr.TokenVersions() {
				if v != max(k-1, 0) && v != k {
					t.Fatalf("step %d trajectory %s/%d token %d has version %d, want %d or %d", k, tr.PromptID, tr.SampleIndex, i, v, max(k-1, 0), k)
				}
				if tr.TokenSource[i] == schemas.SourcePolicy {
					seen[v] = true
					if len(tr.PromptIDs) > 0 {
						versions[records.LagKey(v)]++
					}
				}
			}
			if len(seen) > 1 {
				mixed++
			}
		}
		var lm records.Learn
		b, err := storage.ReadFile(ctx, rundir.MetricsRecord(dir, rundir.LearnKind, k))
		if err == nil {
			err = json.Unmarshal(b, &lm)
		}
		if err != nil {
			t.Fatalf("learner record of step %d: %v", k, err)
		}
		sl := lm.Staleness
		if sl == nil {
			t.Fatalf("step %d: the learner record has no staleness", k)
		}
		for v, n := range versions {
			if sl.Versions[v] != n {
				t.Errorf("step %d: the learner counts %v policy tokens by version, the trajectories hold %v", k, sl.Versions, versions)
				break
			}
		}
		if lag0, ok := sl.MismatchByLag["0"]; ok && lag0.AbsMax > 1e-4 {
			t.Errorf("step %d: tokens of the updated checkpoint (lag 0) differ from the learner's log-probs by up to %g, want float32 noise (<= 1e-4)", k, lag0.AbsMax)
		}
	}
	t.Logf("%d policy calls interrupted by a weight push, %d trajectories with tokens of two versions", interrupted, mixed)
	if int(interrupted) < mixed {
		t.Errorf("%d trajectories mix versions, but only %d calls were interrupted", mixed, interrupted)
	}
}
