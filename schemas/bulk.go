package schemas

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
)

// The bulk trajectory reader decodes a shard column by column: for each row
// group it reads every page of a column chunk into one preallocated slice per
// column (values and, for list columns, per-row offsets derived from the
// repetition levels), then hands each row sub-slices of those arrays. No
// reflection runs per row; the only per-row work is slicing.
//
// It reads the column layout from the file, so it accepts shards written by
// any Parquet writer that uses the same column names and physical types
// (required or optional columns, three-level lists with any inner names,
// plain or dictionary encoded pages, v1 or v2 data pages). As with
// parquet-go's generic reader, a null scalar reads as its zero value and a
// null list as an empty one. A null list element, a missing column or a
// column of another physical type is an error naming the column.

// Column positions of Trajectory in the bulk reader's tables.
const (
	tcSchemaVersion = iota
	tcRun
	tcStep
	tcPolicyVersion
	tcPromptID
	tcSampleIndex
	tcDataSource
	tcPromptIDs
	tcResponseIDs
	tcTokenSource
	tcBehaviorLogProbs
	tcTokenPolicyVersion
	tcResponseText
	tcInteractionAgent
	tcInteractionQuery
	tcInteractionResult
	tcInteractionStatus
	tcInteractionLatencyMs
	tcInteractionSpanStart
	tcInteractionSpanEnd
	tcInteractionNoisy
	tcReward
	tcCorrect
	tcAdvantage
	tcFinishReason
	tcCount
)

// trajColumn describes one column that the bulk reader expects.
type trajColumn struct {
	name string
	kind parquet.Kind
	list bool
}

var trajColumns = [tcCount]trajColumn{
	tcSchemaVersion:        {"schema_version", parquet.Int32, false},
	tcRun:                  {"run", parquet.ByteArray, false},
	tcStep:                 {"step", parquet.Int64, false},
	tcPolicyVersion:        {"policy_version", parquet.Int64, false},
	tcPromptID:             {"prompt_id", parquet.ByteArray, false},
	tcSampleIndex:          {"sample_index", parquet.Int32, false},
	tcDataSource:           {"data_source", parquet.ByteArray, false},
	tcPromptIDs:            {"prompt_ids", parquet.Int32, true},
	tcResponseIDs:          {"response_ids", parquet.Int32, true},
	tcTokenSource:          {"token_source", parquet.Int32, true},
	tcBehaviorLogProbs:     {"behavior_logprobs", parquet.Float, true},
	tcTokenPolicyVersion:   {"token_policy_version", parquet.Int64, true},
	tcResponseText:         {"response_text", parquet.ByteArray, false},
	tcInteractionAgent:     {"interaction_agent", parquet.ByteArray, true},
	tcInteractionQuery:     {"interaction_query", parquet.ByteArray, true},
	tcInteractionResult:    {"interaction_result", parquet.ByteArray, true},
	tcInteractionStatus:    {"interaction_status", parquet.ByteArray, true},
	tcInteractionLatencyMs: {"interaction_latency_ms", parquet.Float, true},
	tcInteractionSpanStart: {"interaction_span_start", parquet.Int32, true},
	tcInteractionSpanEnd:   {"interaction_span_end", parquet.Int32, true},
	tcInteractionNoisy:     {"interaction_noisy", parquet.Boolean, true},
	tcReward:               {"reward", parquet.Float, false},
	tcCorrect:              {"correct", parquet.Boolean, false},
	tcAdvantage:            {"advantage", parquet.Float, false},
	tcFinishReason:         {"finish_reason", parquet.ByteArray, false},
}

// trajOptional are the columns a shard of an earlier schema version may
// lack: they read as empty lists (see Trajectory.TokenPolicyVersion).
var trajOptional = [tcCount]bool{tcTokenPolicyVersion: true}

