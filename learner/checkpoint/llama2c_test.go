package checkpoint

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPermuteRoPERowsInverse(t *testing.T) {
	w := make([]float32, 4*6*3)
	for i := range w {
		w[i] = float32(i)
	}
	p := PermuteRoPERows(w, 4, 6, 3)
	// head 1, p=1, i=2 (new row 6+3+2=11) comes from old row 6+2*2+1=11;
	// head 0, new row 3 (p=1, i=0) comes from old row 1.
	if p[3*3] != w[1*3] || p[1*3] != w[2*3] {
		t.Fatalf("permutation rows wrong: new row 3 starts %g (want %g), new row 1 starts %g (want %g)", p[9], w[3], p[3], w[6])
	}
	back := UnpermuteRoPERows(p, 4, 6, 3)
	for i := range w {
		if back[i] != w[i] {
			t.Fatalf("unpermute(permute(w))[%d] = %g, want %g", i, back[i], w[i])
		}
	}
}

// writeLlama2C writes a synthetic legacy checkpoint with values 0, 1, 2, ...
func writeLlama2C(t *testing.T, path string, hdr [7]int32, floats int) {
	t.Helper()
	b := make([]byte, 0, 28+4*floats)
	for _, v := range hdr {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for i := 0; i < floats; i++ {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(i)))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLlama2CUnsharedClassifier(t *testing.T) {
	// dim 4, hidden 6, 1 layer, 2 heads, 1 kv head, vocab 3 (negative:
	// unshared), seq 2. Floats: emb 12, rms 4, wq 16, wk 8, wv 8, wo 16,
	// rms 4, w1 24, w2 24, w3 24, final 4, freq 2*2*1, wcls 12.
	n := 12 + 4 + 16 + 8 + 8 + 16 + 4 + 24 + 24 + 24 + 4 + 4 + 12
	p := filepath.Join(t.TempDir(), "tiny.bin")
	writeLlama2C(t, p, [7]int32{4, 6, 1, 2, 1, -3, 2}, n)
	cfg, ts, err := LoadLlama2C(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TieWordEmbeddings || cfg.VocabSize != 3 || cfg.NumKeyValueHeads != 1 {
		t.Fatalf("config %+v: want untied, vocab 3, 1 kv head", cfg)
	}
	last := ts[len(ts)-1]
	if last.Name != "lm_head.weight" || !equalInts(last.Shape, []int{3, 4}) || last.Data[0] != float32(n-12) {
		t.Fatalf("last tensor %s %v starting %g, want lm_head.weight [3 4] starting %d", last.Name, last.Shape, last.Data[0], n-12)
	}
	for _, x := range ts {
		if x.Name == "model.layers.0.self_attn.k_proj.weight" {
			// kv_dim 2 = one head of size 2: the permutation is the identity.
			if !equalInts(x.Shape, []int{2, 4}) || x.Data[0] != 12+4+16 {
				t.Fatalf("k_proj %v starts %g, want [2 4] starting 32", x.Shape, x.Data[0])
			}
		}
	}

	// One float short: refused, naming the file and the expected size.
	writeLlama2C(t, p, [7]int32{4, 6, 1, 2, 1, -3, 2}, n-1)
	if _, _, err := LoadLlama2C(context.Background(), p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "implies") {
		t.Fatalf("truncated file: got %v", err)
	}
	// A nonsense header: refused.
	writeLlama2C(t, p, [7]int32{4, 6, 1, 3, 1, 3, 2}, n)
	if _, _, err := LoadLlama2C(context.Background(), p); err == nil || !strings.Contains(err.Error(), "n_heads 3") {
		t.Fatalf("bad header: got %v", err)
	}
}
