//go:build torch

package model

import (
	"context"
	"os/exec"
	"path/filepath"
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
// output. The fresh fixtures must also be the committed ones, to float32
// rounding of a float64 computation that another CPU orders differently
// (1e-6 of each tensor's scale), so that the committed files stay the
// transformers reference they are said to be.
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
		"--reference", "transformers", "--out", out, "--only", "tiny_qwen2,tiny_qwen3,tiny_llama3")
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("model_fixtures.py --reference transformers: %v\n%s", err, log)
	}
	t.Logf("%s", log)
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
			worst, at := 0.0, ""
			for k, x := range fresh {
				c, ok := committed[k]
				if !ok || len(c.Data) != len(x.Data) {
					t.Fatalf("testdata/%s.tns lacks %s as transformers computes it", name, k)
				}
				if r := relToScale(c.Data, x.Data); r > worst {
					worst, at = r, k
				}
			}
			if worst > 1e-6 {
				t.Errorf("testdata/%s.tns is not what transformers computes: %s differs by %.3g of its scale; regenerate it (scripts/model_fixtures.py --reference transformers)", name, at, worst)
			}
			t.Logf("committed fixture against transformers now: worst %.3g of a tensor's scale (%s)", worst, at)
		})
	}
}