// leafInfo is where one expected column lives in a particular file.
type leafInfo struct {
	missing bool // an optional column the file does not have
	name    string
	index   int  // leaf column index in the file
	list    bool // one list per row (max repetition level 1)
	maxDef  byte // definition level of a present value
	elemDef byte // lists: definition level from which an entry is an element
}

// trajLayout locates every Trajectory column in a file's schema.
func trajLayout(f *parquet.File) ([tcCount]leafInfo, error) {
	var out [tcCount]leafInfo
	root := f.Root()
	for i, want := range trajColumns {
		col := root.Column(want.name)
		if col == nil && trajOptional[i] {
			out[i] = leafInfo{name: want.name, list: want.list, missing: true}
			continue
		}
		if col == nil {
			return out, fmt.Errorf("column %q is missing (the shard was written with another schema; rewrite it with this version of aipo)", want.name)
		}
		var def, elemDef, reps int
		for {
			if col.Optional() || col.Repeated() {
				def++
			}
			if col.Repeated() {
				reps++
				elemDef = def
			}
			if col.Leaf() {
				break
			}
			kids := col.Columns()
			if len(kids) != 1 {
				return out, fmt.Errorf("column %q has %d sub-columns, want a list of one value type", want.name, len(kids))
			}
			col = kids[0]
		}
		if got := col.Type().Kind(); got != want.kind {
			return out, fmt.Errorf("column %q has physical type %s, want %s", want.name, got, want.kind)
		}
		if (reps == 1) != want.list || reps > 1 {
			shape := "a scalar"
			if want.list {
				shape = "a list"
			}
			return out, fmt.Errorf("column %q has %d levels of repetition, want %s", want.name, reps, shape)
		}
		if col.MaxDefinitionLevel() != def || col.MaxRepetitionLevel() != reps {
			return out, fmt.Errorf("column %q: inconsistent levels in the file schema", want.name)
		}
		out[i] = leafInfo{name: want.name, index: col.Index(), list: want.list, maxDef: byte(def), elemDef: byte(elemDef)}
	}
	return out, nil
}

// ReadTrajectoriesBulk decodes a whole trajectory shard held in memory (read
// it verified with VerifyFile or Step.ReadFile first). Per-token and
// interaction lists of a row share backing arrays with the other rows of its
// row group, capped so that appending to one row's list never overwrites
// another's; empty lists are nil.
func ReadTrajectoriesBulk(b []byte) ([]Trajectory, error) {
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)),
		parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("open parquet: %w", err)
	}
	layout, err := trajLayout(f)
	if err != nil {
		return nil, err
	}
	out := make([]Trajectory, f.NumRows())
	var at int64
	for gi, rg := range f.RowGroups() {
		n := rg.NumRows()
		if at+n > int64(len(out)) {
			return nil, fmt.Errorf("row group %d: row groups hold more rows than the footer's %d", gi, len(out))
		}
		if err := decodeTrajGroup(rg, &layout, out[at:at+n]); err != nil {
			return nil, fmt.Errorf("row group %d: %w", gi, err)
		}
		at += n
	}
	if at != int64(len(out)) {
		return nil, fmt.Errorf("row groups hold %d rows, the footer says %d", at, len(out))
	}
	return out, nil
}

// trajGroup holds the decoded columns of one row group.
type trajGroup struct {
	i32  [tcCount][]int32
	i64  [tcCount][]int64
	f32  [tcCount][]float32
	bl   [tcCount][]bool
	str  [tcCount][]string
	offs [tcCount][]int32
	src  []int8
}

