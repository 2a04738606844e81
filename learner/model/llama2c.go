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
	cfg, err := readLlama2CHeader(br)
	if err != nil {
		return Config{}, nil, err
	}
	d := dimsOf(cfg)
	in := &llama2cStream{br: br, out: map[string]NamedTensor{}}
	if err := in.tensor("model.embed_tokens.weight", []int{d.V, d.C}, 0); err != nil {
		return Config{}, nil, err
	}
	if err := in.layers(d); err != nil {
		return Config{}, nil, err
	}
	if err := in.tensor("model.norm.weight", []int{d.C}, 0); err != nil {
		return Config{}, nil, err
	}
	if _, err := io.CopyN(io.Discard, br, int64(4*cfg.MaxPositionEmbeddings*d.D)); err != nil {
		return Config{}, nil, fmt.Errorf("model: llama2.c freq_cis tables end early: %w", err)
	}
	if !cfg.TieWordEmbeddings {
		if err := in.tensor("lm_head.weight", []int{d.V, d.C}, 0); err != nil {
			return Config{}, nil, err
		}
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return Config{}, nil, fmt.Errorf("model: llama2.c file has bytes after the weights its header describes; is it a newer (versioned) export?")
	}
	if err := checkFinite(in.out); err != nil {
		return Config{}, nil, err
	}
	return cfg, in.out, nil
}

// readLlama2CHeader reads the seven-int32 header and returns the Llama
// config it describes.
func readLlama2CHeader(br io.Reader) (Config, error) {
	var hdr [7]int32
	if err := binary.Read(br, binary.LittleEndian, &hdr); err != nil {
		return Config{}, fmt.Errorf("model: llama2.c header: %w", err)
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
		return Config{}, fmt.Errorf("model: llama2.c header %v is not a valid model (is this a version-0 llama2.c .bin?): %w", hdr, err)
	}
	return cfg, nil
}

// llama2cStream reads a llama2.c checkpoint's float32 arrays in file order
// into Hugging Face-named tensors.
type llama2cStream struct {
	br  *bufio.Reader
	out map[string]NamedTensor
}

// tensor reads the next array as the tensor name of shape, its rows
// permuted within each of permuteHeads heads for rotate_half (0: as
// stored).
func (s *llama2cStream) tensor(name string, shape []int, permuteHeads int) error {
	n := 1
	for _, k := range shape {
		n *= k
	}
	buf := make([]float32, n)
	if err := binary.Read(s.br, binary.LittleEndian, buf); err != nil {
		return fmt.Errorf("model: llama2.c weights end early (%d floats wanted): %w", n, err)
	}
	if permuteHeads > 0 {
		buf = permuteRotary(buf, permuteHeads, shape[0]/permuteHeads, shape[1])
	}
	s.out[name] = NamedTensor{Name: name, Shape: shape, Data: buf}
	return nil
}

// layers reads the per-layer arrays, each stored as an [L, rows, cols]
// block, one kind after another.
func (s *llama2cStream) layers(d dims) error {
	kinds := []struct {
		suffix     string
		rows, cols int // cols 0: a vector
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
	for _, k := range kinds {
		for l := 0; l < d.L; l++ {
			shape := []int{k.rows, k.cols}
			if k.cols == 0 {
				shape = []int{k.rows}
			}
			if err := s.tensor(fmt.Sprintf("model.layers.%d.%s", l, k.suffix), shape, k.permute); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkFinite refuses tensors holding NaN or ±Inf.
func checkFinite(tensors map[string]NamedTensor) error {
	for name, t := range tensors {
		for _, v := range t.Data {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("model: llama2.c tensor %s holds %v", name, v)
			}
		}
	}
	return nil
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
