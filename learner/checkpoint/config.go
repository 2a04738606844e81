package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
)

// Config is a Hugging Face config.json for Llama-family models (llama,
// qwen2, ...). The fields the model uses are typed; every other key is kept
// verbatim in Extra and written back by MarshalJSON, so a downloaded
// config.json survives a load/save round trip.
type Config struct {
	ModelType             string   `json:"model_type"`
	Architectures         []string `json:"architectures,omitempty"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim,omitempty"` // 0: hidden_size / num_attention_heads
	VocabSize             int      `json:"vocab_size"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeTheta             float64  `json:"rope_theta"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	AttentionBias         bool     `json:"attention_bias,omitempty"` // Llama's switch; Qwen2 always has q/k/v bias
	HiddenAct             string   `json:"hidden_act,omitempty"`
	TorchDtype            string   `json:"torch_dtype,omitempty"`

	// Extra holds the keys of config.json not listed above, unparsed.
	Extra map[string]json.RawMessage `json:"-"`

	// omitted holds the original text of typed keys that MarshalJSON would
	// leave out while zero ("attention_bias": false, "head_dim": null), so
	// that they survive a round trip.
	omitted map[string]json.RawMessage
}

// configAlias has Config's fields without its methods (no recursion).
type configAlias Config

// configKeys are the JSON keys of Config's typed fields.
var configKeys = func() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[configAlias]()
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}()

// UnmarshalJSON decodes config.json, keeping unknown keys in Extra and
// filling Hugging Face's defaults for absent keys: num_key_value_heads =
// num_attention_heads, rope_theta 10000 (or rope_parameters.rope_theta),
// rms_norm_eps 1e-6, hidden_act "silu".
func (c *Config) UnmarshalJSON(b []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	var a configAlias
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	*c = Config(a)
	c.Extra = nil
	for k, v := range all {
		if configKeys[k] {
			if zeroJSON(v) {
				if c.omitted == nil {
					c.omitted = map[string]json.RawMessage{}
				}
				c.omitted[k] = append(json.RawMessage{}, v...)
			}
			continue
		}
		if c.Extra == nil {
			c.Extra = map[string]json.RawMessage{}
		}
		c.Extra[k] = append(json.RawMessage{}, v...)
	}
	if _, ok := all["num_key_value_heads"]; !ok {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if _, ok := all["rope_theta"]; !ok {
		c.RopeTheta = 10000
		var rp struct {
			RopeTheta float64 `json:"rope_theta"`
		}
		if raw, ok := all["rope_parameters"]; ok && json.Unmarshal(raw, &rp) == nil && rp.RopeTheta > 0 {
			c.RopeTheta = rp.RopeTheta
		}
	}
	if _, ok := all["rms_norm_eps"]; !ok {
		c.RMSNormEps = 1e-6
	}
	if _, ok := all["hidden_act"]; !ok {
		c.HiddenAct = "silu"
	}
	return nil
}

// zeroJSON reports whether raw is a zero value that an omitempty field
// would leave out.
func zeroJSON(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "false", "null", "0", "0.0", `""`, "[]":
		return true
	}
	return false
}

// MarshalJSON writes the typed fields over Extra, keys sorted.
func (c Config) MarshalJSON() ([]byte, error) {
	typed, err := json.Marshal(configAlias(c))
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(typed, &m); err != nil {
		return nil, err
	}
	for k, v := range c.Extra {
		if _, ok := m[k]; !ok && !configKeys[k] {
			m[k] = v
		}
	}
	// A typed key absent from the output is zero now; if the loaded file
	// had it, write its original (zero-valued) text back.
	for k, v := range c.omitted {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// HeadDimension is head_dim, or hidden_size / num_attention_heads when the
// config does not set it.
func (c Config) HeadDimension() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	if c.NumAttentionHeads == 0 {
		return 0
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// HasQKVBias reports whether the q, k and v projections carry biases:
// always for qwen2, otherwise as attention_bias says.
func (c Config) HasQKVBias() bool { return c.ModelType == "qwen2" || c.AttentionBias }

// Validate checks the fields the model uses.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("config: "+format, args...)
	}
	if c.ModelType == "" {
		return bad("model_type is missing (want e.g. \"llama\" or \"qwen2\")")
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize},
		{"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"vocab_size", c.VocabSize},
		{"max_position_embeddings", c.MaxPositionEmbeddings},
	} {
		if f.v <= 0 {
			return bad("%s is %d; it must be positive", f.name, f.v)
		}
	}
	if c.HeadDim < 0 {
		return bad("head_dim is %d; it must be positive or absent", c.HeadDim)
	}
	if c.HeadDim == 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		return bad("num_attention_heads %d does not divide hidden_size %d", c.NumAttentionHeads, c.HiddenSize)
	}
	if hd := c.HeadDimension(); hd%2 != 0 {
		return bad("head dimension %d is odd; rotary embeddings need it even", hd)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return bad("num_key_value_heads %d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if !(c.RMSNormEps > 0) {
		return bad("rms_norm_eps is %g; it must be positive", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) {
		return bad("rope_theta is %g; it must be positive", c.RopeTheta)
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return bad("hidden_act %q is not supported (the MLP is SwiGLU: silu)", c.HiddenAct)
	}
	if raw, ok := c.Extra["rope_scaling"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		var rs struct {
			Type     string `json:"type"`
			RopeType string `json:"rope_type"`
		}
		if err := json.Unmarshal(raw, &rs); err != nil || (rs.Type != "default" && rs.RopeType != "default") {
			return bad("rope_scaling %s is not supported (only plain RoPE); the model would compute wrong positions", raw)
		}
	}
	return nil
}

// ParseConfig decodes and validates config.json bytes.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, c.Validate()
}

// LoadConfig reads and validates a config.json (local or gs://).
func LoadConfig(ctx context.Context, path string) (Config, error) {
	b, err := storage.ReadFile(ctx, path)
	if err != nil {
		return Config{}, fmt.Errorf("read config %s: %w", path, err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Marshal validates the config and renders it as indented JSON, as
// config.json is written.
func (c Config) Marshal() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// SaveConfig validates c and writes it to path.
func SaveConfig(ctx context.Context, path string, c Config) error {
	b, err := c.Marshal()
	if err != nil {
		return fmt.Errorf("save config %s: %w", path, err)
	}
	_, err = writeBytes(ctx, path, b)
	return err
}
