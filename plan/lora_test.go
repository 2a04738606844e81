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

// loraQuick is the quick configuration with learner.lora (YAML flow
// mapping) and a KL term, on the CPU.
func loraQuick(t *testing.T, lora string) runconfig.Config {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "configs", "quick.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(raw), "loss: {kl_coef: 0}", "loss: {kl_coef: 0.001}\n  lora: "+lora, 1)
	cfg, err := runconfig.Parse([]byte(y), "quick.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Run.Dir = t.TempDir()
	return cfg
}

// A LoRA run of Qwen2.5-7B-Instruct at rank 64 on every projection, on
// the CPU: 161,480,704 trained parameters (r·(in+out) summed over the
// seven projections of 28 layers, the figure PEFT's
// print_trainable_parameters gives for this model and LoraConfig), the
// base frozen in float32 with no gradients and no second copy for the
// reference, the adapters' gradients and moments 12 bytes a trained
// parameter, each checkpoint the adapters and their moments; docs/lora.md's
// example is this plan's learner step, line for line.
func TestPlanLoRA(t *testing.T) {
	cfg := loraQuick(t, "{rank: 64, alpha: 128}")
	p, err := Make(context.Background(), cfg, Options{Init: goldenConfig(t, "Qwen2.5-7B-Instruct"), HostBytes: 64 << 30, Baseline: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", p)
	const A = 161480704
	if p.LoRA == nil || p.LoRA.Trainable != A || p.Reference {
		t.Fatalf("LoRA %+v, reference %v; want %d trained parameters and no reference model", p.LoRA, p.Reference, A)
	}
	learn := p.Phases[phaseLearn]
	want := map[string]int64{
		"frozen base weights":              4 * p.Params,
		"LoRA adapters":                    4 * A,
		"the adapters' gradients":          4 * A,
		"the adapters' AdamW moments":      8 * A,
		"the process (binary, runtime, bu": 128 << 20,
	}
	for _, l := range learn.Lines {
		for k, v := range want {
			if strings.HasPrefix(l.What, k) {
				if l.Host != v {
					t.Errorf("%q: %d bytes, want %d", l.What, l.Host, v)
				}
				delete(want, k)
			}
		}
		if strings.Contains(l.What, "reference policy") || strings.HasPrefix(l.What, "gradients") {
			t.Errorf("a LoRA run's step holds %q", l.What)
		}
	}
	if len(want) > 0 {
		t.Errorf("the learner step lacks %v:\n%s", want, p)
	}
	if p.Disk.Full != 12*A {
		t.Errorf("a checkpoint is %d bytes, want the adapters and their moments, %d", p.Disk.Full, 12*A)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "lora.md"))
	if err != nil {
		t.Fatal(err)
	}
	var now strings.Builder
	for _, l := range learn.Lines {
		if !strings.HasPrefix(l.What, "the process") {
			now.WriteString("| " + l.What + " | " + fmtOrDash(l.Host) + " |\n")
		}
	}
	for _, l := range learn.Lines {
		if strings.HasPrefix(l.What, "the process") {
			continue
		}
		ok := false
		for _, line := range strings.Split(string(doc), "\n") {
			ok = ok || strings.Contains(line, l.What) && strings.Contains(line, fmtOrDash(l.Host))
		}
		if !ok {
			t.Errorf("docs/lora.md's plan example has no line with %q and %s; the learner step is now:\n%s", l.What, fmtOrDash(l.Host), now.String())
		}
	}
	if !strings.Contains(string(doc), strings.TrimSpace(p.loraSummary())) {
		t.Errorf("docs/lora.md's plan example lacks the plan's LoRA line:\n%s", p.loraSummary())
	}
}

// Two ranks each hold half the adapters' moments; the base and the
// adapters whole. At --zero 3 each rank holds its share of the frozen base
// (trainer.PlanReferenceShards: float32 on the CPU) and the two units a
// pass holds gathered instead of the whole base, also between steps; the
// other rank its own share; --zero 2 is refused.
func TestPlanLoRAGroup(t *testing.T) {
	cfg := loraQuick(t, "{rank: 8, targets: [q_proj, v_proj]}")
	p, err := Make(context.Background(), cfg, Options{Init: goldenConfig(t, "Qwen2.5-7B-Instruct"), HostBytes: 256 << 30, Baseline: 128 << 20, Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	A := p.LoRA.Trainable
	if want := int64(28 * 8 * (3584 + 3584 + 3584 + 512)); A != want {
		t.Fatalf("%d trained parameters, want %d", A, want)
	}
	found := false
	for _, l := range p.Phases[phaseLearn].Lines {
		if strings.HasPrefix(l.What, "the adapters' AdamW moments of rank 0's share") {
			found = l.Host == 4*A
		}
	}
	if !found {
		t.Errorf("no line of rank 0's half of the moments (%d bytes):\n%s", 4*A, p)
	}

	p3, err := Make(context.Background(), cfg, Options{Init: goldenConfig(t, "Qwen2.5-7B-Instruct"), HostBytes: 256 << 30, Baseline: 128 << 20, Ranks: 2, Zero: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", p3)
	shards, err := trainer.PlanReferenceShards(p3.Model, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	learn, learn1 := p3.Phases[phaseLearn], p.Phases[phaseLearn]
	if got := line(t, learn, "frozen base weights of rank 0's share (float32, 1/2 of every unit", false); got != shards[0].Share {
		t.Errorf("rank 0's share of the base %d bytes, the layout's %d", got, shards[0].Share)
	}
	if got := line(t, learn, "the frozen base's units a pass holds gathered (float32", false); got != shards[0].Units {
		t.Errorf("the base's gathered units %d bytes, the layout's %d", got, shards[0].Units)
	}
	rank0, rank0At1 := learn.Host()-learn.Others, learn1.Host()-learn1.Others
	if d := rank0At1 - rank0; d != 4*p3.Params-shards[0].Total() {
		t.Errorf("stage 3 holds %d bytes less than stage 1 on rank 0, want the whole base less its share and units, %d", d, 4*p3.Params-shards[0].Total())
	}
	if learn.Others != rank0+shards[1].Share-shards[0].Share {
		t.Errorf("rank 1 holds %d bytes in the step, want rank 0's %d with its own share of the base", learn.Others, rank0)
	}
	if s := p3.String(); !strings.Contains(s, "ZeRO stage 3 with LoRA as built (learner/trainer/lora.go") || strings.Contains(s, "NOT BUILT") {
		t.Errorf("the plan does not describe the CPU's stage 3 with LoRA:\n%s", s)
	}
	if _, err := Make(context.Background(), cfg, Options{Init: goldenConfig(t, "Qwen2.5-7B-Instruct"), Ranks: 2, Zero: 2}); err == nil || !strings.Contains(err.Error(), "--zero 2 with learner.lora") {
		t.Errorf("--zero 2 with learner.lora: %v, want it refused", err)
	}
}
