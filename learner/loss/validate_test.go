package loss

import (
	"errors"
	"math"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func smallInputs() Inputs {
	return Inputs{
		LogProb:    []float32{0, -0.5, -1, -2, -0.3},
		OldLogProb: []float32{0, -0.4, -1.1, -2, -0.3},
		RefLogProb: []float32{0, -0.6, -1, -2, -0.2},
		Advantage:  []float32{1, 1, 1, -1, -1},
		Source:     []Source{Untrained, Internal, External, Internal, External},
		Seq:        []int32{0, 0, 0, 1, 1},
	}
}

func TestInvalidInputs(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	cases := []struct {
		name   string
		edit   func(*Inputs, *Config)
		field  string
		index  int
		phrase string
	}{
		{"short advantage", func(in *Inputs, _ *Config) { in.Advantage = in.Advantage[:4] }, "Advantage", -1, "has 4 entries but LogProb has 5"},
		{"short seq", func(in *Inputs, _ *Config) { in.Seq = in.Seq[:2] }, "Seq", -1, "one entry per token"},
		{"missing ref with KL", func(in *Inputs, _ *Config) { in.RefLogProb = nil }, "RefLogProb", -1, "has 0 entries"},
		{"short entropy", func(in *Inputs, _ *Config) { in.Entropy = []float32{1} }, "Entropy", -1, "has 1 entries"},
		{"NaN logprob", func(in *Inputs, _ *Config) { in.LogProb[3] = nan }, "LogProb", 3, "NaN"},
		{"Inf advantage", func(in *Inputs, _ *Config) { in.Advantage[1] = inf }, "Advantage", 1, "+Inf"},
		{"NaN old on internal", func(in *Inputs, _ *Config) { in.OldLogProb[1] = nan }, "OldLogProb", 1, "NaN"},
		{"NaN ref on internal", func(in *Inputs, _ *Config) { in.RefLogProb[3] = nan }, "RefLogProb", 3, "NaN"},
		{"NaN old on external under ratio", func(in *Inputs, c *Config) { in.OldLogProb[2] = nan; c.External = ExternalRatio }, "OldLogProb", 2, "NaN"},
		{"NaN external logprob under mask", func(in *Inputs, c *Config) { in.LogProb[4] = nan; c.External = ExternalMask }, "LogProb", 4, "NaN"},
		{"bad source", func(in *Inputs, _ *Config) { in.Source[2] = 7 }, "Source", 2, "is 7"},
		{"seq decreasing", func(in *Inputs, _ *Config) { in.Seq[4] = 0; in.Seq[3] = 2 }, "Seq", 4, "non-decreasing"},
		{"seq negative", func(in *Inputs, _ *Config) { in.Seq[0] = -1 }, "Seq", 0, ">= 0"},
		{"behaviour missing with correction", func(in *Inputs, c *Config) {
			in.BehaviorLogProb = nil
			c.RolloutCorrection.Level = CorrectionToken
		}, "BehaviorLogProb", -1, "needs the sampler's log-probabilities"},
		{"behaviour short with correction", func(in *Inputs, c *Config) {
			in.BehaviorLogProb = []float32{0, -0.4}
			c.RolloutCorrection.Level = CorrectionSequence
		}, "BehaviorLogProb", -1, "has 2 entries but LogProb has 5"},
		{"NaN behaviour on internal", func(in *Inputs, c *Config) {
			in.BehaviorLogProb = []float32{0, nan, 0, -2, 0}
			c.RolloutCorrection.Level = CorrectionGeometric
		}, "BehaviorLogProb", 1, "NaN"},
	}
	for _, c := range cases {
		in, cfg := smallInputs(), DefaultConfig()
		// Copy slices so edits do not leak between cases.
		in.LogProb = append([]float32(nil), in.LogProb...)
		c.edit(&in, &cfg)
		_, err := Compute(cfg, in)
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Errorf("%s: error %v, want an *InputError", c.name, err)
			continue
		}
		if ie.Field != c.field || ie.Index != c.index || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("%s: got %q (field %s, index %d), want field %s index %d mentioning %q", c.name, err, ie.Field, ie.Index, c.field, c.index, c.phrase)
		}
	}

	// Values the loss does not read are not checked.
	in, cfg := smallInputs(), DefaultConfig()
	in.LogProb[0], in.OldLogProb[0], in.OldLogProb[2], in.RefLogProb[2] = nan, nan, nan, inf
	if _, err := Compute(cfg, in); err != nil {
		t.Errorf("NaN in unread positions: %v", err)
	}
	cfg.KLCoef = 0
	in.RefLogProb = nil
	if _, err := Compute(cfg, in); err != nil {
		t.Errorf("no RefLogProb with KL off: %v", err)
	}
	// Behaviour log-probs are read only with the correction on, and then
	// only those of policy tokens.
	in.BehaviorLogProb = nil
	if _, err := Compute(cfg, in); err != nil {
		t.Errorf("no BehaviorLogProb with the correction off: %v", err)
	}
	in.BehaviorLogProb = []float32{nan, -0.5, inf, -2, nan}
	cfg.RolloutCorrection.Level = CorrectionToken
	if _, err := Compute(cfg, in); err != nil {
		t.Errorf("NaN behaviour log-probs of non-policy tokens: %v", err)
	}
}

