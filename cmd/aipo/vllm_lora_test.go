//go:build vllm

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/internal/vllmserver"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/serve"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// loraAdapterName is the model name the tests load adapters under in
// vLLM (the policy endpoint's ?model= of a LoRA run).
const loraAdapterName = "policy-lora"

// loraFixture is a base Hugging Face directory of the tiny Qwen3 over the
// real vocabulary and what the LoRA tests derive from it.
type loraFixture struct {
	tokDir, base string
	config       []byte
	baseTensors  []checkpoint.Tensor
}

func newLoRAFixture(t testing.TB, dir, cfgJSON string) loraFixture {
	t.Helper()
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	base := filepath.Join(dir, "base")
	if err := hfmodel.WriteDir(base, []byte(cfgJSON), 5, checkpoint.F32, tokDir); err != nil {
		t.Fatal(err)
	}
	ts, _, err := checkpoint.LoadSafetensors(context.Background(), filepath.Join(base, checkpoint.WeightsName))
	if err != nil {
		t.Fatal(err)
	}
	return loraFixture{tokDir: tokDir, base: base, config: []byte(cfgJSON), baseTensors: ts}
}

// adapter writes a rank-r adapter on every target into dir, as the LoRA
// learner saves a step (PEFT's files and aipo's trainer_state.json beside
// them), with B drawn from seed so that it changes the output (PEFT starts
// B at zero).
func (f loraFixture) adapter(t testing.TB, dir string, r int, seed uint64, version int64) *peft.Adapter {
	t.Helper()
	c, err := hfconfig.Parse(f.config)
	if err != nil {
		t.Fatal(err)
	}
	d, err := peft.DimsOf(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := peft.NewConfig(f.base, r, float64(2*r), 0, nil, peft.InitDefault)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	a, err := peft.New(cfg, d, rng)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range a.Modules {
		for i := range m.B {
			m.B[i] = float32(rng.NormFloat64() * 0.05)
		}
	}
	if err := peft.Write(context.Background(), dir, a, checkpoint.F32); err != nil {
		t.Fatal(err)
	}
	st, err := json.Marshal(checkpoint.TrainerState{Step: version, PolicyVersion: version, RunID: "lora"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.TrainerStateName), st, 0o644); err != nil {
		t.Fatal(err)
	}
	return a
}

// merged writes the base with a merged (peft's Merge onto the base's
// safetensors) as a Hugging Face directory, as aipo lora merge does.
func (f loraFixture) merged(t testing.TB, dir string, a *peft.Adapter) {
	t.Helper()
	ts, err := a.Merge(f.baseTensors)
	if err != nil {
		t.Fatal(err)
	}
	if err := hfmodel.WriteTensors(dir, f.config, ts, checkpoint.F32, f.tokDir); err != nil {
		t.Fatal(err)
	}
}

// weightBytes is the size of a directory's weight files: what a weight
// sync has the server read.
func weightBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	for _, name := range []string{checkpoint.WeightsName, peft.WeightsFile} {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil {
			n += st.Size()
		}
	}
	return n
}

// greedy is a server's greedy completion of prompt by model, with the
// log-probs of its tokens.
type greedy struct {
	Tokens   []int32
	LogProbs []float64
}

func greedyOf(t testing.TB, root, model string, prompt []int32, n int) greedy {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0,
		"logprobs": 0, "return_token_ids": true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, root+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: completion by %q: %v", root, model, err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				TokenLogprobs []float64 `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 {
		t.Fatalf("%s: completion by %q: %d, %+v, %v", root, model, resp.StatusCode, out, err)
	}
	c := out.Choices[0]
	if len(c.TokenIDs) != len(c.Logprobs.TokenLogprobs) {
		t.Fatalf("%s: %d tokens and %d log-probs", root, len(c.TokenIDs), len(c.Logprobs.TokenLogprobs))
	}
	return greedy{c.TokenIDs, c.Logprobs.TokenLogprobs}
}

