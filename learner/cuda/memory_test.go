package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// TestPassBytesIsTheDevicePeak: WeightBytes and PassBytes are the device
// memory MemStats counts, exactly: a training model's weights, gradients,
// bfloat16 copy and (after a step) moments, and the peak of a first
// ForwardBackward above them, with and without checkpointing, in float32
// and bf16, of a pass without a backward one and of one whose tokens have
// no target (no head); for the tiny Qwen2 (QKV bias, tied head), Qwen3
// (the q/k norm's kept input and scratch) and Llama 3 (untied head)
// configurations.
func TestPassBytesIsTheDevicePeak(t *testing.T) {
	dv := ownGPU(t)
	for _, name := range []string{"tiny_qwen2", "tiny_qwen3", "tiny_llama3"} {
		t.Run(name, func(t *testing.T) { passBytesIsTheDevicePeak(t, dv, fixtureModel(t, name, 15)) })
	}
}

func passBytesIsTheDevicePeak(t *testing.T, dv *Device, m *model.Model) {
	cfg := m.Config()
	r := rand.New(rand.NewPCG(69, 70))
	lens := []int{21, 9, 34}
	b := model.Batch{Tokens: make([]int32, 64), SeqLens: lens, Targets: make([]int32, 64)}
	rows := 0
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(cfg.VocabSize))
		b.Targets[i] = -1
		if i%4 != 0 {
			b.Targets[i], rows = int32(r.IntN(cfg.VocabSize)), rows+1
		}
	}
	lossFn := func(lp, _ []float32) ([]float32, error) { return make([]float32, len(lp)), nil }
	for _, c := range []struct {
		name                         string
		bf16, ckpt, score, noTargets bool
	}{{"fp32", false, false, false, false}, {"fp32 checkpointed", false, true, false, false}, {"bf16", true, false, false, false},
		{"bf16 score", true, false, true, false}, {"fp32 no targets", false, false, false, true}} {
		t.Run(c.name, func(t *testing.T) {
			b, rows := b, rows
			if c.noTargets {
				b.Targets, rows = make([]int32, len(b.Tokens)), 0
				for i := range b.Targets {
					b.Targets[i] = -1
				}
			}
			must(t, dv.ReleaseScratch())
			live0, _ := dv.MemStats()
			g, err := dv.NewModel(m)
			must(t, err)
			defer g.Free()
			if c.bf16 {
				must(t, g.UseBF16())
			}
			g.SetCheckpointing(c.ckpt)
			w, comp, gr, opt := WeightBytes(cfg, false, c.bf16)
			live1, _ := dv.MemStats()
			if got, want := int64(live1-live0), w+comp+gr; got != want {
				t.Errorf("the model holds %d bytes, WeightBytes says %d", got, want)
			}
			dv.ResetPeak()
			fn := lossFn
			if c.score {
				fn = nil
			}
			if _, _, err := g.ForwardBackward(b, fn); err != nil {
				t.Fatal(err)
			}
			_, peak := dv.MemStats()
			want := PassBytes(cfg, model.PassShape{SeqLens: lens, Rows: rows, Checkpointing: c.ckpt, Score: c.score}, c.bf16)
			if got := int64(peak - live1); got != want {
				t.Errorf("the pass's peak is %d bytes above the weights, PassBytes says %d", got, want)
			}
			if c.score {
				return
			}
			must(t, dv.ReleaseScratch())
			live2, _ := dv.MemStats()
			o, _ := optim.New(optim.DefaultConfig())
			if _, err := g.Step(o); err != nil {
				t.Fatal(err)
			}
			live3, _ := dv.MemStats()
			// The moments and the norm's two reduction buffers.
			partials := int64(dv.gridFor(g.params.n))
			if got := int64(live3-live2) - 8*(partials+1); got != opt {
				t.Errorf("the optimiser holds %d bytes, WeightBytes says %d", got, opt)
			}
		})
	}
	for _, bf16 := range []bool{false, true} {
		must(t, dv.ReleaseScratch())
		live0, _ := dv.MemStats()
		g, err := dv.NewFrozen(m, bf16)
		must(t, err)
		live1, _ := dv.MemStats()
		w, comp, _, _ := WeightBytes(cfg, true, bf16)
		if got := int64(live1 - live0); got != w+comp {
			t.Errorf("bf16 %v: the frozen model holds %d bytes, WeightBytes says %d", bf16, got, w+comp)
		}
		must(t, g.Free())
	}
}
