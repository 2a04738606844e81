package trainer

import (
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
)

func qwenShaped(C, F, L, V int) model.Config {
	return model.Config{ModelType: "qwen2", HiddenSize: C, IntermediateSize: F, NumHiddenLayers: L, NumAttentionHeads: C / 64,
		NumKeyValueHeads: max(1, C/256), VocabSize: V, MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, HiddenAct: "silu"}
}

// PlanStep on the CPU: 20 bytes a parameter with the reference (weights
// and gradients 4 each, AdamW's moments 8, the reference's weights 4 and
// no gradients), 16 without; the activations are model.PassBytes of one
// sequence of micro_batch_tokens; "auto" checkpointing turns on above 1
// GiB of activations (a 24M model at 4096 tokens) and stays off for the
// demo's ~1M-parameter shape at 8192.
func TestPlanStepCPU(t *testing.T) {
	cfg := qwenShaped(256, 1024, 16, 32000)
	P := model.ParamCount(cfg)
	for _, ref := range []bool{true, false} {
		st, err := PlanStep(MemoryConfig{Model: cfg, MicroBatchTokens: 4096, Reference: ref})
		if err != nil {
			t.Fatal(err)
		}
		per := 20
		if !ref {
			per = 16
		}
		if got := st.Host.Total() - st.Host.Activations; got != int64(per)*P {
			t.Errorf("reference %v: %d bytes besides activations, want %d a parameter (%d)", ref, got, per, int64(per)*P)
		}
		if st.Device.Total() != 0 {
			t.Errorf("the CPU backend plans %d bytes of device memory", st.Device.Total())
		}
		if !st.Checkpointing {
			t.Error("auto did not turn checkpointing on for 4096 tokens of a 24M model")
		}
		want := model.PassBytes(cfg, model.Packed(4096, 4096, true))
		if st.Host.Activations != want {
			t.Errorf("activations %d, model.PassBytes %d", st.Host.Activations, want)
		}
		if lim := float64(4 * 4 * cfg.HiddenSize); st.ActivationBytesPerTokenLayer > lim {
			t.Errorf("%.0f activation bytes per token per layer checkpointed, above 4 x hidden x 4 = %.0f", st.ActivationBytesPerTokenLayer, lim)
		}
	}
	off, err := PlanStep(MemoryConfig{Model: cfg, MicroBatchTokens: 4096, Checkpointing: CheckpointingOff})
	if err != nil {
		t.Fatal(err)
	}
	if off.Checkpointing || off.Host.Activations <= CheckpointingThreshold {
		t.Errorf("off: checkpointing %v, activations %d", off.Checkpointing, off.Host.Activations)
	}
	tiny := qwenShaped(128, 344, 3, 2048)
	if on, err := UseCheckpointing(MemoryConfig{Model: tiny, MicroBatchTokens: 8192}); err != nil || on {
		t.Errorf("a ~1M-parameter model at 8192 tokens: checkpointing %v, %v; want off", on, err)
	}
	if on, _ := UseCheckpointing(MemoryConfig{Model: tiny, MicroBatchTokens: 8192, Checkpointing: CheckpointingOn}); !on {
		t.Error("on is not on")
	}
	if _, err := UseCheckpointing(MemoryConfig{Model: tiny, MicroBatchTokens: 8192, Checkpointing: "sometimes"}); err == nil || !strings.Contains(err.Error(), "use auto, on, off or offload") {
		t.Errorf("an unknown mode: %v", err)
	}
	// The CPU's passes are in host memory already: offloading their
	// inputs there is refused, naming what to give instead.
	if _, err := PlanStep(MemoryConfig{Model: tiny, MicroBatchTokens: 8192, Checkpointing: CheckpointingOffload}); err == nil || !strings.Contains(err.Error(), "cpu backend's passes run in host memory already: give on") {
		t.Errorf("offload on the cpu backend: %v", err)
	}
	if _, err := PlanStep(MemoryConfig{Model: tiny, MicroBatchTokens: 8192, Backend: "tpu"}); err == nil || !strings.Contains(err.Error(), `backend "tpu" is unknown`) {
		t.Errorf("an unknown backend: %v", err)
	}
}
