package loss

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var (
	allBases     = Bases()
	allExternals = []string{ExternalAIPO, ExternalRatio, ExternalPlain, ExternalMask, ExternalLUFFY}
	allAggs      = []string{AggEq8, AggTokenMean, AggSeqMeanTokenSum, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm}
)

// allConfigs lists every (base, external, aggregation) combination plus
// option variants. NormTokens is small so that gradients stay well above
// float32 rounding.
func allConfigs() []Config {
	var out []Config
	for _, b := range allBases {
		for _, e := range allExternals {
			for _, a := range allAggs {
				c := DefaultConfig()
				c.Base, c.External, c.Aggregation, c.NormTokens = b, e, a, 50
				out = append(out, c)
			}
		}
		for _, v := range []func(*Config){
			func(c *Config) { c.DualClip = 3 },
			func(c *Config) { c.DualClip, c.External = 3, ExternalRatio },
			func(c *Config) { c.KLExternal, c.KLCoef = true, 0.5 },
			func(c *Config) { c.KLCoef = 0 },
		} {
			c := DefaultConfig()
			c.Base = b
			v(&c)
			out = append(out, c)
		}
		// The rollout correction at every level and mode, with caps that
		// the batches' behaviour ratios fall on both sides of.
		for _, l := range []struct {
			level string
			cap   float64
		}{{CorrectionToken, 1.3}, {CorrectionSequence, 2}, {CorrectionGeometric, 1.05}} {
			for _, m := range []string{CorrectionTruncate, CorrectionMask} {
				c := DefaultConfig()
				c.Base, c.NormTokens = b, 50
				c.RolloutCorrection = RolloutCorrection{Level: l.level, Cap: l.cap, Mode: m}
				out = append(out, c)
				for _, agg := range []string{AggTokenMean, AggSeqMeanTokenMean} {
					c.Aggregation = agg
					out = append(out, c)
				}
			}
		}
	}
	return out
}

type form func(Config, Inputs, []float32) Output

// finiteDifference returns the central difference of f's loss in
// LogProb[i] with the stop-gradient values frozen at detached (nil: the
// live values, i.e. the forward loss itself). The step is measured after
// float32 rounding.
func finiteDifference(cfg Config, in Inputs, detached []float32, i int, h float64, f form) float64 {
	lp := append([]float32(nil), in.LogProb...)
	x := float64(lp[i])
	xp, xm := float32(x+h), float32(x-h)
	eval := func(v float32) float64 {
		lp[i] = v
		in2 := in
		in2.LogProb = lp
		d := detached
		if d == nil {
			d = lp
		}
		return f(cfg, in2, d).Loss
	}
	return (eval(xp) - eval(xm)) / (float64(xp) - float64(xm))
}

// Finite differences are taken in float64 with h = 1e-5: the truncation
// error (h^2 times the third derivative, O(1)) is ~1e-10 and the rounding
// error ~1e-16/h = 1e-11, both far below the float32 rounding of
// GradLogProb (relative 6e-8), so 1e-5 relative plus 1e-9 absolute is a
// loose bound.
const (
	fdStep = 1e-5
	fdRel  = 1e-5
	fdAbs  = 1e-9
)

// TestGradientMatchesFiniteDifferences checks, for every configuration,
// that GradLogProb is the derivative of the loss with the stop-gradient
// values held at their forward values (Eq. 6's sg), by central
// differences of both the fused and the loop form.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	batches := []Inputs{randomBatch(rng, 6, true), randomBatch(rng, 9, true)}
	for _, cfg := range allConfigs() {
		for bi, in := range batches {
			assertKinkFree(t, cfg, in)
			out, err := Compute(cfg, in)
			if err != nil {
				t.Fatalf("%s: %v", caseName(cfg), err)
			}
			frozen := append([]float32(nil), in.LogProb...)
			for name, f := range map[string]form{"fused": computeFused, "loop": computeLoop} {
				worst, wi, wfd := 0.0, -1, 0.0
				for i := range in.LogProb {
					g := float64(out.GradLogProb[i])
					if in.Source[i] == Untrained {
						if g != 0 {
							t.Errorf("%s batch %d: Untrained token %d has gradient %v", caseName(cfg), bi, i, g)
						}
						continue
					}
					fd := finiteDifference(cfg, in, frozen, i, fdStep, f)
					if d := math.Abs(g - fd); d > fdRel*math.Abs(fd)+fdAbs && d > worst {
						worst, wi, wfd = d, i, fd
					}
				}
				if wi >= 0 {
					t.Errorf("%s batch %d (%s form): GradLogProb[%d] = %.9g but the finite difference is %.9g (worst difference %.3g; source %v)",
						caseName(cfg), bi, name, wi, out.GradLogProb[wi], wfd, worst, in.Source[wi])
				}
			}
		}
	}
}

