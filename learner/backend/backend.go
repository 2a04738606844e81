// Package backend is the registry of aipo's compute backends: where a
// model's training passes and its decoding for learner/engine run. A
// backend's package registers it under a name in an init function; "cpu"
// (learner/model itself, the reference every other backend is checked
// against) is registered here, "cuda" by learner/cuda, which a binary links
// in with a blank import. Callers pick a backend with one Lookup of the
// name in their configuration (learner.backend, aipo serve --device) and
// never compare names.
//
// Backends also say what devices they run on and how much memory those
// have (Devices), so that planners (aipo plan) ask the registry and link
// no backend themselves: only the main package imports learner/cuda.
//
// The package is a leaf: it imports learner/model, learner/optim and
// internal/meminfo and nothing of learner/engine, learner/trainer or any
// backend, so that those import it and not each other.
package backend

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// The GEMM operand precisions a backend may multiply in (runconfig's
// learner.precision).
const (
	FP32 = "fp32"
	BF16 = "bf16"
)

// CPUName is the name of the CPU backend, the default.
const CPUName = "cpu"

// Backend is a compute backend.
type Backend interface {
	// Available is nil when the backend can run on this machine, else an
	// error saying why not and what to install or set (cuda: the driver
	// library paths that were tried).
	Available() error
	// Precisions lists the GEMM operand precisions the backend multiplies
	// in, FP32 first.
	Precisions() []string
	// Open acquires the backend's device (cuda: GPU 0). What is opened on
	// it is closed before the Device.
	Open() (Device, error)
	// StepMemory is the memory a learner step of w holds at its peak, on
	// the host and on the device (zero for the CPU), computed from the
	// configuration alone as the backend allocates it.
	StepMemory(w Workload) (host, device Memory)
	// DecoderMemory is what the Decoder of a model of configuration c
	// holds for its parameters, on the host and on the device (its caches
	// are counted by Decoder.BytesPerToken), decoding in float32 or, with
	// bf16, in bfloat16 (the CPU's model.DecodeBF16Only, a device's
	// BF16Decoders).
	DecoderMemory(c model.Config, bf16 bool) (host, device int64)
	// Devices lists the devices the backend runs on as they are now, in
	// the order it numbers them (Open takes the first): the CPU's is this
	// machine, cuda's every GPU the driver sees. When none can be read the
	// error says why and what to install or set; when a later one cannot,
	// the ones before it come with its error.
	Devices() ([]DeviceInfo, error)
}

// The kinds of device a DeviceInfo describes.
const (
	KindCPU = "cpu"
	KindGPU = "gpu"
)

// DeviceInfo describes one device of a backend and its memory, as the
// backend reads them.
type DeviceInfo struct {
	Backend string // the backend's name
	ID      string // the device's id within the backend (cuda: the ordinal)
	Name    string // as the driver or the system names it
	Kind    string // KindCPU or KindGPU
	// TotalBytes is the device's memory; FreeBytes what is free (the
	// CPU: available) now.
	TotalBytes, FreeBytes int64
	// MemorySource is where the two were read (/proc/meminfo,
	// cuMemGetInfo).
	MemorySource string
	// ComputeMajor and ComputeMinor are a GPU's compute capability; zero
	// for the CPU.
	ComputeMajor, ComputeMinor int
}

// DevicesOf is the devices of the backend called name (Backend.Devices).
func DevicesOf(name string) ([]DeviceInfo, error) {
	b, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return b.Devices()
}

// Workload is what the memory of a learner step depends on.
type Workload struct {
	Model model.Config
	// Precision is the GEMM operand precision (FP32 when empty).
	Precision string
	// Pass is one micro-batch's shape (model.Packed: tokens, sequences,
	// rows with a target, activation checkpointing); the step's largest.
	Pass model.PassShape
	// Reference is a frozen reference model held beside the policy (the
	// loss has a KL term).
	Reference bool
	// ReferenceBF16 says the reference's weights are bfloat16 values (its
	// checkpoint is bfloat16, as a run seeded from a bfloat16 Hugging Face
	// model is): the CPU then holds its matrices in bfloat16
	// (model.HoldBF16).
	ReferenceBF16 bool
	// LoRA is the LoRA adapter trained on the frozen model, nil when the
	// whole model trains. A backend that plans LoRA steps (LoRABackend)
	// counts the frozen base as it holds it, the adapter and its
	// gradients and moments (Memory.Adapter, Grads, Optimizer) and its
	// products in a pass; others leave it to the caller.
	LoRA *LoRAWork
}

