package loss

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var (
	allBases     = []string{BaseGRPO, BaseDrGRPO, BaseDAPO, BaseGSPO}
	allExternals = []string{ExternalAIPO, ExternalRatio, ExternalPlain, ExternalMask}
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
	}
	return out
}

// Kinks of the per-token terms, as log-ratios (log pi - log pi_old) or log
// probabilities. kinkFreeBatch keeps every token at least kinkMargin away
// from them, and the GSPO sequence log-ratios at least seqKinkMargin away
// from GSPO's clip bounds.
const (
	kinkMargin    = 0.02
	seqKinkMargin = 1e-4
)

func tokenKinks(c Config) []float64 {
	return []float64{math.Log(1 - c.ClipLow), math.Log(1 + c.ClipHigh), math.Log(3)}
}

// randomBatch makes nTraj trajectories of mixed tokens. With kinkFree, the
// Internal log-ratios avoid the clip bounds of DefaultConfig (and dual clip
// 3), External probabilities avoid omega, and every other trajectory's
// Internal log-ratios come in +/- pairs so that its GSPO sequence ratio is
// inside GSPO's clip while the others fall outside it.
func randomBatch(rng *rand.Rand, nTraj int, kinkFree bool) Inputs {
	cfg := DefaultConfig()
	var in Inputs
	uni := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	delta := func() float64 {
		for {
			var d float64
			switch rng.IntN(4) {
			case 0:
				d = uni(-0.15, 0.2)
			case 1:
				d = uni(0.3, 0.8)
			case 2:
				d = uni(-0.8, -0.3)
			default:
				d = uni(1.0, 1.6)
			}
			ok := true
			for _, k := range tokenKinks(cfg) {
				if math.Abs(d-k) < kinkMargin || math.Abs(-d-k) < kinkMargin {
					ok = false
				}
			}
			if ok || !kinkFree {
				return d
			}
		}
	}
	extLogProb := func() float64 {
		for {
			lp := uni(-9, -0.05)
			if !kinkFree || math.Abs(math.Exp(lp)-cfg.Omega) > kinkMargin {
				return lp
			}
		}
	}
	seq := int32(rng.IntN(3))
	for k := 0; k < nTraj; k++ {
		a := uni(0.3, 2)
		if rng.IntN(2) == 0 {
			a = -a
		}
		paired := k%2 == 0
		var pending []float64 // deltas still to place (the second of a pair)
		push := func(src Source, lp, old float64) {
			in.LogProb = append(in.LogProb, float32(lp))
			in.OldLogProb = append(in.OldLogProb, float32(old))
			in.RefLogProb = append(in.RefLogProb, float32(lp+uni(-0.8, 0.8)))
			in.Advantage = append(in.Advantage, float32(a))
			in.Source = append(in.Source, src)
			in.Seq = append(in.Seq, seq)
			in.Entropy = append(in.Entropy, float32(uni(0, 3)))
		}
		for j := rng.IntN(4); j > 0; j-- {
			push(Untrained, 0, 0)
		}
		segments := 1 + rng.IntN(4)
		for s := 0; s < segments; s++ {
			src := Source(1 + rng.IntN(2))
			if s == 0 && k%3 != 2 {
				src = Internal
			}
			if rng.IntN(6) == 0 {
				push(Untrained, 0, 0)
			}
			for j := 1 + rng.IntN(6); j > 0; j-- {
				if src == External {
					lp := extLogProb()
					push(External, lp, lp-uni(-0.5, 0.5))
					continue
				}
				lp := uni(-5, -0.02)
				var d float64
				if paired && len(pending) > 0 {
					d, pending = pending[0], pending[1:]
				} else {
					d = delta()
					if paired {
						pending = append(pending, -d)
					}
				}
				push(Internal, lp, lp-d)
			}
		}
		for _, d := range pending {
			lp := uni(-5, -0.02)
			push(Internal, lp, lp-d)
		}
		if paired {
			// A tiny common shift keeps the sequence ratio off exactly 1.
			lp := uni(-5, -0.02)
			push(Internal, lp, lp-2e-4)
		}
		seq += int32(1 + rng.IntN(2))
	}
	return in
}

// assertKinkFree fails if any token of in lies near a kink of cfg's loss,
// so that finite differences are meaningful.
func assertKinkFree(t *testing.T, cfg Config, in Inputs) {
	t.Helper()
	n := len(in.LogProb)
	for i := 0; i < n; i++ {
		lr := float64(in.LogProb[i]) - float64(in.OldLogProb[i])
		switch in.Source[i] {
		case Internal:
			for _, k := range tokenKinks(cfg) {
				if math.Abs(lr-k) < kinkMargin/2 {
					t.Fatalf("test batch: Internal token %d has log-ratio %v within %v of kink %v", i, lr, kinkMargin/2, k)
				}
			}
		case External:
			if math.Abs(math.Exp(float64(in.LogProb[i]))-cfg.Omega) < kinkMargin/2 {
				t.Fatalf("test batch: External token %d has pi near omega", i)
			}
		}
	}
	for i := 0; i < n; {
		j, sum, cnt := i, 0.0, 0
		for ; j < n && in.Seq[j] == in.Seq[i]; j++ {
			if in.Source[j] == Internal {
				sum += float64(in.LogProb[j]) - float64(in.OldLogProb[j])
				cnt++
			}
		}
		if cnt > 0 {
			m := sum / float64(cnt)
			for _, k := range []float64{math.Log(1 - cfg.SeqClipLow), math.Log(1 + cfg.SeqClipHigh)} {
				if math.Abs(m-k) < seqKinkMargin {
					t.Fatalf("test batch: trajectory at token %d has GSPO log-ratio %v within %v of kink %v", i, m, seqKinkMargin, k)
				}
			}
		}
		i = j
	}
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
