package tokenizer

import (
	"fmt"
	"strings"
)

// Encode encodes text with special parsing off: nothing in text can turn
// into an added or special token.
func (t *HF) Encode(text string) []int {
	return t.encodeText(make([]int, 0, len(text)/3+1), text)
}

// EncodeSpecial encodes text with special parsing on: added tokens in the
// text are matched first (leftmost, then longest), the rest is encoded as
// by Encode. This is what Hugging Face's tokenizer does by default.
func (t *HF) EncodeSpecial(text string) []int {
	dst := make([]int, 0, len(text)/3+1)
	if t.matchRaw == nil {
		return t.encodeNormalizedSpecial(dst, text)
	}
	for _, seg := range t.matchRaw.split(nil, text) {
		if seg.id >= 0 {
			dst = append(dst, seg.id)
			continue
		}
		dst = t.encodeNormalizedSpecial(dst, seg.text)
	}
	return dst
}

// encodeNormalizedSpecial normalises text, then matches the added tokens
// that are matched on normalised text, then encodes the rest.
func (t *HF) encodeNormalizedSpecial(dst []int, text string) []int {
	if t.matchNorm == nil {
		return t.encodeText(dst, text)
	}
	if t.norm != nil {
		text = t.norm(text)
	}
	for _, seg := range t.matchNorm.split(nil, text) {
		if seg.id >= 0 {
			dst = append(dst, seg.id)
			continue
		}
		dst = t.encodePreTokenized(dst, seg.text)
	}
	return dst
}

// encodeText normalises and encodes text that holds no added tokens.
func (t *HF) encodeText(dst []int, text string) []int {
	if t.norm != nil {
		text = t.norm(text)
	}
	return t.encodePreTokenized(dst, text)
}

// encodePreTokenized pre-tokenizes normalised text and runs BPE on every
// piece.
func (t *HF) encodePreTokenized(dst []int, text string) []int {
	if text == "" {
		return dst
	}
	if t.direct != nil {
		for i := 0; i < len(text); {
			e := t.direct.matchAt(text, i)
			dst = t.model.encode(dst, text[i:e])
			i = e
		}
		return dst
	}
	pieces := []string{text}
	var next []string
	for _, st := range t.pre {
		next = st.split(next[:0], pieces)
		pieces, next = next, pieces
	}
	for _, p := range pieces {
		dst = t.model.encode(dst, p)
	}
	return dst
}

// Decode turns ids back into text by concatenating the bytes of their
// tokens; with skipSpecial, special tokens are left out. The bytes are
// returned as they are, without replacing invalid UTF-8.
//
// An id that names no token decodes to no text, as Hugging Face's
// tokenizers decode it (its decode keeps only the ids that map to a
// token): models pad their vocabulary past the tokenizer's (Qwen3's
// config.json has vocab_size 151936 for 151669 tokens), so a sampler that
// draws from every row of the LM head, as vLLM's and ours do, can draw
// such an id, and its text is empty rather than an error that loses the
// whole response. A negative id is an error.
func (t *HF) Decode(ids []int, skipSpecial bool) (string, error) {
	var b strings.Builder
	for i, id := range ids {
		if id < 0 {
			return "", fmt.Errorf("tokenizer: decode: ids[%d] = %d is negative, not a token id", i, id)
		}
		if id >= len(t.tokens) || !t.tokens[id].present {
			continue
		}
		tok := &t.tokens[id]
		if skipSpecial && tok.special {
			continue
		}
		b.Write(tok.bytes)
	}
	return b.String(), nil
}
