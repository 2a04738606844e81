package checkpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
)

// Llama2CHeader is the header of a legacy llama2.c checkpoint: seven
// little-endian int32 values. A negative VocabSize in the file means the
// classifier (wcls) is stored separately; here VocabSize is its absolute
// value and SharedClassifier says which.
type Llama2CHeader struct {
	Dim, HiddenDim, NLayers, NHeads, NKVHeads, VocabSize, SeqLen int
	SharedClassifier                                             bool
}

// floats is the number of float32 values the file holds after the header.
func (h Llama2CHeader) floats() int64 {
	d, hd, l, v := int64(h.Dim), int64(h.HiddenDim), int64(h.NLayers), int64(h.VocabSize)
	kv := d / int64(h.NHeads) * int64(h.NKVHeads)
	half := d / int64(h.NHeads) / 2
	n := v*d + l*d + l*d*d + 2*l*kv*d + l*d*d + l*d + 3*l*hd*d + d + 2*int64(h.SeqLen)*half
	if !h.SharedClassifier {
		n += v * d
	}
	return n
}

func (h Llama2CHeader) check(file string) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"dim", h.Dim}, {"hidden_dim", h.HiddenDim}, {"n_layers", h.NLayers}, {"n_heads", h.NHeads}, {"n_kv_heads", h.NKVHeads}, {"vocab_size", h.VocabSize}, {"seq_len", h.SeqLen}} {
		if f.v <= 0 || f.v > 1<<24 {
			return fmt.Errorf("llama2.c checkpoint %s: header %s = %d is out of range (not a legacy llama2.c .bin? the v1+ exports start with the magic 0x616b3432)", file, f.name, f.v)
		}
	}
	if h.Dim%h.NHeads != 0 || (h.Dim/h.NHeads)%2 != 0 {
		return fmt.Errorf("llama2.c checkpoint %s: n_heads %d must divide dim %d into heads of even size", file, h.NHeads, h.Dim)
	}
	if h.NHeads%h.NKVHeads != 0 {
		return fmt.Errorf("llama2.c checkpoint %s: n_kv_heads %d must divide n_heads %d", file, h.NKVHeads, h.NHeads)
	}
	return nil
}

// Config is the Hugging Face configuration equivalent to the header:
// llama2.c models use RMSNorm eps 1e-5 and RoPE theta 10000.
func (h Llama2CHeader) Config() Config {
	return Config{
		ModelType:             "llama",
		Architectures:         []string{"LlamaForCausalLM"},
		HiddenSize:            h.Dim,
		IntermediateSize:      h.HiddenDim,
		NumHiddenLayers:       h.NLayers,
		NumAttentionHeads:     h.NHeads,
		NumKeyValueHeads:      h.NKVHeads,
		VocabSize:             h.VocabSize,
		MaxPositionEmbeddings: h.SeqLen,
		RMSNormEps:            1e-5,
		RopeTheta:             10000,
		TieWordEmbeddings:     h.SharedClassifier,
		HiddenAct:             "silu",
		TorchDtype:            "float32",
	}
}

