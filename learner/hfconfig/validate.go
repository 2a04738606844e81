package hfconfig

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Model types the learner reads. Llama 3.x is ModelLlama with a llama3
// rope_scaling.
const (
	ModelLlama = "llama"
	ModelQwen2 = "qwen2"
	ModelQwen3 = "qwen3"
)

// ModelTypes are the supported model_type values.
var ModelTypes = []string{ModelLlama, ModelQwen2, ModelQwen3}

// RoPE scaling kinds (rope_scaling.rope_type).
const (
	RopeDefault = "default" // plain RoPE, as with rope_scaling absent or null
	RopeLlama3  = "llama3"  // Llama 3.1/3.2's frequency-dependent scaling
)

// CausalLMClass is the transformers class of modelType's causal language
// model, as config.json's architectures names it ("" for an unsupported
// model type).
func CausalLMClass(modelType string) string {
	switch modelType {
	case ModelLlama:
		return "LlamaForCausalLM"
	case ModelQwen2:
		return "Qwen2ForCausalLM"
	case ModelQwen3:
		return "Qwen3ForCausalLM"
	}
	return ""
}

// qwen3HeadDim is Qwen3Config's head_dim when config.json has none.
const qwen3HeadDim = 128

// FieldError is a config.json value that cannot be used: Field is the key,
// dotted inside objects (rope_scaling.factor); Msg says what is wrong and
// what is supported.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Msg }

// Rope is the derived RoPE scaling: Kind is RopeDefault or RopeLlama3, the
// other fields llama3's parameters (zero for RopeDefault).
type Rope struct {
	Kind                                  string
	Factor, LowFreqFactor, HighFreqFactor float64
	OriginalMaxPositions                  int
}

// Arch is the architecture a valid Config describes, in the terms the
// model code uses.
type Arch struct {
	ModelType string
	// HeadDim is the per-head dimension: head_dim, or hidden_size /
	// num_attention_heads (128 for qwen3) when absent. Heads times HeadDim
	// need not equal hidden_size.
	HeadDim int
	// QKVBias: q, k and v projections carry biases (always for qwen2, as
	// attention_bias says for llama and qwen3). OBias: so does o (llama
	// and qwen3 with attention_bias).
	QKVBias, OBias bool
	// QKNorm: q and k are RMS-normalised per head (q_norm, k_norm of
	// head_dim weights) before RoPE, as qwen3 does.
	QKNorm         bool
	RopeScaling    Rope
	TiedEmbeddings bool
}

