package schemas

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/delta"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// The bulk trajectory writer is the write-side twin of the bulk reader: it
// encodes Trajectory rows column by column straight into Parquet data pages
// (v2) without building per-value repetition and definition levels. A list
// column's levels are written as RLE runs, two per row, and its values are
// appended as whole slices, so the work per token is a copy, the
// compression and the checksum.
//
// The file it writes has the same schema, physical types, encodings and
// compression as parquet-go's generic writer produces for Trajectory (the
// schema, created-by and column orders are taken from a file that writer
// makes, so the struct tags stay the one definition of the schema; the
// golden test pins both). Differences that no reader depends on: pages
// hold up to about trajPageBytes of values, column chunks carry min/max
// statistics only for scalar numeric columns, and there is no page index.

// trajPageBytes is the encoded value size after which a data page is cut
// (at a row boundary). Large pages compress better and cost fewer headers;
// 1 MiB keeps a reader's per-page buffer small.
const trajPageBytes = 1 << 20

// trajCodec compresses every page, as on the generic path.
var trajCodec = shardCodec

// valueKind is how a column's values are encoded.
type valueKind uint8

const (
	vInt32  valueKind = iota // PLAIN int32 (also INT(8) token sources)
	vInt64                   // PLAIN int64
	vFloat                   // PLAIN float
	vBool                    // PLAIN, bit-packed
	vString                  // DELTA_LENGTH_BYTE_ARRAY
	vDict                    // RLE_DICTIONARY over a PLAIN dictionary page
)

// trajLeafWriter says how to take one column's values out of a row: one
// accessor is set, the one of the column's kind and shape.
type trajLeafWriter struct {
	kind valueKind
	i32  func(*Trajectory) int32
	i64  func(*Trajectory) int64
	f32  func(*Trajectory) float32
	b    func(*Trajectory) bool
	s    func(*Trajectory) string
	i32s func(*Trajectory) []int32
	i8s  func(*Trajectory) []int8
	i64s func(*Trajectory) []int64
	f32s func(*Trajectory) []float32
	bs   func(*Trajectory) []bool
	ss   func(*Trajectory) []string
}

func (l *trajLeafWriter) list() bool {
	return l.i32s != nil || l.i8s != nil || l.i64s != nil || l.f32s != nil || l.bs != nil || l.ss != nil
}

// trajLeafWriters is indexed like trajColumns (schema order).
var trajLeafWriters = [tcCount]trajLeafWriter{
	tcSchemaVersion:        {kind: vInt32, i32: func(t *Trajectory) int32 { return t.SchemaVersion }},
	tcRun:                  {kind: vDict, s: func(t *Trajectory) string { return t.Run }},
	tcStep:                 {kind: vInt64, i64: func(t *Trajectory) int64 { return t.Step }},
	tcPolicyVersion:        {kind: vInt64, i64: func(t *Trajectory) int64 { return t.PolicyVersion }},
	tcPromptID:             {kind: vString, s: func(t *Trajectory) string { return t.PromptID }},
	tcSampleIndex:          {kind: vInt32, i32: func(t *Trajectory) int32 { return t.SampleIndex }},
	tcDataSource:           {kind: vDict, s: func(t *Trajectory) string { return t.DataSource }},
	tcPromptIDs:            {kind: vInt32, i32s: func(t *Trajectory) []int32 { return t.PromptIDs }},
	tcResponseIDs:          {kind: vInt32, i32s: func(t *Trajectory) []int32 { return t.ResponseIDs }},
	tcTokenSource:          {kind: vInt32, i8s: func(t *Trajectory) []int8 { return t.TokenSource }},
	tcBehaviorLogProbs:     {kind: vFloat, f32s: func(t *Trajectory) []float32 { return t.BehaviorLogProbs }},
	tcTokenPolicyVersion:   {kind: vInt64, i64s: func(t *Trajectory) []int64 { return t.TokenPolicyVersion }},
	tcResponseText:         {kind: vString, s: func(t *Trajectory) string { return t.ResponseText }},
	tcInteractionAgent:     {kind: vString, ss: func(t *Trajectory) []string { return t.InteractionAgent }},
	tcInteractionQuery:     {kind: vString, ss: func(t *Trajectory) []string { return t.InteractionQuery }},
	tcInteractionResult:    {kind: vString, ss: func(t *Trajectory) []string { return t.InteractionResult }},
	tcInteractionStatus:    {kind: vString, ss: func(t *Trajectory) []string { return t.InteractionStatus }},
	tcInteractionLatencyMs: {kind: vFloat, f32s: func(t *Trajectory) []float32 { return t.InteractionLatencyMs }},
	tcInteractionSpanStart: {kind: vInt32, i32s: func(t *Trajectory) []int32 { return t.InteractionSpanStart }},
	tcInteractionSpanEnd:   {kind: vInt32, i32s: func(t *Trajectory) []int32 { return t.InteractionSpanEnd }},
	tcInteractionNoisy:     {kind: vBool, bs: func(t *Trajectory) []bool { return t.InteractionNoisy }},
	tcReward:               {kind: vFloat, f32: func(t *Trajectory) float32 { return t.Reward }},
	tcCorrect:              {kind: vBool, b: func(t *Trajectory) bool { return t.Correct }},
	tcAdvantage:            {kind: vFloat, f32: func(t *Trajectory) float32 { return t.Advantage }},
	tcFinishReason:         {kind: vDict, s: func(t *Trajectory) string { return t.FinishReason }},
}

