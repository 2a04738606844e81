package tokenizer

// normShrink bounds how many bytes of input one byte of normalised text can
// come from. A Unicode normal form never deletes a character; the most it
// shrinks text is a 4-byte compatibility character that NFKC or NFKD maps
// to one ASCII byte (U+1D400 MATHEMATICAL BOLD CAPITAL A to "A").
// Compositions shrink less: three 3-byte conjoining Hangul jamo become one
// 3-byte syllable, a base and its combining marks become one character of
// at least two bytes. A Sequence of normal forms gives the result of one of
// them (each keeps the text canonically or compatibly equivalent, and the
// last one decides the form), so the bound holds for it too.
const normShrink = 4

// MaxTokenBytes is the most bytes of input text that one token of Encode
// (special false) or EncodeSpecial (special true) can stand for, so that
// text of n bytes encodes to at least ceil(n / MaxTokenBytes) tokens. It
// is 0 when there is no such bound: a Split pre-tokenizer with behavior
// Removed drops text without tokens, and with special parsing an added
// token with lstrip or rstrip absorbs any run of whitespace beside it.
//
// A byte-level BPE token stands for exactly its own bytes of normalised
// text; the normaliser can make the input longer than that by at most
// normShrink bytes per byte.
func (t *HF) MaxTokenBytes(special bool) int {
	for _, st := range t.pre {
		if sp, ok := st.(*splitStep); ok && sp.behavior == removed {
			return 0
		}
	}
	most := 0
	for i := range t.tokens {
		if tk := &t.tokens[i]; tk.present && !tk.added {
			most = max(most, len(tk.bytes))
		}
	}
	if special {
		for i := range t.addedL {
			a := &t.addedL[i]
			if a.LStrip || a.RStrip {
				return 0
			}
			// Matched on the raw text (Content) or on the normalised
			// text (normContent, whose bytes the normaliser may have
			// shrunk from more input).
			most = max(most, len(a.Content), len(a.normContent))
		}
	}
	if t.norm != nil {
		most *= normShrink
	}
	return most
}

// MinTokens is the fewest tokens that text of n bytes can encode to (with
// special parsing when special), as MaxTokenBytes bounds it; 0 when there
// is no bound or n is 0.
func (t *HF) MinTokens(n int, special bool) int {
	m := t.MaxTokenBytes(special)
	if m == 0 || n <= 0 {
		return 0
	}
	return (n + m - 1) / m
}
