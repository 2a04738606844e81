//go:build torch

package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/internal/vllmserver"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/transforms/chattemplate"
)

// transformersLogitTol bounds |aipo - transformers| on a logit, both in
// float32 on the same weights (a bfloat16 checkpoint is widened exactly on
// both sides). What separates them is the order of float32 operations:
// GEMMs of 64 and 128 terms blocked differently (OpenBLAS against
// PyTorch's CPU kernels), RMSNorm's and softmax's reductions, and the
// rotary angles, which transformers computes as float32 products position
// x inverse frequency (an error of up to position x 2^-24 radians, under
// 1e-5 at the 60 positions here). Each costs a few float32 ulps relative
// to the values it touches; through two layers and a 64-wide head they add
// to about 1e-6 relative on logits of magnitude up to ~10-20: 1e-5 to a
// few 1e-5 absolute, which is what the families measure (6.7e-6 to 2.5e-5
// on this machine). 1e-4 leaves a margin of four for other CPUs' kernels.
const transformersLogitTol = 1e-4

// greedyTieGap: where aipo's top two logits are closer than this, either
// token is a correct greedy choice within float32 rounding (10 x the
// logit tolerance), so greedy sequences are compared up to such a position
// only.
const greedyTieGap = 10 * transformersLogitTol

// TestTransformersLoadsCheckpoints lets Hugging Face transformers judge
// the checkpoints aipo writes. For Qwen2.5, Qwen3 and Llama 3.2 (tiny
// models of the real architectures with the real tokenizers and chat
// templates), in float32 and bfloat16, `aipo train --init DIR` runs one
// GRPO step on GSM8K prompts; then transformers' AutoModelForCausalLM and
// AutoTokenizer load the checkpoint it wrote (scripts/pychecks/
// transformers_check.py, in the environment of scripts/vllm.sh):
//   - no missing, unexpected or mismatched keys and no warning, the
//     architecture's own class, parameters in the dtype config.json names;
//   - its logits on fixed prompts are aipo's within transformersLogitTol;
//   - generate's greedy tokens are aipo serve's (temperature 0);
//   - apply_chat_template on conversations (system, multi-turn, the agent
//     tags inside content, generation prompt on and off) gives the ids
//     aipo's rendering and tokenizer give.
func TestTransformersLoadsCheckpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("trains six tiny models and loads them with transformers")
	}
	py := vllmserver.Python(t)
	base := t.TempDir()
	rows := sameAnswerGSM8K(t, "3", 4)
	train := convertGSM8K(t, base, "gsm8k-answer-3", rows)
	for _, fam := range tfFamilies(t) {
		t.Run(fam.name, func(t *testing.T) {
			warm := warmStartAnswer(t, fam, rows)
			for _, dtype := range []string{"float32", "bfloat16"} {
				t.Run(dtype, func(t *testing.T) {
					dir := filepath.Join(base, fam.name+"-"+dtype)
					init := filepath.Join(dir, "init")
					cfg := strings.Replace(fam.config, `"torch_dtype": "float32"`, fmt.Sprintf("%q: %q", "torch_dtype", dtype), 1)
					writeFamilyDir(t, fam, init, cfg, warm, dtype)
					ckpt := trainOneStep(t, dir, init, train, "")
					checkWithTransformers(t, py, fam, ckpt, dtype)
				})
			}
		})
	}
}

