package cuda

import (
	"fmt"
	"io"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// Name is the name this package registers its backend under
// (learner.backend: cuda, aipo serve --device cuda).
const Name = "cuda"

// The cuda backend opens GPU 0; a binary links it in by importing this
// package (cmd/aipo does, with a blank import).
func init() { backend.Register(Name, cudaBackend{}) }

type cudaBackend struct{}

// Available loads the driver and asks it for a device: without one the
// error names every library path tried and the variable to set.
func (cudaBackend) Available() error {
	_, err := gpuCount()
	return err
}

// gpuCount is the GPUs the driver sees; without a driver, or with one
// that sees none, the error says what to install or check.
func gpuCount() (int, error) {
	info, err := Driver()
	if err != nil {
		return 0, err
	}
	if info.Devices == 0 {
		return 0, fmt.Errorf("cuda: the driver %s sees no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)", info.Path)
	}
	return info.Devices, nil
}

// Devices probes every GPU the driver sees, in ordinal order (Probe: a
// context opened and closed on each, nothing allocated); a GPU that does
// not open stops the list with its error (a compute capability below
// 8.0 among them).
func (cudaBackend) Devices() ([]backend.DeviceInfo, error) {
	n, err := gpuCount()
	if err != nil {
		return nil, err
	}
	var out []backend.DeviceInfo
	for i := range n {
		info, err := Probe(i)
		if err != nil {
			return out, err
		}
		out = append(out, info.backendInfo())
	}
	return out, nil
}

// DecoderMemory: the decoder uploads the model's float32 parameters
// without gradients and its rotary table (WeightBytes of a frozen float32
// model), with bf16 those of a frozen bfloat16 one (NewDecoderBF16); it
// keeps nothing on the host.
func (cudaBackend) DecoderMemory(c model.Config, bf16 bool) (host, device int64) {
	w, comp, _, _ := WeightBytes(c, true, bf16)
	return 0, w + comp
}

func (cudaBackend) Precisions() []string { return []string{backend.FP32, backend.BF16} }

// OffloadsInputs: the passes keep activation checkpointing's layer inputs
// in host memory on request (Model.SetInputStore).
func (cudaBackend) OffloadsInputs() bool { return true }

// LoRAPrecisions: NewLoRA holds the frozen base in float32, or with bf16
// its projections and head in bfloat16 (NewFrozen's upload).
func (cudaBackend) LoRAPrecisions() []string { return []string{backend.FP32, backend.BF16} }

// StepMemory: the device holds the policy's float32 masters, gradients and
// AdamW moments (16 bytes a parameter), with bf16 its bfloat16 copy (2),
// the reference's weights alone (NewFrozen: 4 bytes a parameter, about 2
// with bf16), and one micro-batch's pass (PassBytes). The host keeps the
// policy's float32 weights, from which checkpoints are written; the
// reference's host copy is dropped once uploaded. With the layers' inputs
// stored in host memory (Pass.StoreInputs) the host holds them
// (StoredInputBytes) as its Activations.
func (cudaBackend) StepMemory(w backend.Workload) (host, device backend.Memory) {
	bf16 := w.Precision == backend.BF16
	if w.LoRA != nil {
		return loraStepMemory(w, bf16)
	}
	wt, comp, gr, opt := WeightBytes(w.Model, false, bf16)
	device = backend.Memory{Weights: wt, Compute: comp, Grads: gr, Optimizer: opt, Activations: PassBytes(w.Model, w.Pass, bf16)}
	if w.Reference {
		rw, rc, _, _ := WeightBytes(w.Model, true, bf16)
		device.Reference = rw + rc
	}
	return backend.Memory{Weights: 4 * model.ParamCount(w.Model), Activations: StoredInputBytes(w.Model, w.Pass)}, device
}

func (b cudaBackend) Open() (backend.Device, error) { return b.OpenDevice(0) }

// OpenDevice opens GPU ordinal (the driver's numbering, which
// CUDA_VISIBLE_DEVICES narrows) as a backend.Device.
func (cudaBackend) OpenDevice(ordinal int) (backend.Device, error) {
	dv, err := Open(ordinal)
	if err != nil {
		return nil, err
	}
	return cudaDevice{dv}, nil
}

type cudaDevice struct{ dv *Device }

func (d cudaDevice) Close() error { return d.dv.Close() }

// Train uploads a float32 copy of m with its gradients; with
// backend.BF16 the GEMMs take bfloat16 operands (Model.UseBF16). A model
// with a LoRA adapter attached trains the adapter alone on its frozen
// base (NewLoRA: with backend.BF16 the base held in bfloat16).
func (d cudaDevice) Train(m *model.Model, precision string) (backend.Compute, error) {
	if precision != "" && precision != backend.FP32 && precision != backend.BF16 {
		return nil, fmt.Errorf("cuda: precision %q is unknown: use %s or %s", precision, backend.FP32, backend.BF16)
	}
	if m.HasAdapter() {
		g, err := d.dv.NewLoRA(m, precision == backend.BF16)
		if err != nil {
			return nil, err
		}
		return &compute{host: m, dev: g}, nil
	}
	g, err := d.dv.NewModel(m)
	if err != nil {
		return nil, err
	}
	if precision == backend.BF16 {
		if err := g.UseBF16(); err != nil {
			g.Free()
			return nil, err
		}
	}
	return &compute{host: m, dev: g}, nil
}

var _ backend.ShardedOpener = cudaDevice{}

// TrainSharded implements backend.ShardedOpener: the passes of m with
// nothing of its weights or gradients on the device until ShardedGroup
// places the rank's share (newUnplaced). For a model with a LoRA adapter
// attached the adapter and its gradients are uploaded and nothing of the
// frozen base until ShardBase places the rank's share of it from m
// (newLoRAUnplaced). With backend.BF16 the passes multiply in bfloat16
// as Train's do (UseBF16: the projections and the head in bfloat16, the
// rest in float32), from the units their group gathers in those forms
// (zero3.go's bfloat16 passes); the shares the ranks keep of the policy
// and its gradients stay float32, a frozen base's are held as the passes
// read them.
func (d cudaDevice) TrainSharded(m *model.Model, precision string) (backend.Compute, error) {
	bf16, err := shardedPrecision(precision)
	if err != nil {
		return nil, err
	}
	if m.HasAdapter() {
		g, err := d.dv.newLoRAUnplaced(m)
		if err != nil {
			return nil, err
		}
		g.use16 = bf16
		return &compute{host: m, dev: g}, nil
	}
	g, err := d.dv.newUnplaced(m, false)
	if err != nil {
		return nil, err
	}
	g.use16 = bf16
	return &compute{host: m, dev: g}, nil
}

// EvalSharded implements backend.ShardedOpener: the passes of the frozen
// model m with nothing of its weights on the device until ShardFrozen
// places the rank's share, read from m (newUnplaced); with backend.BF16
// they multiply in bfloat16 as Eval's do, and the share is held as they
// read it (zero3.go's frozenHalf).
func (d cudaDevice) EvalSharded(m *model.Model, precision string) (backend.Compute, error) {
	bf16, err := shardedPrecision(precision)
	if err != nil {
		return nil, err
	}
	g, err := d.dv.newUnplaced(m, true)
	if err != nil {
		return nil, err
	}
	g.use16 = bf16
	return frozen{g}, nil
}

// shardedPrecision reports whether the passes ZeRO stage 3 opens multiply
// in bfloat16, refusing a precision they do not run in.
func shardedPrecision(precision string) (bool, error) {
	switch precision {
	case "", backend.FP32:
		return false, nil
	case backend.BF16:
		return true, nil
	}
	return false, fmt.Errorf("cuda: precision %q is unknown: use %s or %s", precision, backend.FP32, backend.BF16)
}

// Eval uploads m's weights alone (NewFrozen): with backend.BF16 the
// projections and head in bfloat16 only.
func (d cudaDevice) Eval(m *model.Model, precision string) (backend.Compute, error) {
	if precision != "" && precision != backend.FP32 && precision != backend.BF16 {
		return nil, fmt.Errorf("cuda: precision %q is unknown: use %s or %s", precision, backend.FP32, backend.BF16)
	}
	g, err := d.dv.NewFrozen(m, precision == backend.BF16)
	if err != nil {
		return nil, err
	}
	return frozen{g}, nil
}

// frozen runs the forward passes of a model that is not trained.
type frozen struct{ dev *Model }

var errFrozen = fmt.Errorf("cuda: the model was uploaded for evaluation only (a frozen reference): it has no gradients and no optimiser")

func (f frozen) Run(b model.Batch, loss backend.LossGrad) ([]float32, error) {
	if loss != nil {
		return nil, errFrozen
	}
	lp, _, err := f.dev.ForwardBackward(b, nil)
	return lp, err
}

func (f frozen) ZeroGrads() error                             { return errFrozen }
func (f frozen) Step(*optim.AdamW) (float64, error)           { return 0, errFrozen }
func (f frozen) ReadOptimizer(*optim.AdamW, io.Reader) error  { return errFrozen }
func (f frozen) WriteOptimizer(*optim.AdamW, io.Writer) error { return errFrozen }
func (f frozen) SyncParams() error                            { return errFrozen }
func (f frozen) SetCheckpointing(bool)                        {}
func (f frozen) Close() error                                 { return f.dev.Free() }

func (d cudaDevice) Decoder(m *model.Model) (backend.Decoder, error) {
	return d.dv.NewDecoder(m)
}

// DecoderBF16 implements backend.BF16Decoders (NewDecoderBF16).
func (d cudaDevice) DecoderBF16(m *model.Model) (backend.Decoder, error) {
	return d.dv.NewDecoderBF16(m)
}

var (
	_ backend.HostReduced    = (*compute)(nil)
	_ backend.DeviceOpener   = cudaBackend{}
	_ backend.AdapterTrainer = (*compute)(nil)
)

// compute runs the trainer's passes on the device copy of host.
type compute struct {
	host *model.Model
	dev  *Model
}

func (c *compute) Run(b model.Batch, loss backend.LossGrad) ([]float32, error) {
	lp, _, err := c.dev.ForwardBackward(b, loss)
	return lp, err
}

func (c *compute) ZeroGrads() error         { return c.dev.ZeroGrads() }
func (c *compute) SyncParams() error        { return c.dev.Params(c.hostParams()) }
func (c *compute) SetCheckpointing(on bool) { c.dev.SetCheckpointing(on) }
func (c *compute) SetInputStore(on bool)    { c.dev.SetInputStore(on) }
func (c *compute) Close() error             { return c.dev.Free() }

// hostParams is the host's buffer of what the device trains: the
// adapter's matrices of a LoRA model, else the model's parameters.
func (c *compute) hostParams() []float32 {
	if c.host.HasAdapter() {
		return c.host.AdapterParamData()
	}
	return c.host.ParamData()
}

// TrainsAdapter reports whether the passes train the host model's LoRA
// adapter (backend.AdapterTrainer).
func (c *compute) TrainsAdapter() bool { return c.dev.HasAdapter() }

// GradsTo brings the device's gradients to the host (backend.HostReduced).
func (c *compute) GradsTo(dst []float32) error { return c.dev.Grads(dst) }

// LoadParams uploads parameters updated on the host, and refreshes their
// bfloat16 copy (backend.HostReduced).
func (c *compute) LoadParams(src []float32) error { return c.dev.SetParams(src) }

// Step is the device's AdamW (Model.Step): the parameters, gradients and
// moments stay on the device.
func (c *compute) Step(opt *optim.AdamW) (float64, error) { return c.dev.Step(opt) }

func (c *compute) ReadOptimizer(opt *optim.AdamW, r io.Reader) error {
	return c.dev.ReadOptimizer(c.host, opt, r)
}

func (c *compute) WriteOptimizer(opt *optim.AdamW, w io.Writer) error {
	return c.dev.WriteOptimizer(c.host, opt, w)
}
