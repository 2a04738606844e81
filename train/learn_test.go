package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/cuda"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
)

// One `aipo learn` step on a hand-built shard raises the log-probability of
// the positive-advantage trajectory's external tokens; a second run of the
// same step changes nothing.
func TestLearnOnHandBuiltShard(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t)
	cfg, m, prompt, call, ext, run := h.cfg, h.m, h.prompt, h.good.ResponseIDs, h.ext, h.cfg.Run.Dir
	if _, err := schemas.WriteStep(ctx, rundir.Step(run, 0), [][]schemas.Trajectory{{h.good, h.bad}}, schemas.Manifest{Run: cfg.Run.Name}); err != nil {
		t.Fatal(err)
	}
	before := extLogProbs(t, m, prompt, call, ext)
	ctx = claimed(t, ctx, run)
	met, err := Learn(ctx, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if met.Trajectories != 2 || met.Tokens != len(call)+len(h.bad.ResponseIDs) {
		t.Fatalf("learn metrics: %+v", met)
	}
	pol, err := LoadPolicy(ctx, rundir.Checkpoint(run, 1))
	if err != nil {
		t.Fatal(err)
	}
	after := extLogProbs(t, pol.Model, prompt, call, ext)
	for j := range ext {
		if after[j] <= before[j] {
			t.Errorf("external token %d: log-prob %.4f -> %.4f, want a rise", ext[j], before[j], after[j])
		}
	}
	weights := filepath.Join(rundir.Checkpoint(run, 1), checkpoint.WeightsName)
	b1, _ := os.ReadFile(weights)
	again, err := Learn(ctx, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(weights)
	if string(b1) != string(b2) || again.Loss != met.Loss {
		t.Fatalf("a second learn of step 0 changed the checkpoint or its metrics")
	}
}

// Expert Iteration (learner.objective rejection-sft) trains on the correct
// trajectory only, once however often it was sampled, and raises the
// log-probability of its tokens, the collaborator's included.
func TestLearnRejectionSFT(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t)
	h.cfg.Learner.Objective = runconfig.ObjectiveRejectionSFT
	dup := h.good
	dup.SampleIndex = 2
	if _, err := schemas.WriteStep(ctx, rundir.Step(h.cfg.Run.Dir, 0), [][]schemas.Trajectory{{h.good, h.bad}, {dup}}, schemas.Manifest{Run: h.cfg.Run.Name}); err != nil {
		t.Fatal(err)
	}
	before := extLogProbs(t, h.m, h.prompt, h.good.ResponseIDs, h.ext)
	met, err := Learn(claimed(t, ctx, h.cfg.Run.Dir), h.cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Under template_tokens "untrained" the system's </result> is context.
	want := len(h.good.ResponseIDs)
	if h.cfg.Rollout.TemplateTokens != runconfig.TemplateExternal {
		want--
	}
	if met.Trajectories != 3 || met.Skipped != 2 || met.Tokens != want || met.LossMetrics["sft_sequences"] != 1 {
		t.Fatalf("learn metrics %+v: want 3 trajectories, 2 left out (wrong, duplicate), %d tokens of one sequence", met, want)
	}
	pol, err := LoadPolicy(ctx, rundir.Checkpoint(h.cfg.Run.Dir, 1))
	if err != nil {
		t.Fatal(err)
	}
	after := extLogProbs(t, pol.Model, h.prompt, h.good.ResponseIDs, h.ext)
	for j := range h.ext {
		if after[j] <= before[j] {
			t.Errorf("external token %d: log-prob %.4f -> %.4f, want a rise", h.ext[j], before[j], after[j])
		}
	}
}

// handBuilt is a one-step run: a tiny policy at checkpoint 0 and two
// trajectories of the demo task, one correct with a Knowledge Agent call.
type handBuilt struct {
	cfg       runconfig.Config
	m         *model.Model
	prompt    []int32
	good, bad schemas.Trajectory
	ext       []int // response positions of the collaborator's tokens
}

func newHandBuilt(t *testing.T) handBuilt {
	t.Helper()
	ctx := context.Background()
	cfg, err := demoConfig(demoOptions{Quick: true, RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Learner.Optim.LR = 1e-2
	run := cfg.Run.Dir
	size := demo.ModelSize{Layers: 1, Hidden: 32, Heads: 2, KVHeads: 2, Intermediate: 64, Context: 64}
	m, err := model.New(size.ModelConfig(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.SavePolicy(ctx, rundir.Checkpoint(run, 0), m, nil, checkpoint.TrainerState{}); err != nil {
		t.Fatal(err)
	}
	enc := demo.NewEncoder()
	prompt := enc.Prompt("lugr+3?")
	call := enc.Response("<retrieval>lugr</retrieval><result>450</result>450+3=453;")
	// Sources: the policy wrote the query and <result>; the Knowledge Agent
	// wrote "450"; the system wrote </result>; the policy wrote the rest.
	src := make([]int8, len(call))
	ext := []int{}
	for i := range call {
		src[i] = schemas.SourcePolicy
	}
	// Token layout of the built-in vocabulary: tags are single tokens.
	// <retrieval> l u g r </retrieval> <result> 4 5 0 </result> ...
	for _, i := range []int{7, 8, 9} {
		src[i] = schemas.SourceKnowledge
		ext = append(ext, i)
	}
	src[10] = schemas.SourceTemplate
	ids := []int{int(call[7]), int(call[8]), int(call[9]), int(call[10])}
	if txt, _ := enc.Tok.Decode(ids, false); txt != "450</result>" {
		t.Fatalf("tokens 7..10 of the response decode to %q, want the knowledge answer 450 and </result>", txt)
	}
	lp := make([]float32, len(call))
	good := schemas.Trajectory{SchemaVersion: schemas.SchemaVersion, Run: cfg.Run.Name, PromptID: "demo/lugr+3", SampleIndex: 0, DataSource: "demo",
		PromptIDs: prompt, ResponseIDs: call, TokenSource: src, BehaviorLogProbs: lp, ResponseText: "x",
		InteractionAgent: []string{"knowledge"}, InteractionQuery: []string{"lugr"}, InteractionResult: []string{"450"},
		InteractionStatus: []string{schemas.StatusOK}, InteractionLatencyMs: []float32{1}, InteractionSpanStart: []int32{7}, InteractionSpanEnd: []int32{10},
		InteractionNoisy: []bool{false}, Reward: 1, Correct: true, Advantage: 1, FinishReason: sampling.FinishStop}
	bad := good
	bad.SampleIndex, bad.Reward, bad.Correct, bad.Advantage = 1, 0, false, -1
	bad.ResponseIDs = enc.Response("<result>111</result>111+3=114;")
	bad.TokenSource = make([]int8, len(bad.ResponseIDs))
	bad.BehaviorLogProbs = make([]float32, len(bad.ResponseIDs))
	bad.InteractionAgent, bad.InteractionQuery, bad.InteractionResult, bad.InteractionStatus = nil, nil, nil, nil
	bad.InteractionLatencyMs, bad.InteractionSpanStart, bad.InteractionSpanEnd, bad.InteractionNoisy = nil, nil, nil, nil
	return handBuilt{cfg: cfg, m: m, prompt: prompt, good: good, bad: bad, ext: ext}
}

func extLogProbs(t *testing.T, m *model.Model, prompt, resp []int32, idx []int) []float32 {
	t.Helper()
	seq := trainer.Sequence{Prompt: prompt, Response: resp}
	toks := append(append([]int32{}, prompt...), resp...)
	a, err := m.Forward(model.Batch{Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	out := make([]float32, len(idx))
	for j, i := range idx {
		out[j] = a.LogProbs[len(seq.Prompt)-1+i]
	}
	return out
}

// learner.backend cuda runs the step's passes on the GPU: without one it
// fails with a message naming the setting and the missing driver and
// commits nothing; with one, the step gives the CPU's loss and, like it,
// raises the positive trajectory's external tokens.
func TestLearnOnGPUBackend(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t)
	cfg, run := h.cfg, h.cfg.Run.Dir
	if _, err := schemas.WriteStep(ctx, rundir.Step(run, 0), [][]schemas.Trajectory{{h.good, h.bad}}, schemas.Manifest{Run: cfg.Run.Name}); err != nil {
		t.Fatal(err)
	}
	cfg.Learner.Backend = "cuda"
	_, drvErr := cuda.Driver()
	met, err := Learn(claimed(t, ctx, run), cfg, 0)
	if drvErr != nil {
		if err == nil || !strings.Contains(err.Error(), "learner.backend cuda") || !strings.Contains(err.Error(), "libcuda") {
			t.Fatalf("without a GPU: Learn = %v, want an error naming learner.backend cuda and libcuda", err)
		}
		if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(run, 1)); ok {
			t.Fatal("a failed GPU step committed checkpoint 1")
		}
		t.Logf("no GPU here, as expected: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// The same step on the CPU, from the same checkpoint, in another run.
	cpuCfg := cfg
	cpuCfg.Learner.Backend = runconfig.BackendCPU
	cpuCfg.Run.Dir = t.TempDir()
	if err := os.CopyFS(cpuCfg.Run.Dir, os.DirFS(run)); err != nil {
		t.Fatal(err)
	}
	// The copy is another run: without checkpoint 1, and without the
	// lease file of the run it was copied from, which this test holds.
	if err := os.RemoveAll(rundir.Checkpoint(cpuCfg.Run.Dir, 1)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cpuCfg.Run.Dir, runlease.Name)); err != nil {
		t.Fatal(err)
	}
	want, err := Learn(claimed(t, ctx, cpuCfg.Run.Dir), cpuCfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(met.Loss-want.Loss) > 1e-4*(1+math.Abs(want.Loss)) {
		t.Errorf("loss on the GPU %.6g, on the CPU %.6g", met.Loss, want.Loss)
	}
	pol, err := LoadPolicy(ctx, rundir.Checkpoint(run, 1))
	if err != nil {
		t.Fatal(err)
	}
	before := extLogProbs(t, h.m, h.prompt, h.good.ResponseIDs, h.ext)
	after := extLogProbs(t, pol.Model, h.prompt, h.good.ResponseIDs, h.ext)
	for j := range h.ext {
		if after[j] <= before[j] {
			t.Errorf("external token %d: log-prob %.4f -> %.4f after the GPU step, want a rise", h.ext[j], before[j], after[j])
		}
	}
}

// With learner.backend cuda, aipo train's rollout engine decodes on the
// GPU: without one it fails naming the setting and the driver; with one,
// greedy decoding matches the CPU engine's.
func TestRolloutEngineOnGPUBackend(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t)
	dir := rundir.Checkpoint(h.cfg.Run.Dir, 0)
	e, release, err := inproc.OpenEngine(ctx, dir, "cuda", inproc.DTypeF32) // the exact reference: the same greedy tokens
	if _, drvErr := cuda.Driver(); drvErr != nil {
		if err == nil || !strings.Contains(err.Error(), "learner.backend cuda") || !strings.Contains(err.Error(), "libcuda") {
			t.Fatalf("without a GPU: inproc.OpenEngine = %v, want an error naming learner.backend cuda and libcuda", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	defer e.Close()
	cpu, _, err := inproc.OpenEngine(ctx, dir, runconfig.BackendCPU, inproc.DTypeF32)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	req := engine.Request{Prefix: h.prompt, Params: sampling.Params{MaxTokens: 24}}
	want, err := cpu.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, want.Tokens) {
		t.Errorf("greedy tokens on the GPU %v, on the CPU %v", got.Tokens, want.Tokens)
	}
}
