package trainer

import (
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/loss"
)

// A learner moved onto the registry's "cpu" backend takes the step of the
// default (nil Compute) bit for bit, and release puts it back.
func TestOnCPUBackendIsTheDefaultStep(t *testing.T) {
	b, err := backend.Lookup("cpu")
	if err != nil {
		t.Fatal(err)
	}
	dv, err := b.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dv.Close()
	var params [2][]float32
	for k, on := range []bool{false, true} {
		l := newLearner(t, 1e-2, 5)
		if on {
			release, err := l.On(dv, backend.FP32)
			if err != nil {
				t.Fatal(err)
			}
			if l.PolicyCompute == nil || l.RefCompute != nil {
				t.Fatalf("On: policy compute %v, reference compute %v; want the policy's set and no reference (Ref is nil)", l.PolicyCompute, l.RefCompute)
			}
			defer release()
		}
		cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 64, PPOEpochs: 1, MiniBatches: 1}
		cfg.Loss.KLCoef = 0
		if _, err := l.RLStep(cfg, rlSamples()); err != nil {
			t.Fatal(err)
		}
		params[k] = append([]float32(nil), l.Policy.ParamData()...)
	}
	if !slices.Equal(params[0], params[1]) {
		t.Fatal("an RL step on the cpu backend changed the parameters differently from the default step")
	}
}
