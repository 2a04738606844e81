package trainer

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
)

// LossGrad turns the per-token log-probabilities and entropies of a
// forward pass into d loss / d log-prob per token.
type LossGrad = backend.LossGrad

// Compute runs a model's forward and backward passes for the trainer: the
// CPU model itself (the default) or a copy of it on a device of a
// learner/backend backend. The host model stays the one the optimiser
// updates and checkpoints are written from.
type Compute = backend.Compute

// CPU is the Compute of the host model itself.
func CPU(m *model.Model) Compute { return backend.CPUCompute(m) }

// On moves the passes of the policy and the reference to dev (a
// backend.Device: the registry's Lookup of learner.backend, opened),
// multiplying in precision, and returns the function that frees them; dev
// itself stays open.
func (l *Learner) On(dev backend.Device, precision string) (release func(), err error) {
	var held []Compute
	release = func() {
		for _, c := range held {
			c.Close()
		}
		l.PolicyCompute, l.RefCompute = nil, nil
	}
	for _, p := range []struct {
		m   *model.Model
		dst *Compute
	}{{l.Policy, &l.PolicyCompute}, {l.Ref, &l.RefCompute}} {
		if p.m == nil {
			continue
		}
		c, err := dev.Train(p.m, precision)
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, c)
		*p.dst = c
	}
	return release, nil
}

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
