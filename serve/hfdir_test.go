//go:build shareddata

package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/train"
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
			r := start(t, Options{Checkpoint: dir, Name: name, DType: DTypeF32})
			worst := greedyFromServer(t, r.httpAddr, name, fx)
			t.Logf("%s: %d greedy tokens equal PyTorch's; largest |log-prob diff| %.2g (PyTorch's smallest top-2 logit gap %.3g)", name, len(fx.GreedyIDs), worst, fx.MinTop2Gap)
			if v := r.srv.eng.Info().PolicyVersion; v != 0 {
				t.Errorf("policy version %d of a plain Hugging Face directory, want 0", v)
			}
		})
	}
}

// bf16LogprobTol bounds |served log-prob - PyTorch's| when the server
// decodes in bfloat16: learner/model's TestDecodeBF16Tolerance holds the
// bfloat16 path's logits to a bound derived from the rounding of each
// product's inputs (2⁻⁹ relative), and on these families' test models
// the log-probabilities of the chosen tokens moved by at most 0.025 over
// 40 steps; twice that here.
const bf16LogprobTol = 0.05

// The same directories served in bfloat16 (--dtype bfloat16; by default
// on a CPU with AMX or AVX512-BF16 for models at least 512 wide).
// The greedy tokens equal PyTorch's float64 ones where its top two
// logits are further apart than the rounding can move them, and the
// log-probs are within bf16LogprobTol.
func TestServeHFDirBF16(t *testing.T) {
	if ok, why := model.BF16DecodeAvailable(); !ok {
		t.Skipf("no bfloat16 products here: %s", why)
	}
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			dir, fx := hfDir(t, name)
			r := start(t, Options{Checkpoint: dir, Name: name, DType: DTypeBF16})
			if got := r.srv.DecodeDType(); got != DTypeBF16 {
				t.Fatalf("--dtype bfloat16 serves in %q", got)
			}
			st, _, body := post(t, "http://"+r.httpAddr+"/v1/completions", map[string]any{"model": name, "prompt": fx.Prompt,
				"max_tokens": len(fx.GreedyIDs), "temperature": 0, "logprobs": 1})
			if st != 200 {
				t.Fatalf("completions: %d %s", st, body)
			}
			var out greedyAnswer
			if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) != 1 {
				t.Fatalf("%v: %s", err, body)
			}
			c := out.Choices[0]
			worst := 0.0
			for i, lp := range c.Logprobs.TokenLogprobs {
				if i >= len(fx.GreedyIDs) || c.TokenIDs[i] != fx.GreedyIDs[i] {
					if fx.MinTop2Gap > 2*bf16LogprobTol {
						t.Fatalf("token %d: bfloat16 chose %d, PyTorch %d, though PyTorch's smallest top-2 gap is %.3g", i, c.TokenIDs[i], fx.GreedyIDs[i], fx.MinTop2Gap)
					}
					break // a near tie flipped: the rest continue another text
				}
				d := math.Abs(lp - fx.GreedyLogprobs[i])
				worst = max(worst, d)
				if d > bf16LogprobTol {
					t.Errorf("token %d (%d): bfloat16 log-prob %.5f, PyTorch's %.5f (|diff| %.2g > %g)", i, c.TokenIDs[i], lp, fx.GreedyLogprobs[i], d, bf16LogprobTol)
				}
			}
			t.Logf("%s in bfloat16: largest |log-prob diff| from PyTorch's float64 %.3g", name, worst)
		})
	}
}

