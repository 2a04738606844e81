package runconfig

import (
	"fmt"
	"slices"
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

// presetRow is one base's preset beside its loss side (loss.ConfigFor,
// from the table of bases in learner/loss): the paper it follows, its
// advantage side, and its note in docs/algorithms.md. PresetFor,
// BaseNames, PresetTable and PresetNotes read the rows.
type presetRow struct {
	base  string
	paper string
	// advantage turns GRPO's normalisation with DefaultRefillRounds into
	// the preset's advantage side (nil: as it is).
	advantage func(a *advantage.Config)
	// note is what the preset is, in a few sentences (Markdown, one
	// paragraph: PresetNotes wraps it).
	note string
}

// presets is one row per base of loss.Bases, in its order.
var presets = []presetRow{
	{
		base:  loss.BaseGRPO,
		paper: "GRPO: Shao et al. 2024, DeepSeekMath (arXiv:2402.03300), as the AIPO paper runs it (arXiv:2605.08401, Table 3)",
		note: "is GRPO as the AIPO paper trains it (Table 3): the decoupled clip 0.2/0.28 and the " +
			"k3 KL term with coefficient 0.001. Its aggregation, Eq. 8, is the mean over trajectories of " +
			"each trajectory's token mean over its own tokens plus the mean over its collaborator tokens; " +
			"without collaborator tokens it is GRPO's per-trajectory token mean. GRPO as first written " +
			"clips symmetrically: set `clip_high: 0.2`.",
	},
	{
		base:      loss.BaseDrGRPO,
		paper:     "Dr. GRPO: Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv:2503.20783)",
		advantage: func(a *advantage.Config) { a.Method = advantage.DrGRPO },
		note: "removes GRPO's two normalisations: advantages are reward minus the group mean (no " +
			"standard deviation) and each trajectory's token sum is divided by a constant " +
			"(`norm_tokens`, the generation budget) instead of its length. It clips symmetrically and " +
			"trains without KL (`beta 0` in the paper's R1-Zero recipe).",
	},
	{
		base:  loss.BaseDAPO,
		paper: "DAPO: Yu et al. 2025 (arXiv:2503.14476)",
		advantage: func(a *advantage.Config) {
			a.DynamicSampling = true
			a.Overlong = advantage.Overlong{Enabled: true, Factor: 1}
		},
		note: "takes the clip-higher range 0.2/0.28, the token-level loss (one mean over every token " +
			"of the step), no KL, the soft overlong penalty, and dynamic sampling: a group whose rewards " +
			"are all equal has no advantage and is dropped, and further prompts are drawn and sampled " +
			"until the step holds `data.batch_size` kept groups (at most `advantage.max_refill_rounds` " +
			"further draws; each draw's size is what is missing scaled by the share kept so far). The " +
			"step's manifest and `metrics.jsonl` say how many prompts were drawn to get there " +
			"(`prompts`), how many groups were kept, dropped, and kept beyond the batch (`groups_surplus`, " +
			"sampled in the last draw but not trained on), and how many draws it took (`draws`). Further " +
			"prompts come from a permutation of the dataset drawn for the step alone, so turning dynamic " +
			"sampling on does not change which prompts each step starts from. When the dataset runs out " +
			"or the draws do, the step trains on the groups it kept and the manifest says so " +
			"(`groups_short`).",
	},
	{
		base:  loss.BaseGSPO,
		paper: "GSPO: Zheng et al. 2025, Group Sequence Policy Optimization (arXiv:2507.18071)",
		note: "replaces each token's ratio by its trajectory's sequence ratio (the geometric mean of " +
			"the token ratios) clipped to [1-3e-4, 1+4e-4], with a sequence-level aggregation.",
	},
}

// PresetFor returns base's preset, or an error naming the bases.
func PresetFor(base string) (Preset, error) {
	l, err := loss.ConfigFor(base)
	if err != nil {
		return Preset{}, fmt.Errorf("learner.loss.base: %w", err)
	}
	i := slices.IndexFunc(presets, func(r presetRow) bool { return r.base == base })
	if i < 0 {
		return Preset{}, fmt.Errorf("learner.loss.base: %q has no preset (runconfig/presets.go): use one of %s", base, strings.Join(BaseNames(), ", "))
	}
	r := presets[i]
	p := Preset{Base: base, Paper: r.paper, Loss: l,
		Advantage: advantage.Config{Method: advantage.GRPO, MaxRefillRounds: advantage.DefaultRefillRounds}}
	if r.advantage != nil {
		r.advantage(&p.Advantage)
	}
	return p, nil
}

// BaseNames lists the bases with a preset, in table order.
func BaseNames() []string {
	out := make([]string, len(presets))
	for i, r := range presets {
		out[i] = r.base
	}
	return out
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
// algorithm (the sequence clips only under a base whose surrogate reads
// them, ...).
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

// readBy says whether the configured base's surrogate reads the
// learner.loss field named field (its yaml name).
func readBy(field string) func(Config) bool {
	return func(c Config) bool { return loss.BaseReads(c.Learner.Loss.Base, field) }
}

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
	{name: "learner.loss.clip_low", get: func(c Config) string { return num(c.Learner.Loss.ClipLow) }, used: readBy("clip_low")},
	{name: "learner.loss.clip_high", get: func(c Config) string { return num(c.Learner.Loss.ClipHigh) }, used: readBy("clip_high")},
	{name: "learner.loss.seq_clip_low", get: func(c Config) string { return num(c.Learner.Loss.SeqClipLow) }, used: readBy("seq_clip_low")},
	{name: "learner.loss.seq_clip_high", get: func(c Config) string { return num(c.Learner.Loss.SeqClipHigh) }, used: readBy("seq_clip_high")},
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
	for _, r := range presets {
		fmt.Fprintf(&b, " %s |", r.paper)
	}
	b.WriteString("\n")
	return b.String()
}

// PresetNotes is the Markdown list of the presets' notes (docs/), each
// wrapped at noteWidth columns.
func PresetNotes() string {
	var b strings.Builder
	for _, r := range presets {
		line := "-"
		for _, w := range strings.Fields(fmt.Sprintf("**%s** %s", r.base, r.note)) {
			if len(line)+1+len(w) > noteWidth {
				b.WriteString(line + "\n")
				line = " "
			}
			line += " " + w
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// noteWidth is the width PresetNotes wraps at.
const noteWidth = 96
