//go:build verl

package loss

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// veRL (PyPI verl 0.9.1, verl.trainer.ppo.core_algos and
// rollout_corr_helper) judges Compute: scripts/verl/core_algos_check.py
// evaluates veRL's own policy losses, agg_loss, kl_penalty and rollout
// correction with autograd in float64 on the same random batches, laid out
// as veRL lays them out ([sequence][position] with a response mask), and
// the loss and d loss / d log_prob must agree within verlTol relative. Both
// sides compute in float64 from the same float32 inputs; GradLogProb is
// float32, so its entries carry one float32 rounding (6e-8 relative).
const verlTol = 1e-6

// verlBatch is a padded batch as veRL holds it. Values are float32, as
// Compute's inputs are; they go to veRL as float64 (encoding/json would
// write a float32's shortest decimal, which Python reads as another
// float64).
type verlBatch struct {
	LogProb    [][]float32
	Old        [][]float32
	Ref        [][]float32
	Rollout    [][]float32
	Advantages [][]float32
	Mask       [][]float32
}

// fields are the batch's arrays under core_algos_check.py's names.
func (v verlBatch) fields() map[string]any {
	f64 := func(m [][]float32) [][]float64 {
		out := make([][]float64, len(m))
		for i, row := range m {
			out[i] = make([]float64, len(row))
			for j, x := range row {
				out[i][j] = float64(x)
			}
		}
		return out
	}
	return map[string]any{
		"log_prob": f64(v.LogProb), "old_log_prob": f64(v.Old), "ref_log_prob": f64(v.Ref),
		"rollout_log_prob": f64(v.Rollout), "advantages": f64(v.Advantages), "response_mask": f64(v.Mask),
	}
}

// verlConfig is the actor configuration core_algos_check.py gives veRL.
type verlConfig struct {
	LossMode        string  `json:"loss_mode"`
	ClipLow         float64 `json:"clip_ratio_low"`
	ClipHigh        float64 `json:"clip_ratio_high"`
	ClipC           float64 `json:"clip_ratio_c"`
	AggMode         string  `json:"loss_agg_mode"`
	ScaleFactor     *int    `json:"loss_scale_factor"`
	KLCoef          float64 `json:"kl_coef"`
	KLType          string  `json:"kl_loss_type"`
	RolloutIS       *string `json:"rollout_is"`
	RolloutISThresh any     `json:"rollout_is_threshold"` // float: TIS; "lower_upper": IcePop
	RolloutRS       *string `json:"rollout_rs"`
	RolloutRSThresh *string `json:"rollout_rs_threshold"`
}

// verlCase is one policy-loss case for core_algos_check.py.
type verlCase struct {
	Name  string
	Cfg   verlConfig
	Batch verlBatch
}

func (c verlCase) MarshalJSON() ([]byte, error) {
	m := c.Batch.fields()
	m["name"], m["kind"], m["config"] = c.Name, "policy", c.Cfg
	return json.Marshal(m)
}

type verlResult struct {
	Name string      `json:"name"`
	Loss float64     `json:"loss"`
	Grad [][]float64 `json:"grad"`
	Mask [][]float64 `json:"response_mask"`
}

// verlNoDual is a clip_ratio_c no ratio reaches: veRL always applies its
// dual clip (clip_ratio_c must be > 1), so this is how it is turned off.
const verlNoDual = 1e9

// verlRandomBatch draws b sequences of up to t positions: lengths from 0
// (a fully masked row) through 1 to t, interior positions masked out (tool
// output inside a response), padding holding junk, advantages constant per
// sequence and 0 for some. logSpread is the spread of log pi - log pi_old;
// a few tokens get ratio > 3 for the dual clip.
func verlRandomBatch(rng *rand.Rand, b, t int, logSpread float64) verlBatch {
	mk := func() [][]float32 {
		m := make([][]float32, b)
		for i := range m {
			m[i] = make([]float32, t)
		}
		return m
	}
	v := verlBatch{LogProb: mk(), Old: mk(), Ref: mk(), Rollout: mk(), Advantages: mk(), Mask: mk()}
	for i := 0; i < b; i++ {
		n := 1 + rng.IntN(t)
		if i%6 == 0 {
			n = 1
		}
		if i == 5 {
			n = 0
		}
		a := rng.NormFloat64()
		if i%4 == 2 {
			a = 0
		}
		for j := 0; j < t; j++ {
			lp := -3 * rng.Float64()
			d := logSpread * rng.NormFloat64()
			if rng.IntN(12) == 0 {
				d = 1.5 // ratio e^1.5 > 3: the dual clip's region when A < 0
			}
			v.LogProb[i][j] = float32(lp)
			v.Old[i][j] = float32(lp - d)
			v.Ref[i][j] = float32(lp + 0.5*rng.NormFloat64())
			v.Rollout[i][j] = float32(float64(v.Old[i][j]) + 0.4*rng.NormFloat64())
			v.Advantages[i][j] = float32(a)
			if j < n && (j == 0 || rng.IntN(8) != 0) {
				v.Mask[i][j] = 1
			}
		}
	}
	return v
}

