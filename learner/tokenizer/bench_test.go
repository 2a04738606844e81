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
