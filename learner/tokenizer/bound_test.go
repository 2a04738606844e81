package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// TestMinTokensIsALowerBound encodes texts that pack the most bytes into
// each token (runs of the vocabulary's longest token, added-token contents,
// random text) and checks that none encodes to fewer tokens than MinTokens.
func TestMinTokensIsALowerBound(t *testing.T) {
	forEachVocab(t, func(t *testing.T, tok *HF) {
		for _, special := range []bool{false, true} {
			m := tok.MaxTokenBytes(special)
			if m == 0 {
				t.Logf("special=%v: no bound (stripping added tokens)", special)
				continue
			}
			longest := ""
			for i := range tok.tokens {
				if tk := &tok.tokens[i]; tk.present && !tk.added && len(tk.bytes) > len(longest) {
					longest = string(tk.bytes)
				}
			}
			texts := []string{strings.Repeat(longest, 50), strings.Repeat("\U0001D400", 300), strings.Repeat("\u1100\u1161\u11A8", 100)}
			var all strings.Builder
			for _, a := range tok.addedL {
				all.WriteString(a.Content)
			}
			texts = append(texts, strings.Repeat(all.String(), 5))
			r := rand.New(rand.NewPCG(7, 8))
			for i := 0; i < 200; i++ {
				texts = append(texts, randomText(r, 200))
			}
			for _, s := range texts {
				var n int
				if special {
					n = len(tok.EncodeSpecial(s))
				} else {
					n = len(tok.Encode(s))
				}
				if lo := tok.MinTokens(len(s), special); n < lo {
					t.Fatalf("special=%v: %d bytes (%.40q...) encode to %d tokens, below MinTokens %d (MaxTokenBytes %d)", special, len(s), s, n, lo, m)
				}
			}
			t.Logf("special=%v: MaxTokenBytes %d (longest vocabulary token %d bytes)", special, m, len(longest))
		}
	})
}

// TestNormalFormsShrinkAtMostNormShrink checks normShrink against every
// code point under each normal form, and against the compositions that
// shrink text most.
func TestNormalFormsShrinkAtMostNormShrink(t *testing.T) {
	forms := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}
	worst := 0.0
	var buf [utf8.UTFMax]byte
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		in := buf[:utf8.EncodeRune(buf[:], r)]
		for name, f := range forms {
			out := f.Bytes(in)
			if len(out) == 0 || len(out)*normShrink < len(in) {
				t.Fatalf("%s(U+%04X) is %d bytes from %d: shrinks more than normShrink %d", name, r, len(out), len(in), normShrink)
			}
			worst = max(worst, float64(len(in))/float64(len(out)))
		}
	}
	for _, s := range []string{"\u1100\u1161\u11A8", "u\u0308\u0304", "\u03B1\u0313\u0301\u0345", "\U0001D41E\u0301", "e\u0323\u0302"} {
		for name, f := range forms {
			if out := f.String(s); len(out)*normShrink < len(s) {
				t.Errorf("%s(%+q) is %d bytes from %d: shrinks more than normShrink %d", name, s, len(out), len(s), normShrink)
			}
		}
	}
	if worst != normShrink {
		t.Errorf("the worst single code point shrinks %.2fx; normShrink %d is not tight", worst, normShrink)
	}
}

// TestMaxTokenBytesUnbounded checks the cases without a bound: Split with
// behavior Removed, and added tokens that strip whitespace.
func TestMaxTokenBytesUnbounded(t *testing.T) {
	vocab := byteVocabJSON()
	removed, err := Parse([]byte(`{"model":{"type":"BPE","vocab":`+vocab+`,"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":"-"},"behavior":"Removed"},{"type":"ByteLevel","use_regex":false}]}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := removed.MaxTokenBytes(false); got != 0 {
		t.Errorf("Split Removed: MaxTokenBytes = %d, want 0 (%q encodes to %d tokens)", got, "----", len(removed.Encode("----")))
	}
	strip, err := Parse([]byte(`{"added_tokens":[{"id":256,"content":"<m>","special":true,"lstrip":true}],"model":{"type":"BPE","vocab":`+vocab+`,"merges":[]},"pre_tokenizer":{"type":"ByteLevel","use_regex":false}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strip.MaxTokenBytes(true); got != 0 {
		t.Errorf("lstrip added token: MaxTokenBytes(special) = %d, want 0 (%d spaces and <m> encode to %d tokens)", got, 100, len(strip.EncodeSpecial(strings.Repeat(" ", 100)+"<m>")))
	}
	if got := strip.MaxTokenBytes(false); got != 1 {
		t.Errorf("lstrip added token: MaxTokenBytes(plain) = %d, want 1 (one byte per token without merges)", got)
	}
}
