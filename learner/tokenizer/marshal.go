package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Marshal writes the tokenizer as a Hugging Face tokenizer.json that Load
// (and Hugging Face's own tokenizer) reads back to the same tokenizer.
func (t *HF) Marshal() ([]byte, error) {
	return marshalFile(t.src, t.model.ranked)
}

// MarshalConfig writes a tokenizer_config.json naming the BOS, EOS and PAD
// tokens, with the chat template of the tokenizer_config.json it was read
// with (the built-in vocabulary's is ChatML).
func (t *HF) MarshalConfig() ([]byte, error) {
	return marshalConfig(t.nameOf(t.bos), t.nameOf(t.eos), t.nameOf(t.pad), t.chatTemplate)
}

// SaveDir writes tokenizer.json and tokenizer_config.json into dir (which
// must exist), each through a temporary file renamed into place.
func (t *HF) SaveDir(dir string) error {
	tj, err := t.Marshal()
	if err != nil {
		return err
	}
	cj, err := t.MarshalConfig()
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"tokenizer.json", tj}, {"tokenizer_config.json", cj}} {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	return nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Chmod(0o644)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("tokenizer: save %s: %w", path, werr)
	}
	return nil
}

// jsonString quotes s as JSON without escaping <, > and &.
func jsonString(buf *bytes.Buffer, s string) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	return nil
}

func rawOrNull(r json.RawMessage) []byte {
	if isNull(r) {
		return []byte("null")
	}
	return r
}

// marshalFile writes f with the vocabulary in id order; ranked, when not nil,
// gives the merges as id pairs (otherwise f.Model.Merges is written as is).
func marshalFile(f *fileJSON, ranked [][2]int32) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, a := range f.AddedTokens {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(a); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1)
	}
	b.WriteString("\n  ],\n  \"normalizer\": ")
	b.Write(rawOrNull(f.Normalizer))
	b.WriteString(",\n  \"pre_tokenizer\": ")
	b.Write(rawOrNull(f.PreTokenizer))
	b.WriteString(",\n  \"post_processor\": ")
	b.Write(rawOrNull(f.PostProcessor))
	b.WriteString(",\n  \"decoder\": ")
	b.Write(rawOrNull(f.Decoder))
	m := &f.Model
	fmt.Fprintf(&b, ",\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": %v,\n    \"byte_fallback\": false,\n    \"ignore_merges\": %v,\n    \"vocab\": {", m.FuseUnk, m.IgnoreMerges)
	type entry struct {
		s  string
		id int
	}
	entries := make([]entry, 0, len(m.Vocab))
	names := make(map[int]string, len(m.Vocab))
	for s, id := range m.Vocab {
		entries = append(entries, entry{s, id})
		names[id] = s
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].id < entries[j].id })
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		if err := jsonString(&b, e.s); err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, ": %d", e.id)
	}
	b.WriteString("\n    },\n    \"merges\": ")
	if ranked == nil {
		b.Write(rawOrNull(m.Merges))
	} else {
		b.WriteByte('[')
		for i, p := range ranked {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("\n      [")
			if err := jsonString(&b, names[int(p[0])]); err != nil {
				return nil, err
			}
			b.WriteString(", ")
			if err := jsonString(&b, names[int(p[1])]); err != nil {
				return nil, err
			}
			b.WriteByte(']')
		}
		b.WriteString("\n    ]")
	}
	b.WriteString("\n  }\n}\n")
	return b.Bytes(), nil
}

func marshalConfig(bos, eos, pad string, chatTemplate json.RawMessage) ([]byte, error) {
	cfg := map[string]any{
		"add_bos_token":                false,
		"clean_up_tokenization_spaces": false,
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"bos_token":                    nil,
		"eos_token":                    nil,
		"pad_token":                    nil,
	}
	for k, v := range map[string]string{"bos_token": bos, "eos_token": eos, "pad_token": pad} {
		if v != "" {
			cfg[k] = v
		}
	}
	if !isNull(chatTemplate) {
		cfg["chat_template"] = chatTemplate
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Files returns tokenizer.json and tokenizer_config.json, the files a
// checkpoint directory carries so that it is self-contained.
func (t *HF) Files() (map[string][]byte, error) {
	tj, err := t.Marshal()
	if err != nil {
		return nil, err
	}
	tc, err := t.MarshalConfig()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": tc}, nil
}
