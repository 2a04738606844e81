package checkpoint

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// qwen2Config is shaped like a Qwen2.5 config.json, with keys this package
// does not type.
const qwen2Config = `{
  "architectures": ["Qwen2ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "head_dim": null,
  "bos_token_id": 151643,
  "eos_token_id": [151645, 151643],
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`

func TestConfigKeepsUnknownFields(t *testing.T) {
	c, err := ParseConfig([]byte(qwen2Config))
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelType != "qwen2" || c.HiddenSize != 896 || c.NumKeyValueHeads != 2 || c.RopeTheta != 1e6 || !c.TieWordEmbeddings || c.VocabSize != 151936 {
		t.Fatalf("typed fields wrong: %+v", c)
	}
	if !c.HasQKVBias() || c.HeadDimension() != 64 {
		t.Errorf("HasQKVBias %v HeadDimension %d, want true 64", c.HasQKVBias(), c.HeadDimension())
	}
	if string(c.Extra["eos_token_id"]) != "[151645, 151643]" {
		t.Errorf("Extra[eos_token_id] = %s", c.Extra["eos_token_id"])
	}
	if _, ok := c.Extra["hidden_size"]; ok {
		t.Error("a typed key also landed in Extra")
	}
	p := filepath.Join(t.TempDir(), "config.json")
	if err := SaveConfig(context.Background(), p, c); err != nil {
		t.Fatal(err)
	}
	c2, err := LoadConfig(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	// Every key of the original comes back with the same value.
	var a, b map[string]any
	if err := json.Unmarshal([]byte(qwen2Config), &a); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(c2)
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	for k, v := range a {
		ja, _ := json.Marshal(v)
		jb, _ := json.Marshal(b[k])
		if string(ja) != string(jb) {
			t.Errorf("key %s: saved %s, original %s", k, jb, ja)
		}
	}
	if len(b) != len(a) {
		t.Errorf("round trip has %d keys, original %d", len(b), len(a))
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":512,"max_position_embeddings":256}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 8 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 || c.HiddenAct != "silu" || c.TieWordEmbeddings || c.HasQKVBias() {
		t.Fatalf("defaults not applied: %+v", c)
	}
	c, err = ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":512,"max_position_embeddings":256,"rope_parameters":{"rope_theta":500000.0,"rope_type":"default"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 500000 {
		t.Errorf("rope_theta from rope_parameters = %g, want 500000", c.RopeTheta)
	}
}

func TestConfigValidation(t *testing.T) {
	base := `"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":4,"vocab_size":512,"max_position_embeddings":256`
	for _, c := range []struct {
		extra, want string
	}{
		{`"hidden_size":0`, "hidden_size is 0"},
		{`"num_attention_heads":6`, "num_attention_heads 6 does not divide hidden_size 64"},
		{`"num_key_value_heads":3`, "num_key_value_heads 3 does not divide num_attention_heads 8"},
		{`"num_key_value_heads":0`, "num_key_value_heads is 0"},
		{`"vocab_size":-5`, "vocab_size is -5"},
		{`"rms_norm_eps":0`, "rms_norm_eps is 0"},
		{`"rope_theta":-1`, "rope_theta is -1"},
		{`"hidden_act":"gelu"`, `hidden_act "gelu" is not supported`},
		{`"rope_scaling":{"rope_type":"llama3","factor":8.0}`, "rope_scaling"},
		{`"model_type":""`, "model_type is missing"},
		{`"hidden_size":"big"`, "hidden_size"},
		{`"hidden_size":72`, "head dimension 9 is odd"},
	} {
		// Later keys win in encoding/json, so the override goes last.
		_, err := ParseConfig([]byte("{" + base + "," + c.extra + "}"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.extra, err, c.want)
		}
	}
	// Qwen3 sets head_dim explicitly; heads need not divide hidden_size.
	if _, err := ParseConfig([]byte("{" + base + `,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"hidden_size":1000}`)); err != nil {
		t.Errorf("explicit head_dim refused: %v", err)
	}
}