// TestTransformersLoadsShardedCheckpoint: a Qwen3 bfloat16 step trained by
// `aipo train --nproc 2` with checkpoint.max_shard_size a quarter of the
// weights commits model-0000i-of-0000n.safetensors shards (the embedding
// in one, the rest in others), written by both ranks, and model.safetensors.index.json, which transformers loads and
// judges as TestTransformersLoadsCheckpoints does (keys, dtype, logits,
// greedy tokens, chat ids).
func TestTransformersLoadsShardedCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a tiny model on two ranks and loads it with transformers")
	}
	py := vllmserver.Python(t)
	base := t.TempDir()
	rows := sameAnswerGSM8K(t, "3", 4)
	train := convertGSM8K(t, base, "gsm8k-answer-3", rows)
	fam := tfFamilies(t)[1]
	if fam.name != "qwen3" {
		t.Fatalf("family 1 is %s, want qwen3", fam.name)
	}
	warm := warmStartAnswer(t, fam, rows)
	var total int64
	for _, ts := range warm {
		total += int64(len(ts.Data) * 2)
	}
	shard := total / 4
	dir := filepath.Join(base, "sharded")
	init := filepath.Join(dir, "init")
	const dtype = "bfloat16"
	cfg := strings.Replace(fam.config, `"torch_dtype": "float32"`, fmt.Sprintf("%q: %q", "torch_dtype", dtype), 1)
	writeFamilyDir(t, fam, init, cfg, warm, dtype)
	ckpt := trainOneStep(t, dir, init, train, fmt.Sprintf("checkpoint:\n  max_shard_size: %d\n", shard), "--nproc", "2")
	idx := filepath.Join(ckpt, checkpoint.WeightsIndexName)
	if _, err := os.Stat(idx); err != nil {
		t.Fatalf("no shard index at checkpoint.max_shard_size %d: %v", shard, err)
	}
	shards, err := filepath.Glob(filepath.Join(ckpt, "model-*-of-*.safetensors"))
	// The tied embedding is most of the weights: a shard of its own.
	if err != nil || len(shards) < 2 {
		t.Fatalf("%d weight shards in %s (%v); want at least 2", len(shards), ckpt, err)
	}
	t.Logf("%s: %d shards of at most %d bytes, written by 2 ranks", ckpt, len(shards), shard)
	checkWithTransformers(t, py, fam, ckpt, dtype)
}

// trainOneStep runs `aipo train --init init` for one GRPO step (the policy
// sampled in process, no collaborators) and returns the checkpoint it
// committed, after checking that the step had a gradient. more is added
// to the run YAML, args to the command line.
func trainOneStep(t *testing.T, dir, init, train, more string, args ...string) string {
	t.Helper()
	run := filepath.Join(dir, "run")
	cfgPath := filepath.Join(dir, "run.yaml")
	text := fmt.Sprintf(`run: {name: transformers, dir: %q, seed: 0, steps: 1}
data:
  sources: [{path: %q, preset: verl}]
  batch_size: 4
policy:
  temperature: 1.0
  max_response_tokens: 24
rollout:
  group_size: 8
  max_interactions: 0
learner:
  loss: {base: grpo}
  optim: {lr: 1.0e-3}
  backend: cpu
eval:
  every: 0
`, run, train) + more
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runAipoFor(t, 5*time.Minute, nil, append([]string{"train", "--config", cfgPath, "--init", init}, args...)...)
	if code != 0 {
		t.Fatalf("aipo train exited %d:\n%s", code, out)
	}
	var rec struct {
		GradNorm float64 `json:"grad_norm"`
		Rollout  struct {
			Accuracy float64 `json:"accuracy"`
		} `json:"rollout"`
	}
	b, err := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("metrics.jsonl: %v\n%s", err, b)
	}
	if !(rec.GradNorm > 0) {
		t.Fatalf("the GRPO step had no gradient (accuracy %.3f): the checkpoint would be the warm start's weights\n%s", rec.Rollout.Accuracy, out)
	}
	t.Logf("aipo train, 1 step: accuracy %.3f, grad-norm %.3g", rec.Rollout.Accuracy, rec.GradNorm)
	return filepath.Join(run, "checkpoints", "step-000001")
}

// tfReport is what transformers_check.py writes.
type tfReport struct {
	Versions    map[string]string   `json:"versions"`
	ModelClass  string              `json:"model_class"`
	ConfigDType string              `json:"config_dtype"`
	ParamDTypes []string            `json:"param_dtypes"`
	LoadingInfo map[string][]string `json:"loading_info"`
	Warnings    []string            `json:"warnings"`
	Logits      []string            `json:"logits"`
	Greedy      [][]int32           `json:"greedy"`
	Chat        [][]int             `json:"chat"`
}