// TestGSPOEqualsSequenceObjective: under Eq. 8's per-trajectory mean with
// advantages constant per trajectory, GSPO's token form has the gradient of
// the sequence-level objective itself (no frozen values).
func TestGSPOEqualsSequenceObjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	in := randomBatch(rng, 8, true)
	for _, ext := range []string{ExternalMask, ExternalPlain} {
		cfg := DefaultConfig()
		cfg.Base, cfg.External, cfg.KLCoef = BaseGSPO, ext, 0
		out, err := Compute(cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in.LogProb {
			if in.Source[i] != Internal {
				continue
			}
			fd := finiteDifference(cfg, in, nil, i, fdStep, computeFused)
			if g := float64(out.GradLogProb[i]); math.Abs(g-fd) > fdRel*math.Abs(fd)+fdAbs {
				t.Errorf("gspo/%s: GradLogProb[%d] = %.9g, finite difference of the sequence objective %.9g", ext, i, g, fd)
			}
		}
	}
}

// TestLoopAndFusedAgree compares the two forms on random batches that do
// not avoid kinks. Both work in float64 but order sums differently, so the
// scalars agree to ~1e-15 relative; the float32 gradients may differ by one
// rounding.
func TestLoopAndFusedAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 20; trial++ {
		in := randomBatch(rng, 1+rng.IntN(12), false)
		for _, cfg := range allConfigs() {
			fused, err := Compute(cfg, in)
			if err != nil {
				t.Fatalf("%s: %v", caseName(cfg), err)
			}
			loop := computeLoop(cfg, in, in.LogProb)
			grad := make([]float64, len(loop.GradLogProb))
			for i, g := range loop.GradLogProb {
				grad[i] = float64(g)
			}
			compareOutput(t, fmt.Sprintf("trial %d %s", trial, caseName(cfg)), fused, loop.Loss, grad, loop.Metrics, 1e-12, 1e-15, 2.5e-7, 1e-12)
		}
	}
}

// TestExternalGradientFloor is the paper's key property (Eq. 7): an
// External token the policy finds very unlikely still gets a gradient of
// magnitude omega*|A| under "aipo", against pi*|A| under "plain" and
// exactly 0 under "mask".
func TestExternalGradientFloor(t *testing.T) {
	const pi = 1e-6
	for _, a := range []float32{1.5, -0.7} {
		// One trajectory: two prompt tokens and one collaborator token, so
		// the Eq. 8 weight of that token is 1.
		in := Inputs{
			LogProb:    []float32{0, 0, float32(math.Log(pi))},
			OldLogProb: []float32{0, 0, float32(math.Log(pi))},
			RefLogProb: []float32{0, 0, -1},
			Advantage:  []float32{a, a, a},
			Source:     []Source{Untrained, Untrained, External},
			Seq:        []int32{0, 0, 0},
		}
		cfg := DefaultConfig()
		want := map[string]float64{
			ExternalAIPO:  -cfg.Omega * float64(a),
			ExternalPlain: -pi * float64(a),
			ExternalMask:  0,
		}
		for ext, w := range want {
			cfg.External = ext
			out, err := Compute(cfg, in)
			if err != nil {
				t.Fatal(err)
			}
			g := float64(out.GradLogProb[2])
			if ext == ExternalMask {
				if g != 0 || out.Loss != 0 {
					t.Errorf("mask, A=%v: gradient %v and loss %v, want exactly 0", a, g, out.Loss)
				}
				continue
			}
			if math.Abs(g-w) > 1e-6*math.Abs(w) {
				t.Errorf("%s, A=%v, pi=%v: gradient %.9g, want %.9g", ext, a, pi, g, w)
			}
			// The forward value keeps the coefficient's meaning:
			// max(pi, omega) for aipo, pi for plain.
			if math.Abs(out.Loss-w) > 1e-6*math.Abs(w) {
				t.Errorf("%s, A=%v: loss %.9g, want %.9g", ext, a, out.Loss, w)
			}
		}
		if math.Abs(want[ExternalAIPO]/want[ExternalPlain]) < 1e4 {
			t.Errorf("aipo's gradient is not far above plain's for a tiny pi")
		}
	}
}

