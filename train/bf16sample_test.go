package train

import (
	"context"
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/runconfig"
)

// TestTrainSampledInBF16 runs two steps of the quick demo with aipo
// train's own engine decoding in bfloat16 (policy.dtype: bfloat16) while
// the learner stays float32: every learner record holds the mismatch of
// the sampler's log-probs against the learner's, larger than the float32
// engine's noise (TestQuickDemoEndToEnd: at most 1e-4, measured 8e-6) and
// of the size bfloat16 products give (each product's inputs rounded by up
// to 2⁻⁹: log-probs within about a tenth on this model), and the run trains
// with the truncated importance-sampling correction on it.
func TestTrainSampledInBF16(t *testing.T) {
	if ok, why := model.BF16DecodeAvailable(); !ok {
		t.Skipf("no bfloat16 products here: %s", why)
	}
	if testing.Short() {
		t.Skip("-short: a two-step training run; make test runs it")
	}
	ctx := context.Background()
	dir := t.TempDir() + "/bf16"
	mutate := func(c *runconfig.Config) {
		c.Policy.DType = "bfloat16"
		c.Learner.Loss.RolloutCorrection.Level = "token"
		c.Run.Steps, c.Eval.Every = 2, 0
	}
	if _, err := runDemo(claimed(t, ctx, dir), demoOptions{RunDir: dir, Quick: true, Mutate: mutate}); err != nil {
		t.Fatal(err)
	}
	for k := int64(0); k < 2; k++ {
		lm := learnRecord(t, ctx, dir, k)
		m := lm.Mismatch
		if m.AbsMax <= 1e-4 || m.AbsMax > 0.5 {
			t.Errorf("step %d: mismatch %+v: |delta| at most %g, want beyond float32's 1e-4 and within bfloat16's 0.5", k, *m, m.AbsMax)
		}
		if _, ok := lm.LossMetrics["rollout_is_weight_mean"]; !ok {
			t.Errorf("step %d: the rollout correction left no rollout_is_weight_mean in %v", k, lm.LossMetrics)
		}
		t.Logf("step %d: %d policy tokens, mismatch |delta| mean %.3g max %.3g", k, m.Tokens, m.AbsMean, m.AbsMax)
	}
}
