package loss

// Output is the result of Compute.
type Output struct {
	// Loss is the scalar to minimise: minus the aggregated objective plus
	// KLCoef times the aggregated k3 estimate.
	Loss float64
	// GradLogProb is d Loss / d LogProb for every token (0 for tokens not
	// in the loss), with the stop-gradient semantics of the paper's Eq. 6.
	GradLogProb []float32
	// Metrics holds the values named by the Metric* constants.
	Metrics map[string]float64
}

// Compute evaluates the loss configured by cfg on in. It returns an error
// naming the field (and token index) of the first invalid configuration
// or input. Internally it works in float64.
//
// The aggregation's means run over this call's tokens and trajectories. To
// split one optimisation batch into micro-batches, give each micro-batch
// whole trajectories and scale its Loss and GradLogProb by its Count
// divided by the sum of the Counts of the batch; the sum of the scaled
// results equals one call on the whole batch.
func Compute(cfg Config, in Inputs) (Output, error) {
	if err := cfg.Validate(); err != nil {
		return Output{}, err
	}
	if err := in.validate(&cfg); err != nil {
		return Output{}, err
	}
	return computeFused(cfg, in, in.LogProb), nil
}

// Count returns the denominator of cfg's aggregation in this output: the
// number of loss tokens for token-mean, otherwise the number of
// trajectories holding a loss token.
func (o Output) Count(cfg Config) float64 {
	if cfg.Aggregation == AggTokenMean {
		return o.Metrics[MetricTokensLoss]
	}
	return o.Metrics[MetricTrajectories]
}

// run is one trajectory's contiguous token range with its counts.
type run struct {
	start, end int
	internal   int     // Internal tokens
	external   int     // External tokens in the loss
	seqLR      float64 // detached mean log-ratio over Internal tokens (surrogate.seqRatio)
}

// computeFused is the optimised form: one pass finds the trajectories'
// ranges and counts, a second evaluates every token inline with its
// aggregation weight and writes the gradient. detached is as for
// computeLoop.
func computeFused(cfg Config, in Inputs, detached []float32) Output {
	n := len(in.LogProb)
	b, _ := lookupBase(cfg.Base)
	sur := &b.surrogate
	ext := externalTreatments[cfg.External]

	// Rollout correction: each Internal token's weight, and whether mask
	// mode keeps it.
	rc := correctionSums{on: cfg.RolloutCorrection.On(), cap: cfg.RolloutCorrection.Cap}
	var isw []float64
	var kept []bool
	if rc.on {
		isw, kept = correctionRuns(cfg.RolloutCorrection, &in, &rc)
	}
	runs, counts := trajectoryRuns(cfg, in, detached, kept, ext, sur.seqRatio)
	weigh := aggregations[cfg.Aggregation]
	klInt := cfg.KLCoef != 0
	klExt := klInt && cfg.KLExternal && !ext.masked
	haveEntropy := len(in.Entropy) > 0

	grad := make([]float32, n)
	var pgLoss, klLoss float64
	m := metricSums{lossTokens: counts.lossTokens, trajectories: counts.trajectories}
	for _, r := range runs {
		counts.internal, counts.external = r.internal, r.external
		wInt, wExt := weigh(counts)
		for i := r.start; i < r.end; i++ {
			src := in.Source[i]
			logp := float64(in.LogProb[i])
			var w float64
			switch src {
			case Untrained:
				m.untrained++
				continue
			case Internal:
				m.internal++
				if rc.on && !kept[i] {
					continue
				}
				w = wInt
			default:
				m.addExternal(logp, cfg.Omega)
				if ext.masked {
					continue
				}
				w = wExt
			}
			l, g := policyTerm(&cfg, sur, ext, src == Internal, logp, float64(detached[i]), float64(in.OldLogProb[i]), float64(in.Advantage[i]), r.seqLR, &m)
			if rc.on && src == Internal {
				l, g = l*isw[i], g*isw[i]
			}
			if (src == Internal && klInt) || (src == External && klExt) {
				k, dk := k3Token(logp, float64(in.RefLogProb[i]))
				m.klTokens++
				m.klSum += k
				klLoss += w * k
				g += cfg.KLCoef * dk
			}
			if haveEntropy {
				m.entropy += float64(in.Entropy[i])
			}
			pgLoss += w * l
			grad[i] = float32(w * g)
		}
	}
	loss := pgLoss + cfg.KLCoef*klLoss
	metrics := m.finish(loss, pgLoss, klLoss, haveEntropy)
	rc.finish(metrics)
	return Output{Loss: loss, GradLogProb: grad, Metrics: metrics}
}

// trajectoryRuns finds each trajectory's contiguous token range, counts
// its loss tokens by source (Internal ones that mask-mode correction drops
// left out, External ones only when ext trains them) and, when seqRatio,
// its detached mean log-ratio over its Internal tokens; and counts the
// batch's loss tokens and trajectories with one.
func trajectoryRuns(cfg Config, in Inputs, detached []float32, kept []bool, ext externalTreatment, seqRatio bool) ([]run, aggCounts) {
	n := len(in.LogProb)
	runs := make([]run, 0, 16)
	counts := aggCounts{normTokens: cfg.NormTokens}
	for i := 0; i < n; {
		r := run{start: i}
		q := in.Seq[i]
		for ; i < n && in.Seq[i] == q; i++ {
			switch in.Source[i] {
			case Internal:
				if kept != nil && !kept[i] {
					continue
				}
				r.internal++
				if seqRatio {
					r.seqLR += float64(detached[i]) - float64(in.OldLogProb[i])
				}
			case External:
				if !ext.masked {
					r.external++
				}
			}
		}
		r.end = i
		if r.internal > 0 {
			r.seqLR /= float64(r.internal)
		}
		if nl := r.internal + r.external; nl > 0 {
			counts.lossTokens += nl
			counts.trajectories++
		}
		runs = append(runs, r)
	}
	return runs, counts
}