// LoRAWork is what the memory of a LoRA step depends on beyond the model.
type LoRAWork struct {
	Rank int
	// Trainable is the adapter's parameter count (model.AdapterParamCount),
	// MaxIn its widest module input.
	Trainable int64
	MaxIn     int
	// Dropout: the adapter's dropout is on (a pass holds its masked
	// input).
	Dropout bool
}

// Memory is the bytes a learner step holds in one place, by part.
// InputOffloader is a Backend whose training passes can keep activation
// checkpointing's layer inputs in host memory rather than on the device
// (learner.activation_checkpointing: offload): its Computes implement
// InputStorer, and its StepMemory counts the host memory they take for a
// Workload whose Pass stores them (model.PassShape.StoreInputs) as the
// host's Activations.
type InputOffloader interface {
	OffloadsInputs() bool
}

// OffloadsInputs reports whether b is an InputOffloader that offloads.
func OffloadsInputs(b Backend) bool {
	o, ok := b.(InputOffloader)
	return ok && o.OffloadsInputs()
}

// InputStorer is a Compute whose checkpointed passes can keep each layer's
// input in host memory (model.InputStore), for the same gradients.
type InputStorer interface {
	SetInputStore(on bool)
}

type Memory struct {
	Weights     int64 // the policy's float32 parameters (masters)
	Compute     int64 // their copy in the compute dtype (bfloat16)
	Grads       int64 // the policy's gradients
	Optimizer   int64 // AdamW's two moments
	Reference   int64 // the reference model's weights (no gradients)
	Activations int64 // one micro-batch's passes at their peak: activations, LM head, backward scratch
	// Adapter is a LoRA step's adapter matrices (float32); Weights and
	// Compute are then its frozen base's, Grads and Optimizer the
	// adapter's.
	Adapter int64
}

// Total is the sum of the parts.
func (m Memory) Total() int64 {
	return m.Weights + m.Compute + m.Grads + m.Optimizer + m.Reference + m.Activations + m.Adapter
}

// Device is an opened backend.
type Device interface {
	// Train returns the training passes of m on the device, multiplying in
	// precision (one of the backend's Precisions; "" is FP32). m stays the
	// model the optimiser updates.
	Train(m *model.Model, precision string) (Compute, error)
	// Eval returns forward passes of m that are never differentiated (a
	// frozen reference model): m's weights alone, no gradients, held in
	// the dtype the precision computes in where the device keeps its own
	// copy (cuda: bfloat16 projections with BF16), so that the caller may
	// drop m; on the CPU the passes are m's own. Only Run (without a
	// loss) and Close apply.
	Eval(m *model.Model, precision string) (Compute, error)
	// Decoder returns m's decoding passes for learner/engine over a copy
	// of its parameters as they are now.
	Decoder(m *model.Model) (Decoder, error)
	// Close releases the device.
	Close() error
}

// BF16Decoders is a Device whose decoders can also hold the weights and
// the attention caches in bfloat16 (cuda). The CPU's bfloat16 decoding is
// the host model's own (model.DecodeBF16), not a Device's.
type BF16Decoders interface {
	// DecoderBF16 is Decoder with the projections and the LM head held
	// and multiplied in bfloat16 (float32 accumulation) and the caches'
	// keys and values in bfloat16.
	DecoderBF16(m *model.Model) (Decoder, error)
}

// LossGrad turns the per-token log-probabilities and entropies of a
// forward pass into d loss / d log-prob per token.
type LossGrad = func(logProbs, entropy []float32) ([]float32, error)

