package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/records"
)

// Mismatch is the train-inference mismatch the learner measured on a
// step's trajectories (the learner's log-probabilities of the policy's
// tokens against the sampler's), and, when the run corrected for it, the
// rollout correction's effect on the step's update.
type Mismatch struct {
	loss.Mismatch
	// Corrected says the step trained with learner.loss.rollout_correction
	// on; the IS fields below are set only then.
	Corrected bool `json:"corrected"`
	// ISWeightMean is the mean weight of the policy tokens kept in the
	// loss; ISFracHigh and ISFracLow the fractions of policy tokens whose
	// ratio was above the cap and below its inverse; ISMaskedFrac the
	// fraction mask mode left out.
	ISWeightMean float64 `json:"is_weight_mean"`
	ISFracHigh   float64 `json:"is_frac_high"`
	ISFracLow    float64 `json:"is_frac_low"`
	ISMaskedFrac float64 `json:"is_masked_frac"`
	// ByLag is the mismatch over the policy tokens of each version lag
	// (the learner's checkpoint minus the token's version; keys decimal),
	// from the learner's staleness record: how the gap grows as tokens go
	// off-policy. Absent in records without one.
	ByLag map[string]loss.Mismatch `json:"by_lag,omitempty"`
}

// readMismatch reads the learner's record of step k, when there is one
// (a step that was rolled out but not yet learned from has none), and
// returns its mismatch measurement (nil: none recorded, as for a step whose
// trajectories carry no behaviour log-probs).
func readMismatch(ctx context.Context, run string, k int64) (*Mismatch, error) {
	p := rundir.MetricsRecord(run, rundir.LearnKind, k)
	if ok, err := storage.Exists(ctx, p); err != nil || !ok {
		return nil, err
	}
	b, err := storage.ReadFile(ctx, p)
	if err != nil {
		return nil, err
	}
	var rec records.Learn
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s is not a learner record (%v): restore it from the run's metrics.jsonl, which holds the same record on one line", p, err)
	}
	if rec.Step != k {
		return nil, fmt.Errorf("%s records step %d, not %d (the run is damaged): restore it from the run's metrics.jsonl", p, rec.Step, k)
	}
	if rec.Mismatch == nil {
		return nil, nil
	}
	m := &Mismatch{Mismatch: *rec.Mismatch}
	if rec.Staleness != nil {
		m.ByLag = rec.Staleness.MismatchByLag
	}
	if w, ok := rec.LossMetrics[loss.MetricISWeightMean]; ok {
		m.Corrected = true
		m.ISWeightMean = w
		m.ISFracHigh = rec.LossMetrics[loss.MetricISFracHigh]
		m.ISFracLow = rec.LossMetrics[loss.MetricISFracLow]
		m.ISMaskedFrac = rec.LossMetrics[loss.MetricISMaskedFrac]
	}
	return m, nil
}

// LearnerMetrics is what the learner recorded for the update on a step's
// trajectories (<run>/metrics/learn-NNNNNN.json, gathered in
// <run>/metrics.jsonl): the loss, the gradient norm and learning rate, and
// the loss's own figures, among them
//
//	approx_kl_old            KL estimate between the policy and pi_old
//	kl_ref                   KL to the reference policy (0 without kl_coef)
//	clip_frac_low/high/dual  share of tokens clipped, by bound
//	ext_prob_mean            mean probability of the external tokens
//	ext_under_omega_frac     share of external tokens under the lower bound
//	ratio_mean               mean importance ratio
//
// and the rollout correction's figures when it is on. Every figure is kept
// under Metrics as recorded; the train-inference mismatch is Mismatch's.
type LearnerMetrics struct {
	Loss     float64            `json:"loss"`
	GradNorm float64            `json:"grad_norm"`
	LR       float64            `json:"lr"`
	Tokens   int64              `json:"tokens"`
	Metrics  map[string]float64 `json:"metrics,omitempty"`
}

// learnerMetrics is the report's view of a learner record.
func learnerMetrics(r records.Learn) *LearnerMetrics {
	return &LearnerMetrics{Loss: r.Loss, GradNorm: r.GradNorm, LR: r.LR, Tokens: int64(r.Tokens), Metrics: r.LossMetrics}
}

// loadLearner attaches the learner's record of each planned step: from
// <run>/metrics.jsonl, else from the step's own record. A step the learner
// has not trained yet has none. A record that cannot be parsed is an error
// naming its file and line.
func loadLearner(ctx context.Context, run string, steps []StepRef) error {
	recs := map[int64]records.Learn{}
	p := rundir.MetricsLog(run)
	b, err := storage.ReadFile(ctx, p)
	switch {
	case errors.Is(err, storage.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", p, err)
	default:
		for i, line := range bytes.Split(b, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 || !bytes.Contains(line, []byte(`"learn"`)) {
				continue
			}
			var r records.Learn
			if err := json.Unmarshal(line, &r); err != nil {
				return fmt.Errorf("%s line %d: %w (the learner's metrics; aipo train rewrites the file from %s)", p, i+1, err, rundir.Metrics(run))
			}
			if r.Kind == rundir.LearnKind {
				recs[r.Step] = r
			}
		}
	}
	for i := range steps {
		r, ok := recs[steps[i].Step]
		if !ok {
			f := rundir.MetricsRecord(run, rundir.LearnKind, steps[i].Step)
			b, err := storage.ReadFile(ctx, f)
			if errors.Is(err, storage.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", f, err)
			}
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
		steps[i].Learner = learnerMetrics(r)
	}
	return nil
}
