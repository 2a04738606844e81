package inproc

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// TestOpenEngineOnAdapter checks that the rollout engine of a LoRA run's
// checkpoint (an adapter directory) samples the base its config names
// with the adapter merged, and that an adapter naming a base that is not
// a local directory is refused with the fix.
func TestOpenEngineOnAdapter(t *testing.T) {
	ctx := ctxT(t)
	tmp := t.TempDir()
	base := filepath.Join(tmp, "base")
	m := testModel(t)
	saveCheckpoint(t, base, m)
	d, err := peft.DimsOf(m.Config())
	if err != nil {
		t.Fatal(err)
	}
	write := func(dir, baseName string) *peft.Adapter {
		c, err := peft.NewConfig(baseName, 4, 8, 0, []string{"q_proj", "v_proj", "down_proj"}, peft.InitDefault)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(9, 9))
		a, err := peft.New(c, d, rng)
		if err != nil {
			t.Fatal(err)
		}
		for _, mod := range a.Modules {
			for i := range mod.B {
				mod.B[i] = float32(rng.NormFloat64() * 0.3)
			}
		}
		if err := peft.Write(ctx, dir, a, checkpoint.F32); err != nil {
			t.Fatal(err)
		}
		return a
	}
	adir := filepath.Join(tmp, "adapter")
	a := write(adir, base)
	e, release, err := OpenEngine(ctx, adir, "cpu", DTypeF32)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	defer e.Close()

	merged, err := a.Merge(trainer.Tensors(m))
	if err != nil {
		t.Fatal(err)
	}
	mm, err := trainer.ModelFromTensors(m.Config(), merged)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := engine.New(mm, tokenizer.Builtin(), 0, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	plain, err := engine.New(m, tokenizer.Builtin(), 0, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	req := engine.Request{Prefix: []int32{257, 40, 41}, Params: sampling.Params{Temperature: 1, MaxTokens: 12, Seed: 4}}
	got, err := e.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	baseRes, err := plain.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !same(got.Tokens, want.Tokens) || got.LogProbs[0] != want.LogProbs[0] {
		t.Fatalf("the adapter's engine sampled %v (%v), the merged weights %v (%v)", got.Tokens, got.LogProbs[0], want.Tokens, want.LogProbs[0])
	}
	if got.LogProbs[0] == baseRes.LogProbs[0] {
		t.Fatalf("the adapter's engine gives the base's log-prob %v: the adapter changed nothing", got.LogProbs[0])
	}

	hub := filepath.Join(tmp, "hub-adapter")
	write(hub, "Qwen/Qwen3-0.6B")
	if _, _, err := OpenEngine(ctx, hub, "cpu", DTypeF32); err == nil || !strings.Contains(err.Error(), "give the base model directory") {
		t.Fatalf("an adapter naming a Hub base: %v", err)
	}
}