// trajFileTemplate is the footer of an empty Trajectory file as parquet-go's
// generic writer writes it (schema, created-by, column orders), and the
// path of every leaf column, checked against the bulk writer's table.
type trajFileTemplate struct {
	meta  format.FileMetaData
	paths [tcCount][]string
	types [tcCount]format.Type
}

var trajTemplate = sync.OnceValues(func() (*trajFileTemplate, error) {
	var buf bytes.Buffer
	pw := parquet.NewGenericWriter[Trajectory](&buf, shardWriterOptions()...)
	if err := pw.Close(); err != nil {
		return nil, err
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		return nil, err
	}
	t := &trajFileTemplate{meta: *f.Metadata()}
	schema := parquet.SchemaOf(Trajectory{})
	cols := schema.Columns()
	if len(cols) != int(tcCount) {
		return nil, fmt.Errorf("trajectory schema has %d leaf columns, the bulk writer knows %d", len(cols), tcCount)
	}
	for i, path := range cols {
		leaf, _ := schema.Lookup(path...)
		lw := &trajLeafWriters[i]
		wantRep, wantDef := 0, 0
		if lw.list() {
			wantRep, wantDef = 1, 1
		}
		if path[0] != trajColumns[i].name || leaf.MaxRepetitionLevel != wantRep || leaf.MaxDefinitionLevel != wantDef {
			return nil, fmt.Errorf("trajectory column %d is %v (rep %d, def %d); the bulk writer expects %s (rep %d, def %d)",
				i, path, leaf.MaxRepetitionLevel, leaf.MaxDefinitionLevel, trajColumns[i].name, wantRep, wantDef)
		}
		t.paths[i] = path
		t.types[i] = *leaf.Node.Type().PhysicalType()
	}
	return t, nil
})

// levelRuns encodes a sequence of 1-bit levels as RLE runs of the Parquet
// RLE/bit-packed hybrid: a varint header (count << 1) and the value in one
// byte.
type levelRuns struct {
	buf []byte
	val byte
	n   int
}

func (r *levelRuns) add(v byte, count int) {
	if count == 0 {
		return
	}
	if r.n > 0 && v != r.val {
		r.flush()
	}
	r.val = v
	r.n += count
}

func (r *levelRuns) flush() {
	if r.n > 0 {
		r.buf = binary.AppendUvarint(r.buf, uint64(r.n)<<1)
		r.buf = append(r.buf, r.val)
		r.n = 0
	}
}

