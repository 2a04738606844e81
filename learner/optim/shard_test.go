package optim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Shards of 1 to 5 ranks, each updating its chunks from their slices of
// the gradient and the global norm from every chunk's squared sum, give
// the parameters and moments of one AdamW.Step, bit for bit, over steps
// with clipping; a norm that is not finite changes nothing.
func TestShardEqualsStep(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{3, chunkSize + 17, 1, 2*chunkSize + 5, 40}
	mk := func() []Param {
		r := rand.New(rand.NewPCG(3, 4))
		ps := make([]Param, len(sizes))
		for i, n := range sizes {
			ps[i] = Param{Name: string(rune('a' + i)), Data: make([]float32, n), Grad: make([]float32, n)}
			for j := range ps[i].Data {
				ps[i].Data[j] = float32(r.NormFloat64())
			}
		}
		return ps
	}
	cfg := DefaultConfig()
	cfg.LR, cfg.GradClip, cfg.WeightDecay = 1e-2, 1, 0.1
	for n := 1; n <= 5; n++ {
		ref, got := mk(), mk()
		opt, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		chunks := Chunks(got)
		bounds := Partition(chunks, n)
		shards := make([]*Shard, n)
		for k := range n {
			if shards[k], err = NewShard(cfg, chunks[bounds[k]:bounds[k+1]]); err != nil {
				t.Fatal(err)
			}
		}
		for step := range 3 {
			for i := range ref {
				for j := range ref[i].Grad {
					g := float32(r.NormFloat64())
					ref[i].Grad[j], got[i].Grad[j] = g, g
				}
			}
			norm := opt.Step(ref)
			partial := make([]float64, len(chunks))
			for c, ch := range chunks {
				partial[c] = SquaredSum(got[ch.Param].Grad[ch.Lo:ch.Hi])
			}
			if gn := NormOfSquares(partial); gn != norm {
				t.Fatalf("%d ranks, step %d: norm %v from the partials, %v from Step", n, step, gn, norm)
			}
			for k, s := range shards {
				grads := make([][]float32, len(s.Chunks()))
				for i, ch := range s.Chunks() {
					grads[i] = got[ch.Param].Grad[ch.Lo:ch.Hi]
				}
				if ok, err := s.Step(got, grads, norm); !ok || err != nil {
					t.Fatalf("%d ranks, shard %d: %v %v", n, k, ok, err)
				}
			}
		}
		for i := range ref {
			for j := range ref[i].Data {
				if math.Float32bits(ref[i].Data[j]) != math.Float32bits(got[i].Data[j]) {
					t.Fatalf("%d ranks: parameter %s[%d] = %v, AdamW.Step gives %v", n, ref[i].Name, j, got[i].Data[j], ref[i].Data[j])
				}
			}
		}
		for _, s := range shards {
			for i, ch := range s.Chunks() {
				m, v := s.Moments(i)
				st := opt.state[ref[ch.Param].Name]
				for j := range m {
					if m[j] != st.m[ch.Lo+j] || v[j] != st.v[ch.Lo+j] {
						t.Fatalf("%d ranks: moments of %s[%d] differ", n, ref[ch.Param].Name, ch.Lo+j)
					}
				}
			}
		}
		if n > 1 && bounds[1] == 0 {
			t.Errorf("%d ranks: rank 0 owns nothing (bounds %v)", n, bounds)
		}
	}
	ps := mk()
	s, _ := NewShard(cfg, Chunks(ps))
	grads := make([][]float32, len(s.Chunks()))
	for i, ch := range s.Chunks() {
		grads[i] = make([]float32, ch.Len())
	}
	before := ps[0].Data[0]
	if ok, err := s.Step(ps, grads, math.NaN()); ok || err != nil || s.Steps() != 0 || ps[0].Data[0] != before {
		t.Errorf("a NaN norm: applied %v, steps %d, %v", ok, s.Steps(), err)
	}
	if _, err := s.Step(ps, grads[:1], 1); err == nil {
		t.Error("a gradient list of the wrong length was taken")
	}
}
