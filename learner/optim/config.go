package optim

import (
	"fmt"
	"math"
)

// Learning-rate schedules.
const (
	// ScheduleConstant holds the learning rate at LR after an optional
	// linear warmup over WarmupSteps.
	ScheduleConstant = "constant"
	// ScheduleWarmupCosine warms up linearly over WarmupSteps, then
	// follows half a cosine from LR down to LR*MinLRRatio at TotalSteps,
	// and stays there.
	ScheduleWarmupCosine = "warmup-cosine"
)

// Config holds the optimiser's hyper-parameters. DefaultConfig gives the
// paper's training setting (arXiv 2605.08401, Table 3) and PyTorch's AdamW
// defaults where the paper is silent.
type Config struct {
	// LR is the peak learning rate (paper: 1e-6).
	LR float64 `yaml:"lr" json:"lr"`
	// Beta1 is the decay of the first moment (default 0.9).
	Beta1 float64 `yaml:"beta1" json:"beta1"`
	// Beta2 is the decay of the second moment (default 0.999).
	Beta2 float64 `yaml:"beta2" json:"beta2"`
	// Eps is added to the root of the second moment (default 1e-8).
	Eps float64 `yaml:"eps" json:"eps"`
	// WeightDecay is the decoupled decay: each step multiplies every
	// parameter by 1 - lr*WeightDecay (default 0.01, applied to all
	// tensors as veRL does).
	WeightDecay float64 `yaml:"weight_decay" json:"weight_decay"`
	// GradClip is the maximum global L2 norm of the gradient; larger
	// gradients are scaled by GradClip/(norm+1e-6) as
	// torch.nn.utils.clip_grad_norm_ does (paper: 1.0). 0 turns clipping
	// off.
	GradClip float64 `yaml:"grad_clip" json:"grad_clip"`
	// Schedule is "constant" (default) or "warmup-cosine".
	Schedule string `yaml:"schedule" json:"schedule"`
	// WarmupSteps is the length of the linear warmup: update k (counting
	// from 0) uses LR*k/WarmupSteps while k < WarmupSteps, so the very
	// first update of a warmup has rate 0 (the convention of Hugging
	// Face's and veRL's schedulers). Default 0.
	WarmupSteps int `yaml:"warmup_steps" json:"warmup_steps"`
	// TotalSteps is where the cosine reaches its floor (paper: 200
	// training steps). Used only by "warmup-cosine".
	TotalSteps int `yaml:"total_steps" json:"total_steps"`
	// MinLRRatio is the cosine's floor as a fraction of LR (default 0).
	MinLRRatio float64 `yaml:"min_lr_ratio" json:"min_lr_ratio"`
}

// DefaultConfig returns lr 1e-6, betas 0.9/0.999, eps 1e-8, weight decay
// 0.01, gradient clipping 1.0, constant schedule without warmup, and a
// cosine horizon of 200 steps should the schedule be switched.
func DefaultConfig() Config {
	return Config{
		LR:          1e-6,
		Beta1:       0.9,
		Beta2:       0.999,
		Eps:         1e-8,
		WeightDecay: 0.01,
		GradClip:    1.0,
		Schedule:    ScheduleConstant,
		TotalSteps:  200,
	}
}

// Validate reports the first invalid field, naming it and the fix.
func (c Config) Validate() error {
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !fin(c.LR) || c.LR < 0:
		return fmt.Errorf("optim: Config.LR = %v must be finite and >= 0 (paper: 1e-6)", c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("optim: Config.Beta1 = %v must lie in [0, 1) (default 0.9)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("optim: Config.Beta2 = %v must lie in [0, 1) (default 0.999)", c.Beta2)
	case !fin(c.Eps) || c.Eps <= 0:
		return fmt.Errorf("optim: Config.Eps = %v must be finite and > 0 (default 1e-8)", c.Eps)
	case !fin(c.WeightDecay) || c.WeightDecay < 0:
		return fmt.Errorf("optim: Config.WeightDecay = %v must be finite and >= 0 (default 0.01)", c.WeightDecay)
	case !fin(c.GradClip) || c.GradClip < 0:
		return fmt.Errorf("optim: Config.GradClip = %v must be finite and >= 0 (0 turns clipping off; paper: 1.0)", c.GradClip)
	case c.WarmupSteps < 0:
		return fmt.Errorf("optim: Config.WarmupSteps = %d must be >= 0", c.WarmupSteps)
	case !(c.MinLRRatio >= 0 && c.MinLRRatio <= 1):
		return fmt.Errorf("optim: Config.MinLRRatio = %v must lie in [0, 1]", c.MinLRRatio)
	}
	switch c.Schedule {
	case ScheduleConstant:
	case ScheduleWarmupCosine:
		if c.TotalSteps <= c.WarmupSteps {
			return fmt.Errorf("optim: Config.TotalSteps = %d must exceed WarmupSteps = %d for the warmup-cosine schedule (paper: 200 steps)", c.TotalSteps, c.WarmupSteps)
		}
	default:
		return fmt.Errorf("optim: Config.Schedule %q is unknown: use %q or %q", c.Schedule, ScheduleConstant, ScheduleWarmupCosine)
	}
	return nil
}

// LRAt returns the learning rate of update number step (0 for the first).
func (c Config) LRAt(step int64) float64 {
	if step < 0 {
		step = 0
	}
	if w := int64(c.WarmupSteps); step < w {
		return c.LR * float64(step) / float64(w)
	}
	if c.Schedule != ScheduleWarmupCosine {
		return c.LR
	}
	span := float64(c.TotalSteps - c.WarmupSteps)
	progress := math.Min(float64(step-int64(c.WarmupSteps))/math.Max(span, 1), 1)
	mult := c.MinLRRatio + (1-c.MinLRRatio)*0.5*(1+math.Cos(math.Pi*progress))
	return c.LR * math.Max(mult, 0)
}
