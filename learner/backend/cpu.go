package backend

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// The CPU backend is learner/model itself: it is always available, and its
// passes are the host model's own.
func init() { Register(CPUName, cpuBackend{}) }

type cpuBackend struct{}

func (cpuBackend) Available() error      { return nil }
func (cpuBackend) Precisions() []string  { return []string{FP32, BF16} }
func (cpuBackend) Open() (Device, error) { return cpuDevice{}, nil }

// LoRAPrecisions: the CPU holds a LoRA run's frozen base in float32 (a
// model with an adapter cannot be held in bfloat16: model.AttachAdapter).
func (cpuBackend) LoRAPrecisions() []string { return []string{FP32} }

// StepMemory: on the CPU everything is host memory, float32: the policy's
// weights and gradients (4 bytes a parameter each), AdamW's moments (8),
// the reference's weights (4, no gradients; 2 when they are bfloat16
// values or the products are, held in bfloat16 by Eval), and one micro-batch's passes
// (model.PassBytes). The old and reference log-probabilities are scored
// without keeping activations, below the training pass's peak. With BF16
// the passes keep no bfloat16 copy of the weights (Compute stays 0): each
// product rounds its operands into buffers of the pass as it reads them,
// which PassBytes counts.
func (cpuBackend) StepMemory(w Workload) (host, device Memory) {
	P := model.ParamCount(w.Model)
	pass := w.Pass
	pass.BF16 = w.Precision == BF16
	host = Memory{Weights: 4 * P, Grads: 4 * P, Optimizer: 8 * P, Activations: model.PassBytes(w.Model, pass)}
	switch {
	case w.Reference && (w.Precision == BF16 || w.ReferenceBF16 && model.HoldsBF16Exactly()):
		host.Reference = 2 * P
	case w.Reference:
		host.Reference = 4 * P
	}
	return host, Memory{}
}

// DecoderMemory: the CPU's decoder is the host model itself, its float32
// parameters, or in bfloat16 what DecodeBF16Only keeps of them.
func (cpuBackend) DecoderMemory(c model.Config, bf16 bool) (host, device int64) {
	if bf16 {
		return model.DecodeBF16OnlyBytes(c), 0
	}
	return 4 * model.ParamCount(c), 0
}

// Devices is this machine, its memory MemTotal and MemAvailable of
// /proc/meminfo. The error is meminfo's, which names the file.
func (cpuBackend) Devices() ([]DeviceInfo, error) {
	total, avail, err := meminfo.Read()
	if err != nil {
		return nil, err
	}
	return []DeviceInfo{{Backend: CPUName, ID: "0", Kind: KindCPU,
		Name:       fmt.Sprintf("host (%s/%s, %d CPUs)", runtime.GOOS, runtime.GOARCH, runtime.NumCPU()),
		TotalBytes: total, FreeBytes: avail, MemorySource: meminfo.Source}}, nil
}

type cpuDevice struct{}

func (cpuDevice) Close() error { return nil }

// Train is the host model's own passes, its products in bfloat16 with
// BF16 (model.SetComputeBF16: bfloat16 operands, float32 accumulation;
// the weights, gradients and optimiser stay float32), else in float32.
func (cpuDevice) Train(m *model.Model, precision string) (Compute, error) {
	switch precision {
	case "", FP32:
		m.SetComputeBF16(false)
	case BF16:
		m.SetComputeBF16(true)
	default:
		return nil, fmt.Errorf("backend cpu: precision %s is unknown here: the CPU multiplies in %s or %s", precision, FP32, BF16)
	}
	return CPUCompute(m), nil
}

// Eval is the passes of a model that is only scored (the frozen
// reference): m itself, its weight matrices held in bfloat16 when they
// are all bfloat16 values (model.HoldBF16: half the memory, the same
// log-probabilities bit for bit), and with BF16 whatever their values,
// rounded as its bfloat16 products round them (model.HoldBF16Rounded).
// The float32 copy it drops is handed back to the system at once, before
// the step's gradients and optimiser state are allocated, so that the
// two never sit in memory together.
func (d cpuDevice) Eval(m *model.Model, precision string) (Compute, error) {
	c, err := d.Train(m, precision)
	if err != nil {
		return nil, err
	}
	if m.HeldInBF16() {
		return c, nil
	}
	// With bfloat16 products the matrices are rounded as every product
	// reads them: held rounded, they score alike (the embedding's rows
	// rounded too: model.HoldBF16Rounded).
	if precision == BF16 && m.HoldBF16Rounded() || m.HoldBF16() {
		debug.FreeOSMemory()
	}
	return c, nil
}