// tfConversations are the conversations whose chat-template ids are
// compared, each with the generation prompt on or off.
var tfConversations = []struct {
	msgs []chattemplate.Message
	gen  bool
}{
	{[]chattemplate.Message{{Role: "user", Content: "What is 2+2?"}}, true},
	{[]chattemplate.Message{{Role: "user", Content: "What is 2+2?"}}, false},
	{[]chattemplate.Message{{Role: "system", Content: "You are a careful solver. Put the answer in \\boxed{}."}, {Role: "user", Content: "Janet has 3 apples and buys 5 more. How many?"}}, true},
	{[]chattemplate.Message{{Role: "user", Content: "Solve x^2 = 9."}, {Role: "assistant", Content: "x = 3 or x = -3."}, {Role: "user", Content: "And x^3 = 8?"}}, true},
	{[]chattemplate.Message{{Role: "user", Content: "Check 17*3 <verify>is it 51?</verify> and recall <knowledge>primes</knowledge>, Ünïcode 🙂\n\ttabs."}}, true},
	{[]chattemplate.Message{{Role: "user", Content: "Say hello."}, {Role: "assistant", Content: "Hello. <reason>a greeting</reason>"}}, false},
}

func checkWithTransformers(t *testing.T, py string, fam tfFamily, ckpt, dtype string) {
	t.Helper()
	tok, tm := familyTokenizer(t, fam)
	m := loadModel(t, ckpt)
	V := m.Config().VocabSize

	prompts := [][]int32{
		int32s(tok.Encode("Janet has 3 apples and buys 5 more. How many apples does she have?")),
		int32s(tok.EncodeSpecial(mustRender(t, tm, fam, []chattemplate.Message{{Role: "user", Content: "What is 7 times 8? Think step by step."}}, true))),
	}
	type conv struct {
		Messages []chattemplate.Message `json:"messages"`
		Gen      bool                   `json:"add_generation_prompt"`
		Kwargs   map[string]any         `json:"chat_template_kwargs,omitempty"`
	}
	var convs []conv
	for _, c := range tfConversations {
		cv := conv{Messages: c.msgs, Gen: c.gen}
		if fam.think {
			cv.Kwargs = map[string]any{"enable_thinking": false}
		}
		convs = append(convs, cv)
	}
	const newTokens = 16
	req := map[string]any{"dir": ckpt, "prompts": prompts,
		"greedy": map[string]any{"prompts": prompts, "max_new_tokens": newTokens}, "conversations": convs}
	out := t.TempDir()
	reqPath := filepath.Join(out, "request.json")
	writeJSON(t, reqPath, req)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join(testtools.RepoRoot(), "scripts", "pychecks", "transformers_check.py"), reqPath, out)
	if log, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("transformers_check.py on %s: %v\n%s", ckpt, err, log)
	}
	var rep tfReport
	readJSON(t, filepath.Join(out, "report.json"), &rep)

	// Loading: the architecture's class, every key matched, no warning,
	// parameters in the dtype config.json names.
	c, err := hfconfig.Parse(mustRead(t, filepath.Join(ckpt, checkpoint.ConfigName)))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Architectures) != 1 || rep.ModelClass != c.Architectures[0] {
		t.Errorf("transformers loaded %s, config.json names %v", rep.ModelClass, c.Architectures)
	}
	for k, v := range rep.LoadingInfo {
		if len(v) != 0 {
			t.Errorf("transformers' loading info %s: %v", k, v)
		}
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("transformers warned loading %s:\n%s", ckpt, strings.Join(rep.Warnings, "\n"))
	}
	if rep.ConfigDType != dtype || !slices.Equal(rep.ParamDTypes, []string{dtype}) {
		t.Errorf("transformers reads dtype %s and holds parameters in %v, want %s", rep.ConfigDType, rep.ParamDTypes, dtype)
	}

	// Logits.
	worst := 0.0
	for i, ids := range prompts {
		theirs := readF32(t, filepath.Join(out, rep.Logits[i]))
		ours, err := m.Logits(model.Batch{Tokens: ids, SeqLens: []int{len(ids)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(theirs) != len(ids)*V || len(ours) != len(theirs) {
			t.Fatalf("prompt %d: transformers wrote %d logits, aipo %d, want %d x %d", i, len(theirs), len(ours), len(ids), V)
		}
		for j := range ours {
			worst = max(worst, math.Abs(float64(ours[j])-float64(theirs[j])))
		}
	}
	if worst > transformersLogitTol {
		t.Errorf("logits: aipo and transformers differ by up to %.3g (tolerance %g)", worst, transformersLogitTol)
	}

	// Greedy tokens: aipo serve's against generate's.
	addr := freeAddr(t)
	stop := serveOn(t, ckpt, "policy", "", addr)
	compared, ties := 0, 0
	for i, ids := range prompts {
		a, err := postCompletion(ctx, http.DefaultClient, "http://"+addr, map[string]any{"model": "policy", "prompt": ids,
			"max_tokens": newTokens, "temperature": 0, "return_token_ids": true, "skip_special_tokens": false})
		if err != nil || len(a.Choices) != 1 {
			t.Fatalf("aipo serve greedy: %v %+v", err, a)
		}
		ours, theirs := a.Choices[0].TokenIDs, rep.Greedy[i]
		n := greedyAgreed(t, m, ids, ours, theirs)
		if n < min(len(ours), len(theirs)) {
			ties++
		}
		compared += n
	}
	stop()
	if ties == len(prompts) || compared < 8 {
		t.Errorf("greedy: %d tokens compared, %d of %d sequences cut at a near-tie: too few to judge", compared, ties, len(prompts))
	}

	// Chat template ids.
	for i, cv := range tfConversations {
		ours := tok.EncodeSpecial(mustRender(t, tm, fam, cv.msgs, cv.gen))
		if !slices.Equal(ours, rep.Chat[i]) {
			t.Errorf("conversation %d (generation prompt %v): aipo renders %d ids, transformers' apply_chat_template %d:\naipo         %v\ntransformers %v",
				i, cv.gen, len(ours), len(rep.Chat[i]), ours, rep.Chat[i])
		}
	}
	t.Logf("%s %s (transformers %s, torch %s): %s, no missing/unexpected/mismatched keys, no warning; logits max |delta| %.3g over %d prompts; greedy: %d tokens equal (%d sequences stopped at a near-tie); %d conversations' chat ids equal",
		fam.name, dtype, rep.Versions["transformers"], rep.Versions["torch"], rep.ModelClass, worst, len(prompts), compared, ties, len(tfConversations))
}

// greedyAgreed checks aipo's greedy continuation ours of prompt against
// transformers' theirs, token by token, up to the first position where
// aipo's top two logits are within greedyTieGap (or the end of either). It
// returns how many tokens it compared.
func greedyAgreed(t *testing.T, m *model.Model, prompt, ours, theirs []int32) int {
	t.Helper()
	V := m.Config().VocabSize
	seq := slices.Clone(prompt)
	for j := 0; j < min(len(ours), len(theirs)); j++ {
		lg, err := m.Logits(model.Batch{Tokens: seq, SeqLens: []int{len(seq)}})
		if err != nil {
			t.Fatal(err)
		}
		last := lg[len(lg)-V:]
		top, second := math.Inf(-1), math.Inf(-1)
		for _, v := range last {
			if x := float64(v); x > top {
				top, second = x, top
			} else if x > second {
				second = x
			}
		}
		if top-second < greedyTieGap {
			t.Logf("greedy token %d: aipo's top two logits %.3g apart, below %g: compared up to here", j, top-second, greedyTieGap)
			return j
		}
		if ours[j] != theirs[j] {
			t.Errorf("greedy token %d after %d prompt tokens: aipo serve %d, transformers %d (aipo's top two logits %.3g apart)\naipo         %v\ntransformers %v",
				j, len(prompt), ours[j], theirs[j], top-second, ours, theirs)
			return j
		}
		seq = append(seq, ours[j])
	}
	if len(ours) != len(theirs) {
		t.Errorf("greedy: aipo serve gave %d tokens, transformers %d\naipo         %v\ntransformers %v", len(ours), len(theirs), ours, theirs)
	}
	return min(len(ours), len(theirs))
}

func mustRender(t *testing.T, tm *chattemplate.Template, fam tfFamily, msgs []chattemplate.Message, gen bool) string {
	t.Helper()
	s, err := tm.Render(msgs, familyChatOptions(fam, gen))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readF32 reads a file of little-endian float32 values.
func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b := mustRead(t, path)
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
