package loss

// Keys of Output.Metrics. Fractions and means whose denominator is zero are
// reported as 0.
const (
	// MetricLoss is Output.Loss.
	MetricLoss = "loss"
	// MetricPGLoss is the aggregated policy term (Loss without the KL).
	MetricPGLoss = "pg_loss"
	// MetricKLLoss is the aggregated k3 estimate before KLCoef weighs it.
	MetricKLLoss = "kl_loss"
	// MetricKLRef is the plain mean of the k3 estimate over KL tokens.
	MetricKLRef = "kl_ref"
	// MetricApproxKLOld is the mean of log pi_old - log pi over the
	// tokens that use a ratio (veRL's ppo_kl).
	MetricApproxKLOld = "approx_kl_old"
	// MetricClipFracLow is the fraction of ratio tokens whose lower clip
	// is active (A < 0, ratio < 1-low).
	MetricClipFracLow = "clip_frac_low"
	// MetricClipFracHigh is the fraction of ratio tokens whose upper clip
	// is active (A > 0, ratio > 1+high).
	MetricClipFracHigh = "clip_frac_high"
	// MetricClipFracDual is the fraction of ratio tokens bounded by the
	// dual clip.
	MetricClipFracDual = "clip_frac_dual"
	// MetricRatioMean is the mean ratio over ratio tokens (for GSPO's
	// Internal tokens, the sequence ratio).
	MetricRatioMean = "ratio_mean"
	// MetricExtUnderOmega is the fraction of External tokens with
	// pi < omega (those whose gradient AIPO's lower bound raises).
	MetricExtUnderOmega = "ext_under_omega_frac"
	// MetricExtProbMean is the mean pi of External tokens.
	MetricExtProbMean = "ext_prob_mean"
	// MetricEntropy is the mean entropy over loss tokens (only when
	// Inputs.Entropy is given).
	MetricEntropy = "entropy"
	// MetricTokensInternal counts Internal tokens.
	MetricTokensInternal = "tokens_internal"
	// MetricTokensExternal counts External tokens (masked or not).
	MetricTokensExternal = "tokens_external"
	// MetricTokensUntrained counts Untrained tokens.
	MetricTokensUntrained = "tokens_untrained"
	// MetricTokensLoss counts the tokens in the loss.
	MetricTokensLoss = "tokens_loss"
	// MetricTrajectories counts trajectories with at least one loss token.
	MetricTrajectories = "trajectories"

	// The rollout-correction metrics, present only when the correction is
	// on. rho is the behaviour ratio pi_old/pi_behav at the configured
	// level (guarded to exp(+/-20)), over Internal tokens.

	// MetricISRatioMean is the mean rho before truncation or masking.
	MetricISRatioMean = "rollout_is_ratio_mean"
	// MetricISWeightMean is the mean weight applied, over the Internal
	// tokens kept in the loss.
	MetricISWeightMean = "rollout_is_weight_mean"
	// MetricISFracHigh is the fraction of Internal tokens with rho > Cap
	// (truncated, or masked).
	MetricISFracHigh = "rollout_is_frac_high"
	// MetricISFracLow is the fraction of Internal tokens with rho < 1/Cap
	// (masked in mask mode, kept as they are under truncate).
	MetricISFracLow = "rollout_is_frac_low"
	// MetricISMaskedFrac is the fraction of Internal tokens mask mode
	// left out of the loss (0 under truncate).
	MetricISMaskedFrac = "rollout_is_masked_frac"
)

// metricSums accumulates the sums behind the metrics.
type metricSums struct {
	internal, external, untrained int
	lossTokens, trajectories      int
	ratioTokens                   int
	clipLow, clipHigh, dual       int
	ratioSum, oldMinusNew         float64
	extProb                       float64
	extUnderOmega                 int
	klTokens                      int
	klSum                         float64
	entropy                       float64
}

func newMetricSums() *metricSums { return &metricSums{} }

func (m *metricSums) addRatio(t ratioTerm, logp, old float64) {
	m.ratioTokens++
	m.ratioSum += t.ratio
	m.oldMinusNew += old - logp
	if t.clipLow {
		m.clipLow++
	}
	if t.clipHigh {
		m.clipHigh++
	}
	if t.dual {
		m.dual++
	}
}

func frac(num float64, den int) float64 {
	if den == 0 {
		return 0
	}
	return num / float64(den)
}

func (m *metricSums) finish(loss, pgLoss, klLoss float64, haveEntropy bool) map[string]float64 {
	out := map[string]float64{
		MetricLoss:            loss,
		MetricPGLoss:          pgLoss,
		MetricKLLoss:          klLoss,
		MetricKLRef:           frac(m.klSum, m.klTokens),
		MetricApproxKLOld:     frac(m.oldMinusNew, m.ratioTokens),
		MetricClipFracLow:     frac(float64(m.clipLow), m.ratioTokens),
		MetricClipFracHigh:    frac(float64(m.clipHigh), m.ratioTokens),
		MetricClipFracDual:    frac(float64(m.dual), m.ratioTokens),
		MetricRatioMean:       frac(m.ratioSum, m.ratioTokens),
		MetricExtUnderOmega:   frac(float64(m.extUnderOmega), m.external),
		MetricExtProbMean:     frac(m.extProb, m.external),
		MetricTokensInternal:  float64(m.internal),
		MetricTokensExternal:  float64(m.external),
		MetricTokensUntrained: float64(m.untrained),
		MetricTokensLoss:      float64(m.lossTokens),
		MetricTrajectories:    float64(m.trajectories),
	}
	if haveEntropy {
		out[MetricEntropy] = frac(m.entropy, m.lossTokens)
	}
	return out
}