// TestMaskEqualsUntrained: masking External tokens is the same as not
// training on them at all.
func TestMaskEqualsUntrained(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	in := randomBatch(rng, 10, false)
	untr := in
	untr.Source = append([]Source(nil), in.Source...)
	for i, s := range untr.Source {
		if s == External {
			untr.Source[i] = Untrained
		}
	}
	for _, agg := range allAggs {
		cfg := DefaultConfig()
		cfg.External, cfg.Aggregation = ExternalMask, agg
		a, err := Compute(cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Compute(cfg, untr)
		if err != nil {
			t.Fatal(err)
		}
		if a.Loss != b.Loss {
			t.Errorf("%s: masked loss %v, with External tokens untrained %v", agg, a.Loss, b.Loss)
		}
		for i := range a.GradLogProb {
			if a.GradLogProb[i] != b.GradLogProb[i] {
				t.Fatalf("%s: GradLogProb[%d] masked %v, untrained %v", agg, i, a.GradLogProb[i], b.GradLogProb[i])
			}
		}
	}
}

func TestEmptyLossIsZero(t *testing.T) {
	in := Inputs{LogProb: []float32{0, 0}, OldLogProb: []float32{0, 0}, RefLogProb: []float32{0, 0},
		Advantage: []float32{1, 1}, Source: []Source{Untrained, Untrained}, Seq: []int32{0, 1}}
	for _, agg := range allAggs {
		cfg := DefaultConfig()
		cfg.Aggregation = agg
		out, err := Compute(cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		if out.Loss != 0 || out.GradLogProb[0] != 0 || out.Metrics[MetricTrajectories] != 0 {
			t.Errorf("%s: a batch without loss tokens gave loss %v, trajectories %v", agg, out.Loss, out.Metrics[MetricTrajectories])
		}
	}
}

// TestMicroBatchesCombine: splitting a batch at trajectory boundaries and
// weighting each part by Count/total reproduces the whole-batch result.
func TestMicroBatchesCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 34))
	in := randomBatch(rng, 11, false)
	// Cut at the first token of the sixth trajectory.
	cut, seen := 0, 0
	for i := 1; i < len(in.Seq); i++ {
		if in.Seq[i] != in.Seq[i-1] {
			if seen++; seen == 5 {
				cut = i
				break
			}
		}
	}
	part := func(lo, hi int) Inputs {
		return Inputs{LogProb: in.LogProb[lo:hi], OldLogProb: in.OldLogProb[lo:hi], RefLogProb: in.RefLogProb[lo:hi], BehaviorLogProb: in.BehaviorLogProb[lo:hi],
			Advantage: in.Advantage[lo:hi], Source: in.Source[lo:hi], Seq: in.Seq[lo:hi], Entropy: in.Entropy[lo:hi]}
	}
	for _, cfg := range allConfigs() {
		whole, err := Compute(cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := Compute(cfg, part(0, cut))
		b, _ := Compute(cfg, part(cut, len(in.Seq)))
		total := a.Count(cfg) + b.Count(cfg)
		wa, wb := a.Count(cfg)/total, b.Count(cfg)/total
		if loss := wa*a.Loss + wb*b.Loss; math.Abs(loss-whole.Loss) > 1e-12*math.Abs(whole.Loss)+1e-15 {
			t.Errorf("%s: combined micro-batch loss %.17g, whole batch %.17g", caseName(cfg), loss, whole.Loss)
		}
		for i, g := range whole.GradLogProb {
			var c float64
			if i < cut {
				c = wa * float64(a.GradLogProb[i])
			} else {
				c = wb * float64(b.GradLogProb[i-cut])
			}
			if math.Abs(c-float64(g)) > 1e-6*math.Abs(float64(g))+1e-12 {
				t.Fatalf("%s: combined GradLogProb[%d] = %.9g, whole batch %.9g", caseName(cfg), i, c, g)
			}
		}
	}
}
