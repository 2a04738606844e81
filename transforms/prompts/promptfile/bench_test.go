package promptfile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/schemas"
)

// BenchmarkReadGSM8KTrain reads the GSM8K train file (7,473 rows, 4.2 MB)
// through the mapping and, in the same run, decodes the same lines with
// encoding/json alone (the floor any JSONL reader pays), and reports the
// mapping's cost as a ratio to that floor. The file is the repository's
// copy (data/train), decompressed once into a temporary JSONL file so that
// gzip's cost is not timed.
func BenchmarkReadGSM8KTrain(b *testing.B) {
	raw := gunzipFile(b, filepath.Join("..", "..", "..", "data", "train", "math", "gsm8k", "train.jsonl.gz"))
	path := filepath.Join(b.TempDir(), "train.jsonl")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	src := Source{Path: path, Preset: "gsm8k_train"}
	var readDur, floorDur time.Duration
	rows := 0
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		n := 0
		if _, err := Read(ctx, src, func(schemas.Prompt) error { n++; return nil }, func(DeadLetter) error { return nil }); err != nil {
			b.Fatal(err)
		}
		readDur += time.Since(t0)
		rows = n

		t0 = time.Now()
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				b.Fatal(err)
			}
		}
		floorDur += time.Since(t0)
	}
	b.ReportMetric(float64(rows*b.N)/readDur.Seconds(), "rows/s")
	b.ReportMetric(float64(len(raw)*b.N)/readDur.Seconds()/1e6, "MB/s")
	b.ReportMetric(readDur.Seconds()/floorDur.Seconds(), "x_json_floor")
}

// gunzipFile returns the decompressed contents of the gzip file at p.
func gunzipFile(b *testing.B, p string) []byte {
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatalf("%s: %v", p, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		b.Fatalf("%s: %v", p, err)
	}
	return raw
}