func decodeTrajGroup(rg parquet.RowGroup, layout *[tcCount]leafInfo, rows []Trajectory) error {
	var g trajGroup
	chunks := rg.ColumnChunks()
	n := len(rows)
	for c := range trajColumns {
		leaf := &layout[c]
		if leaf.missing {
			g.offs[c] = make([]int32, n+1)
			continue
		}
		cc := chunks[leaf.index]
		var err error
		switch trajColumns[c].kind {
		case parquet.Int32:
			g.i32[c], g.offs[c], err = readFixed(cc, leaf, n, (*encoding.Values).Int32)
		case parquet.Int64:
			g.i64[c], g.offs[c], err = readFixed(cc, leaf, n, (*encoding.Values).Int64)
		case parquet.Float:
			g.f32[c], g.offs[c], err = readFixed(cc, leaf, n, (*encoding.Values).Float)
		case parquet.Boolean:
			g.bl[c], g.offs[c], err = readBools(cc, leaf, n)
		case parquet.ByteArray:
			g.str[c], g.offs[c], err = readStrings(cc, leaf, n)
		}
		if err != nil {
			return fmt.Errorf("column %q: %w", leaf.name, err)
		}
	}
	// token_source is int8 in memory, INT32 in the file.
	ts := g.i32[tcTokenSource]
	g.src = make([]int8, len(ts))
	for i, v := range ts {
		if v < -128 || v > 127 {
			return fmt.Errorf("column %q: value %d does not fit int8", trajColumns[tcTokenSource].name, v)
		}
		g.src[i] = int8(v)
	}

	for r := range rows {
		t := &rows[r]
		t.SchemaVersion = g.i32[tcSchemaVersion][r]
		t.Run = g.str[tcRun][r]
		t.Step = g.i64[tcStep][r]
		t.PolicyVersion = g.i64[tcPolicyVersion][r]
		t.PromptID = g.str[tcPromptID][r]
		t.SampleIndex = g.i32[tcSampleIndex][r]
		t.DataSource = g.str[tcDataSource][r]

		t.PromptIDs = sub(g.i32[tcPromptIDs], g.offs[tcPromptIDs], r)
		t.ResponseIDs = sub(g.i32[tcResponseIDs], g.offs[tcResponseIDs], r)
		t.TokenSource = sub(g.src, g.offs[tcTokenSource], r)
		t.BehaviorLogProbs = sub(g.f32[tcBehaviorLogProbs], g.offs[tcBehaviorLogProbs], r)
		t.TokenPolicyVersion = sub(g.i64[tcTokenPolicyVersion], g.offs[tcTokenPolicyVersion], r)
		t.ResponseText = g.str[tcResponseText][r]

		t.InteractionAgent = sub(g.str[tcInteractionAgent], g.offs[tcInteractionAgent], r)
		t.InteractionQuery = sub(g.str[tcInteractionQuery], g.offs[tcInteractionQuery], r)
		t.InteractionResult = sub(g.str[tcInteractionResult], g.offs[tcInteractionResult], r)
		t.InteractionStatus = sub(g.str[tcInteractionStatus], g.offs[tcInteractionStatus], r)
		t.InteractionLatencyMs = sub(g.f32[tcInteractionLatencyMs], g.offs[tcInteractionLatencyMs], r)
		t.InteractionSpanStart = sub(g.i32[tcInteractionSpanStart], g.offs[tcInteractionSpanStart], r)
		t.InteractionSpanEnd = sub(g.i32[tcInteractionSpanEnd], g.offs[tcInteractionSpanEnd], r)
		t.InteractionNoisy = sub(g.bl[tcInteractionNoisy], g.offs[tcInteractionNoisy], r)

		t.Reward = g.f32[tcReward][r]
		t.Correct = g.bl[tcCorrect][r]
		t.Advantage = g.f32[tcAdvantage][r]
		t.FinishReason = g.str[tcFinishReason][r]
	}
	return nil
}

// sub returns row r's list, capped at its end; nil when empty.
func sub[T any](vals []T, offs []int32, r int) []T {
	a, b := offs[r], offs[r+1]
	if a == b {
		return nil
	}
	return vals[a:b:b]
}

// levels tracks the row structure of one column chunk across its pages.
type levels struct {
	leaf  *leafInfo
	offs  []int32 // lists: start of each row's elements, then the end
	elems int32   // lists: elements seen so far
	rows  int     // scalars: rows seen so far
}

