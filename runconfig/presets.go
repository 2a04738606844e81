package runconfig

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/transforms/advantage"
)

// Preset is what learner.loss.base sets: every part of one base algorithm,
// on the loss side (surrogate, clip range, aggregation, KL) and on the
// rollout's advantage side (normalisation, dynamic sampling with refill,
// overlong shaping). Fields a run's YAML writes override the preset's.
type Preset struct {
	Base  string
	Paper string // the paper the preset follows
	Loss  loss.Config
	// Advantage leaves Overlong.MaxLength (and Cache) 0 where the preset
	// derives them from policy.max_response_tokens (see Fill).
	Advantage advantage.Config
}

// OverlongCacheShare is the share of the overlong budget in DAPO's soft
// penalty zone: 4096 of 20480 tokens in the paper.
const OverlongCacheShare = 5 // cache = max_length / 5

// PresetFor returns base's preset, or an error naming the bases.
func PresetFor(base string) (Preset, error) {
	l, err := loss.ConfigFor(base)
	if err != nil {
		return Preset{}, fmt.Errorf("learner.loss.base: %w", err)
	}
	p := Preset{Base: base, Loss: l,
		Advantage: advantage.Config{Method: advantage.GRPO, MaxRefillRounds: advantage.DefaultRefillRounds}}
	switch base {
	case loss.BaseGRPO:
		p.Paper = "GRPO: Shao et al. 2024, DeepSeekMath (arXiv:2402.03300), as the AIPO paper runs it (arXiv:2605.08401, Table 3)"
	case loss.BaseDrGRPO:
		p.Paper = "Dr. GRPO: Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv:2503.20783)"
		p.Advantage.Method = advantage.DrGRPO
	case loss.BaseDAPO:
		p.Paper = "DAPO: Yu et al. 2025 (arXiv:2503.14476)"
		p.Advantage.DynamicSampling = true
		p.Advantage.Overlong = advantage.Overlong{Enabled: true, Factor: 1}
	case loss.BaseGSPO:
		p.Paper = "GSPO: Zheng et al. 2025, Group Sequence Policy Optimization (arXiv:2507.18071)"
	}
	return p, nil
}

// BaseNames lists the bases with a preset, in table order.
func BaseNames() []string {
	return []string{loss.BaseGRPO, loss.BaseDrGRPO, loss.BaseDAPO, loss.BaseGSPO}
}

// ApplyBase sets every algorithm field of c to base's preset: the whole of
// learner.loss but external, omega and kl_external (AIPO's treatment of
// collaborator tokens, which every base keeps), and the whole of
// advantage. Set individual fields after it. Parse calls it before
// decoding the YAML, so that the fields the file writes override the
// preset.
func (c *Config) ApplyBase(base string) error {
	p, err := PresetFor(base)
	if err != nil {
		return err
	}
	l := p.Loss
	l.External, l.Omega, l.KLExternal = c.Learner.Loss.External, c.Learner.Loss.Omega, c.Learner.Loss.KLExternal
	c.Learner.Loss = l
	c.Advantage = p.Advantage
	return nil
}

// peekBase returns learner.loss.base of a YAML document ("" when absent or
// unreadable: the decoder reports what is wrong).
func peekBase(data []byte) string {
	var doc struct {
		Learner struct {
			Loss struct {
				Base string `yaml:"base"`
			} `yaml:"loss"`
		} `yaml:"learner"`
	}
	if yaml.Unmarshal(data, &doc) != nil {
		return ""
	}
	return strings.TrimSpace(doc.Learner.Loss.Base)
}

// fillOverlong derives DAPO's overlong budget from the response budget when
// the configuration leaves it at 0: max_length = policy.max_response_tokens
// and, when cache is 0 too, cache = max_length / 5.
func (c *Config) fillOverlong() {
	o := &c.Advantage.Overlong
	if !o.Enabled || o.MaxLength != 0 {
		return
	}
	o.MaxLength = c.Policy.MaxResponseTokens
	if o.Cache == 0 {
		o.Cache = o.MaxLength / OverlongCacheShare
	}
}

// Algorithm is the resolved algorithm of a run: its base's preset and
// every field of it as the run sets it, marking those that differ from the
// preset. `aipo train` prints it once and writes it beside run.yaml.
type Algorithm struct {
	Base  string `yaml:"base" json:"base"`
	Paper string `yaml:"paper" json:"paper"`
	// Settings are the algorithm's fields by their dotted YAML path, with
	// the value the run uses.
	Settings []Setting `yaml:"settings" json:"settings"`
}

// Setting is one field of the resolved algorithm.
type Setting struct {
	Field string `yaml:"field" json:"field"`
	Value string `yaml:"value" json:"value"`
	// Preset is the preset's value when the run overrides it.
	Preset string `yaml:"preset,omitempty" json:"preset,omitempty"`
}

