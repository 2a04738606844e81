package loss

import "math"

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
	seqLR      float64 // GSPO: detached mean log-ratio over Internal tokens
}

// computeFused is the optimised form: one pass finds the trajectories'
// ranges and counts, a second evaluates every token inline with its
// aggregation weight and writes the gradient. detached is as for
// computeLoop.
func computeFused(cfg Config, in Inputs, detached []float32) Output {
	n := len(in.LogProb)
	extInLoss := cfg.External != ExternalMask
	gspo := cfg.Base == BaseGSPO

	// Rollout correction: each Internal token's weight, and whether mask
	// mode keeps it.
	rc := correctionSums{on: cfg.RolloutCorrection.On(), cap: cfg.RolloutCorrection.Cap}
	var isw []float64
	var kept []bool
	if rc.on {
		isw, kept = correctionRuns(cfg.RolloutCorrection, &in, &rc)
	}

	// Pass 1: trajectory ranges.
	runs := make([]run, 0, 16)
	lossTokens, trajectories := 0, 0
	for i := 0; i < n; {
		r := run{start: i}
		q := in.Seq[i]
		for ; i < n && in.Seq[i] == q; i++ {
			switch in.Source[i] {
			case Internal:
				if rc.on && !kept[i] {
					continue
				}
				r.internal++
				if gspo {
					r.seqLR += float64(detached[i]) - float64(in.OldLogProb[i])
				}
			case External:
				if extInLoss {
					r.external++
				}
			}
		}
		r.end = i
		if r.internal > 0 {
			r.seqLR /= float64(r.internal)
		}
		if nl := r.internal + r.external; nl > 0 {
			lossTokens += nl
			trajectories++
		}
		runs = append(runs, r)
	}

	// Constants hoisted out of the token loop.
	lo, hi := 1-cfg.ClipLow, 1+cfg.ClipHigh
	slo, shi := 1-cfg.SeqClipLow, 1+cfg.SeqClipHigh
	dual := cfg.DualClip
	omega := cfg.Omega
	gamma := cfg.Gamma
	beta := cfg.KLCoef
	klInt := beta != 0
	klExt := klInt && cfg.KLExternal && extInLoss
	haveEntropy := len(in.Entropy) > 0
	invS := 0.0
	if trajectories > 0 {
		invS = 1 / float64(trajectories)
	}

	grad := make([]float32, n)
	var pgLoss, klLoss float64
	var m metricSums
	m.lossTokens, m.trajectories = lossTokens, trajectories

	// Pass 2: every token, fused.
	for _, r := range runs {
		var wInt, wExt float64
		switch cfg.Aggregation {
		case AggEq8:
			if r.internal > 0 {
				wInt = invS / float64(r.internal)
			}
			if r.external > 0 {
				wExt = invS / float64(r.external)
			}
		case AggTokenMean:
			wInt = 1 / float64(max(lossTokens, 1))
			wExt = wInt
		case AggSeqMeanTokenSum:
			wInt, wExt = invS, invS
		case AggSeqMeanTokenMean:
			if nl := r.internal + r.external; nl > 0 {
				wInt = invS / float64(nl)
				wExt = wInt
			}
		case AggSeqMeanTokenSumNorm:
			wInt = invS / float64(cfg.NormTokens)
			wExt = wInt
		}
		for i := r.start; i < r.end; i++ {
			src := in.Source[i]
			if src == Untrained {
				m.untrained++
				continue
			}
			logp := float64(in.LogProb[i])
			a := float64(in.Advantage[i])
			var l, g, w float64
			useRatio := src == Internal
			if src == Internal {
				m.internal++
				if rc.on && !kept[i] {
					continue
				}
				w = wInt
			} else {
				m.external++
				pi := math.Exp(logp)
				m.extProb += pi
				if pi < omega {
					m.extUnderOmega++
				}
				switch cfg.External {
				case ExternalMask:
					continue
				case ExternalAIPO:
					c := omega / math.Exp(float64(detached[i])) * pi
					if c < pi {
						c = pi
					}
					l, g = -a*c, -a*c
				case ExternalPlain:
					l, g = -a*pi, -a*pi
				case ExternalLUFFY:
					den := pi + gamma
					l, g = -a*pi/den, -a*gamma*pi/(den*den)
				case ExternalRatio:
					useRatio = true
				}
				w = wExt
			}
			if useRatio {
				old := float64(in.OldLogProb[i])
				var x, dx, cl, ch float64 // log ratio, its derivative, clip bounds
				if gspo && src == Internal {
					x, dx = logp-float64(detached[i])+r.seqLR, 1
					if x > maxSeqLogRatio {
						x, dx = maxSeqLogRatio, 0
					}
					cl, ch = slo, shi
				} else {
					x, dx = logp-old, 1
					if x > maxLogRatio {
						x, dx = maxLogRatio, 0
					} else if x < -maxLogRatio {
						x, dx = -maxLogRatio, 0
					}
					cl, ch = lo, hi
				}
				ratio := math.Exp(x)
				l1 := -a * ratio
				l2 := -a * math.Min(math.Max(ratio, cl), ch)
				if l2 > l1 {
					l, g = l2, 0
					if a > 0 {
						m.clipHigh++
					} else {
						m.clipLow++
					}
				} else {
					l, g = l1, -a*ratio*dx
				}
				if dual > 0 && a < 0 && !(gspo && src == Internal) {
					if l3 := -a * dual; l > l3 {
						l, g = l3, 0
						m.dual++
					}
				}
				m.ratioTokens++
				m.ratioSum += ratio
				m.oldMinusNew += old - logp
			}
			if rc.on && src == Internal {
				l, g = l*isw[i], g*isw[i]
			}
			if (src == Internal && klInt) || (src == External && klExt) {
				d, dd := float64(in.RefLogProb[i])-logp, -1.0
				if d > maxLogRatio {
					d, dd = maxLogRatio, 0
				} else if d < -maxLogRatio {
					d, dd = -maxLogRatio, 0
				}
				e := math.Exp(d)
				k, dk := e-d-1, (e-1)*dd
				if k > maxKL {
					k, dk = maxKL, 0
				}
				m.klTokens++
				m.klSum += k
				klLoss += w * k
				g += beta * dk
			}
			if haveEntropy {
				m.entropy += float64(in.Entropy[i])
			}
			pgLoss += w * l
			grad[i] = float32(w * g)
		}
	}
	loss := pgLoss + beta*klLoss
	metrics := m.finish(loss, pgLoss, klLoss, haveEntropy)
	rc.finish(metrics)
	return Output{Loss: loss, GradLogProb: grad, Metrics: metrics}
}
