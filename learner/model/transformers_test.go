//go:build torch

package model

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// TestFamiliesAgainstTransformers computes the tiny Qwen2, Qwen3 and
// Llama 3 fixtures afresh with transformers' own model classes
// (scripts/model_fixtures.py --reference transformers, in the pinned
// PyTorch environment of scripts/vllm.sh, float64) and checks the model
// against them as TestTiny*MatchesPyTorch checks it against the committed
// files (the same tolerances, every variant): so the reference the model
// is held to is transformers itself, run now, not only its committed
// output. The fresh fixtures must also be the committed ones, so that the
// committed files stay the transformers reference they are said to be.
//
// How close the two can be is set by transformers itself: it computes
// its rotary tables in float32 whatever the model's dtype, and PyTorch's
// float32 cos and sin are vectorized per CPU (AVX2 and AVX-512 kernels
// round differently, each within about an ulp), so a float64 run on
// another CPU moves by up to the tables' own rounding carried to the
// outputs. The hand-written reference (--reference handwritten, float64
// tables) measures that rounding here: the fresh fixture's distance from
// it, per tensor relative to its scale. The committed file was made on
// some CPU with its own tables, no further from the float64 truth than
// this CPU's are within a factor, so the test allows twice this CPU's
// distance, plus 2.4e-7 (two float32 roundings of the outputs). On an
// AVX2-only AMD EPYC the tiny Qwen3's loss moved 1.8e-6 of its scale
// from a fixture made on an AVX-512 CPU, where its tables alone account
// for 1.6e-6; a wrong fixture (another seed, a changed formula) is off
// by orders of magnitude more.
func TestFamiliesAgainstTransformers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs transformers")
	}
	py := testtools.TorchPython(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	names := []string{"tiny_qwen2", "tiny_qwen3", "tiny_llama3"}
	cmd := exec.CommandContext(ctx, py, filepath.Join(testtools.RepoRoot(), "scripts", "model_fixtures.py"),
		"--reference", "transformers", "--out", out, "--only", strings.Join(names, ","))
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("model_fixtures.py --reference transformers: %v\n%s", err, log)
	}
	t.Logf("%s", log)
	hand := t.TempDir()
	cmd = exec.CommandContext(ctx, py, filepath.Join(testtools.RepoRoot(), "scripts", "model_fixtures.py"),
		"--reference", "handwritten", "--out", hand, "--only", strings.Join(names, ","))
	if log, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("model_fixtures.py --reference handwritten: %v\n%s", err, log)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig(filepath.Join(out, name+"_config.json"))
			if err != nil {
				t.Fatal(err)
			}
			fresh := mustTNS(t, filepath.Join(out, name+".tns"))
			m, err := FromTensors(cfg, fixtureParams(fresh))
			if err != nil {
				t.Fatal(err)
			}
			checkFixtureVariants(t, m, fresh)
			logWorst(t, m, fresh)
			committed := mustTNS(t, filepath.Join("testdata", name+".tns"))
			if len(committed) != len(fresh) {
				t.Fatalf("transformers computes %d tensors, testdata/%s.tns holds %d", len(fresh), name, len(committed))
			}
			float64Tables := mustTNS(t, filepath.Join(hand, name+".tns"))
			worst, at, allowed := 0.0, "", 0.0
			for k, x := range fresh {
				c, ok := committed[k]
				if !ok || len(c.Data) != len(x.Data) {
					t.Fatalf("testdata/%s.tns lacks %s as transformers computes it", name, k)
				}
				h, ok := float64Tables[k]
				if !ok || len(h.Data) != len(x.Data) {
					t.Fatalf("the hand-written reference lacks %s as transformers computes it", k)
				}
				r := relToScale(c.Data, x.Data)
				tol := 2*relToScale(x.Data, h.Data) + 2.4e-7
				if r > tol {
					t.Errorf("testdata/%s.tns is not what transformers computes: %s differs by %.3g of its scale, where float32 rotary tables allow %.3g; regenerate it (scripts/model_fixtures.py --reference transformers)", name, k, r, tol)
				}
				if r > worst {
					worst, at, allowed = r, k, tol
				}
			}
			t.Logf("committed fixture against transformers now: worst %.3g of a tensor's scale (%s; allowed %.3g)", worst, at, allowed)
		})
	}
}

