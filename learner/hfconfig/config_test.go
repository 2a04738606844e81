package hfconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return m
}

// sameJSON fails the test for every key of want that got lacks or holds
// with another value, and for every key got adds.
func sameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	g, w := decodeMap(t, got), decodeMap(t, want)
	for k, wv := range w {
		gv, ok := g[k]
		if !ok {
			t.Errorf("key %s lost (was %v)", k, wv)
		} else if !reflect.DeepEqual(gv, wv) {
			t.Errorf("key %s: %v, want %v", k, gv, wv)
		}
	}
	for k, gv := range g {
		if _, ok := w[k]; !ok {
			t.Errorf("key %s added (%v)", k, gv)
		}
	}
}

// keyOrder is the top-level key order of a JSON object.
func keyOrder(t *testing.T, b []byte) []string {
	t.Helper()
	keys, _, err := decodeObject(b)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// The published config.json of each family (testdata/README.md: transcribed
// from the Hub, e.g. https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json)
// parses, validates, derives the
// right architecture and is written back with every key, value and the
// key order of the file.
func TestGoldenConfigs(t *testing.T) {
	for _, g := range []struct {
		file string
		want Arch
	}{
		{"Qwen2.5-7B-Instruct.config.json", Arch{ModelType: "qwen2", HeadDim: 128, QKVBias: true, RopeScaling: Rope{Kind: RopeDefault}}},
		{"Qwen3-8B.config.json", Arch{ModelType: "qwen3", HeadDim: 128, QKNorm: true, RopeScaling: Rope{Kind: RopeDefault}}},
		{"Llama-3.2-3B-Instruct.config.json", Arch{ModelType: "llama", HeadDim: 128, TiedEmbeddings: true,
			RopeScaling: Rope{Kind: RopeLlama3, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}}},
		{"DeepSeek-R1-Distill-Qwen-1.5B.config.json", Arch{ModelType: "qwen2", HeadDim: 128, QKVBias: true, RopeScaling: Rope{Kind: RopeDefault}}},
	} {
		t.Run(g.file, func(t *testing.T) {
			in := read(t, g.file)
			c, err := Parse(in)
			if err != nil {
				t.Fatal(err)
			}
			a, err := c.Arch()
			if err != nil {
				t.Fatal(err)
			}
			if a != g.want {
				t.Errorf("Arch = %+v, want %+v", a, g.want)
			}
			if c.TorchDtype != "bfloat16" || len(c.Architectures) != 1 || c.BOSTokenID == nil || len(c.EOSTokenID) == 0 {
				t.Errorf("torch_dtype %q, architectures %v, bos %v, eos %v: want all four read", c.TorchDtype, c.Architectures, c.BOSTokenID, c.EOSTokenID)
			}
			out, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, out, in)
			if got, want := keyOrder(t, out), keyOrder(t, in); !slices.Equal(got, want) {
				t.Errorf("key order %v, want the file's %v", got, want)
			}
			// Written as Hugging Face writes it, the file comes back byte
			// for byte.
			if string(out) != string(in) {
				t.Errorf("written file differs from the input:\n%s", out)
			}
		})
	}
}

