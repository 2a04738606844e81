package train

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
)

// partialSplit makes a demo run asynchronous with deterministic partial
// rollouts: each sample of step k takes its first tokens policy tokens
// from checkpoint k-1 and the rest from checkpoint k.
func partialSplit(tokens int) func(*runconfig.Config) {
	return func(c *runconfig.Config) {
		c.Run.Async, c.Rollout.Partial, c.Rollout.PartialTokens = true, true, tokens
	}
}

// checkSplit fails the test unless every policy token of the run's
// committed steps was sampled by the version rollout.partial_tokens
// assigns it: step k's first tokens policy tokens of each sample by
// version k-1, the rest by version k (step 0's all by version 0). It
// returns, per step, the samples whose policy tokens come from two
// versions.
func checkSplit(t *testing.T, dir string, cfg runconfig.Config) []int {
	t.Helper()
	n := cfg.Rollout.PartialTokens
	mixed := make([]int, cfg.Run.Steps)
	for k := range cfg.Run.Steps {
		trajs, m, err := schemas.ReadStep[schemas.Trajectory](context.Background(), rundir.Step(dir, k))
		if err != nil {
			t.Fatalf("%s step %d: %v", dir, k, err)
		}
		st, err := records.ReadStepStats(m.Meta)
		if err != nil {
			t.Fatalf("%s step %d: %v", dir, k, err)
		}
		for _, tr := range trajs {
			if tr.FinishReason == schemas.FinishError {
				t.Fatalf("%s step %d: trajectory %s/%d failed", dir, k, tr.PromptID, tr.SampleIndex)
			}
			policy := 0
			for i, v := range tr.TokenVersions() {
				if tr.TokenSource[i] != schemas.SourcePolicy {
					continue
				}
				want := k
				if k > 0 && policy < n {
					want = k - 1
				}
				if v != want {
					t.Fatalf("%s step %d trajectory %s/%d: policy token %d (response token %d) has version %d, want %d (rollout.partial_tokens %d)", dir, k, tr.PromptID, tr.SampleIndex, policy, i, v, want, n)
				}
				policy++
			}
			if k > 0 && policy > n {
				mixed[k]++
			}
		}
		// The step's counts include the groups left out, if any.
		if st.SamplesMixed < int64(mixed[k]) || st.PolicyInterrupted < st.SamplesMixed {
			t.Errorf("%s step %d: %d samples moved to version %d, but the manifest counts %d mixed samples and %d interrupted calls", dir, k, mixed[k], k, st.SamplesMixed, st.PolicyInterrupted)
		}
	}
	return mixed
}

// A run with deterministic partial rollouts (rollout.partial_tokens),
// killed with SIGKILL while samples of step 1 are half sampled (their first
// policy tokens by checkpoint 0, waiting to go on with checkpoint 1), and
// started again, ends with the bits of an uninterrupted run: the same
// final weights (sha256), checkpoints, trajectories in every step,
// evaluations and report. The kill lands there by construction, not by
// timing: the child kills itself as learner step 0 reports checkpoint 1
// committed, before the loop loads checkpoint 1 into the rollout engine,
// so every step-1 sample that runs past partial_tokens is waiting for it
// (the uninterrupted run must hold some, and the killed run's step 1 must
// be uncommitted). Both runs split every sample where the configuration
// says.
func TestKilledPartialRunResumesToTheSameBits(t *testing.T) {
	const tokens = 2
	env := []string{childPartialEnv + "=" + strconv.Itoa(tokens)}
	cfg, err := demoConfig(demoOptions{Quick: true, Mutate: partialSplit(tokens)})
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	ref := filepath.Join(base, "reference")
	if finished, _ := runChildEnv(t, ref, killPlan{}, env...); !finished {
		t.Fatal("the uninterrupted run did not finish")
	}
	want := digestRun(t, ref, cfg)
	mixed := checkSplit(t, ref, cfg)
	t.Logf("uninterrupted run: samples with policy tokens of two versions by step: %v", mixed)
	if mixed[1] == 0 {
		t.Fatalf("no sample of step 1 ran past %d policy tokens, so the kill would land in no partial sample", tokens)
	}

	dir := filepath.Join(base, "killed")
	if finished, _ := runChildEnv(t, dir, killPlan{}, append(env, childKillAtPhaseEnv+"=learned 0")...); finished {
		t.Fatal("the run to kill finished")
	}
	if _, err := os.Stat(rundir.Committed(rundir.Checkpoint(dir, 1))); err != nil {
		t.Fatalf("killed as learner step 0 reported: checkpoint 1 is not committed: %v", err)
	}
	if _, err := os.Stat(rundir.Manifest(rundir.Step(dir, 1))); !os.IsNotExist(err) {
		t.Fatalf("killed as learner step 0 reported: step 1 is committed already (%v), so its partial samples were not in flight", err)
	}
	if finished, _ := runChildEnv(t, dir, killPlan{}, env...); !finished {
		t.Fatal("the resumed run did not finish")
	}
	want.check(t, dir, "killed during the partial samples of step 1 and resumed")
	checkSplit(t, dir, cfg)
}
