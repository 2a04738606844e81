package loss

import (
	"maps"
	"math"
	"slices"
	"strings"
)

// The loss is a per-token term followed by an aggregation, each chosen by
// name from a table: the base's surrogate on Internal tokens (bases.go),
// the External treatment and the aggregation (below). A new External
// treatment or aggregation is one entry (and, where it takes a parameter,
// its check in Config.Validate); computeFused and computeLoop read the
// same entries.

// externalTreatment is what an External treatment does to a collaborator
// token: a term of its own, the base's clipped ratio, or nothing.
type externalTreatment struct {
	// term is the token's loss and d loss/d logp, from logp, its
	// stop-gradient copy and the advantage (nil for ratio and mask).
	term func(c *Config, logp, sgLogp, a float64) (loss, grad float64)
	// ratio: the token takes the token-level clipped ratio (tokenClip),
	// whatever the base.
	ratio bool
	// masked: the token is left out of the loss (and of its counts).
	masked bool
}

var externalTreatments = map[string]externalTreatment{
	ExternalAIPO: {term: func(c *Config, logp, sgLogp, a float64) (float64, float64) {
		l, g, _ := aipoToken(logp, sgLogp, a, c.Omega)
		return l, g
	}},
	ExternalPlain: {term: func(_ *Config, logp, _, a float64) (float64, float64) { return plainToken(logp, a) }},
	ExternalLUFFY: {term: func(c *Config, logp, _, a float64) (float64, float64) { return luffyToken(logp, a, c.Gamma) }},
	ExternalRatio: {ratio: true},
	ExternalMask:  {masked: true},
}

// aggCounts are the counts an aggregation weighs by: one trajectory's
// loss tokens by source, and the batch's loss tokens and trajectories
// (those with a loss token).
type aggCounts struct {
	internal, external       int
	lossTokens, trajectories int
	normTokens               int // Config.NormTokens
}

// aggregation gives the weight of each Internal and of each External loss
// token of one trajectory; the loss is the weighted sum of the terms.
type aggregation func(c aggCounts) (wInt, wExt float64)

// perTrajectory is 1/S, S the batch's trajectories with a loss token (0
// when there are none: no token is weighed then).
func perTrajectory(c aggCounts) float64 {
	if c.trajectories == 0 {
		return 0
	}
	return 1 / float64(c.trajectories)
}

var aggregations = map[string]aggregation{
	AggEq8: func(c aggCounts) (wInt, wExt float64) {
		invS := perTrajectory(c)
		if c.internal > 0 {
			wInt = invS / float64(c.internal)
		}
		if c.external > 0 {
			wExt = invS / float64(c.external)
		}
		return wInt, wExt
	},
	AggTokenMean: func(c aggCounts) (float64, float64) {
		w := 1 / float64(max(c.lossTokens, 1))
		return w, w
	},
	AggSeqMeanTokenSum: func(c aggCounts) (float64, float64) {
		w := perTrajectory(c)
		return w, w
	},
	AggSeqMeanTokenMean: func(c aggCounts) (float64, float64) {
		if nl := c.internal + c.external; nl > 0 {
			w := perTrajectory(c) / float64(nl)
			return w, w
		}
		return 0, 0
	},
	AggSeqMeanTokenSumNorm: func(c aggCounts) (float64, float64) {
		w := perTrajectory(c) / float64(c.normTokens)
		return w, w
	},
}

// names lists a table's keys for an error message.
func names[V any](m map[string]V) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

// policyTerm is one trained token's policy term and its derivative: the
// base's surrogate sur for an Internal token, the token-level clipped
// ratio for an External one under a ratio treatment, the treatment's own
// term otherwise. Ratio tokens add to m's ratio sums.
func policyTerm(c *Config, sur *surrogate, ext externalTreatment, internal bool, logp, sgLogp, old, a, seqLogRatio float64, m *metricSums) (loss, grad float64) {
	if !internal && !ext.ratio {
		return ext.term(c, logp, sgLogp, a)
	}
	if !internal {
		sur = &tokenClip
	}
	t := sur.term(c, logp, sgLogp, old, a, seqLogRatio)
	m.addRatio(t, logp, old)
	return t.loss, t.grad
}

// addExternal counts an External token (in the loss or not) and its
// probability against omega.
func (m *metricSums) addExternal(logp, omega float64) {
	m.external++
	pi := math.Exp(logp)
	m.extProb += pi
	if pi < omega {
		m.extUnderOmega++
	}
}
