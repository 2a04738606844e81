package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// aipo plan --precision bf16 plans the learner multiplying in bfloat16: on
// the CPU the activations' line counts the products' rounded operands
// (model.PassBytes with PassShape.BF16), more than float32's; the
// weights, gradients and moments stay float32. A value it has no plan
// for exits 2 naming the flag and the values it takes.
func TestPlanPrecisionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("starts aipo processes")
	}
	quick := filepath.Join("..", "..", "configs", "quick.yaml")
	act := regexp.MustCompile(`activations of a \d+-token micro-batch \(checkpointing \w+(, bfloat16 operands)?\)\s+([0-9.]+) (KiB|MiB|GiB)`)
	figure := func(precision string) (float64, string) {
		t.Helper()
		code, out := runAipo(t, "plan", "--config", quick, "--run", t.TempDir(), "--precision", precision)
		if code != 0 || !strings.Contains(out, "precision "+precision) {
			t.Fatalf("aipo plan --precision %s exited %d, or does not say its precision:\n%s", precision, code, out)
		}
		m := act.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("aipo plan --precision %s has no activations line:\n%s", precision, out)
		}
		if (m[1] != "") != (precision == "bf16") {
			t.Errorf("aipo plan --precision %s: the activations line %q (the rounded operands named only with bf16)", precision, m[0])
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v * map[string]float64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[3]], out
	}
	f32, _ := figure("fp32")
	b16, out := figure("bf16")
	if b16 <= f32 {
		t.Errorf("the bf16 step's activations are planned at %.0f bytes, float32's at %.0f: the rounded operands are not counted", b16, f32)
	}
	for _, want := range []string{"policy weights (float32 masters)", "gradients (float32)"} {
		if !strings.Contains(out, want) {
			t.Errorf("aipo plan --precision bf16 does not say %q:\n%s", want, out)
		}
	}
	code, out := runAipo(t, "plan", "--config", quick, "--run", t.TempDir(), "--precision", "fp16")
	if code != 2 || !strings.Contains(out, "--precision fp16: give fp32 or bf16") {
		t.Errorf("aipo plan --precision fp16 exited %d, want 2 naming the flag and the values:\n%s", code, out)
	}
}
