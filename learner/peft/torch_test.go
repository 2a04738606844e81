//go:build torch

package peft_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// logitsTol bounds |aipo - transformers| over a prompt's logits, as a share
// of their largest magnitude. Both sides compute in float32 from the same
// float32 weights; only the order of the sums differs (aipo's GEMM
// against PyTorch's, over widths of 32 to 128, through one or two layers,
// the adapter's product added after the base's on both sides, or folded
// into the weight once merged, and Llama 3.2's scaled rotary frequencies
// computed by each side), which moves the logits by tens of float32 ulps
// of the largest: measured at most 1.0e-6 of the scale on the tiny Qwen3
// and 3.7e-6 on the tiny Llama (PEFT 0.21.2, transformers 5.19.0, torch
// 2.13.0). 3e-5 leaves room for another CPU's summation orders and stays
// far below a wrong adapter (a wrong scale, a transposed matrix or a missed
// module moves the logits by the adapter's whole effect, checked here to
// be above 1e-2 of the scale).
const logitsTol = 3e-5

// PEFT (Hugging Face's library itself, pinned in scripts/vllm/
// requirements.txt) loads an adapter aipo wrote onto transformers' model
// of its base and gives aipo's logits, within logitsTol; transformers
// loads aipo's merged directory (peft.MergeDir, aipo lora merge) and gives
// them too. On the tiny Qwen3 (q/k norms) and the tiny Llama 3.2 (rope
// scaling, two layers) over their real vocabularies, every projection
// adapted, with dropout set (off in evaluation on both sides).
func TestPEFTLoadsAdapter(t *testing.T) {
	if testing.Short() {
		t.Skip("runs PEFT and transformers")
	}
	py := testtools.TorchPython(t)
	for _, c := range []struct{ name, cfg string }{{"qwen3", hfmodel.TinyQwen3Config}, {"llama3", hfmodel.TinyLlama3Config}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			hc, err := hfconfig.Parse([]byte(c.cfg))
			if err != nil {
				t.Fatal(err)
			}
			tensors := hfmodel.Tensors(hc, 7)
			base := filepath.Join(dir, "base")
			if err := os.MkdirAll(base, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(base, checkpoint.ConfigName), []byte(c.cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := checkpoint.SaveSafetensors(ctx, filepath.Join(base, checkpoint.WeightsName), tensors, checkpoint.SaveOptions{DType: checkpoint.F32}); err != nil {
				t.Fatal(err)
			}
			m, err := trainer.ModelFromTensors(hc, tensors)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(3, 4))
			pc, err := peft.NewConfig(base, 8, 16, 0.05, nil, peft.InitDefault)
			if err != nil {
				t.Fatal(err)
			}
			ad, err := peft.New(pc, model.AdapterDims(hc), r)
			if err != nil {
				t.Fatal(err)
			}
			for _, md := range ad.Modules {
				for i := range md.B {
					md.B[i] = float32(0.05 * r.NormFloat64())
				}
			}
			prompts := make([][]int32, 3)
			for i := range prompts {
				prompts[i] = make([]int32, 5+4*i)
				for j := range prompts[i] {
					prompts[i][j] = int32(r.IntN(hc.VocabSize))
				}
			}
			baseLogits := aipoLogits(t, m, prompts)
			if err := m.AttachAdapter(ad, 1); err != nil {
				t.Fatal(err)
			}
			want := aipoLogits(t, m, prompts)
			adDir, merged := filepath.Join(dir, "adapter"), filepath.Join(dir, "merged")
			if err := peft.Write(ctx, adDir, m.Adapter(), checkpoint.F32); err != nil {
				t.Fatal(err)
			}
			if err := peft.MergeDir(ctx, adDir, merged, peft.MergeOptions{}); err != nil {
				t.Fatal(err)
			}
			req, _ := json.Marshal(map[string]any{"base": base, "adapter": adDir, "merged": merged, "prompts": prompts})
			reqPath, out := filepath.Join(dir, "request.json"), filepath.Join(dir, "out")
			if err := os.WriteFile(reqPath, req, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(cctx, py, filepath.Join(testtools.RepoRoot(), "scripts", "pychecks", "peft_check.py"), reqPath, out)
			if log, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("peft_check.py: %v\n%s", err, log)
			}
			var rep struct {
				Versions      map[string]string `json:"versions"`
				LoraModules   int               `json:"lora_modules"`
				LoraScaling   []float64         `json:"lora_scaling"`
				AdapterLogits []string          `json:"adapter_logits"`
				MergedLogits  []string          `json:"merged_logits"`
			}
			b, err := os.ReadFile(filepath.Join(out, "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			t.Logf("versions %v", rep.Versions)
			if n := len(peft.Targets) * hc.NumHiddenLayers; rep.LoraModules != n || len(rep.LoraScaling) != 1 || rep.LoraScaling[0] != 2 {
				t.Fatalf("PEFT built %d LoRA layers of scaling %v, want %d of 16/8 = 2", rep.LoraModules, rep.LoraScaling, n)
			}
			for i := range prompts {
				scale := maxAbs(want[i])
				if d := maxDiff(want[i], baseLogits[i]); d < 1e-2*scale {
					t.Fatalf("prompt %d: the adapter moves aipo's logits by %.3g of %.3g: too little for the check to tell", i, d, scale)
				}
				for _, f := range []struct{ what, file string }{{"PEFT's adapter on transformers' base", rep.AdapterLogits[i]}, {"transformers on the merged directory", rep.MergedLogits[i]}} {
					got := readF32(t, filepath.Join(out, f.file))
					if len(got) != len(want[i]) {
						t.Fatalf("%s: %d logits for prompt %d, aipo %d", f.what, len(got), i, len(want[i]))
					}
					d := maxDiff(got, want[i])
					if d > logitsTol*scale {
						t.Errorf("prompt %d: %s differs from aipo by %.3g, %.3g of the logits' scale %.3g (tolerance %g)", i, f.what, d, d/scale, scale, logitsTol)
					}
					t.Logf("prompt %d: %s within %.3g of the scale", i, f.what, d/scale)
				}
			}
		})
	}
}

func aipoLogits(t *testing.T, m *model.Model, prompts [][]int32) [][]float32 {
	t.Helper()
	out := make([][]float32, len(prompts))
	for i, p := range prompts {
		lg, err := m.Logits(model.Batch{Tokens: p, SeqLens: []int{len(p)}})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = lg
	}
	return out
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}
