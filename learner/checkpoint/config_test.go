package checkpoint

import (
	"context"
	"encoding/json"
	"os"
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
	if !c.QKVBias() || c.Head() != 64 {
		t.Errorf("QKVBias %v Head %d, want true 64", c.QKVBias(), c.Head())
	}
	if r, _ := c.Raw("initializer_range"); string(r) != "0.02" {
		t.Errorf("Raw(initializer_range) = %s", r)
	}
	p := filepath.Join(t.TempDir(), "config.json")
	if err := SaveConfig(context.Background(), p, c); err != nil {
		t.Fatal(err)
	}
	c2, err := LoadConfig(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	sameKeysAndValues(t, c2, []byte(qwen2Config), nil)
}

// sameKeysAndValues fails t unless c writes every key of want with its
// value, no other key, except the keys of changed, which must hold the
// values given there.
func sameKeysAndValues(t *testing.T, c Config, want []byte, changed map[string]any) {
	t.Helper()
	var a, b map[string]any
	if err := json.Unmarshal(want, &a); err != nil {
		t.Fatal(err)
	}
	for k, v := range changed {
		a[k] = v
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	for k, v := range a {
		ja, _ := json.Marshal(v)
		jb, _ := json.Marshal(b[k])
		if _, ok := b[k]; !ok || string(ja) != string(jb) {
			t.Errorf("key %s: saved %s, want %s", k, jb, ja)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Errorf("key %s added", k)
		}
	}
}

// A saved checkpoint's config.json is the config it was given, with
// torch_dtype naming the dtype of the saved weights.
func TestSaveKeepsConfigAndTellsTheDtype(t *testing.T) {
	ctx := context.Background()
	c, err := ParseConfig([]byte(qwen2Config))
	if err != nil {
		t.Fatal(err)
	}
	c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.VocabSize = 8, 8, 1, 2, 1, 4
	small := map[string]any{"hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 4}
	ts := []Tensor{{Name: "w", Shape: []int{2}, Data: []float32{1, 2}}}
	for _, dt := range []struct {
		opt  DType
		name string
	}{{F32, "float32"}, {BF16, "bfloat16"}, {F16, "float16"}} {
		dir := filepath.Join(t.TempDir(), "ck")
		if err := SaveWith(ctx, dir, Checkpoint{Config: c, Tensors: ts}, SaveOptions{DType: dt.opt}); err != nil {
			t.Fatal(err)
		}
		ck, err := Load(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		small["torch_dtype"] = dt.name
		sameKeysAndValues(t, ck.Config, []byte(qwen2Config), small)
	}
	// A config of the model's own making gets its architectures.
	lit := Config{ModelType: "qwen3", HiddenSize: 8, IntermediateSize: 8, NumHiddenLayers: 1, NumAttentionHeads: 2, NumKeyValueHeads: 1,
		VocabSize: 4, MaxPositionEmbeddings: 8, RMSNormEps: 1e-6, RopeTheta: 1e4, HiddenAct: "silu"}
	dir := filepath.Join(t.TempDir(), "lit")
	if err := Save(ctx, dir, Checkpoint{Config: lit, Tensors: ts}); err != nil {
		t.Fatal(err)
	}
	ck, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ck.Config.Architectures) != 1 || ck.Config.Architectures[0] != "Qwen3ForCausalLM" || ck.Config.TorchDtype != "float32" {
		t.Errorf("architectures %v torch_dtype %q, want [Qwen3ForCausalLM] float32", ck.Config.Architectures, ck.Config.TorchDtype)
	}
}

func TestConfigValidation(t *testing.T) {
	base := `"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":4,"vocab_size":512,"max_position_embeddings":256`
	for _, c := range []struct {
		extra, want string
	}{
		{`"hidden_size":0`, "hidden_size is 0"},
		{`"num_attention_heads":6`, "num_attention_heads 6 does not divide hidden_size 64"},
		{`"model_type":"mistral"`, "model_type mistral is not supported (supported: llama, qwen2, qwen3)"},
		{`"rope_scaling":{"rope_type":"yarn","factor":4.0}`, "rope_scaling.rope_type yarn is not supported (supported: default, llama3)"},
		{`"rope_scaling":{"rope_type":"llama3","factor":8.0}`, "rope_scaling.low_freq_factor"},
	} {
		_, err := ParseConfig([]byte("{" + base + "," + c.extra + "}"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.extra, err, c.want)
		}
	}
	// The config layer accepts what the model may not run yet: qwen3 and
	// Llama 3's RoPE scaling.
	for _, extra := range []string{`"model_type":"qwen3"`, `"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}`, `"rope_scaling":{"rope_type":"default"}`} {
		if _, err := ParseConfig([]byte("{" + base + "," + extra + "}")); err != nil {
			t.Errorf("%s refused: %v", extra, err)
		}
	}
	// A bad config.json names its file.
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte("{"+base+`,"rope_scaling":{"rope_type":"su"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(context.Background(), p); err == nil || !strings.HasPrefix(err.Error(), p+": rope_scaling.rope_type su is not supported") {
		t.Errorf("LoadConfig: %v, want it to name %s and rope_scaling.rope_type", err, p)
	}
	if err := os.WriteFile(p, []byte("{"+base+`,"model_type":"mistral"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadWeights(context.Background(), filepath.Dir(p))
	if want := p + ": model_type mistral is not supported (supported: llama, qwen2, qwen3)"; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("LoadWeights of a Mistral directory: %v, want one line containing %q", err, want)
	}
}
