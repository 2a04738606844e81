package runconfig

import (
	"math"
	"strings"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/peft"
)

// LoRA trains a LoRA adapter on the frozen policy (learner.lora): each
// targeted projection computes y = x Wᵀ + (alpha/rank) · (drop(x) Aᵀ) Bᵀ,
// the base W never changes, AdamW keeps state for A and B alone, and the
// KL term's reference is the base (the adapter switched off). Each
// checkpoint is a PEFT adapter directory (adapter_config.json and
// adapter_model.safetensors) whose base is the run's copy of the --init
// model, <run>/lora-base. See docs/lora.md.
type LoRA struct {
	// Rank is r, the adapters' inner dimension (required, at least 1).
	Rank int `yaml:"rank"`
	// Alpha scales the adapters' output by alpha/rank (default 2 x rank).
	Alpha float64 `yaml:"alpha,omitempty"`
	// Dropout is the probability of zeroing each input feature of an
	// adapter in the learner's training passes (PEFT's lora_dropout;
	// default 0).
	Dropout float64 `yaml:"dropout,omitempty"`
	// Targets are the projections adapted, as PEFT names them: some of
	// q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or
	// all-linear (default: all seven).
	Targets []string `yaml:"targets,omitempty"`
	// Init is how a new adapter's A starts (B starts at zero, so the run
	// starts at its base): default (PEFT's Kaiming-uniform) or gaussian.
	Init string `yaml:"init,omitempty"`
	// Adapter is a PEFT adapter directory to continue training from
	// instead of a new adapter (aipo train --init-adapter sets it); its
	// settings (rank, alpha, targets) are then the adapter's own, and the
	// fields above must agree with them or be left out.
	Adapter string `yaml:"adapter,omitempty"`
}

// fill sets the defaults of the fields left out.
func (l *LoRA) fill() {
	if l.Adapter != "" {
		return // the adapter's own settings
	}
	if l.Alpha == 0 && l.Rank > 0 {
		l.Alpha = 2 * float64(l.Rank)
	}
	if len(l.Targets) == 1 && l.Targets[0] == "all-linear" || len(l.Targets) == 0 {
		l.Targets = append([]string(nil), peft.Targets...)
	}
	if l.Init == "" {
		l.Init = peft.InitDefault
	}
}

// AdapterConfig is the PEFT configuration of a new adapter of l on the
// base named base.
func (l LoRA) AdapterConfig(base string) (peft.Config, error) {
	return peft.NewConfig(base, l.Rank, l.Alpha, l.Dropout, l.Targets, l.Init)
}

// validateLoRA checks learner.lora, when set, against the rest of the
// learner's settings.
func (c Config) validateLoRA() error {
	l := c.Learner.LoRA
	if l == nil {
		return nil
	}
	if l.Adapter != "" {
		switch {
		case l.Rank != 0 || l.Alpha != 0 || len(l.Targets) > 0 || l.Init != "":
			return fieldError("learner.lora.adapter", "%s is continued with its own rank, alpha, targets and matrices: leave learner.lora.rank, alpha, targets and init out", l.Adapter)
		case !(l.Dropout >= 0 && l.Dropout < 1):
			return fieldError("learner.lora.dropout", "%v must lie in [0, 1) (0 is off)", l.Dropout)
		}
		return c.validateLoRAPlace()
	}
	switch {
	case l.Rank < 1:
		return fieldError("learner.lora.rank", "%d: the rank must be at least 1 (8 to 64 are usual)", l.Rank)
	case !(l.Alpha > 0) || math.IsInf(l.Alpha, 0):
		return fieldError("learner.lora.alpha", "%v must be a positive number (leave it out for 2 x rank)", l.Alpha)
	case !(l.Dropout >= 0 && l.Dropout < 1):
		return fieldError("learner.lora.dropout", "%v must lie in [0, 1) (0 is off)", l.Dropout)
	}
	seen := map[string]bool{}
	for _, t := range l.Targets {
		known := false
		for _, k := range peft.Targets {
			known = known || k == t
		}
		if !known {
			return fieldError("learner.lora.targets", "%q is not a projection of the decoder families aipo trains: use some of %s, or all-linear", t, strings.Join(peft.Targets, ", "))
		}
		if seen[t] {
			return fieldError("learner.lora.targets", "%q is listed twice", t)
		}
		seen[t] = true
	}
	if l.Init != peft.InitDefault && l.Init != peft.InitGaussian {
		return fieldError("learner.lora.init", "%q is unknown: use %s or %s", l.Init, peft.InitDefault, peft.InitGaussian)
	}
	return c.validateLoRAPlace()
}

// validateLoRAPlace checks the learner settings a LoRA run needs.
func (c Config) validateLoRAPlace() error {
	if _, err := backend.Lookup(c.Learner.Backend); err == nil {
		if err := backend.CheckLoRA(c.Learner.Backend, c.Learner.Precision); err != nil {
			field := "learner.lora"
			if c.Learner.Precision == PrecisionBF16 {
				field = "learner.precision"
			}
			return fieldError(field, "%v (learner.backend %s, learner.lora)", err, c.Learner.Backend)
		}
	} // (an unknown backend is learner.backend's error)
	if c.Learner.Zero == 2 {
		// Stage 2 shards the gradients of what a run trains: a LoRA
		// run's are the adapter's, which stage 1 reduces whole (a few
		// megabytes), and the frozen base has none: it would hold
		// nothing less than stage 1. (Stage 3 shards the frozen base,
		// on the CPU and on GPUs, where with bf16 each rank holds its
		// share in bfloat16 but for the embedding, norms and biases.)
		return fieldError("learner.zero", "2 shards the gradients of the weights a run trains, but a LoRA run trains the adapter alone, whose gradients stage 1 reduces and whose AdamW state it shards, and the frozen base has no gradients: stage 2 would hold nothing less than stage 1; set learner.zero: 1, or 3 to shard the frozen base across the ranks as well")
	}
	if c.Learner.Objective != ObjectiveRL {
		return fieldError("learner.lora", "trains with learner.objective %s; %s trains the whole model: leave learner.lora out", ObjectiveRL, c.Learner.Objective)
	}
	return nil
}

// LoRAOn reports whether the run trains a LoRA adapter.
func (c Config) LoRAOn() bool { return c.Learner.LoRA != nil }
