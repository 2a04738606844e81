package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// ReadLlama2C reads a legacy llama2.c checkpoint (version 0: a header of
// seven little-endian int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len, then float32 arrays; a negative vocab_size means the
// classifier is stored separately) into Hugging Face-named tensors and the
// matching Llama config (rope_theta 10000, rms_norm_eps 1e-5).
//
// llama2.c rotates the query and key pairs (2i, 2i+1) of each head
// (Meta's interleaved layout); Hugging Face rotates (i, i+D/2). The q and k
// rows are therefore permuted within each head, row 2i+s going to row
// s*D/2+i, as Hugging Face's Llama conversion does, so that this package's
// rotate_half RoPE computes the same function. The stored freq_cis tables
// are skipped; the model recomputes them.
func ReadLlama2C(r io.Reader) (Config, map[string]NamedTensor, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var hdr [7]int32
	if err := binary.Read(br, binary.LittleEndian, &hdr); err != nil {
		return Config{}, nil, fmt.Errorf("model: llama2.c header: %w", err)
	}
	dim, hidden, layers, heads, kvHeads, vocab, seqLen := int(hdr[0]), int(hdr[1]), int(hdr[2]), int(hdr[3]), int(hdr[4]), int(hdr[5]), int(hdr[6])
	shared := vocab > 0
	if vocab < 0 {
		vocab = -vocab
	}
	cfg := Config{ModelType: "llama", HiddenSize: dim, IntermediateSize: hidden, NumHiddenLayers: layers,
		NumAttentionHeads: heads, NumKeyValueHeads: kvHeads, VocabSize: vocab, MaxPositionEmbeddings: seqLen,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: shared, HiddenAct: "silu"}
	if err := cfg.Validate(); err != nil {
		return Config{}, nil, fmt.Errorf("model: llama2.c header %v is not a valid model (is this a version-0 llama2.c .bin?): %w", hdr, err)
	}
	d := dimsOf(cfg)
	out := map[string]NamedTensor{}
	read := func(n int) ([]float32, error) {
		buf := make([]float32, n)
		if err := binary.Read(br, binary.LittleEndian, buf); err != nil {
			return nil, fmt.Errorf("model: llama2.c weights end early (%d floats wanted): %w", n, err)
		}
		return buf, nil
	}
	// perLayer reads an [L, rows, cols] array and stores it as L tensors.
	perLayer := func(suffix string, rows, cols int, permuteHeads int) error {
		for l := 0; l < d.L; l++ {
			shape := []int{rows, cols}
			if cols == 0 {
				shape = []int{rows}
			}
			buf, err := read(rows * max(cols, 1))
			if err != nil {
				return err
			}
			if permuteHeads > 0 {
				buf = permuteRotary(buf, permuteHeads, rows/permuteHeads, cols)
			}
			name := fmt.Sprintf("model.layers.%d.%s", l, suffix)
			out[name] = NamedTensor{Name: name, Shape: shape, Data: buf}
		}
		return nil
	}
	emb, err := read(d.V * d.C)
	if err != nil {
		return Config{}, nil, err
	}
	out["model.embed_tokens.weight"] = NamedTensor{Name: "model.embed_tokens.weight", Shape: []int{d.V, d.C}, Data: emb}
	steps := []struct {
		suffix     string
		rows, cols int
		permute    int
	}{
		{"input_layernorm.weight", d.C, 0, 0},
		{"self_attn.q_proj.weight", d.QD, d.C, d.H},
		{"self_attn.k_proj.weight", d.KD, d.C, d.KV},
		{"self_attn.v_proj.weight", d.KD, d.C, 0},
		{"self_attn.o_proj.weight", d.C, d.QD, 0},
		{"post_attention_layernorm.weight", d.C, 0, 0},
		{"mlp.gate_proj.weight", d.F, d.C, 0},
		{"mlp.down_proj.weight", d.C, d.F, 0},
		{"mlp.up_proj.weight", d.F, d.C, 0},
	}
	for _, s := range steps {
		if err := perLayer(s.suffix, s.rows, s.cols, s.permute); err != nil {
			return Config{}, nil, err
		}
	}
	norm, err := read(d.C)
	if err != nil {
		return Config{}, nil, err
	}
	out["model.norm.weight"] = NamedTensor{Name: "model.norm.weight", Shape: []int{d.C}, Data: norm}
	if _, err := io.CopyN(io.Discard, br, int64(4*seqLen*d.D)); err != nil {
		return Config{}, nil, fmt.Errorf("model: llama2.c freq_cis tables end early: %w", err)
	}
	if !shared {
		head, err := read(d.V * d.C)
		if err != nil {
			return Config{}, nil, err
		}
		out["lm_head.weight"] = NamedTensor{Name: "lm_head.weight", Shape: []int{d.V, d.C}, Data: head}
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return Config{}, nil, fmt.Errorf("model: llama2.c file has bytes after the weights its header describes; is it a newer (versioned) export?")
	}
	for name, t := range out {
		for _, v := range t.Data {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return Config{}, nil, fmt.Errorf("model: llama2.c tensor %s holds %v", name, v)
			}
		}
	}
	return cfg, out, nil
}

// LoadLlama2C reads the llama2.c checkpoint at path into a model.
func LoadLlama2C(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer f.Close()
	cfg, tensors, err := ReadLlama2C(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return FromTensors(cfg, tensors)
}

// permuteRotary reorders the rows of w[heads*D, cols] within each head from
// the interleaved rotary layout to rotate_half's: row 2i+s -> row s*D/2+i.
func permuteRotary(w []float32, heads, D, cols int) []float32 {
	out := make([]float32, len(w))
	half := D / 2
	for h := 0; h < heads; h++ {
		for i := 0; i < half; i++ {
			for s := 0; s < 2; s++ {
				src := (h*D + 2*i + s) * cols
				dst := (h*D + s*half + i) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}
