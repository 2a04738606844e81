package train

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/schemas"
)

// sampled gives t the behaviour log-probs of a sampler that ran h's
// policy: the model's log-probability of each policy token, moved by
// shift; 0 for the other tokens, as the schema stores them.
func sampled(t *testing.T, h handBuilt, tr schemas.Trajectory, shift float32) schemas.Trajectory {
	t.Helper()
	var idx []int
	for j, s := range tr.TokenSource {
		if s == schemas.SourcePolicy {
			idx = append(idx, j)
		}
	}
	lp := extLogProbs(t, h.m, tr.PromptIDs, tr.ResponseIDs, idx)
	tr.BehaviorLogProbs = make([]float32, len(tr.ResponseIDs))
	for k, j := range idx {
		tr.BehaviorLogProbs[j] = lp[k] + shift
	}
	return tr
}

func policyTokens(trs ...schemas.Trajectory) int {
	n := 0
	for _, tr := range trs {
		for _, s := range tr.TokenSource {
			if s == schemas.SourcePolicy {
				n++
			}
		}
	}
	return n
}

// The learner compares its log-probs of the policy's tokens with the
// sampler's and records the mismatch in the step's metrics (numbers as
// numbers): ~0 when the sampler ran the same weights, the shift when its
// numbers are off by one. Collaborator and template tokens are not
// compared.
func TestLearnRecordsMismatch(t *testing.T) {
	ctx := context.Background()
	for _, shift := range []float32{0, -0.25} {
		h := newHandBuilt(t)
		good, bad := sampled(t, h, h.good, shift), sampled(t, h, h.bad, shift)
		if _, err := schemas.WriteStep(ctx, rundir.Step(h.cfg.Run.Dir, 0), [][]schemas.Trajectory{{good, bad}}, schemas.Manifest{Run: h.cfg.Run.Name}); err != nil {
			t.Fatal(err)
		}
		met, err := Learn(claimed(t, ctx, h.cfg.Run.Dir), h.cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		m := met.Mismatch
		if m == nil {
			t.Fatalf("shift %v: no mismatch recorded", shift)
		}
		// The learner scores both trajectories in one packed pass, the
		// reference scored each alone: float32 sums in another order,
		// ~1e-6 at these magnitudes.
		d := math.Abs(float64(shift))
		if m.Tokens != policyTokens(good, bad) || m.Sequences != 2 || math.Abs(m.AbsMean-d) > 1e-5 || math.Abs(m.AbsMax-d) > 1e-5 || math.Abs(m.KL-float64(shift)) > 1e-5 {
			t.Errorf("shift %v: mismatch %+v, want %d policy tokens of 2 trajectories, |delta| %v, kl %v", shift, *m, policyTokens(good, bad), d, shift)
		}
		b, err := storage.ReadFile(ctx, rundir.MetricsRecord(h.cfg.Run.Dir, rundir.LearnKind, 0))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Mismatch map[string]any `json:"mismatch"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"tokens", "sequences", "abs_mean", "abs_max", "kl", "kl_k3"} {
			if _, ok := rec.Mismatch[k].(float64); !ok {
				t.Errorf("learner record's mismatch.%s = %#v, want a JSON number (%s)", k, rec.Mismatch[k], b)
			}
		}
	}
}

// A step whose trajectories carry no behaviour log-probs (all 0: the
// sampler returned none) is learned from without a mismatch record; with
// the rollout correction on it is refused, naming the step and the fix,
// and no checkpoint is written.
func TestLearnWithoutBehaviorLogProbs(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t) // its trajectories hold behavior_logprobs 0
	if _, err := schemas.WriteStep(ctx, rundir.Step(h.cfg.Run.Dir, 0), [][]schemas.Trajectory{{h.good, h.bad}}, schemas.Manifest{Run: h.cfg.Run.Name}); err != nil {
		t.Fatal(err)
	}
	ctx = claimed(t, ctx, h.cfg.Run.Dir)
	on := h.cfg
	on.Learner.Loss.RolloutCorrection = loss.RolloutCorrection{Level: loss.CorrectionSequence, Cap: 2, Mode: loss.CorrectionTruncate}
	_, err := Learn(ctx, on, 0)
	for _, want := range []string{"learn step 0", "learner.loss.rollout_correction is on (level sequence)", "no behaviour log-probs",
		"aipo rollout --config <run.yaml> --step 0 --force", "learner.loss.rollout_correction.level: off", "checkpoint 1 was not written"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("correction on, no behaviour log-probs: Learn = %v, want an error with %q", err, want)
		}
	}
	if ok, _ := checkpoint.Committed(ctx, rundir.Checkpoint(h.cfg.Run.Dir, 1)); ok {
		t.Fatal("the refused step committed checkpoint 1")
	}
	met, err := Learn(ctx, h.cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if met.Mismatch != nil {
		t.Errorf("a step without behaviour log-probs recorded a mismatch: %+v", *met.Mismatch)
	}
}

// With the correction on and the sampler's numbers off, the step trains
// with the correction's weights: its metrics report them, and its update
// differs from the uncorrected one.
func TestLearnRolloutCorrection(t *testing.T) {
	ctx := context.Background()
	var losses []float64
	for _, rc := range []loss.RolloutCorrection{loss.DefaultRolloutCorrection(), {Level: loss.CorrectionToken, Cap: 1.5, Mode: loss.CorrectionTruncate}} {
		h := newHandBuilt(t)
		good, bad := sampled(t, h, h.good, -0.5), sampled(t, h, h.bad, -0.5) // rho = e^0.5 > 1.5
		if _, err := schemas.WriteStep(ctx, rundir.Step(h.cfg.Run.Dir, 0), [][]schemas.Trajectory{{good, bad}}, schemas.Manifest{Run: h.cfg.Run.Name}); err != nil {
			t.Fatal(err)
		}
		h.cfg.Learner.Loss.RolloutCorrection = rc
		met, err := Learn(claimed(t, ctx, h.cfg.Run.Dir), h.cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, has := met.LossMetrics[loss.MetricISWeightMean]
		if has != rc.On() {
			t.Fatalf("correction %+v: loss metrics %v", rc, met.LossMetrics)
		}
		if rc.On() {
			// Every policy token's ratio is e^0.5 up to float32 noise,
			// above the cap: all are truncated to 1.5.
			if w, hi := met.LossMetrics[loss.MetricISWeightMean], met.LossMetrics[loss.MetricISFracHigh]; math.Abs(w-1.5) > 1e-12 || hi != 1 {
				t.Errorf("weight mean %v, fraction above the cap %v; want 1.5 and 1", w, hi)
			}
		}
		losses = append(losses, met.Loss)
	}
	if losses[0] == losses[1] {
		t.Errorf("the corrected step's loss %v equals the uncorrected one's", losses[1])
	}
}