// inputs packs the batch as Compute takes it: per sequence two prompt
// tokens (Untrained), then its positions, masked ones Untrained; index
// maps [sequence][position] to the token. Junk stays in Untrained slots.
func (v verlBatch) inputs() (in Inputs, index [][]int) {
	index = make([][]int, len(v.Mask))
	add := func(seq int, s Source, lp, old, ref, beh, a float32) int {
		in.LogProb = append(in.LogProb, lp)
		in.OldLogProb = append(in.OldLogProb, old)
		in.RefLogProb = append(in.RefLogProb, ref)
		in.BehaviorLogProb = append(in.BehaviorLogProb, beh)
		in.Advantage = append(in.Advantage, a)
		in.Source = append(in.Source, s)
		in.Seq = append(in.Seq, int32(seq))
		return len(in.LogProb) - 1
	}
	for i, row := range v.Mask {
		add(i, Untrained, 0, 0, 0, 0, 0)
		add(i, Untrained, -1, 7, 3, 0, 5)
		index[i] = make([]int, len(row))
		for j, m := range row {
			s := Internal
			if m == 0 {
				s = Untrained
			}
			index[i][j] = add(i, s, v.LogProb[i][j], v.Old[i][j], v.Ref[i][j], v.Rollout[i][j], v.Advantages[i][j])
		}
	}
	return in, index
}

// runVerl evaluates every case with veRL's code.
func runVerl(t *testing.T, cases []verlCase) map[string]verlResult {
	t.Helper()
	var out struct {
		Cases []verlResult `json:"cases"`
	}
	testtools.VerlCheck(t, 5*time.Minute, map[string]any{"cases": cases}, &out)
	res := make(map[string]verlResult, len(out.Cases))
	for _, r := range out.Cases {
		res[r.Name] = r
	}
	return res
}

// relDiff is |a-b| relative to the larger magnitude (0 when both are 0).
func relDiff(a, b float64) float64 {
	d := math.Abs(a - b)
	if d == 0 {
		return 0
	}
	return d / math.Max(math.Abs(a), math.Abs(b))
}

// gradDiff is the worst relative difference between Compute's gradient and
// veRL's over every position, and where it is.
func gradDiff(got Output, index [][]int, want [][]float64) (worst float64, at string) {
	for i, row := range index {
		for j, k := range row {
			if d := relDiff(float64(got.GradLogProb[k]), want[i][j]); d > worst {
				worst, at = d, fmt.Sprintf("[%d][%d] %g vs %g", i, j, got.GradLogProb[k], want[i][j])
			}
		}
	}
	return worst, at
}

func ptr[T any](v T) *T { return &v }

// verlPair is one comparison: aipo's configuration and veRL's.
type verlPair struct {
	name  string
	cfg   Config
	verl  verlConfig
	batch verlBatch
}

// verlVanilla is veRL's vanilla (PPO/GRPO) policy loss with the clip range
// 0.2/0.28, its dual clip at 3, aggregation agg and no KL term.
func verlVanilla(agg string) verlConfig {
	return verlConfig{LossMode: "vanilla", ClipLow: 0.2, ClipHigh: 0.28, ClipC: 3, AggMode: agg, KLType: "low_var_kl"}
}

// aipoVanilla is the same loss in Compute's terms.
func aipoVanilla(agg string) Config {
	c := DefaultConfig()
	c.Aggregation, c.DualClip, c.KLCoef = agg, 3, 0
	return c
}

