package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// checkpointConfigs cover what the recompute touches: Qwen2's q/k/v bias,
// Qwen3's per-head q/k norm (kept per layer, reused when checkpointed),
// Llama with separate embeddings and a single layer.
func checkpointConfigs() map[string]Config {
	qwen3 := tinyConfig()
	qwen3.ModelType, qwen3.HeadDim, qwen3.NumHiddenLayers = "qwen3", 16, 3
	llama := tinyConfig()
	llama.ModelType, llama.TieWordEmbeddings, llama.NumHiddenLayers = "llama", false, 1
	return map[string]Config{"qwen2": tinyConfig(), "qwen3": qwen3, "llama-1-layer": llama}
}

// passGrads runs one forward and backward pass of a fresh model (seeded)
// and returns its log-probs, entropies and gradients.
func passGrads(t *testing.T, cfg Config, b Batch, w []float32, checkpoint bool) (lp, ent []float32, grads [][]float32) {
	t.Helper()
	m, err := New(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	m.SetCheckpointing(checkpoint)
	a, err := m.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	lp, ent = a.LogProbs, a.Entropy
	if err := m.Backward(a, w); err != nil {
		t.Fatal(err)
	}
	for _, g := range m.Grads() {
		grads = append(grads, g.Data)
	}
	return lp, ent, grads
}

func sameBits(a, b []float32) (int, bool) {
	if len(a) != len(b) {
		return -1, false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, true
}

// Activation checkpointing recomputes each layer with the same operations
// on the same inputs, and the CPU's operations are deterministic (fixed
// work splits, reductions in a fixed order), so the log-probabilities and
// every gradient are the same bits with and without it: with attention
// probabilities and the MLP's hidden state kept or recomputed, and with
// the LM head whole or in chunks.
func TestCheckpointingGradientsBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for name, cfg := range checkpointConfigs() {
		for _, v := range []struct {
			name        string
			keep, chunk int
			lens        []int
		}{
			{"kept", 1 << 22, 1 << 22, []int{40, 7, 90}},
			{"recomputed and chunked", 0, 3 * 50, []int{130, 1, 33}},
		} {
			t.Run(name+"/"+v.name, func(t *testing.T) {
				defer func(c, h, k int) { keepProbsFloats, keepHiddenFloats, chunkFloats = c, h, k }(keepProbsFloats, keepHiddenFloats, chunkFloats)
				keepProbsFloats, keepHiddenFloats, chunkFloats = v.keep, v.keep, v.chunk
				b := randomBatch(r, cfg.VocabSize, v.lens...)
				w := make([]float32, len(b.Tokens))
				for i := range w {
					w[i] = float32(r.NormFloat64())
				}
				lp0, ent0, g0 := passGrads(t, cfg, b, w, false)
				lp1, ent1, g1 := passGrads(t, cfg, b, w, true)
				if i, ok := sameBits(lp0, lp1); !ok {
					t.Fatalf("log-prob %d: %v without checkpointing, %v with", i, lp0[i], lp1[i])
				}
				if i, ok := sameBits(ent0, ent1); !ok {
					t.Fatalf("entropy %d: %v without checkpointing, %v with", i, ent0[i], ent1[i])
				}
				nonzero := 0
				for k := range g0 {
					if i, ok := sameBits(g0[k], g1[k]); !ok {
						t.Fatalf("gradient %d element %d: %v without checkpointing, %v with", k, i, g0[k][i], g1[k][i])
					}
					for _, x := range g0[k] {
						if x != 0 {
							nonzero++
						}
					}
				}
				if nonzero == 0 {
					t.Fatal("every gradient is zero: the comparison shows nothing")
				}
			})
		}
	}
}

// Score keeps nothing for a backward pass and gives Forward's
// log-probabilities and entropies bit for bit; a model that only scores
// holds no gradients.
func TestScoreMatchesForwardWithoutGradients(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for name, cfg := range checkpointConfigs() {
		t.Run(name, func(t *testing.T) {
			m, err := New(cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			b := randomBatch(r, cfg.VocabSize, 25, 60)
			lp, ent, err := m.Score(b)
			if err != nil {
				t.Fatal(err)
			}
			a, err := m.Forward(b)
			if err != nil {
				t.Fatal(err)
			}
			if i, ok := sameBits(lp, a.LogProbs); !ok {
				t.Fatalf("log-prob %d: Score %v, Forward %v", i, lp[i], a.LogProbs[i])
			}
			if i, ok := sameBits(ent, a.Entropy); !ok {
				t.Fatalf("entropy %d: Score %v, Forward %v", i, ent[i], a.Entropy[i])
			}
			a.Release()
			if m.HasGrads() {
				t.Fatal("a model that was never differentiated allocated gradients")
			}
			if err := m.Backward(a, make([]float32, len(b.Tokens))); err == nil {
				t.Fatal("Backward accepted released activations")
			}
			a, _ = m.Forward(b)
			if err := m.Backward(a, make([]float32, len(b.Tokens))); err != nil {
				t.Fatal(err)
			}
			if !m.HasGrads() {
				t.Fatal("Backward did not allocate the gradients")
			}
		})
	}
}

// With checkpointing a pass keeps one layer's input per layer plus one
// layer's worth: its peak activation memory grows with the layers by
// N*C floats a layer, against the full activations without it.
func TestCheckpointingBoundsActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	peak := func(layers int, checkpoint bool) int64 {
		cfg := tinyConfig()
		cfg.NumHiddenLayers = layers
		m, err := New(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		m.SetCheckpointing(checkpoint)
		b := randomBatch(r, cfg.VocabSize, 200, 200)
		a, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		m.PeakActivationBytes()
		if err := m.Backward(a, make([]float32, len(b.Tokens))); err != nil {
			t.Fatal(err)
		}
		return m.PeakActivationBytes()
	}
	const N, C = 400, 32
	perLayerOff := peak(5, false) - peak(4, false)
	perLayerOn := peak(5, true) - peak(4, true)
	if perLayerOn != 4*N*C {
		t.Errorf("checkpointed: a layer adds %d bytes to the peak, want its input, %d", perLayerOn, 4*N*C)
	}
	if perLayerOff < 8*perLayerOn {
		t.Errorf("without checkpointing a layer adds %d bytes, with it %d: checkpointing saves too little", perLayerOff, perLayerOn)
	}
	t.Logf("bytes per token per layer: %d without checkpointing, %d with", perLayerOff/N, perLayerOn/N)
}

// memoryConfigs are checkpointConfigs and the families' other heads: a
// 3-layer Llama and a Qwen3 with separate embeddings.
func memoryConfigs() map[string]Config {
	cfgs := checkpointConfigs()
	llama := tinyConfig()
	llama.ModelType, llama.TieWordEmbeddings, llama.NumHiddenLayers = "llama", false, 3
	qwen3 := cfgs["qwen3"]
	qwen3.TieWordEmbeddings = false
	cfgs["llama"], cfgs["qwen3-untied"] = llama, qwen3
	return cfgs
}

// PassBytes predicts PeakActivationBytes exactly: the planner's figures
// are the allocations of the code, for every keeping mode, with the
// attention probabilities, hidden activations and logits kept or not;
// and what PassMemory says a forward pass keeps for its backward pass is
// what the model holds between Forward and Backward. So also with
// bfloat16 products (SetComputeBF16), whose rounded operands the passes
// hold while each product runs, on both their paths.
func TestPassBytesIsThePeak(t *testing.T) { forBF16Paths(t, testPassBytesIsThePeak) }

func testPassBytesIsThePeak(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	for name, cfg := range memoryConfigs() {
		for _, v := range []struct {
			name        string
			keep, chunk int
			lens        []int
		}{
			{"kept", 1 << 22, 1 << 22, []int{40, 7, 90}},
			{"recomputed, chunked", 0, 3 * 50, []int{130, 1, 33}},
			{"probabilities only", 1 << 22, 1 << 22, []int{150, 150}},
		} {
			for _, mode := range []string{"full", "checkpointed", "score", "full bf16", "checkpointed bf16", "score bf16"} {
				bf16 := strings.HasSuffix(mode, " bf16")
				mode := strings.TrimSuffix(mode, " bf16")
				t.Run(name+"/"+v.name+"/"+mode+map[bool]string{true: "/bf16"}[bf16], func(t *testing.T) {
					defer func(c, h, k int) { keepProbsFloats, keepHiddenFloats, chunkFloats = c, h, k }(keepProbsFloats, keepHiddenFloats, chunkFloats)
					keepProbsFloats, keepHiddenFloats, chunkFloats = v.keep, v.keep, v.chunk
					if v.name == "probabilities only" {
						keepHiddenFloats = 299 * cfg.IntermediateSize
					}
					m, err := New(cfg, 2)
					if err != nil {
						t.Fatal(err)
					}
					m.SetCheckpointing(mode == "checkpointed")
					m.SetComputeBF16(bf16)
					b := randomBatch(r, cfg.VocabSize, v.lens...)
					// Some tokens without a target, as a trainer's prompts.
					b.Targets = make([]int32, len(b.Tokens))
					rows := 0
					for i := range b.Targets {
						b.Targets[i] = -1
						if i%3 != 0 {
							b.Targets[i] = int32(r.IntN(cfg.VocabSize))
							rows++
						}
					}
					shape := PassShape{SeqLens: v.lens, Rows: rows, Checkpointing: mode == "checkpointed", Score: mode == "score", BF16: bf16}
					m.PeakActivationBytes()
					var got int64
					if mode == "score" {
						if _, _, err := m.Score(b); err != nil {
							t.Fatal(err)
						}
						got = m.PeakActivationBytes()
					} else {
						a, err := m.Forward(b)
						if err != nil {
							t.Fatal(err)
						}
						got = m.PeakActivationBytes()
						kept := m.PeakActivationBytes() // what is held now
						if _, want := PassMemory(cfg, shape, newCPUMemOps(cfg, shape)); kept != want {
							t.Errorf("the forward pass keeps %d bytes, PassMemory says %d", kept, want)
						}
						if err := m.Backward(a, make([]float32, len(b.Tokens))); err != nil {
							t.Fatal(err)
						}
						got = max(got, m.PeakActivationBytes())
					}
					if want := PassBytes(cfg, shape); got != want {
						t.Errorf("peak %d bytes, PassBytes says %d", got, want)
					}
				})
			}
		}
	}
}