// LoadLlama2C reads a legacy llama2.c checkpoint (local or gs://) and returns
// its Hugging Face configuration and tensors with Hugging Face names:
//
//	token_embedding        -> model.embed_tokens.weight          [V, dim]
//	rms_att[l]             -> model.layers.l.input_layernorm.weight
//	wq[l], wk[l]           -> model.layers.l.self_attn.{q,k}_proj.weight (rows permuted, below)
//	wv[l], wo[l]           -> model.layers.l.self_attn.{v,o}_proj.weight
//	rms_ffn[l]             -> model.layers.l.post_attention_layernorm.weight
//	w1[l], w2[l], w3[l]    -> model.layers.l.mlp.{gate,down,up}_proj.weight
//	rms_final              -> model.norm.weight
//	wcls (unshared only)   -> lm_head.weight
//
// The freq_cis tables are skipped (they are cos/sin of theta 10000). With a
// shared classifier there is no lm_head.weight and tie_word_embeddings is
// true.
//
// RoPE layout: llama2.c, like Meta's original code, rotates interleaved
// pairs (q[2i], q[2i+1]) of each head by angle pos*theta^(-2i/hd). Hugging
// Face's Llama rotates the halves (q[i], q[i+hd/2]). The rotation commutes
// with a fixed reordering of each head's dimensions, so q_proj and k_proj
// rows are reordered once here, as transformers' convert_llama_weights_to_hf
// does: within each head, new row p*hd/2 + i is old row 2i + p (p in {0,1}).
// Attention scores are unchanged because q and k get the same reordering
// and a dot product does not depend on the order of dimensions; v and o are
// untouched. The resulting tensors work with a standard Hugging Face Llama
// forward pass (rotate_half).
func LoadLlama2C(ctx context.Context, path string) (Config, []Tensor, error) {
	r, err := storage.OpenReaderAt(ctx, path)
	if err != nil {
		return Config{}, nil, fmt.Errorf("open llama2.c checkpoint %s: %w", path, err)
	}
	defer r.Close()
	h, err := ReadLlama2CHeader(path, r)
	if err != nil {
		return Config{}, nil, err
	}
	if want := 28 + 4*h.floats(); r.Size() != want {
		return Config{}, nil, fmt.Errorf("llama2.c checkpoint %s: file is %d bytes but header %+v implies %d (truncated, or not a legacy .bin)", path, r.Size(), h, want)
	}
	in := &llama2cArrays{path: path, r: r, off: 28}
	d, V := h.Dim, h.VocabSize
	emb, err := in.read("token_embedding", V*d)
	if err != nil {
		return Config{}, nil, err
	}
	ts := []Tensor{{Name: "model.embed_tokens.weight", Shape: []int{V, d}, Data: emb}}
	layers, err := in.layers(h)
	if err != nil {
		return Config{}, nil, err
	}
	ts = append(ts, layers...)
	norm, err := in.read("rms_final", d)
	if err != nil {
		return Config{}, nil, err
	}
	ts = append(ts, Tensor{Name: "model.norm.weight", Shape: []int{d}, Data: norm})
	in.off += int64(4 * 2 * h.SeqLen * (d / h.NHeads) / 2) // freq_cis_real, freq_cis_imag
	if !h.SharedClassifier {
		wcls, err := in.read("wcls", V*d)
		if err != nil {
			return Config{}, nil, err
		}
		ts = append(ts, Tensor{Name: "lm_head.weight", Shape: []int{V, d}, Data: wcls})
	}
	// Put the tensors in layer order, as Hugging Face checkpoints list them.
	return h.Config(), sortHF(ts), nil
}

// llama2cArrays reads the float32 arrays of a llama2.c checkpoint one
// after another, from offset off of r.
type llama2cArrays struct {
	path string
	r    io.ReaderAt
	off  int64
}

// read reads the next array, of n values; what names it in errors.
func (a *llama2cArrays) read(what string, n int) ([]float32, error) {
	out := make([]float32, n)
	raw := make([]byte, 4*n)
	if err := readFull(a.r, raw, a.off); err != nil {
		return nil, fmt.Errorf("llama2.c checkpoint %s: %s: %w", a.path, what, err)
	}
	decodeInto(out, raw, F32)
	a.off += int64(4 * n)
	return out, nil
}

