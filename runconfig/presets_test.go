package runconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/transforms/advantage"
)

// presetCase is what one base must resolve to, written from its paper.
type presetCase struct {
	base      string
	method    string
	agg       string
	clipLow   float64
	clipHigh  float64
	seqLow    float64
	seqHigh   float64
	kl        float64
	dynamic   bool
	overlong  bool
	refill    int
	paperCite string
}

var presetCases = []presetCase{
	// GRPO as the AIPO paper runs it (Table 3): decoupled clip 0.2/0.28,
	// KL 0.001, Eq. 8 (GRPO's per-trajectory token mean without external
	// tokens), std-normalised group advantages.
	{base: "grpo", method: "grpo", agg: "eq8", clipLow: 0.2, clipHigh: 0.28, seqLow: 3e-4, seqHigh: 4e-4, kl: 0.001,
		refill: 8, paperCite: "2402.03300"},
	// Dr. GRPO: no std, no length normalisation, PPO's clip, beta 0.
	{base: "drgrpo", method: "drgrpo", agg: "seq-mean-token-sum-norm", clipLow: 0.2, clipHigh: 0.2, seqLow: 3e-4, seqHigh: 4e-4, kl: 0,
		refill: 8, paperCite: "2503.20783"},
	// DAPO: clip-higher, token-level loss, dynamic sampling, overlong
	// shaping, no KL.
	{base: "dapo", method: "grpo", agg: "token-mean", clipLow: 0.2, clipHigh: 0.28, seqLow: 3e-4, seqHigh: 4e-4, kl: 0,
		dynamic: true, overlong: true, refill: 8, paperCite: "2503.14476"},
	// GSPO: sequence ratio clipped 3e-4/4e-4, sequence-level aggregation.
	{base: "gspo", method: "grpo", agg: "seq-mean-token-mean", clipLow: 0.2, clipHigh: 0.28, seqLow: 3e-4, seqHigh: 4e-4, kl: 0.001,
		refill: 8, paperCite: "2507.18071"},
}

func parseText(t *testing.T, text string) Config {
	t.Helper()
	c, err := Parse([]byte(text), "test.yaml", "")
	if err != nil {
		t.Fatalf("%s\n%v", text, err)
	}
	return c
}

// TestPresets resolves every base from a file that names only the base and
// checks every algorithm field against the table above.
func TestPresets(t *testing.T) {
	for _, pc := range presetCases {
		c := parseText(t, "run: {dir: r}\ndata: {demo: true}\npolicy: {max_response_tokens: 1000}\nlearner: {loss: {base: "+pc.base+"}}\n")
		l, a := c.Learner.Loss, c.Advantage
		if l.Base != pc.base || a.Method != pc.method || l.Aggregation != pc.agg || l.ClipLow != pc.clipLow || l.ClipHigh != pc.clipHigh ||
			l.SeqClipLow != pc.seqLow || l.SeqClipHigh != pc.seqHigh || l.KLCoef != pc.kl || a.DynamicSampling != pc.dynamic ||
			a.Overlong.Enabled != pc.overlong || a.MaxRefillRounds != pc.refill {
			t.Errorf("base %s resolved to loss %+v, advantage %+v; want %+v", pc.base, l, a, pc)
		}
		// Every preset keeps AIPO's treatment of collaborator tokens.
		if l.External != loss.ExternalAIPO || l.Omega != 0.2 {
			t.Errorf("base %s: external %s omega %v, want aipo 0.2", pc.base, l.External, l.Omega)
		}
		if pc.overlong {
			// DAPO's budget follows the response budget: 1000 tokens, the
			// last fifth (200) the soft zone (4096 of 20480 in the paper).
			if o := a.Overlong; o.MaxLength != 1000 || o.Cache != 200 || o.Factor != 1 {
				t.Errorf("base %s: overlong %+v, want max_length 1000 cache 200 factor 1", pc.base, o)
			}
		}
		alg, err := c.Algorithm()
		if err != nil {
			t.Fatal(err)
		}
		if len(alg.Overridden()) != 0 {
			t.Errorf("base %s alone overrides %v", pc.base, alg.Overridden())
		}
		if !strings.Contains(alg.Paper, pc.paperCite) {
			t.Errorf("base %s cites %q, want arXiv %s", pc.base, alg.Paper, pc.paperCite)
		}
	}
}

