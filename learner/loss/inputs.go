package loss

import (
	"fmt"
	"math"
)

// Source says where a token came from and so which term of the loss it
// takes.
type Source uint8

const (
	// Untrained tokens (prompt, chat template, tool tags written by the
	// system) take no part in the loss.
	Untrained Source = iota
	// Internal tokens were sampled from the policy.
	Internal
	// External tokens were written by a collaborator agent.
	External
)

// String returns the lower-case name of s.
func (s Source) String() string {
	switch s {
	case Untrained:
		return "untrained"
	case Internal:
		return "internal"
	case External:
		return "external"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Inputs are the per-token quantities of a batch of packed trajectories.
// All slices have one entry per token. Only the values the loss reads are
// checked for finiteness (those of Internal tokens, those of External
// tokens unless masked, and LogProb of every External token, which the
// metrics read), so Untrained positions may hold any value (for example 0
// where no log-probability exists).
type Inputs struct {
	// LogProb is log pi_theta(token) under the policy being trained.
	LogProb []float32
	// OldLogProb is log pi_old(token) under the policy that sampled the
	// batch (recomputed at the start of the step).
	OldLogProb []float32
	// BehaviorLogProb is log pi_behav(token), the log-probability the
	// sampler (the inference engine) returned for each Internal token. It
	// is read only when Config.RolloutCorrection is on, and may be nil
	// otherwise.
	BehaviorLogProb []float32
	// RefLogProb is log pi_ref(token) under the reference (initial)
	// policy. It may be nil when Config.KLCoef is 0.
	RefLogProb []float32
	// Advantage is each token's advantage (usually the trajectory's
	// group-normalised reward, repeated over its tokens).
	Advantage []float32
	// Source says which term each token takes.
	Source []Source
	// Seq is the trajectory index of each token: >= 0 and non-decreasing,
	// so that each trajectory's tokens are contiguous.
	Seq []int32
	// Entropy optionally holds the policy's entropy at each position; when
	// present its mean over loss tokens is reported as a metric.
	Entropy []float32
}

// InputError reports an invalid entry of Inputs.
type InputError struct {
	Field  string // "LogProb", "Seq", ...
	Index  int    // token index, or -1 for the whole field
	Reason string
}

func (e *InputError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("loss: Inputs.%s %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("loss: Inputs.%s[%d] %s", e.Field, e.Index, e.Reason)
}

// validate checks in against cfg (which is already valid).
func (in *Inputs) validate(cfg *Config) error {
	n := len(in.LogProb)
	lengths := []struct {
		name     string
		n        int
		optional bool
	}{
		{"OldLogProb", len(in.OldLogProb), false},
		{"RefLogProb", len(in.RefLogProb), cfg.KLCoef == 0},
		{"BehaviorLogProb", len(in.BehaviorLogProb), !cfg.RolloutCorrection.On()},
		{"Advantage", len(in.Advantage), false},
		{"Source", len(in.Source), false},
		{"Seq", len(in.Seq), false},
		{"Entropy", len(in.Entropy), true},
	}
	for _, l := range lengths {
		if l.n == n || (l.optional && l.n == 0) {
			continue
		}
		if l.name == "BehaviorLogProb" && l.n == 0 {
			return &InputError{Field: l.name, Index: -1, Reason: fmt.Sprintf("is missing (%d tokens): Config.RolloutCorrection (level %s) weighs each policy token by pi_old/pi_behav and needs the sampler's log-probabilities; give them or turn the correction off", n, cfg.RolloutCorrection.Level)}
		}
		return &InputError{Field: l.name, Index: -1, Reason: fmt.Sprintf("has %d entries but LogProb has %d: every per-token slice must have one entry per token", l.n, n)}
	}
	for i := 0; i < n; i++ {
		s := in.Source[i]
		if s > External {
			return &InputError{Field: "Source", Index: i, Reason: fmt.Sprintf("is %d: use Untrained (0), Internal (1) or External (2)", s)}
		}
		q := in.Seq[i]
		if q < 0 {
			return &InputError{Field: "Seq", Index: i, Reason: fmt.Sprintf("is %d: trajectory indices must be >= 0", q)}
		}
		if i > 0 && q < in.Seq[i-1] {
			return &InputError{Field: "Seq", Index: i, Reason: fmt.Sprintf("is %d after %d: Seq must be non-decreasing (each trajectory's tokens contiguous)", q, in.Seq[i-1])}
		}
		if s == Untrained {
			continue
		}
		// External log-probabilities feed the metrics even when masked.
		if err := finite("LogProb", i, in.LogProb[i]); err != nil {
			return err
		}
		if s == External && cfg.External == ExternalMask {
			continue
		}
		if err := finite("Advantage", i, in.Advantage[i]); err != nil {
			return err
		}
		usesOld := s == Internal || cfg.External == ExternalRatio
		if usesOld {
			if err := finite("OldLogProb", i, in.OldLogProb[i]); err != nil {
				return err
			}
		}
		if s == Internal && cfg.RolloutCorrection.On() {
			if err := finite("BehaviorLogProb", i, in.BehaviorLogProb[i]); err != nil {
				return err
			}
		}
		if cfg.KLCoef != 0 && (s == Internal || cfg.KLExternal) {
			if err := finite("RefLogProb", i, in.RefLogProb[i]); err != nil {
				return err
			}
		}
		if len(in.Entropy) > 0 {
			if err := finite("Entropy", i, in.Entropy[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func finite(field string, i int, v float32) error {
	f := float64(v)
	if math.IsNaN(f) {
		return &InputError{Field: field, Index: i, Reason: "is NaN: the values of tokens in the loss must be finite; check the forward pass that produced them"}
	}
	if math.IsInf(f, 0) {
		return &InputError{Field: field, Index: i, Reason: fmt.Sprintf("is %v: the values of tokens in the loss must be finite; check the forward pass that produced them", f)}
	}
	return nil
}
