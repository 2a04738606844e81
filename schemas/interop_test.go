package schemas

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// writeInteropStep writes a step of random trajectories in three shards.
func writeInteropStep(t *testing.T) (string, []Trajectory, Manifest) {
	t.Helper()
	dir := rundir.Step(filepath.Join(t.TempDir(), "run"), 7)
	rows := randomTrajectories(11, 700)
	m, err := WriteStep(context.Background(), dir, splitRows(rows, 250), Manifest{Run: "interop", Step: 7})
	if err != nil {
		t.Fatalf("WriteStep: %v", err)
	}
	return dir, rows, m
}

// listColumn returns column name of tbl as one list array (the table is
// read in one batch per file below, so each column has one chunk).
func listColumn(t *testing.T, tbl arrow.Table, name string) *array.List {
	t.Helper()
	idx := tbl.Schema().FieldIndices(name)
	if len(idx) != 1 {
		t.Fatalf("arrow: table has no column %q (schema %s)", name, tbl.Schema())
	}
	chunks := tbl.Column(idx[0]).Data().Chunks()
	if len(chunks) != 1 {
		t.Fatalf("arrow: column %q has %d chunks, want 1", name, len(chunks))
	}
	l, ok := chunks[0].(*array.List)
	if !ok {
		t.Fatalf("arrow: column %q is %T, want a list", name, chunks[0])
	}
	return l
}

// TestInteropArrow reads every shard with Apache Arrow's Go Parquet reader
// and checks row counts against the manifest, per-token list lengths, and the
// token ids themselves against what was written.
func TestInteropArrow(t *testing.T) {
	dir, rows, m := writeInteropStep(t)
	next := 0
	for _, f := range m.Files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		rdr, err := file.NewParquetReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("arrow: open %s: %v", f.Path, err)
		}
		if rdr.NumRows() != f.Rows {
			t.Fatalf("arrow: %s has %d rows, manifest says %d", f.Path, rdr.NumRows(), f.Rows)
		}
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: f.Rows + 1}, memory.DefaultAllocator)
		if err != nil {
			t.Fatalf("arrow: %s: %v", f.Path, err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatalf("arrow: read %s: %v", f.Path, err)
		}
		ids := listColumn(t, tbl, "response_ids")
		src := listColumn(t, tbl, "token_source")
		lps := listColumn(t, tbl, "behavior_logprobs")
		idVals, ok := ids.ListValues().(*array.Int32)
		if !ok {
			t.Fatalf("arrow: response_ids elements are %T, want int32", ids.ListValues())
		}
		for r := 0; r < int(tbl.NumRows()); r++ {
			a, b := ids.ValueOffsets(r)
			sa, sb := src.ValueOffsets(r)
			la, lb := lps.ValueOffsets(r)
			if sb-sa != b-a || lb-la != b-a {
				t.Fatalf("arrow: %s row %d: len(response_ids) %d, len(token_source) %d, len(behavior_logprobs) %d", f.Path, r, b-a, sb-sa, lb-la)
			}
			want := rows[next].ResponseIDs
			if got := idVals.Int32Values()[a:b]; !slices.Equal(got, want) && len(want)+len(got) > 0 {
				t.Fatalf("arrow: %s row %d: response_ids differ from what was written (len %d vs %d)", f.Path, r, len(got), len(want))
			}
			next++
		}
		tbl.Release()
		rdr.Close()
	}
	if next != len(rows) || int64(next) != m.Rows {
		t.Fatalf("arrow: read %d rows in all, wrote %d, manifest says %d", next, len(rows), m.Rows)
	}
}
