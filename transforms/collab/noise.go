package collab

import (
	"fmt"
	"math"
)

// Noise is the probability that the Knowledge Agent deliberately answers
// with noise at a training step: either a constant, or ZeroSearch's
// curriculum (Sun et al. 2025, "ZeroSearch: Incentivize the Search
// Capability of LLMs without Searching")
//
//	p(step) = start + (base^(step/total_steps) - 1) / (base - 1) * (end - start)
//
// which rises from start at step 0 to end at total_steps (ZeroSearch uses
// base 4, start 0, end 0.5); steps past total_steps keep end.
// Set either Constant or the curriculum fields.
type Noise struct {
	// Constant, when set, is the probability at every step (the demo uses 0.2).
	Constant *float64 `yaml:"constant,omitempty" json:"constant,omitempty"`
	// Start is the curriculum's probability at step 0.
	Start float64 `yaml:"start,omitempty" json:"start,omitempty"`
	// End is the curriculum's probability at TotalSteps.
	End float64 `yaml:"end,omitempty" json:"end,omitempty"`
	// Base is the curriculum's exponential base; 0 means 4.
	Base float64 `yaml:"base,omitempty" json:"base,omitempty"`
	// TotalSteps is the number of training steps the curriculum spans.
	TotalSteps int64 `yaml:"total_steps,omitempty" json:"total_steps,omitempty"`
}

// ConstantNoise returns a schedule with probability p at every step.
func ConstantNoise(p float64) Noise { return Noise{Constant: &p} }

// Curriculum returns ZeroSearch's schedule from start to end over total
// steps with base b (0 means 4).
func Curriculum(start, end, b float64, total int64) Noise {
	return Noise{Start: start, End: end, Base: b, TotalSteps: total}
}

// Validate reports the first invalid field.
func (n Noise) Validate() error {
	if n.Constant != nil {
		if n.Start != 0 || n.End != 0 || n.Base != 0 || n.TotalSteps != 0 {
			return fmt.Errorf("noise: set either constant or the curriculum (start, end, base, total_steps), not both")
		}
		if c := *n.Constant; !(c >= 0 && c <= 1) {
			return fmt.Errorf("noise: constant %g must be a probability in [0,1]", c)
		}
		return nil
	}
	switch {
	case !(n.Start >= 0 && n.Start <= 1) || !(n.End >= 0 && n.End <= 1):
		return fmt.Errorf("noise: start %g and end %g must be probabilities in [0,1]", n.Start, n.End)
	case n.Base < 0 || n.Base == 1 || math.IsNaN(n.Base) || math.IsInf(n.Base, 0):
		return fmt.Errorf("noise: base %g must be positive and not 1 (0 means 4)", n.Base)
	case n.TotalSteps <= 0 && n.Start != n.End:
		return fmt.Errorf("noise: total_steps %d must be positive for a curriculum from %g to %g (or use constant)", n.TotalSteps, n.Start, n.End)
	}
	return nil
}

// P returns the noise probability at step.
func (n Noise) P(step int64) float64 {
	if n.Constant != nil {
		return *n.Constant
	}
	if n.TotalSteps <= 0 || n.Start == n.End {
		return n.Start
	}
	b := n.Base
	if b == 0 {
		b = 4
	}
	frac := math.Min(math.Max(float64(step)/float64(n.TotalSteps), 0), 1)
	return n.Start + (math.Pow(b, frac)-1)/(b-1)*(n.End-n.Start)
}

// IsZero reports whether the schedule never adds noise.
func (n Noise) IsZero() bool {
	if n.Constant != nil {
		return *n.Constant == 0
	}
	return n.Start == 0 && n.End == 0
}

// Noisy decides, from the call's seed alone, whether the Knowledge Agent
// answers q with noise.
func (n Noise) Noisy(q Query) bool {
	return Uniform(q.Seed, 0) < n.P(q.Step)
}
