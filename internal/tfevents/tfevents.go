// Package tfevents writes and reads TensorBoard event files: TFRecord
// framing around serialized tensorflow.Event messages, as TensorBoard,
// W&B's TensorBoard sync and TensorFlow's summary readers expect them.
//
// A record is
//
//	uint64 length (little endian)
//	uint32 masked CRC32-C of the 8 length bytes
//	length bytes of data
//	uint32 masked CRC32-C of the data
//
// and an event file starts with an Event whose file_version is
// "brain.Event:2", followed by Events with a summary of scalar values
// (Summary.Value's tag and simple_value). Only the fields written here are
// encoded; the messages are built field by field with protowire, so the
// package needs no generated code.
//
// Field numbers (tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto):
//
//	Event:         wall_time 1 (double), step 2 (int64), file_version 3 (string), summary 5 (Summary)
//	Summary:       value 1 (repeated Value)
//	Summary.Value: tag 1 (string), simple_value 2 (float)
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// FileVersion is the file_version of the first event of a file. Version 2
// tells TensorBoard that steps need not increase (no purge of "orphaned"
// data when a step goes back).
const FileVersion = "brain.Event:2"

// Marker is the part of a file name that makes TensorBoard read the file
// as an event file.
const Marker = "tfevents"

// FileName is an event file's name as TensorBoard's writers make it,
// events.out.tfevents.<unix seconds>.<host>, with the process id and a
// number that tell apart files one host starts in the same second. Names
// sort by time, the order in which TensorBoard reads a directory's files.
func FileName(t time.Time, host string, pid, n int) string {
	host = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ' ' {
			return '_'
		}
		return r
	}, host)
	return fmt.Sprintf("events.out.%s.%d.%s.%d.%d", Marker, t.Unix(), host, pid, n)
}

// IsEventFile reports whether a file name is one TensorBoard reads as an
// event file (it holds "tfevents") and no temporary of a writer.
func IsEventFile(name string) bool {
	return strings.Contains(name, "."+Marker+".") && !strings.HasPrefix(name, ".")
}

// Hostname is this host's name for file names ("localhost" when unknown).
func Hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// Scalar is one value of one tag at one step.
type Scalar struct {
	Tag   string
	Value float32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC32-C.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// AppendRecord appends data framed as one TFRecord.
func AppendRecord(dst, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	dst = append(dst, n[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, maskedCRC(n[:]))
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, maskedCRC(data))
}

// wallTime is t as Event.wall_time: seconds since the Unix epoch.
func wallTime(t time.Time) float64 { return float64(t.Unix()) + float64(t.Nanosecond())/1e9 }

// AppendFileVersion appends the record of the event that opens a file.
func AppendFileVersion(dst []byte, t time.Time) []byte {
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.Fixed64Type)
	e = protowire.AppendFixed64(e, math.Float64bits(wallTime(t)))
	e = protowire.AppendTag(e, 3, protowire.BytesType)
	e = protowire.AppendString(e, FileVersion)
	return AppendRecord(dst, e)
}

// AppendScalars appends the record of one event at step holding the
// scalars as its summary's values.
func AppendScalars(dst []byte, t time.Time, step int64, values []Scalar) []byte {
	var sum []byte
	for _, v := range values {
		var val []byte
		val = protowire.AppendTag(val, 1, protowire.BytesType)
		val = protowire.AppendString(val, v.Tag)
		val = protowire.AppendTag(val, 2, protowire.Fixed32Type)
		val = protowire.AppendFixed32(val, math.Float32bits(v.Value))
		sum = protowire.AppendTag(sum, 1, protowire.BytesType)
		sum = protowire.AppendBytes(sum, val)
	}
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.Fixed64Type)
	e = protowire.AppendFixed64(e, math.Float64bits(wallTime(t)))
	e = protowire.AppendTag(e, 2, protowire.VarintType)
	e = protowire.AppendVarint(e, uint64(step))
	e = protowire.AppendTag(e, 5, protowire.BytesType)
	e = protowire.AppendBytes(e, sum)
	return AppendRecord(dst, e)
}

// Event is what Read takes from one event: its step, its file_version
// (the first event's) and its summary's simple values.
type Event struct {
	WallTime    float64
	Step        int64
	FileVersion string
	Scalars     []Scalar
}

// ErrTruncated is Read's error when the data end inside a record: what a
// writer stopped part way through a record leaves (a killed process, or
// one still writing).
var ErrTruncated = errors.New("tfevents: the last record is incomplete")

// Read decodes the events of an event file. It returns the events of the
// whole records before the first one it cannot take: an incomplete record
// at the end (ErrTruncated), a checksum that does not match, or an event
// it cannot parse (other errors). Summary values other than simple_value
// (images, histograms, tensors) are skipped.
func Read(b []byte) ([]Event, error) {
	var out []Event
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			return out, ErrTruncated
		}
		head := b[off : off+8]
		if got, want := binary.LittleEndian.Uint32(b[off+8:]), maskedCRC(head); got != want {
			return out, fmt.Errorf("tfevents: record at byte %d: length checksum %08x, want %08x", off, got, want)
		}
		n := binary.LittleEndian.Uint64(head)
		if n > uint64(len(b)-off-12) || uint64(len(b)-off-12)-n < 4 {
			return out, ErrTruncated
		}
		data := b[off+12 : off+12+int(n)]
		if got, want := binary.LittleEndian.Uint32(b[off+12+int(n):]), maskedCRC(data); got != want {
			return out, fmt.Errorf("tfevents: record at byte %d: data checksum %08x, want %08x", off, got, want)
		}
		e, err := parseEvent(data)
		if err != nil {
			return out, fmt.Errorf("tfevents: record at byte %d: %w", off, err)
		}
		out = append(out, e)
		off += 12 + int(n) + 4
	}
	return out, nil
}

// parseEvent decodes the fields of an Event that Read returns.
func parseEvent(b []byte) (Event, error) {
	var e Event
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			e.WallTime = math.Float64frombits(x)
		case num == 2 && typ == protowire.VarintType:
			e.Step = int64(x)
		case num == 3 && typ == protowire.BytesType:
			e.FileVersion = string(v)
		case num == 5 && typ == protowire.BytesType:
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				var s Scalar
				simple := false
				err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
					switch {
					case num == 1 && typ == protowire.BytesType:
						s.Tag = string(v)
					case num == 2 && typ == protowire.Fixed32Type:
						s.Value, simple = math.Float32frombits(uint32(x)), true
					}
					return nil
				})
				if err == nil && simple {
					e.Scalars = append(e.Scalars, s)
				}
				return err
			})
		}
		return nil
	})
	return e, err
}

// fields calls fn for each field of a message: v holds a length-delimited
// field's bytes, x a varint's or fixed field's value.
func fields(b []byte, fn func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
