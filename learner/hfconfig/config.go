package hfconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Config is a Hugging Face config.json. The keys the learner uses are typed
// fields; every key of the decoded file, typed or not, is also kept as its
// original text, in its original order, so that writing a decoded Config
// back gives the same keys with the same values: a typed key whose field
// was not changed is written as it was read, a changed one from its field,
// and every other key verbatim. Absent keys get Hugging Face's defaults on
// decoding and are not written back unless their field changes.
//
// A Config written as a literal (no file behind it) is written from its
// fields alone, in the order of the fields below.
type Config struct {
	ModelType         string   `json:"model_type"`
	Architectures     []string `json:"architectures,omitempty"` // vLLM and transformers pick the model class from it
	HiddenSize        int      `json:"hidden_size"`
	IntermediateSize  int      `json:"intermediate_size"`
	NumHiddenLayers   int      `json:"num_hidden_layers"`
	NumAttentionHeads int      `json:"num_attention_heads"`
	// NumKeyValueHeads defaults to NumAttentionHeads.
	NumKeyValueHeads int `json:"num_key_value_heads"`
	// HeadDim is 0 when absent or null: see Head.
	HeadDim               int     `json:"head_dim,omitempty"`
	VocabSize             int     `json:"vocab_size"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	RMSNormEps            float64 `json:"rms_norm_eps"` // default 1e-6
	// RopeTheta defaults to rope_parameters.rope_theta (transformers 5's
	// layout), else 10000.
	RopeTheta float64 `json:"rope_theta"`
	// RopeScaling is nil when rope_scaling is absent or null. When absent,
	// a rope_parameters object naming a rope_type other than default fills
	// it (transformers 5's layout).
	RopeScaling       *RopeScaling `json:"rope_scaling,omitempty"`
	TieWordEmbeddings bool         `json:"tie_word_embeddings"`
	// AttentionBias is the llama and qwen3 switch for biases on q, k, v
	// and o; qwen2 always has q, k, v biases and none on o (see QKVBias).
	AttentionBias bool   `json:"attention_bias,omitempty"`
	MLPBias       bool   `json:"mlp_bias,omitempty"` // llama's switch for MLP biases
	HiddenAct     string `json:"hidden_act"`         // default "silu"
	// TorchDtype is the element type of the weights as saved ("bfloat16",
	// "float32", ...).
	TorchDtype string `json:"torch_dtype,omitempty"`
	// Dtype is transformers 5's name for torch_dtype.
	Dtype            string   `json:"dtype,omitempty"`
	BOSTokenID       *int     `json:"bos_token_id,omitempty"`
	EOSTokenID       TokenIDs `json:"eos_token_id,omitempty"`
	UseSlidingWindow bool     `json:"use_sliding_window,omitempty"`
	SlidingWindow    *int     `json:"sliding_window,omitempty"` // used only with use_sliding_window
	// LayerTypes is transformers' per-layer attention kind
	// ("full_attention", "sliding_attention").
	LayerTypes []string `json:"layer_types,omitempty"`

	// keys is the key order of the decoded file; raw every key's text.
	keys []string
	raw  map[string]json.RawMessage
	// decoded is each typed field's encoding right after decoding
	// (defaults applied): a field that still encodes so is unchanged.
	decoded map[string]string
	// ropeKey is the key RopeScaling was read from (rope_scaling or
	// rope_parameters), for errors.
	ropeKey string
}

// RopeScaling is rope_scaling: the kind of RoPE frequency scaling and its
// parameters. Kind accepts both spellings of the kind, rope_type (current)
// and type (older files).
type RopeScaling struct {
	RopeType string `json:"rope_type,omitempty"`
	Type     string `json:"type,omitempty"`
	// Factor, LowFreqFactor, HighFreqFactor and
	// OriginalMaxPositionEmbeddings are llama3's parameters.
	Factor                        float64 `json:"factor,omitempty"`
	LowFreqFactor                 float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor                float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings,omitempty"`
}

// Kind is rope_type, or type when rope_type is unset.
func (r RopeScaling) Kind() string {
	if r.RopeType != "" {
		return r.RopeType
	}
	return r.Type
}

// TokenIDs is a token id field that Hugging Face writes either as one
// integer or as a list (eos_token_id). One id is written as an integer,
// several as a list.
type TokenIDs []int

// UnmarshalJSON accepts null, an integer or a list of integers.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*t = nil
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return err
		}
		*t = ids
		return nil
	}
	var id int
	if err := json.Unmarshal(b, &id); err != nil {
		return err
	}
	*t = TokenIDs{id}
	return nil
}

// MarshalJSON writes one id as an integer, any other number as a list.
func (t TokenIDs) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]int(t))
}

// field is one typed field of Config: its key, its index in the struct
// and whether a zero value is left out of a file written from scratch.
type field struct {
	key       string
	index     int
	omitempty bool
}

var fields, fieldIndex = func() ([]field, map[string]int) {
	var fs []field
	idx := map[string]int{}
	t := reflect.TypeFor[Config]()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("json")
		if !ok || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		idx[name] = len(fs)
		fs = append(fs, field{key: name, index: i, omitempty: opts == "omitempty"})
	}
	return fs, idx
}()

// wantOf says in words what a field of type t holds, for decoding errors.
func wantOf(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[TokenIDs]():
		return "an integer or a list of integers"
	case reflect.TypeFor[*RopeScaling]():
		return "an object or null"
	}
	switch t.Kind() {
	case reflect.Int:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(wantOf(t.Elem()), "a ") + "s"
	case reflect.Pointer:
		return wantOf(t.Elem()) + " or null"
	}
	return t.String()
}

