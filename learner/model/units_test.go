package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// wholeFeed is a UnitFeed over weights held whole in this process: it
// serves each unit from its copy and keeps the last gradient handed over of each unit,
// recording what the pass asked for, in order.
type wholeFeed struct {
	t      *testing.T
	data   []float32
	units  []Span
	grads  []float32
	events []UnitEvent
}

func (f *wholeFeed) Use(u int) ([]float32, error) {
	f.events = append(f.events, UnitEvent{Unit: u})
	s := f.units[u]
	return slices.Clone(f.data[s.Off : s.Off+s.Len]), nil
}

func (f *wholeFeed) NewGrad(u int) []float32 { return make([]float32, f.units[u].Len) }

func (f *wholeFeed) GradDone(u int, g []float32) error {
	f.events = append(f.events, UnitEvent{Unit: u, Grad: true})
	s := f.units[u]
	if len(g) != s.Len {
		return fmt.Errorf("unit %d: %d gradients for %d weights", u, len(g), s.Len)
	}
	copy(f.grads[s.Off:], g)
	return nil
}

// A model whose weights are sharded (ShardWeights) computes the same
// log-probabilities, entropies and gradients, bit for bit, as one that
// holds them whole, reading the units in UnitPlan's order, with a tied
// and an untied head, Qwen3's q/k norm and checkpointed passes; Score
// reads the forward part of the plan; a feed's failure is the pass's
// error; the units cover the buffer once.
func TestShardedWeightsSameBits(t *testing.T) {
	untied := tinyConfig()
	untied.TieWordEmbeddings = false
	qwen3 := tinyConfig()
	qwen3.ModelType, qwen3.HeadDim = "qwen3", 8
	// Vocabularies of several blocks (vocabBlockRows), the last one
	// short: each block a unit.
	bigTied, bigUntied := tinyConfig(), untied
	bigTied.VocabSize, bigUntied.VocabSize = 2*minVocabBlockRows+300, 2*minVocabBlockRows+300
	for _, c := range []struct {
		name       string
		cfg        Config
		checkpoint bool
		// chunk and keep, when set, are chunkFloats and
		// keepLogitsFloats: several slices a block, recomputed tiles.
		chunk, keep int
	}{{"tied", tinyConfig(), false, 0, 0}, {"untied", untied, false, 0, 0}, {"qwen3-checkpointed", qwen3, true, 0, 0},
		{"tied-blocks", bigTied, false, 0, 0}, {"untied-blocks", bigUntied, false, 0, 0},
		{"tied-blocks-slices-recomputed", bigTied, false, 40 * 3000, 40 * 3000 * 2},
		{"untied-blocks-slices-recomputed", bigUntied, false, 40 * 3000, 40 * 3000 * 2}} {
		t.Run(c.name, func(t *testing.T) {
			if c.chunk > 0 {
				defer func(k, ch int) { keepLogitsFloats, chunkFloats = k, ch }(keepLogitsFloats, chunkFloats)
				keepLogitsFloats, chunkFloats = c.keep, c.chunk
			}
			if _, k := vocabBlocks(dimsOf(c.cfg)); (c.cfg.VocabSize > minVocabBlockRows) != (k > 1) {
				t.Fatalf("a vocabulary of %d is %d blocks", c.cfg.VocabSize, k)
			}
			whole, err := New(c.cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			whole.SetCheckpointing(c.checkpoint)
			units := whole.Units()
			at := 0
			for u, s := range units {
				if s.Off != at || s.Len <= 0 {
					t.Fatalf("unit %d is %+v, want it to start at %d", u, s, at)
				}
				at += s.Len
			}
			if at != whole.NumParams() {
				t.Fatalf("the units cover %d of %d parameters", at, whole.NumParams())
			}
			shardedM, err := New(c.cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			shardedM.SetCheckpointing(c.checkpoint)
			feed := &wholeFeed{t: t, data: slices.Clone(shardedM.ParamData()), units: units, grads: make([]float32, whole.NumParams())}
			if err := shardedM.ShardWeights(feed); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, 6))
			b := randomBatch(r, c.cfg.VocabSize, 40, 23)
			w := make([]float32, len(b.Tokens))
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			// Two passes, each from zero gradients: a sharded model's
			// gradients live for one pass.
			var lpW, lpS []float32
			for range 2 {
				whole.ZeroGrads()
				for _, m := range []*Model{whole, shardedM} {
					a, err := m.Forward(b)
					if err != nil {
						t.Fatal(err)
					}
					lp := slices.Clone(a.LogProbs)
					if err := m.Backward(a, w); err != nil {
						t.Fatal(err)
					}
					m.EndShardedPass()
					if m == whole {
						lpW = lp
					} else {
						lpS = lp
					}
				}
				if _, ok := sameBits(lpW, lpS); !ok {
					t.Fatal("the sharded model's log-probabilities differ from the whole model's")
				}
				if i, ok := sameBits(whole.GradData(), feed.grads); !ok {
					t.Fatalf("the gradients handed over differ from the whole model's (first at element %d)", i)
				}
			}
			plan := UnitPlan(c.cfg, true)
			if want := append(slices.Clone(plan), plan...); !slices.Equal(feed.events, want) {
				t.Fatalf("the passes asked %v, UnitPlan says %v (twice)", feed.events, plan)
			}
			feed.events = nil
			lp, _, err := shardedM.Score(b)
			if err != nil {
				t.Fatal(err)
			}
			shardedM.EndShardedPass()
			if _, ok := sameBits(lp, lpW); !ok {
				t.Fatal("Score of the sharded model differs from Forward's log-probabilities")
			}
			if want := UnitPlan(c.cfg, false); !slices.Equal(feed.events, want) {
				t.Fatalf("Score asked %v, UnitPlan says %v", feed.events, want)
			}
			// Whole again, from the feed's weights: the same pass.
			if err := shardedM.UnshardWeights(slices.Clone(feed.data)); err != nil {
				t.Fatal(err)
			}
			lp, _, err = shardedM.Score(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := sameBits(lp, lpW); !ok || shardedM.Sharded() {
				t.Fatal("the model made whole again scores otherwise")
			}
		})
	}
	m, err := New(tinyConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ShardWeights(failingFeed{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Score(randomBatch(rand.New(rand.NewPCG(1, 2)), tinyConfig().VocabSize, 10, 5)); err == nil || !strings.Contains(err.Error(), "the link went down") {
		t.Fatalf("a pass whose feed fails: %v, want the feed's error", err)
	}
}

type failingFeed struct{}

func (failingFeed) Use(int) ([]float32, error)    { return nil, fmt.Errorf("the link went down") }
func (failingFeed) GradDone(int, []float32) error { return nil }
func (failingFeed) NewGrad(int) []float32         { return nil }

// A model whose gradients alone are sharded (ShardGrads) reads its own
// weights, asking the feed for none, and hands over each unit's gradient
// in UnitPlan's order, bit for bit the whole model's.
func TestShardedGradsSameBits(t *testing.T) {
	cfg := tinyConfig()
	cfg.ModelType, cfg.HeadDim = "qwen3", 8
	whole, err := New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	feed := &wholeFeed{t: t, units: m.Units(), grads: make([]float32, m.NumParams())}
	if err := m.ShardGrads(feed); err != nil {
		t.Fatal(err)
	}
	if m.Sharded() {
		t.Fatal("a model whose gradients alone are sharded says its weights are")
	}
	r := rand.New(rand.NewPCG(7, 8))
	b := randomBatch(r, cfg.VocabSize, 30, 17)
	w := make([]float32, len(b.Tokens))
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	for _, x := range []*Model{whole, m} {
		a, err := x.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Backward(a, w); err != nil {
			t.Fatal(err)
		}
		x.EndShardedPass()
	}
	var want []UnitEvent
	for _, e := range UnitPlan(cfg, true) {
		if e.Grad {
			want = append(want, e)
		}
	}
	if !slices.Equal(feed.events, want) {
		t.Fatalf("the pass asked %v, want the gradients of UnitPlan alone %v", feed.events, want)
	}
	if i, ok := sameBits(whole.GradData(), feed.grads); !ok {
		t.Fatalf("the gradients handed over differ from the whole model's (first at element %d)", i)
	}
	m.ReleaseBuffers()
	if a, err := m.Forward(b); err != nil {
		t.Fatal(err)
	} else if err := m.Backward(a, w); err != nil {
		t.Fatalf("a pass after ReleaseBuffers: %v", err)
	}
}

// UnitValues gives each unit's weights as the flat buffer holds them, and
// for a model held in bfloat16 (HoldBF16Rounded) their rounded values
// widened, so that a bfloat16-held scoring model sharded from them
// (ShardWeights, which it now allows) scores as it did whole, bit for bit,
// with a tied and an untied head of several vocabulary blocks.
func TestUnitValuesOfABF16HeldModel(t *testing.T) {
	tied := tinyConfig()
	tied.VocabSize = 2*minVocabBlockRows + 300
	untied := tied
	untied.TieWordEmbeddings = false
	untied.ModelType, untied.HeadDim = "qwen3", 8
	for _, cfg := range []Config{tied, untied} {
		m, err := New(cfg, 4)
		if err != nil {
			t.Fatal(err)
		}
		flat := slices.Clone(m.ParamData())
		units := m.Units()
		for u, s := range units {
			got := make([]float32, s.Len)
			if err := m.UnitValues(u, got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, flat[s.Off:s.Off+s.Len]) {
				t.Fatalf("tied %v: unit %d's values are not the flat buffer's", cfg.TieWordEmbeddings, u)
			}
		}
		m.SetComputeBF16(true)
		if !m.HoldBF16Rounded() {
			t.Fatal("HoldBF16Rounded declined a scoring model computing in bfloat16")
		}
		b := Batch{Tokens: []int32{1, 5, 9, 2, 7, 3, 11, 4}}
		want, _, err := m.Score(b)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]float32, len(flat))
		for u, s := range units {
			if err := m.UnitValues(u, data[s.Off:s.Off+s.Len]); err != nil {
				t.Fatal(err)
			}
		}
		rounded := make([]float32, len(flat))
		roundBF16Into(rounded, flat)
		if err := m.ShardWeights(&wholeFeed{t: t, data: data, units: units}); err != nil {
			t.Fatal(err)
		}
		got, _, err := m.Score(b)
		m.EndShardedPass()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("tied %v: the sharded bfloat16-held model scores %v, whole %v", cfg.TieWordEmbeddings, got, want)
		}
		// The matrices' values are the rounded ones; the norms and
		// biases (not rounded) the flat buffer's.
		for i := range data {
			if data[i] != rounded[i] && data[i] != flat[i] {
				t.Fatalf("tied %v: element %d is %v, neither its value %v nor its rounding %v", cfg.TieWordEmbeddings, i, data[i], flat[i], rounded[i])
			}
		}
	}
}
