package plan

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
)

// loraMath is configs/math.yaml's run (the KL term, the policy served at
// policy.endpoint) with sequences of 8,192 tokens (1,024 prompt and 7,168
// response) in micro-batches of 8,192, training a LoRA adapter of rank 64
// (alpha 128) on every projection on GPUs (learner.backend cuda) with the
// frozen base held in bfloat16 (learner.precision bf16): docs/lora.md's
// GPU examples.
func loraMath(t *testing.T) runconfig.Config {
	t.Helper()
	cfg := mathConfig(t)
	cfg.Learner.Precision = "bf16"
	cfg.Learner.MicroBatchTokens, cfg.Policy.MaxResponseTokens = 8192, 7168
	cfg.Learner.LoRA = &runconfig.LoRA{Rank: 64, Alpha: 128, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, Init: "default"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The GPU examples of docs/lora.md, held line for line: Qwen2.5-7B-Instruct
// at rank 64 on one A100 40GB and Qwen2.5-32B on one H200 fit, the base in
// bfloat16 (2 bytes a projection parameter) beside the adapters' 16 bytes a
// trained parameter; Qwen2.5-72B-Instruct on 4 H200s does not: every rank
// of the group holds the whole frozen base (stage 1 shards the adapters'
// moments alone), 137.8 GiB of the H200's 140.4 GiB before the adapters
// and a pass, and the plan says by how much; at --zero 3 each GPU holds a
// quarter of the base and its unit buffers and it fits, in float32 and in
// bfloat16, as learner/cuda's ShardBase holds them (trainer.PlanReferenceShardsOnDevices,
// built; the passes open with the adapter alone and each share placed
// from the host, trainer.PlanLoRAStartOnDevices, less than the step, so
// no GPU holds the whole base), the plan saying that both are built.
// The model configurations are
// the model cards' config.json files (learner/hfconfig/testdata, their
// sources in its README).
func TestPlanLoRAOnGPUs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "lora.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model, device string
		ranks, zero   int
		hostGiB       int64
		fits          bool
		fp32          bool
	}{
		{"Qwen2.5-7B-Instruct", "a100-40g", 0, 0, 128, true, false},
		{"Qwen2.5-32B", "h200", 0, 0, 256, true, false},
		{"Qwen2.5-72B-Instruct", "h200", 4, 0, 2048, false, false},
		{"Qwen2.5-72B-Instruct", "h200", 4, 3, 2048, true, false},
		{"Qwen2.5-72B-Instruct", "h200", 4, 3, 2048, true, true},
	} {
		cfg := loraMath(t)
		if c.fp32 {
			cfg.Learner.Precision = "fp32"
		}
		p, err := Make(context.Background(), cfg, Options{Init: goldenConfig(t, c.model), Device: c.device, Ranks: c.ranks, Zero: c.zero,
			HostBytes: c.hostGiB << 30, Baseline: 128 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s on %s (ranks %d, zero %d):\n%s", c.model, c.device, c.ranks, c.zero, p)
		if p.Fits() != c.fits {
			t.Errorf("%s on %s (zero %d): fits %v, want %v", c.model, c.device, c.zero, p.Fits(), c.fits)
		}
		learn := p.Phases[phaseLearn]
		if c.zero == 3 {
			// As learner/cuda's ShardBase allocates it (the figures
			// TestDeviceLoRAZero3 and TestDeviceZero3BF16 hold the
			// device's peak to): in float32, or in bfloat16 where the
			// products read it so.
			bf16 := !c.fp32
			shards, err := trainer.PlanReferenceShardsOnDevices(p.Model, c.ranks, bf16)
			if err != nil {
				t.Fatal(err)
			}
			share, units, built := "frozen base weights of rank 0's share (float32", "the frozen base's gathered unit and the gather's receive buffer", "ZeRO stage 3 with LoRA (learner.backend cuda) as built in float32"
			if bf16 {
				share, units, built = "frozen base weights of rank 0's share (bfloat16", "the frozen base's weights' buffer", "ZeRO stage 3 with LoRA (learner.backend cuda) as built in bfloat16"
			}
			if got := line(t, learn, share, true); got != shards[0].Share {
				t.Errorf("%s: rank 0's share of the base on its GPU %d, the layout's %d", c.model, got, shards[0].Share)
			}
			if got := line(t, learn, units, true); got != shards[0].Units {
				t.Errorf("%s: the unit buffers on the GPU %d, ShardBase's %d", c.model, got, shards[0].Units)
			}
			if s := p.String(); !strings.Contains(s, built) || strings.Contains(s, "NOT BUILT") {
				t.Errorf("%s: the plan does not say that LoRA at stage 3 (bf16 %v) is built on GPUs:\n%s", c.model, bf16, s)
			}
			// The passes open with the adapter alone and the base's
			// share placed from the host (TestDeviceLoRAZero3 holds the
			// start-up peak to these figures): less than the step holds,
			// so the plan has no phase for it.
			start, err := trainer.PlanLoRAStartOnDevices(p.Model, c.ranks, p.LoRA.Trainable, bf16)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: rank 0's GPU at start-up %s (the adapter and its gradients %s, the rotary table %s, its part of the base %s); the learner step %s",
				c.model, fmtBytes(start[0].Total()), fmtBytes(start[0].Policy), fmtBytes(start[0].PolicyRotary), fmtBytes(start[0].Base), fmtBytes(learn.Device()))
			if s0 := start[0].Total(); s0 >= learn.Device() {
				t.Errorf("%s: the start-up holds %d bytes of rank 0's GPU, not less than the learner step's %d", c.model, s0, learn.Device())
			}
			if len(p.Phases) != phaseStart {
				t.Errorf("%s: the plan has %d phases, want the step, the load and the rollout", c.model, len(p.Phases))
			}
		}
		var now strings.Builder
		for _, l := range learn.Lines {
			now.WriteString("| " + l.What + " | " + fmtOrDash(l.Host) + " | " + fmtOrDash(l.Device) + " |\n")
		}
		var missing []string
		for _, l := range learn.Lines {
			row := "| " + l.What + " | " + fmtOrDash(l.Host) + " | " + fmtOrDash(l.Device) + " |"
			if !strings.HasPrefix(l.What, "the process") && !strings.Contains(string(doc), row) {
				missing = append(missing, row)
			}
		}
		for _, line := range strings.Split(p.String(), "\n") {
			line = strings.TrimSpace(line)
			if (strings.HasPrefix(line, "device peak") || strings.HasPrefix(line, "host peak")) && !strings.Contains(string(doc), line) {
				missing = append(missing, line)
			}
		}
		if len(missing) > 0 {
			t.Errorf("docs/lora.md's %s example lacks\n%s\nthe learner step is now:\n%s", c.model, strings.Join(missing, "\n"), now.String())
		}
	}
}
