package model_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
)

// TestBF16WeightsLoadAsTheirFloat32Values: the checkpoint package reads
// bfloat16 safetensors by widening each value to float32 exactly, so a
// Qwen3 or Llama 3 model loaded from a BF16 file computes bit-for-bit the
// logits of the same model whose float32 weights were rounded to bfloat16
// in memory (no tolerance: the arithmetic is the same). The PyTorch
// fixtures check that arithmetic; this checks that the new tensors
// (q_norm, k_norm, a head_dim other than hidden/heads, a tied head) travel
// through a BF16 file under their names and shapes.
func TestBF16WeightsLoadAsTheirFloat32Values(t *testing.T) {
	for _, name := range []string{"tiny_qwen3", "tiny_llama3"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := model.LoadConfig("testdata/" + name + "_config.json")
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.New(cfg, 21)
			if err != nil {
				t.Fatal(err)
			}
			var ts []checkpoint.Tensor
			rounded := map[string]model.NamedTensor{}
			changed := 0
			for _, p := range m.Params() {
				ts = append(ts, checkpoint.Tensor{Name: p.Name, Shape: p.Shape, Data: p.Data})
				r := make([]float32, len(p.Data))
				for i, v := range p.Data {
					r[i] = checkpoint.BF16ToFloat32(checkpoint.Float32ToBF16(v))
					if r[i] != v {
						changed++
					}
				}
				rounded[p.Name] = model.NamedTensor{Name: p.Name, Shape: p.Shape, Data: r}
			}
			if changed == 0 {
				t.Fatal("no weight changed when rounded to bfloat16; the comparison would not show a widening loader")
			}
			path := filepath.Join(t.TempDir(), "model.safetensors")
			ctx := context.Background()
			if err := checkpoint.SaveSafetensors(ctx, path, ts, checkpoint.SaveOptions{DType: checkpoint.BF16}); err != nil {
				t.Fatal(err)
			}
			loaded, _, err := checkpoint.LoadSafetensors(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			named := map[string]model.NamedTensor{}
			for _, x := range loaded {
				named[x.Name] = model.NamedTensor{Name: x.Name, Shape: x.Shape, Data: x.Data}
			}
			from16, err := model.FromTensors(cfg, named)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := model.FromTensors(cfg, rounded)
			if err != nil {
				t.Fatal(err)
			}
			b := model.Batch{Tokens: []int32{3, 17, 99, 4, 0, 64, 5, 5, 120, 1, 2, 77}, SeqLens: []int{7, 5}}
			got, err := from16.Logits(b)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ref.Logits(b)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatal("logits of the model loaded from BF16 differ from those of the same weights rounded in float32")
			}
		})
	}
}
