package loss

import (
	"fmt"
	"slices"
	"strings"
)

// A base algorithm is one entry of the table bases below: its name, the
// surrogate its Internal tokens take, the rest of the loss side of its
// preset (ConfigFor) and its line in docs/algorithms.md (BaseTable).
// ConfigFor, Config.Validate, Bases and the errors that list the bases
// read the table; computeFused and computeLoop read the entry's surrogate.
// A new base is one entry (and its surrogate, when none below fits).

// Base algorithms, the names learner.loss.base takes.
const (
	BaseGRPO   = "grpo"
	BaseDrGRPO = "drgrpo"
	BaseDAPO   = "dapo"
	BaseGSPO   = "gspo"
)

// surrogate is the clipped-ratio term a base applies to an Internal token.
type surrogate struct {
	// doc says what the term is (Markdown, for BaseTable).
	doc string
	// reads are the yaml names of the Config fields the term reads.
	reads []string
	// seqRatio: the term reads its trajectory's detached mean log-ratio
	// log pi - log pi_old over its Internal tokens (those the rollout
	// correction keeps).
	seqRatio bool
	// term is the token's loss and derivative with respect to logp, from
	// logp, its stop-gradient copy, log pi_old, the advantage and the
	// trajectory's mean log-ratio (meaningful only when seqRatio).
	term func(c *Config, logp, sgLogp, old, a, seqLogRatio float64) ratioTerm
	// check validates the fields in reads beyond what Validate checks of
	// every configuration (nil: nothing more).
	check func(c Config) error
}

// tokenClip is the token-level clipped surrogate of PPO/GRPO with the
// decoupled clip range [1-ClipLow, 1+ClipHigh] and the optional dual clip
// (ppoToken). External tokens under the "ratio" treatment take it on
// every base.
var tokenClip = surrogate{
	doc:   "the token ratio pi/pi_old clipped to [1-`clip_low`, 1+`clip_high`], bounded by `dual_clip` when set (PPO's clipped surrogate, decoupled clip)",
	reads: []string{"clip_low", "clip_high", "dual_clip"},
	term: func(c *Config, logp, _, old, a, _ float64) ratioTerm {
		return ppoToken(logp, old, a, c.ClipLow, c.ClipHigh, c.DualClip)
	},
}

// seqClip is GSPO's surrogate in its token form (gspoToken): each token's
// ratio has the value of its trajectory's sequence ratio, the geometric
// mean of the token ratios over the trajectory's Internal tokens, clipped
// to [1-SeqClipLow, 1+SeqClipHigh], and the gradient of its own
// log-probability (arXiv 2507.18071; with advantages constant per
// trajectory it has GSPO's sequence-level gradient).
var seqClip = surrogate{
	doc:      "the sequence ratio (the geometric mean of the trajectory's token ratios) clipped to [1-`seq_clip_low`, 1+`seq_clip_high`], with each token's own gradient (GSPO-token)",
	reads:    []string{"seq_clip_low", "seq_clip_high"},
	seqRatio: true,
	term: func(c *Config, logp, sgLogp, _, a, seqLogRatio float64) ratioTerm {
		return gspoToken(logp, sgLogp, seqLogRatio, a, c.SeqClipLow, c.SeqClipHigh)
	},
	check: func(c Config) error { return clipRange("SeqClipLow", "SeqClipHigh", c.SeqClipLow, c.SeqClipHigh) },
}

// base is one base algorithm.
type base struct {
	name string
	// doc is what the base is, with its paper and where its loss differs
	// from the others' (Markdown, for BaseTable).
	doc       string
	surrogate surrogate
	// preset turns DefaultConfig into the loss side of the base's preset
	// (nil: DefaultConfig as it is). The advantage side belongs to the
	// run configuration's preset (runconfig).
	preset func(c *Config)
}