func TestGoldenFieldValues(t *testing.T) {
	c, err := Parse(read(t, "Llama-3.2-3B-Instruct.config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.EOSTokenID, TokenIDs{128001, 128008, 128009}) || *c.BOSTokenID != 128000 || c.Architectures[0] != "LlamaForCausalLM" {
		t.Errorf("eos %v bos %d architectures %v", c.EOSTokenID, *c.BOSTokenID, c.Architectures)
	}
	if c.RopeTheta != 500000 || c.RMSNormEps != 1e-5 || c.RopeScaling == nil || c.RopeScaling.Kind() != RopeLlama3 {
		t.Errorf("rope_theta %g rms_norm_eps %g rope_scaling %+v", c.RopeTheta, c.RMSNormEps, c.RopeScaling)
	}
	q, err := Parse(read(t, "Qwen2.5-7B-Instruct.config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q.EOSTokenID, TokenIDs{151645}) || q.SlidingWindow == nil || *q.SlidingWindow != 131072 || q.UseSlidingWindow || q.RopeScaling != nil {
		t.Errorf("eos %v sliding_window %v use_sliding_window %v rope_scaling %+v", q.EOSTokenID, q.SlidingWindow, q.UseSlidingWindow, q.RopeScaling)
	}
	if r, ok := q.Raw("max_window_layers"); !ok || string(r) != "28" {
		t.Errorf("Raw(max_window_layers) = %s %v, want 28", r, ok)
	}
}

// Changing a typed field rewrites that key in place and nothing else.
func TestChangedFieldIsWrittenInPlace(t *testing.T) {
	in := read(t, "Qwen3-8B.config.json")
	c, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	c.TorchDtype = "float32"
	c.EOSTokenID = TokenIDs{1, 2}
	c.RopeScaling = &RopeScaling{RopeType: RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keyOrder(t, out), keyOrder(t, in)) {
		t.Errorf("key order changed: %v", keyOrder(t, out))
	}
	g, w := decodeMap(t, out), decodeMap(t, in)
	w["torch_dtype"] = "float32"
	w["eos_token_id"] = []any{1.0, 2.0}
	w["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192.0}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got %v\nwant %v", g, w)
	}
}

// Defaults filled on decoding are not written back; a new value is.
func TestDefaultsAreNotWrittenBack(t *testing.T) {
	in := []byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":512,"max_position_embeddings":256,"my_key":{"a":[1,2]}}`)
	c, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 8 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 || c.HiddenAct != "silu" || c.TieWordEmbeddings || c.QKVBias() || c.OBias() || c.QKNorm() || c.Head() != 8 {
		t.Fatalf("defaults not applied: %+v", c)
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, out, in)
	c.NumKeyValueHeads = 4
	out, _ = json.Marshal(c)
	if m := decodeMap(t, out); m["num_key_value_heads"] != 4.0 || len(m) != 9 {
		t.Errorf("after setting num_key_value_heads: %s", out)
	}
}

func TestRopeParameters(t *testing.T) {
	base := `"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":512,"max_position_embeddings":256`
	c, err := Parse([]byte(`{` + base + `,"rope_parameters":{"rope_theta":500000.0,"rope_type":"default"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 500000 || c.RopeScaling != nil {
		t.Errorf("rope_theta %g rope_scaling %+v, want 500000 and none", c.RopeTheta, c.RopeScaling)
	}
	in := []byte(`{` + base + `,"rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}}`)
	c, err = Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Arch()
	if a.RopeScaling != (Rope{Kind: RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}) {
		t.Errorf("rope from rope_parameters: %+v", a.RopeScaling)
	}
	out, _ := json.Marshal(c)
	sameJSON(t, out, in)
	_, err = Parse([]byte(`{` + base + `,"rope_parameters":{"rope_theta":500000.0,"rope_type":"yarn","factor":4.0}}`))
	if fe := (*FieldError)(nil); !errors.As(err, &fe) || fe.Field != "rope_parameters.rope_type" {
		t.Errorf("yarn in rope_parameters: %v, want a FieldError naming rope_parameters.rope_type", err)
	}
}

// A Config written as a literal is written from its fields: the required
// keys always, optional ones when set.
func TestLiteralConfig(t *testing.T) {
	bos := 1
	c := Config{ModelType: "qwen3", HiddenSize: 64, IntermediateSize: 96, NumHiddenLayers: 1, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 32, VocabSize: 50, MaxPositionEmbeddings: 128, RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: "silu", BOSTokenID: &bos, EOSTokenID: TokenIDs{2}}
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	m := decodeMap(t, out)
	want := []string{"model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
		"head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings", "hidden_act", "bos_token_id", "eos_token_id"}
	if got := keyOrder(t, out); !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	if m["eos_token_id"] != 2.0 || m["head_dim"] != 32.0 || m["tie_word_embeddings"] != false {
		t.Errorf("written %s", out)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := c.Arch()
	a2, _ := back.Arch()
	if a1 != a2 || a1.HeadDim != 32 || !a1.QKNorm || a1.QKVBias {
		t.Errorf("arch %+v, read back %+v", a1, a2)
	}
}

// Files of earlier builds (sorted keys, attention_bias false written out)
// load and come back unchanged.
func TestEarlierBuildConfigs(t *testing.T) {
	for _, f := range []string{"earlier-build-qwen2.config.json", "earlier-build-llama.config.json"} {
		in := read(t, f)
		c, err := Parse(in)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != string(in) {
			t.Errorf("%s changed on a round trip:\n%s", f, out)
		}
	}
}

func TestHeadDim(t *testing.T) {
	base := Config{HiddenSize: 1000, IntermediateSize: 8, NumHiddenLayers: 1, NumAttentionHeads: 16, NumKeyValueHeads: 8, VocabSize: 9,
		MaxPositionEmbeddings: 9, RMSNormEps: 1e-6, RopeTheta: 1e4, HiddenAct: "silu"}
	q3 := base
	q3.ModelType = "qwen3"
	if a, err := q3.Arch(); err != nil || a.HeadDim != 128 {
		t.Errorf("qwen3 without head_dim: %+v %v, want head dimension 128", a, err)
	}
	ll := base
	ll.ModelType = "llama"
	if _, err := ll.Arch(); err == nil || !strings.Contains(err.Error(), "num_attention_heads 16 does not divide hidden_size 1000") {
		t.Errorf("llama, hidden_size 1000 over 16 heads, no head_dim: %v", err)
	}
	ll.HeadDim = 64
	if a, err := ll.Arch(); err != nil || a.HeadDim != 64 {
		t.Errorf("llama with head_dim 64: %+v %v", a, err)
	}
}

// Every refusal is one line naming the field and what is supported.
func TestRefusals(t *testing.T) {
	base := `"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":4,"vocab_size":512,"max_position_embeddings":256`
	llama3 := `"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192`
	for _, c := range []struct {
		extra, field, want string
	}{
		{`"model_type":"mistral"`, "model_type", "model_type mistral is not supported (supported: llama, qwen2, qwen3)"},
		{`"model_type":""`, "model_type", "model_type is missing (supported: llama, qwen2, qwen3)"},
		{`"hidden_size":-4`, "hidden_size", "hidden_size is -4; it must be a positive integer"},
		{`"hidden_size":"big"`, "hidden_size", `hidden_size is "big"; it must be an integer`},
		{`"vocab_size":0`, "vocab_size", "vocab_size is 0"},
		{`"num_attention_heads":6`, "num_attention_heads", "num_attention_heads 6 does not divide hidden_size 64"},
		{`"num_key_value_heads":3`, "num_key_value_heads", "num_key_value_heads 3 does not divide num_attention_heads 8"},
		{`"head_dim":-2`, "head_dim", "head_dim is -2"},
		{`"hidden_size":72`, "head_dim", "is 9, which is odd; rotary embeddings need an even one"},
		{`"rms_norm_eps":0`, "rms_norm_eps", "rms_norm_eps is 0"},
		{`"rope_theta":-1`, "rope_theta", "rope_theta is -1"},
		{`"hidden_act":"gelu"`, "hidden_act", `hidden_act "gelu" is not supported (supported: silu`},
		{`"mlp_bias":true`, "mlp_bias", "mlp_bias true is not supported"},
		{`"use_sliding_window":true,"sliding_window":4096`, "use_sliding_window", "use_sliding_window true is not supported"},
		{`"layer_types":["full_attention","sliding_attention"]`, "layer_types[1]", `layer_types[1] "sliding_attention" is not supported (supported: full_attention)`},
		{`"eos_token_id":"x"`, "eos_token_id", "eos_token_id is \"x\"; it must be an integer or a list of integers"},
		{`"rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}`, "rope_scaling.rope_type", "rope_scaling.rope_type yarn is not supported (supported: default, llama3)"},
		{`"rope_scaling":{"type":"linear","factor":2.0}`, "rope_scaling.rope_type", "rope_scaling.rope_type linear is not supported"},
		{`"rope_scaling":{"factor":2.0}`, "rope_scaling.rope_type", "rope_scaling.rope_type is missing (supported: default, llama3)"},
		{`"rope_scaling":{"rope_type":"llama3","type":"linear"}`, "rope_scaling.rope_type", "disagrees with rope_scaling.type linear"},
		{`"rope_scaling":{"rope_type":"llama3","factor":8.0}`, "rope_scaling.low_freq_factor", "rope_scaling.low_freq_factor is missing or 0; llama3 RoPE scaling needs"},
		{llama3 + `,"factor":-2}`, "rope_scaling.factor", "rope_scaling.factor is -2"},
		{llama3 + `,"original_max_position_embeddings":0}`, "rope_scaling.original_max_position_embeddings", "is missing or 0"},
		{llama3 + `,"low_freq_factor":4.0}`, "rope_scaling.high_freq_factor", "rope_scaling.high_freq_factor 4 must be greater than low_freq_factor 4"},
		{`"rope_scaling":[1]`, "rope_scaling", "rope_scaling is [1]; it must be an object or null"},
	} {
		// A later key replaces an earlier one, so the override goes last.
		_, err := Parse([]byte("{" + base + "," + c.extra + "}"))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want a one-line FieldError on %s containing %q", c.extra, err, c.field, c.want)
		}
	}
	for _, ok := range []string{
		`"rope_scaling":null`, `"rope_scaling":{"rope_type":"default"}`, `"rope_scaling":{"type":"default"}`,
		llama3 + `}`, `"head_dim":null`, `"eos_token_id":null`, `"layer_types":["full_attention","full_attention"]`,
		`"use_sliding_window":false,"sliding_window":4096`, `"model_type":"qwen3","attention_bias":true`,
	} {
		if _, err := Parse([]byte("{" + base + "," + ok + "}")); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, notJSON := range []string{``, `[]`, `{"a":1}x`, `{"a":}`} {
		if _, err := Parse([]byte(notJSON)); err == nil {
			t.Errorf("Parse(%q) accepted", notJSON)
		}
	}
}

func TestBiases(t *testing.T) {
	for _, c := range []struct {
		modelType          string
		attentionBias      bool
		qkvBias, oBias, qk bool
	}{
		{"llama", false, false, false, false},
		{"llama", true, true, true, false},
		{"qwen2", false, true, false, false},
		{"qwen2", true, true, false, false},
		{"qwen3", false, false, false, true},
		{"qwen3", true, true, true, true},
	} {
		cfg := Config{ModelType: c.modelType, AttentionBias: c.attentionBias, HiddenSize: 64, IntermediateSize: 8, NumHiddenLayers: 1,
			NumAttentionHeads: 4, NumKeyValueHeads: 4, VocabSize: 9, MaxPositionEmbeddings: 9, RMSNormEps: 1e-6, RopeTheta: 1e4, HiddenAct: "silu"}
		a, err := cfg.Arch()
		if err != nil {
			t.Fatal(err)
		}
		if a.QKVBias != c.qkvBias || a.OBias != c.oBias || a.QKNorm != c.qk {
			t.Errorf("%s attention_bias %v: QKVBias %v OBias %v QKNorm %v, want %v %v %v", c.modelType, c.attentionBias, a.QKVBias, a.OBias, a.QKNorm, c.qkvBias, c.oBias, c.qk)
		}
	}
}

// FuzzRoundTrip: whatever Parse accepts, Marshal writes as JSON that parses
// back to the same keys and values.
func FuzzRoundTrip(f *testing.F) {
	for _, name := range []string{"Qwen2.5-7B-Instruct.config.json", "Qwen3-8B.config.json", "Llama-3.2-3B-Instruct.config.json",
		"DeepSeek-R1-Distill-Qwen-1.5B.config.json", "earlier-build-llama.config.json"} {
		f.Add(read(f, name))
	}
	f.Add([]byte(`{"model_type":"qwen3","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":1,"max_position_embeddings":1,"a":1,"a":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("written config refused: %v\n%s", err, out)
		}
		sameJSON(t, out, b)
	})
}
