package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gsm8kQuestions returns the questions of the GSM8K test file (the
// repository's copy, data/benchmarks) joined by blank lines (about 300 KB
// of English with numbers).
func gsm8kQuestions(b testing.TB) string {
	path := filepath.Join("..", "..", "data", "benchmarks", "math", "gsm8k", "test.jsonl")
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var row struct {
			Question string `json:"question"`
			Answer   string `json:"answer"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		sb.WriteString(row.Question)
		sb.WriteString("\n\n")
	}
	if err := sc.Err(); err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	return sb.String()
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

// BenchmarkPreTokenize compares the hand-written split of Qwen's pattern
// with the regular expression engine on the same text in the same run.
func BenchmarkPreTokenize(b *testing.B) {
	text := gsm8kQuestions(b)
	rs, err := newRegexSplitter(qwen2Pattern)
	if err != nil {
		b.Fatal(err)
	}
	mb := float64(len(text)) / 1e6
	var fast, slow time.Duration
	var buf [][2]int
	for b.Loop() {
		t0 := time.Now()
		buf = rs.fast.matches(buf[:0], text)
		t1 := time.Now()
		buf = rs.slowMatches(buf[:0], text)
		fast += t1.Sub(t0)
		slow += time.Since(t1)
	}
	it := float64(b.N)
	b.ReportMetric(mb*it/fast.Seconds(), "MB/s-handwritten")
	b.ReportMetric(mb*it/slow.Seconds(), "MB/s-regexp2")
	b.ReportMetric(slow.Seconds()/fast.Seconds(), "speedup")
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
