package cuda

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// optimConfig has clipping, weight decay, warmup and the cosine all
// active over the tests' few steps.
func optimConfig() optim.Config {
	cfg := optim.DefaultConfig()
	cfg.LR, cfg.GradClip, cfg.WeightDecay = 1e-3, 1, 0.1
	cfg.Schedule, cfg.WarmupSteps, cfg.TotalSteps = optim.ScheduleWarmupCosine, 1, 6
	return cfg
}

// readState decodes a state stream into flat moments per tensor.
func readState(t *testing.T, b []byte) (int64, map[string][2][]float32, []string) {
	t.Helper()
	out := map[string][2][]float32{}
	var names []string
	var steps int64
	_, err := optim.ReadState(bytes.NewReader(b), func(st int64, ts []optim.TensorState) error {
		steps = st
		for _, x := range ts {
			names = append(names, x.Name)
			out[x.Name] = [2][]float32{make([]float32, x.Numel), make([]float32, x.Numel)}
		}
		return nil
	}, func(ti, moment, off int, vals []float32) error {
		copy(out[names[ti]][moment][off:], vals)
		return nil
	})
	must(t, err)
	return steps, out, names
}

// TestParityDeviceOptimizer runs the device's optimiser step (Model.Step:
// the gradients' norm, the clip scale and AdamW all on the device, in
// launches split as a 7B model's are) against learner/optim.AdamW on the
// same parameters and gradients for four steps, with clipping, weight
// decay, warmup and the cosine active, and a step whose norm is not
// finite. Tolerances are TestParityAdamW's: the norm in float64 differs
// by the order of additions only (1e-12 relative), and the update repeats
// optim's float32 arithmetic, so the parameters agree to 1e-6. Then the
// state: streamed out of the device it holds optim's moments (1e-6), and
// optim's state streamed in and out again comes back byte for byte.
func TestParityDeviceOptimizer(t *testing.T) {
	dv := gpu(t, true)
	defer func(n int) { maxLaunch = n }(maxLaunch)
	maxLaunch = 1000 // several launches per buffer, as for more than 2^30 elements
	host := tinyModel(t, 7)
	g, err := dv.NewModel(host)
	must(t, err)
	defer g.Free()
	if g.params.n <= 3*maxLaunch {
		t.Fatalf("the model has %d parameters: too few to split", g.params.n)
	}
	cpu := tinyModel(t, 7)
	cpuOpt, err := optim.New(optimConfig())
	must(t, err)
	gpuOpt, err := optim.New(optimConfig())
	must(t, err)
	params := backend.OptimParams(cpu)
	r := rand.New(rand.NewPCG(61, 62))
	for step := 0; step < 4; step++ {
		grads := cpu.GradData()
		copy(grads, randn(r, len(grads), 0.05))
		if step == 2 {
			grads[17] = float32(math.Inf(1))
		}
		must(t, g.grads.CopyFromFloat32(grads))
		want := cpuOpt.Step(params)
		got, err := g.Step(gpuOpt)
		must(t, err)
		if step == 2 {
			if !math.IsInf(got, 1) || !math.IsInf(want, 1) || gpuOpt.Steps() != cpuOpt.Steps() {
				t.Fatalf("step with an infinite gradient: norm %v (CPU %v), steps %d (CPU %d)", got, want, gpuOpt.Steps(), cpuOpt.Steps())
			}
		} else {
			if math.Abs(got-want) > 1e-12*want {
				t.Errorf("step %d: norm %.17g, CPU %.17g", step, got, want)
			}
			if ClipScale(want, optimConfig().GradClip) >= 1 {
				t.Fatalf("step %d: the norm %g does not exercise clipping", step, want)
			}
		}
		if gpuOpt.Steps() != cpuOpt.Steps() {
			t.Fatalf("step %d: %d steps counted, CPU %d", step, gpuOpt.Steps(), cpuOpt.Steps())
		}
		p := make([]float32, g.params.n)
		must(t, g.Params(p))
		closeTo(t, "params", p, cpu.ParamData(), 1e-6, 1e-9)
	}
	// The state out of the device holds the CPU's moments.
	var devState, cpuState bytes.Buffer
	must(t, g.WriteOptimizer(host, gpuOpt, &devState))
	_, err = cpuOpt.WriteTo(&cpuState)
	must(t, err)
	ds, dm, dn := readState(t, devState.Bytes())
	cs, cm, cn := readState(t, cpuState.Bytes())
	if ds != cs || len(dn) != len(cn) {
		t.Fatalf("device state: %d steps, %d tensors; CPU %d, %d", ds, len(dn), cs, len(cn))
	}
	for i, name := range cn {
		if dn[i] != name {
			t.Fatalf("tensor %d: device %q, CPU %q", i, dn[i], name)
		}
		closeTo(t, name+" m", dm[name][0], cm[name][0], 1e-6, 1e-12)
		closeTo(t, name+" v", dm[name][1], cm[name][1], 1e-6, 1e-15)
	}
	// The CPU's state into the device and out again: the same bytes.
	restored, err := optim.New(optimConfig())
	must(t, err)
	must(t, g.ReadOptimizer(host, restored, bytes.NewReader(cpuState.Bytes())))
	if restored.Steps() != cpuOpt.Steps() {
		t.Errorf("restored %d steps, want %d", restored.Steps(), cpuOpt.Steps())
	}
	var again bytes.Buffer
	must(t, g.WriteOptimizer(host, restored, &again))
	if !bytes.Equal(again.Bytes(), cpuState.Bytes()) {
		t.Error("optim's state through the device does not come back byte for byte")
	}
	// A state of another model is refused, naming the tensor.
	other, _ := optim.New(optimConfig())
	odd := []optim.Param{{Name: "model.embed_tokens.weight", Data: make([]float32, 3), Grad: []float32{1, 2, 3}}}
	other.Step(odd)
	var bad bytes.Buffer
	_, err = other.WriteTo(&bad)
	must(t, err)
	if err := g.ReadOptimizer(host, restored, &bad); err == nil || !bytes.Contains([]byte(err.Error()), []byte("model.embed_tokens.weight")) {
		t.Errorf("a mismatched state: %v", err)
	}
}

