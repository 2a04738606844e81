package train

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/schemas"
)

// writeHFDir writes m's weights (bfloat16, as the Hub ships them), a
// config.json with the keys a downloaded model has beyond what the learner
// reads, the built-in tokenizer's files and, when gen is set, a
// generation_config.json, in Hugging Face layout. It returns config.json.
func writeHFDir(t *testing.T, dir string, h handBuilt, gen []byte) []byte {
	t.Helper()
	ctx := context.Background()
	b, err := json.Marshal(h.m.Config())
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": []int{2, 3},
		"attention_bias": false, "attention_dropout": 0.0, "initializer_range": 0.02, "mlp_bias": false, "pretraining_tp": 1,
		"rope_scaling": nil, "transformers_version": "4.45.0", "use_cache": true, "head_dim": h.m.Config().Head(),
		"quantization_hint": map[string]any{"bits": 16, "groups": []int{1, 2}},
	} {
		cfg[k] = v
	}
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	files, err := tokenizer.Builtin().Files()
	if err != nil {
		t.Fatal(err)
	}
	files[checkpoint.ConfigName] = cj
	if gen != nil {
		files[checkpoint.GenerationConfigName] = gen
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkpoint.SaveSafetensors(ctx, filepath.Join(dir, checkpoint.WeightsName), trainer.Tensors(h.m), checkpoint.SaveOptions{DType: checkpoint.BF16}); err != nil {
		t.Fatal(err)
	}
	return cj
}

// A run initialised from a bfloat16 Hugging Face directory keeps its
// config.json through a learner step: every key with its value
// (architectures, torch_dtype, bos and eos ids and keys the learner does
// not read); its generation_config.json, byte for byte; and its dtype:
// model.safetensors of every checkpoint is bfloat16, the float32 masters
// beside it in master.safetensors. Each checkpoint, stripped of our extras
// (marker, masters, optimizer and trainer state), is a plain Hugging Face
// directory that inproc (what aipo serve loads) opens, with the weights of
// model.safetensors.
func TestLearnFromHFInitKeepsConfig(t *testing.T) {
	ctx := context.Background()
	h := newHandBuilt(t)
	h.cfg.Run.Dir = t.TempDir()
	h.cfg.Checkpoint.SaveEvery = 1 // checkpoint 1 a full one, with its float32 masters
	src := filepath.Join(t.TempDir(), "hf")
	gen := []byte("{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": [2, 3],\n  \"temperature\": 0.6,\n  \"top_p\": 0.95\n}\n")
	orig := writeHFDir(t, src, h, gen)
	if err := SeedCheckpoint(ctx, src, h.cfg.Run.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := schemas.WriteStep(ctx, rundir.Step(h.cfg.Run.Dir, 0), [][]schemas.Trajectory{{h.good, h.bad}}, schemas.Manifest{Run: h.cfg.Run.Name}); err != nil {
		t.Fatal(err)
	}
	met, err := Learn(claimed(t, ctx, h.cfg.Run.Dir), h.cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if met.Tokens == 0 {
		t.Fatalf("the step trained on no tokens: %+v", met)
	}
	var want map[string]any
	if err := json.Unmarshal(orig, &want); err != nil {
		t.Fatal(err)
	}
	want["torch_dtype"] = "bfloat16" // the init's weights are bfloat16; so are the checkpoints'
	for step := int64(0); step <= 1; step++ {
		dir := rundir.Checkpoint(h.cfg.Run.Dir, step)
		b, err := os.ReadFile(filepath.Join(dir, checkpoint.ConfigName))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if g, ok := got[k]; !ok {
				t.Errorf("checkpoint %d: config.json lost %s", step, k)
			} else if !reflect.DeepEqual(g, v) {
				t.Errorf("checkpoint %d: config.json %s = %v, want %v", step, k, g, v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("checkpoint %d: config.json gained %s", step, k)
			}
		}
		if g, err := os.ReadFile(filepath.Join(dir, checkpoint.GenerationConfigName)); err != nil || !bytes.Equal(g, gen) {
			t.Errorf("checkpoint %d: generation_config.json = %q, %v; want the init directory's", step, g, err)
		}
		for name, dt := range map[string]checkpoint.DType{checkpoint.WeightsName: checkpoint.BF16, checkpoint.MasterName: checkpoint.F32} {
			for _, d := range headerDTypes(t, filepath.Join(dir, name)) {
				if d != dt {
					t.Errorf("checkpoint %d: %s holds %s tensors, want %s only", step, name, d, dt)
				}
			}
		}
		plain := filepath.Join(t.TempDir(), "plain")
		testtools.CopyDirExcept(t, dir, plain, rundir.CommittedName, checkpoint.MasterName, checkpoint.OptimizerName, checkpoint.TrainerStateName)
		ld, err := inproc.LoadCheckpoint(ctx, plain, "")
		if err != nil {
			t.Fatalf("checkpoint %d as a plain Hugging Face directory: %v", step, err)
		}
		served, err := checkpoint.LoadServed(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range ld.Model.Params() {
			if !reflect.DeepEqual(p.Data, served.Tensors[i].Data) || p.Name != served.Tensors[i].Name {
				t.Errorf("checkpoint %d: the plain copy's %s differs from the checkpoint's model.safetensors", step, p.Name)
				break
			}
		}
	}
	// A directory without generation_config.json seeds a checkpoint
	// without one.
	bare := filepath.Join(t.TempDir(), "bare")
	writeHFDir(t, bare, h, nil)
	run2 := t.TempDir()
	if err := SeedCheckpoint(ctx, bare, run2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rundir.Checkpoint(run2, 0), checkpoint.GenerationConfigName)); !os.IsNotExist(err) {
		t.Errorf("checkpoint of a directory without generation_config.json has one (%v)", err)
	}
}

// headerDTypes lists the dtypes of the tensors of a safetensors file.
func headerDTypes(t *testing.T, path string) []checkpoint.DType {
	t.Helper()
	h, err := checkpoint.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []checkpoint.DType
	for _, ti := range h.Tensors {
		out = append(out, ti.DType)
	}
	return out
}
