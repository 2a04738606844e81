package serve

import (
	"context"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// saveBF16Checkpoint writes m as a committed checkpoint whose
// model.safetensors is bfloat16, as a run seeded from a Hugging Face
// release writes them.
func saveBF16Checkpoint(t *testing.T, dir string, m *model.Model) {
	t.Helper()
	tok, err := tokenizer.Builtin().Files()
	if err != nil {
		t.Fatal(err)
	}
	ck := checkpoint.Checkpoint{Config: m.Config(), Tensors: trainer.Tensors(m), Tokenizer: tok, DType: checkpoint.BF16,
		Trainer: checkpoint.TrainerState{Step: 2, PolicyVersion: 2, RunID: "test"}}
	if err := checkpoint.Save(context.Background(), dir, ck); err != nil {
		t.Fatal(err)
	}
}

// TestServeDType: "auto" decodes a float32 checkpoint, and a bfloat16 one
// narrower than inproc.AutoBF16MinWidth (this test's model, 32 wide), in
// float32; --dtype bfloat16 decodes in bfloat16 where the CPU multiplies
// it natively; a reload resolves the precision of the new checkpoint; an
// unknown dtype is refused naming the choices.
func TestServeDType(t *testing.T) {
	runDir := t.TempDir()
	bf := rundir.Checkpoint(runDir, 2)
	saveBF16Checkpoint(t, bf, testModel(t, 9))
	f32 := rundir.Checkpoint(runDir, 3)
	saveCheckpoint(t, f32, testModel(t, 5), 3)

	if got := start(t, Options{Checkpoint: bf}).srv.DecodeDType(); got != DTypeF32 {
		t.Fatalf("auto on a bfloat16 checkpoint 32 wide decodes in %q, want float32", got)
	}
	if native, why := model.BF16DecodeAvailable(); !native {
		t.Skipf("the rest asks for bfloat16 products, which this CPU lacks: %s", why)
	}
	r := start(t, Options{Checkpoint: bf, DType: DTypeBF16})
	if got := r.srv.DecodeDType(); got != DTypeBF16 {
		t.Fatalf("--dtype bfloat16 decodes in %q", got)
	}
	st, _, body := post(t, "http://"+r.httpAddr+"/v1/completions", map[string]any{"model": "tiny", "prompt": "2+2=", "max_tokens": 8, "temperature": 0})
	if st != 200 {
		t.Fatalf("completion in bfloat16: %d %s", st, body)
	}
	if _, err := r.srv.Reload(context.Background(), f32); err != nil {
		t.Fatal(err)
	}
	if got := r.srv.DecodeDType(); got != DTypeBF16 {
		t.Fatalf("--dtype bfloat16 after reloading a float32 checkpoint decodes in %q", got)
	}

	r32 := start(t, Options{Checkpoint: bf, DType: DTypeF32})
	if got := r32.srv.DecodeDType(); got != DTypeF32 {
		t.Fatalf("--dtype float32 decodes in %q", got)
	}

	_, err := New(context.Background(), Options{Checkpoint: bf, DType: "half", Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "auto, bfloat16 or float32") {
		t.Fatalf("--dtype half: %v", err)
	}
}