// trajColumnWriter is one column's state: the page being filled and the
// column chunk of the current row group.
type trajColumnWriter struct {
	leaf *trajLeafWriter
	list bool
	path []string
	typ  format.Type

	colBuffers

	// Page being filled (its buffers in colBuffers).
	nbits   int // vBool: values packed into vals
	rows    int
	entries int // level entries: values plus empty lists
	nulls   int // empty lists

	// Column chunk of the row group being written (pages in chunk).
	rawBytes   int64 // the chunk's size with uncompressed values
	dict       []string
	dictIndex  map[string]int32
	chEntries  int64
	chNulls    int64
	hasStats   bool
	minI, maxI int64
	minF, maxF float32
}

// colBuffers are one column's growing buffers, kept in trajBufferPool
// between writers: a shard writer would otherwise spend a third of its
// time growing them.
type colBuffers struct {
	vals     []byte
	offs     []uint32 // vString: value boundaries in vals, offs[0] == 0
	idx      []int32  // vDict: dictionary index per value
	rep, def levelRuns
	chunk    []byte // data pages with their headers
	scratch  []byte
	zbuf     []byte
}

var trajBufferPool sync.Pool // of *[tcCount]colBuffers

func (c *trajColumnWriter) addRow(t *Trajectory) {
	l := c.leaf
	if !c.list {
		c.entries++
		switch {
		case l.i32 != nil:
			v := l.i32(t)
			c.vals = binary.LittleEndian.AppendUint32(c.vals, uint32(v))
			c.statInt(int64(v))
		case l.i64 != nil:
			v := l.i64(t)
			c.vals = binary.LittleEndian.AppendUint64(c.vals, uint64(v))
			c.statInt(v)
		case l.f32 != nil:
			v := l.f32(t)
			c.vals = binary.LittleEndian.AppendUint32(c.vals, math.Float32bits(v))
			c.statFloat(v)
		case l.b != nil:
			c.appendBool(l.b(t))
		default:
			c.appendString(l.s(t))
		}
		c.rows++
		return
	}
	var n int
	switch {
	case l.i32s != nil:
		v := l.i32s(t)
		n = len(v)
		c.vals = appendLE32(c.vals, v)
	case l.i8s != nil:
		v := l.i8s(t)
		n = len(v)
		c.vals = slices.Grow(c.vals, 4*n)
		for _, x := range v {
			c.vals = binary.LittleEndian.AppendUint32(c.vals, uint32(int32(x)))
		}
	case l.i64s != nil:
		v := l.i64s(t)
		n = len(v)
		c.vals = appendLE64(c.vals, v)
	case l.f32s != nil:
		v := l.f32s(t)
		n = len(v)
		c.vals = appendLE32(c.vals, v)
	case l.bs != nil:
		v := l.bs(t)
		n = len(v)
		for _, x := range v {
			c.appendBool(x)
		}
	default:
		v := l.ss(t)
		n = len(v)
		for _, s := range v {
			c.appendString(s)
		}
	}
	// Levels of a required list of required elements: an empty list is one
	// entry (rep 0, def 0) without a value; a list of n is rep 0 then n-1
	// times 1, def 1 for each.
	if n == 0 {
		c.rep.add(0, 1)
		c.def.add(0, 1)
		c.entries++
		c.nulls++
	} else {
		c.rep.add(0, 1)
		c.rep.add(1, n-1)
		c.def.add(1, n)
		c.entries += n
	}
	c.rows++
}

func (c *trajColumnWriter) statInt(v int64) {
	if !c.hasStats {
		c.minI, c.maxI, c.hasStats = v, v, true
		return
	}
	c.minI, c.maxI = min(c.minI, v), max(c.maxI, v)
}

func (c *trajColumnWriter) statFloat(v float32) {
	if v != v { // NaN orders nowhere: left out of min/max
		return
	}
	if !c.hasStats {
		c.minF, c.maxF, c.hasStats = v, v, true
		return
	}
	c.minF, c.maxF = min(c.minF, v), max(c.maxF, v)
}

func (c *trajColumnWriter) appendBool(v bool) {
	if c.nbits%8 == 0 {
		c.vals = append(c.vals, 0)
	}
	if v {
		c.vals[len(c.vals)-1] |= 1 << (c.nbits % 8)
	}
	c.nbits++
}

