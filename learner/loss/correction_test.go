package loss

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// With the sampler's log-probabilities equal to the learner's (rho = 1),
// the correction changes nothing, at every level and in both modes: the
// loss and every gradient are those of the uncorrected loss, bit for bit.
func TestRolloutCorrectionIdentityWhenOnPolicy(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	in := randomBatch(rng, 10, false)
	in.BehaviorLogProb = append([]float32(nil), in.OldLogProb...)
	for _, cfg := range allConfigs() {
		if !cfg.RolloutCorrection.On() {
			continue
		}
		off := cfg
		off.RolloutCorrection = DefaultRolloutCorrection()
		a, err := Compute(cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Compute(off, in)
		if err != nil {
			t.Fatal(err)
		}
		if a.Loss != b.Loss {
			t.Errorf("%s: loss %v with rho = 1, %v without the correction", caseName(cfg), a.Loss, b.Loss)
		}
		for i := range a.GradLogProb {
			if a.GradLogProb[i] != b.GradLogProb[i] {
				t.Fatalf("%s: GradLogProb[%d] %v with rho = 1, %v without the correction", caseName(cfg), i, a.GradLogProb[i], b.GradLogProb[i])
			}
		}
		if a.Metrics[MetricISRatioMean] != 1 || a.Metrics[MetricISWeightMean] != 1 || a.Metrics[MetricISMaskedFrac] != 0 {
			t.Errorf("%s: correction metrics %v, want ratio and weight 1, nothing masked", caseName(cfg), a.Metrics)
		}
	}
}

// A hand-worked token-level case: one trajectory of two policy tokens with
// the same advantage, Eq. 8 aggregation, pi = pi_old (ratio 1, inside the
// clip), no KL. Uncorrected, each token's gradient is -A/2. With rho_1 =
// e^0.8 > 2 = Cap and rho_2 = e^-0.25, truncate gives the weights 2 and
// e^-0.25; mask leaves token 1 out (rho_1 > Cap), so token 2 alone carries
// the trajectory with weight e^-0.25 and gradient -A*e^-0.25. Sequence
// level uses exp(0.8 - 0.25) for both (inside the cap); geometric uses
// exp(0.275).
func TestRolloutCorrectionByHand(t *testing.T) {
	const a = 1.5
	in := Inputs{
		LogProb:         []float32{0, -1, -2},
		OldLogProb:      []float32{0, -1, -2},
		BehaviorLogProb: []float32{0, -1.8, -1.75},
		Advantage:       []float32{a, a, a},
		Source:          []Source{Untrained, Internal, Internal},
		Seq:             []int32{0, 0, 0},
	}
	w2 := math.Exp(-0.25)
	cases := []struct {
		level, mode string
		grad        [2]float64
		masked      float64
	}{
		{CorrectionToken, CorrectionTruncate, [2]float64{-a / 2 * 2, -a / 2 * w2}, 0},
		{CorrectionToken, CorrectionMask, [2]float64{0, -a * w2}, 0.5},
		{CorrectionSequence, CorrectionTruncate, [2]float64{-a / 2 * math.Exp(0.55), -a / 2 * math.Exp(0.55)}, 0},
		{CorrectionGeometric, CorrectionMask, [2]float64{-a / 2 * math.Exp(0.275), -a / 2 * math.Exp(0.275)}, 0},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.KLCoef = 0
		cfg.RolloutCorrection = RolloutCorrection{Level: c.level, Cap: 2, Mode: c.mode}
		for name, out := range map[string]Output{"fused": mustCompute(t, cfg, in), "loop": computeLoop(cfg, in, in.LogProb)} {
			for j, want := range c.grad {
				if g := float64(out.GradLogProb[j+1]); math.Abs(g-want) > 1e-7*math.Abs(want)+1e-12 {
					t.Errorf("%s/%s (%s): GradLogProb[%d] = %.9g, want %.9g", c.level, c.mode, name, j+1, g, want)
				}
			}
			// With ratio 1 the loss is -A times the mean weight of the
			// tokens in the loss.
			if wantLoss := c.grad[0] + c.grad[1]; math.Abs(out.Loss-wantLoss) > 1e-7*math.Abs(wantLoss) {
				t.Errorf("%s/%s (%s): loss %.9g, want %.9g", c.level, c.mode, name, out.Loss, wantLoss)
			}
			if out.Metrics[MetricISMaskedFrac] != c.masked {
				t.Errorf("%s/%s (%s): masked fraction %v, want %v", c.level, c.mode, name, out.Metrics[MetricISMaskedFrac], c.masked)
			}
		}
	}
}

// Mask mode with every policy token outside the bounds trains as if those
// tokens were not there: the same loss and gradients as with them
// Untrained.
func TestRolloutCorrectionMaskAllEqualsUntrained(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	in := randomBatch(rng, 8, false)
	far := append([]float32(nil), in.OldLogProb...)
	untr := in
	untr.Source = append([]Source(nil), in.Source...)
	for i, s := range in.Source {
		if s == Internal {
			far[i] = in.OldLogProb[i] - 3 // rho = e^3, above any cap used here
			untr.Source[i] = Untrained
		}
	}
	in.BehaviorLogProb = far
	for _, agg := range allAggs {
		cfg := DefaultConfig()
		cfg.Aggregation, cfg.NormTokens = agg, 50
		cfg.RolloutCorrection = RolloutCorrection{Level: CorrectionToken, Cap: 2, Mode: CorrectionMask}
		a := mustCompute(t, cfg, in)
		cfg.RolloutCorrection = DefaultRolloutCorrection()
		b := mustCompute(t, cfg, untr)
		if math.Abs(a.Loss-b.Loss) > 1e-15*math.Abs(b.Loss) {
			t.Errorf("%s: loss %v with every policy token masked, %v with them untrained", agg, a.Loss, b.Loss)
		}
		for i := range a.GradLogProb {
			if a.GradLogProb[i] != b.GradLogProb[i] {
				t.Fatalf("%s: GradLogProb[%d] %v masked, %v untrained", agg, i, a.GradLogProb[i], b.GradLogProb[i])
			}
		}
		if a.Metrics[MetricISMaskedFrac] != 1 || a.Metrics[MetricTokensInternal] != b.Metrics[MetricTokensUntrained]-float64(countSource(in.Source, Untrained)) {
			t.Errorf("%s: metrics %v", agg, a.Metrics)
		}
	}
}

func countSource(src []Source, s Source) int {
	n := 0
	for _, x := range src {
		if x == s {
			n++
		}
	}
	return n
}

func mustCompute(t *testing.T, cfg Config, in Inputs) Output {
	t.Helper()
	out, err := Compute(cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mask_high (decoupled PPO) leaves out only the tokens whose ratio is above
// the cap: a token with rho = e^-1.5 (below 1/cap) stays, weighted by rho,
// where mask mode drops it; a token with rho = e^0.8 (above cap 2) is
// dropped by both.
func TestRolloutCorrectionMaskHigh(t *testing.T) {
	const a = 1.5
	in := Inputs{
		LogProb:         []float32{-1, -2},
		OldLogProb:      []float32{-1, -2},
		BehaviorLogProb: []float32{-1.8, -0.5},
		Advantage:       []float32{a, a},
		Source:          []Source{Internal, Internal},
		Seq:             []int32{0, 0},
	}
	low := math.Exp(-1.5)
	for _, c := range []struct {
		mode   string
		grad   [2]float64
		masked float64
	}{
		{CorrectionMaskHigh, [2]float64{0, -a * low}, 0.5},
		{CorrectionMask, [2]float64{0, 0}, 1},
	} {
		cfg := DefaultConfig()
		cfg.KLCoef = 0
		cfg.RolloutCorrection = RolloutCorrection{Level: CorrectionToken, Cap: 2, Mode: c.mode}
		for name, out := range map[string]Output{"fused": mustCompute(t, cfg, in), "loop": computeLoop(cfg, in, in.LogProb)} {
			for j, want := range c.grad {
				if g := float64(out.GradLogProb[j]); math.Abs(g-want) > 1e-7*math.Abs(want)+1e-12 {
					t.Errorf("%s (%s): GradLogProb[%d] = %.9g, want %.9g", c.mode, name, j, g, want)
				}
			}
			if out.Metrics[MetricISMaskedFrac] != c.masked {
				t.Errorf("%s (%s): masked fraction %v, want %v", c.mode, name, out.Metrics[MetricISMaskedFrac], c.masked)
			}
		}
	}
	if err := (RolloutCorrection{Level: CorrectionToken, Cap: 2, Mode: "mask_low"}).Validate(); err == nil || !strings.Contains(err.Error(), "mask_high") {
		t.Errorf("unknown mode: %v, want an error listing mask_high", err)
	}
}
