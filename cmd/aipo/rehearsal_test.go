//go:build shareddata

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/pipelines/analytics"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/policy"
	"gopkg.in/yaml.v3"
)

// rehearsal sizes one rehearsal of the paper's recipe.
type rehearsal struct {
	steps, batch, group int64
	prompts             int // training prompts converted to veRL's layout
	evalEvery           int64
	evalProblems        int // the MATH500 slice
	sftSteps            int
	trainLimit          time.Duration // how long aipo train may take
}

// The rehearsal in `make test` is short; AIPO_REHEARSE=long (make
// rehearse) runs a longer one of the same recipe.
var (
	rehearsalShort = rehearsal{steps: 3, batch: 4, group: 8, prompts: 64, evalEvery: 2, evalProblems: 20, sftSteps: 60, trainLimit: 6 * time.Minute}
	rehearsalLong  = rehearsal{steps: 20, batch: 8, group: 8, prompts: 256, evalEvery: 5, evalProblems: 100, sftSteps: 60, trainLimit: 40 * time.Minute}
)

// TestRehearsal walks the paper's recipe (configs/math.yaml) on CPU the way
// a user runs it, with every part real and only the sizes shrunk:
//
//   - the policy is a Hugging Face directory of a tiny Qwen3-architecture
//     model with the real Qwen3 tokenizer and chat template, warm-started
//     by a short SFT to call the Verify Agent and answer in \boxed{} with a
//     digit drawn at random (so that a group's rewards differ, which
//     dynamic sampling needs, as an instruct model's do);
//   - `aipo data convert` writes GSM8K training rows (those whose answer is
//     one digit) in veRL's Parquet layout, which the run reads with the
//     verl preset;
//   - `aipo serve` serves the policy over gRPC, told of every checkpoint
//     through its Reload RPC (policy.sync kind aipo); a second `aipo serve`
//     serves the collaborators over the OpenAI chat API;
//   - `aipo train --config --init` runs base dapo (dynamic sampling with
//     refill, the overlong penalty) and evaluates a MATH500 slice every
//     eval.every steps; then `aipo analyze`.
//
// It asserts the mechanics, not accuracy: the resolved preset written and
// printed; every step's batch full of kept groups, with the draws counted;
// calls parsed on the real vocabulary with the collaborators' tokens marked
// as theirs; every trajectory sampled by the step's checkpoint and the
// server on the final one; eval records; a final checkpoint that is a
// complete Hugging Face directory; the analysis.
func TestRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("the rehearsal trains a tiny Qwen3 for a few steps")
	}
	r := rehearsalShort
	if os.Getenv("AIPO_REHEARSE") == "long" {
		r = rehearsalLong
	}
	rehearse(t, r)
}