// bases is every base algorithm, in the order the docs and errors list
// them.
var bases = []base{
	{
		name: BaseGRPO,
		doc: "GRPO (Shao et al. 2024, arXiv:2402.03300) as the AIPO paper runs it (arXiv:2605.08401, Table 3): " +
			"the defaults, clip 0.2/0.28, k3 KL 0.001, Eq. 8 (on trajectories without external tokens " +
			"GRPO's per-trajectory token mean)",
		surrogate: tokenClip,
	},
	{
		name: BaseDrGRPO,
		doc: "Dr. GRPO (Liu et al. 2025, arXiv:2503.20783): GRPO's surrogate without length normalisation " +
			"(`seq-mean-token-sum-norm` over `norm_tokens`), PPO's symmetric clip 0.2/0.2, no KL (beta 0, " +
			"as its R1-Zero recipe); its advantages are not std-normalised",
		surrogate: tokenClip,
		preset: func(c *Config) {
			c.Aggregation = AggSeqMeanTokenSumNorm
			c.ClipHigh = 0.2
			c.KLCoef = 0
		},
	},
	{
		name: BaseDAPO,
		doc: "DAPO (Yu et al. 2025, arXiv:2503.14476): GRPO's surrogate with clip-higher 0.2/0.28, " +
			"the token-level mean (`token-mean`), no KL; its dynamic sampling and overlong shaping act " +
			"on the advantages",
		surrogate: tokenClip,
		preset: func(c *Config) {
			c.Aggregation = AggTokenMean
			c.ClipLow, c.ClipHigh = 0.2, 0.28
			c.KLCoef = 0
		},
	},
	{
		name: BaseGSPO,
		doc: "GSPO (Zheng et al. 2025, arXiv:2507.18071): the sequence ratio clipped to [1-3e-4, 1+4e-4], " +
			"a sequence-level aggregation (`seq-mean-token-mean`), KL as the defaults",
		surrogate: seqClip,
		preset: func(c *Config) {
			c.Aggregation = AggSeqMeanTokenMean
			c.SeqClipLow, c.SeqClipHigh = 3e-4, 4e-4
		},
	},
}

// lookupBase returns the entry of the base named name.
func lookupBase(name string) (*base, bool) {
	for i := range bases {
		if bases[i].name == name {
			return &bases[i], true
		}
	}
	return nil, false
}

// Bases lists the base algorithms' names in table order.
func Bases() []string {
	out := make([]string, len(bases))
	for i, b := range bases {
		out[i] = b.name
	}
	return out
}

// baseNames is Bases for an error message.
func baseNames() string { return strings.Join(Bases(), ", ") }

// BaseReads says whether base's surrogate reads the Config field whose
// yaml name is field (clip_low, seq_clip_high, ...); false for an unknown
// base. The fields every base reads (external, aggregation, ...) are not
// the surrogate's.
func BaseReads(base, field string) bool {
	b, ok := lookupBase(base)
	return ok && slices.Contains(b.surrogate.reads, field)
}

// BaseTable is the Markdown table of the base algorithms (docs/).
func BaseTable() string {
	var s strings.Builder
	s.WriteString("| `learner.loss.base` | algorithm | surrogate on the policy's own tokens |\n|---|---|---|\n")
	for _, b := range bases {
		fmt.Fprintf(&s, "| `%s` | %s | %s |\n", b.name, b.doc, b.surrogate.doc)
	}
	return s.String()
}

// ConfigFor returns the loss side of base's preset: DefaultConfig with
// what the base's paper sets (its entry in bases; BaseTable and
// docs/algorithms.md show them).
//
// The advantage side of a preset (normalisation, dynamic sampling,
// overlong shaping) belongs to the rollout's advantage configuration
// (transforms/advantage). Set Aggregation to "eq8" afterwards to put AIPO's
// objective on top of any base.
func ConfigFor(base string) (Config, error) {
	b, ok := lookupBase(base)
	if !ok {
		return Config{}, fmt.Errorf("loss: unknown base algorithm %q: use one of %s", base, baseNames())
	}
	c := DefaultConfig()
	c.Base = base
	if b.preset != nil {
		b.preset(&c)
	}
	return c, nil
}
