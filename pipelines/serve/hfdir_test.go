package serve

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/internal/hfmodel"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
)

// logprobTol bounds |served log-prob - PyTorch's|. The reference is float64;
// the served model computes in float32 with the same (bfloat16-exact)
// weights, so each log-prob carries float32 rounding through two layers
// and a log-softmax over 128-152k logits: a few 1e-6 relative in practice,
// and the HTTP answer rounds to float32 (6e-8 relative). 1e-4 absolute
// leaves a wide margin while a wrong RoPE scaling, a missing q/k norm or a
// wrong head_dim moves them by 1e-2 or more.
const logprobTol = 1e-4

// hfDir writes the tiny random model of fixture testdata/hf_NAME_greedy.json
// as a plain Hugging Face directory (config.json, bfloat16 model.safetensors,
// the real tokenizer.json and tokenizer_config.json of NAME from the shared
// data folder; no marker, no trainer state), as a user downloads one.
func hfDir(t *testing.T, name string) (string, hfmodel.Fixture) {
	t.Helper()
	tokDir := filepath.Dir(shareddata.Path(t, "tokenizers/"+name+"/tokenizer.json"))
	fx, err := hfmodel.ReadFixture(filepath.Join("testdata", "hf_"+name+"_greedy.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := hfconfig.Parse(fx.Config)
	if err != nil {
		t.Fatal(err)
	}
	if got := hfmodel.Sum(hfmodel.Tensors(cfg, fx.Seed)); got != fx.WeightsSum {
		t.Fatalf("%s: the Go generator's weights sum to %v, scripts/hf_dir_fixtures.py's to %v: the generators disagree", name, got, fx.WeightsSum)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := hfmodel.WriteDir(dir, fx.Config, fx.Seed, checkpoint.BF16, tokDir); err != nil {
		t.Fatal(err)
	}
	return dir, fx
}

type greedyAnswer struct {
	Choices []struct {
		TokenIDs []int32 `json:"token_ids"`
		Prompt   []int32 `json:"prompt_token_ids"`
		Logprobs struct {
			TokenLogprobs []float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Version int64 `json:"aipo_policy_version"`
}

// greedyFromServer asks the server at addr for the greedy continuation of
// the fixture's prompt, as text, and checks it against PyTorch's: the
// prompt's token ids, every greedy token, every log-prob within logprobTol.
// It returns the largest log-prob difference.
func greedyFromServer(t *testing.T, addr, model string, fx hfmodel.Fixture) float64 {
	t.Helper()
	st, _, body := post(t, "http://"+addr+"/v1/completions", map[string]any{"model": model, "prompt": fx.Prompt,
		"max_tokens": len(fx.GreedyIDs), "temperature": 0, "logprobs": 1})
	if st != 200 {
		t.Fatalf("%s: completions: %d %s", fx.Model, st, body)
	}
	var out greedyAnswer
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Choices) != 1 {
		t.Fatalf("%s: %s", fx.Model, body)
	}
	c := out.Choices[0]
	if !slices.Equal(c.Prompt, fx.PromptIDs) {
		t.Fatalf("%s: prompt %q encodes to %v, the fixture's ids are %v", fx.Model, fx.Prompt, c.Prompt, fx.PromptIDs)
	}
	if !slices.Equal(c.TokenIDs, fx.GreedyIDs) {
		t.Fatalf("%s: greedy tokens %v, PyTorch's %v", fx.Model, c.TokenIDs, fx.GreedyIDs)
	}
	worst := 0.0
	for i, lp := range c.Logprobs.TokenLogprobs {
		d := math.Abs(lp - fx.GreedyLogprobs[i])
		worst = max(worst, d)
		if d > logprobTol {
			t.Errorf("%s: token %d (%d): log-prob %.7f, PyTorch's %.7f (|diff| %.2g > %g)", fx.Model, i, c.TokenIDs[i], lp, fx.GreedyLogprobs[i], d, logprobTol)
		}
	}
	if len(c.Logprobs.TokenLogprobs) != len(fx.GreedyLogprobs) {
		t.Errorf("%s: %d log-probs, want %d", fx.Model, len(c.Logprobs.TokenLogprobs), len(fx.GreedyLogprobs))
	}
	return worst
}

// A tiny random Qwen3 and a tiny random Llama 3.2, each a plain Hugging
// Face directory in bfloat16 over its real vocabulary, served by aipo
// serve as a user would point it at a download: the greedy tokens of a
// text prompt equal PyTorch's (scripts/hf_dir_fixtures.py, float64), and
// so do their log-probs within logprobTol.
func TestServeHFDirMatchesPyTorch(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			dir, fx := hfDir(t, name)
			r := start(t, Options{Checkpoint: dir, Name: name})
			worst := greedyFromServer(t, r.httpAddr, name, fx)
			t.Logf("%s: %d greedy tokens equal PyTorch's; largest |log-prob diff| %.2g (PyTorch's smallest top-2 logit gap %.3g)", name, len(fx.GreedyIDs), worst, fx.MinTop2Gap)
			if v := r.srv.eng.Info().PolicyVersion; v != 0 {
				t.Errorf("policy version %d of a plain Hugging Face directory, want 0", v)
			}
		})
	}
}