func verlPairs(rng *rand.Rand) []verlPair {
	const b, t = 14, 20
	batch := verlRandomBatch(rng, b, t, 0.3)
	gspo := verlRandomBatch(rng, b, t, 2e-4)
	zeroAdv := verlRandomBatch(rng, b, t, 0.3)
	for _, row := range zeroAdv.Advantages {
		clear(row)
	}
	var ps []verlPair

	// The clipped surrogate with clip-higher (and veRL's dual clip) under
	// each aggregation; Dr.GRPO's divisor is the constant both take.
	for _, agg := range []string{AggTokenMean, AggSeqMeanTokenSum, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		c, v := aipoVanilla(agg), verlVanilla(agg)
		c.NormTokens, v.ScaleFactor = 64, ptr(64)
		ps = append(ps, verlPair{"clip-higher/" + agg, c, v, batch})
	}
	// Without the dual clip: aipo's default, veRL's clip_ratio_c out of reach.
	c, v := aipoVanilla(AggTokenMean), verlVanilla(AggTokenMean)
	c.DualClip, v.ClipC = 0, verlNoDual
	ps = append(ps, verlPair{"clip-higher/no-dual-clip", c, v, batch})

	// k3 (low_var_kl) alone: advantages 0, coefficient 1.
	for _, agg := range []string{AggTokenMean, AggSeqMeanTokenMean} {
		c, v := aipoVanilla(agg), verlVanilla(agg)
		c.KLCoef, v.KLCoef = 1, 1
		ps = append(ps, verlPair{"k3/" + agg, c, v, zeroAdv})
	}

	// The presets, with veRL configured as each paper's recipe.
	preset := func(base string) Config {
		c, err := ConfigFor(base)
		if err != nil {
			panic(err)
		}
		return c
	}
	// GRPO: Eq. 8 without external tokens is the per-trajectory token mean.
	v = verlVanilla(AggSeqMeanTokenMean)
	v.ClipC, v.KLCoef = verlNoDual, 0.001
	ps = append(ps, verlPair{"grpo", preset(BaseGRPO), v, batch})
	// DAPO: token-mean, clip-higher, no KL.
	v = verlVanilla(AggTokenMean)
	v.ClipC = verlNoDual
	ps = append(ps, verlPair{"dapo", preset(BaseDAPO), v, batch})
	// Dr.GRPO: symmetric clip, the token sum over the constant budget.
	v = verlVanilla(AggSeqMeanTokenSumNorm)
	v.ClipHigh, v.ClipC, v.ScaleFactor = 0.2, verlNoDual, ptr(16384)
	ps = append(ps, verlPair{"drgrpo", preset(BaseDrGRPO), v, batch})
	// GSPO: the sequence ratio, per-trajectory token mean, KL 0.001.
	gv := verlConfig{LossMode: "gspo", ClipLow: 3e-4, ClipHigh: 4e-4, ClipC: 3, AggMode: AggSeqMeanTokenMean, KLCoef: 0.001, KLType: "low_var_kl"}
	ps = append(ps, verlPair{"gspo", preset(BaseGSPO), gv, gspo})
	gc := preset(BaseGSPO)
	gc.Aggregation, gv.AggMode = AggTokenMean, AggTokenMean
	ps = append(ps, verlPair{"gspo/token-mean", gc, gv, gspo})

	// Rollout correction: truncated IS at token and sequence level, and
	// mask mode as veRL's rejection of tokens (token_k1) or sequences
	// (seq_sum_k1) outside [1/C, C] with the IS weight kept inside.
	for _, level := range []string{CorrectionToken, CorrectionSequence} {
		for _, mode := range []string{CorrectionTruncate, CorrectionMask} {
			c, v := aipoVanilla(AggTokenMean), verlVanilla(AggTokenMean)
			c.KLCoef, v.KLCoef = 0.01, 0.01
			c.RolloutCorrection = RolloutCorrection{Level: level, Cap: 2, Mode: mode}
			v.RolloutIS, v.RolloutISThresh = ptr(level), 2.0
			if mode == CorrectionMask {
				rs := "token_k1"
				if level == CorrectionSequence {
					rs = "seq_sum_k1"
				}
				v.RolloutRS, v.RolloutRSThresh = ptr(rs), ptr("0.5_2")
			}
			ps = append(ps, verlPair{"rollout-correction/" + level + "/" + mode, c, v, batch})
		}
	}
	// Rollout correction under GSPO.
	gc = preset(BaseGSPO)
	gc.RolloutCorrection = RolloutCorrection{Level: CorrectionSequence, Cap: 2, Mode: CorrectionTruncate}
	gv.AggMode = AggSeqMeanTokenMean
	gv.RolloutIS, gv.RolloutISThresh = ptr(CorrectionSequence), 2.0
	ps = append(ps, verlPair{"rollout-correction/sequence/truncate/gspo", gc, gv, gspo})
	return ps
}

