//go:build shareddata

package checkpoint

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
)

// stories260KPath is llama2.c's stories260K checkpoint in ../shared/data.
func stories260KPath(t testing.TB) string {
	t.Helper()
	return shareddata.Path(t, "models/stories260K/stories260K.bin")
}

// LoadWeights reads a llama2.c .bin (TestLoadWeightsSources: the other
// sources).
func TestLoadWeightsLlama2C(t *testing.T) {
	c, ts, err := LoadWeights(context.Background(), stories260KPath(t))
	if err != nil || c.HiddenSize != 64 || len(ts) != 1+9*5+1 {
		t.Fatalf("stories260K via LoadWeights: hidden %d, %d tensors, err %v", c.HiddenSize, len(ts), err)
	}
}

type storiesFixture struct {
	Header struct {
		Dim, Hidden, Vocab, Seq int
		NLayers                 int  `json:"n_layers"`
		NHeads                  int  `json:"n_heads"`
		NKV                     int  `json:"n_kv"`
		Shared                  bool `json:"shared"`
	} `json:"header"`
	Tensors map[string]struct {
		Shape       []int                `json:"shape"`
		Sum         float64              `json:"sum"`
		WeightedSum float64              `json:"weighted_sum"`
		Rows        map[string][]float32 `json:"rows"`
	} `json:"tensors"`
	Attention struct {
		Layer  int       `json:"layer"`
		Tokens []int     `json:"tokens"`
		Theta  float64   `json:"theta"`
		Scores []float64 `json:"scores"`
		Shape  []int     `json:"shape"`
	} `json:"attention"`
}

