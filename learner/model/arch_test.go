package model

import (
	"math"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/hfconfig"
)

// Qwen3 (per-head q/k norm, head_dim independent of hidden_size) and
// Llama 3.x (rope_scaling "llama3", tied embeddings) against float64
// references that scripts/model_fixtures.py computes with transformers'
// own model classes (TestFamiliesAgainstTransformers runs it live). The tolerances
// are tolLogits and tolGrad of model_test.go, for the reasons given there:
// these models are as deep (2 layers) and as wide (C 64, D up to 32) as
// tiny_qwen2, and the q/k norm adds one reduction of length D per head,
// whose float32 rounding (D*6e-8 at worst) is far below them. The worst
// differences observed are logged with -v.

// loadFixture builds the model of testdata/NAME_config.json from the
// weights in testdata/NAME.tns.
func loadFixture(t *testing.T, name string) (*Model, map[string]NamedTensor) {
	t.Helper()
	cfg, err := LoadConfig("testdata/" + name + "_config.json")
	if err != nil {
		t.Fatal(err)
	}
	ts := mustTNS(t, "testdata/"+name+".tns")
	m, err := FromTensors(cfg, fixtureParams(ts))
	if err != nil {
		t.Fatal(err)
	}
	return m, ts
}

// fixtureParams are a fixture's "param." tensors under their model names.
func fixtureParams(ts map[string]NamedTensor) map[string]NamedTensor {
	params := map[string]NamedTensor{}
	for name, x := range ts {
		if rest, ok := strings.CutPrefix(name, "param."); ok {
			x.Name = rest
			params[rest] = x
		}
	}
	return params
}

// checkFixtureVariants compares m with the fixture with probabilities and
// hidden activations kept, recomputed, with the head in chunks, and with
// activation checkpointing.
func checkFixtureVariants(t *testing.T, m *Model, ts map[string]NamedTensor) {
	t.Run("activation checkpointing", func(t *testing.T) {
		defer m.SetCheckpointing(false)
		m.SetCheckpointing(true)
		checkAgainstFixture(t, m, ts, true, headAuto)
	})
	t.Run("probabilities kept", func(t *testing.T) { checkAgainstFixture(t, m, ts, true, headAuto) })
	t.Run("attention and MLP recomputed", func(t *testing.T) {
		defer func(c, h int) { keepProbsFloats, keepHiddenFloats = c, h }(keepProbsFloats, keepHiddenFloats)
		keepProbsFloats, keepHiddenFloats = 0, 0
		checkAgainstFixture(t, m, ts, true, headAuto)
	})
	t.Run("head in chunks", func(t *testing.T) {
		defer func(c int) { chunkFloats = c }(chunkFloats)
		chunkFloats = 7 * m.cfg.VocabSize
		checkAgainstFixture(t, m, ts, true, headChunk) // every tile recomputed
	})
	t.Run("head in tiles of vocabulary slices", func(t *testing.T) {
		defer func(c, s, k int) { chunkFloats, minSliceCols, keepLogitsFloats = c, s, k }(chunkFloats, minSliceCols, keepLogitsFloats)
		// 5 rows by 64 columns and a narrower last; the first two tiles
		// kept, the others recomputed.
		chunkFloats, minSliceCols, keepLogitsFloats = 5*sliceAlign, sliceAlign, 2*5*sliceAlign
		checkAgainstFixture(t, m, ts, true, headAuto)
	})
}

// relToScale is max |got-want| / max |want|: the measure tolerance.abs bounds.
func relToScale(got, want []float32) float64 {
	worst, scale := 0.0, 0.0
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
		scale = max(scale, math.Abs(float64(want[i])))
	}
	return worst / math.Max(scale, 1e-30)
}

