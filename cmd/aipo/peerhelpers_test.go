//go:build flink || shareddata || torch || trl || vllm

// The helpers of the tests that train tiny models of the real families on
// GSM8K with the real tokenizers of ../shared/data (the rehearsal, Flink
// and Spark, vLLM, transformers, TRL), compiled with any of their tags.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/chattemplate"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/trajectories"
)

// gsm8kRow is a row of the bundled GSM8K training file.
type gsm8kRow struct {
	Question string `json:"question"`
	Answer   string `json:"answer"`
}

// oneDigitGSM8K returns the first n rows of path whose final answer (after
// "####") is one digit.
func oneDigitGSM8K(t *testing.T, path string, n int) []gsm8kRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []gsm8kRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && len(out) < n {
		var r gsm8kRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		_, a, ok := strings.Cut(r.Answer, "####")
		if a = strings.TrimSpace(a); ok && len(a) == 1 && a[0] >= '0' && a[0] <= '9' {
			out = append(out, r)
		}
	}
	if err := sc.Err(); err != nil || len(out) < n {
		t.Fatalf("%s: %d one-digit rows (%v), want %d", path, len(out), err, n)
	}
	return out
}

func writeJSONL[T any](t *testing.T, path string, rows []T) {
	t.Helper()
	var b strings.Builder
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// warmStartQwen3 writes to dir a Hugging Face directory of a tiny Qwen3
// (configJSON: hfmodel.TinyQwen3Config or TinyQwen3VLLMConfig) after steps of SFT on responses that call the
// Verify Agent and answer \boxed{d} with d a random digit, over prompts
// rendered as the run renders them; the result's tokens (random ones, as
// the collaborators' server will write) are context only. It returns the
// last SFT loss.
func warmStartQwen3(t *testing.T, tok *tokenizer.HF, tokDir, dir string, cfg runconfig.Config, rows []gsm8kRow, steps int, configJSON string) float64 {
	t.Helper()
	render, err := trajectories.NewRenderer("", "", []collab.Agent{collab.Verify, collab.Knowledge, collab.Reason}, cfg.Interact())
	if err != nil {
		t.Fatal(err)
	}
	const eos = 151645 // <|im_end|>, the tiny config's eos_token_id
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := make([]trainer.Sequence, 0, 32)
	for i := range cap(seqs) {
		row := rows[i%len(rows)]
		text, err := render.Render(schemas.Prompt{ID: fmt.Sprint(i), Problem: row.Question})
		if err != nil {
			t.Fatal(err)
		}
		s := trainer.Sequence{Prompt: int32s(tok.EncodeSpecial(text))}
		add := func(ids []int32, skip bool) {
			s.Response = append(s.Response, ids...)
			for range ids {
				s.Skip = append(s.Skip, skip)
			}
		}
		d := rng.IntN(10)
		add(int32s(tok.Encode(fmt.Sprintf("<verify>The answer is %d.</verify>\n", d))), false)
		add(int32s(tok.EncodeSpecial(interact.ResultOpen)), true)
		noise := make([]int32, 1+rng.IntN(6))
		for j := range noise {
			noise[j] = int32(1000 + rng.IntN(100000))
		}
		add(noise, true)
		add(int32s(tok.EncodeSpecial(interact.ResultClose)), true)
		add(int32s(tok.Encode(fmt.Sprintf("So the answer is \\boxed{%d}.", rng.IntN(10)))), false)
		add([]int32{eos}, false)
		seqs = append(seqs, s)
	}
	ts, loss := sftTrain(t, configJSON, seqs, steps)
	if err := hfmodel.WriteTensors(dir, []byte(configJSON), ts, checkpoint.F32, tokDir); err != nil {
		t.Fatal(err)
	}
	return loss
}

// sftTrain trains a random model of configJSON (seed 7) by steps of SFT on
// seqs (AdamW at 1e-2, no weight decay) and returns its weights and the
// last loss.
func sftTrain(t *testing.T, configJSON string, seqs []trainer.Sequence, steps int) ([]checkpoint.Tensor, float64) {
	t.Helper()
	l, err := hfmodel.SFTLearner([]byte(configJSON), 7, 1e-2)
	if err != nil {
		t.Fatal(err)
	}
	var loss float64
	for range steps {
		if loss, _, err = l.SFTStep(seqs, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	return trainer.Tensors(l.Policy), loss
}

// convertGSM8K writes rows (the bundled GSM8K file's layout) to
// dir/NAME.jsonl and converts them with `aipo data convert --preset
// gsm8k_train` to veRL's Parquet layout, dir/NAME.parquet, which it returns.
func convertGSM8K(t *testing.T, dir, name string, rows []gsm8kRow) string {
	t.Helper()
	raw := filepath.Join(dir, name+".jsonl")
	writeJSONL(t, raw, rows)
	out := filepath.Join(dir, name+".parquet")
	if code, text := runAipo(t, "data", "convert", "--preset", "gsm8k_train", "--in", raw, "--out", out); code != 0 {
		t.Fatalf("aipo data convert exited %d:\n%s", code, text)
	}
	return out
}

// tinyRecipe is the run configuration the end-to-end tests share: the
// paper's recipe at a size that trains in seconds, one interaction, the
// three collaborators behind one OpenAI-compatible endpoint.
type tinyRecipe struct {
	name, dir    string
	steps        int64
	train        string // a veRL parquet of prompts
	batch, group int64
	policy, sync string // policy.endpoint and policy.sync (YAML flow)
	loss         string // learner.loss.base
	collab       string // the collaborators' host:port
	eval         string // an eval: section, or empty
}

func (r tinyRecipe) yaml() string {
	return fmt.Sprintf(`run: {name: %s, dir: %q, seed: 0, steps: %d}
data:
  sources: [{path: %q, preset: verl}]
  batch_size: %d
policy:
  endpoint: %q
  sync: %s
  temperature: 1.0
  max_response_tokens: 40
rollout:
  group_size: %d
  max_interactions: 1
  opener_by: system
  answer_token_budget: 16
collaborators:
  verify: &collab {kind: openai, endpoint: "http://%s/v1", model: collab, timeout: 60s, max_generate_tokens: 6}
  knowledge: *collab
  reason: *collab
learner:
  loss: {base: %s, external: aipo, omega: 0.2}
  optim: {lr: 1.0e-4, grad_clip: 1.0}
  backend: cpu
%s`, r.name, r.dir, r.steps, r.train, r.batch, r.policy, r.sync, r.group, r.collab, r.loss, r.eval)
}

// tfFamily is one model family as a user brings it from the Hub.
type tfFamily struct {
	name   string
	config string // config.json, float32
	tok    string // directory of tokenizer.json (and tokenizer_config.json)
	tpl    string // tokenizer_config.json with the chat template, when not tok's
	eos    int32  // the end-of-turn token the warm start teaches
	think  bool   // the template takes enable_thinking (Qwen3): rendered off
}

func tfFamilies(t *testing.T) []tfFamily {
	qwen := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	llama := filepath.Dir(shareddata.Path(t, "tokenizers/llama3/tokenizer.json"))
	return []tfFamily{
		{name: "qwen2.5", config: hfmodel.TinyQwen2VLLMConfig, tok: qwen, eos: 151645,
			tpl: filepath.Join(testtools.RepoRoot(), "transforms", "chattemplate", "testdata", "qwen2.5", "tokenizer_config.json")},
		{name: "qwen3", config: hfmodel.TinyQwen3VLLMConfig, tok: qwen, eos: 151645, think: true},
		{name: "llama3", config: hfmodel.TinyLlama3Config, tok: llama, eos: 128009},
	}
}

// sameAnswerGSM8K returns n GSM8K training rows whose answer is answer.
func sameAnswerGSM8K(t *testing.T, answer string, n int) []gsm8kRow {
	t.Helper()
	var out []gsm8kRow
	for _, r := range oneDigitGSM8K(t, shareddata.Path(t, "math/gsm8k/train.jsonl"), 400) {
		if _, a, _ := strings.Cut(r.Answer, "####"); strings.TrimSpace(a) == answer {
			out = append(out, r)
		}
	}
	if len(out) < n {
		t.Fatalf("%d GSM8K rows answer %s among the first 400 one-digit ones, want %d", len(out), answer, n)
	}
	return out[:n]
}

// warmStartAnswer teaches a random model of fam, by 80 steps of SFT, to
// answer every prompt (rendered with the family's chat template) with
// "So the answer is \boxed{3}." or "...\boxed{5}." and its end-of-turn
// token, half and half: the GRPO step that follows then sees groups with
// both rewards (the rows' answer is 3), so that it has a gradient. It
// returns the trained weights.
func warmStartAnswer(t *testing.T, fam tfFamily, rows []gsm8kRow) []checkpoint.Tensor {
	t.Helper()
	return warmStart(t, fam, rows, 80, false, nil)
}

// warmStart is warmStartAnswer with steps SFT steps. Its 16 training
// sequences take the rows in turn and the answers 3 and 5 in turn; with
// eachBoth, there are two sequences per row, one with each answer, so that
// a model large enough to learn its data by heart still samples both
// (with 4 rows, 16 sequences teach each row one answer alone). With render
// (a run's rollout renderer), the prompts are rendered by it, system
// prompt included, instead of by the family's chat template alone.
func warmStart(t *testing.T, fam tfFamily, rows []gsm8kRow, steps int, eachBoth bool, render *trajectories.Renderer) []checkpoint.Tensor {
	t.Helper()
	tok, tm := familyTokenizer(t, fam)
	n := 16
	if eachBoth {
		n = 2 * len(rows)
	}
	seqs := make([]trainer.Sequence, 0, n)
	for i := range n {
		q := rows[i%len(rows)].Question
		var text string
		var err error
		if render != nil {
			text, err = render.Render(schemas.Prompt{ID: fmt.Sprint(i % len(rows)), Problem: q})
		} else {
			text, err = tm.Render([]chattemplate.Message{{Role: "user", Content: q}}, familyChatOptions(fam, true))
		}
		if err != nil {
			t.Fatal(err)
		}
		five := i % 2
		if eachBoth {
			five = i / len(rows)
		}
		resp := int32s(tok.Encode(fmt.Sprintf("So the answer is \\boxed{%d}.", 3+2*five)))
		seqs = append(seqs, trainer.Sequence{Prompt: int32s(tok.EncodeSpecial(text)), Response: append(resp, fam.eos), Skip: make([]bool, len(resp)+1)})
	}
	ts, loss := sftTrain(t, fam.config, seqs, steps)
	t.Logf("%s: warm start, %d SFT steps, loss %.3f", fam.name, steps, loss)
	c, err := hfconfig.Parse([]byte(fam.config))
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelType == "qwen2" && !slices.ContainsFunc(ts, func(x checkpoint.Tensor) bool { return strings.HasSuffix(x.Name, "q_proj.bias") }) {
		t.Fatal("the Qwen2 learner has no q/k/v biases")
	}
	return ts
}

func int32s(ids []int) []int32 {
	o := make([]int32, len(ids))
	for i, v := range ids {
		o[i] = int32(v)
	}
	return o
}

// writeFamilyDir writes a Hugging Face directory of fam with weights ts
// and config cfg, in dtype, with the family's tokenizer and template.
func writeFamilyDir(t *testing.T, fam tfFamily, dir, cfg string, ts []checkpoint.Tensor, dtype string) {
	t.Helper()
	dt := checkpoint.F32
	if dtype == "bfloat16" {
		dt = checkpoint.BF16
	}
	if err := hfmodel.WriteTensors(dir, []byte(cfg), ts, dt, fam.tok); err != nil {
		t.Fatal(err)
	}
	if fam.tpl != "" {
		b, err := os.ReadFile(fam.tpl)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, checkpoint.TokenizerConfigName), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func ints(v []int32) []int {
	o := make([]int, len(v))
	for i, x := range v {
		o[i] = int(x)
	}
	return o
}

func writeJSON(b testing.TB, path string, v any) {
	b.Helper()
	j, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, j, 0o644); err != nil {
		b.Fatal(err)
	}
}

func readJSON(b testing.TB, path string, v any) {
	b.Helper()
	j, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(j, v); err != nil {
		b.Fatalf("%s: %v", path, err)
	}
}

// completionAnswer is the part of a /v1/completions answer the benchmark
// checks.
type completionAnswer struct {
	Choices []struct {
		TokenIDs     []int32 `json:"token_ids"`
		FinishReason *string `json:"finish_reason"`
		Logprobs     *struct {
			TokenLogprobs []*float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// postCompletion sends body to url's /v1/completions and decodes a 200
// answer.
func postCompletion(ctx context.Context, hc *http.Client, url string, body map[string]any) (completionAnswer, error) {
	var a completionAnswer
	buf, err := json.Marshal(body)
	if err != nil {
		return a, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(buf))
	if err != nil {
		return a, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(resp.Body)
	if err != nil {
		return a, err
	}
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("POST %s/v1/completions answered %d: %s", url, resp.StatusCode, ans)
	}
	return a, json.Unmarshal(ans, &a)
}

// loadModel is the learner's model of the weights a server loads from dir
// (a Hugging Face directory or a committed checkpoint).
func loadModel(t *testing.T, dir string) *model.Model {
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

// familyTokenizer loads fam's tokenizer and chat template as aipo does.
func familyTokenizer(t *testing.T, fam tfFamily) (*tokenizer.HF, *chattemplate.Template) {
	t.Helper()
	tok, err := tokenizer.Load(fam.tok)
	if err != nil {
		t.Fatal(err)
	}
	tpl := fam.tpl
	if tpl == "" {
		tpl = filepath.Join(fam.tok, checkpoint.TokenizerConfigName)
	}
	tm, err := chattemplate.Load(context.Background(), tpl)
	if err != nil {
		t.Fatal(err)
	}
	return tok, tm
}

func familyChatOptions(fam tfFamily, gen bool) chattemplate.Options {
	o := chattemplate.Options{AddGenerationPrompt: gen}
	if fam.think {
		off := false
		o.EnableThinking = &off
	}
	return o
}