// Head is the per-head dimension D: head_dim when set, else 128 for qwen3
// (Qwen3Config's default), else hidden_size / num_attention_heads.
func (c Config) Head() int {
	switch {
	case c.HeadDim > 0:
		return c.HeadDim
	case c.ModelType == ModelQwen3:
		return qwen3HeadDim
	case c.NumAttentionHeads <= 0:
		return 0
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// QKVBias reports whether q, k and v projections carry biases: always for
// qwen2, otherwise as attention_bias says.
func (c Config) QKVBias() bool { return c.ModelType == ModelQwen2 || c.AttentionBias }

// OBias reports whether the output projection carries a bias: llama and
// qwen3 with attention_bias (qwen2 never has one).
func (c Config) OBias() bool { return c.ModelType != ModelQwen2 && c.AttentionBias }

// QKNorm reports whether q and k are RMS-normalised per head (qwen3).
func (c Config) QKNorm() bool { return c.ModelType == ModelQwen3 }

// Validate reports the first field that makes c unusable, as a *FieldError.
func (c Config) Validate() error {
	_, err := c.Arch()
	return err
}

// Arch validates c and derives its architecture. It is the one place that
// says which config.json values the learner accepts; whether this build's
// model can run every accepted feature is the model's to say, when it is
// built.
func (c Config) Arch() (Arch, error) {
	bad := func(field, format string, args ...any) (Arch, error) {
		return Arch{}, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	supported := strings.Join(ModelTypes, ", ")
	switch {
	case c.ModelType == "":
		return bad("model_type", "is missing (supported: %s)", supported)
	case !slices.Contains(ModelTypes, c.ModelType):
		return bad("model_type", "%s is not supported (supported: %s)", c.ModelType, supported)
	}
	for _, f := range []struct {
		key string
		v   int
	}{
		{"hidden_size", c.HiddenSize},
		{"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"vocab_size", c.VocabSize},
		{"max_position_embeddings", c.MaxPositionEmbeddings},
	} {
		if f.v > 0 {
			continue
		}
		if c.raw != nil && !c.present(f.key) {
			return bad(f.key, "is missing; it must be a positive integer")
		}
		return bad(f.key, "is %d; it must be a positive integer", f.v)
	}
	if c.HeadDim < 0 {
		return bad("head_dim", "is %d; it must be a positive integer, or absent for hidden_size / num_attention_heads", c.HeadDim)
	}
	if c.HeadDim == 0 && c.ModelType != ModelQwen3 && c.HiddenSize%c.NumAttentionHeads != 0 {
		return bad("num_attention_heads", "%d does not divide hidden_size %d; set head_dim", c.NumAttentionHeads, c.HiddenSize)
	}
	if hd := c.Head(); hd%2 != 0 {
		return bad("head_dim", "(the head dimension) is %d, which is odd; rotary embeddings need an even one", hd)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return bad("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		return bad("rms_norm_eps", "is %g; it must be a positive number", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return bad("rope_theta", "is %g; it must be a positive number", c.RopeTheta)
	}
	if c.HiddenAct != "silu" {
		return bad("hidden_act", "%q is not supported (supported: silu; the MLP is SwiGLU)", c.HiddenAct)
	}
	if c.MLPBias {
		return bad("mlp_bias", "true is not supported (supported: false; the MLP has no biases)")
	}
	if c.UseSlidingWindow {
		return bad("use_sliding_window", "true is not supported (supported: false; sliding-window attention is not implemented)")
	}
	for i, t := range c.LayerTypes {
		if t != "full_attention" {
			return bad(fmt.Sprintf("layer_types[%d]", i), "%q is not supported (supported: full_attention)", t)
		}
	}
	rope, err := c.rope()
	if err != nil {
		return Arch{}, err
	}
	return Arch{ModelType: c.ModelType, HeadDim: c.Head(), QKVBias: c.QKVBias(), OBias: c.OBias(), QKNorm: c.QKNorm(),
		RopeScaling: rope, TiedEmbeddings: c.TieWordEmbeddings}, nil
}

// rope validates rope_scaling (or the rope_parameters it came from).
func (c Config) rope() (Rope, error) {
	rs := c.RopeScaling
	if rs == nil {
		return Rope{Kind: RopeDefault}, nil
	}
	key := c.ropeKey
	if key == "" {
		key = "rope_scaling"
	}
	bad := func(field, format string, args ...any) (Rope, error) {
		return Rope{}, &FieldError{Field: key + "." + field, Msg: fmt.Sprintf(format, args...)}
	}
	kinds := RopeDefault + ", " + RopeLlama3
	if rs.RopeType != "" && rs.Type != "" && rs.RopeType != rs.Type {
		return bad("rope_type", "%s disagrees with %s.type %s (set one)", rs.RopeType, key, rs.Type)
	}
	switch rs.Kind() {
	case "":
		return bad("rope_type", "is missing (supported: %s)", kinds)
	case RopeDefault:
		return Rope{Kind: RopeDefault}, nil
	case RopeLlama3:
	default:
		return bad("rope_type", "%s is not supported (supported: %s)", rs.Kind(), kinds)
	}
	for _, p := range []struct {
		key string
		v   float64
	}{
		{"factor", rs.Factor},
		{"low_freq_factor", rs.LowFreqFactor},
		{"high_freq_factor", rs.HighFreqFactor},
		{"original_max_position_embeddings", float64(rs.OriginalMaxPositionEmbeddings)},
	} {
		const need = "llama3 RoPE scaling needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings, all positive"
		if p.v == 0 {
			return bad(p.key, "is missing or 0; %s", need)
		}
		if !(p.v > 0) || math.IsInf(p.v, 0) {
			return bad(p.key, "is %g; %s", p.v, need)
		}
	}
	if rs.LowFreqFactor >= rs.HighFreqFactor {
		return bad("high_freq_factor", "%g must be greater than low_freq_factor %g", rs.HighFreqFactor, rs.LowFreqFactor)
	}
	return Rope{Kind: RopeLlama3, Factor: rs.Factor, LowFreqFactor: rs.LowFreqFactor, HighFreqFactor: rs.HighFreqFactor,
		OriginalMaxPositions: rs.OriginalMaxPositionEmbeddings}, nil
}