// TestDeviceTrainingStepStaysOnTheDevice trains through the backend's
// Compute, as the trainer does: forward and backward on the device, the
// optimiser step there; the host model neither allocates gradients nor
// sees its parameters change until SyncParams, which brings the device's
// masters back exactly. The trained parameters follow the CPU backend's
// step: after two steps of lr 1e-3 the parameters differ by far less than
// an update wherever the gradient is not near zero, so they are held to
// 2e-3 (two updates) absolute, and most to 1e-5.
func TestDeviceTrainingStepStaysOnTheDevice(t *testing.T) {
	dv := gpu(t, true)
	host, cpu := tinyModel(t, 7), tinyModel(t, 7)
	before := append([]float32(nil), host.ParamData()...)
	dev, err := cudaDevice{dv}.Train(host, "")
	must(t, err)
	defer dev.Close()
	ref := backend.CPUCompute(cpu)
	cfg := host.Config()
	r := rand.New(rand.NewPCG(63, 64))
	b := model.Batch{Tokens: make([]int32, 40), SeqLens: []int{25, 15}}
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(cfg.VocabSize))
	}
	lossFn := func(lp, _ []float32) ([]float32, error) {
		out := make([]float32, len(lp))
		for i := range out {
			out[i] = -1 / float32(len(lp))
		}
		return out, nil
	}
	devOpt, _ := optim.New(optimConfig())
	cpuOpt, _ := optim.New(optimConfig())
	for step := 0; step < 2; step++ {
		for _, c := range []backend.Compute{dev, ref} {
			must(t, c.ZeroGrads())
			if _, err := c.Run(b, lossFn); err != nil {
				t.Fatal(err)
			}
		}
		dn, err := dev.Step(devOpt)
		must(t, err)
		cn, err := ref.Step(cpuOpt)
		must(t, err)
		if math.Abs(dn-cn) > 1e-4*cn {
			t.Errorf("step %d: gradient norm %g on the device, %g on the CPU", step, dn, cn)
		}
	}
	if host.HasGrads() {
		t.Error("training on the device allocated gradients on the host")
	}
	if i, ok := sameBits(host.ParamData(), before); !ok {
		t.Fatalf("the host parameters changed during device steps (element %d)", i)
	}
	must(t, dev.SyncParams())
	p := make([]float32, len(before))
	must(t, dev.(*compute).dev.Params(p))
	if i, ok := sameBits(host.ParamData(), p); !ok {
		t.Fatalf("SyncParams: element %d is %v on the host, %v on the device", i, host.ParamData()[i], p[i])
	}
	closeTo(t, "trained params", host.ParamData(), cpu.ParamData(), 0, 2e-3)
	close := 0
	for i, x := range host.ParamData() {
		if math.Abs(float64(x-cpu.ParamData()[i])) <= 1e-5 {
			close++
		}
	}
	if close < len(p)*9/10 {
		t.Errorf("only %d of %d parameters within 1e-5 of the CPU step's", close, len(p))
	}
}

func sameBits(a, b []float32) (int, bool) {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, len(a) == len(b)
}

// TestFrozenModelHoldsWeightsOnly: a reference uploaded with Eval holds
// no gradients, and with bf16 its projections and head in bfloat16 alone
// (2 bytes a parameter; the embedding, norms and biases stay float32).
// Its log-probabilities are those of the training model in the same
// precision, bit for bit (the same operands reach the same kernels). For
// the tiny Qwen2 and Qwen3 configurations (q_norm and k_norm are float32
// tensors of a bf16 frozen model, as the other norms).
func TestFrozenModelHoldsWeightsOnly(t *testing.T) {
	dv := ownGPU(t)
	for _, name := range []string{"tiny_qwen2", "tiny_qwen3"} {
		t.Run(name, func(t *testing.T) { frozenModelHoldsWeightsOnly(t, dv, fixtureModel(t, name, 9)) })
	}
}