// TestStories260KMatchesPyTorch loads the llama2.c checkpoint and compares
// it with the PyTorch reading of the same file (with transformers'
// q/k permutation applied there): shapes, checksums and leading values of
// rows 0, 1 and the last row exactly, sums within 1e-9 relative (both are
// float64 sums of the same float32 values, in a different order).
func TestStories260KMatchesPyTorch(t *testing.T) {
	var fx storiesFixture
	readJSON(t, "testdata/stories260K.json", &fx)
	cfg, ts, err := LoadLlama2C(context.Background(), stories260KPath(t))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{ModelType: "llama", HiddenSize: 64, IntermediateSize: 172, NumHiddenLayers: 5, NumAttentionHeads: 8, NumKeyValueHeads: 4, VocabSize: 512, MaxPositionEmbeddings: 512, RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: true}
	if cfg.ModelType != want.ModelType || cfg.HiddenSize != want.HiddenSize || cfg.IntermediateSize != want.IntermediateSize ||
		cfg.NumHiddenLayers != want.NumHiddenLayers || cfg.NumAttentionHeads != want.NumAttentionHeads || cfg.NumKeyValueHeads != want.NumKeyValueHeads ||
		cfg.VocabSize != want.VocabSize || cfg.MaxPositionEmbeddings != want.MaxPositionEmbeddings || cfg.RMSNormEps != want.RMSNormEps ||
		cfg.RopeTheta != want.RopeTheta || cfg.TieWordEmbeddings != want.TieWordEmbeddings {
		t.Fatalf("config %+v, want %+v", cfg, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config from the header does not validate: %v", err)
	}
	if len(ts) != len(fx.Tensors) {
		t.Fatalf("got %d tensors, PyTorch has %d", len(ts), len(fx.Tensors))
	}
	var params int
	for _, g := range ts {
		w, ok := fx.Tensors[g.Name]
		if !ok {
			t.Fatalf("tensor %q is not in the PyTorch conversion", g.Name)
		}
		if !equalInts(g.Shape, w.Shape) {
			t.Fatalf("%s: shape %v, PyTorch %v", g.Name, g.Shape, w.Shape)
		}
		params += len(g.Data)
		var sum, ws float64
		for i, v := range g.Data {
			sum += float64(v)
			ws += float64(v) * float64(i%1009+1)
		}
		if d := math.Abs(sum - w.Sum); d > 1e-9*(1+math.Abs(w.Sum)) {
			t.Errorf("%s: sum %.12g, PyTorch %.12g", g.Name, sum, w.Sum)
		}
		if d := math.Abs(ws - w.WeightedSum); d > 1e-9*(1+math.Abs(w.WeightedSum)) {
			t.Errorf("%s: position-weighted sum %.12g, PyTorch %.12g (element order differs)", g.Name, ws, w.WeightedSum)
		}
		cols := len(g.Data)
		if len(g.Shape) > 1 {
			cols = g.Shape[len(g.Shape)-1]
		}
		for rs, vals := range w.Rows {
			r, _ := strconv.Atoi(rs)
			for j, v := range vals {
				if got := g.Data[r*cols+j]; got != v {
					t.Errorf("%s[%d][%d] = %g, PyTorch %g", g.Name, r, j, got, v)
				}
			}
		}
	}
	if params != 264128-2*512*4 {
		t.Errorf("%d parameters, want the 264128 floats of the file minus the 2*512*4 of freq_cis", params)
	}
	if ts[0].Name != "model.embed_tokens.weight" || ts[len(ts)-1].Name != "model.norm.weight" {
		t.Errorf("order: first %q last %q", ts[0].Name, ts[len(ts)-1].Name)
	}
}

// TestStories260KAttentionWithRotateHalf is the functional check of the q/k
// permutation: attention scores of layer 0, computed from the converted
// tensors with Hugging Face's rotate-half RoPE, equal PyTorch's scores from
// the original llama2.c weights with llama2.c's interleaved RoPE. Both sides
// compute in float64 from the same float32 weights, so they agree to
// rounding (1e-9).
func TestStories260KAttentionWithRotateHalf(t *testing.T) {
	var fx storiesFixture
	readJSON(t, "testdata/stories260K.json", &fx)
	cfg, ts, err := LoadLlama2C(context.Background(), stories260KPath(t))
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) Tensor {
		for _, x := range ts {
			if x.Name == name {
				return x
			}
		}
		t.Fatalf("no tensor %s", name)
		return Tensor{}
	}
	emb := get("model.embed_tokens.weight")
	wq := get("model.layers.0.self_attn.q_proj.weight")
	wk := get("model.layers.0.self_attn.k_proj.weight")
	d, H, KV := cfg.HiddenSize, cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	hs := d / H
	T := len(fx.Attention.Tokens)
	proj := func(w Tensor, x []float32, pos int) []float64 {
		rows := w.Shape[0]
		out := make([]float64, rows)
		for r := 0; r < rows; r++ {
			var s float64
			for c := 0; c < d; c++ {
				s += float64(w.Data[r*d+c]) * float64(x[c])
			}
			out[r] = s
		}
		// rotate_half: pair (i, i+hs/2) of each head, angle pos*theta^(-2i/hs)
		for h := 0; h < rows/hs; h++ {
			v := out[h*hs : (h+1)*hs]
			for i := 0; i < hs/2; i++ {
				a := float64(pos) * math.Pow(cfg.RopeTheta, -float64(2*i)/float64(hs))
				c, s := math.Cos(a), math.Sin(a)
				x1, x2 := v[i], v[i+hs/2]
				v[i], v[i+hs/2] = x1*c-x2*s, x2*c+x1*s
			}
		}
		return out
	}
	q := make([][]float64, T)
	k := make([][]float64, T)
	for p, tok := range fx.Attention.Tokens {
		x := emb.Data[tok*d : (tok+1)*d]
		q[p], k[p] = proj(wq, x, p), proj(wk, x, p)
	}
	worst := 0.0
	for h := 0; h < H; h++ {
		kh := h / (H / KV)
		for i := 0; i < T; i++ {
			for j := 0; j < T; j++ {
				var s float64
				for e := 0; e < hs; e++ {
					s += q[i][h*hs+e] * k[j][kh*hs+e]
				}
				s /= math.Sqrt(float64(hs))
				want := fx.Attention.Scores[(h*T+i)*T+j]
				worst = math.Max(worst, math.Abs(s-want))
				if math.Abs(s-want) > 1e-9*(1+math.Abs(want)) {
					t.Fatalf("head %d score[%d][%d] = %.12g, llama2.c-style reference %.12g", h, i, j, s, want)
				}
			}
		}
	}
	t.Logf("worst score difference %g", worst)
}
