package analytics

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/loss"
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
}

// learnerRecordPath is where the learner writes its record of step k.
func learnerRecordPath(run string, k int64) string {
	return storage.Join(run, "metrics", fmt.Sprintf("learn-%06d.json", k))
}

// readMismatch reads the learner's record of step k, when there is one
// (a step that was rolled out but not yet learned from has none), and
// returns its mismatch measurement (nil: none recorded, as for a step whose
// trajectories carry no behaviour log-probs).
func readMismatch(ctx context.Context, run string, k int64) (*Mismatch, error) {
	p := learnerRecordPath(run, k)
	if ok, err := storage.Exists(ctx, p); err != nil || !ok {
		return nil, err
	}
	b, err := storage.ReadFile(ctx, p)
	if err != nil {
		return nil, err
	}
	var rec struct {
		Step        int64              `json:"step"`
		Mismatch    *loss.Mismatch     `json:"mismatch"`
		LossMetrics map[string]float64 `json:"loss_metrics"`
	}
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
	if w, ok := rec.LossMetrics[loss.MetricISWeightMean]; ok {
		m.Corrected = true
		m.ISWeightMean = w
		m.ISFracHigh = rec.LossMetrics[loss.MetricISFracHigh]
		m.ISFracLow = rec.LossMetrics[loss.MetricISFracLow]
		m.ISMaskedFrac = rec.LossMetrics[loss.MetricISMaskedFrac]
	}
	return m, nil
}
