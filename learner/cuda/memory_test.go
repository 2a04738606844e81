package cuda

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// TestPassBytesIsTheDevicePeak: WeightBytes and PassBytes are the device
// memory MemStats counts, exactly: a training model's weights, gradients,
// bfloat16 copy and (after a step) moments, and the peak of a first
// ForwardBackward above them, with and without checkpointing (and with
// the layers' inputs stored in host memory, SetInputStore: two of them on
// the device instead of one a layer), in float32 and bf16, of a pass without a backward one and of one whose tokens have
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
		name                                string
		bf16, ckpt, score, noTargets, store bool
	}{{"fp32", false, false, false, false, false}, {"fp32 checkpointed", false, true, false, false, false}, {"bf16", true, false, false, false, false},
		{"bf16 score", true, false, true, false, false}, {"fp32 no targets", false, false, false, true, false},
		{"fp32 checkpointed, inputs in host memory", false, true, false, false, true}, {"bf16 checkpointed, inputs in host memory", true, true, false, false, true}} {
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
			g.SetInputStore(c.store)
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
			shape := model.PassShape{SeqLens: lens, Rows: rows, Checkpointing: c.ckpt, Score: c.score, StoreInputs: c.store}
			want := PassBytes(cfg, shape, c.bf16)
			if got := int64(peak - live1); got != want {
				t.Errorf("the pass's peak is %d bytes above the weights, PassBytes says %d", got, want)
			}
			if got, want := g.StoredBytes(), StoredInputBytes(cfg, shape); got != want || c.store && (want == 0 || want != 4*int64(cfg.NumHiddenLayers*len(b.Tokens)*cfg.HiddenSize)) {
				t.Errorf("the stored inputs hold %d bytes of host memory, StoredInputBytes says %d", got, want)
			}
			if c.store {
				// Two kept inputs on the device where there were one a
				// layer (L+1): L-1 of them fewer.
				unstored := shape
				unstored.StoreInputs = false
				saved := PassBytes(cfg, unstored, c.bf16) - want
				t.Logf("inputs in host memory: the pass's device peak %d bytes, %d fewer (%d layers' inputs of %d bytes)", want, saved, cfg.NumHiddenLayers-1, 4*len(b.Tokens)*cfg.HiddenSize)
				if saved != int64(cfg.NumHiddenLayers-1)*int64(poolSize(len(b.Tokens)*cfg.HiddenSize))*4 {
					t.Errorf("storing the inputs saves %d bytes of the device's, want %d layers' inputs", saved, cfg.NumHiddenLayers-1)
				}
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

// TestPlanStepStoresInputsOnTheHost: a step planned with
// learner.activation_checkpointing: offload on the cuda backend counts the
// layers' kept inputs on the host (StoredInputBytes, one N*C float32
// input a layer) and two of them on the device (PassBytes of a pass that
// stores them), for the shape of Qwen2.5-7B-Instruct at a 17,408-token
// micro-batch; the cpu backend, whose passes are in host memory, refuses
// it and names the setting to give instead.
func TestPlanStepStoresInputsOnTheHost(t *testing.T) {
	mc, err := model.LoadConfig("../hfconfig/testdata/Qwen2.5-7B-Instruct.config.json")
	if err != nil {
		t.Fatal(err)
	}
	const tokens = 17408
	mem := func(ckpt, name string) (trainer.StepMemory, error) {
		return trainer.PlanStep(trainer.MemoryConfig{Model: mc, Backend: name, Precision: "bf16", MicroBatchTokens: tokens, Checkpointing: ckpt})
	}
	on, err := mem(trainer.CheckpointingOn, Name)
	if err != nil {
		t.Fatal(err)
	}
	off, err := mem(trainer.CheckpointingOffload, Name)
	if err != nil {
		t.Fatal(err)
	}
	shape := model.Packed(tokens, tokens, true)
	shape.StoreInputs = true
	if want := int64(4 * mc.NumHiddenLayers * tokens * mc.HiddenSize); off.Host.Activations != want || StoredInputBytes(mc, shape) != want {
		t.Errorf("offload: %d bytes of the layers' inputs on the host (StoredInputBytes %d), want %d", off.Host.Activations, StoredInputBytes(mc, shape), want)
	}
	if on.Host.Activations != 0 {
		t.Errorf("checkpointing on: %d bytes of activations on the host, want none", on.Host.Activations)
	}
	if want := PassBytes(mc, shape, true); off.Device.Activations != want {
		t.Errorf("offload: %d bytes of activations on the device, PassBytes %d", off.Device.Activations, want)
	}
	saved := on.Device.Activations - off.Device.Activations
	t.Logf("Qwen2.5-7B-Instruct, %d tokens, bf16: the device's activations %.2f GiB with checkpointing on, %.2f with the inputs offloaded (%.2f GiB of them on the host)",
		tokens, float64(on.Device.Activations)/(1<<30), float64(off.Device.Activations)/(1<<30), float64(off.Host.Activations)/(1<<30))
	if want := int64(mc.NumHiddenLayers-1) * 4 * int64(poolSize(tokens*mc.HiddenSize)); saved != want {
		t.Errorf("offload saves %d bytes of the device's, want %d (the layers' inputs but two)", saved, want)
	}
	if _, err := mem(trainer.CheckpointingOffload, "cpu"); err == nil || !strings.Contains(err.Error(), "give on") {
		t.Errorf("offload on the cpu backend: %v, want a refusal naming checkpointing on", err)
	}
}