// Compute is a model's forward and backward passes for the trainer, and
// its optimiser step where the passes run: on the CPU the host model's
// own; on a device the parameters (float32 masters), gradients and AdamW
// moments stay in device memory, and a step moves nothing to the host
// but its metrics. Checkpoints are written from the host model after
// SyncParams.
type Compute interface {
	// Run does a forward pass over b and returns the per-token
	// log-probabilities (0 where there is no target). When loss is not nil
	// it gets them and the entropies, and the backward pass of its result
	// adds to the gradients; when it is nil the pass keeps nothing for a
	// backward pass.
	Run(b model.Batch, loss LossGrad) ([]float32, error)
	// ZeroGrads clears the gradients.
	ZeroGrads() error
	// Step applies opt's next AdamW update (its configuration and step
	// count; learner/optim's arithmetic) to the parameters the passes run
	// with, from the gradients accumulated since ZeroGrads, clipped to
	// opt's GradClip, and returns their global L2 norm before clipping.
	// When the norm is not finite nothing is updated and opt's step count
	// stays (as optim.AdamW.Step).
	Step(opt *optim.AdamW) (gradNorm float64, err error)
	// ReadOptimizer replaces opt's state by the one streamed from r
	// (learner/optim's format), its moments put where Step reads them.
	ReadOptimizer(opt *optim.AdamW, r io.Reader) error
	// WriteOptimizer streams opt's state, with the moments from where Step
	// keeps them, to w (learner/optim's format).
	WriteOptimizer(opt *optim.AdamW, w io.Writer) error
	// SyncParams makes the host model's parameters those the passes run
	// with; the trainer calls it before a checkpoint is written from them.
	SyncParams() error
	// SetCheckpointing turns activation checkpointing (see
	// model.Model.SetCheckpointing) on or off for the passes that follow.
	SetCheckpointing(on bool)
	// Close frees what the passes hold on the device.
	Close() error
}

// HostReduced is a device's Compute whose gradients a data-parallel group
// reduces on the host, where the rank's share of the optimiser state is
// kept and stepped (the split of ZeRO-Offload): a rank brings each
// virtual shard's gradients to the host, the group reduces them over its
// engine (Gloo) and updates its share there, and the gathered parameters
// go back to the device.
type HostReduced interface {
	Compute
	// GradsTo copies the gradients accumulated since ZeroGrads into dst,
	// laid out as the host model's GradData.
	GradsTo(dst []float32) error
	// LoadParams makes the passes run with src, laid out as the host
	// model's ParamData (and their bfloat16 copy, when they keep one).
	LoadParams(src []float32) error
}

// AdapterTrainer is a device's Compute that can train a LoRA adapter: when
// TrainsAdapter, the passes train the host model's attached adapter alone
// on its frozen base (its gradients, parameters and optimiser state those
// of the adapter's flat buffers, model.AdapterGradData and
// AdapterParamData, where HostReduced moves them), and follow the host
// model's adapter switch (SetAdapterOn: off for the KL term's reference
// passes) and dropout step (SetAdapterStep) as the CPU's passes do.
type AdapterTrainer interface {
	Compute
	TrainsAdapter() bool
}

// LoRABackend is a Backend that trains LoRA adapters (its Device.Train of
// a model with an adapter attached trains the adapter alone: the host
// model's own passes, or an AdapterTrainer). LoRAPrecisions lists the
// precisions it trains them in, each holding the frozen base in its
// compute dtype (cuda: with BF16 the base's projections and head in
// bfloat16); the CPU holds the base in float32 and lists FP32 alone.
type LoRABackend interface {
	LoRAPrecisions() []string
}

