package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/trajectories"
)

// carryWarmStart is the quick model with a context of 1024 trained for
// 35 steps only (BenchmarkPartialRollouts' long-tailed task): its answers
// end after anything from a few tokens to the response limit, so a
// step's slowest samples are still generating when the next push lands.
func carryWarmStart() *demo.WarmStartConfig {
	ws := demo.QuickWarmStart()
	ws.Model.Context, ws.Steps = 1024, 35
	return &ws
}

// carryDemo is the quick demo on carryWarmStart with rollout.carry:
// responses up to 512 tokens, one sample at a time, a batch that closes
// once a quarter of its groups has finished, and a group carried at most
// once (rollout.carry_max_steps 1: every group carried into a step is
// finished there).
func carryDemo(c *runconfig.Config) {
	c.Run.Async, c.Rollout.Partial, c.Rollout.Carry = true, true, true
	c.Run.Steps = 8
	c.Data.BatchSize = 8
	c.Policy.MaxResponseTokens = 512
	c.Rollout.MaxInFlight = 1 // a step's rollout outlasts the learner step beside it
	quarter := 0.25
	c.Rollout.CarryMinFinished = &quarter
	once := int64(1)
	c.Rollout.CarryMaxSteps = &once
	c.Checkpoint.KeepLast = 0 // every checkpoint, to score each token with its version
	c.Eval.Every = 0
}

