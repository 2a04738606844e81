package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"

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
// itself stays open. The policy's passes train (dev.Train), the
// reference's only evaluate (dev.Eval: weights alone, in the compute
// dtype on a device). Once On returns, the reference's passes hold what
// they need: the caller may set Ref to nil and let the host copy go.
func (l *Learner) On(dev backend.Device, precision string) (release func(), err error) {
	return l.on(dev, precision, false)
}

// OnSharded is On for a learner whose next step is taken at ZeRO stage 3
// on the devices (EnableDataParallel or EnableSingle with Zero 3 and a
// device communicator follow before any pass): where dev can
// (backend.ShardedOpener), the passes are opened without any of the
// models' weights on the device, and the group places each rank's share
// of the policy (from its share of the host's weights) and then of the
// reference (from the host model's weights) a unit at a time. So no
// device holds the whole policy, its gradients or the whole reference at
// start-up: each holds its shares alone (PlanStartOnDevices). A LoRA
// policy's passes are opened with the adapter alone, and the group places
// each rank's share of the frozen base from the host model
// (backend.BaseSharded, PlanLoRAStartOnDevices). The
// reference's passes read the host model until the group shards them: the
// caller may set Ref to nil (they keep it until then). With RefShare in
// place of Ref, the reference's passes are opened on the policy's shape
// and the group places the share kept there (backend.FrozenShareSharded):
// the whole reference need not be on the host. Elsewhere it is On.
func (l *Learner) OnSharded(dev backend.Device, precision string) (release func(), err error) {
	return l.on(dev, precision, true)
}

// on is On, with the passes opened unplaced (OnSharded) when sharded.
func (l *Learner) on(dev backend.Device, precision string, sharded bool) (release func(), err error) {
	so, _ := dev.(backend.ShardedOpener)
	var held []Compute
	release = func() {
		for _, c := range held {
			c.Close()
		}
		l.PolicyCompute, l.RefCompute = nil, nil
	}
	ref := l.Ref
	if ref == nil && l.RefShare != nil {
		// The reference's share is kept on the host: its passes are
		// opened without weights on the policy's shape (the same
		// model's), and the group places the share from RefShare.
		if l.Policy == nil || l.Policy.HasAdapter() {
			return nil, errors.New("trainer: a reference's share kept on the host is a whole policy's reference (a LoRA policy's reference is its own base)")
		}
		if !sharded || so == nil {
			return nil, fmt.Errorf("trainer: the reference's share is placed by a stage-3 group on the devices: open the passes with OnSharded on a device that can (backend.ShardedOpener, not %T)", dev)
		}
		ref = l.Policy
	}
	for _, p := range []struct {
		m     *model.Model
		dst   *Compute
		train bool
	}{{l.Policy, &l.PolicyCompute, true}, {ref, &l.RefCompute, false}} {
		if p.m == nil {
			continue
		}
		open := dev.Eval
		switch {
		case p.train && sharded && so != nil:
			open = so.TrainSharded
		case p.train:
			open = dev.Train
		case sharded && so != nil:
			open = so.EvalSharded
		}
		if !p.train && l.Policy != nil && p.m != l.Policy {
			p.m.ShareBuffers(l.Policy) // on the CPU, see ref
		}
		c, err := open(p.m, precision)
		if err != nil {
			release()
			return nil, err
		}
		if p.m.HasAdapter() && !backend.TrainsAdapter(c, p.m) {
			c.Close()
			release()
			return nil, errors.New("trainer: this backend's passes have no LoRA adapters: use learner.backend cpu or cuda")
		}
		held = append(held, c)
		*p.dst = c
	}
	return release, nil
}

// optimiserStep steps the optimiser where the policy's passes run and
// returns the gradient norm.
func (l *Learner) optimiserStep() (float64, error) {
	norm, err := l.policy().Step(l.Opt)
	if err != nil {
		return 0, fmt.Errorf("trainer: optimiser step: %w", err)
	}
	return norm, nil
}

// SyncPolicy makes the host policy's parameters those the passes run
// with (a device keeps its own until asked), before a checkpoint is
// written from them.
//
// At ZeRO stage 3 the policy's weights are gathered whole into the host
// model (every rank of the group must call it; the next RLStepDP shards
// them again).
func (l *Learner) SyncPolicy() error {
	if l.DP != nil && l.DP.z3 != nil {
		return l.unshard(context.Background())
	}
	if err := l.policy().SyncParams(); err != nil {
		return fmt.Errorf("trainer: parameters from the device: %w", err)
	}
	return nil
}

// SetCheckpointing turns activation checkpointing of the policy's
// training passes on or off.
func (l *Learner) SetCheckpointing(on bool) { l.policy().SetCheckpointing(on) }

// SetInputStore makes the policy's checkpointed passes keep each layer's
// input in host memory (backend.InputStorer), or refuses passes that
// cannot.
func (l *Learner) SetInputStore(on bool) error {
	s, ok := l.policy().(backend.InputStorer)
	if !ok {
		if !on {
			return nil
		}
		return fmt.Errorf("trainer: the policy's passes (%T) cannot keep the layers' inputs in host memory (activation checkpointing %q): give %s", l.policy(), CheckpointingOffload, CheckpointingOn)
	}
	s.SetInputStore(on)
	return nil
}

// ReadOptimizer restores the optimiser's state from r (optimizer.bin) into
// where the policy's passes keep it.
// A rank of a data-parallel group keeps its share alone (ReadOptimizerDP).
func (l *Learner) ReadOptimizer(r io.Reader) error {
	if l.DP != nil {
		return l.ReadOptimizerDP(r)
	}
	return l.policy().ReadOptimizer(l.Opt, r)
}

// WriteOptimizer streams the optimiser's state to w.
// Every rank of a data-parallel group must call it (WriteOptimizerDP,
// bounded by the group's operation timeout).
func (l *Learner) WriteOptimizer(w io.Writer) error {
	if l.DP != nil {
		return l.WriteOptimizerDP(context.Background(), w)
	}
	return l.policy().WriteOptimizer(l.Opt, w)
}

func (l *Learner) policy() Compute {
	if l.PolicyCompute != nil {
		return l.PolicyCompute
	}
	return CPU(l.Policy)
}

// ref is the reference's passes, nil without a reference.
func (l *Learner) ref() Compute {
	if l.RefCompute != nil {
		return l.RefCompute
	}
	if l.Ref == nil {
		return l.loraBase()
	}
	if l.Policy != nil {
		l.Ref.ShareBuffers(l.Policy) // the scoring pass's buffers serve the training pass after it
	}
	return CPU(l.Ref)
}