// TestPresetOverrides checks that fields written beside the base override
// the preset, field by field, and that the resolved algorithm names them.
func TestPresetOverrides(t *testing.T) {
	c := parseText(t, `run: {dir: r}
data: {demo: true}
advantage: {dynamic_sampling: false, overlong: {enabled: true, max_length: 50, cache: 0}}
learner: {loss: {base: dapo, clip_high: 0.3, aggregation: eq8}}
`)
	l, a := c.Learner.Loss, c.Advantage
	if l.ClipHigh != 0.3 || l.Aggregation != loss.AggEq8 || a.DynamicSampling {
		t.Errorf("overrides lost: loss %+v, advantage %+v", l, a)
	}
	// Fields not written keep the preset's values.
	if l.KLCoef != 0 || l.ClipLow != 0.2 || a.Method != advantage.GRPO || a.MaxRefillRounds != advantage.DefaultRefillRounds {
		t.Errorf("preset values lost: loss %+v, advantage %+v", l, a)
	}
	// An explicit budget is kept as written: cache 0 is the hard penalty.
	if a.Overlong.MaxLength != 50 || a.Overlong.Cache != 0 {
		t.Errorf("overlong %+v, want max_length 50 cache 0 as written", a.Overlong)
	}
	alg, err := c.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Setting{}
	for _, s := range alg.Overridden() {
		got[s.Field] = s
	}
	for field, preset := range map[string]string{
		"learner.loss.clip_high":     "0.28",
		"learner.loss.aggregation":   "token-mean",
		"advantage.dynamic_sampling": "true",
		"advantage.overlong":         "max_length 16384, cache 3276, factor 1",
	} {
		if got[field].Preset != preset {
			t.Errorf("resolved algorithm: %s overridden from %q, want from %q (all: %v)", field, got[field].Preset, preset, alg.Overridden())
		}
	}
	if len(got) != 4 {
		t.Errorf("overridden fields %v, want exactly the four written", alg.Overridden())
	}
	if s := alg.String(); !strings.Contains(s, "clip_high 0.3 (preset 0.28)") || !strings.Contains(s, "base dapo") {
		t.Errorf("summary %q", s)
	}
	if _, err := Parse([]byte("run: {dir: r}\ndata: {demo: true}\nlearner: {loss: {base: ppo}}\n"), "bad.yaml", ""); err == nil ||
		!strings.Contains(err.Error(), "grpo, drgrpo, dapo, gspo") {
		t.Errorf("unknown base: %v", err)
	}
}

// TestDemoResolvesAsBefore pins the algorithm of the embedded demo
// configurations to the settings they trained with before presets
// existed: the grpo preset must not move the demo's bits.
func TestDemoResolvesAsBefore(t *testing.T) {
	for name, kl := range map[string]float64{"demo.yaml": 0, "quick.yaml": 0} {
		raw, err := os.ReadFile(filepath.Join("..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		c := parseText(t, string(raw))
		want := loss.DefaultConfig()
		want.KLCoef = kl
		if c.Learner.Loss != want {
			t.Errorf("%s: loss %+v, want %+v", name, c.Learner.Loss, want)
		}
		a := c.Advantage
		if a.Method != advantage.GRPO || a.Epsilon != 0 || a.PopulationStd || a.DynamicSampling || a.Overlong.Enabled {
			t.Errorf("%s: advantage %+v, want plain GRPO without dynamic sampling or overlong shaping", name, a)
		}
	}
}

// TestPresetTableDocumented checks that docs/algorithms.md holds the table
// PresetTable generates and the notes PresetNotes does (-update rewrites
// them; the flag is the one Beam's Dataflow runner, which runconfig
// imports, defines).
func TestPresetTableDocumented(t *testing.T) {
	testtools.GeneratedSection(t, "docs/algorithms.md", "presets", PresetTable())
	testtools.GeneratedSection(t, "docs/algorithms.md", "preset-notes", PresetNotes())
}

// TestEveryBaseHasAPreset checks that the presets are the loss's bases, in
// its order, each with a paper, a note and a case in presetCases.
func TestEveryBaseHasAPreset(t *testing.T) {
	if got, want := BaseNames(), loss.Bases(); !slices.Equal(got, want) {
		t.Errorf("presets for %v, but the bases are %v: one row per base, in the same order", got, want)
	}
	cases := map[string]bool{}
	for _, pc := range presetCases {
		cases[pc.base] = true
	}
	for _, r := range presets {
		if r.paper == "" || r.note == "" {
			t.Errorf("preset %s: a paper and a note are required", r.base)
		}
		if !cases[r.base] {
			t.Errorf("preset %s has no case in presetCases (what its paper sets)", r.base)
		}
	}
}