// logWorst logs, after a forward and backward pass, the worst difference
// relative to the tensor's scale of the logits and over every gradient.
func logWorst(t *testing.T, m *Model, ts map[string]NamedTensor) {
	t.Helper()
	b, w := fixtureBatch(t, ts)
	logits, err := m.Logits(b)
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	m.ZeroGrads()
	if err := m.Backward(a, w); err != nil {
		t.Fatal(err)
	}
	worst, at := 0.0, ""
	for _, g := range m.Grads() {
		if r := relToScale(g.Data, fixture(t, ts, "grad."+g.Name)); r >= worst {
			worst, at = r, g.Name
		}
	}
	t.Logf("worst difference relative to the tensor's max |ref|: logits %.3g, gradients %.3g (%s)",
		relToScale(logits, fixture(t, ts, "logits")), worst, at)
}

func TestTinyQwen3MatchesPyTorch(t *testing.T) {
	m, ts := loadFixture(t, "tiny_qwen3")
	cfg := m.Config()
	if !cfg.QKNorm() || cfg.QKVBias() || cfg.Head() == cfg.HiddenSize/cfg.NumAttentionHeads {
		t.Fatalf("fixture config %+v is not Qwen3-shaped (q/k norm, no bias, head_dim != hidden/heads)", cfg)
	}
	checkFixtureVariants(t, m, ts)
	logWorst(t, m, ts)
}

func TestTinyLlama3MatchesPyTorch(t *testing.T) {
	m, ts := loadFixture(t, "tiny_llama3")
	cfg := m.Config()
	if cfg.RopeScaling == nil || !cfg.TieWordEmbeddings {
		t.Fatalf("fixture config %+v lacks rope_scaling or tied embeddings", cfg)
	}
	checkFixtureVariants(t, m, ts)
	logWorst(t, m, ts)
	// The scaling matters at the fixture's positions: the same weights
	// with plain RoPE miss the reference by far more than tolLogits.
	plain := cfg
	plain.RopeScaling = nil
	pm, err := FromTensors(plain, fixtureParams(ts))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := fixtureBatch(t, ts)
	lg, err := pm.Logits(b)
	if err != nil {
		t.Fatal(err)
	}
	if r := relToScale(lg, fixture(t, ts, "logits")); r < 100*tolLogits.abs {
		t.Errorf("without rope_scaling the logits differ from the reference by only %.3g of their scale; the fixture does not exercise the scaling", r)
	} else {
		t.Logf("plain RoPE instead of llama3 scaling: logits off by %.3g of their scale", r)
	}
}

// TestLlama3Frequencies checks the three bands of the llama3 rescaling on
// hand-computed values (factor 8, low 1, high 4, original context 8192,
// Llama 3.1's figures): wavelengths under 2048 keep their frequency, over
// 8192 are divided by 8, and in between s = (8192/w - 1)/3 mixes the two.
func TestLlama3Frequencies(t *testing.T) {
	r := &hfconfig.RopeScaling{RopeType: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	f := []float64{2 * math.Pi / 100, 2 * math.Pi / 4096, 2 * math.Pi / 10000}
	llama3Frequencies(f, r)
	s := (8192.0/4096 - 1) / 3
	want := []float64{2 * math.Pi / 100, (1-s)*(2*math.Pi/4096)/8 + s*(2*math.Pi/4096), 2 * math.Pi / 10000 / 8}
	for i := range f {
		if math.Abs(f[i]-want[i]) > 1e-15*want[i] {
			t.Errorf("frequency %d: %g, want %g", i, f[i], want[i])
		}
	}
}

// TestGreedyCachedEqualsRecomputeNewArchs is TestGreedyCachedEqualsRecomputeTiny
// for the Qwen3 and Llama 3 fixture shapes: the cache holds normalised,
// rotated keys (Qwen3) rotated with the rescaled frequencies (Llama 3), and
// 87 positions cross a query block and, for Llama 3, the original context
// of 16 many times over. Tolerance tolCached, as there.
func TestGreedyCachedEqualsRecomputeNewArchs(t *testing.T) {
	for _, name := range []string{"tiny_qwen3", "tiny_llama3"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig("testdata/" + name + "_config.json")
			if err != nil {
				t.Fatal(err)
			}
			m := peakedModel(t, cfg, 3)
			checkGreedy(t, m, []int32{1, 7, 3, 9, 22, 4, 0}, 80)
		})
	}
}
