package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/peft"
)

// loraModel is a tiny model of cfg with an adapter of rank 4 on every
// target, B drawn too (a new adapter's B is zero, which would leave A's
// gradient zero and the check empty).
func loraModel(t *testing.T, cfg Config, dropout float64) *Model {
	t.Helper()
	m, err := New(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		for i := range p.Data {
			p.Data[i] *= 4
		}
	}
	pc, err := peft.NewConfig("tiny", 4, 8, dropout, nil, peft.InitDefault)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	ad, err := peft.New(pc, AdapterDims(cfg), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, md := range ad.Modules {
		for i := range md.B {
			md.B[i] = float32(0.05 * r.NormFloat64())
		}
	}
	if err := m.AttachAdapter(ad, 99); err != nil {
		t.Fatal(err)
	}
	return m
}

func tinyQwen3Config() Config {
	c := tinyConfig()
	c.ModelType, c.HeadDim = "qwen3", 8
	return c
}

// The gradients of A and B agree with central finite differences of the
// loss computed in float64 from the forward pass, on Qwen2 (q, k, v
// biases) and Llama with heads wider than hidden/heads, with and without
// dropout (a training pass's mask is fixed by the step, layer, module and
// tokens, so the perturbed passes draw the same one). Qwen3's q/k norms
// over heads of 8 are too sharp for a float32 finite difference: it is
// held by TestLoRAGradientIsMergedGradient.
func TestLoRAGradientFiniteDifferences(t *testing.T) {
	wide := tinyConfig()
	wide.ModelType, wide.HeadDim, wide.AttentionBias = "llama", 12, true
	for _, cfg := range []Config{tinyConfig(), wide} {
		for _, drop := range []float64{0, 0.25} {
			t.Run(fmt.Sprintf("%s_dropout%v", cfg.ModelType, drop), func(t *testing.T) {
				m := loraModel(t, cfg, drop)
				r := rand.New(rand.NewPCG(3, 3))
				b := randomBatch(r, 50, 40, 6)
				w := make([]float32, len(b.Tokens))
				for i := range w {
					w[i] = float32(r.NormFloat64())
				}
				loss := func() float64 {
					a, err := m.Forward(b)
					if err != nil {
						t.Fatal(err)
					}
					defer a.Release()
					var s float64
					for i, lp := range a.LogProbs {
						s += float64(w[i]) * float64(lp)
					}
					return s
				}
				m.ZeroGrads()
				a, err := m.Forward(b)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Backward(a, w); err != nil {
					t.Fatal(err)
				}
				if m.HasGrads() {
					t.Fatal("the backward pass allocated the frozen base's gradients")
				}
				params, grads := m.AdapterParams(), m.AdapterGrads()
				const h = 2e-3
				checked := 0
				for pi, p := range params {
					for k := 0; k < 2; k++ {
						i := r.IntN(len(p.Data))
						old := p.Data[i]
						p.Data[i] = old + h
						up := loss()
						p.Data[i] = old - h
						down := loss()
						p.Data[i] = old
						fd := (up - down) / (2 * h)
						got := float64(grads[pi].Data[i])
						// As TestGradientFiniteDifferences: the float32 loss
						// (|loss| ~ 30) rounds to ~2e-6, ~5e-4 over 2h, plus
						// the central difference's O(h²); a wrong gradient
						// (a missing scale, a transposed product) is off by
						// far more.
						if math.Abs(fd-got) > 1e-2+1e-2*math.Abs(fd) {
							t.Errorf("%s[%d]: gradient %v, finite difference %v", p.Name, i, got, fd)
						}
						if got != 0 {
							checked++
						}
					}
				}
				if checked < len(params)/2 {
					t.Fatalf("only %d of %d sampled gradients were non-zero: the check is empty", checked, 2*len(params))
				}
			})
		}
	}
}

// An adapter switched off is the base exactly; a new adapter (B zero) on
// is the base exactly too; the base's bytes never change; activation
// checkpointing gives the adapter the same gradients bit for bit (the
// recompute draws the same dropout mask).
func TestLoRAOffIsBaseAndCheckpointingBits(t *testing.T) {
	cfg := tinyQwen3Config()
	base, err := New(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range base.Params() {
		for i := range p.Data {
			p.Data[i] *= 4
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	b := randomBatch(r, 50, 30, 9)
	want, _, err := base.Score(b)
	if err != nil {
		t.Fatal(err)
	}
	m := loraModel(t, cfg, 0.1)
	before := slices.Clone(m.ParamData())
	m.SetAdapterOn(false)
	off, _, err := m.Score(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(off, want) {
		t.Fatal("the model with its adapter off does not score as its base")
	}
	m.SetAdapterOn(true)
	on, _, _ := m.Score(b)
	if slices.Equal(on, want) {
		t.Fatal("the adapter (B drawn) changes nothing")
	}

	pc, _ := peft.NewConfig("tiny", 8, 16, 0, []string{"q_proj", "v_proj"}, peft.InitGaussian)
	fresh, _ := peft.New(pc, AdapterDims(cfg), rand.New(rand.NewPCG(1, 1)))
	m2, _ := New(cfg, 5)
	copy(m2.ParamData(), base.ParamData())
	if err := m2.AttachAdapter(fresh, 1); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := m2.Score(b); !slices.Equal(got, want) {
		t.Fatal("a new adapter (B zero) does not score as its base")
	}

	w := make([]float32, len(b.Tokens))
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	grads := func(ckpt bool) []float32 {
		m.SetCheckpointing(ckpt)
		m.ZeroGrads()
		a, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(a, w); err != nil {
			t.Fatal(err)
		}
		var out []float32
		for _, g := range m.AdapterGrads() {
			out = append(out, g.Data...)
		}
		return out
	}
	g1, g2 := grads(false), grads(true)
	if !slices.Equal(g1, g2) {
		t.Fatal("activation checkpointing changed the adapter's gradients")
	}
	m.SetAdapterStep(1)
	if g3 := grads(false); slices.Equal(g1, g3) {
		t.Fatal("a new step drew the same dropout mask")
	}
	if !slices.Equal(before, m.ParamData()) {
		t.Fatal("the base's weights changed")
	}
}

// An adapter for another base is refused with both sizes named.
func TestLoRAAttachRefusesOtherBase(t *testing.T) {
	cfg := tinyConfig()
	other := cfg
	other.IntermediateSize = 64
	pc, _ := peft.NewConfig("tiny", 4, 8, 0, []string{"down_proj"}, "")
	ad, _ := peft.New(pc, AdapterDims(other), rand.New(rand.NewPCG(1, 1)))
	m, _ := New(cfg, 1)
	err := m.AttachAdapter(ad, 1)
	if err == nil || !strings.Contains(err.Error(), "64 -> 32 features but the base model's is 48 -> 32") {
		t.Fatalf("err = %v", err)
	}
}

// Without dropout the adapted projection is the base's with W + s·B A, so
// the adapter's gradients follow from the base weight's gradient G of the
// merged model (the base's backward pass, held against PyTorch by the
// fixture tests): dB = s · G Aᵀ and dA = s · Bᵀ G. Checked on Qwen2 and
// Qwen3 (q/k norms) for every module, to float32 rounding: the two sides
// sum the same products in other orders (relative 1e-3 of the largest
// entry of the module's gradient; a wrong scale or transpose is off by
// the whole).
func TestLoRAGradientIsMergedGradient(t *testing.T) {
	for _, cfg := range []Config{tinyConfig(), tinyQwen3Config()} {
		t.Run(cfg.ModelType, func(t *testing.T) {
			m := loraModel(t, cfg, 0)
			ad := m.Adapter()
			var base []NamedTensor
			for _, p := range m.Params() {
				base = append(base, p)
			}
			merged, err := New(cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			ts := map[string]NamedTensor{}
			for _, p := range base {
				ts[p.Name] = p
			}
			for _, md := range ad.Modules {
				w := ts[md.Base()]
				w.Data = md.Merged(w.Data, ad.Config.Scale(), ad.Config.R)
				ts[md.Base()] = w
			}
			for _, p := range merged.Params() {
				copy(p.Data, ts[p.Name].Data)
			}
			r := rand.New(rand.NewPCG(4, 4))
			b := randomBatch(r, 50, 33, 12)
			w := make([]float32, len(b.Tokens))
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			for _, x := range []*Model{m, merged} {
				x.ZeroGrads()
				a, err := x.Forward(b)
				if err != nil {
					t.Fatal(err)
				}
				if err := x.Backward(a, w); err != nil {
					t.Fatal(err)
				}
			}
			G := map[string][]float32{}
			for _, g := range merged.Grads() {
				G[g.Name] = g.Data
			}
			grads := m.AdapterGrads()
			s, R := float64(ad.Config.Scale()), ad.Config.R
			for i, md := range ad.Modules {
				g := G[md.Base()]
				wantB := make([]float64, md.Out*R)
				wantA := make([]float64, R*md.In)
				for o := 0; o < md.Out; o++ {
					for k := 0; k < R; k++ {
						var sum float64
						for j := 0; j < md.In; j++ {
							sum += float64(g[o*md.In+j]) * float64(md.A[k*md.In+j])
						}
						wantB[o*R+k] = s * sum
					}
				}
				for k := 0; k < R; k++ {
					for j := 0; j < md.In; j++ {
						var sum float64
						for o := 0; o < md.Out; o++ {
							sum += float64(md.B[o*R+k]) * float64(g[o*md.In+j])
						}
						wantA[k*md.In+j] = s * sum
					}
				}
				for _, c := range []struct {
					got  NamedTensor
					want []float64
				}{{grads[2*i], wantA}, {grads[2*i+1], wantB}} {
					var big float64
					for _, v := range c.want {
						big = math.Max(big, math.Abs(v))
					}
					if big == 0 {
						t.Fatalf("%s: the merged model's gradient is zero: the check is empty", c.got.Name)
					}
					for j, v := range c.want {
						if d := math.Abs(float64(c.got.Data[j]) - v); d > 1e-3*big {
							t.Fatalf("%s[%d] = %v, from the merged model's gradient %v (largest %v)", c.got.Name, j, c.got.Data[j], v, big)
						}
					}
				}
			}
		})
	}
}

// Decoding with an adapter attached samples the adapted model: the cached
// greedy decode agrees with full recomputation through the adapter, and
// differs from the base's logits.
func TestLoRADecodes(t *testing.T) {
	m := loraModel(t, tinyQwen3Config(), 0.2)
	prompt := []int32{1, 7, 3, 9, 22, 4, 0}
	checkGreedy(t, m, prompt, 20)
	c := m.NewKVCache()
	on, err := m.Extend([]*KVCache{c}, [][]int32{prompt}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.SetAdapterOn(false)
	base := lastLogits(t, m, prompt)
	m.SetAdapterOn(true)
	if d, _ := maxDiff(on, base); d == 0 {
		t.Fatal("decoding with the adapter gives the base's logits")
	}
}

// A LoRA model whose frozen base is sharded (ShardWeights after
// AttachAdapter) computes the same log-probabilities and adapter
// gradients, bit for bit, as one that holds its base whole, in float32
// and with bfloat16 products, with a tied head of several vocabulary
// blocks and an untied one, checkpointed or not: its training pass reads
// the units in FrozenUnitPlan's order and hands over no gradient (the
// base takes none), and its scoring pass with the adapter off (the KL
// term's reference) reads UnitPlan's scoring order and gives the whole
// base's scores.
func TestLoRAShardedBaseSameBits(t *testing.T) {
	bigTied := tinyQwen3Config()
	bigTied.VocabSize = 2*minVocabBlockRows + 300
	untied := tinyConfig()
	untied.TieWordEmbeddings = false
	for _, c := range []struct {
		name             string
		cfg              Config
		bf16, checkpoint bool
	}{{"qwen3-tied-blocks", bigTied, false, false}, {"untied-checkpointed", untied, false, true}, {"qwen3-tied-bf16", tinyQwen3Config(), true, false}} {
		t.Run(c.name, func(t *testing.T) {
			whole, shardedM := loraModel(t, c.cfg, 0.1), loraModel(t, c.cfg, 0.1)
			for _, m := range []*Model{whole, shardedM} {
				m.SetCheckpointing(c.checkpoint)
				m.SetComputeBF16(c.bf16)
				m.SetAdapterStep(3)
			}
			feed := &wholeFeed{t: t, data: slices.Clone(shardedM.ParamData()), units: shardedM.Units()}
			if err := shardedM.ShardWeights(feed); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, 6))
			b := randomBatch(r, c.cfg.VocabSize, 30, 17)
			w := make([]float32, len(b.Tokens))
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			var lps [2][]float32
			for i, m := range []*Model{whole, shardedM} {
				m.ZeroGrads()
				a, err := m.Forward(b)
				if err != nil {
					t.Fatal(err)
				}
				lps[i] = slices.Clone(a.LogProbs)
				if err := m.Backward(a, w); err != nil {
					t.Fatal(err)
				}
				m.EndShardedPass()
			}
			if _, ok := sameBits(lps[0], lps[1]); !ok {
				t.Fatal("the LoRA model over a sharded base gives other log-probabilities than over the whole base")
			}
			if i, ok := sameBits(whole.AdapterGradData(), shardedM.AdapterGradData()); !ok {
				t.Fatalf("the adapter's gradients over a sharded base differ from those over the whole base (first at element %d)", i)
			}
			if want := FrozenUnitPlan(c.cfg); !slices.Equal(feed.events, want) {
				t.Fatalf("the training pass asked %v, FrozenUnitPlan says %v", feed.events, want)
			}
			for _, e := range feed.events {
				if e.Grad {
					t.Fatalf("the frozen base handed over the gradient of unit %d", e.Unit)
				}
			}
			feed.events = nil
			for i, m := range []*Model{whole, shardedM} {
				m.SetAdapterOn(false)
				lp, _, err := m.Score(b)
				if err != nil {
					t.Fatal(err)
				}
				m.EndShardedPass()
				m.SetAdapterOn(true)
				lps[i] = lp
			}
			if _, ok := sameBits(lps[0], lps[1]); !ok {
				t.Fatal("the sharded base with the adapter off scores otherwise than the whole base")
			}
			if want := UnitPlan(c.cfg, false); !slices.Equal(feed.events, want) {
				t.Fatalf("the base's scoring pass asked %v, UnitPlan says %v", feed.events, want)
			}
		})
	}
}
