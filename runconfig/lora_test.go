package runconfig

import (
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/peft"
)

// learner.lora's defaults (alpha 2 x rank, every target, PEFT's init), an
// adapter to continue with its own settings, and each bad setting refused
// with its field.
func TestLoRAConfig(t *testing.T) {
	parse := func(lora string) (Config, error) {
		return Parse([]byte("run: {dir: r}\ndata: {demo: true}\nlearner: {lora: "+lora+"}\n"), "t.yaml", "/base")
	}
	c, err := parse("{rank: 8}")
	if err != nil {
		t.Fatal(err)
	}
	l := c.Learner.LoRA
	if !c.LoRAOn() || l.Alpha != 16 || !slices.Equal(l.Targets, peft.Targets) || l.Init != peft.InitDefault {
		t.Errorf("defaults: %+v", l)
	}
	if c, err = parse("{rank: 4, targets: all-linear}"); err == nil {
		t.Errorf("targets given as a string parsed: %+v", c.Learner.LoRA)
	}
	if c, err = parse("{rank: 4, targets: [all-linear]}"); err != nil || len(c.Learner.LoRA.Targets) != 7 {
		t.Errorf("targets [all-linear]: %v %+v", err, c.Learner.LoRA)
	}
	if c, err = parse("{adapter: ad, dropout: 0.1}"); err != nil || c.Learner.LoRA.Adapter != "/base/ad" || c.Learner.LoRA.Rank != 0 {
		t.Errorf("an adapter to continue: %v %+v", err, c.Learner.LoRA)
	}
	if c, err = Parse([]byte("run: {dir: r}\ndata: {demo: true}\nlearner: {lora: {rank: 4}, zero: 3}\n"), "t.yaml", ""); err != nil || c.Learner.Zero != 3 {
		t.Errorf("learner.lora at learner.zero 3 on the cpu backend (the frozen base sharded): %v", err)
	}
	if c, err = Parse([]byte("run: {dir: r}\ndata: {demo: true}\nlearner: {lora: {rank: 4}, zero: 3, backend: cuda}\n"), "t.yaml", ""); err != nil || c.Learner.Zero != 3 {
		t.Errorf("learner.lora at learner.zero 3 on the cuda backend in float32 (the frozen base sharded on the GPUs): %v", err)
	}
	if c, err = Parse([]byte("run: {dir: r}\ndata: {demo: true}\n"), "t.yaml", ""); err != nil || c.LoRAOn() {
		t.Errorf("without learner.lora: %v, on %v", err, c.LoRAOn())
	}
	for lora, want := range map[string]string{
		"{rank: 0}":                            "learner.lora.rank: 0: the rank must be at least 1",
		"{rank: -2}":                           "learner.lora.rank: -2",
		"{rank: 4, alpha: -1}":                 "learner.lora.alpha: -1 must be a positive number",
		"{rank: 4, dropout: 1}":                "learner.lora.dropout: 1 must lie in [0, 1)",
		"{rank: 4, dropout: -0.1}":             "learner.lora.dropout: -0.1",
		"{rank: 4, targets: [lm_head]}":        `learner.lora.targets: "lm_head" is not a projection`,
		"{rank: 4, targets: [q_proj, q_proj]}": `learner.lora.targets: "q_proj" is listed twice`,
		"{rank: 4, init: olora}":               `learner.lora.init: "olora" is unknown`,
		"{adapter: ad, rank: 8}":               "learner.lora.adapter: /base/ad is continued with its own rank",
		"{rank: 4, extra: 1}":                  "extra",
	} {
		if _, err := parse(lora); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("learner.lora %s: %v, want an error with %q", lora, err, want)
		}
	}
	for set, want := range map[string]string{
		"precision: bf16":          "learner.precision: the cpu backend holds a LoRA run's frozen base in float32 and cannot hold it in bfloat16",
		"zero: 2":                  "learner.zero: 2 shards the gradients of the weights a run trains",
		"objective: rejection-sft": "learner.lora: trains with learner.objective rl",
	} {
		_, err := Parse([]byte("run: {dir: r}\ndata: {demo: true}\nlearner: {lora: {rank: 4}, "+set+"}\n"), "t.yaml", "")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("learner.lora with %s: %v, want an error with %q", set, err, want)
		}
	}
	// ZeRO stage 3 on the cuda backend in bfloat16, a LoRA run's or not
	// (learner/cuda/zero3.go's bfloat16 passes: the frozen base's and the
	// reference's shares held in bfloat16 where the products read them).
	for _, lora := range []string{"lora: {rank: 4}, ", ""} {
		if _, err := Parse([]byte("run: {dir: r}\ndata: {demo: true}\nlearner: {"+lora+"zero: 3, backend: cuda, precision: bf16}\n"), "t.yaml", ""); err != nil {
			t.Errorf("learner {%szero: 3, backend: cuda, precision: bf16}: %v, want it accepted", lora, err)
		}
	}
}
