package trainer

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/cuda"
	"github.com/aipo-rl/aipo/learner/model"
)

// LossGrad turns the per-token log-probabilities and entropies of a
// forward pass into d loss / d log-prob per token.
type LossGrad = func(logProbs, entropy []float32) ([]float32, error)

// Compute runs a model's forward and backward passes for the trainer: the
// CPU model itself (the default) or a copy of it on a GPU. The host model
// stays the one the optimiser updates and checkpoints are written from.
type Compute interface {
	// Run does a forward pass over b and returns the per-token
	// log-probabilities (0 where there is no target). When loss is not nil
	// it gets them and the entropies, and the backward pass of its result
	// adds to the gradients.
	Run(b model.Batch, loss LossGrad) ([]float32, error)
	// ZeroGrads clears the gradients.
	ZeroGrads() error
	// PullGrads makes the host model's gradients current; the trainer calls
	// it before an optimiser step.
	PullGrads() error
	// PushParams copies the host model's parameters to where the passes
	// run; the trainer calls it after an optimiser step.
	PushParams() error
}

// CPU is the Compute of the host model itself.
func CPU(m *model.Model) Compute { return cpuCompute{m} }

type cpuCompute struct{ m *model.Model }

func (c cpuCompute) Run(b model.Batch, loss LossGrad) ([]float32, error) {
	a, err := c.m.Forward(b)
	if err != nil {
		return nil, err
	}
	if loss == nil {
		a.Release()
		return a.LogProbs, nil
	}
	grad, err := loss(a.LogProbs, a.Entropy)
	if err != nil {
		a.Release()
		return nil, err
	}
	return a.LogProbs, c.m.Backward(a, grad)
}

func (c cpuCompute) ZeroGrads() error  { c.m.ZeroGrads(); return nil }
func (c cpuCompute) PullGrads() error  { return nil }
func (c cpuCompute) PushParams() error { return nil }

// CUDA is the Compute of a float32 copy of m on dv (learner/cuda's Model);
// Close frees it.
func CUDA(dv *cuda.Device, m *model.Model) (*CUDACompute, error) {
	g, err := dv.NewModel(m)
	if err != nil {
		return nil, err
	}
	return &CUDACompute{host: m, dev: g}, nil
}

// CUDACompute runs the passes on a GPU; see CUDA.
type CUDACompute struct {
	host *model.Model
	dev  *cuda.Model
}

func (c *CUDACompute) Run(b model.Batch, loss LossGrad) ([]float32, error) {
	lp, _, err := c.dev.ForwardBackward(b, loss)
	return lp, err
}

func (c *CUDACompute) ZeroGrads() error  { return c.dev.ZeroGrads() }
func (c *CUDACompute) PullGrads() error  { return c.dev.Grads(c.host.GradData()) }
func (c *CUDACompute) PushParams() error { return c.dev.SetParams(c.host.ParamData()) }

// UseBF16 makes the device copy multiply with bfloat16 operands (see
// cuda.Model.UseBF16).
func (c *CUDACompute) UseBF16() error { return c.dev.UseBF16() }

// Close frees the device copy.
func (c *CUDACompute) Close() error { return c.dev.Free() }

// optimiserStep pulls the gradients, steps the optimiser on the host model
// and pushes the parameters back; it returns the gradient norm.
func (l *Learner) optimiserStep() (float64, error) {
	c := l.policy()
	if err := c.PullGrads(); err != nil {
		return 0, fmt.Errorf("trainer: gradients from the device: %w", err)
	}
	norm := l.Opt.Step(l.Params())
	if err := c.PushParams(); err != nil {
		return 0, fmt.Errorf("trainer: parameters to the device: %w", err)
	}
	return norm, nil
}

func (l *Learner) policy() Compute {
	if l.PolicyCompute != nil {
		return l.PolicyCompute
	}
	return CPU(l.Policy)
}

func (l *Learner) ref() Compute {
	if l.RefCompute != nil {
		return l.RefCompute
	}
	return CPU(l.Ref)
}
