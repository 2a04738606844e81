package promptfile

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestShippedTrainingFiles holds the training files in data/train (what
// configs/math-local.yaml trains on) to their MANIFEST.md: each file's
// size and sha256, those of the upstream file it decompresses to, and the
// prompts its preset reads from it.
func TestShippedTrainingFiles(t *testing.T) {
	root := filepath.Join("..", "..", "..", "data", "train")
	type entry struct {
		bytes, upBytes int64
		sum, upSum     string
	}
	entries := map[string]entry{}
	f, err := os.Open(filepath.Join(root, "MANIFEST.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "|")
		if len(cols) < 7 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "math/") {
			continue
		}
		var e entry
		e.bytes, err = strconv.ParseInt(strings.TrimSpace(cols[2]), 10, 64)
		if err == nil {
			e.upBytes, err = strconv.ParseInt(strings.TrimSpace(cols[4]), 10, 64)
		}
		if err != nil {
			t.Fatalf("MANIFEST.md: %q: %v", sc.Text(), err)
		}
		e.sum, e.upSum = strings.TrimSpace(cols[3]), strings.TrimSpace(cols[5])
		entries[strings.TrimSpace(cols[1])] = e
	}
	cases := []struct {
		rel, preset string
		good, dead  int
		first       string // the first prompt's answer
	}{
		{"math/gsm8k/train.jsonl.gz", "gsm8k_train", 7473, 0, "72"},
		{"math/deepscaler/math.json.gz", "deepscaler_math", 7470, 4, ""},
	}
	if len(entries) != len(cases) {
		t.Errorf("MANIFEST.md lists %d files, this test %d", len(entries), len(cases))
	}
	for _, c := range cases {
		p := filepath.Join(root, filepath.FromSlash(c.rel))
		e, ok := entries[c.rel]
		if !ok {
			t.Errorf("%s: not in MANIFEST.md", c.rel)
			continue
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(raw); int64(len(raw)) != e.bytes || hex.EncodeToString(sum[:]) != e.sum {
			t.Errorf("%s: %d bytes, sha256 %x; MANIFEST.md says %d, %s", c.rel, len(raw), sum, e.bytes, e.sum)
		}
		zr, err := gzip.NewReader(strings.NewReader(string(raw)))
		if err != nil {
			t.Fatalf("%s: %v", c.rel, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, zr)
		if err != nil {
			t.Fatalf("%s: %v", c.rel, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); n != e.upBytes || got != e.upSum {
			t.Errorf("%s decompresses to %d bytes, sha256 %s; MANIFEST.md says the upstream file is %d, %s", c.rel, n, got, e.upBytes, e.upSum)
		}
		r := readAll(t, Source{Path: p, Preset: c.preset})
		if len(r.good) != c.good || len(r.dead) != c.dead {
			t.Errorf("%s through %s: %d prompts and %d dead letters, want %d and %d", c.rel, c.preset, len(r.good), len(r.dead), c.good, c.dead)
		}
		if c.first != "" && len(r.good) > 0 && r.good[0].Answer != c.first {
			t.Errorf("%s: the first answer is %q, want %q", c.rel, r.good[0].Answer, c.first)
		}
	}
}