// The quick demo, asynchronous with partial rollouts and rollout.carry on
// the in-process engine, killed while carried groups are in flight and
// resumed: at the push that starts step k+1's rollout, step
// k's unfinished groups are carried into step k+1 instead of finishing in
// step k. The test wants: groups carried (the manifests count them, and
// the carry directories hold them); every sample of every step's prompts
// trained exactly once, in its own step or a later one; carried
// trajectories carry the step that trains them in the step column (the
// step that drew them is in the carry file) and hold policy
// tokens of two versions or more; every policy token's behaviour log-prob
// equal to what the checkpoint of its recorded version gives it; and the
// learner's staleness record counting the trained tokens by version;
// with rollout.carry_max_steps 1, every group carried into a step trained
// in it, counted as finished at the bound (groups_carry_bound).
func TestQuickDemoCarry(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir() + "/carry"
	cfg, err := demoConfig(demoOptions{RunDir: dir, Quick: true, Mutate: carryDemo})
	if err != nil {
		t.Fatal(err)
	}
	// Killed with SIGKILL (the child kills itself: nothing flushed or
	// cleaned up) as soon as a learner step ends while a committed step's
	// carried groups are being continued by a rollout not yet committed,
	// then run again: the resumed run must read them from the committed
	// step and finish them.
	env := []string{childCarryEnv + "=1"}
	plan := killPlan{limit: 15 * time.Minute}
	finished, marks := runChildEnv(t, dir, plan, append(env, childKillAtPhaseEnv+"="+killCarrying)...)
	cutAt := int64(-1)
	for _, m := range marks {
		if m.phase == killCarrying {
			cutAt = m.step
		}
	}
	if finished || cutAt < 0 {
		t.Fatalf("the run ended (finished %v) before a learner step ended while carried groups were in flight: no group was carried, or each step after a carrying one committed before a learner step ended", finished)
	}
	t.Logf("killed while step %d's carried groups were in flight in step %d's rollout; resuming", cutAt, cutAt+1)
	if finished, _ := runChildEnv(t, dir, plan, env...); !finished {
		t.Fatal("the resumed run did not finish")
	}
	G := cfg.Rollout.GroupSize
	models := map[int64]*model.Model{}
	checked, carriedTrajs, carriedMixed, total := 0, 0, 0, 0
	var carried, resumed int64
	in := map[string]trajectories.CarriedGroup{} // the groups carried into step k, by prompt
	for k := int64(0); k < cfg.Run.Steps; k++ {
		trajs, m, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(dir, k))
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		st, err := records.ReadStepStats(m.Meta)
		if err != nil {
			t.Fatal(err)
		}
		carried += st.GroupsCarried
		resumed += st.GroupsResumed
		t.Logf("step %d: %d trajectories, %d groups carried out, %d carried in (%d steps held, at most %d; %d at the bound), %d calls interrupted, %d mixed", k, len(trajs), st.GroupsCarried, st.GroupsResumed, st.CarrySteps, st.CarryStepsMax, st.GroupsCarryBound, st.PolicyInterrupted, st.SamplesMixed)
		if k == cfg.Run.Steps-1 && st.GroupsCarried > 0 {
			t.Errorf("the last step carried %d groups, which no step would train", st.GroupsCarried)
		}
		total += len(trajs)
		// Whole groups, each sample once: G trajectories per group, and
		// every carried group among them.
		byPrompt := map[string]map[int32]int{}
		for _, tr := range trajs {
			if byPrompt[tr.PromptID] == nil {
				byPrompt[tr.PromptID] = map[int32]int{}
			}
			byPrompt[tr.PromptID][tr.SampleIndex]++
		}
		for id, samples := range byPrompt {
			n := samples[0]
			for j := range int32(G) {
				if samples[j] != n {
					t.Fatalf("step %d prompt %s: samples %v, want each of the %d samples the same number of times (whole groups)", k, id, samples, G)
				}
			}
		}
		trainedIn := int64(0) // groups carried into step k and trained there
		for id := range in {
			if byPrompt[id] != nil {
				trainedIn++
			}
		}
		if st.GroupsResumed != trainedIn {
			t.Errorf("step %d counts %d groups carried into it and trained, its shards hold %d of them", k, st.GroupsResumed, trainedIn)
		}
		if trainedIn != int64(len(in)) || st.GroupsCarryBound != trainedIn || st.CarryStepsMax > 1 {
			t.Errorf("step %d trains %d of the %d groups carried into it, counts %d finished at rollout.carry_max_steps 1, held one back %d steps at most: want all, all and 1", k, trainedIn, len(in), st.GroupsCarryBound, st.CarryStepsMax)
		}
		versions := map[string]int{}
		for _, tr := range trajs {
			if tr.Step != k {
				t.Fatalf("step %d holds a trajectory whose step column is %d", k, tr.Step)
			}
			from := k // the step that drew it
			cg, wasCarried := in[tr.PromptID]
			if wasCarried {
				from = cg.Step
			}
			if tr.FinishReason == schemas.FinishError {
				continue
			}
			key := fmt.Sprintf("step %d prompt %s sample %d", k, tr.PromptID, tr.SampleIndex)
			seen := map[int64]bool{}
			seq := append(append([]int32(nil), tr.PromptIDs...), tr.ResponseIDs...)
			scored := map[int64][]float32{}
			for i, v := range tr.TokenVersions() {
				if v > k || v < max(from-1, 0) && !wasCarried {
					t.Fatalf("%s token %d has version %d, want %d..%d", key, i, v, max(from-1, 0), k)
				}
				if tr.TokenSource[i] != schemas.SourcePolicy {
					continue
				}
				seen[v] = true
				versions[records.LagKey(v)]++
				lp, ok := scored[v]
				if !ok {
					if models[v] == nil {
						p, err := LoadPolicy(ctx, rundir.Checkpoint(dir, v))
						if err != nil {
							t.Fatalf("checkpoint %d: %v", v, err)
						}
						models[v] = p.Model
					}
					all, _, err := models[v].Score(model.Batch{Tokens: seq})
					if err != nil {
						t.Fatal(err)
					}
					lp = all[len(tr.PromptIDs)-1 : len(seq)-1]
					scored[v] = lp
				}
				if d := math.Abs(float64(lp[i] - tr.BehaviorLogProbs[i])); d > 5e-4 {
					t.Fatalf("%s token %d (version %d): recorded log-prob %g, checkpoint %d gives %g", key, i, v, tr.BehaviorLogProbs[i], v, lp[i])
				}
				checked++
			}
			if wasCarried {
				carriedTrajs++
				if len(seen) > 1 {
					carriedMixed++
				}
			}
		}
		lm := learnRecord(t, ctx, dir, k)
		if lm.Staleness == nil {
			t.Fatalf("step %d: the learner record has no staleness", k)
		}
		for v, n := range versions {
			if lm.Staleness.Versions[v] != n {
				t.Errorf("step %d: the learner counts %v policy tokens by version, the trajectories hold %v", k, lm.Staleness.Versions, versions)
				break
			}
		}
		// The groups step k carries into step k+1, as committed with it.
		texts, err := trajectories.ReadCarried(ctx, rundir.Carry(rundir.Step(dir, k)), st.GroupsCarried)
		if err != nil {
			t.Fatal(err)
		}
		prev := in
		in = map[string]trajectories.CarriedGroup{}
		for _, text := range texts {
			var cg trajectories.CarriedGroup
			if err := json.Unmarshal([]byte(text), &cg); err != nil {
				t.Fatal(err)
			}
			if _, dup := in[cg.Prompt.ID]; dup || byPrompt[cg.Prompt.ID] != nil {
				t.Fatalf("step %d carries prompt %s, and also trains it or carries it twice", k, cg.Prompt.ID)
			}
			if len(cg.Samples) != G || cg.Carries < 1 || cg.Step > k {
				t.Fatalf("step %d carries prompt %s with %d samples, %d carries, drawn in step %d", k, cg.Prompt.ID, len(cg.Samples), cg.Carries, cg.Step)
			}
			in[cg.Prompt.ID] = cg
		}
		for id, cg := range prev {
			again, ok := in[id]
			if byPrompt[id] == nil && (!ok || again.Step != cg.Step || again.Carries != cg.Carries+1) {
				t.Fatalf("step %d neither trains nor carries on prompt %s, which step %d carried into it", k, id, k-1)
			}
		}
	}
	if want := int(cfg.Run.Steps) * cfg.Data.BatchSize * G; total != want {
		t.Errorf("the steps trained %d trajectories, want %d: every sample of every step's prompts once", total, want)
	}
	t.Logf("%d groups carried, %d resumed; %d trajectories trained after the step that drew them, %d of them with policy tokens of two versions or more; %d policy tokens rescored", carried, resumed, carriedTrajs, carriedMixed, checked)
	if carried == 0 {
		t.Fatal("no group was carried: every step's rollout ended before the next step's push, so this run tested nothing of rollout.carry")
	}
	if carried < resumed {
		t.Errorf("%d groups were carried out of steps, %d trained after being carried", carried, resumed)
	}
	if carriedMixed == 0 {
		t.Error("no carried trajectory holds policy tokens of two versions")
	}
}