// Algorithm resolves c's algorithm against its base's preset.
func (c Config) Algorithm() (Algorithm, error) {
	p, err := PresetFor(c.Learner.Loss.Base)
	if err != nil {
		return Algorithm{}, err
	}
	// The preset as this run would resolve it: the derived overlong budget
	// included.
	pc := c
	if err := pc.ApplyBase(c.Learner.Loss.Base); err != nil {
		return Algorithm{}, err
	}
	pc.fillOverlong()
	a := Algorithm{Base: p.Base, Paper: p.Paper}
	for _, f := range algorithmFields {
		v, pv := f.get(c), f.get(pc)
		s := Setting{Field: f.name, Value: f.show(c)}
		if v != pv {
			s.Preset = f.show(pc)
		}
		a.Settings = append(a.Settings, s)
	}
	return a, nil
}

// Overridden lists the fields whose value differs from the preset.
func (a Algorithm) Overridden() []Setting {
	var out []Setting
	for _, s := range a.Settings {
		if s.Preset != "" {
			out = append(out, s)
		}
	}
	return out
}

// String is the one-paragraph summary printed at the start of a run.
func (a Algorithm) String() string {
	var parts []string
	for _, s := range a.Settings {
		if s.Preset != "" {
			parts = append(parts, fmt.Sprintf("%s %s (preset %s)", short(s.Field), s.Value, s.Preset))
		} else {
			parts = append(parts, fmt.Sprintf("%s %s", short(s.Field), s.Value))
		}
	}
	return fmt.Sprintf("algorithm: base %s (%s): %s", a.Base, a.Paper, strings.Join(parts, ", "))
}

func short(field string) string {
	for _, p := range []string{"learner.loss.", "advantage."} {
		if rest, ok := strings.CutPrefix(field, p); ok {
			return rest
		}
	}
	return field
}

// algorithmField reads one algorithm field of a configuration as text.
// used, when set, says whether the field takes part in the configured
// algorithm (the sequence clips only under gspo, ...).
type algorithmField struct {
	name string
	get  func(Config) string
	used func(Config) bool
}

// show is the field's value, or "unused".
func (f algorithmField) show(c Config) string {
	if f.used != nil && !f.used(c) {
		return "unused"
	}
	return f.get(c)
}

func num(x float64) string { return fmt.Sprintf("%g", x) }

func isGSPO(c Config) bool  { return c.Learner.Loss.Base == loss.BaseGSPO }
func notGSPO(c Config) bool { return !isGSPO(c) }

// algorithmFields are the fields a preset sets, in the order they are
// printed.
var algorithmFields = []algorithmField{
	{name: "advantage.method", get: func(c Config) string {
		if c.Advantage.Method == "" {
			return advantage.GRPO
		}
		return c.Advantage.Method
	}},
	{name: "learner.loss.aggregation", get: func(c Config) string { return c.Learner.Loss.Aggregation }},
	{name: "learner.loss.clip_low", get: func(c Config) string { return num(c.Learner.Loss.ClipLow) }, used: notGSPO},
	{name: "learner.loss.clip_high", get: func(c Config) string { return num(c.Learner.Loss.ClipHigh) }, used: notGSPO},
	{name: "learner.loss.seq_clip_low", get: func(c Config) string { return num(c.Learner.Loss.SeqClipLow) }, used: isGSPO},
	{name: "learner.loss.seq_clip_high", get: func(c Config) string { return num(c.Learner.Loss.SeqClipHigh) }, used: isGSPO},
	{name: "learner.loss.kl_coef", get: func(c Config) string { return num(c.Learner.Loss.KLCoef) }},
	{name: "learner.loss.norm_tokens", get: func(c Config) string { return fmt.Sprint(c.Learner.Loss.NormTokens) },
		used: func(c Config) bool { return c.Learner.Loss.Aggregation == loss.AggSeqMeanTokenSumNorm }},
	{name: "advantage.dynamic_sampling", get: func(c Config) string { return fmt.Sprint(c.Advantage.DynamicSampling) }},
	{name: "advantage.max_refill_rounds", get: func(c Config) string { return fmt.Sprint(c.Advantage.MaxRefillRounds) },
		used: func(c Config) bool { return c.Advantage.DynamicSampling }},
	{name: "advantage.overlong", get: func(c Config) string {
		o := c.Advantage.Overlong
		if !o.Enabled {
			return "off"
		}
		f := o.Factor
		if f == 0 {
			f = 1
		}
		return fmt.Sprintf("max_length %d, cache %d, factor %g", o.MaxLength, o.Cache, f)
	}},
}

// PresetTable is the Markdown table of what each preset sets (docs/).
func PresetTable() string {
	var b strings.Builder
	b.WriteString("| field |")
	for _, n := range BaseNames() {
		fmt.Fprintf(&b, " `%s` |", n)
	}
	b.WriteString("\n|---|")
	for range BaseNames() {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	cols := map[string]Config{}
	for _, n := range BaseNames() {
		c := Default()
		if err := c.ApplyBase(n); err != nil {
			panic(err)
		}
		c.Learner.Loss.Base = n
		c.fillOverlong()
		cols[n] = c
	}
	for _, f := range algorithmFields {
		fmt.Fprintf(&b, "| `%s` |", f.name)
		for _, n := range BaseNames() {
			fmt.Fprintf(&b, " %s |", f.show(cols[n]))
		}
		b.WriteString("\n")
	}
	b.WriteString("| paper |")
	for _, n := range BaseNames() {
		p, _ := PresetFor(n)
		fmt.Fprintf(&b, " %s |", p.Paper)
	}
	b.WriteString("\n")
	return b.String()
}
