package loss

import (
	"fmt"
	"math"
)

// External-token treatments: they choose the term applied to collaborator
// (External) tokens. The names follow the paper's ablations (Table 2).
const (
	// ExternalAIPO is the paper's treatment (Eq. 5-8): coefficient
	// pi_theta(token) with the stop-gradient lower bound
	// clip(pi, omega/sg(pi)*pi, +inf): forward value max(pi, omega),
	// gradient max(pi, omega)*A*grad log pi.
	ExternalAIPO = "aipo"
	// ExternalRatio is the ablation "w/o IS": the ordinary ratio
	// pi/pi_old with the same clip as Internal tokens.
	ExternalRatio = "ratio"
	// ExternalPlain is the ablation "w/o CS": coefficient pi with no lower
	// bound, so the gradient pi*A*grad log pi vanishes as pi -> 0.
	ExternalPlain = "plain"
	// ExternalMask is the ablation "Mask": External tokens are left out of
	// the loss altogether (no policy term, no KL, not counted).
	ExternalMask = "mask"
	// ExternalLUFFY is LUFFY's policy shaping of off-policy tokens (Yan et
	// al. 2025, arXiv 2504.14945): the importance ratio with the
	// off-policy model's probability taken as 1, i.e. pi itself, shaped by
	// f(pi) = pi/(pi+gamma) and not clipped, l = -A*f(pi), whose gradient
	// gamma*pi/(pi+gamma)^2 * A * grad log pi puts the most weight on
	// tokens with pi near gamma rather than vanishing as pi -> 0 as fast
	// as "plain" does.
	ExternalLUFFY = "luffy"
)

// Aggregation modes: how per-token terms become one scalar. S is the number
// of trajectories holding at least one loss token.
const (
	// AggEq8 is the paper's Eq. 8: per trajectory, the mean over its
	// Internal loss tokens plus the mean over its External loss tokens,
	// then the mean over trajectories.
	AggEq8 = "eq8"
	// AggTokenMean is the mean over all loss tokens of the batch (DAPO).
	AggTokenMean = "token-mean"
	// AggSeqMeanTokenSum is the mean over trajectories of each
	// trajectory's token sum.
	AggSeqMeanTokenSum = "seq-mean-token-sum"
	// AggSeqMeanTokenMean is the mean over trajectories of each
	// trajectory's token mean (GRPO as first written).
	AggSeqMeanTokenMean = "seq-mean-token-mean"
	// AggSeqMeanTokenSumNorm is the mean over trajectories of each
	// trajectory's token sum divided by the constant NormTokens
	// (Dr.GRPO). veRL 0.9.1's form of this mode divides by its
	// loss_scale_factor, by default the padded response length of the
	// micro-batch; ours divides by a constant so that the scale does not
	// depend on how a batch was padded (docs/algorithms.md, "Checked
	// against veRL").
	AggSeqMeanTokenSumNorm = "seq-mean-token-sum-norm"
)

// Numerical guards, as veRL applies them.
const (
	// maxLogRatio bounds |log pi - log pi_old| before exponentiation (and
	// |log pi_ref - log pi| in the KL estimator).
	maxLogRatio = 20
	// maxSeqLogRatio bounds the GSPO log sequence ratio from above.
	maxSeqLogRatio = 10
	// maxKL bounds each token's k3 estimate.
	maxKL = 10
)

// Config selects the loss. Every field is part of the run configuration;
// DefaultConfig gives the paper's setting (arXiv 2605.08401, Table 3).
type Config struct {
	// Base is the base algorithm, one of Bases ("grpo" by default; the
	// table bases). It selects the surrogate on Internal tokens.
	Base string `yaml:"base" json:"base"`
	// ClipLow is eps_low: token ratios below 1-ClipLow stop pushing down
	// (paper: 0.2).
	ClipLow float64 `yaml:"clip_low" json:"clip_low"`
	// ClipHigh is eps_high, DAPO's clip-higher: token ratios above
	// 1+ClipHigh stop pushing up (paper: 0.28).
	ClipHigh float64 `yaml:"clip_high" json:"clip_high"`
	// DualClip, when > 1, bounds the loss of a token with negative
	// advantage by -A*DualClip (dual-clip PPO, arXiv 1912.09729; veRL's
	// default is 3). 0 turns it off, which is Eq. 8 as written and our
	// default. It applies wherever a token ratio is clipped (Internal
	// tokens of the token-level bases, External tokens under "ratio").
	DualClip float64 `yaml:"dual_clip" json:"dual_clip"`
	// SeqClipLow is GSPO's lower clip on the sequence ratio (GSPO paper:
	// 3e-4). Read by the sequence-ratio surrogate (Base "gspo").
	SeqClipLow float64 `yaml:"seq_clip_low" json:"seq_clip_low"`
	// SeqClipHigh is GSPO's upper clip on the sequence ratio (GSPO paper:
	// 4e-4). Read by the sequence-ratio surrogate (Base "gspo").
	SeqClipHigh float64 `yaml:"seq_clip_high" json:"seq_clip_high"`
	// External is the treatment of collaborator tokens (and of every other
	// token the policy did not sample, such as LUFFY's off-policy guidance
	// traces): "aipo" (default), "ratio" ("w/o IS"), "plain" ("w/o CS"),
	// "mask" ("Mask") or "luffy" (LUFFY's policy shaping).
	External string `yaml:"external" json:"external"`
	// Omega is the lower bound of the External coefficient under "aipo",
	// in (0, 1] (paper: 0.2).
	Omega float64 `yaml:"omega" json:"omega"`
	// Gamma is the constant of LUFFY's shaping f(pi) = pi/(pi+gamma) under
	// External "luffy", > 0 (LUFFY: 0.1).
	Gamma float64 `yaml:"gamma" json:"gamma"`
	// KLCoef weighs the k3 ("low_var_kl") estimate of KL(pi || pi_ref)
	// added to each KL token's loss (paper: 0.001). 0 turns the KL term
	// off, and RefLogProb may then be nil.
	KLCoef float64 `yaml:"kl_coef" json:"kl_coef"`
	// KLExternal also applies the KL term to External tokens (when they
	// are in the loss, i.e. not masked). Default false: Internal only.
	KLExternal bool `yaml:"kl_external" json:"kl_external"`
	// Aggregation is "eq8" (default), "token-mean", "seq-mean-token-sum",
	// "seq-mean-token-mean" or "seq-mean-token-sum-norm".
	Aggregation string `yaml:"aggregation" json:"aggregation"`
	// NormTokens is the constant divisor of "seq-mean-token-sum-norm",
	// conventionally the generation budget (default 16384, the paper's
	// maximum number of generated tokens). Must be > 0 in that mode.
	NormTokens int `yaml:"norm_tokens" json:"norm_tokens"`
	// RolloutCorrection weighs the policy term of Internal tokens by the
	// truncated behaviour ratio pi_old/pi_behav (see correction.go); off
	// by default.
	RolloutCorrection RolloutCorrection `yaml:"rollout_correction" json:"rollout_correction"`
}

