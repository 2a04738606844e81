package promptfile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
)

// Reason codes of dead letters.
const (
	ReasonNotJSON        = "not_json"        // the record does not parse as JSON
	ReasonNotObject      = "not_object"      // the record is JSON but not an object
	ReasonInvalidUTF8    = "invalid_utf8"    // the record holds bytes that are not UTF-8
	ReasonMissingProblem = "missing_problem" // no mapped problem field, or it is empty
	ReasonMissingAnswer  = "missing_answer"  // no mapped answer field, or it is null or empty
	ReasonBadFieldType   = "bad_field_type"  // a mapped field is an object or array
	ReasonDuplicateID    = "duplicate_id"    // the id repeats an earlier row of the file
	ReasonBadRow         = "bad_row"         // a Parquet row that cannot be decoded
	// ReasonNotMessages: the problem field of a chat-message mapping
	// (FieldMap.Messages, veRL's prompt) is not a list of {role, content}
	// messages holding a user message.
	ReasonNotMessages = "not_messages"
	// ReasonUnknownDataSource: the row's data_source (FieldMap.DataSource)
	// is missing, or no verifier knows it.
	ReasonUnknownDataSource = "unknown_data_source"
)

// rawLimit bounds the excerpt of a bad record kept in a dead letter.
const rawLimit = 512

// DeadLetter is one record that could not become a Prompt.
type DeadLetter struct {
	File string `json:"file"`
	// Line is the 1-based line where the record starts in a text file; 0
	// for Parquet.
	Line int64 `json:"line,omitempty"`
	// Index is the 0-based position of the record in the file (blank lines
	// of JSONL are not records).
	Index  int64  `json:"index"`
	Reason string `json:"reason"` // one of the Reason* codes
	Detail string `json:"detail"` // what was wrong, in words
	// Raw is the start of the record (up to 512 bytes, invalid UTF-8
	// replaced by U+FFFD), empty for Parquet.
	Raw string `json:"raw,omitempty"`
}

func (d DeadLetter) String() string {
	where := fmt.Sprintf("record %d", d.Index)
	if d.Line > 0 {
		where = fmt.Sprintf("line %d", d.Line)
	}
	return fmt.Sprintf("%s %s: %s: %s", d.File, where, d.Reason, d.Detail)
}

// Stats counts what Read did with one file.
type Stats struct {
	File    string `json:"file"`
	Format  Format `json:"format"`
	Records int64  `json:"records"` // good + dead
	Good    int64  `json:"good"`
	Dead    int64  `json:"dead"`
	// Incomplete explains why the end of the file could not be read (a JSON
	// array whose structure breaks); empty when the whole file was read.
	Incomplete string `json:"incomplete,omitempty"`
}

// reader carries the state of reading one file.
type reader struct {
	src   Source
	m     *mapper
	emit  func(schemas.Prompt) error
	dead  func(DeadLetter) error
	stats Stats
}

func (r *reader) fail(line, index int64, e rowError, raw []byte) error {
	r.stats.Dead++
	r.stats.Records++
	d := DeadLetter{File: r.src.Path, Line: line, Index: index, Reason: e.reason, Detail: e.detail}
	if raw != nil {
		if len(raw) > rawLimit {
			raw = raw[:rawLimit]
		}
		d.Raw = strings.ToValidUTF8(string(raw), "\uFFFD")
	}
	if err := r.dead(d); err != nil {
		return fmt.Errorf("dead-letter %s: %w", d, err)
	}
	return nil
}

func (r *reader) object(obj map[string]any, line, index int64, raw []byte) error {
	p, rerr := r.m.row(obj, index)
	if rerr != nil {
		return r.fail(line, index, *rerr, raw)
	}
	r.stats.Good++
	r.stats.Records++
	if err := r.emit(p); err != nil {
		return fmt.Errorf("prompt %s from %s: %w", p.ID, r.src.Path, err)
	}
	return nil
}

