package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
)

// HF is a byte-level BPE tokenizer read from a Hugging Face tokenizer.json
// (or built in). It is safe for concurrent use.
type HF struct {
	norm                normalizer
	pre                 []preStep
	direct              *wordSplit // pre as one hand-written split, when it is one
	model               *bpe
	tokens              []tokenInfo    // by id; a hole has str == "" and !present
	added               map[string]int // added tokens by content
	addedL              []addedToken   // in tokenizer.json order
	matchRaw, matchNorm *matcher

	bos, eos, pad int
	chatTemplate  json.RawMessage // tokenizer_config.json's chat_template, as written
	chat          chatFormat

	src *fileJSON // the raw sections, for Marshal
}

type tokenInfo struct {
	str     string // as written in the vocabulary ("Ġthe", "<|im_end|>")
	bytes   []byte // what it decodes to
	present bool
	added   bool
	special bool
}

type addedToken struct {
	addedTokenJSON
	normContent string // content after the normaliser (matched when Normalized)
}

var _ Tokenizer = (*HF)(nil)

func build(f *fileJSON) (*HF, error) {
	m := &f.Model
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("model.type %q is not supported: only byte-level BPE tokenizers (GPT-2, Llama 3, Qwen) can be read", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout %v is not supported: set it to null for inference and training", *m.Dropout)
	}
	if m.ByteFallback {
		return nil, fmt.Errorf("model.byte_fallback is a SentencePiece-style option and is not supported by this byte-level BPE reader")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if len(m.Vocab) == 0 {
		return nil, fmt.Errorf("model.vocab is empty")
	}
	t := &HF{src: f, added: map[string]int{}}
	var err error
	if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	var byteLevel bool
	if t.pre, byteLevel, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if !byteLevel {
		return nil, fmt.Errorf("pre_tokenizer has no ByteLevel step: only byte-level BPE tokenizers are supported")
	}
	t.direct = directSplit(t.pre)
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}

	size := 0
	for s, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab[%q] = %d: ids must not be negative", s, id)
		}
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			return nil, fmt.Errorf("added_tokens entry %+v: want a non-negative id and non-empty content", a)
		}
		size = max(size, a.ID+1)
	}
	t.tokens = make([]tokenInfo, size)
	for s, id := range m.Vocab {
		if t.tokens[id].present {
			return nil, fmt.Errorf("model.vocab: id %d is given to both %q and %q", id, t.tokens[id].str, s)
		}
		t.tokens[id] = tokenInfo{str: s, bytes: byteLevelDecode(s), present: true}
	}
	for _, a := range f.AddedTokens {
		at := addedToken{addedTokenJSON: a, normContent: a.Content}
		if a.Normalized && t.norm != nil {
			at.normContent = t.norm(a.Content)
		}
		t.addedL = append(t.addedL, at)
		t.tokens[a.ID] = tokenInfo{str: a.Content, bytes: byteLevelDecode(a.Content), present: true, added: true, special: a.Special}
		t.added[a.Content] = a.ID
	}
	t.matchRaw, t.matchNorm = newMatchers(t.addedL)

	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	if t.model, err = newBPE(t, merges, m.IgnoreMerges); err != nil {
		return nil, err
	}
	return t, nil
}

// VocabSize is one more than the largest token id, added tokens included.
func (t *HF) VocabSize() int { return len(t.tokens) }

// TokenString returns the vocabulary string of id as tokenizer.json writes
// it ("Ġthe" for " the"; added tokens as their content).
func (t *HF) TokenString(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || !t.tokens[id].present {
		return "", false
	}
	return t.tokens[id].str, true
}

// TokenBytes returns the bytes that id decodes to (nil when id is unknown).
// A single token may hold part of a UTF-8 character.
func (t *HF) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.tokens) || !t.tokens[id].present {
		return nil
	}
	return t.tokens[id].bytes
}

// ID returns the id of a vocabulary string or added token.
func (t *HF) ID(token string) (int, bool) {
	if id, ok := t.added[token]; ok {
		return id, true
	}
	id, ok := t.src.Model.Vocab[token]
	return id, ok
}

// IsSpecial reports whether id is an added token marked special.
func (t *HF) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.tokens) && t.tokens[id].special
}

// IsAdded reports whether id is an added token (special or not).
func (t *HF) IsAdded(id int) bool {
	return id >= 0 && id < len(t.tokens) && t.tokens[id].added
}

// AddedTokens returns the ids of all added tokens in increasing order.
func (t *HF) AddedTokens() []int {
	ids := make([]int, 0, len(t.addedL))
	for _, a := range t.addedL {
		ids = append(ids, a.ID)
	}
	sort.Ints(ids)
	return ids
}

// BOS returns the beginning-of-sequence id, or -1 when there is none.
func (t *HF) BOS() int { return t.bos }

// EOS returns the end-of-sequence id, or -1 when there is none.
func (t *HF) EOS() int { return t.eos }

// PAD returns the padding id, or -1 when there is none.
func (t *HF) PAD() int { return t.pad }

// checkDecoder accepts a missing decoder, ByteLevel, or a Sequence of
// ByteLevel decoders: decoding is always byte-level.
func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var d struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("parse decoder: %w", err)
	}
	switch d.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, sub := range d.Decoders {
			if err := checkDecoder(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("decoder type %q is not supported: only ByteLevel decoding is", d.Type)
}

func isNull(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case 'n':
			return true
		}
		return false
	}
	return true
}
