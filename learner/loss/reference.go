package loss

import "math"

// computeLoop is the reference form of Compute: it groups tokens into
// trajectories, evaluates each token with the small functions of terms.go,
// then aggregates, all in the most literal way. detached holds the values
// that the stop-gradient operations see (Compute passes in.LogProb); tests
// pass a frozen copy to differentiate the surrogate numerically.
func computeLoop(cfg Config, in Inputs, detached []float32) Output {
	n := len(in.LogProb)
	kl := cfg.KLCoef != 0

	// Trajectories in order of appearance, each a list of token indices.
	var order []int32
	members := map[int32][]int{}
	for i := 0; i < n; i++ {
		q := in.Seq[i]
		if _, ok := members[q]; !ok {
			order = append(order, q)
		}
		members[q] = append(members[q], i)
	}

	// Rollout correction: per Internal token, log rho at the configured
	// level, the weight of its policy term and whether it stays in the
	// loss.
	rcOn := cfg.RolloutCorrection.On()
	isWeight := make([]float64, n)
	isKeep := make([]bool, n)
	rc := correctionSums{on: rcOn, cap: cfg.RolloutCorrection.Cap}
	if rcOn {
		for _, q := range order {
			var lrs []float64
			for _, i := range members[q] {
				if in.Source[i] == Internal {
					lrs = append(lrs, float64(in.OldLogProb[i])-float64(in.BehaviorLogProb[i]))
				}
			}
			k := 0
			for _, i := range members[q] {
				if in.Source[i] != Internal {
					continue
				}
				var lr float64
				switch cfg.RolloutCorrection.Level {
				case CorrectionToken:
					lr = lrs[k]
				case CorrectionSequence:
					for _, x := range lrs {
						lr += x
					}
				case CorrectionGeometric:
					for _, x := range lrs {
						lr += x
					}
					lr /= float64(len(lrs))
				}
				k++
				lr = guardLogRho(lr)
				isWeight[i], isKeep[i] = correctionWeight(lr, cfg.RolloutCorrection.Cap, cfg.RolloutCorrection.Mode)
				rc.add(lr, isWeight[i], isKeep[i])
			}
		}
	}
	dropped := func(i int) bool { return rcOn && in.Source[i] == Internal && !isKeep[i] }

	inLoss := func(i int) bool {
		if dropped(i) {
			return false
		}
		return in.Source[i] == Internal || (in.Source[i] == External && cfg.External != ExternalMask)
	}
	takesKL := func(i int) bool {
		return kl && (in.Source[i] == Internal || (cfg.KLExternal && inLoss(i)))
	}

	pg := make([]float64, n)     // policy term per token
	dpg := make([]float64, n)    // its derivative
	k3 := make([]float64, n)     // KL estimate per token
	dk3 := make([]float64, n)    // its derivative
	weight := make([]float64, n) // aggregation weight per token
	m := newMetricSums()

	// Per-token terms.
	for _, q := range order {
		// GSPO's detached sequence log-ratio over this trajectory's
		// Internal tokens.
		seqLR, nInt := 0.0, 0
		for _, i := range members[q] {
			if in.Source[i] == Internal && !dropped(i) {
				seqLR += float64(detached[i]) - float64(in.OldLogProb[i])
				nInt++
			}
		}
		if nInt > 0 {
			seqLR /= float64(nInt)
		}
		for _, i := range members[q] {
			a := float64(in.Advantage[i])
			logp := float64(in.LogProb[i])
			switch in.Source[i] {
			case Untrained:
				m.untrained++
				continue
			case Internal:
				m.internal++
				if dropped(i) {
					continue
				}
				var t ratioTerm
				if cfg.Base == BaseGSPO {
					t = gspoToken(logp, float64(detached[i]), seqLR, a, cfg.SeqClipLow, cfg.SeqClipHigh)
				} else {
					t = ppoToken(logp, float64(in.OldLogProb[i]), a, cfg.ClipLow, cfg.ClipHigh, cfg.DualClip)
				}
				pg[i], dpg[i] = t.loss, t.grad
				if rcOn {
					pg[i], dpg[i] = pg[i]*isWeight[i], dpg[i]*isWeight[i]
				}
				m.addRatio(t, logp, float64(in.OldLogProb[i]))
			case External:
				m.external++
				pi := math.Exp(logp)
				m.extProb += pi
				if pi < cfg.Omega {
					m.extUnderOmega++
				}
				switch cfg.External {
				case ExternalAIPO:
					pg[i], dpg[i], _ = aipoToken(logp, float64(detached[i]), a, cfg.Omega)
				case ExternalPlain:
					pg[i], dpg[i] = plainToken(logp, a)
				case ExternalLUFFY:
					pg[i], dpg[i] = luffyToken(logp, a, cfg.Gamma)
				case ExternalRatio:
					t := ppoToken(logp, float64(in.OldLogProb[i]), a, cfg.ClipLow, cfg.ClipHigh, cfg.DualClip)
					pg[i], dpg[i] = t.loss, t.grad
					m.addRatio(t, logp, float64(in.OldLogProb[i]))
				case ExternalMask:
					continue
				}
			}
			if takesKL(i) {
				k3[i], dk3[i] = k3Token(logp, float64(in.RefLogProb[i]))
				m.klTokens++
				m.klSum += k3[i]
			}
			if len(in.Entropy) > 0 {
				m.entropy += float64(in.Entropy[i])
			}
		}
	}

	// Aggregation weights.
	trajectories, lossTokens := 0, 0
	for _, q := range order {
		for _, i := range members[q] {
			if inLoss(i) {
				lossTokens++
			}
		}
	}
	for _, q := range order {
		nl, ni, ne := 0, 0, 0
		for _, i := range members[q] {
			if inLoss(i) {
				nl++
				if in.Source[i] == Internal {
					ni++
				} else {
					ne++
				}
			}
		}
		if nl > 0 {
			trajectories++
		}
		for _, i := range members[q] {
			if !inLoss(i) {
				continue
			}
			switch cfg.Aggregation {
			case AggTokenMean:
				weight[i] = 1 / float64(lossTokens)
			case AggSeqMeanTokenSum:
				weight[i] = 1
			case AggSeqMeanTokenMean:
				weight[i] = 1 / float64(nl)
			case AggSeqMeanTokenSumNorm:
				weight[i] = 1 / float64(cfg.NormTokens)
			case AggEq8:
				if in.Source[i] == Internal {
					weight[i] = 1 / float64(ni)
				} else {
					weight[i] = 1 / float64(ne)
				}
			}
		}
	}
	if cfg.Aggregation != AggTokenMean && trajectories > 0 {
		for i := range weight {
			weight[i] /= float64(trajectories)
		}
	}

	out := Output{GradLogProb: make([]float32, n)}
	var pgLoss, klLoss float64
	for i := 0; i < n; i++ {
		if weight[i] == 0 {
			continue
		}
		pgLoss += weight[i] * pg[i]
		klLoss += weight[i] * k3[i]
		out.GradLogProb[i] = float32(weight[i] * (dpg[i] + cfg.KLCoef*dk3[i]))
	}
	out.Loss = pgLoss + cfg.KLCoef*klLoss
	m.lossTokens, m.trajectories = lossTokens, trajectories
	out.Metrics = m.finish(out.Loss, pgLoss, klLoss, len(in.Entropy) > 0)
	rc.finish(out.Metrics)
	return out
}
