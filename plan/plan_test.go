package plan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/tasks/demo/demorun"
)

// goldenConfig is one of learner/hfconfig's transcribed config.json files.
func goldenConfig(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "learner", "hfconfig", "testdata", name+".config.json")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// mathConfig is configs/math.yaml's run as the file writes it (256
// prompts x 8 samples, 16,384-token responses, the KL term, the policy
// sampled from aipo serve at policy.endpoint).
func mathConfig(t *testing.T) runconfig.Config {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "configs", "math.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := runconfig.Parse(raw, "math.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Run.Dir = t.TempDir()
	return cfg
}

// paperConfig is configs/math.yaml's run on one GPU in bf16, sampled from
// aipo train's own engine (policy.endpoint empty), whose load and
// attention caches these plans count.
func paperConfig(t *testing.T) runconfig.Config {
	t.Helper()
	cfg := mathConfig(t)
	cfg.Policy.Endpoint = ""
	cfg.Learner.Backend, cfg.Learner.Precision = "cuda", "bf16"
	// The engine in float32, the figures of docs/scaling.md's table;
	// TestPlanPaperSizesBF16Engine plans the default (bfloat16 for these
	// bfloat16 releases).
	cfg.Policy.DType = "float32"
	return cfg
}

// The same runs with the engine's default precision for a bfloat16
// checkpoint on cuda (bfloat16 weights and KV cache): the 1.5B model's
// rollout fits with all 256 trajectories in flight, and the 7B model's
// largest max_in_flight that fits is more than twice float32's.
func TestPlanPaperSizesBF16Engine(t *testing.T) {
	ctx := context.Background()
	cfg := paperConfig(t)
	f32 := cfg
	cfg.Policy.DType = ""
	small, err := Make(ctx, cfg, Options{Init: goldenConfig(t, "DeepSeek-R1-Distill-Qwen-1.5B"), Device: "h200", Baseline: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !small.phaseFits(phaseRollout) {
		t.Errorf("1.5B with a bfloat16 engine: the rollout with max_in_flight %d does not fit:\n%s", cfg.Rollout.MaxInFlight, small)
	}
	inFlight := func(c runconfig.Config) int {
		p, err := Make(ctx, c, Options{Init: goldenConfig(t, "Qwen2.5-7B-Instruct"), Device: "h200", Baseline: 128 << 20})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range p.Fixes {
			var n int
			if _, err := fmt.Sscanf(f.Change, "rollout.max_in_flight: %d", &n); err == nil {
				return n
			}
		}
		t.Fatalf("7B: no rollout.max_in_flight fix:\n%s", p)
		return 0
	}
	if half, full := inFlight(cfg), inFlight(f32); half <= 2*full {
		t.Errorf("7B: max_in_flight %d fits with a bfloat16 engine, %d with a float32 one; want more than twice", half, full)
	} else {
		t.Logf("7B on one H200: rollout.max_in_flight %d with the bfloat16 engine, %d in float32", half, full)
	}
}

// The paper's setting on one H200 (16,384-token responses, 1,024-token
// prompts): a 1.5B model's learner step fits, its rollout engine only with
// fewer trajectories in flight; a 7B model's step does not fit with the
// reference and bfloat16 GEMMs, and does in float32 without the reference,
// one sequence a micro-batch.
func TestPlanPaperSizesOnH200(t *testing.T) {
	ctx := context.Background()
	cfg := paperConfig(t)
	small, err := Make(ctx, cfg, Options{Init: goldenConfig(t, "DeepSeek-R1-Distill-Qwen-1.5B"), Device: "h200", Baseline: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", small)
	if !small.phaseFits(phaseLearn) || small.phaseFits(phaseRollout) || small.Fits() {
		t.Errorf("1.5B: learn fits %v, rollout fits %v; want the step to fit and the rollout with max_in_flight %d not", small.phaseFits(phaseLearn), small.phaseFits(phaseRollout), cfg.Rollout.MaxInFlight)
	}
	checkFixes(t, ctx, cfg, small, Options{Init: goldenConfig(t, "DeepSeek-R1-Distill-Qwen-1.5B"), Device: "h200", Baseline: 128 << 20})
	big, err := Make(ctx, cfg, Options{Init: goldenConfig(t, "Qwen2.5-7B-Instruct"), Device: "h200", Baseline: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", big)
	if big.phaseFits(phaseLearn) {
		t.Errorf("7B with the reference in bf16 fits the H200: %s", big.Summary())
	}
	var fp32NoRef bool
	for _, f := range big.Fixes {
		if strings.Contains(f.Change, "learner.precision: fp32") && strings.Contains(f.Change, "kl_coef: 0") {
			fp32NoRef = f.Fits
		}
	}
	if !fp32NoRef {
		t.Errorf("7B: no fix in float32 without the reference that fits: %+v", big.Fixes)
	}
	checkFixes(t, ctx, cfg, big, Options{Init: goldenConfig(t, "Qwen2.5-7B-Instruct"), Device: "h200", Baseline: 128 << 20})
	if err := big.Refusal(); !errors.Is(err, ErrDoesNotFit) || !strings.Contains(err.Error(), "GiB of device memory, NVIDIA H200 141GB has 140.40 GiB") || !strings.Contains(err.Error(), "learner.precision: fp32") {
		t.Errorf("refusal: %v", err)
	}
}

// checkFixes replans with every largest-value fix: it fits, and one more
// does not.
func checkFixes(t *testing.T, ctx context.Context, cfg runconfig.Config, p Plan, o Options) {
	t.Helper()
	for _, f := range p.Fixes {
		var n int
		if _, err := fmt.Sscanf(f.Change, "rollout.max_in_flight: %d", &n); err != nil {
			continue
		}
		for _, tc := range []struct {
			n    int
			fits bool
		}{{n, true}, {n + 1, false}} {
			c := cfg
			c.Rollout.MaxInFlight = tc.n
			q, err := Make(ctx, c, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := q.phaseFits(phaseRollout) && q.phaseFits(phaseLoad); got != tc.fits {
				t.Errorf("rollout.max_in_flight %d: rollout fits %v, want %v", tc.n, got, tc.fits)
			}
		}
	}
}

// The checkpoint sizes the plan gives are those checkpoint.Save writes:
// the serving weights in the model's dtype, and with the full state the
// float32 masters and the optimiser's moments, each up to its header.
func TestPlanDiskIsWhatSaveWrites(t *testing.T) {
	ctx := context.Background()
	mc := model.Config{ModelType: "qwen2", HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 2, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, VocabSize: 300, MaxPositionEmbeddings: 128, RMSNormEps: 1e-6, RopeTheta: 1e4, HiddenAct: "silu", TorchDtype: "bfloat16"}
	m, err := model.New(mc, 3)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.New(optim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	opt.Step(backend.OptimParams(m)) // moments for every tensor
	var ob bytes.Buffer
	if _, err := opt.WriteTo(&ob); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	size := map[bool]int64{}
	for _, full := range []bool{false, true} {
		dir := filepath.Join(base, map[bool]string{false: "serving", true: "full"}[full])
		ck := checkpoint.Checkpoint{Config: m.Config(), Tensors: trainer.Tensors(m), Trainer: checkpoint.TrainerState{Step: 1}, ServingOnly: !full}
		if full {
			ck.Optimizer = ob.Bytes()
		}
		if err := checkpoint.Save(ctx, dir, ck); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{checkpoint.WeightsName, checkpoint.MasterName, checkpoint.OptimizerName} {
			if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
				size[full] += st.Size()
			}
		}
	}
	cfg, err := demorun.Config(demorun.Options{Quick: true, RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	d := planDisk(cfg, mc, model.ParamCount(mc))
	const header = 64 << 10 // the safetensors and optimiser headers: names, shapes, offsets
	for full, want := range map[bool]int64{false: d.Serving, true: d.Full} {
		if got := size[full]; got < want || got > want+header {
			t.Errorf("full %v: Save wrote %d bytes of weights and state, the plan says %d (+ headers)", full, got, want)
		}
	}
}

// cachePlan plans the quick configuration (policy.dtype dtype) for a
// small Qwen2 and returns its rollout phase's attention caches and
// engine model (host bytes), with the model, decoding in that dtype.
func cachePlan(t *testing.T, dtype string) (caches, engine int64, m *model.Model, p Plan) {
	t.Helper()
	mc := model.Config{ModelType: "qwen2", HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 3, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, VocabSize: 300, MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e4, HiddenAct: "silu"}
	m, err := model.New(mc, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DecodeBF16(dtype == inproc.DTypeBF16); err != nil {
		t.Fatal(err)
	}
	cfg, err := demorun.Config(demorun.Options{Quick: true, RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy.DType = dtype
	if p, err = planFor(cfg, mc, Options{PromptTokens: 100}, 1); err != nil {
		t.Fatal(err)
	}
	for _, l := range p.Phases[phaseRollout].Lines {
		switch {
		case strings.HasPrefix(l.What, "attention caches"):
			caches = l.Host
		case strings.HasPrefix(l.What, "the engine's model"):
			engine = l.Host
		}
	}
	return caches, engine, m, p
}

// The attention caches are sized by the decoder's own bytes a position:
// float32, and with policy.dtype bfloat16 on a CPU that decodes in it
// half as much, the engine's model then what DecodeBF16Only keeps.
func TestPlanCachesBytesPerPosition(t *testing.T) {
	for _, dtype := range []string{inproc.DTypeF32, inproc.DTypeBF16} {
		t.Run(dtype, func(t *testing.T) {
			if dtype == inproc.DTypeBF16 {
				if ok, why := model.BF16DecodeAvailable(); !ok {
					t.Skipf("no bfloat16 products here: %s", why)
				}
			}
			caches, engine, m, p := cachePlan(t, dtype)
			seqs := min(inproc.TrainMaxBatch, p.Config.Rollout.MaxInFlight)
			bpt := int64(m.BytesPerToken())
			live := int64(seqs) * int64(p.SeqTokens) * bpt
			if want := live + min(live, sessionCacheBytes(bpt)); caches != want {
				t.Errorf("attention caches %d bytes, want %d (%d sequences of %d positions at %d bytes)", caches, want, seqs, p.SeqTokens, bpt)
			}
			want := 4 * model.ParamCount(m.Config())
			if dtype == inproc.DTypeBF16 {
				want = model.DecodeBF16OnlyBytes(m.Config())
			}
			if engine != want {
				t.Errorf("the engine's model %d bytes, want %d", engine, want)
			}
		})
	}
}

// Bad input: an unknown device names the known ones; without a model
// the plan says what to pass; --init may name the config.json itself.
func TestPlanInputs(t *testing.T) {
	ctx := context.Background()
	cfg := paperConfig(t)
	if _, err := Make(ctx, cfg, Options{Init: goldenConfig(t, "Qwen3-8B"), Device: "tpu-v5"}); err == nil || !strings.Contains(err.Error(), "h200, h100, a100-80g") {
		t.Errorf("an unknown device: %v", err)
	}
	if _, err := Make(ctx, cfg, Options{}); !errors.Is(err, ErrModelUnknown) || !strings.Contains(err.Error(), "--init DIR") {
		t.Errorf("no model: %v", err)
	}
	dir := t.TempDir()
	b, err := os.ReadFile(goldenConfig(t, "Qwen3-8B"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := hfconfig.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, init := range []string{dir, filepath.Join(dir, "config.json")} {
		p, err := Make(ctx, cfg, Options{Init: init, Device: "h100"})
		if err != nil {
			t.Fatal(err)
		}
		if p.Params != model.ParamCount(want) || p.Device.Bytes != 81559<<20 {
			t.Errorf("--init %s: %d parameters on %d bytes", init, p.Params, p.Device.Bytes)
		}
	}
	// The demo's run plans its warm-start model and fits this machine.
	demoCfg, err := demorun.Config(demorun.Options{RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Make(ctx, demoCfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Fits() || p.Refusal() != nil || !strings.Contains(p.ModelFrom, "warm-start") {
		t.Errorf("the demo: %s", p.Summary())
	}
}

// On the CPU a reference seeded from a bfloat16 model is planned at 2
// bytes a parameter (held in bfloat16, see model.HoldBF16), one from a
// float32 model at 4.
func TestPlanReferenceInBF16OnTheCPU(t *testing.T) {
	ctx := context.Background()
	cfg := paperConfig(t)
	cfg.Learner.Backend, cfg.Learner.Precision = runconfig.BackendCPU, ""
	raw, err := os.ReadFile(goldenConfig(t, "DeepSeek-R1-Distill-Qwen-1.5B"))
	if err != nil {
		t.Fatal(err)
	}
	f32 := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(f32, bytes.Replace(raw, []byte(`"torch_dtype": "bfloat16"`), []byte(`"torch_dtype": "float32"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		init  string
		bytes int64
		held  bool
	}{{goldenConfig(t, "DeepSeek-R1-Distill-Qwen-1.5B"), 2, true}, {f32, 4, false}} {
		if tc.held && !model.HoldsBF16Exactly() {
			// BLAS kernels that slice columns inexactly: the CPU keeps
			// the reference in float32 and the plan counts it so.
			tc.bytes, tc.held = 4, false
		}
		p, err := Make(ctx, cfg, Options{Init: tc.init, Baseline: 128 << 20, HostBytes: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, l := range p.Phases[0].Lines {
			if strings.HasPrefix(l.What, "reference policy") {
				found = true
				if l.Host != tc.bytes*p.Params || strings.Contains(l.What, "bfloat16") != tc.held {
					t.Errorf("%s: %q %d bytes, want %d bytes a parameter (%d)", tc.init, l.What, l.Host, tc.bytes, tc.bytes*p.Params)
				}
			}
		}
		if !found {
			t.Errorf("%s: no reference line in the learner step: %+v", tc.init, p.Phases[0].Lines)
		}
	}
}
