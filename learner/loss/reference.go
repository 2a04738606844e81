package loss

// computeLoop is the reference form of Compute: it groups tokens into
// trajectories, evaluates each token with the small functions of terms.go,
// then aggregates, all in the most literal way. detached holds the values
// that the stop-gradient operations see (Compute passes in.LogProb); tests
// pass a frozen copy to differentiate the surrogate numerically.
func computeLoop(cfg Config, in Inputs, detached []float32) Output {
	n := len(in.LogProb)
	b, _ := lookupBase(cfg.Base)
	ext := externalTreatments[cfg.External]
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
	isWeight, isKeep, rc := referenceCorrection(cfg.RolloutCorrection, in, order, members)
	dropped := func(i int) bool { return rc.on && in.Source[i] == Internal && !isKeep[i] }
	inLoss := func(i int) bool {
		if dropped(i) {
			return false
		}
		return in.Source[i] == Internal || (in.Source[i] == External && !ext.masked)
	}
	takesKL := func(i int) bool {
		return kl && (in.Source[i] == Internal || (cfg.KLExternal && inLoss(i)))
	}

	pg := make([]float64, n)  // policy term per token
	dpg := make([]float64, n) // its derivative
	k3 := make([]float64, n)  // KL estimate per token
	dk3 := make([]float64, n) // its derivative
	m := newMetricSums()

	// Per-token terms.
	for _, q := range order {
		// The detached sequence log-ratio over this trajectory's Internal
		// tokens (read by surrogates with seqRatio).
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
			logp := float64(in.LogProb[i])
			switch in.Source[i] {
			case Untrained:
				m.untrained++
				continue
			case Internal:
				m.internal++
			case External:
				m.addExternal(logp, cfg.Omega)
			}
			if !inLoss(i) {
				continue
			}
			internal := in.Source[i] == Internal
			pg[i], dpg[i] = policyTerm(&cfg, &b.surrogate, ext, internal, logp, float64(detached[i]), float64(in.OldLogProb[i]), float64(in.Advantage[i]), seqLR, m)
			if rc.on && internal {
				pg[i], dpg[i] = pg[i]*isWeight[i], dpg[i]*isWeight[i]
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

	weight, counts := referenceWeights(cfg, in, order, members, inLoss)

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
	m.lossTokens, m.trajectories = counts.lossTokens, counts.trajectories
	out.Metrics = m.finish(out.Loss, pgLoss, klLoss, len(in.Entropy) > 0)
	rc.finish(out.Metrics)
	return out
}

// referenceCorrection is the rollout correction written out per
// trajectory: for every Internal token, log rho at the configured level,
// the weight of its policy term and whether it stays in the loss.
func referenceCorrection(c RolloutCorrection, in Inputs, order []int32, members map[int32][]int) (weight []float64, keep []bool, sums correctionSums) {
	n := len(in.LogProb)
	weight, keep = make([]float64, n), make([]bool, n)
	sums = correctionSums{on: c.On(), cap: c.Cap}
	if !sums.on {
		return weight, keep, sums
	}
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
			switch c.Level {
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
			weight[i], keep[i] = correctionWeight(lr, c.Cap, c.Mode)
			sums.add(lr, weight[i], keep[i])
		}
	}
	return weight, keep, sums
}

// referenceWeights is every token's aggregation weight (0 for tokens not
// in the loss), counted and weighed trajectory by trajectory, and the
// batch's counts.
func referenceWeights(cfg Config, in Inputs, order []int32, members map[int32][]int, inLoss func(int) bool) ([]float64, aggCounts) {
	n := len(in.LogProb)
	counts := aggCounts{normTokens: cfg.NormTokens}
	for _, q := range order {
		nl := 0
		for _, i := range members[q] {
			if inLoss(i) {
				nl++
			}
		}
		counts.lossTokens += nl
		if nl > 0 {
			counts.trajectories++
		}
	}
	weigh := aggregations[cfg.Aggregation]
	weight := make([]float64, n)
	for _, q := range order {
		counts.internal, counts.external = 0, 0
		for _, i := range members[q] {
			if inLoss(i) && in.Source[i] == Internal {
				counts.internal++
			} else if inLoss(i) {
				counts.external++
			}
		}
		wInt, wExt := weigh(counts)
		for _, i := range members[q] {
			if inLoss(i) && in.Source[i] == Internal {
				weight[i] = wInt
			} else if inLoss(i) {
				weight[i] = wExt
			}
		}
	}

	return weight, counts
}