// loadHF builds the learner's model of a Hugging Face directory.
func loadHF(t testing.TB, dir string) *model.Model {
	t.Helper()
	ck, err := checkpoint.LoadServed(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := trainer.ModelFromTensors(ck.Config, ck.Tensors)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// worstDelta is the largest |vLLM's log-prob - the learner's Score on m|
// over g's tokens after prompt.
func worstDelta(t testing.TB, m *model.Model, prompt []int32, g greedy) float64 {
	t.Helper()
	ids := append(slices.Clone(prompt), g.Tokens...)
	lps, _, err := m.Score(model.Batch{Tokens: ids})
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, lp := range g.LogProbs {
		worst = max(worst, math.Abs(lp-float64(lps[len(prompt)-1+i])))
	}
	return worst
}

// vllmLoRAArgs start vLLM with runtime LoRA loading of adapters up to
// rank 8 (VLLM_ALLOW_RUNTIME_LORA_UPDATING, set by startLoRAVLLM).
var vllmLoRAArgs = []string{"--enable-lora", "--max-lora-rank", "8", "--max-loras", "1"}

func startLoRAVLLM(t testing.TB, base string) *vllmserver.Server {
	t.Helper()
	t.Setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
	return vllmserver.Start(t, base, vllmserver.Options{Name: "policy", Args: vllmLoRAArgs})
}

// TestVLLMLoRA runs one real vLLM (CPU build, float32, LoRA enabled) on
// the tiny Qwen3 with the real vocabulary and has the weight sync of a
// LoRA run push aipo-written adapters to it through runtime adapter
// loading: vLLM's greedy tokens with the adapter are aipo serve --lora's,
// and its log-probs are the learner's Score on the base with the adapter
// merged, within vllmLogProbTol (vLLM applies the adapter unmerged, its
// shrink and expand products in float32 beside the base's: one more
// product per layer in another summation order, far below the tolerance's
// budget); the base stays the base; a second adapter version reaches it,
// versions checked; an adapter above --max-lora-rank is refused with the
// fix; and the merged directory, pushed as full weights, gives the
// adapter's tokens.
func TestVLLMLoRA(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real vLLM")
	}
	ctx := context.Background()
	tmp := t.TempDir()
	f := newLoRAFixture(t, tmp, hfmodel.TinyQwen3VLLMConfig)
	a1dir, a2dir, big := filepath.Join(tmp, "run", "step-1"), filepath.Join(tmp, "run", "step-2"), filepath.Join(tmp, "rank16")
	a1 := f.adapter(t, a1dir, 8, 1, 1)
	a2 := f.adapter(t, a2dir, 8, 2, 2)
	f.adapter(t, big, 16, 3, 3)
	m1dir := filepath.Join(tmp, "merged-1")
	f.merged(t, m1dir, a1)
	m2dir := filepath.Join(tmp, "merged-2")
	f.merged(t, m2dir, a2)
	tok, err := tokenizer.Load(f.tokDir)
	if err != nil {
		t.Fatal(err)
	}
	var prompts [][]int32
	for _, s := range []string{"Janet has 3 apples and buys 5 more. How many", "The capital of France is", "def fib(n):"} {
		var p []int32
		for _, id := range tok.Encode(s) {
			p = append(p, int32(id))
		}
		prompts = append(prompts, p)
	}
	const n = 16

	// aipo serve --lora on the same base and first adapter.
	aipoAddr, aipoGRPC := freeAddr(t), freeAddr(t)
	defer serveWith(t, serve.Options{Checkpoint: f.base, Name: "policy", LoRA: a1dir, LoRAName: loraAdapterName, DType: serve.DTypeF32}, aipoGRPC, aipoAddr)()
	aipoRoot := "http://" + aipoAddr
	ga, err := weightsync.Open(ctx, "aipo", []string{"grpc://" + aipoGRPC}, weightsync.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer ga.Close()

	vs := startLoRAVLLM(t, f.base)
	defer func() {
		if t.Failed() {
			t.Logf("the end of vLLM's log (%s):\n%s", vs.Log, vs.Tail(40))
		}
	}()
	g, err := weightsync.Open(ctx, "vllm", []string{vs.URL}, weightsync.Options{Timeout: 2 * time.Minute, Adapter: loraAdapterName})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	push := func(dir string, version int64) error {
		return g.Push(ctx, weightsync.Checkpoint{Dir: dir, Version: version})
	}
	checkVersion := func(v int64) {
		t.Helper()
		stale, err := g.Stale(ctx, v)
		if err != nil || len(stale) != 0 || !g.NamesVersions() {
			t.Fatalf("after pushing version %d: stale %v, %v (names versions: %v)", v, stale, err, g.NamesVersions())
		}
	}
	base := loadHF(t, f.base)

	// compare checks vLLM's adapter against aipo serve --lora and the
	// learner on merged.
	compare := func(t *testing.T, merged *model.Model) {
		t.Helper()
		for _, p := range prompts {
			v := greedyOf(t, vs.URL, loraAdapterName, p, n)
			a := greedyOf(t, aipoRoot, loraAdapterName, p, n)
			if !slices.Equal(v.Tokens, a.Tokens) {
				t.Errorf("prompt %v: vLLM's greedy tokens with the adapter %v, aipo serve --lora's %v", p, v.Tokens, a.Tokens)
			}
			d := worstDelta(t, merged, p, v)
			if d > vllmLogProbTol {
				t.Errorf("prompt %v: vLLM's log-probs with the adapter differ from the learner's on the merged weights by up to %.3g, more than %.0e", p, d, vllmLogProbTol)
			}
			if db := worstDelta(t, base, p, v); db < 10*vllmLogProbTol {
				t.Errorf("prompt %v: vLLM's log-probs with the adapter are within %.3g of the base's: the adapter did not reach its samples", p, db)
			}
			t.Logf("prompt of %d tokens: %d greedy tokens alike; vLLM LoRA vs learner merged max |delta log-prob| %.3g, vs the base %.3g", len(p), len(v.Tokens), d, worstDelta(t, base, p, v))
		}
	}

	t.Run("adapter", func(t *testing.T) {
		if err := push(a1dir, 1); err != nil {
			t.Fatal(err)
		}
		checkVersion(1)
		compare(t, loadHF(t, m1dir))
		// The base, asked by its own name, is still the base.
		for _, p := range prompts[:1] {
			if d := worstDelta(t, base, p, greedyOf(t, vs.URL, "policy", p, n)); d > vllmLogProbTol {
				t.Errorf("the base's log-probs moved by %.3g once the adapter was loaded", d)
			}
		}
	})
	t.Run("reload", func(t *testing.T) {
		if err := push(a2dir, 2); err != nil {
			t.Fatal(err)
		}
		checkVersion(2)
		// aipo serve --lora takes the same push through its Reload RPC.
		if err := ga.Push(ctx, weightsync.Checkpoint{Dir: a2dir, Version: 2}); err != nil {
			t.Fatal(err)
		}
		compare(t, loadHF(t, m2dir))
	})
	t.Run("rank above max-lora-rank", func(t *testing.T) {
		err := push(big, 3)
		if err == nil || !strings.Contains(err.Error(), "--max-lora-rank at least its rank 16") {
			t.Fatalf("pushing a rank-16 adapter to a vLLM of --max-lora-rank 8: %v; want the fix named", err)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("merged directory", func(t *testing.T) {
		// The merged directory of adapter 2, pushed as full weights (the
		// weight sync of a run without LoRA), serves the base name with
		// the adapter's tokens.
		if err := push(m2dir, 4); err != nil {
			t.Fatal(err)
		}
		checkVersion(4)
		for _, p := range prompts {
			v := greedyOf(t, vs.URL, "policy", p, n)
			a := greedyOf(t, aipoRoot, loraAdapterName, p, n)
			if !slices.Equal(v.Tokens, a.Tokens) {
				t.Errorf("prompt %v: vLLM on the merged directory samples %v, aipo serve --lora %v", p, v.Tokens, a.Tokens)
			}
		}
	})
}

// vllmLoRATrain trains a LoRA adapter for 5 steps of the tiny recipe on
// warm, every rollout sampled by the real vLLM vs (behind px, LoRA
// enabled) with the adapter of its step's checkpoint, loaded at run time
// by the weight sync after the run's base: every checkpoint's adapter
// reaches vLLM, in order; every completion of the run names the adapter;
// the sampled tokens and log-probs are vLLM's, and the learner's own
// log-probs of them under the checkpoint that sampled them (the base with
// its adapter merged) are within vllmLogProbTol; vLLM's weight version
// ends at 5; the loss moves and the adapter with it; the base's bytes are
// unchanged and the run's copy of it holds --init's tensors.
func vllmLoRATrain(t *testing.T, vs *vllmserver.Server, px *vllmProxy, warm, trainData, collabAddr, dir string) {
	ctx := context.Background()
	const steps = 5
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, "run")
	cfgPath := filepath.Join(dir, "run.yaml")
	text := tinyRecipe{name: "vllm-lora", dir: runDir, steps: steps, train: trainData, batch: 4,
		policy: px.URL + "/v1?model=" + loraAdapterName, sync: fmt.Sprintf("{kind: vllm, endpoints: [%q], timeout: 120s}", px.URL),
		group: 4, loss: "dapo", collab: collabAddr, eval: "eval:\n  every: 0\n"}.yaml()
	for _, r := range [][2]string{
		{"  backend: cpu\n", "  backend: cpu\n  lora: {rank: 8, alpha: 16, targets: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}\n"},
		{"lr: 1.0e-4", "lr: 1.0e-2"},
	} {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("the tiny recipe has no %q", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	warmWeights := filepath.Join(warm, checkpoint.WeightsName)
	before := fileDigest(t, warmWeights)
	calls0, _ := px.snapshot()
	loads0 := len(px.adapterLoads())

	t0 := time.Now()
	code, out := runAipoFor(t, 15*time.Minute, nil, "train", "--config", cfgPath, "--init", warm)
	if code != 0 {
		t.Fatalf("aipo train with LoRA against vLLM exited %d:\n%s", code, out)
	}
	t.Logf("aipo train, %d LoRA steps sampled by vLLM: %s", steps, time.Since(t0).Round(time.Second))
	for _, want := range []string{"serve the LoRA run's base", fmt.Sprintf("step %d/%d: loss", steps, steps)} {
		if !strings.Contains(out, want) {
			t.Errorf("aipo train's output lacks %q:\n%s", want, out)
		}
	}

	// Every checkpoint's adapter reached vLLM, in order, and every
	// completion of the run (rollouts and the sync's probes) named it.
	var want []string
	for k := int64(0); k <= steps; k++ {
		abs, err := filepath.Abs(rundir.Checkpoint(runDir, k))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, abs)
	}
	if got := px.adapterLoads()[loads0:]; !slices.Equal(got, want) {
		t.Errorf("vLLM loaded the adapters %v; want checkpoints 0 to %d in order: %v", got, steps, want)
	}
	all, _ := px.snapshot()
	calls := all[len(calls0):]
	// The one completion that names no model is the probe after the
	// base's push (the served model, before any adapter).
	baseProbes := 0
	for _, c := range calls {
		switch {
		case c.Model == loraAdapterName:
		case c.Model == "" && c.PromptLogProbs != nil:
			baseProbes++
		default:
			t.Errorf("a completion of the LoRA run asked for model %q (probe: %v), not the adapter %q", c.Model, c.PromptLogProbs != nil, loraAdapterName)
		}
	}
	if baseProbes != 1 {
		t.Errorf("%d probes of the base during the LoRA run; want 1, after the base's push", baseProbes)
	}
	kept, err := checkpoint.List(ctx, runDir)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for k, trajs := range sampledByTheirStep(t, runDir, steps) {
		checkAgainstVLLM(t, calls, trajs)
		if !slices.Contains(kept, int64(k)) {
			continue
		}
		m := loadHF(t, rundir.Checkpoint(runDir, int64(k)))
		if d := mismatch(t, m, trajs); d > vllmLogProbTol {
			t.Errorf("step %d: the learner's log-probs (checkpoint %d's adapter merged) of vLLM's tokens differ by up to %.3g, more than %.0e", k, k, d, vllmLogProbTol)
		} else {
			t.Logf("step %d: vLLM with checkpoint %d's adapter against the learner: max |delta| %.3g", k, k, d)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("no step's checkpoint was kept (%v) to score its samples with", kept)
	}

	var info struct {
		WeightVersion string `json:"weight_version"`
	}
	resp, err := http.Get(vs.URL + "/weight_info")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info.WeightVersion != fmt.Sprint(steps) {
		t.Errorf("after the LoRA run vLLM's weight_version is %q, want %d", info.WeightVersion, steps)
	}

	// The loss moved, and the adapter with it.
	losses := map[string]bool{}
	for _, m := range regexp.MustCompile(`step \d+/\d+: loss (\S+)`).FindAllStringSubmatch(out, -1) {
		losses[strings.TrimRight(m[1], ",")] = true
	}
	if len(losses) < 2 {
		t.Errorf("the loss took %d distinct values over %d steps: %v", len(losses), steps, losses)
	}
	last, err := peft.Read(ctx, rundir.Checkpoint(runDir, steps))
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, m := range last.Modules {
		moved = moved || slices.ContainsFunc(m.B, func(x float32) bool { return x != 0 })
	}
	if !moved {
		t.Errorf("checkpoint %d's adapter still has B = 0: nothing was trained", steps)
	}

	// The base is untouched: --init's bytes, and the run's copy holds its
	// tensors.
	if after := fileDigest(t, warmWeights); after != before {
		t.Errorf("--init's weights changed during the LoRA run: sha256 %s, was %s", after, before)
	}
	a, _, err := checkpoint.LoadSafetensors(ctx, warmWeights)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := checkpoint.LoadSafetensors(ctx, filepath.Join(rundir.LoRABase(runDir), checkpoint.WeightsName))
	if err != nil {
		t.Fatal(err)
	}
	// The run's copy may write a tied head out as lm_head.weight; every
	// tensor of --init is in it with the same values.
	byName := map[string][]float32{}
	for _, x := range b {
		byName[x.Name] = x.Data
	}
	for _, x := range a {
		if got, ok := byName[x.Name]; !ok || !slices.Equal(got, x.Data) {
			t.Errorf("the run's base's %s differs from --init's (present: %v)", x.Name, ok)
		}
	}
}