func (cpuDevice) Decoder(m *model.Model) (Decoder, error) {
	if m == nil {
		return nil, fmt.Errorf("backend cpu: Decoder without a model")
	}
	return CPUDecoder(m), nil
}

// CPUCompute is the Compute of the host model itself.
func CPUCompute(m *model.Model) Compute { return cpuCompute{m} }

type cpuCompute struct{ m *model.Model }

// OnHost reports whether c runs its passes on the host model itself
// (CPUCompute), whose parameters and gradients are then the host's.
func OnHost(c Compute) bool {
	_, ok := c.(cpuCompute)
	return ok
}

func (c cpuCompute) Run(b model.Batch, loss LossGrad) ([]float32, error) {
	if loss == nil {
		lp, _, err := c.m.Score(b)
		return lp, err
	}
	a, err := c.m.Forward(b)
	if err != nil {
		return nil, err
	}
	grad, err := loss(a.LogProbs, a.Entropy)
	if err != nil {
		a.Release()
		return nil, err
	}
	return a.LogProbs, c.m.Backward(a, grad)
}

func (c cpuCompute) ZeroGrads() error         { c.m.ZeroGrads(); return nil }
func (c cpuCompute) SyncParams() error        { return nil }
func (c cpuCompute) SetCheckpointing(on bool) { c.m.SetCheckpointing(on) }
func (c cpuCompute) Close() error             { return nil }

// Step is optim.AdamW.Step on the host model's parameters and gradients.
func (c cpuCompute) Step(opt *optim.AdamW) (float64, error) {
	ps := OptimParams(c.m)
	if err := opt.Check(ps); err != nil {
		return 0, err
	}
	return opt.Step(ps), nil
}

func (c cpuCompute) ReadOptimizer(opt *optim.AdamW, r io.Reader) error {
	_, err := opt.ReadFrom(r)
	return err
}

func (c cpuCompute) WriteOptimizer(opt *optim.AdamW, w io.Writer) error {
	_, err := opt.WriteTo(w)
	return err
}

// OptimParams are m's parameters with their gradients in the optimiser's
// form (the gradients allocated if they were not): those of its LoRA
// adapter, under PEFT's key names, when it has one (its base is frozen).
func OptimParams(m *model.Model) []optim.Param {
	ps, gs := m.Params, m.Grads
	if m.HasAdapter() {
		ps, gs = m.AdapterParams, m.AdapterGrads
	}
	return optimParams(ps(), gs())
}

func optimParams(ps, gs []model.NamedTensor) []optim.Param {
	out := make([]optim.Param, len(ps))
	for i := range ps {
		out[i] = optim.Param{Name: ps[i].Name, Data: ps[i].Data, Grad: gs[i].Data}
	}
	return out
}

// CPUDecoder is the Decoder of m itself.
func CPUDecoder(m *model.Model) Decoder { return cpuDecoder{m} }

type cpuDecoder struct{ m *model.Model }

func (d cpuDecoder) Config() model.Config { return d.m.Config() }
func (d cpuDecoder) BytesPerToken() int   { return d.m.BytesPerToken() }
func (d cpuDecoder) NewCache() Cache      { return d.m.NewKVCache() }
func (d cpuDecoder) Close() error         { return nil }

// HostModel is the model the decoder runs: the host's own, whose decoding
// settings (model.SetBatchInvariantDecode) apply.
func (d cpuDecoder) HostModel() *model.Model { return d.m }

func (d cpuDecoder) Extend(caches []Cache, tokens [][]int32, dst []float32) ([]float32, error) {
	kc := make([]*model.KVCache, len(caches))
	for i, c := range caches {
		k, ok := c.(*model.KVCache)
		if !ok {
			return nil, fmt.Errorf("backend cpu: cache %d (%T) was not made by this decoder", i, c)
		}
		kc[i] = k
	}
	return d.m.Extend(kc, tokens, dst)
}