// CheckLoRA is nil when the backend called name trains LoRA adapters in
// precision; else the error says which backends do, and in what.
func CheckLoRA(name, precision string) error {
	b, err := Lookup(name)
	if err != nil {
		return err
	}
	if precision == "" {
		precision = FP32
	}
	var with []string
	for _, n := range Names() {
		o, _ := Lookup(n)
		if lb, ok := o.(LoRABackend); ok && slices.Contains(lb.LoRAPrecisions(), precision) {
			with = append(with, n)
		}
	}
	lb, ok := b.(LoRABackend)
	switch {
	case ok && slices.Contains(lb.LoRAPrecisions(), precision):
		return nil
	case ok && precision == BF16:
		fix := "no backend linked in holds it so"
		if len(with) > 0 {
			fix = "or a backend that holds the base in bfloat16: " + strings.Join(with, " or ")
		}
		return fmt.Errorf("the %s backend holds a LoRA run's frozen base in float32 and cannot hold it in bfloat16 (precision %s); use precision %s (%s)", name, precision, strings.Join(lb.LoRAPrecisions(), ", "), fix)
	case ok:
		return fmt.Errorf("the %s backend trains LoRA adapters in %s, not %s", name, strings.Join(lb.LoRAPrecisions(), ", "), precision)
	case len(with) == 0:
		return fmt.Errorf("no backend linked in trains LoRA adapters")
	}
	return fmt.Errorf("the %s backend's passes have no LoRA adapters: use %s", name, strings.Join(with, " or "))
}

// TrainsAdapter reports whether c trains the LoRA adapter of the model it
// was opened on: the host model's own passes when it has one, or a
// device's AdapterTrainer.
func TrainsAdapter(c Compute, m *model.Model) bool {
	if !m.HasAdapter() {
		return false
	}
	if OnHost(c) {
		return true
	}
	a, ok := c.(AdapterTrainer)
	return ok && a.TrainsAdapter()
}

// DeviceOpener is a Backend with several devices: OpenDevice acquires the
// one numbered ordinal in Devices' order (Open takes the first). The
// ranks of a data-parallel group on one machine open the device of their
// LOCAL_RANK.
type DeviceOpener interface {
	OpenDevice(ordinal int) (Device, error)
}

// Decoder is the model an engine samples from. Its methods are those of
// model.Model that decoding needs.
type Decoder interface {
	// Config is the model's configuration.
	Config() model.Config
	// BytesPerToken is the cache memory of one position.
	BytesPerToken() int
	// NewCache returns an empty attention cache for one sequence.
	NewCache() Cache
	// Extend feeds tokens[i] to caches[i] for every i in one batched pass
	// and returns the logits after each sequence's last new token, [B, V]
	// row-major, written into dst when it has the capacity (as
	// model.Model.Extend). On error no cache is changed.
	Extend(caches []Cache, tokens [][]int32, dst []float32) ([]float32, error)
	// Close frees the decoder's copy of the parameters now; without it they
	// go once the decoder and its caches are unreachable. It is called
	// after the engine that uses the decoder is closed.
	Close() error
}

// Cache is one sequence's attention state in a Decoder (model.KVCache on
// the CPU).
type Cache interface {
	Len() int
	Tokens() []int32
	Truncate(n int)
	Bytes() int
}

var (
	mu       sync.RWMutex
	registry = map[string]Backend{}
)

// Register makes b the backend called name. It panics when name is empty or
// taken (two packages registering one name is a build mistake).
func Register(name string, b Backend) {
	if name == "" || b == nil {
		panic("backend: Register needs a name and a backend")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("backend: %q is registered twice", name))
	}
	registry[name] = b
}

// Lookup is the backend called name; for a name nobody registered the error
// lists the names that are.
func Lookup(name string) (Backend, error) {
	mu.RLock()
	b, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("backend %q is unknown: use %s (a backend is linked into the binary by importing its package, e.g. learner/cuda)", name, strings.Join(Names(), " or "))
	}
	return b, nil
}

// Names lists the registered backends, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// CheckPrecision is nil when the backend called name multiplies in
// precision; else the error names the backends that do.
func CheckPrecision(name, precision string) error {
	b, err := Lookup(name)
	if err != nil {
		return err
	}
	if precision == "" || slices.Contains(b.Precisions(), precision) {
		return nil
	}
	var with []string
	for _, n := range Names() {
		if o, _ := Lookup(n); slices.Contains(o.Precisions(), precision) {
			with = append(with, n)
		}
	}
	if len(with) == 0 {
		return fmt.Errorf("precision %s is not multiplied in by any backend linked in (%s multiplies in %s)", precision, name, strings.Join(b.Precisions(), ", "))
	}
	return fmt.Errorf("%s needs backend %s (the %s backend multiplies in %s)", precision, strings.Join(with, " or "), name, strings.Join(b.Precisions(), ", "))
}