func newLevels(leaf *leafInfo, rows int) *levels {
	l := &levels{leaf: leaf}
	if leaf.list {
		l.offs = make([]int32, 0, rows+1)
	}
	return l
}

// page consumes one page's levels and returns the number of values the page
// holds. Rows may continue from the previous page (v1 data pages).
func (l *levels) page(p parquet.Page) (int, error) {
	leaf := l.leaf
	if !leaf.list {
		if leaf.maxDef == 0 {
			n := int(p.NumValues())
			l.rows += n
			return n, nil
		}
		def := p.DefinitionLevels()
		n := 0
		for _, d := range def {
			if d == leaf.maxDef {
				n++
			}
		}
		l.rows += len(def)
		return n, nil
	}
	rep, def := p.RepetitionLevels(), p.DefinitionLevels()
	if len(rep) != len(def) {
		return 0, fmt.Errorf("page has %d repetition levels and %d definition levels", len(rep), len(def))
	}
	if len(rep) > 0 && rep[0] != 0 && len(l.offs) == 0 {
		return 0, errors.New("the first page does not start a row")
	}
	start := l.elems
	elemDef, maxDef := leaf.elemDef, leaf.maxDef
	offs := l.offs
	e := l.elems
	for i, r := range rep {
		if r == 0 {
			offs = append(offs, e)
		}
		d := def[i]
		if d >= elemDef {
			if d != maxDef {
				return 0, fmt.Errorf("row %d has a null list element (trajectory lists cannot hold nulls)", len(offs)-1)
			}
			e++
		}
	}
	l.offs, l.elems = offs, e
	return int(e - start), nil
}

// finish checks the row count and returns the offsets (nil for scalars).
func (l *levels) finish(rows int) ([]int32, error) {
	if !l.leaf.list {
		if l.rows != rows {
			return nil, fmt.Errorf("column chunk holds %d rows, row group says %d", l.rows, rows)
		}
		return nil, nil
	}
	if len(l.offs) != rows {
		return nil, fmt.Errorf("column chunk holds %d rows, row group says %d", len(l.offs), rows)
	}
	return append(l.offs, l.elems), nil
}

// dense reports whether the page values map one to one onto the column's
// entries: lists (whose nulls are empty lists) and required scalars.
func (l *levels) dense() bool { return l.leaf.list || l.leaf.maxDef == 0 }

// place appends a page's values to vals. For an optional scalar column the
// values cover only the non-null rows: null rows get the zero value, as
// parquet-go's generic reader gives them.
func place[T any](l *levels, vals, pv []T, def []byte) []T {
	if l.dense() {
		return append(vals, pv...)
	}
	var zero T
	k := 0
	for _, d := range def {
		if d == l.leaf.maxDef {
			vals = append(vals, pv[k])
			k++
		} else {
			vals = append(vals, zero)
		}
	}
	return vals
}

// lookup resolves dictionary indexes.
func lookup[T any](dict []T, idx []int32, n int) ([]T, error) {
	if len(idx) != n {
		return nil, fmt.Errorf("page holds %d dictionary indexes, its levels say %d values", len(idx), n)
	}
	out := make([]T, len(idx))
	for j, i := range idx {
		if uint(i) >= uint(len(dict)) {
			return nil, fmt.Errorf("dictionary index %d out of range [0,%d)", i, len(dict))
		}
		out[j] = dict[i]
	}
	return out, nil
}

// eachPage calls fn with every data page of a column chunk, in order.
func eachPage(cc parquet.ColumnChunk, fn func(parquet.Page) error) error {
	pages := cc.Pages()
	defer pages.Close()
	for {
		p, err := pages.ReadPage()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		err = fn(p)
		parquet.Release(p)
		if err != nil {
			return err
		}
	}
}

