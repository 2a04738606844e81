package promptfile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/schemas"
)

// BenchmarkReadGSM8KTrain reads the GSM8K train file (7,473 rows, 4.2 MB)
// through the mapping and, in the same run, decodes the same lines with
// encoding/json alone (the floor any JSONL reader pays), and reports the
// mapping's cost as a ratio to that floor.
func BenchmarkReadGSM8KTrain(b *testing.B) {
	dir, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	var path string
	for d := dir; ; d = filepath.Dir(d) {
		if p := filepath.Join(d, "shared", "data", "math", "gsm8k", "train.jsonl"); fileExists(p) {
			path = p
			break
		}
		if filepath.Dir(d) == d {
			b.Skip("shared/data not found next to the repository")
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
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

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
