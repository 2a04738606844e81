package schemas

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// writeBoth writes rows once with the bulk trajectory writer and once with
// parquet-go's GenericWriter, each into one in-memory file.
func writeBoth(t *testing.T, rows []Trajectory) (bulk, generic []byte) {
	t.Helper()
	var bb bytes.Buffer
	tw, err := newTrajectoryWriter(&bb)
	if err != nil {
		t.Fatal(err)
	}
	// Several calls, as the Beam sink makes them.
	for i := 0; i < len(rows); i += 333 {
		if n, err := tw.Write(rows[i:min(i+333, len(rows))]); err != nil || n != min(333, len(rows)-i) {
			t.Fatalf("bulk writer: wrote %d rows: %v", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("bulk writer close: %v", err)
	}
	var gb bytes.Buffer
	gw := parquet.NewGenericWriter[Trajectory](&gb, shardWriterOptions()...)
	if _, err := gw.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	return bb.Bytes(), gb.Bytes()
}

// edgeTrajectories adds to random rows the shapes that exercise the bulk
// writer's corners: a response longer than a page, many distinct
// dictionary values (indexes wider than a byte), empty strings and lists,
// NaN and negative values.
func edgeTrajectories() []Trajectory {
	rows := randomTrajectories(11, 2500)
	long := genTrajectory(rand.New(rand.NewPCG(1, 1)), genOptions{}, 0)
	long.ResponseIDs = make([]int32, 300_000) // 1.2 MB: the page is cut inside a row group
	long.TokenSource = make([]int8, len(long.ResponseIDs))
	long.BehaviorLogProbs = make([]float32, len(long.ResponseIDs))
	for i := range long.ResponseIDs {
		long.ResponseIDs[i] = int32(i)
		long.TokenSource[i] = int8(i % 5)
		long.BehaviorLogProbs[i] = -float32(i%97) / 10
	}
	rows[1500] = long
	for i := range rows[:400] {
		rows[i].FinishReason = fmt.Sprintf("reason-%d", i) // 400 distinct: 9-bit indexes
	}
	rows[7].Run, rows[7].PromptID, rows[7].ResponseText = "", "", ""
	rows[8].Advantage = float32(math.NaN())
	rows[9].Step, rows[9].PolicyVersion, rows[9].SampleIndex = -3, math.MaxInt64, math.MinInt32
	rows[10].InteractionAgent = []string{"", "verify"}
	rows[10].InteractionQuery = []string{"", ""}
	rows[10].InteractionResult = []string{"x", ""}
	rows[10].InteractionStatus = []string{"ok", "ok"}
	rows[10].InteractionLatencyMs = []float32{0, 1}
	rows[10].InteractionSpanStart = []int32{0, 5}
	rows[10].InteractionSpanEnd = []int32{2, 9}
	rows[10].InteractionNoisy = []bool{true, false}
	return rows
}

// sameRows compares rows field by field, treating NaN as equal to NaN.
func sameRows(t *testing.T, what string, want, got []Trajectory) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range want {
		w, g := normalized(want[i]), normalized(got[i])
		if math.IsNaN(float64(w.Advantage)) && math.IsNaN(float64(g.Advantage)) {
			w.Advantage, g.Advantage = 0, 0
		}
		if d := diffRow(w, g); d != "" {
			t.Fatalf("%s: row %d: %s", what, i, d)
		}
	}
}

func TestBulkWriterMatchesGenericWriter(t *testing.T) {
	rows := edgeTrajectories()
	bulk, generic := writeBoth(t, rows)
	t.Logf("bulk writer %d bytes, generic writer %d bytes", len(bulk), len(generic))
	for name, file := range map[string][]byte{"bulk-written": bulk, "generic-written": generic} {
		got, err := ReadTrajectoriesBulk(file)
		if err != nil {
			t.Fatalf("%s, bulk reader: %v", name, err)
		}
		sameRows(t, name+", bulk reader", rows, got)
		got, err = readGeneric[Trajectory](file)
		if err != nil {
			t.Fatalf("%s, generic reader: %v", name, err)
		}
		sameRows(t, name+", generic reader", rows, got)
	}

	// Same schema, row groups and value counts as the generic writer's file.
	open := func(b []byte) *parquet.File {
		f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	bm, gm := open(bulk).Metadata(), open(generic).Metadata()
	if !reflect.DeepEqual(bm.Schema, gm.Schema) || bm.NumRows != gm.NumRows || bm.CreatedBy != gm.CreatedBy {
		t.Fatalf("footer differs: schema equal %v, rows %d vs %d, created by %q vs %q",
			reflect.DeepEqual(bm.Schema, gm.Schema), bm.NumRows, gm.NumRows, bm.CreatedBy, gm.CreatedBy)
	}
	if len(bm.RowGroups) != 3 || len(gm.RowGroups) != 3 {
		t.Fatalf("row groups: bulk %d, generic %d, want 3 of up to %d rows", len(bm.RowGroups), len(gm.RowGroups), RowGroupRows)
	}
	for g := range bm.RowGroups {
		for c, bc := range bm.RowGroups[g].Columns {
			gc := gm.RowGroups[g].Columns[c]
			if bc.MetaData.NumValues != gc.MetaData.NumValues || bc.MetaData.Type != gc.MetaData.Type ||
				!reflect.DeepEqual(bc.MetaData.PathInSchema, gc.MetaData.PathInSchema) ||
				bc.MetaData.Statistics.NullCount != gc.MetaData.Statistics.NullCount {
				t.Fatalf("row group %d column %v: values %d, nulls %d; generic writer %d, %d",
					g, bc.MetaData.PathInSchema, bc.MetaData.NumValues, bc.MetaData.Statistics.NullCount,
					gc.MetaData.NumValues, gc.MetaData.Statistics.NullCount)
			}
		}
	}
	// Min/max of a scalar column, as a query engine would prune with them.
	st := bm.RowGroups[0].Columns[tcStep].MetaData.Statistics
	lo, hi := int64(binary.LittleEndian.Uint64(st.MinValue)), int64(binary.LittleEndian.Uint64(st.MaxValue))
	if lo != -3 || hi != 8 {
		t.Errorf("step statistics of row group 0: [%d, %d], want [-3, 8]", lo, hi)
	}
	// The long row's response column spans more than one page.
	pages := 0
	col := open(bulk).RowGroups()[1].ColumnChunks()[tcResponseIDs]
	if err := eachPage(col, func(parquet.Page) error { pages++; return nil }); err != nil {
		t.Fatal(err)
	}
	if pages < 2 {
		t.Errorf("response_ids of row group 1 (%d+ bytes) is %d page(s), want it cut at %d bytes", 4*300_000, pages, trajPageBytes)
	}
}

func TestBulkWriterEmptyFile(t *testing.T) {
	bulk, _ := writeBoth(t, nil)
	got, err := ReadTrajectoriesBulk(bulk)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty file: %d rows, %v", len(got), err)
	}
	if got, err = readGeneric[Trajectory](bulk); err != nil || len(got) != 0 {
		t.Fatalf("empty file, generic reader: %d rows, %v", len(got), err)
	}
}
