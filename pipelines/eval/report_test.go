package eval

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/transforms/metrics"
)

func fakeReport(label string, avgs map[string]float64, order []string) *Report {
	r := &Report{Label: label, Complete: true}
	var es []metrics.Estimate
	for _, n := range order {
		a, ok := avgs[n]
		if !ok {
			continue
		}
		e := metrics.Estimate{Mean: a, StdErr: 0.02, N: 30}
		r.Benchmarks = append(r.Benchmarks, BenchmarkScore{Name: n, Problems: 30, Scored: 30,
			Score: metrics.Score{Problems: 30, Samples: 480, MinN: 16, MaxN: 16, Avg: e}})
		es = append(es, e)
	}
	r.Overall.Avg = metrics.Macro(es)
	return r
}

func TestCompareDeltasAndTable(t *testing.T) {
	order := []string{"aime24", "aime25", "math500"}
	grpo := fakeReport("GRPO", map[string]float64{"aime24": 0.233, "aime25": 0.189, "math500": 0.784}, order)
	aipo := fakeReport("AIPO", map[string]float64{"aime24": 0.265, "aime25": 0.213, "math500": 0.805}, order)
	partial := fakeReport("partial", map[string]float64{"aime24": 0.1}, order)
	c, err := Compare([]*Report{grpo, aipo, partial})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"aime24": 0.032, "aime25": 0.024, "math500": 0.021}
	for n, d := range want {
		if got := c.Rows[1].Delta[n]; math.Abs(got-d) > 1e-9 {
			t.Errorf("delta %s = %v, want %v", n, got, d)
		}
	}
	if _, ok := c.Rows[2].Delta["aime25"]; ok {
		t.Errorf("a benchmark the report lacks has a delta: %+v", c.Rows[2].Delta)
	}
	md := CompareMarkdownText([]*Report{grpo, aipo, partial})
	for _, line := range []string{
		"| Model | aime24 (Avg@16) | aime25 (Avg@16) | math500 (Avg@16) | Avg. |",
		"| GRPO | 23.3 ± 2.0 | 18.9 ± 2.0 | 78.4 ± 2.0 | 40.2 |",
		"| AIPO | 26.5 ± 2.0 | 21.3 ± 2.0 | 80.5 ± 2.0 | 42.8 |",
		"| Δ vs GRPO | +3.2 | +2.4 | +2.1 | +2.6 |",
		"| partial | 10.0 ± 2.0 | – | – | 10.0 |",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("comparison lacks the line\n%s\nin\n%s", line, md)
		}
	}
	dir := t.TempDir()
	if err := WriteComparison(context.Background(), dir, []*Report{grpo, aipo, partial}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ComparePNG))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("compare.png: %v", err)
	}
	// The chart has coloured bars: count pixels that are neither grey nor
	// white.
	colored := 0
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y += 2 {
		for x := bd.Min.X; x < bd.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			if max(r, g, b)-min(r, g, b) > 0x3000 {
				colored++
			}
		}
	}
	if colored < 200 {
		t.Errorf("compare.png has %d coloured sample pixels; no bars drawn?", colored)
	}
	if _, err := Compare(nil); err == nil {
		t.Errorf("Compare of no reports did not fail")
	}
}
