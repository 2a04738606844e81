package trainer

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
)

// The memory a learner step needs, from its configuration alone: what a
// planner reports before a run starts, and what the learner itself uses
// to decide on activation checkpointing. Each backend computes its own
// figures as it allocates (backend.Backend.StepMemory; the CPU's are
// model.PassBytes and 20 bytes a parameter, held to the model's measured
// peaks by the tests).

// Activation checkpointing modes (learner.activation_checkpointing).
const (
	CheckpointingAuto = "auto" // on when a micro-batch's activations without it exceed CheckpointingThreshold
	CheckpointingOn   = "on"
	CheckpointingOff  = "off"
	// CheckpointingOffload is on, with each layer's kept input in host
	// memory rather than on the device (a backend.InputOffloader's passes:
	// cuda): the device holds two of them instead of one a layer.
	CheckpointingOffload = "offload"
)

// CheckpointingThreshold is the activation memory of one micro-batch
// (without checkpointing) above which "auto" turns checkpointing on: 1
// GiB. Below it the recompute's extra forward pass buys little; the
// demo's ~1M-parameter policy stays far below it.
const CheckpointingThreshold = 1 << 30

// MemoryConfig is what the memory of a learner step depends on.
type MemoryConfig struct {
	Model model.Config
	// Backend is the learner's backend, a registered name ("" is cpu).
	Backend string
	// Precision is the GEMM operand precision ("" is fp32).
	Precision string
	// MicroBatchTokens bounds the tokens of one forward/backward pass.
	MicroBatchTokens int
	// SequenceTokens is the longest sequence (prompt and response) a
	// micro-batch packs; 0, or more than MicroBatchTokens, plans for one
	// sequence of MicroBatchTokens, the most attention work and memory.
	SequenceTokens int
	// Checkpointing is "auto" (or ""), "on", "off" or "offload".
	Checkpointing string
	// Reference: the loss has a KL term, so the frozen reference is held.
	Reference bool
	// ReferenceBF16: the reference's weights are bfloat16 values (its
	// checkpoint's torch_dtype is bfloat16); see backend.Workload.
	ReferenceBF16 bool
	// LoRA is the adapter of a LoRA step (backend.Workload.LoRA), nil when
	// the whole model trains.
	LoRA *backend.LoRAWork
}

// StepMemory is a step's memory at its peak, by part and place.
type StepMemory struct {
	Params int64 // parameters (tied embeddings once)
	// Checkpointing is whether activation checkpointing is on (Checkpointing
	// resolved).
	Checkpointing bool
	// Host and Device are the bytes on the host and on the device (zero on
	// the CPU backend).
	Host, Device backend.Memory
	// ActivationBytesPerTokenLayer is the pass's activation memory (on the
	// device when there is one) over its tokens and layers.
	ActivationBytesPerTokenLayer float64
}

// PlanStep computes the memory of a learner step of c.
func PlanStep(c MemoryConfig) (StepMemory, error) {
	b, w, err := workload(c)
	if err != nil {
		return StepMemory{}, err
	}
	on, err := useCheckpointing(c, b, w)
	if err != nil {
		return StepMemory{}, err
	}
	w.Pass.Checkpointing = on
	w.Pass.StoreInputs = c.Checkpointing == CheckpointingOffload
	host, dev := b.StepMemory(w)
	act := host.Activations
	if dev.Total() > 0 {
		act = dev.Activations
	}
	tokens := max(c.MicroBatchTokens, 1)
	return StepMemory{
		Params:        model.ParamCount(c.Model),
		Checkpointing: on,
		Host:          host,
		Device:        dev,
		ActivationBytesPerTokenLayer: float64(act) / float64(tokens) /
			float64(max(c.Model.NumHiddenLayers, 1)),
	}, nil
}

// UseCheckpointing resolves c.Checkpointing: "on" and "off" as they say,
// "auto" (or "") on when one micro-batch's activations without
// checkpointing would exceed CheckpointingThreshold on the backend.
func UseCheckpointing(c MemoryConfig) (bool, error) {
	b, w, err := workload(c)
	if err != nil {
		return false, err
	}
	return useCheckpointing(c, b, w)
}

func workload(c MemoryConfig) (backend.Backend, backend.Workload, error) {
	if c.MicroBatchTokens <= 0 {
		return nil, backend.Workload{}, fmt.Errorf("trainer: micro_batch_tokens must be positive (got %d)", c.MicroBatchTokens)
	}
	name := c.Backend
	if name == "" {
		name = backend.CPUName
	}
	b, err := backend.Lookup(name)
	if err != nil {
		return nil, backend.Workload{}, err
	}
	if c.Checkpointing == CheckpointingOffload {
		if !backend.OffloadsInputs(b) {
			return nil, backend.Workload{}, fmt.Errorf("trainer: activation checkpointing %q keeps the layers' inputs in host memory instead of a device's, and the %s backend's passes run in host memory already: give %s", CheckpointingOffload, name, CheckpointingOn)
		}
	}
	seq := c.SequenceTokens
	if seq <= 0 || seq > c.MicroBatchTokens {
		seq = c.MicroBatchTokens
	}
	return b, backend.Workload{Model: c.Model, Precision: c.Precision, Pass: model.Packed(c.MicroBatchTokens, seq, false),
		Reference: c.Reference, ReferenceBF16: c.ReferenceBF16, LoRA: c.LoRA}, nil
}

func useCheckpointing(c MemoryConfig, b backend.Backend, w backend.Workload) (bool, error) {
	switch c.Checkpointing {
	case CheckpointingOn, CheckpointingOffload:
		return true, nil
	case CheckpointingOff:
		return false, nil
	case "", CheckpointingAuto:
	default:
		return false, fmt.Errorf("trainer: activation checkpointing %q is unknown: use %s, %s, %s or %s", c.Checkpointing, CheckpointingAuto, CheckpointingOn, CheckpointingOff, CheckpointingOffload)
	}
	w.Pass.Checkpointing = false
	host, dev := b.StepMemory(w)
	act := host.Activations
	if dev.Total() > 0 {
		act = dev.Activations
	}
	return act > CheckpointingThreshold, nil
}