func TestInvalidConfig(t *testing.T) {
	cases := []struct {
		edit   func(*Config)
		phrase string
	}{
		{func(c *Config) { c.Omega = 0 }, "Omega = 0 is outside (0, 1]"},
		{func(c *Config) { c.Omega = 1.5 }, "Omega = 1.5"},
		{func(c *Config) { c.Omega = math.NaN() }, "Omega = NaN"},
		{func(c *Config) { c.Base = "ppo2" }, `Base "ppo2" is unknown`},
		{func(c *Config) { c.External = "drop" }, `External "drop" is unknown`},
		{func(c *Config) { c.Aggregation = "mean" }, `Aggregation "mean" is unknown`},
		{func(c *Config) { c.Aggregation, c.NormTokens = AggSeqMeanTokenSumNorm, 0 }, "NormTokens = 0"},
		{func(c *Config) { c.ClipLow = 1 }, "ClipLow = 1"},
		{func(c *Config) { c.ClipHigh = -0.1 }, "ClipHigh = -0.1"},
		{func(c *Config) { c.Base, c.SeqClipLow = BaseGSPO, -1 }, "SeqClipLow = -1"},
		{func(c *Config) { c.DualClip = 0.5 }, "DualClip = 0.5"},
		{func(c *Config) { c.KLCoef = -1 }, "KLCoef = -1"},
		{func(c *Config) { c.RolloutCorrection.Level = "seq" }, `RolloutCorrection.Level "seq" is unknown`},
		{func(c *Config) { c.RolloutCorrection.Level, c.RolloutCorrection.Cap = CorrectionToken, 1 }, "RolloutCorrection.Cap = 1 must be finite and > 1"},
		{func(c *Config) { c.RolloutCorrection.Level, c.RolloutCorrection.Cap = CorrectionToken, math.Inf(1) }, "RolloutCorrection.Cap = +Inf"},
		{func(c *Config) { c.RolloutCorrection.Level, c.RolloutCorrection.Mode = CorrectionToken, "clip" }, `RolloutCorrection.Mode "clip" is unknown`},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		c.edit(&cfg)
		_, err := Compute(cfg, smallInputs())
		if err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("got error %v, want one mentioning %q", err, c.phrase)
		}
	}
	if _, err := ConfigFor("ppo2"); err == nil {
		t.Error("ConfigFor(ppo2) did not fail")
	}
}

// TestDefaultConfigIsPaper pins DefaultConfig to the paper's Table 3 and
// checks the yaml field names a run configuration uses.
func TestDefaultConfigIsPaper(t *testing.T) {
	c := DefaultConfig()
	if c.ClipLow != 0.2 || c.ClipHigh != 0.28 || c.Omega != 0.2 || c.KLCoef != 0.001 ||
		c.External != ExternalAIPO || c.Aggregation != AggEq8 || c.KLExternal || c.DualClip != 0 {
		t.Errorf("DefaultConfig() = %+v differs from the paper's Table 3 / Eq. 8", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, b := range allBases {
		bc, err := ConfigFor(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := bc.Validate(); err != nil {
			t.Errorf("ConfigFor(%s): %v", b, err)
		}
	}
	if c.RolloutCorrection.On() {
		t.Errorf("DefaultConfig() turns the rollout correction on: %+v", c.RolloutCorrection)
	}
	src := "base: gspo\nexternal: plain\nomega: 0.1\nkl_coef: 0.01\nkl_external: true\naggregation: token-mean\nseq_clip_low: 0.001\nclip_high: 0.3\ndual_clip: 3\nnorm_tokens: 10\nrollout_correction: {level: geometric, cap: 1.001}\n"
	got := DefaultConfig()
	if err := yaml.Unmarshal([]byte(src), &got); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Base, want.External, want.Omega, want.KLCoef, want.KLExternal = BaseGSPO, ExternalPlain, 0.1, 0.01, true
	want.Aggregation, want.SeqClipLow, want.ClipHigh, want.DualClip, want.NormTokens = AggTokenMean, 0.001, 0.3, 3, 10
	want.RolloutCorrection = RolloutCorrection{Level: CorrectionGeometric, Cap: 1.001, Mode: CorrectionTruncate}
	if got != want {
		t.Errorf("yaml:\n%s\ngave %+v, want %+v", src, got, want)
	}
}

func TestOverlongPenaltyShape(t *testing.T) {
	// Monotone non-increasing in length, 0 well inside, -1 beyond.
	prev := float32(1)
	for l := 0; l <= 130; l++ {
		p := OverlongPenalty(l, 100, 25)
		if p > prev || p < -1 || p > 0 {
			t.Fatalf("OverlongPenalty(%d, 100, 25) = %v after %v", l, p, prev)
		}
		prev = p
	}
	if OverlongPenalty(75, 100, 25) != 0 || OverlongPenalty(101, 100, 25) != -1 || OverlongPenalty(100, 100, 25) != -1 {
		t.Errorf("OverlongPenalty boundaries: %v %v %v", OverlongPenalty(75, 100, 25), OverlongPenalty(101, 100, 25), OverlongPenalty(100, 100, 25))
	}
}