// UnmarshalJSON decodes a config.json object, keeping every key's text and
// order, and fills Hugging Face's defaults for absent (or null) keys. It
// does not validate (see Validate); a typed key of the wrong JSON type is
// a *FieldError.
func (c *Config) UnmarshalJSON(b []byte) error {
	keys, raw, err := decodeObject(b)
	if err != nil {
		return err
	}
	var n Config
	n.keys, n.raw, n.ropeKey = keys, raw, "rope_scaling"
	v := reflect.ValueOf(&n).Elem()
	for _, f := range fields {
		r, ok := raw[f.key]
		if !ok {
			continue
		}
		fv := v.Field(f.index)
		if err := json.Unmarshal(r, fv.Addr().Interface()); err != nil {
			return &FieldError{Field: f.key, Msg: fmt.Sprintf("is %s; it must be %s", short(r), wantOf(fv.Type()))}
		}
	}
	if !n.present("num_key_value_heads") {
		n.NumKeyValueHeads = n.NumAttentionHeads
	}
	rp, hasRP := raw["rope_parameters"]
	if !n.present("rope_theta") {
		n.RopeTheta = 10000
		var p struct {
			RopeTheta float64 `json:"rope_theta"`
		}
		if hasRP && json.Unmarshal(rp, &p) == nil && p.RopeTheta > 0 {
			n.RopeTheta = p.RopeTheta
		}
	}
	if !n.present("rope_scaling") && hasRP && !isNull(rp) {
		var rs RopeScaling
		if err := json.Unmarshal(rp, &rs); err != nil {
			return &FieldError{Field: "rope_parameters", Msg: fmt.Sprintf("is %s; it must be an object of RoPE parameters (%v)", short(rp), err)}
		}
		if k := rs.Kind(); k != "" && k != RopeDefault {
			n.RopeScaling, n.ropeKey = &rs, "rope_parameters"
		}
	}
	if !n.present("rms_norm_eps") {
		n.RMSNormEps = 1e-6
	}
	if !n.present("hidden_act") {
		n.HiddenAct = "silu"
	}
	n.decoded = make(map[string]string, len(fields))
	for _, f := range fields {
		enc, err := json.Marshal(v.Field(f.index).Interface())
		if err != nil {
			return err
		}
		n.decoded[f.key] = string(enc)
	}
	*c = n
	return nil
}

// decodeObject splits a JSON object into its keys, in order, and their
// values' text. A repeated key keeps its first place and its last value,
// as Python's json and encoding/json read it.
func decodeObject(b []byte) ([]string, map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, errors.New("not a JSON object (config.json holds one object of settings)")
	}
	var keys []string
	raw := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("not JSON: %w", err)
		}
		k := tok.(string) // an object's keys are strings, or Token errs
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("not JSON: at key %q: %w", k, err)
		}
		if _, dup := raw[k]; !dup {
			keys = append(keys, k)
		}
		raw[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("not JSON: data after the object")
	}
	return keys, raw, nil
}

// present reports whether the decoded file had key with a value other than
// null.
func (c Config) present(key string) bool {
	r, ok := c.raw[key]
	return ok && !isNull(r)
}

func isNull(r json.RawMessage) bool { return string(bytes.TrimSpace(r)) == "null" }

// short is r on one line, cut to a readable length, for errors.
func short(r json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, r) != nil {
		b.Reset()
		b.Write(bytes.Join(bytes.Fields(r), []byte(" ")))
	}
	s := b.String()
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// MarshalJSON writes the config: the decoded file's keys in their order,
// each as it was read unless its typed field changed, then typed keys the
// file lacked whose fields were set (see Config).
func (c Config) MarshalJSON() ([]byte, error) {
	v := reflect.ValueOf(c)
	enc := make([][]byte, len(fields))
	for i, f := range fields {
		b, err := json.Marshal(v.Field(f.index).Interface())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.key, err)
		}
		enc[i] = b
	}
	unchanged := func(i int) bool {
		d, ok := c.decoded[fields[i].key]
		return ok && d == string(enc[i])
	}
	var out bytes.Buffer
	out.WriteByte('{')
	put := func(k string, val []byte) {
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		out.Write(kb)
		out.WriteByte(':')
		out.Write(val)
	}
	for _, k := range c.keys {
		i, typed := fieldIndex[k]
		if !typed || unchanged(i) {
			put(k, c.raw[k])
			continue
		}
		put(k, enc[i])
	}
	for i, f := range fields {
		if _, had := c.raw[f.key]; had || unchanged(i) {
			continue
		}
		if f.omitempty && emptyValue(v.Field(f.index)) {
			continue
		}
		put(f.key, enc[i])
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// emptyValue is encoding/json's omitempty test.
func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.String, reflect.Array:
		return v.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return v.IsZero()
}

// Marshal validates c and renders it as config.json is written: indented
// by two spaces, with a final newline.
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

// Parse decodes and validates config.json bytes. Errors name the field
// (dotted inside objects, as rope_scaling.factor) and what is supported;
// callers add the file's path.
func Parse(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Raw returns the text of key as the decoded file had it, whether or not
// the key is typed.
func (c Config) Raw(key string) (json.RawMessage, bool) {
	r, ok := c.raw[key]
	return r, ok
}

// Keys returns the decoded file's keys in their order.
func (c Config) Keys() []string { return append([]string(nil), c.keys...) }