// The deliberate differences, each a veRL configuration beside the
// aipo one it is compared with (see docs/algorithms.md, "Checked against
// veRL").
func verlDifferences(batch verlBatch) []verlCase {
	dual := verlVanilla(AggTokenMean) // veRL's default dual clip at 3
	horizon := verlVanilla(AggSeqMeanTokenSumNorm)
	horizon.ClipC = verlNoDual // loss_scale_factor nil: veRL divides by the padded length
	icepop := verlVanilla(AggTokenMean)
	icepop.ClipC = verlNoDual
	icepop.RolloutIS, icepop.RolloutISThresh = ptr(CorrectionToken), "0.5_2"
	return []verlCase{
		{Name: "diff/dual-clip", Cfg: dual, Batch: batch},
		{Name: "diff/norm-horizon", Cfg: horizon, Batch: batch},
		{Name: "diff/icepop", Cfg: icepop, Batch: batch},
	}
}

// TestAgreesWithVerl holds Compute to veRL's own loss code: every loss and
// gradient within verlTol relative, and each deliberate difference as
// documented.
func TestAgreesWithVerl(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 12))
	pairs := verlPairs(rng)
	diffBatch := pairs[0].batch
	var cases []verlCase
	for _, p := range pairs {
		cases = append(cases, verlCase{Name: p.name, Cfg: p.verl, Batch: p.batch})
	}
	cases = append(cases, verlDifferences(diffBatch)...)
	res := runVerl(t, cases)

	for _, p := range pairs {
		in, index := p.batch.inputs()
		got, err := Compute(p.cfg, in)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		want := res[p.name]
		dl := relDiff(got.Loss, want.Loss)
		dg, at := gradDiff(got, index, want.Grad)
		t.Logf("%-42s loss %+.9e  worst relative difference: loss %.1e, gradient %.1e", p.name, got.Loss, dl, dg)
		if dl > verlTol {
			t.Errorf("%s: loss %.12g, veRL %.12g (relative %.2g)", p.name, got.Loss, want.Loss, dl)
		}
		if dg > verlTol {
			t.Errorf("%s: gradient differs from veRL's at %s (relative %.2g)", p.name, at, dg)
		}
		if got.Loss == 0 {
			t.Errorf("%s: the loss is 0: the batch does not exercise it", p.name)
		}
		// Both clips are reached (advantages are 0 in the k3 cases), and
		// the correction's cap.
		m := got.Metrics
		if !strings.HasPrefix(p.name, "k3/") && (m[MetricClipFracHigh] == 0 || m[MetricClipFracLow] == 0) {
			t.Errorf("%s: clip fractions high %v, low %v: the batch does not reach both clips", p.name, m[MetricClipFracHigh], m[MetricClipFracLow])
		}
		if p.cfg.RolloutCorrection.On() && m[MetricISFracHigh] == 0 {
			t.Errorf("%s: no behaviour ratio above the cap: the correction is not exercised", p.name)
		}
	}

	in, index := diffBatch.inputs()
	checkDualClipDifference(t, in, index, diffBatch, res["diff/dual-clip"])
	checkHorizonDifference(t, in, diffBatch, res["diff/norm-horizon"])
	checkIcePopDifference(t, in, diffBatch, res["diff/icepop"])
}

// veRL's vanilla loss always applies the dual clip (clip_ratio_c, default
// 3); aipo's DualClip is off by default (Eq. 8 as written). On a token with
// A < 0 whose ratio exceeds 3 veRL's gradient is 0 and aipo's is not; every
// other token agrees.
func checkDualClipDifference(t *testing.T, in Inputs, index [][]int, b verlBatch, want verlResult) {
	t.Helper()
	got, err := Compute(aipoVanilla(AggTokenMean), in) // DualClip 3: agrees
	if err != nil {
		t.Fatal(err)
	}
	if d := relDiff(got.Loss, want.Loss); d > verlTol {
		t.Errorf("dual clip at 3: loss %.12g, veRL's default %.12g", got.Loss, want.Loss)
	}
	off := aipoVanilla(AggTokenMean)
	off.DualClip = 0
	got, err = Compute(off, in)
	if err != nil {
		t.Fatal(err)
	}
	dual, worst := 0, 0.0
	for i, row := range index {
		for j, k := range row {
			g, w := float64(got.GradLogProb[k]), want.Grad[i][j]
			a := float64(b.Advantages[i][j])
			r := math.Exp(float64(b.LogProb[i][j]) - float64(b.Old[i][j]))
			if b.Mask[i][j] == 1 && a < 0 && r > 3 {
				dual++
				if w != 0 || g == 0 {
					t.Errorf("dual-clipped token [%d][%d]: veRL's gradient %g (want 0), aipo's %g (want -A*r/N != 0)", i, j, w, g)
				}
				continue
			}
			worst = math.Max(worst, relDiff(g, w))
		}
	}
	if dual == 0 {
		t.Error("the batch has no token with A < 0 and ratio > 3: the dual-clip difference is not exercised")
	}
	if worst > verlTol {
		t.Errorf("dual clip off: tokens outside the dual clip differ from veRL's by %.2g", worst)
	}
	t.Logf("%-42s %d dual-clipped tokens: veRL's gradient 0, aipo's not; elsewhere worst relative difference %.1e", "diff/dual-clip (aipo off, veRL 3)", dual, worst)
}