func (c *trajColumnWriter) appendString(s string) {
	if c.leaf.kind == vDict {
		i, ok := c.dictIndex[s]
		if !ok {
			i = int32(len(c.dict))
			c.dict = append(c.dict, s)
			c.dictIndex[s] = i
		}
		c.idx = append(c.idx, i)
		return
	}
	c.vals = append(c.vals, s...)
	c.offs = append(c.offs, uint32(len(c.vals)))
}

// pageFull reports whether the page should be cut after the current row.
func (c *trajColumnWriter) pageFull() bool {
	return len(c.vals) >= trajPageBytes || len(c.idx)*4 >= trajPageBytes
}

// encoding is the data pages' value encoding.
func (c *trajColumnWriter) encoding() format.Encoding {
	switch c.leaf.kind {
	case vString:
		return format.DeltaLengthByteArray
	case vDict:
		return format.RLEDictionary
	}
	return format.Plain
}

// flushPage appends the page being filled to the chunk as a v2 data page:
// header, repetition levels, definition levels (both uncompressed), then the
// zstd-compressed values.
func (c *trajColumnWriter) flushPage() error {
	if c.rows == 0 {
		return nil
	}
	values := c.vals
	switch c.leaf.kind {
	case vString:
		var err error
		var enc delta.LengthByteArrayEncoding
		if c.scratch, err = enc.EncodeByteArray(c.scratch, c.vals, c.offs); err != nil {
			return fmt.Errorf("column %s: %w", c.path[0], err)
		}
		values = c.scratch
	case vDict:
		c.scratch = appendDictIndexes(c.scratch[:0], c.idx, len(c.dict))
		values = c.scratch
	}
	c.rep.flush()
	c.def.flush()
	rep, def := c.rep.buf, c.def.buf
	c.zbuf, _ = trajCodec.Encode(c.zbuf, values)
	levels := len(rep) + len(def)
	h := format.PageHeader{
		Type:                 format.DataPageV2,
		UncompressedPageSize: int32(levels + len(values)),
		CompressedPageSize:   int32(levels + len(c.zbuf)),
		DataPageHeaderV2: thrift.New(format.DataPageHeaderV2{
			NumValues:                  int32(c.entries),
			NumNulls:                   int32(c.nulls),
			NumRows:                    int32(c.rows),
			Encoding:                   c.encoding(),
			DefinitionLevelsByteLength: int32(len(def)),
			RepetitionLevelsByteLength: int32(len(rep)),
			IsCompressed:               thrift.New(true),
			Statistics:                 format.Statistics{NullCount: int64(c.nulls)},
		}),
	}
	hb, err := thrift.Marshal(new(thrift.CompactProtocol), &h)
	if err != nil {
		return fmt.Errorf("column %s: page header: %w", c.path[0], err)
	}
	c.chunk = append(c.chunk, hb...)
	c.chunk = append(c.chunk, rep...)
	c.chunk = append(c.chunk, def...)
	c.chunk = append(c.chunk, c.zbuf...)
	c.rawBytes += int64(len(hb) + levels + len(values))
	c.chEntries += int64(c.entries)
	c.chNulls += int64(c.nulls)

	c.vals, c.offs, c.idx = c.vals[:0], c.offs[:1], c.idx[:0]
	c.nbits, c.rows, c.entries, c.nulls = 0, 0, 0, 0
	c.rep.buf, c.def.buf = rep[:0], def[:0]
	return nil
}

// appendDictIndexes encodes dictionary indexes as an RLE_DICTIONARY page
// body: the bit width in one byte, then RLE runs of the hybrid encoding.
func appendDictIndexes(dst []byte, idx []int32, dictLen int) []byte {
	width := max(1, bits.Len32(uint32(dictLen-1)))
	dst = append(dst, byte(width))
	valueBytes := (width + 7) / 8
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && idx[j] == idx[i] {
			j++
		}
		dst = binary.AppendUvarint(dst, uint64(j-i)<<1)
		for b := range valueBytes {
			dst = append(dst, byte(uint32(idx[i])>>(8*b)))
		}
		i = j
	}
	return dst
}

