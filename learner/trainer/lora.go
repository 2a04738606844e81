package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/peft"
)

// LoRA training. A policy with a LoRA adapter attached (model.AttachAdapter)
// trains the adapter alone on its frozen base: the optimiser's parameters
// are the adapter's matrices (backend.OptimParams), so its AdamW state is
// theirs alone; a data-parallel group reduces their gradients and shards
// their state as it does a whole model's (stage 1, whose bits are the same
// at every group size); and the reference of the KL term is the policy
// with its adapter switched off, no second model.

// loraRef is the reference passes of a LoRA policy: its base, the adapter
// off for each pass, scored where the policy's passes run (c: the host
// model's own, or a device's backend.AdapterTrainer, which follows the
// host model's switch).
type loraRef struct {
	m *model.Model
	c Compute
}

func (r loraRef) Run(b model.Batch, loss LossGrad) ([]float32, error) {
	if loss != nil {
		return nil, errors.New("trainer: the LoRA policy's base is a frozen reference: it is scored, never differentiated")
	}
	r.m.SetAdapterOn(false)
	defer r.m.SetAdapterOn(true)
	return r.c.Run(b, nil)
}

func (loraRef) ZeroGrads() error { return nil }
func (loraRef) Step(*optim.AdamW) (float64, error) {
	return 0, errors.New("trainer: the LoRA policy's base is frozen")
}
func (loraRef) ReadOptimizer(*optim.AdamW, io.Reader) error {
	return errors.New("trainer: the LoRA policy's base is frozen")
}
func (loraRef) WriteOptimizer(*optim.AdamW, io.Writer) error {
	return errors.New("trainer: the LoRA policy's base is frozen")
}
func (loraRef) SyncParams() error     { return nil }
func (loraRef) SetCheckpointing(bool) {}
func (loraRef) Close() error          { return nil }

var _ backend.Compute = loraRef{}

// loraBase is the reference passes of a LoRA policy, nil for a policy
// without an adapter.
func (l *Learner) loraBase() Compute {
	if l.Policy == nil || !l.Policy.HasAdapter() {
		return nil
	}
	return loraRef{l.Policy, l.policy()}
}

// keyDropout keys the adapter's dropout masks of the passes that follow
// by the optimiser's step count (every rank has the same).
func (l *Learner) keyDropout() {
	if l.Policy != nil {
		l.Policy.SetAdapterStep(uint64(l.Opt.Steps()))
	}
}

// flatBuffers are the policy's gradient and parameter buffers as the
// optimiser's parameters lie in them: the adapter's of a LoRA policy
// (model.AdapterGradData, AdapterParamData), else the model's.
func flatBuffers(m *model.Model) (grads, params []float32) {
	if m.HasAdapter() {
		return m.AdapterGradData(), m.AdapterParamData()
	}
	return m.GradData(), m.ParamData()
}

// checkLoRAGroup refuses the ZeRO stages that shard what a LoRA policy
// does not train: its gradients are the adapter's, reduced whole (stage
// 1); the frozen base is held by every rank.
func checkLoRAGroup(m *model.Model, zero int) error {
	if m == nil || !m.HasAdapter() || zero <= 1 {
		return nil
	}
	return fmt.Errorf("trainer: ZeRO stage %d shards the model's own gradients (and weights), but a LoRA run trains the adapter alone, whose gradients and AdamW state stage 1 reduces and shards; set learner.zero: 1", zero)
}

// LoadAdapterPolicy builds the policy of the committed LoRA checkpoint ck
// (read from dir): its base, loaded from the directory the adapter's
// configuration names (base_model_name_or_path), with the adapter
// attached, its dropout keyed by seed.
func LoadAdapterPolicy(ctx context.Context, dir string, ck checkpoint.Checkpoint, seed uint64) (*model.Model, checkpoint.Checkpoint, error) {
	ad, err := peft.FromCheckpoint(dir, ck.Adapter)
	if err != nil {
		return nil, checkpoint.Checkpoint{}, err
	}
	if ad.Config.BaseModel == "" {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: %s names no base model (base_model_name_or_path)", dir)
	}
	m, bck, err := LoadModel(ctx, ad.Config.BaseModel)
	if err != nil {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: the base of the LoRA checkpoint %s: %w", dir, err)
	}
	if bck.Adapter != nil {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: the base of %s, %s, is itself an adapter", dir, ad.Config.BaseModel)
	}
	if err := m.AttachAdapter(ad, seed); err != nil {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: %s on %s: %w", dir, ad.Config.BaseModel, err)
	}
	ck.Config = m.Config()
	if len(ck.Tokenizer) == 0 {
		ck.Tokenizer = bck.Tokenizer
	}
	return m, ck, nil
}
