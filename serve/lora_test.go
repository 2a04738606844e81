package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/grpcclient"
)

// writeAdapter writes a rank-4 adapter on every target of a model of
// config c into dir, its B drawn from seed (so that it changes the
// output: PEFT starts B at zero), with a trainer_state.json of policy
// version version beside it, as a LoRA run's checkpoint has.
func writeAdapter(t testing.TB, dir string, c model.Config, seed uint64, version int64) *peft.Adapter {
	t.Helper()
	d, err := peft.DimsOf(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := peft.NewConfig("tiny-base", 4, 8, 0, nil, peft.InitDefault)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	a, err := peft.New(cfg, d, rng)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range a.Modules {
		for i := range m.B {
			m.B[i] = float32(rng.NormFloat64() * 0.2)
		}
	}
	if err := peft.Write(context.Background(), dir, a, checkpoint.F32); err != nil {
		t.Fatal(err)
	}
	st, err := json.Marshal(checkpoint.TrainerState{Step: version, PolicyVersion: version, RunID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.TrainerStateName), st, 0o644); err != nil {
		t.Fatal(err)
	}
	return a
}

// mergedCheckpoint saves base's model with a merged (peft's Merge onto
// the base's tensors) as a checkpoint of version version: the reference
// the adapter's samples must equal.
func mergedCheckpoint(t testing.TB, dir string, base *model.Model, a *peft.Adapter, version int64) {
	t.Helper()
	merged, err := a.Merge(trainer.Tensors(base))
	if err != nil {
		t.Fatal(err)
	}
	m, err := trainer.ModelFromTensors(base.Config(), merged)
	if err != nil {
		t.Fatal(err)
	}
	saveCheckpoint(t, dir, m, version)
}

type loraChoice struct {
	TokenIDs []int32 `json:"token_ids"`
	Logprobs struct {
		TokenLogprobs []float64 `json:"token_logprobs"`
	} `json:"logprobs"`
	Version int64 `json:"aipo_policy_version"`
}

// complete asks the HTTP API for a greedy completion of prompt by model.
func complete(t *testing.T, addr, model string, prompt []int32, maxTokens int) loraChoice {
	t.Helper()
	code, _, body := post(t, "http://"+addr+"/v1/completions", map[string]any{"model": model, "prompt": prompt,
		"max_tokens": maxTokens, "temperature": 0, "logprobs": 0})
	if code != http.StatusOK {
		t.Fatalf("completion by %q: %d %s", model, code, body)
	}
	var out struct {
		Model   string       `json:"model"`
		Choices []loraChoice `json:"choices"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("completion by %q: %s (%v)", model, body, err)
	}
	if out.Model != model {
		t.Fatalf("a completion asked of %q names the model %q", model, out.Model)
	}
	return out.Choices[0]
}

// greedyRef is e's greedy continuation of prompt with its log-probs.
func greedyRef(t *testing.T, e *engine.Engine, prompt []int32, maxTokens int) engine.Result {
	t.Helper()
	res, err := e.Generate(ctxT(t, 30*time.Second), engine.Request{Prefix: prompt, Params: sampling.Params{Temperature: 0, MaxTokens: maxTokens}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// sameResult reports whether the served choice has ref's tokens and
// log-probs (both float32 decodes of the same float32 weights: equal
// bit for bit up to the JSON round trip of a float32).
func sameResult(c loraChoice, ref engine.Result) error {
	if !slices.Equal(c.TokenIDs, ref.Tokens) {
		return fmt.Errorf("tokens %v, want %v", c.TokenIDs, ref.Tokens)
	}
	for i, lp := range c.Logprobs.TokenLogprobs {
		if float32(lp) != ref.LogProbs[i] {
			return fmt.Errorf("log-prob %d is %v, want %v", i, lp, ref.LogProbs[i])
		}
	}
	return nil
}

// TestServeLoRA serves a base with an adapter as aipo serve --lora does:
// /v1/models lists the adapter with the base as its parent, a request
// naming the adapter samples the merged weights (the same tokens and
// log-probs as the merged checkpoint, and not the base's), one naming the
// base samples the base, gRPC and inproc:///base?lora= sample the
// adapter, and a reload of a new adapter version reaches every one of
// them with its version.
func TestServeLoRA(t *testing.T) {
	tmp := t.TempDir()
	base := rundir.Checkpoint(tmp, 3)
	bm := testModel(t, 5)
	saveCheckpoint(t, base, bm, 3)
	ad1, ad2 := filepath.Join(tmp, "lora", "step-7"), filepath.Join(tmp, "lora", "step-8")
	a1 := writeAdapter(t, ad1, bm.Config(), 11, 7)
	a2 := writeAdapter(t, ad2, bm.Config(), 12, 8)
	m1, m2 := filepath.Join(tmp, "merged-7"), filepath.Join(tmp, "merged-8")
	mergedCheckpoint(t, m1, bm, a1, 7)
	mergedCheckpoint(t, m2, bm, a2, 8)
	r := start(t, Options{Checkpoint: base, LoRA: ad1, LoRAName: "tiny-lora", DType: DTypeF32})

	// /v1/models: the base, and the adapter with the base as its parent.
	resp, err := http.Get("http://" + r.httpAddr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID      string  `json:"id"`
			Root    string  `json:"root"`
			Parent  *string `json:"parent"`
			Version int64   `json:"aipo_policy_version"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || len(models.Data) != 2 {
		t.Fatalf("/v1/models: %+v, %v; want the base and the adapter", models, err)
	}
	b, l := models.Data[0], models.Data[1]
	if b.ID != "tiny" || b.Parent != nil || b.Version != 3 || l.ID != "tiny-lora" || l.Parent == nil || *l.Parent != "tiny" || l.Root != ad1 || l.Version != 7 {
		t.Fatalf("/v1/models lists %+v (base parent %v) and %+v (adapter parent %v); want tiny (version 3, no parent) and tiny-lora (version 7, root %s, parent tiny)", b, b.Parent, l, l.Parent, ad1)
	}

	prompts := [][]int32{{257, 10, 20, 30}, {1, 2, 3}, {260, 261}}
	ref1, ref2, refBase := direct(t, m1), direct(t, m2), direct(t, base)
	differs := 0
	for _, p := range prompts {
		got := complete(t, r.httpAddr, "tiny-lora", p, 12)
		if err := sameResult(got, greedyRef(t, ref1, p, 12)); err != nil || got.Version != 7 {
			t.Fatalf("adapter, prompt %v: %v (version %d, want 7)", p, err, got.Version)
		}
		gb := complete(t, r.httpAddr, "tiny", p, 12)
		if err := sameResult(gb, greedyRef(t, refBase, p, 12)); err != nil || gb.Version != 3 {
			t.Fatalf("base, prompt %v: %v (version %d, want 3)", p, err, gb.Version)
		}
		if !slices.Equal(got.TokenIDs, gb.TokenIDs) {
			differs++
		}
		if got.Logprobs.TokenLogprobs[0] == gb.Logprobs.TokenLogprobs[0] {
			t.Fatalf("prompt %v: the adapter's first log-prob %v equals the base's: the adapter changed nothing", p, got.Logprobs.TokenLogprobs[0])
		}
	}
	if differs == 0 {
		t.Fatalf("the adapter's greedy tokens equal the base's on all %d prompts: the test adapter is too weak to tell them apart", len(prompts))
	}

	// gRPC and the in-process engine sample with the adapter.
	ctx := ctxT(t, 60*time.Second)
	gc := openClient(t, "grpc://"+r.grpcAddr)
	inp := openClient(t, "inproc://"+base+"?lora="+ad1)
	seeded := policy.Request{Prefix: prompts[0], Params: sampling.Params{Temperature: 1, MaxTokens: 10, Seed: 42}}
	want, err := ref1.Generate(ctx, engine.Request{Prefix: seeded.Prefix, Params: seeded.Params})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]policy.Client{"gRPC": gc, "inproc ?lora=": inp} {
		res, err := c.Generate(ctx, seeded)
		if err != nil || !slices.Equal(res.Tokens, want.Tokens) || res.PolicyVersion != 7 {
			t.Fatalf("%s: %+v, %v; want the merged weights' seeded tokens %v at version 7", name, res, err, want.Tokens)
		}
	}

	// A reload of the next adapter (as a LoRA run's weight sync sends)
	// reaches the adapter and leaves the base.
	v, err := gc.(*grpcclient.Client).Reload(ctx, ad2)
	if err != nil || v != 8 {
		t.Fatalf("Reload(%s) = %d, %v; want version 8", ad2, v, err)
	}
	if name, dir := r.srv.Adapter(); name != "tiny-lora" || dir != ad2 || r.srv.Checkpoint() != base {
		t.Fatalf("after the reload the server serves adapter %q from %s on %s", name, dir, r.srv.Checkpoint())
	}
	for _, p := range prompts {
		got := complete(t, r.httpAddr, "tiny-lora", p, 12)
		if err := sameResult(got, greedyRef(t, ref2, p, 12)); err != nil || got.Version != 8 {
			t.Fatalf("reloaded adapter, prompt %v: %v (version %d, want 8)", p, err, got.Version)
		}
		if gb := complete(t, r.httpAddr, "tiny", p, 12); gb.Version != 3 {
			t.Fatalf("the base moved to version %d with the adapter's reload", gb.Version)
		}
	}
	if in, err := gc.Info(ctx); err != nil || in.PolicyVersion != 8 {
		t.Fatalf("gRPC health after the reload: %+v, %v; want the adapter's version 8", in, err)
	}
}

// TestServeLoRABadInput checks that aipo serve --lora refuses, naming the
// input and the fix: an adapter trained on another base, a missing
// directory, a whole model given as the adapter, an adapter named as the
// base, a whole-model reload while an adapter is served, and an adapter
// reload on a server started without one.
func TestServeLoRABadInput(t *testing.T) {
	tmp := t.TempDir()
	base := rundir.Checkpoint(tmp, 3)
	bm := testModel(t, 5)
	saveCheckpoint(t, base, bm, 3)
	other := bm.Config()
	other.HiddenSize, other.NumHiddenLayers = 64, 3
	wrong := filepath.Join(tmp, "wrong-base")
	writeAdapter(t, wrong, other, 1, 1)
	good := filepath.Join(tmp, "good")
	writeAdapter(t, good, bm.Config(), 2, 2)
	cases := []struct {
		name string
		opts Options
		want []string
	}{
		{"another base", Options{LoRA: wrong}, []string{"trained on another base", wrong}},
		{"missing dir", Options{LoRA: filepath.Join(tmp, "nowhere")}, []string{"does not exist", "nowhere", "adapter_config.json"}},
		{"whole model as adapter", Options{LoRA: base}, []string{"is a whole model", "pass it as the base"}},
		{"same name", Options{LoRA: good, LoRAName: "tiny"}, []string{"both called \"tiny\"", "--lora-name"}},
	}
	for _, c := range cases {
		c.opts.Checkpoint, c.opts.Name, c.opts.Logger = base, "tiny", quietLogger()
		_, err := New(context.Background(), c.opts)
		if err == nil {
			t.Errorf("%s: served", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}

	ctx := ctxT(t, 30*time.Second)
	r := start(t, Options{Checkpoint: base, LoRA: good})
	if _, err := r.srv.Reload(ctx, base); err == nil || !strings.Contains(err.Error(), "reload adapter directories") {
		t.Errorf("a whole-model reload on an adapter server: %v", err)
	}
	if _, err := r.srv.Reload(ctx, wrong); err == nil || !strings.Contains(err.Error(), "trained on another base") {
		t.Errorf("a reload of an adapter of another base: %v", err)
	}
	if name, dir := r.srv.Adapter(); name != "good" || dir != good {
		t.Errorf("after the failed reloads the server serves %q from %s, want good from %s", name, dir, good)
	}
	plain := start(t, Options{Checkpoint: base})
	if _, err := plain.srv.Reload(ctx, good); err == nil || !strings.Contains(err.Error(), "start it with --checkpoint BASE --lora") {
		t.Errorf("an adapter reload on a server without one: %v", err)
	}
}

// TestWatchLoRARun serves a LoRA run watched on its base: its newest
// committed adapter is served under the run's name, and a newer one
// replaces it.
func TestWatchLoRARun(t *testing.T) {
	tmp := t.TempDir()
	base := filepath.Join(tmp, "base")
	bm := testModel(t, 5)
	saveCheckpoint(t, base, bm, 0)
	run := filepath.Join(tmp, "lora-run")
	commit := func(k int64, seed uint64) string {
		dir := rundir.Checkpoint(run, k)
		writeAdapter(t, dir, bm.Config(), seed, k)
		if err := mkdirFile(dir, rundir.CommittedName); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	first := commit(1, 21)
	r := start(t, Options{Checkpoint: base, WatchRun: run, Name: "base"})
	if name, dir := r.srv.Adapter(); name != "lora-run" || dir != first {
		t.Fatalf("watching a LoRA run serves adapter %q from %s, want lora-run from %s", name, dir, first)
	}
	ctx := ctxT(t, 30*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.srv.Watch(wctx, 20*time.Millisecond)
	next := commit(2, 22)
	for {
		if _, dir := r.srv.Adapter(); dir == next {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the run's adapter 2 was not loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := complete(t, r.httpAddr, "lora-run", []int32{1, 2}, 3); got.Version != 2 {
		t.Fatalf("after the watched reload the adapter answers version %d, want 2", got.Version)
	}
	if r.srv.Checkpoint() != base {
		t.Fatalf("the base moved to %s", r.srv.Checkpoint())
	}
}