// statistics is the column chunk's Statistics: null count, and min/max for
// scalar numeric columns.
func (c *trajColumnWriter) statistics() format.Statistics {
	st := format.Statistics{NullCount: c.chNulls}
	if !c.hasStats {
		return st
	}
	switch c.leaf.kind {
	case vInt32:
		st.MinValue = binary.LittleEndian.AppendUint32(nil, uint32(c.minI))
		st.MaxValue = binary.LittleEndian.AppendUint32(nil, uint32(c.maxI))
	case vInt64:
		st.MinValue = binary.LittleEndian.AppendUint64(nil, uint64(c.minI))
		st.MaxValue = binary.LittleEndian.AppendUint64(nil, uint64(c.maxI))
	case vFloat:
		st.MinValue = binary.LittleEndian.AppendUint32(nil, math.Float32bits(c.minF))
		st.MaxValue = binary.LittleEndian.AppendUint32(nil, math.Float32bits(c.maxF))
	}
	return st
}

func (c *trajColumnWriter) encodings() []format.Encoding {
	var e []format.Encoding
	switch c.leaf.kind {
	case vString:
		e = append(e, format.DeltaLengthByteArray)
	case vDict:
		e = append(e, format.Plain, format.RLEDictionary)
	default:
		e = append(e, format.Plain)
	}
	if c.list {
		e = append(e, format.RLE)
	}
	slices.Sort(e)
	return e
}

// trajectoryWriter writes Trajectory rows as a Parquet file, one row group
// per RowGroupRows rows.
type trajectoryWriter struct {
	out      io.Writer
	tmpl     *trajFileTemplate
	cols     [tcCount]trajColumnWriter
	pos      int64
	rows     int // rows in the open row group
	total    int64
	groups   []format.RowGroup
	started  bool
	closed   bool
	hdrProto thrift.CompactProtocol
}

func newTrajectoryWriter(out io.Writer) (*trajectoryWriter, error) {
	tmpl, err := trajTemplate()
	if err != nil {
		return nil, fmt.Errorf("trajectory writer: %w", err)
	}
	w := &trajectoryWriter{out: out, tmpl: tmpl}
	bufs, _ := trajBufferPool.Get().(*[tcCount]colBuffers)
	for i := range w.cols {
		c := &w.cols[i]
		if bufs != nil {
			c.colBuffers = bufs[i]
		}
		c.leaf = &trajLeafWriters[i]
		c.list = c.leaf.list()
		c.path = tmpl.paths[i]
		c.typ = tmpl.types[i]
		c.offs = append(c.offs[:0], 0)
		if c.leaf.kind == vDict {
			c.dictIndex = map[string]int32{}
		}
	}
	return w, nil
}

func (w *trajectoryWriter) write(p []byte) error {
	n, err := w.out.Write(p)
	w.pos += int64(n)
	return err
}

// Write appends rows; a row group is written out every RowGroupRows rows.
func (w *trajectoryWriter) Write(rows []Trajectory) (int, error) {
	if w.closed {
		return 0, io.ErrClosedPipe
	}
	if !w.started {
		if err := w.write([]byte("PAR1")); err != nil {
			return 0, err
		}
		w.started = true
	}
	for r := range rows {
		t := &rows[r]
		for i := range w.cols {
			c := &w.cols[i]
			c.addRow(t)
			if c.pageFull() {
				if err := c.flushPage(); err != nil {
					return r, err
				}
			}
		}
		w.rows++
		if w.rows == RowGroupRows {
			if err := w.flushRowGroup(); err != nil {
				return r + 1, err
			}
		}
	}
	return len(rows), nil
}