// readFixed decodes a column of fixed-size values (INT32, INT64, FLOAT) into
// one slice sized from the chunk's value count.
func readFixed[T int32 | int64 | float32](cc parquet.ColumnChunk, leaf *leafInfo, rows int, get func(*encoding.Values) []T) ([]T, []int32, error) {
	lv := newLevels(leaf, rows)
	vals := make([]T, 0, cc.NumValues())
	var dictOf parquet.Dictionary
	var dict []T
	err := eachPage(cc, func(p parquet.Page) error {
		n, err := lv.page(p)
		if err != nil {
			return err
		}
		data := p.Data()
		if d := p.Dictionary(); d != nil {
			if d != dictOf {
				dv := d.Page().Data()
				dictOf, dict = d, get(&dv)
			}
			pv, err := lookup(dict, data.Int32(), n)
			if err != nil {
				return err
			}
			vals = place(lv, vals, pv, p.DefinitionLevels())
			return nil
		}
		pv := get(&data)
		if len(pv) != n {
			return fmt.Errorf("page holds %d values, its levels say %d", len(pv), n)
		}
		vals = place(lv, vals, pv, p.DefinitionLevels())
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	offs, err := lv.finish(rows)
	return vals, offs, err
}

// readBools decodes a BOOLEAN column (bit-packed pages).
func readBools(cc parquet.ColumnChunk, leaf *leafInfo, rows int) ([]bool, []int32, error) {
	lv := newLevels(leaf, rows)
	vals := make([]bool, 0, cc.NumValues())
	err := eachPage(cc, func(p parquet.Page) error {
		n, err := lv.page(p)
		if err != nil {
			return err
		}
		if p.Dictionary() != nil {
			return errors.New("dictionary-encoded booleans are not supported")
		}
		data := p.Data()
		bits := data.Boolean()
		if len(bits)*8 < n {
			return fmt.Errorf("page holds %d bits, its levels say %d values", len(bits)*8, n)
		}
		pv := make([]bool, n)
		for i := range pv {
			pv[i] = bits[i>>3]&(1<<(i&7)) != 0
		}
		vals = place(lv, vals, pv, p.DefinitionLevels())
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	offs, err := lv.finish(rows)
	return vals, offs, err
}

// readStrings decodes a BYTE_ARRAY column. Each page's bytes become one Go
// string that the values are substrings of; dictionary pages share the dictionary's
// strings.
func readStrings(cc parquet.ColumnChunk, leaf *leafInfo, rows int) ([]string, []int32, error) {
	lv := newLevels(leaf, rows)
	vals := make([]string, 0, cc.NumValues())
	var dictOf parquet.Dictionary
	var dict []string
	err := eachPage(cc, func(p parquet.Page) error {
		n, err := lv.page(p)
		if err != nil {
			return err
		}
		data := p.Data()
		if d := p.Dictionary(); d != nil {
			if d != dictOf {
				dv := d.Page().Data()
				dictOf, dict = d, splitStrings(&dv, nil)
			}
			pv, err := lookup(dict, data.Int32(), n)
			if err != nil {
				return err
			}
			vals = place(lv, vals, pv, p.DefinitionLevels())
			return nil
		}
		if lv.dense() {
			before := len(vals)
			vals = splitStrings(&data, vals)
			if got := len(vals) - before; got != n {
				return fmt.Errorf("page holds %d values, its levels say %d", got, n)
			}
			return nil
		}
		pv := splitStrings(&data, nil)
		if len(pv) != n {
			return fmt.Errorf("page holds %d values, its levels say %d", len(pv), n)
		}
		vals = place(lv, vals, pv, p.DefinitionLevels())
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	offs, err := lv.finish(rows)
	return vals, offs, err
}

// splitStrings appends the byte arrays of v to dst as substrings of one
// string copied from the page.
func splitStrings(v *encoding.Values, dst []string) []string {
	data, offsets := v.ByteArray()
	if len(offsets) < 2 {
		return dst
	}
	s := string(data)
	for j := 0; j+1 < len(offsets); j++ {
		dst = append(dst, s[offsets[j]:offsets[j+1]])
	}
	return dst
}