func rehearse(t *testing.T, r rehearsal) {
	ctx := context.Background()
	start := time.Now()
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	gsm8k := shareddata.Path(t, "math/gsm8k/train.jsonl")
	math500 := shareddata.Path(t, "math/math500/test.jsonl")
	base := t.TempDir()
	if keep := os.Getenv("AIPO_KEEP_RUN"); keep != "" {
		base = keep
		t.Logf("rehearsal kept in %s", base)
	}

	// Training prompts: GSM8K rows whose answer is one digit, in the
	// bundled file's own layout, converted to veRL's.
	rows := oneDigitGSM8K(t, gsm8k, r.prompts)
	train := convertGSM8K(t, base, "gsm8k-one-digit", rows)

	runDir := filepath.Join(base, "run")
	policyAddr, collabAddr := freeAddr(t), freeAddr(t)
	// The paper's recipe (configs/math.yaml), shrunk to seconds.
	cfgText := tinyRecipe{name: "rehearsal", dir: runDir, steps: r.steps, train: train, batch: r.batch,
		policy: "grpc://" + policyAddr, sync: "{kind: aipo, timeout: 60s}", group: r.group, loss: "dapo",
		collab: collabAddr, eval: fmt.Sprintf(`eval:
  every: %d
  samples: 2
  max_response_tokens: 24
  benchmarks: [{path: %q, preset: math500, limit: %d}]
`, r.evalEvery, math500, r.evalProblems)}.yaml()
	cfgPath := filepath.Join(base, "rehearsal.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := runconfig.Load(ctx, cfgPath)
	if err != nil {
		t.Fatal(err)
	}

	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	warm := filepath.Join(base, "qwen3-tiny-warm")
	sftLoss := warmStartQwen3(t, tok, tokDir, warm, cfg, rows, r.sftSteps, hfmodel.TinyQwen3Config)
	collabDir := filepath.Join(base, "qwen3-tiny-collab")
	if err := hfmodel.WriteDir(collabDir, []byte(hfmodel.TinyQwen3Config), 5, checkpoint.F32, tokDir); err != nil {
		t.Fatal(err)
	}
	defer serveOn(t, collabDir, "collab", "", collabAddr)()
	defer serveOn(t, warm, "policy", policyAddr, "")()
	t.Logf("set-up (warm start: %d SFT steps, loss %.3f): %s", r.sftSteps, sftLoss, time.Since(start).Round(time.Second))

	t0 := time.Now()
	code, out := runAipoFor(t, r.trainLimit, nil, "train", "--config", cfgPath, "--init", warm)
	if code != 0 {
		t.Fatalf("aipo train exited %d:\n%s", code, out)
	}
	t.Logf("aipo train, %d steps: %s\n%s", r.steps, time.Since(t0).Round(time.Second), out)
	if n := strings.Count(out, "algorithm: base dapo"); n != 1 {
		t.Errorf("the resolved algorithm is printed %d times, want once:\n%s", n, out)
	}
	last := fmt.Sprintf("policy servers (aipo, 1) serve checkpoint %d", r.steps)
	if !strings.Contains(out, last) {
		t.Errorf("aipo train's output lacks %q", last)
	}

	// The resolved preset, as written beside run.yaml.
	var alg runconfig.Algorithm
	readYAML(t, filepath.Join(runDir, "algorithm.yaml"), &alg)
	set := map[string]string{}
	for _, f := range alg.Settings {
		set[f.Field] = f.Value
	}
	if alg.Base != "dapo" || set["advantage.dynamic_sampling"] != "true" || set["learner.loss.aggregation"] != "token-mean" || !strings.HasPrefix(set["advantage.overlong"], "max_length 40") {
		t.Errorf("algorithm.yaml: base %q, settings %v; want dapo with dynamic sampling, token-mean and the overlong penalty", alg.Base, set)
	}

	calls, collabTokens := 0, 0
	for k := range r.steps {
		dir := rundir.Step(runDir, k)
		m, err := schemas.ReadManifest(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		draws, _ := strconv.Atoi(m.Meta["draws"])
		drawn, _ := strconv.ParseInt(m.Meta["prompts"], 10, 64)
		if m.Rows != r.batch*r.group || m.Meta["groups_kept"] != strconv.FormatInt(r.batch, 10) || m.Meta["groups_short"] != "0" || draws < 1 || drawn < r.batch {
			t.Errorf("step %d: %d trajectories, groups kept %q, short %q, draws %q, prompts drawn %q; want a full batch of %d kept groups of %d", k, m.Rows, m.Meta["groups_kept"], m.Meta["groups_short"], m.Meta["draws"], m.Meta["prompts"], r.batch, r.group)
		}
		t.Logf("step %d: %s draw(s), %s prompts drawn, %s groups dropped (all rewards equal), %s kept", k, m.Meta["draws"], m.Meta["prompts"], m.Meta["groups_dropped"], m.Meta["groups_kept"])
		trajs, _, err := schemas.ReadStep[schemas.Trajectory](ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trajs {
			name := fmt.Sprintf("step %d %s/%d", k, tr.PromptID, tr.SampleIndex)
			if tr.PolicyVersion != k {
				t.Fatalf("%s: sampled by version %d, want checkpoint %d", name, tr.PolicyVersion, k)
			}
			text, err := tok.Decode(ints(tr.ResponseIDs), false)
			if err != nil {
				t.Fatal(err)
			}
			// The trajectory keeps the text as valid UTF-8 (a token may end
			// inside a character).
			if text = strings.ToValidUTF8(text, "\uFFFD"); text != tr.ResponseText {
				t.Errorf("%s: the Qwen3 tokenizer decodes the response ids to %q, the trajectory holds %q", name, text, tr.ResponseText)
			}
			for i := range tr.InteractionAgent {
				calls++
				s, e := int(tr.InteractionSpanStart[i]), int(tr.InteractionSpanEnd[i])
				if s < 0 || e <= s || e > len(tr.ResponseIDs) {
					t.Fatalf("%s: interaction %d spans [%d, %d) of %d tokens", name, i, s, e, len(tr.ResponseIDs))
				}
				span, _ := tok.Decode(ints(tr.ResponseIDs[s:e]), false)
				if !strings.HasPrefix(span, interact.ResultOpen) || !strings.HasSuffix(span, interact.ResultClose) {
					t.Errorf("%s: interaction %d's span decodes to %q, want %s...%s", name, i, span, interact.ResultOpen, interact.ResultClose)
				}
				for p := s; p < e; p++ {
					if src := tr.TokenSource[p]; src != schemas.SourcePolicy && src != schemas.SourceTemplate {
						collabTokens++
					} else if src == schemas.SourcePolicy {
						t.Errorf("%s: token %d inside interaction %d's span is marked the policy's", name, p, i)
					}
				}
			}
		}
	}
	if calls == 0 || collabTokens == 0 {
		t.Errorf("%d calls and %d collaborator tokens in %d steps; want calls answered by the collaborators' server", calls, collabTokens, r.steps)
	}
	t.Logf("%d calls, %d collaborator tokens", calls, collabTokens)

	// The server is on the final checkpoint, which is a complete Hugging
	// Face directory.
	c, err := policy.Open(ctx, "grpc://"+policyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if in, err := c.Info(ctx); err != nil || in.PolicyVersion != r.steps {
		t.Errorf("after the run the policy server serves version %d (%v), want %d", in.PolicyVersion, err, r.steps)
	}
	final := rundir.Checkpoint(runDir, r.steps)
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(final, f)); err != nil {
			t.Errorf("final checkpoint: %v", err)
		}
	}
	cj, err := os.ReadFile(filepath.Join(final, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if hc, err := hfconfig.Parse(cj); err != nil || hc.ModelType != "qwen3" {
		t.Errorf("final checkpoint's config.json: model_type %q (%v), want qwen3", hc.ModelType, err)
	}

	// The held-out slice, evaluated on schedule.
	recs, err := records.ReadHeldout(ctx, runDir)
	if err != nil {
		t.Fatal(err)
	}
	var evaluated []int64
	for _, rec := range recs {
		evaluated = append(evaluated, rec.Step)
		if len(rec.Benchmarks) != 1 || rec.Benchmarks[0].Name != "math500" || rec.Benchmarks[0].Problems != r.evalProblems {
			t.Errorf("checkpoint %d: %+v; want math500, %d problems", rec.Step, rec.Benchmarks, r.evalProblems)
		}
	}
	var want []int64
	for k := int64(0); k <= r.steps; k++ {
		if k%r.evalEvery == 0 || k == r.steps {
			want = append(want, k)
		}
	}
	if fmt.Sprint(evaluated) != fmt.Sprint(want) {
		t.Errorf("held-out evaluations of checkpoints %v, want %v", evaluated, want)
	}

	// With AIPO_KEEP_RUN the run directory may hold an earlier rehearsal's
	// analysis: removed, so that the checks below read what this aipo
	// analyze writes.
	if err := os.RemoveAll(filepath.Join(runDir, "analysis")); err != nil {
		t.Fatal(err)
	}
	code, out = runAipo(t, "analyze", "--run", runDir)
	if code != 0 {
		t.Fatalf("aipo analyze exited %d:\n%s", code, out)
	}
	t.Logf("aipo analyze:\n%s", out)
	var an analytics.Report
	b, err := os.ReadFile(filepath.Join(runDir, "analysis", analytics.JSONName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &an); err != nil {
		t.Fatal(err)
	}
	if len(an.Steps) != int(r.steps) || len(an.Heldout) != len(want) {
		t.Errorf("analysis.json: %d steps and %d held-out evaluations, want %d and %d", len(an.Steps), len(an.Heldout), r.steps, len(want))
	}
	for _, st := range an.Steps {
		if st.Mismatch == nil || st.Learner == nil {
			t.Errorf("analysis.json, step %d: mismatch %v, learner %v; want the learner's record and its mismatch measurement", st.Step, st.Mismatch, st.Learner)
		} else if st.Mismatch.AbsMax > 1e-4 {
			// The server and the learner run the same CPU kernels on the
			// same weights; float32 sums in another order differ by about
			// 1e-6 (TestQuickDemoEndToEnd's bound is the same). A server
			// left on the previous checkpoint differs by the update.
			t.Errorf("step %d: train-inference mismatch max |delta| %.3g, want <= 1e-4: was the server on the step's checkpoint?", st.Step, st.Mismatch.AbsMax)
		} else {
			t.Logf("step %d: train-inference mismatch mean |delta| %.2g, max %.2g", st.Step, st.Mismatch.AbsMean, st.Mismatch.AbsMax)
		}
	}
	t.Logf("rehearsal: %s in all", time.Since(start).Round(time.Second))
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