// TestBF16AgainstAutocast checks the bfloat16 products (SetComputeBF16)
// against transformers' Qwen3ForCausalLM run in float32 under
// torch.autocast("cpu", dtype=torch.bfloat16), as the peers train in
// mixed precision (scripts/autocast_reference.py, in the pinned PyTorch
// environment of scripts/vllm.sh), on the tiny Qwen3 fixture: its
// log-probs, entropies and every parameter's gradient of the fixture's
// loss. Both are held to the float64 reference the fixture holds.
//
// The two are not the same arithmetic: both round the matrix products'
// operands to bfloat16 and accumulate in float32, but autocast also
// rounds every product's result to bfloat16 (each projection's output,
// attention's scores and weighted values, the logits) and runs attention
// and the MLP's gating in bfloat16, where the model keeps them float32.
// Each rounding moves a value by at most u = 2⁻⁸ of itself (8
// significant bits, to nearest), so the two differ from the exact result
// by their roundings' changes carried to the output. A layer of the
// autocast pass rounds about 12 results and 14 operands (q, k, v, o,
// gate, up, down, the attention's two products, the gating; their
// inputs), the model's 8 operands (4 products, 2 each); with the head
// and its input, R = 26L+3 roundings between them. Taken relative to a
// tensor's largest value, with the factor 4 for the growth through the
// norms and attention that BF16LogitBound takes, the bound on their
// difference is 4·R·u: for L = 2, 220·2⁻⁸ ≈ 0.86 of the tensor's scale, a
// worst case of every change adding with one sign. The test also holds
// each to the float64 reference: the model, which rounds fewer values,
// must be no further from it than autocast is (times 1.5, for the chance
// alignments of so few rounding errors), which is the check a wrong
// product would fail by orders of magnitude.
func TestBF16AgainstAutocast(t *testing.T) {
	if testing.Short() {
		t.Skip("runs transformers")
	}
	py := testtools.TorchPython(t)
	out := filepath.Join(t.TempDir(), "autocast.tns")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join(testtools.RepoRoot(), "scripts", "autocast_reference.py"),
		filepath.Join("testdata", "tiny_qwen3_config.json"), filepath.Join("testdata", "tiny_qwen3.tns"), out)
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("autocast_reference.py: %v\n%s", err, log)
	}
	t.Logf("%s", log)
	ac := mustTNS(t, out)
	if fixture(t, ac, "logits_dtype_bf16")[0] != 1 {
		t.Fatal("transformers' logits under torch.autocast were not bfloat16: autocast did not run the model's products in bfloat16")
	}
	m, ts := loadFixture(t, "tiny_qwen3")
	m.SetComputeBF16(true)
	b, w := fixtureBatch(t, ts)
	a, err := m.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	lp, ent := append([]float32(nil), a.LogProbs...), append([]float32(nil), a.Entropy...)
	m.ZeroGrads()
	if err := m.Backward(a, w); err != nil {
		t.Fatal(err)
	}
	L := float64(m.Config().NumHiddenLayers)
	bound := 4 * (26*L + 3) * 0x1p-8
	check := func(name string, ours, theirs, exact []float32) {
		t.Helper()
		d, eo, ea := relToScale(ours, theirs), relToScale(ours, exact), relToScale(theirs, exact)
		t.Logf("%s: bf16 against autocast %.3g of the scale (bound %.3g); against float64: bf16 %.3g, autocast %.3g", name, d, bound, eo, ea)
		if d > bound {
			t.Errorf("%s: the bfloat16 products differ from transformers under autocast by %.3g of the tensor's scale, more than %.3g", name, d, bound)
		}
		if eo > 1.5*ea {
			t.Errorf("%s: the bfloat16 products are %.3g of the scale from the float64 reference, autocast %.3g: more than 1.5 times as far", name, eo, ea)
		}
		if eo == 0 {
			t.Errorf("%s: the bfloat16 products are the float64 reference exactly: they did not round", name)
		}
	}
	check("log-probs", lp, fixture(t, ac, "logprobs"), fixture(t, ts, "logprobs"))
	check("entropies", ent, fixture(t, ac, "entropy"), fixture(t, ts, "entropy"))
	for _, g := range m.Grads() {
		check("gradient of "+g.Name, g.Data, fixture(t, ac, "grad."+g.Name), fixture(t, ts, "grad."+g.Name))
	}
}
