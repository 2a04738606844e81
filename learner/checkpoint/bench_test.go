package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// benchShape is the Llama shape BenchmarkSaveLoad25M writes: about 25M
// float32 values (vocab 10240, hidden 512, MLP 1408, 6 layers), or with
// -short (make bench-smoke) about 0.1M, enough to run every path once.
type benchShape struct{ V, d, hd, L int }

func benchShapeOf() benchShape {
	if testing.Short() {
		return benchShape{V: 512, d: 64, hd: 176, L: 2}
	}
	return benchShape{V: 10240, d: 512, hd: 1408, L: 6}
}

// benchTensors is the parameter set of shape s.
func benchTensors(s benchShape) []Tensor {
	V, d, hd, L := s.V, s.d, s.hd, s.L
	r := rand.New(rand.NewPCG(1, 2))
	mk := func(name string, shape ...int) Tensor {
		t := Tensor{Name: name, Shape: shape}
		t.Data = make([]float32, t.Numel())
		for i := range t.Data {
			t.Data[i] = float32(r.NormFloat64() * 0.02)
		}
		return t
	}
	ts := []Tensor{mk("model.embed_tokens.weight", V, d)}
	for l := 0; l < L; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		ts = append(ts,
			mk(p+"input_layernorm.weight", d),
			mk(p+"self_attn.q_proj.weight", d, d), mk(p+"self_attn.k_proj.weight", d, d),
			mk(p+"self_attn.v_proj.weight", d, d), mk(p+"self_attn.o_proj.weight", d, d),
			mk(p+"post_attention_layernorm.weight", d),
			mk(p+"mlp.gate_proj.weight", hd, d), mk(p+"mlp.up_proj.weight", hd, d), mk(p+"mlp.down_proj.weight", d, hd))
	}
	return append(ts, mk("model.norm.weight", d))
}

// BenchmarkSaveLoad25M times, side by side in each iteration, writing and
// reading a ~25M-parameter set as F32 safetensors, as BF16 safetensors, as a
// whole checkpoint (Save/Load, which also hash every byte with sha256), and
// the same number of bytes with plain os.WriteFile+Sync / os.ReadFile. Rates
// are MB of float32 parameters (4 bytes each) per second; the *_vs_raw
// ratios compare with the plain file I/O of the same run. Reads come from
// the page cache, as the files were just written.
func BenchmarkSaveLoad25M(b *testing.B) {
	ctx := context.Background()
	s := benchShapeOf()
	ts := benchTensors(s)
	var n int
	for _, t := range ts {
		n += len(t.Data)
	}
	mb := float64(4*n) / 1e6
	ck := Checkpoint{Config: Config{ModelType: "llama", HiddenSize: s.d, IntermediateSize: s.hd, NumHiddenLayers: s.L, NumAttentionHeads: 8,
		NumKeyValueHeads: 8, VocabSize: s.V, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-5, RopeTheta: 10000, HiddenAct: "silu"}, Tensors: ts, Optimizer: []byte{0}}
	raw := f32Bytes(make([]float32, n))
	var tSave, tLoad, tSave16, tLoad16, tCkSave, tCkLoad, tRawW, tRawR time.Duration
	timeIt := func(acc *time.Duration, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*acc += time.Since(start)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		p32, p16, praw := filepath.Join(dir, "f32.safetensors"), filepath.Join(dir, "bf16.safetensors"), filepath.Join(dir, "raw.bin")
		timeIt(&tRawW, func() error {
			f, err := os.Create(praw)
			if err != nil {
				return err
			}
			if _, err := f.Write(raw); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			return f.Close()
		})
		timeIt(&tRawR, func() error { _, err := os.ReadFile(praw); return err })
		timeIt(&tSave, func() error { return SaveSafetensors(ctx, p32, ts, SaveOptions{}) })
		timeIt(&tLoad, func() error { _, _, err := LoadSafetensors(ctx, p32); return err })
		timeIt(&tSave16, func() error { return SaveSafetensors(ctx, p16, ts, SaveOptions{DType: BF16}) })
		timeIt(&tLoad16, func() error { _, _, err := LoadSafetensors(ctx, p16); return err })
		ckDir := filepath.Join(dir, "ck")
		timeIt(&tCkSave, func() error { return Save(ctx, ckDir, ck) })
		timeIt(&tCkLoad, func() error { _, err := Load(ctx, ckDir); return err })
	}
	rate := func(d time.Duration) float64 { return mb * float64(b.N) / d.Seconds() }
	b.ReportMetric(float64(n)/1e6, "Mparams")
	b.ReportMetric(rate(tSave), "save_MB/s")
	b.ReportMetric(rate(tLoad), "load_MB/s")
	b.ReportMetric(rate(tSave16), "bf16_save_MB/s")
	b.ReportMetric(rate(tLoad16), "bf16_load_MB/s")
	b.ReportMetric(rate(tCkSave), "ckpt_save_MB/s")
	b.ReportMetric(rate(tCkLoad), "ckpt_load_MB/s")
	b.ReportMetric(rate(tRawW), "raw_write_MB/s")
	b.ReportMetric(rate(tRawR), "raw_read_MB/s")
	b.ReportMetric(tRawW.Seconds()/tSave.Seconds(), "save_vs_raw")
	b.ReportMetric(tRawR.Seconds()/tLoad.Seconds(), "load_vs_raw")
}