// DefaultGamma is LUFFY's shaping constant (arXiv 2504.14945).
const DefaultGamma = 0.1

// DefaultConfig returns the paper's setting: GRPO base with decoupled clip
// 0.2/0.28, AIPO's External treatment with omega 0.2, KL 0.001 (k3) on
// Internal tokens, Eq. 8 aggregation; GSPO's clips 3e-4/4e-4 for when the
// base is switched to "gspo".
func DefaultConfig() Config {
	return Config{
		Base:        BaseGRPO,
		ClipLow:     0.2,
		ClipHigh:    0.28,
		SeqClipLow:  3e-4,
		SeqClipHigh: 4e-4,
		External:    ExternalAIPO,
		Omega:       0.2,
		Gamma:       DefaultGamma,
		KLCoef:      0.001,
		Aggregation: AggEq8,
		NormTokens:  16384,

		RolloutCorrection: DefaultRolloutCorrection(),
	}
}

// Validate reports the first invalid field, naming it and the fix.
func (c Config) Validate() error {
	b, ok := lookupBase(c.Base)
	if !ok {
		return fmt.Errorf("loss: Config.Base %q is unknown: use one of %s", c.Base, baseNames())
	}
	if _, ok := externalTreatments[c.External]; !ok {
		return fmt.Errorf("loss: Config.External %q is unknown: use one of %s", c.External, names(externalTreatments))
	}
	if c.External == ExternalLUFFY && !(c.Gamma > 0 && !math.IsInf(c.Gamma, 0)) {
		return fmt.Errorf("loss: Config.Gamma = %v, but external %q shapes by pi/(pi+gamma): set a finite gamma > 0 (LUFFY: 0.1)", c.Gamma, c.External)
	}
	if _, ok := aggregations[c.Aggregation]; !ok {
		return fmt.Errorf("loss: Config.Aggregation %q is unknown: use one of %s", c.Aggregation, names(aggregations))
	}
	if c.Aggregation == AggSeqMeanTokenSumNorm && c.NormTokens <= 0 {
		return fmt.Errorf("loss: Config.NormTokens = %d, but aggregation %q divides by it: set it to the generation budget (e.g. 16384)", c.NormTokens, c.Aggregation)
	}
	if !(c.Omega > 0 && c.Omega <= 1) {
		return fmt.Errorf("loss: Config.Omega = %v is outside (0, 1]: it bounds a probability from below (paper: 0.2)", c.Omega)
	}
	if err := clipRange("ClipLow", "ClipHigh", c.ClipLow, c.ClipHigh); err != nil {
		return err
	}
	if check := b.surrogate.check; check != nil {
		if err := check(c); err != nil {
			return err
		}
	}
	if c.DualClip != 0 && !(c.DualClip > 1 && !math.IsInf(c.DualClip, 0)) {
		return fmt.Errorf("loss: Config.DualClip = %v must be 0 (off) or a finite value > 1 (veRL uses 3)", c.DualClip)
	}
	if !(c.KLCoef >= 0 && !math.IsInf(c.KLCoef, 0)) {
		return fmt.Errorf("loss: Config.KLCoef = %v must be finite and >= 0 (paper: 0.001; 0 turns KL off)", c.KLCoef)
	}
	return c.RolloutCorrection.Validate()
}

func clipRange(lowName, highName string, low, high float64) error {
	if !(low >= 0 && low < 1) {
		return fmt.Errorf("loss: Config.%s = %v must lie in [0, 1): the lower clip is 1-%s and must stay positive", lowName, low, lowName)
	}
	if !(high >= 0 && !math.IsInf(high, 0)) {
		return fmt.Errorf("loss: Config.%s = %v must be finite and >= 0", highName, high)
	}
	return nil
}
