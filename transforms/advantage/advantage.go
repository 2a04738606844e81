package advantage

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Method names accepted by Compute and Config.Method.
const (
	GRPO   = "grpo"
	DrGRPO = "drgrpo"
	RLOO   = "rloo"
)

// DefaultEpsilon is added to the GRPO standard deviation.
const DefaultEpsilon = 1e-6

// DefaultRefillRounds is the MaxRefillRounds of the presets: with DAPO's
// first draw, nine draws at most, close to the max_num_gen_batches of 10
// in DAPO's published scripts.
const DefaultRefillRounds = 8

// MaxRefillRoundsLimit bounds MaxRefillRounds: every round is a stage of
// the rollout pipeline.
const MaxRefillRoundsLimit = 32

// methodAliases maps accepted spellings to a method name.
var methodAliases = map[string]string{
	"grpo": GRPO, "drgrpo": DrGRPO, "dr_grpo": DrGRPO, "dr.grpo": DrGRPO, "dr-grpo": DrGRPO, "rloo": RLOO,
}

// Methods lists the method names.
func Methods() []string { return []string{GRPO, DrGRPO, RLOO} }

// Config selects how rewards become advantages. The zero value is GRPO with
// the sample std and eps 1e-6, no dynamic sampling, no overlong shaping.
type Config struct {
	// Method is grpo (default when empty), drgrpo or rloo.
	Method string `yaml:"method"`
	// Epsilon is added to the GRPO std; 0 means DefaultEpsilon.
	Epsilon float64 `yaml:"epsilon"`
	// PopulationStd makes GRPO divide by the population std (over G)
	// instead of the sample std (over G-1).
	PopulationStd bool `yaml:"population_std"`
	// DynamicSampling drops groups whose rewards are all equal (DAPO) and
	// refills the batch from further prompts (see MaxRefillRounds).
	DynamicSampling bool `yaml:"dynamic_sampling"`
	// MaxRefillRounds bounds the draws of further prompts that replace the
	// groups dynamic sampling dropped, until the step holds the batch size
	// of kept groups (DAPO's max_num_gen_batches less the first draw).
	// 0 drops without refilling. Unused without DynamicSampling.
	MaxRefillRounds int `yaml:"max_refill_rounds"`
	// Overlong configures DAPO's soft overlong penalty.
	Overlong Overlong `yaml:"overlong"`
}

// Overlong configures DAPO's soft overlong punishment: a response longer
// than MaxLength-Cache tokens loses reward linearly, down to -Factor at
// MaxLength and beyond.
type Overlong struct {
	Enabled bool `yaml:"enabled"`
	// MaxLength is the response token budget L_max.
	MaxLength int `yaml:"max_length"`
	// Cache is the length L_cache of the soft-penalty zone before MaxLength.
	Cache int `yaml:"cache"`
	// Factor scales the penalty; 0 means 1.
	Factor float64 `yaml:"factor"`
}

// Validate checks the configuration and names the field to fix.
func (c Config) Validate() error {
	if _, err := canonicalMethod(c.Method); err != nil {
		return err
	}
	if c.Epsilon < 0 || math.IsNaN(c.Epsilon) || math.IsInf(c.Epsilon, 0) {
		return fmt.Errorf("advantage: epsilon %v must be a finite number >= 0 (0 means %g)", c.Epsilon, DefaultEpsilon)
	}
	if c.MaxRefillRounds < 0 || c.MaxRefillRounds > MaxRefillRoundsLimit {
		return fmt.Errorf("advantage: max_refill_rounds %d must be between 0 (drop without refilling) and %d", c.MaxRefillRounds, MaxRefillRoundsLimit)
	}
	o := c.Overlong
	if o.Enabled {
		if o.MaxLength <= 0 {
			return fmt.Errorf("advantage: overlong.max_length %d must be > 0 when overlong shaping is enabled", o.MaxLength)
		}
		if o.Cache < 0 || o.Cache > o.MaxLength {
			return fmt.Errorf("advantage: overlong.cache %d must be between 0 and overlong.max_length %d", o.Cache, o.MaxLength)
		}
		if o.Factor < 0 || math.IsNaN(o.Factor) || math.IsInf(o.Factor, 0) {
			return fmt.Errorf("advantage: overlong.factor %v must be a finite number >= 0 (0 means 1)", o.Factor)
		}
	}
	return nil
}

func canonicalMethod(m string) (string, error) {
	key := strings.ToLower(strings.TrimSpace(m))
	if key == "" {
		return GRPO, nil
	}
	if c, ok := methodAliases[key]; ok {
		return c, nil
	}
	return "", fmt.Errorf("advantage: unknown method %q; use one of %s", m, strings.Join(Methods(), ", "))
}

// Compute returns the advantages of one group's rewards under method (grpo,
// drgrpo or rloo) with the default settings of Config.
func Compute(method string, rewards []float32) ([]float32, error) {
	return Config{Method: method}.Advantages(rewards)
}

// ErrEmptyGroup is returned for a group without rewards.
var ErrEmptyGroup = errors.New("advantage: empty group")

// Advantages returns the advantages of one group's rewards, in order.
func (c Config) Advantages(rewards []float32) ([]float32, error) {
	method, err := canonicalMethod(c.Method)
	if err != nil {
		return nil, err
	}
	if len(rewards) == 0 {
		return nil, ErrEmptyGroup
	}
	for i, r := range rewards {
		if math.IsNaN(float64(r)) || math.IsInf(float64(r), 0) {
			return nil, fmt.Errorf("advantage: reward %d of the group is %v; rewards must be finite", i, r)
		}
	}
	out := make([]float32, len(rewards))
	if AllEqual(rewards) {
		return out, nil
	}
	n := float64(len(rewards))
	mean := 0.0
	for _, r := range rewards {
		mean += float64(r)
	}
	mean /= n
	switch method {
	case GRPO:
		ss := 0.0
		for _, r := range rewards {
			d := float64(r) - mean
			ss += d * d
		}
		div := n - 1
		if c.PopulationStd {
			div = n
		}
		eps := c.Epsilon
		if eps == 0 {
			eps = DefaultEpsilon
		}
		scale := 1 / (math.Sqrt(ss/div) + eps)
		for i, r := range rewards {
			out[i] = float32((float64(r) - mean) * scale)
		}
	case DrGRPO:
		for i, r := range rewards {
			out[i] = float32(float64(r) - mean)
		}
	case RLOO:
		k := n / (n - 1)
		for i, r := range rewards {
			out[i] = float32(k * (float64(r) - mean))
		}
	}
	return out, nil
}

// Shape returns the reward after DAPO's overlong penalty for a response of
// length tokens, or reward unchanged when overlong shaping is off.
func (c Config) Shape(reward float32, length int) float32 {
	o := c.Overlong
	if !o.Enabled {
		return reward
	}
	f := o.Factor
	if f == 0 {
		f = 1
	}
	return reward + float32(f*float64(OverlongPenalty(length, o.MaxLength, o.Cache)))
}
