package schemas

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

var update = flag.Bool("update", false, "rewrite schemas/testdata/*.golden from the current code")

// describeSchema prints the Parquet schema of T and, from a one-row shard
// written by ShardWriter, every column's encodings and compression, so that
// a change of column, type, nesting or encoding shows up as a diff.
func describeSchema[T Row](t *testing.T, row T) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "# Parquet schema of %s rows (kind %q, schema version %d)\n", KindOf[T](), KindOf[T](), SchemaVersion)
	fmt.Fprintln(&b, parquet.SchemaOf(row))
	p := filepath.Join(t.TempDir(), "one.parquet")
	if _, err := WriteShard(context.Background(), p, []T{row}); err != nil {
		t.Fatalf("write one-row shard: %v", err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("open one-row shard: %v", err)
	}
	fmt.Fprintln(&b, "# column chunks as ShardWriter writes them: path, physical type, codec, encodings")
	for _, cc := range f.Metadata().RowGroups[0].Columns {
		md := cc.MetaData
		var enc []string
		for _, e := range md.Encoding {
			enc = append(enc, e.String())
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", strings.Join(md.PathInSchema, "."), md.Type, md.Codec, strings.Join(enc, ","))
	}
	return b.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./schemas -run Golden -update` to create it)", err)
	}
	if string(want) != got {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		for i := range max(len(wl), len(gl)) {
			var w, g string
			if i < len(wl) {
				w = wl[i]
			}
			if i < len(gl) {
				g = gl[i]
			}
			if w != g {
				t.Fatalf("%s changed at line %d:\n  golden: %q\n  now:    %q\nIf the change is deliberate, bump SchemaVersion when columns change meaning, then run `go test ./schemas -run Golden -update`.", path, i+1, w, g)
			}
		}
	}
}

func TestGoldenSchemas(t *testing.T) {
	traj := genTrajectory(rand.New(rand.NewPCG(1, 1)), genOptions{promptLen: 4, respLen: 32, maxInteractions: 1, textPerToken: 4}, 0)
	checkGolden(t, "trajectory.schema.golden", describeSchema(t, traj))
	checkGolden(t, "prompt.schema.golden", describeSchema(t, Prompt{SchemaVersion: SchemaVersion, Solution: "s"}))
	checkGolden(t, "eval.schema.golden", describeSchema(t, EvalRecord{SchemaVersion: SchemaVersion}))
}