// flushRowGroup writes every column chunk of the open row group (dictionary
// page first where there is one) and records its metadata.
func (w *trajectoryWriter) flushRowGroup() error {
	if w.rows == 0 {
		return nil
	}
	rg := format.RowGroup{NumRows: int64(w.rows), FileOffset: w.pos, Ordinal: int16(len(w.groups))}
	start := w.pos
	for i := range w.cols {
		c := &w.cols[i]
		if err := c.flushPage(); err != nil {
			return err
		}
		chunkStart := w.pos
		md := format.ColumnMetaData{
			Type:         c.typ,
			Encoding:     c.encodings(),
			PathInSchema: c.path,
			Codec:        format.Zstd,
			NumValues:    c.chEntries,
			Statistics:   c.statistics(),
		}
		var raw int64
		if c.leaf.kind == vDict {
			n, err := w.writeDictPage(c)
			if err != nil {
				return err
			}
			md.DictionaryPageOffset = chunkStart
			raw += n
		}
		md.DataPageOffset = w.pos
		if err := w.write(c.chunk); err != nil {
			return err
		}
		raw += c.rawBytes
		md.TotalUncompressedSize = raw
		md.TotalCompressedSize = w.pos - chunkStart
		rg.Columns = append(rg.Columns, format.ColumnChunk{FileOffset: chunkStart, MetaData: md})
		rg.TotalByteSize += raw

		c.chunk, c.rawBytes, c.chEntries, c.chNulls, c.hasStats = c.chunk[:0], 0, 0, 0, false
		if c.dictIndex != nil {
			c.dict = c.dict[:0]
			clear(c.dictIndex)
		}
	}
	rg.TotalCompressedSize = w.pos - start
	w.groups = append(w.groups, rg)
	w.total += int64(w.rows)
	w.rows = 0
	return nil
}

// writeDictPage writes c's dictionary (PLAIN byte arrays, compressed) and
// returns its uncompressed size with the header.
func (w *trajectoryWriter) writeDictPage(c *trajColumnWriter) (int64, error) {
	plain := c.scratch[:0]
	for _, s := range c.dict {
		plain = binary.LittleEndian.AppendUint32(plain, uint32(len(s)))
		plain = append(plain, s...)
	}
	c.scratch = plain
	c.zbuf, _ = trajCodec.Encode(c.zbuf, plain)
	h := format.PageHeader{
		Type:                 format.DictionaryPage,
		UncompressedPageSize: int32(len(plain)),
		CompressedPageSize:   int32(len(c.zbuf)),
		DictionaryPageHeader: thrift.New(format.DictionaryPageHeader{NumValues: int32(len(c.dict)), Encoding: format.Plain}),
	}
	hb, err := thrift.Marshal(&w.hdrProto, &h)
	if err != nil {
		return 0, fmt.Errorf("column %s: dictionary page header: %w", c.path[0], err)
	}
	if err := w.write(hb); err != nil {
		return 0, err
	}
	if err := w.write(c.zbuf); err != nil {
		return 0, err
	}
	return int64(len(hb) + len(plain)), nil
}

// Close writes the last row group and the footer.
func (w *trajectoryWriter) Close() error {
	if w.closed {
		return nil
	}
	if !w.started {
		if err := w.write([]byte("PAR1")); err != nil {
			return err
		}
		w.started = true
	}
	if err := w.flushRowGroup(); err != nil {
		return err
	}
	w.closed = true
	md := w.tmpl.meta
	md.NumRows = w.total
	md.RowGroups = w.groups
	footer, err := thrift.Marshal(&w.hdrProto, &md)
	if err != nil {
		return fmt.Errorf("trajectory writer: footer: %w", err)
	}
	footer = binary.LittleEndian.AppendUint32(footer, uint32(len(footer)))
	footer = append(footer, "PAR1"...)
	err = w.write(footer)
	bufs := new([tcCount]colBuffers)
	for i := range w.cols {
		bufs[i] = w.cols[i].colBuffers
	}
	trajBufferPool.Put(bufs)
	return err
}

// littleEndian is true on the machines Go targets almost everywhere; the
// fast paths below copy memory as is only then.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// appendLE32 appends v as little-endian 4-byte values.
func appendLE32[T int32 | float32](dst []byte, v []T) []byte {
	if len(v) == 0 {
		return dst
	}
	if littleEndian {
		return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))...)
	}
	for i := range v {
		dst = binary.LittleEndian.AppendUint32(dst, *(*uint32)(unsafe.Pointer(&v[i])))
	}
	return dst
}

// appendLE64 appends v as little-endian 8-byte values.
func appendLE64(dst []byte, v []int64) []byte {
	if len(v) == 0 {
		return dst
	}
	if littleEndian {
		return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))...)
	}
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(x))
	}
	return dst
}