// layers reads the per-layer arrays, stored as [L, ...] blocks one kind
// after another, as the layers' tensors in that order, with the q and k
// rows permuted for RoPE.
func (a *llama2cArrays) layers(h Llama2CHeader) ([]Tensor, error) {
	d, hd := h.Dim, h.HiddenDim
	headSize := d / h.NHeads
	kvDim := headSize * h.NKVHeads
	perLayer := []struct {
		key      string
		rows     int
		cols     int // 0: a vector
		permute  int // heads to permute for RoPE, 0 for none
		headSize int
	}{
		{"input_layernorm.weight", d, 0, 0, 0},
		{"self_attn.q_proj.weight", d, d, h.NHeads, headSize},
		{"self_attn.k_proj.weight", kvDim, d, h.NKVHeads, headSize},
		{"self_attn.v_proj.weight", kvDim, d, 0, 0},
		{"self_attn.o_proj.weight", d, d, 0, 0},
		{"post_attention_layernorm.weight", d, 0, 0, 0},
		{"mlp.gate_proj.weight", hd, d, 0, 0},
		{"mlp.down_proj.weight", d, hd, 0, 0},
		{"mlp.up_proj.weight", hd, d, 0, 0},
	}
	var ts []Tensor
	for _, p := range perLayer {
		n, shape := p.rows, []int{p.rows}
		if p.cols > 0 {
			n, shape = p.rows*p.cols, []int{p.rows, p.cols}
		}
		for l := 0; l < h.NLayers; l++ {
			name := fmt.Sprintf("model.layers.%d.%s", l, p.key)
			data, err := a.read(name, n)
			if err != nil {
				return nil, err
			}
			if p.permute > 0 {
				data = PermuteRoPERows(data, p.permute, p.headSize, p.cols)
			}
			ts = append(ts, Tensor{Name: name, Shape: append([]int{}, shape...), Data: data})
		}
	}
	return ts, nil
}

// ReadLlama2CHeader reads and checks the 28-byte header.
func ReadLlama2CHeader(file string, r io.ReaderAt) (Llama2CHeader, error) {
	var b [28]byte
	if err := readFull(r, b[:], 0); err != nil {
		return Llama2CHeader{}, fmt.Errorf("llama2.c checkpoint %s: header: %w", file, err)
	}
	v := make([]int, 7)
	for i := range v {
		v[i] = int(int32(binary.LittleEndian.Uint32(b[4*i:])))
	}
	h := Llama2CHeader{Dim: v[0], HiddenDim: v[1], NLayers: v[2], NHeads: v[3], NKVHeads: v[4], VocabSize: v[5], SeqLen: v[6], SharedClassifier: v[5] > 0}
	if h.VocabSize < 0 {
		h.VocabSize = -h.VocabSize
	}
	return h, h.check(file)
}

// PermuteRoPERows reorders the rows of a [nHeads*headSize, cols] projection
// from interleaved RoPE pairs to Hugging Face's rotate-half layout: within
// each head, new row p*headSize/2 + i = old row 2i + p. It is
// w.view(nHeads, headSize/2, 2, cols).transpose(1, 2).reshape(-1, cols) in
// PyTorch terms.
func PermuteRoPERows(w []float32, nHeads, headSize, cols int) []float32 {
	out := make([]float32, len(w))
	half := headSize / 2
	for h := 0; h < nHeads; h++ {
		base := h * headSize
		for i := 0; i < half; i++ {
			for p := 0; p < 2; p++ {
				src := (base + 2*i + p) * cols
				dst := (base + p*half + i) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// UnpermuteRoPERows is the inverse of PermuteRoPERows.
func UnpermuteRoPERows(w []float32, nHeads, headSize, cols int) []float32 {
	out := make([]float32, len(w))
	half := headSize / 2
	for h := 0; h < nHeads; h++ {
		base := h * headSize
		for i := 0; i < half; i++ {
			for p := 0; p < 2; p++ {
				src := (base + p*half + i) * cols
				dst := (base + 2*i + p) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// sortHF orders tensors as Hugging Face checkpoints list them: the
// embedding, then layer by layer, then the final norm and the head; the
// order within a group is kept.
func sortHF(ts []Tensor) []Tensor {
	rank := func(name string) int {
		var l int
		switch {
		case name == "model.embed_tokens.weight":
			return -1
		case strings.HasPrefix(name, "model.layers."):
			if _, err := fmt.Sscanf(name, "model.layers.%d.", &l); err == nil {
				return l
			}
		}
		return 1 << 30
	}
	sort.SliceStable(ts, func(i, j int) bool { return rank(ts[i].Name) < rank(ts[j].Name) })
	return ts
}
