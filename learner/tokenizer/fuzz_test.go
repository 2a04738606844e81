package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// fuzzPieces are the building blocks of random test text: every class of
// the pre-tokenizer patterns, contraction corner cases, characters NFC
// changes, added-token text and bytes that are not UTF-8.
var fuzzPieces = []string{
	"a", "Z", "é", "я", "中", "ก", "ា", "한", "ω", "ſ", "\u212a", "\u0130",
	"0", "7", "123", "٣", "²", "½", "Ⅻ",
	" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\v", "\u0085", "\f",
	"'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'x", "'ſ",
	".", ",", "!", "...", "-", "=", "$", "(", "\"", "`", "_",
	"🦙", "😁", "👩\u200d💻", "e\u0301", "A\u030a", "\u1100\u1161", "\u0915\u093f",
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "<|eot_id|>", "<|begin_of_text|>", "<verify>", "<|eos|>",
	"\xff", "\xc3", "\xe4\xb8", "\x80",
}

func randomText(r *rand.Rand, maxPieces int) string {
	var b strings.Builder
	for n := 1 + r.IntN(maxPieces); n > 0; n-- {
		if r.IntN(8) == 0 {
			b.WriteRune(rune(r.IntN(0x30000))) // any code point (surrogates become U+FFFD)
			continue
		}
		b.WriteString(fuzzPieces[r.IntN(len(fuzzPieces))])
	}
	return b.String()
}

// TestFastSplitMatchesRegexp checks the hand-written pre-tokenizers against
// the regular expression engine on random text.
func TestFastSplitMatchesRegexp(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, pattern := range []string{qwen2Pattern, llama3Pattern, gpt2Pattern} {
		rs, err := newRegexSplitter(pattern)
		if err != nil {
			t.Fatal(err)
		}
		if rs.fast == nil {
			t.Fatalf("no hand-written splitter for %q", pattern)
		}
		for i := 0; i < 3000; i++ {
			s := randomText(r, 25)
			if err := compareSplit(rs, s); err != nil {
				t.Fatalf("pattern %q: %v", pattern, err)
			}
		}
	}
}

func compareSplit(rs *regexSplitter, s string) error {
	want := rs.slowMatches(nil, s)
	got := rs.fast.matches(nil, s)
	if !slices.Equal(got, want) {
		return fmt.Errorf("on %q: hand-written split %v, regexp2 %v", s, pieces(s, got), pieces(s, want))
	}
	return nil
}

func pieces(s string, ms [][2]int) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = s[m[0]:m[1]]
	}
	return out
}

func FuzzFastSplit(f *testing.F) {
	for _, s := range []string{"Hello, y'all! 3333 \n\n  x", "'S'RE\r\n \u00a0a", "\xff\xfe  ", "½ ²3 ٣"} {
		f.Add(s)
	}
	splitters := make([]*regexSplitter, 0, 3)
	for _, p := range []string{qwen2Pattern, llama3Pattern, gpt2Pattern} {
		rs, err := newRegexSplitter(p)
		if err != nil {
			f.Fatal(err)
		}
		splitters = append(splitters, rs)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, rs := range splitters {
			if err := compareSplit(rs, s); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// checkRoundTrip encodes s with special parsing off and checks that no
// added token appears and that decoding gives back s (after the
// normaliser).
func checkRoundTrip(tok *HF, s string) error {
	ids := tok.Encode(s)
	for _, id := range ids {
		if tok.IsAdded(id) {
			return fmt.Errorf("Encode(%q) produced added token %d with special parsing off", s, id)
		}
	}
	back, err := tok.Decode(ids, false)
	if err != nil {
		return err
	}
	want := s
	if tok.norm != nil {
		want = tok.norm(s)
	}
	if back != want {
		return fmt.Errorf("Decode(Encode(%q)) = %q, want %q", s, back, want)
	}
	return nil
}

func TestRoundTripRandom(t *testing.T) {
	forEachVocab(t, func(t *testing.T, tok *HF) {
		r := rand.New(rand.NewPCG(3, 4))
		for i := 0; i < 2000; i++ {
			if err := checkRoundTrip(tok, randomText(r, 40)); err != nil {
				t.Fatal(err)
			}
		}
		// Valid UTF-8 text comes back as it was or in NFC.
		s := "Cafe\u0301 — \u00bd of 'em"
		if back, _ := tok.Decode(tok.Encode(s), false); utf8.ValidString(s) && back != s && back != norm.NFC.String(s) {
			t.Errorf("round trip of %q gave %q", s, back)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "hello world", "<|im_start|>user\n", "\xff\xfe", "😶\u200d🌫️ 'RE"} {
		f.Add(s)
	}
	toks := []*HF{Builtin()}
	if slices.Contains(sharedVocabs, "qwen3") {
		toks = append(toks, sharedTokenizer(f, "qwen3"))
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			if err := checkRoundTrip(tok, s); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestSpecialTextIsNotForged builds text entirely from added-token contents
// and checks that Encode never yields an added id while EncodeSpecial yields
// exactly the tokens.
func TestSpecialTextIsNotForged(t *testing.T) {
	forEachVocab(t, func(t *testing.T, tok *HF) {
		var sb strings.Builder
		var want []int
		for _, a := range tok.addedL {
			sb.WriteString(a.Content)
			want = append(want, a.ID)
		}
		text := sb.String()
		if got := tok.EncodeSpecial(text); !slices.Equal(got, want) {
			t.Errorf("EncodeSpecial of all added tokens = %v, want %v", got, want)
		}
		if err := checkRoundTrip(tok, text); err != nil {
			t.Error(err)
		}
	})
}
