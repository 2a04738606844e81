package model

import (
	"encoding/json"
	"fmt"
	"os"
)

// Config is the subset of a Hugging Face config.json that fixes the shape
// and arithmetic of a Llama, Qwen2 or Qwen3 model.
type Config struct {
	ModelType             string  `json:"model_type"`
	HiddenSize            int     `json:"hidden_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	NumKeyValueHeads      int     `json:"num_key_value_heads"`
	HeadDim               int     `json:"head_dim,omitempty"` // 0: hidden_size / num_attention_heads
	VocabSize             int     `json:"vocab_size"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	RopeTheta             float64 `json:"rope_theta"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	// AttentionBias is Llama's switch for biases on q, k, v and o. Qwen2
	// always has q, k, v biases (and none on o), whatever this says.
	AttentionBias bool   `json:"attention_bias"`
	HiddenAct     string `json:"hidden_act"`
	// RopeScaling rescales the rotary frequencies; nil (absent or null)
	// or rope_type "default" for plain RoPE. Only rope_type "llama3"
	// rescales.
	RopeScaling *RopeScaling `json:"rope_scaling,omitempty"`
}

// RopeScaling is config.json's rope_scaling object, as far as Llama 3.x's
// frequency-dependent scaling reads it. Type is the older name of RopeType.
type RopeScaling struct {
	RopeType                      string  `json:"rope_type,omitempty"`
	Type                          string  `json:"type,omitempty"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`
	HighFreqFactor                float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
}

// kind is the scaling's rope_type (or, in older configs, type).
func (r *RopeScaling) kind() string {
	if r.RopeType != "" {
		return r.RopeType
	}
	return r.Type
}

// ParseConfig reads a Hugging Face config.json, fills Hugging Face's
// defaults for absent fields and validates the result.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("model: config.json: %w", err)
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadConfig reads and parses the config.json at path.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("model: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate reports the first field that this package cannot run.
func (c Config) Validate() error {
	switch c.ModelType {
	case "llama", "qwen2", "qwen3":
	default:
		return fmt.Errorf("model: model_type %q is not supported; use \"llama\", \"qwen2\" or \"qwen3\"", c.ModelType)
	}
	if c.ModelType == "qwen3" && c.AttentionBias {
		return fmt.Errorf("model: attention_bias with model_type qwen3 is not supported (no released Qwen3 uses it)")
	}
	pos := []struct {
		name string
		v    int
	}{{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize}, {"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads}, {"num_key_value_heads", c.NumKeyValueHeads}, {"vocab_size", c.VocabSize},
		{"max_position_embeddings", c.MaxPositionEmbeddings}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("model: config %s = %d, must be positive", p.name, p.v)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("model: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim == 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("model: hidden_size %d is not a multiple of num_attention_heads %d; set head_dim", c.HiddenSize, c.NumAttentionHeads)
	}
	if c.Head()%2 != 0 {
		return fmt.Errorf("model: head dimension %d is odd; rotary embeddings need an even one", c.Head())
	}
	if c.HiddenAct != "silu" {
		return fmt.Errorf("model: hidden_act %q is not supported; only \"silu\" (SwiGLU)", c.HiddenAct)
	}
	if rs := c.RopeScaling; rs != nil {
		switch rs.kind() {
		case "default": // plain RoPE
		case "llama3":
		default:
			return fmt.Errorf("model: rope_scaling of rope_type %q is not supported; only \"llama3\" (or \"default\" or null for plain RoPE)", rs.kind())
		}
		if rs.kind() == "llama3" && !(rs.Factor >= 1) || !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor) || rs.OriginalMaxPositionEmbeddings <= 0 {
			return fmt.Errorf("model: rope_scaling llama3 needs factor >= 1, 0 < low_freq_factor < high_freq_factor and a positive original_max_position_embeddings; got %+v", *rs)
		}
	}
	if c.RMSNormEps <= 0 || c.RopeTheta <= 0 {
		return fmt.Errorf("model: rms_norm_eps %g and rope_theta %g must be positive", c.RMSNormEps, c.RopeTheta)
	}
	return nil
}

// Head is the per-head dimension D.
func (c Config) Head() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// QKVBias reports whether q, k and v projections carry biases.
func (c Config) QKVBias() bool { return c.ModelType == "qwen2" || c.AttentionBias }

// QKNorm reports whether each attention head's query and key vectors are
// RMS-normalised (weights q_norm and k_norm of shape [head_dim]) after the
// projection and before the rotary embedding, as Qwen3 does.
func (c Config) QKNorm() bool { return c.ModelType == "qwen3" }

// OBias reports whether the output projection carries a bias (Llama with
// attention_bias only).
func (c Config) OBias() bool { return c.ModelType == "llama" && c.AttentionBias }

// dims are the derived sizes used throughout the kernels.
type dims struct {
	C, F, L, H, KV, D, V int
	QD, KD, QKV          int // H*D, KV*D, QD+2*KD
}

func (c Config) dims() dims {
	d := dims{C: c.HiddenSize, F: c.IntermediateSize, L: c.NumHiddenLayers, H: c.NumAttentionHeads,
		KV: c.NumKeyValueHeads, D: c.Head(), V: c.VocabSize}
	d.QD, d.KD = d.H*d.D, d.KV*d.D
	d.QKV = d.QD + 2*d.KD
	return d
}