// One learner step from a plain bfloat16 Hugging Face directory, through
// the entry points `aipo train --init` uses (train.SeedCheckpoint,
// LoadPolicy, SavePolicy): every key of its config.json survives with its
// value in both checkpoints; model.safetensors is bfloat16, each value the
// float32 master in master.safetensors rounded; the masters reload bit for
// bit (training resumes from them); and the checkpoint, stripped of our
// extras (marker, masters, optimizer and trainer state), is a plain
// Hugging Face directory that aipo serve answers from exactly as from the
// checkpoint itself.
func TestLearnerStepFromHFDirServes(t *testing.T) {
	ctx := context.Background()
	src, fx := hfDir(t, "qwen3")
	gen := []byte(`{"bos_token_id": 151643, "eos_token_id": [151645, 151643], "temperature": 0.6, "top_p": 0.95}` + "\n")
	if err := os.WriteFile(filepath.Join(src, checkpoint.GenerationConfigName), gen, 0o644); err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	if err := train.SeedCheckpoint(ctx, src, run); err != nil {
		t.Fatal(err)
	}
	pol, err := train.LoadPolicy(ctx, rundir.Checkpoint(run, 0))
	if err != nil {
		t.Fatal(err)
	}
	oc := optim.DefaultConfig()
	oc.LR = 1e-2
	opt, err := optim.New(oc)
	if err != nil {
		t.Fatal(err)
	}
	l := &trainer.Learner{Policy: pol.Model, Opt: opt}
	if _, _, err := l.SFTStep([]trainer.Sequence{{Prompt: fx.PromptIDs, Response: fx.GreedyIDs}}, 4096); err != nil {
		t.Fatal(err)
	}
	optState, err := opt.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	step1 := rundir.Checkpoint(run, 1)
	if err := train.SavePolicy(ctx, step1, pol.Model, optState, pol.Tokenizer, checkpoint.TrainerState{Step: 1, PolicyVersion: 1, RunID: "hf"}); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(fx.Config, &want); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{rundir.Checkpoint(run, 0), step1} {
		b, err := os.ReadFile(filepath.Join(dir, checkpoint.ConfigName))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: config.json\n%s\nwant the init's keys and values\n%s", dir, b, fx.Config)
		}
		if g, err := os.ReadFile(filepath.Join(dir, checkpoint.GenerationConfigName)); err != nil || !bytes.Equal(g, gen) {
			t.Errorf("%s: generation_config.json %q, %v; want the init's", dir, g, err)
		}
		for name, dt := range map[string]checkpoint.DType{checkpoint.WeightsName: checkpoint.BF16, checkpoint.MasterName: checkpoint.F32} {
			for _, ti := range header(t, filepath.Join(dir, name)).Tensors {
				if ti.DType != dt {
					t.Fatalf("%s: %s holds %s as %s, want %s", dir, name, ti.Name, ti.DType, dt)
				}
			}
		}
	}
	// The masters come back bit for bit; model.safetensors is them rounded.
	again, err := train.LoadPolicy(ctx, step1)
	if err != nil {
		t.Fatal(err)
	}
	served, err := checkpoint.LoadServed(ctx, step1)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i, p := range pol.Model.Params() {
		q, s := again.Model.Params()[i], served.Tensors[i]
		for j, v := range p.Data {
			if math.Float32bits(q.Data[j]) != math.Float32bits(v) {
				t.Fatalf("%s[%d]: reloaded master %v, trained %v (not bit for bit)", p.Name, j, q.Data[j], v)
			}
			if s.Data[j] != checkpoint.BF16ToFloat32(checkpoint.Float32ToBF16(v)) {
				t.Fatalf("%s[%d]: model.safetensors holds %v, the master %v rounds to %v", p.Name, j, s.Data[j], v, checkpoint.BF16ToFloat32(checkpoint.Float32ToBF16(v)))
			}
			if v != s.Data[j] {
				moved++
			}
		}
	}
	if moved == 0 {
		t.Fatal("every master is a bfloat16 value: the step changed nothing, or the masters were not kept")
	}
	plain := filepath.Join(t.TempDir(), "plain")
	testtools.CopyDirExcept(t, step1, plain, rundir.CommittedName, checkpoint.MasterName, checkpoint.OptimizerName, checkpoint.TrainerStateName)
	a := greedyBody(t, start(t, Options{Checkpoint: step1, Name: "m"}).httpAddr, fx)
	b := greedyBody(t, start(t, Options{Checkpoint: plain, Name: "m"}).httpAddr, fx)
	if !slices.Equal(a.Choices[0].TokenIDs, b.Choices[0].TokenIDs) || !slices.Equal(a.Choices[0].Logprobs.TokenLogprobs, b.Choices[0].Logprobs.TokenLogprobs) {
		t.Errorf("served from the checkpoint %+v, from its plain copy %+v", a.Choices[0], b.Choices[0])
	}
	if a.Version != 1 || b.Version != 0 {
		t.Errorf("policy versions %d and %d, want 1 (the checkpoint's) and 0 (a plain directory)", a.Version, b.Version)
	}
}

// header parses the safetensors header of path.
func header(t *testing.T, path string) checkpoint.Header {
	t.Helper()
	h, err := checkpoint.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