// decodeRecord parses one JSON record and maps it.
func (r *reader) record(raw []byte, line, index int64) error {
	if !utf8.Valid(raw) {
		off := 0
		for off < len(raw) {
			c, size := utf8.DecodeRune(raw[off:])
			if c == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return r.fail(line, index, rowError{ReasonInvalidUTF8, fmt.Sprintf("byte %d of the record is not valid UTF-8", off)}, raw)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return r.fail(line, index, rowError{ReasonNotJSON, err.Error()}, raw)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return r.fail(line, index, rowError{ReasonNotJSON, "trailing data after the JSON value"}, raw)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return r.fail(line, index, rowError{ReasonNotObject, fmt.Sprintf("the record is a JSON %s, want an object", jsonKind(v))}, raw)
	}
	return r.object(obj, line, index, raw)
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return "object"
}

// Read reads every record of src, calling emit for each good row and dead
// for each bad one, in file order. An error from emit or dead stops the read
// and is returned; a file-level failure is returned naming the file.
func Read(ctx context.Context, src Source, emit func(schemas.Prompt) error, dead func(DeadLetter) error) (Stats, error) {
	src, err := src.Resolve()
	if err != nil {
		return Stats{}, err
	}
	r := &reader{src: src, m: newMapper(src), emit: emit, dead: dead, stats: Stats{File: src.Path}}
	if src.Format == FormatParquet {
		r.stats.Format = FormatParquet
		return r.stats, r.parquet(ctx)
	}
	rc, err := storage.OpenRead(ctx, src.Path)
	if err != nil {
		return r.stats, fmt.Errorf("open prompt file %s: %w", src.Path, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return r.stats, fmt.Errorf("prompt file %s: gzip header: %w", src.Path, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<16)
	} else if string(magic) == "PA" {
		if m, _ := br.Peek(4); string(m) == "PAR1" && src.Format == FormatAuto {
			rc.Close()
			r.stats.Format = FormatParquet
			return r.stats, r.parquet(ctx)
		}
	}
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
		br.Discard(3)
	}
	format := src.Format
	if format == FormatAuto {
		format = FormatJSONL
		for i := 1; ; i++ {
			b, err := br.Peek(i)
			if err != nil || len(b) < i {
				break
			}
			c := b[i-1]
			if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
				continue
			}
			if c == '[' {
				format = FormatJSON
			}
			break
		}
	}
	r.stats.Format = format
	if format == FormatJSON {
		err = r.jsonArray(br)
	} else {
		err = r.jsonl(br)
	}
	return r.stats, err
}

// jsonl reads one JSON object per line.
func (r *reader) jsonl(br *bufio.Reader) error {
	var line, index int64
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			line++
			rec := bytes.TrimRight(b, "\r\n")
			if len(bytes.TrimSpace(rec)) > 0 {
				if perr := r.record(rec, line, index); perr != nil {
					return perr
				}
				index++
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read prompt file %s after line %d: %w", r.src.Path, line, err)
		}
	}
}

// newlineCounter records the offsets of the newlines that pass through it,
// so that a decoder's byte offset can be turned into a line number.
type newlineCounter struct {
	r     io.Reader
	off   int64
	lines []int64
}

func (c *newlineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for i := 0; i < n; {
		j := bytes.IndexByte(p[i:n], '\n')
		if j < 0 {
			break
		}
		c.lines = append(c.lines, c.off+int64(i+j))
		i += j + 1
	}
	c.off += int64(n)
	return n, err
}

// lineAt is the 1-based line of byte offset off.
func (c *newlineCounter) lineAt(off int64) int64 {
	return int64(sort.Search(len(c.lines), func(i int) bool { return c.lines[i] >= off })) + 1
}

// jsonArray reads a JSON array of objects, element by element.
func (r *reader) jsonArray(br *bufio.Reader) error {
	nc := &newlineCounter{r: br}
	dec := json.NewDecoder(nc)
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("prompt file %s: not a JSON array: %w", r.src.Path, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("prompt file %s: want a JSON array, found %v (set format: jsonl for one object per line)", r.src.Path, tok)
	}
	var index int64
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			off := dec.InputOffset()
			var se *json.SyntaxError
			if errors.As(err, &se) {
				off = se.Offset
			}
			line := nc.lineAt(off)
			r.stats.Incomplete = fmt.Sprintf("the JSON array breaks at record %d (line %d): %v; later records cannot be read", index, line, err)
			return r.fail(line, index, rowError{ReasonNotJSON, r.stats.Incomplete}, nil)
		}
		start := dec.InputOffset() - int64(len(raw))
		if perr := r.record(raw, nc.lineAt(start), index); perr != nil {
			return perr
		}
		index++
	}
	if _, err := dec.Token(); err != nil {
		line := nc.lineAt(dec.InputOffset())
		r.stats.Incomplete = fmt.Sprintf("the JSON array is not closed after record %d (line %d): %v", index, line, err)
		return r.fail(line, index, rowError{ReasonNotJSON, r.stats.Incomplete}, nil)
	}
	return nil
}

// ReadAll reads a whole file into memory: the good rows and the dead
// letters, in file order.
func ReadAll(ctx context.Context, src Source) ([]schemas.Prompt, []DeadLetter, Stats, error) {
	var good []schemas.Prompt
	var dead []DeadLetter
	st, err := Read(ctx, src,
		func(p schemas.Prompt) error { good = append(good, p); return nil },
		func(d DeadLetter) error { dead = append(dead, d); return nil })
	return good, dead, st, err
}
