//go:build shareddata

package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/shareddata"
)

// sharedData returns the shared/data folder found by walking up from the
// package directory (it lies beside the repository root), or skips the test.
// AIPO_SHARED_DATA overrides the search.
func sharedData(t testing.TB) string {
	t.Helper()
	d := shareddata.Dir()
	if d == "" {
		t.Skip("shared data folder not found (want ../shared/data beside the checkout, or set AIPO_SHARED_DATA)")
	}
	return d
}

// sharedVocabs are the vocabularies of ../shared/data that forEachVocab
// and the Hugging Face reference tests run on besides the built-in one.
var sharedVocabs = []string{"qwen3", "llama3"}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*HF{}
)

// sharedTokenizer loads tokenizers/<name>/tokenizer.json once per test binary.
func sharedTokenizer(t testing.TB, name string) *HF {
	t.Helper()
	path := filepath.Join(sharedData(t), "tokenizers", name, "tokenizer.json")
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tok, ok := loaded[path]; ok {
		return tok
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is absent (%v): skipping", path, err)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	loaded[path] = tok
	return tok
}

// TestStopIDsOfSharedVocabs is TestStopIDs on Qwen3's and Llama 3's
// vocabularies.
func TestStopIDsOfSharedVocabs(t *testing.T) {
	if got := sharedTokenizer(t, "qwen3").StopIDs(); !slices.Equal(got, []int{151645, 151643}) {
		t.Errorf("qwen3 StopIDs = %v, want [151645 151643] (<|im_end|>, <|endoftext|>)", got)
	}
	if got := sharedTokenizer(t, "llama3").StopIDs(); !slices.Equal(got, []int{128009, 128001}) {
		// This Llama 3.0 vocabulary has no <|eom_id|> (128008 is reserved).
		t.Errorf("llama3 StopIDs = %v, want [128009 128001] (<|eot_id|>, <|end_of_text|>)", got)
	}
}

// TestConcurrentEncode encodes from several goroutines at once (the cache
// and scratch memory are shared) and checks every result.
func TestConcurrentEncode(t *testing.T) {
	tok := sharedTokenizer(t, "qwen3")
	r := rand.New(rand.NewPCG(5, 6))
	texts := make([]string, 200)
	want := make([][]int, len(texts))
	for i := range texts {
		texts[i] = randomText(r, 30)
	}
	for i, s := range texts {
		want[i] = Builtin().Encode(s) // touch the builtin too
		want[i] = tok.Encode(s)
	}
	tok.model.mu.Lock()
	clear(tok.model.cache)
	tok.model.mu.Unlock()
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for k := range texts {
				i := (k*7 + g*13) % len(texts)
				if got := tok.Encode(texts[i]); !slices.Equal(got, want[i]) {
					errs <- fmt.Errorf("goroutine %d: Encode(%q) = %v, want %v", g, texts[i], got, want[i])
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestMarshalRoundTripQwen writes Qwen3's tokenizer back out and reads it
// again: the same ids for the same text.
func TestMarshalRoundTripQwen(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads 11 MB")
	}
	tok := sharedTokenizer(t, "qwen3")
	data, err := tok.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data, nil)
	if err != nil {
		t.Fatalf("Parse(Marshal()): %v", err)
	}
	text := "Hello, y'all! 1314151 Äpfel <think> 🦙\n\n  x"
	a, b := tok.EncodeSpecial(text), back.EncodeSpecial(text)
	if !slices.Equal(a, b) || back.VocabSize() != tok.VocabSize() {
		t.Fatalf("after Marshal/Parse: %v (vocab %d); before: %v (vocab %d)", b, back.VocabSize(), a, tok.VocabSize())
	}
}

// Ids past the tokenizer's vocabulary but inside the model's (Qwen3 pads
// its LM head to 151936 rows for 151669 tokens) decode to no text, as
// Hugging Face's tokenizers decode them; a negative id is an error.
func TestDecodePaddedVocabulary(t *testing.T) {
	tok := sharedTokenizer(t, "qwen3")
	if tok.VocabSize() != 151669 {
		t.Fatalf("Qwen3 tokenizer has %d tokens, want 151669", tok.VocabSize())
	}
	ids := tok.Encode("2+2=4")
	padded := append([]int{151928}, ids[:2]...)
	padded = append(padded, 151935)
	padded = append(padded, ids[2:]...)
	got, err := tok.Decode(padded, false)
	if err != nil || got != "2+2=4" {
		t.Errorf("Decode(%v) = %q, %v; want %q", padded, got, err, "2+2=4")
	}
	if _, err := tok.Decode([]int{ids[0], -1}, false); err == nil || !strings.Contains(err.Error(), "ids[1] = -1") {
		t.Errorf("Decode with a negative id: %v; want an error naming ids[1]", err)
	}
}

// BenchmarkLoad measures reading Qwen3's 11 MB tokenizer.json.
func BenchmarkLoad(b *testing.B) {
	path := filepath.Join(sharedData(b), "tokenizers", "qwen3", "tokenizer.json")
	for b.Loop() {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode measures encoding throughput of the GSM8K questions with
// Qwen3's tokenizer, cold (empty pre-token cache, as for the first
// document) and warm (cache filled), and reports the warm/cold ratio of
// the same run.
func BenchmarkEncode(b *testing.B) {
	text := gsm8kQuestions(b)
	path := filepath.Join(sharedData(b), "tokenizers", "qwen3", "tokenizer.json")
	tok, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	mb := float64(len(text)) / 1e6
	var cold, warm time.Duration
	var n int
	for b.Loop() {
		tok.model.mu.Lock()
		clear(tok.model.cache)
		tok.model.mu.Unlock()
		t0 := time.Now()
		n = len(tok.Encode(text))
		t1 := time.Now()
		tok.Encode(text)
		cold += t1.Sub(t0)
		warm += time.Since(t1)
	}
	it := float64(b.N)
	b.ReportMetric(mb*it/cold.Seconds(), "MB/s-cold")
	b.ReportMetric(mb*it/warm.Seconds(), "MB/s-warm")
	b.ReportMetric(cold.Seconds()/warm.Seconds(), "warm/cold")
	b.ReportMetric(float64(len(text))/float64(n), "bytes/token")
}

// BenchmarkEncodeParallel encodes the GSM8K questions from all cores at
// once (warm cache), as the rollout's workers share one tokenizer.
func BenchmarkEncodeParallel(b *testing.B) {
	text := gsm8kQuestions(b)
	tok := sharedTokenizer(b, "qwen3")
	tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok.Encode(text)
		}
	})
}
