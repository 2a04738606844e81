package peft

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Targets are the linear layers of a decoder layer an adapter may attach
// to, under PEFT's names, in the order the layer computes them.
var Targets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// Init names how a new adapter's matrices start. Both start B at zero, so
// the adapted model equals the base at step 0, as PEFT's do.
const (
	// InitDefault draws A uniformly in ±1/√in (PEFT's init_lora_weights=true,
	// torch's Kaiming-uniform with a = √5).
	InitDefault = "default"
	// InitGaussian draws A from a normal of standard deviation 1/r (PEFT's
	// init_lora_weights="gaussian").
	InitGaussian = "gaussian"
)

// Config is adapter_config.json, the fields PEFT writes for a LoRA adapter.
// Fields PEFT adds in later versions are ignored on reading; the settings
// that change what the matrices mean and that this package does not
// implement are refused by Check.
type Config struct {
	PeftType      string   `json:"peft_type"`
	TaskType      string   `json:"task_type"`
	BaseModel     string   `json:"base_model_name_or_path"`
	R             int      `json:"r"`
	Alpha         float64  `json:"lora_alpha"`
	Dropout       float64  `json:"lora_dropout"`
	TargetModules []string `json:"target_modules"`
	Bias          string   `json:"bias"`
	FanInFanOut   bool     `json:"fan_in_fan_out"`
	UseRSLoRA     bool     `json:"use_rslora"`
	UseDoRA       bool     `json:"use_dora"`
	InferenceMode bool     `json:"inference_mode"`
	// InitLoraWeights is true, false or a method's name in PEFT; kept as
	// read so that a file round-trips.
	InitLoraWeights any                `json:"init_lora_weights"`
	ModulesToSave   []string           `json:"modules_to_save"`
	RankPattern     map[string]int     `json:"rank_pattern"`
	AlphaPattern    map[string]float64 `json:"alpha_pattern"`
	// LayersToTransform limits the adapter to some layers in PEFT; only
	// its absence (every layer) is supported.
	LayersToTransform any `json:"layers_to_transform"`
}

// NewConfig is the configuration of a new adapter on base (its Hugging Face
// name or path, written into the file as PEFT does) with rank r, scale
// numerator alpha, dropout and targets (PEFT's names; nil means every
// target). init is InitDefault or InitGaussian.
func NewConfig(base string, r int, alpha, dropout float64, targets []string, init string) (Config, error) {
	if len(targets) == 0 {
		targets = Targets
	}
	c := Config{
		PeftType:        "LORA",
		TaskType:        "CAUSAL_LM",
		BaseModel:       base,
		R:               r,
		Alpha:           alpha,
		Dropout:         dropout,
		TargetModules:   append([]string(nil), targets...),
		Bias:            "none",
		InferenceMode:   true,
		InitLoraWeights: true,
		RankPattern:     map[string]int{},
		AlphaPattern:    map[string]float64{},
	}
	switch init {
	case "", InitDefault:
	case InitGaussian:
		c.InitLoraWeights = InitGaussian
	default:
		return Config{}, fmt.Errorf("lora: init %q is not one of %q, %q", init, InitDefault, InitGaussian)
	}
	if err := c.Check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Scale is s in y = x Wᵀ + s · (x Aᵀ) Bᵀ.
func (c Config) Scale() float32 {
	if c.UseRSLoRA {
		return float32(c.Alpha / math.Sqrt(float64(c.R)))
	}
	return float32(c.Alpha / float64(c.R))
}

// Targeted reports whether the adapter attaches to target.
func (c Config) Targeted(target string) bool {
	for _, t := range c.TargetModules {
		if t == target {
			return true
		}
	}
	return false
}

// Check refuses a configuration this package cannot apply as PEFT would,
// naming the setting and what to do.
func (c Config) Check() error {
	if c.PeftType != "LORA" {
		return fmt.Errorf("lora: peft_type %q: only LORA adapters are supported", c.PeftType)
	}
	if c.R <= 0 {
		return fmt.Errorf("lora: rank (r) %d: the rank must be at least 1 (8 to 64 are usual)", c.R)
	}
	if c.Alpha <= 0 || math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0) {
		return fmt.Errorf("lora: alpha %v: alpha must be a positive number (PEFT's default is 8; 2 x rank is usual)", c.Alpha)
	}
	if c.Dropout < 0 || c.Dropout >= 1 || math.IsNaN(c.Dropout) {
		return fmt.Errorf("lora: dropout %v: must be in [0, 1)", c.Dropout)
	}
	if len(c.TargetModules) == 0 {
		return fmt.Errorf("lora: no target modules: name some of %s", strings.Join(Targets, ", "))
	}
	seen := map[string]bool{}
	for _, t := range c.TargetModules {
		if !known(t) {
			return fmt.Errorf("lora: target %q is not a linear layer of the decoder families aipo trains: use some of %s", t, strings.Join(Targets, ", "))
		}
		if seen[t] {
			return fmt.Errorf("lora: target %q is listed twice", t)
		}
		seen[t] = true
	}
	switch {
	case c.Bias != "" && c.Bias != "none":
		return fmt.Errorf("lora: bias %q: only adapters that train no bias (bias \"none\") are supported", c.Bias)
	case c.UseDoRA:
		return fmt.Errorf("lora: use_dora is set: DoRA adapters are not supported; train a plain LoRA adapter")
	case c.FanInFanOut:
		return fmt.Errorf("lora: fan_in_fan_out is set: that layout is for GPT-2's Conv1D layers, which aipo's model families do not have")
	case len(c.ModulesToSave) > 0:
		return fmt.Errorf("lora: modules_to_save %v: adapters that also carry whole trained modules are not supported", c.ModulesToSave)
	case len(c.RankPattern) > 0 || len(c.AlphaPattern) > 0:
		return fmt.Errorf("lora: rank_pattern or alpha_pattern is set: one rank and one alpha for every layer are supported")
	case c.LayersToTransform != nil:
		return fmt.Errorf("lora: layers_to_transform is set: adapters on every layer are supported")
	}
	return nil
}

func known(t string) bool {
	for _, k := range Targets {
		if k == t {
			return true
		}
	}
	return false
}

// sortTargets puts targets in the order of Targets.
func sortTargets(ts []string) {
	rank := map[string]int{}
	for i, t := range Targets {
		rank[t] = i
	}
	sort.SliceStable(ts, func(i, j int) bool { return rank[ts[i]] < rank[ts[j]] })
}

// UnmarshalJSON reads target_modules as PEFT writes it (a list) or as a
// user may (a single name, or "all-linear" for every target); a regular
// expression, which PEFT also accepts, is refused with the fix.
func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config
	var raw struct {
		plain
		TargetModules json.RawMessage `json:"target_modules"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*c = Config(raw.plain)
	c.TargetModules = nil
	if len(raw.TargetModules) == 0 || string(raw.TargetModules) == "null" {
		return nil
	}
	var list []string
	if err := json.Unmarshal(raw.TargetModules, &list); err == nil {
		c.TargetModules = list
		return nil
	}
	var one string
	if err := json.Unmarshal(raw.TargetModules, &one); err != nil {
		return fmt.Errorf("target_modules: want a list of module names or a string: %v", err)
	}
	switch {
	case one == "all-linear":
		c.TargetModules = append([]string(nil), Targets...)
	case known(one):
		c.TargetModules = []string{one}
	default:
		return fmt.Errorf("target_modules %q: a regular expression is not supported; list the modules by name (some of %s)", one, strings.Join(Targets, ", "))
	}
	return nil
}