// veRL's seq-mean-token-sum-norm divides by loss_scale_factor, which
// defaults to the padded response length of the micro-batch; aipo's
// NormTokens is a constant (16384 by default, the generation budget), as
// Dr.GRPO prescribes. With NormTokens set to the padded length they agree;
// with the default the loss is scaled by T/16384.
func checkHorizonDifference(t *testing.T, in Inputs, b verlBatch, want verlResult) {
	t.Helper()
	c := aipoVanilla(AggSeqMeanTokenSumNorm)
	c.DualClip = 0
	c.NormTokens = len(b.Mask[0])
	got, err := Compute(c, in)
	if err != nil {
		t.Fatal(err)
	}
	if d := relDiff(got.Loss, want.Loss); d > verlTol {
		t.Errorf("NormTokens = padded length %d: loss %.12g, veRL's default %.12g", c.NormTokens, got.Loss, want.Loss)
	}
	c.NormTokens = 16384
	def, err := Compute(c, in)
	if err != nil {
		t.Fatal(err)
	}
	scaled := def.Loss * 16384 / float64(len(b.Mask[0]))
	if d := relDiff(scaled, want.Loss); d > verlTol {
		t.Errorf("NormTokens 16384: loss %.12g times 16384/%d = %.12g, veRL's default %.12g", def.Loss, len(b.Mask[0]), scaled, want.Loss)
	}
	t.Logf("%-42s veRL's default divides by the padded length %d: aipo's loss with NormTokens 16384 is veRL's times %d/16384 (checked to %.1e)", "diff/norm-horizon", len(b.Mask[0]), len(b.Mask[0]), relDiff(scaled, want.Loss))
}

// veRL's IcePop (rollout_is_threshold "lower_upper") zeroes the weight of a
// token outside the bounds but keeps it in token-mean's denominator; aipo's
// mask mode leaves it out of the loss altogether, as veRL's rejection
// sampling does (checked above). On token-mean without KL the two differ by
// exactly the share of tokens kept.
func checkIcePopDifference(t *testing.T, in Inputs, b verlBatch, want verlResult) {
	t.Helper()
	c := aipoVanilla(AggTokenMean)
	c.DualClip = 0
	c.RolloutCorrection = RolloutCorrection{Level: CorrectionToken, Cap: 2, Mode: CorrectionMask}
	got, err := Compute(c, in)
	if err != nil {
		t.Fatal(err)
	}
	all, kept := 0.0, 0.0
	for i, row := range b.Mask {
		for j, m := range row {
			if m == 0 {
				continue
			}
			all++
			rho := math.Exp(float64(b.Old[i][j]) - float64(b.Rollout[i][j]))
			if rho >= 0.5 && rho <= 2 {
				kept++
			}
		}
	}
	if kept == all {
		t.Fatal("no token's behaviour ratio lies outside [0.5, 2]: the IcePop difference is not exercised")
	}
	scaled := got.Loss * kept / all
	if d := relDiff(scaled, want.Loss); d > verlTol {
		t.Errorf("mask mode: loss %.12g times kept/all %v/%v = %.12g, veRL's IcePop %.12g", got.Loss, kept, all, scaled, want.Loss)
	}
	t.Logf("%-42s aipo's mask-mode loss is veRL's IcePop loss times %v/%v tokens (checked to %.1e)", "diff/icepop", all, kept, relDiff(scaled, want.Loss))
}

// Every base is compared with veRL's code: verlPairs names a pair after
// each.
func TestEveryBaseHasAVerlPair(t *testing.T) {
	pairs := map[string]bool{}
	for _, p := range verlPairs(rand.New(rand.NewPCG(1, 1))) {
		pairs[p.name] = true
	}
	for _, b := range Bases() {
		if !pairs[b] {
			t.Errorf("base %s has no veRL pair named %q in verlPairs", b, b)
		}
	}
}