// carriedInFlight reports whether a committed step of the run in dir
// carried groups into a step not yet committed, and which.
func carriedInFlight(ctx context.Context, dir string) (int64, bool) {
	for k := int64(0); ; k++ {
		m, err := schemas.ReadManifest(ctx, rundir.Step(dir, k))
		if err != nil {
			return 0, false
		}
		if st, err := records.ReadStepStats(m.Meta); err == nil && st.GroupsCarried > 0 {
			if _, err := schemas.ReadManifest(ctx, rundir.Step(dir, k+1)); err != nil {
				return k, true
			}
		}
	}
}

// rollout.carry's refusals name the fix.
func TestCarryRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*runconfig.Config)
		want   string
	}{
		{"no partial", func(c *runconfig.Config) { c.Run.Async, c.Rollout.Carry = true, true }, "rollout.carry: needs rollout.partial: true"},
		{"sync", func(c *runconfig.Config) { c.Rollout.Partial, c.Rollout.Carry = true, true }, "rollout.partial: needs run.async: true"},
		{"split", func(c *runconfig.Config) {
			c.Run.Async, c.Rollout.Partial, c.Rollout.Carry, c.Rollout.PartialTokens = true, true, true, 4
		}, "rollout.carry: does not go with rollout.partial_tokens 4"},
		{"dynamic sampling", func(c *runconfig.Config) {
			c.Run.Async, c.Rollout.Partial, c.Rollout.Carry, c.Advantage.DynamicSampling = true, true, true, true
		}, "rollout.carry: does not go with advantage.dynamic_sampling"},
		{"min without carry", func(c *runconfig.Config) { x := 0.5; c.Rollout.CarryMinFinished = &x }, "rollout.carry_min_finished: is set but rollout.carry is off"},
		{"min out of range", func(c *runconfig.Config) {
			x := 0.0
			c.Run.Async, c.Rollout.Partial, c.Rollout.Carry, c.Rollout.CarryMinFinished = true, true, true, &x
		}, "rollout.carry_min_finished: 0 must be above 0 and at most 1"},
		{"bound without carry", func(c *runconfig.Config) { x := int64(1); c.Rollout.CarryMaxSteps = &x }, "rollout.carry_max_steps: is set but rollout.carry is off"},
		{"negative bound", func(c *runconfig.Config) {
			x := int64(-1)
			c.Run.Async, c.Rollout.Partial, c.Rollout.Carry, c.Rollout.CarryMaxSteps = true, true, true, &x
		}, "rollout.carry_max_steps: -1 must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := demoConfig(demoOptions{RunDir: t.TempDir(), Quick: true, Mutate: tc.mutate})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