func frozenModelHoldsWeightsOnly(t *testing.T, dv *Device, m *model.Model) {
	cfg := m.Config()
	r := rand.New(rand.NewPCG(65, 66))
	b := model.Batch{Tokens: make([]int32, 50), SeqLens: []int{20, 30}}
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(cfg.VocabSize))
	}
	sp := m.Spans()
	f32 := sp.Emb.Len + sp.Norm.Len
	for _, ls := range sp.Layers {
		f32 += ls.InNorm.Len + ls.PostNorm.Len + ls.QKVBias.Len + ls.OBias.Len + ls.QKNorm.Len
	}
	cos, sin := model.RopeTableOf(cfg, cfg.MaxPositionEmbeddings)
	rope := uint64(4 * (len(cos) + len(sin)))
	P := len(m.ParamData())
	for _, prec := range []string{backend.FP32, backend.BF16} {
		t.Run(prec, func(t *testing.T) {
			must(t, dv.ReleaseScratch())
			live0, _ := dv.MemStats()
			ev, err := cudaDevice{dv}.Eval(m, prec)
			must(t, err)
			defer ev.Close()
			live1, _ := dv.MemStats()
			want := uint64(4*P) + rope
			if prec == backend.BF16 {
				// Every tensor but the float32 ones in bfloat16; tied
				// embeddings are the head's bfloat16 copy as well.
				want = uint64(4*f32+2*(P-f32+sp.Head.Len)) + rope
				if sp.Head != sp.Emb {
					want -= uint64(2 * sp.Head.Len)
				}
			}
			if got := live1 - live0; got != want {
				t.Errorf("the frozen model holds %d bytes of device memory, want %d (weights only)", got, want)
			}
			got, err := ev.Run(b, nil)
			must(t, err)
			tr, err := cudaDevice{dv}.Train(m, prec)
			must(t, err)
			defer tr.Close()
			wantLP, err := tr.Run(b, nil)
			must(t, err)
			if i, ok := sameBits(got, wantLP); !ok {
				t.Errorf("log-prob %d: frozen %v, training model %v", i, got[i], wantLP[i])
			}
			if _, err := ev.Run(b, func(lp, _ []float32) ([]float32, error) { return lp, nil }); err == nil {
				t.Error("a frozen model ran a backward pass")
			}
		})
	}
}

// TestGPUCheckpointingGradientsBitIdentical: the device's layers go
// through learner/model's checkpointed sequence too; its kernels (and the
// stand-in's GEMMs) are deterministic, so the gradients with and without
// checkpointing are the same bits, in float32 and with bf16 GEMMs, for the
// tiny Qwen2 and Qwen3 configurations (with checkpointing the q/k norm
// keeps one layer's input, recomputed before its backward pass), and so
// are they with the layers' inputs stored in host memory (SetInputStore).
func TestGPUCheckpointingGradientsBitIdentical(t *testing.T) {
	dv := gpu(t, true)
	t.Run("tiny_qwen2", func(t *testing.T) { checkpointingGradientsBitIdentical(t, dv, tinyModel(t, 13)) })
	t.Run("tiny_qwen3", func(t *testing.T) { checkpointingGradientsBitIdentical(t, dv, qwen3Model(t, 13)) })
}

func checkpointingGradientsBitIdentical(t *testing.T, dv *Device, m *model.Model) {
	r := rand.New(rand.NewPCG(67, 68))
	b := model.Batch{Tokens: make([]int32, 45), SeqLens: []int{12, 33}}
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(m.Config().VocabSize))
	}
	lossFn := func(lp, _ []float32) ([]float32, error) {
		out := make([]float32, len(lp))
		for i := range out {
			out[i] = float32(i%5) - 2
		}
		return out, nil
	}
	for _, bf16 := range []bool{false, true} {
		var grads [3][]float32
		for k, ckpt := range []bool{false, true, true} {
			g, err := dv.NewModel(m)
			must(t, err)
			if bf16 {
				must(t, g.UseBF16())
			}
			g.SetCheckpointing(ckpt)
			g.SetInputStore(k == 2)
			if _, _, err := g.ForwardBackward(b, lossFn); err != nil {
				t.Fatal(err)
			}
			grads[k] = make([]float32, len(m.ParamData()))
			must(t, g.Grads(grads[k]))
			must(t, g.Free())
		}
		if i, ok := sameBits(grads[0], grads[1]); !ok {
			t.Errorf("bf16 %v: gradient %d is %v without checkpointing, %v with", bf16, i, grads[0][i], grads[1][i])
		}
		if i, ok := sameBits(grads[0], grads[2]); !ok {
			t.Errorf("bf16 %v: gradient %d is %v without checkpointing, %v with the layers' inputs stored in host memory", bf16, i, grads[0][i], grads[2][i])
		}
		if maxAbs(grads[0]) == 0 {
			t.Error("zero gradients: the comparison shows nothing")
		}
	}
}
