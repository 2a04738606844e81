package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"unicode/utf8"
)

// The safetensors layout: an 8-byte little-endian header length N, N bytes
// of JSON (an object mapping tensor names to {dtype, shape, data_offsets},
// plus an optional "__metadata__" object of strings, padded with spaces),
// then the data section. data_offsets are [begin, end) within the data
// section. This package accepts a file only when the tensors tile the data
// section exactly: sorted by offset, each starts where the previous ended,
// the first at 0 and the last ends at the end of the file.

// MaxHeaderBytes bounds the JSON header (the reference implementation uses
// the same limit); a larger length field means a corrupt or foreign file.
const MaxHeaderBytes = 100 << 20

// metadataKey is the reserved header entry for free-form string metadata.
const metadataKey = "__metadata__"

// FormatError reports a malformed safetensors file, naming the file and,
// where one is at fault, the tensor.
type FormatError struct {
	File   string
	Tensor string // empty when the fault is not one tensor's
	Reason string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("safetensors %s: tensor %q: %s", e.File, e.Tensor, e.Reason)
	}
	return fmt.Sprintf("safetensors %s: %s", e.File, e.Reason)
}

// TensorInfo is one header entry: where a tensor's bytes lie in the data
// section and how to read them.
type TensorInfo struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64 // offsets within the data section
}

// Header is a parsed, validated safetensors header. Tensors are in file
// (offset) order.
type Header struct {
	Tensors   []TensorInfo
	Metadata  map[string]string
	DataStart int64 // file offset of the data section: 8 + header length
}

type rawInfo struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// ReadHeaderFile reads and validates the header of the local safetensors
// file at path.
func ReadHeaderFile(path string) (Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Header{}, err
	}
	return ParseHeader(path, f, st.Size())
}

// ParseHeader reads and validates the header of a safetensors file of the
// given size. file names the file in errors. The data section is not read.
func ParseHeader(file string, r io.ReaderAt, size int64) (Header, error) {
	fail := func(tensor, format string, args ...any) (Header, error) {
		return Header{}, &FormatError{File: file, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
	}
	if size < 8 {
		return fail("", "file is %d bytes, shorter than the 8-byte header length (not a safetensors file, or truncated)", size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return Header{}, fmt.Errorf("safetensors %s: read header length: %w", file, err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > MaxHeaderBytes {
		return fail("", "header length %d exceeds the %d-byte limit (not a safetensors file, or corrupt)", n, MaxHeaderBytes)
	}
	if int64(n) > size-8 {
		return fail("", "header length %d runs past the end of the %d-byte file (truncated?)", n, size)
	}
	hb := make([]byte, n)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return Header{}, fmt.Errorf("safetensors %s: read header: %w", file, err)
	}
	dataLen := size - 8 - int64(n)
	h, err := parseHeaderJSON(file, hb, dataLen)
	if err != nil {
		return Header{}, err
	}
	h.DataStart = 8 + int64(n)
	return h, nil
}

// parseHeaderJSON decodes the JSON header and checks every entry against a
// data section of dataLen bytes.
func parseHeaderJSON(file string, hb []byte, dataLen int64) (Header, error) {
	fail := func(tensor, format string, args ...any) (Header, error) {
		return Header{}, &FormatError{File: file, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
	}
	if !utf8.Valid(hb) {
		return fail("", "header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(hb))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return fail("", "header is not a JSON object")
	}
	var h Header
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail("", "header JSON: %v", err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return fail(name, "listed twice in the header")
		}
		seen[name] = true
		if name == metadataKey {
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				return fail("", "__metadata__ must map strings to strings: %v", err)
			}
			h.Metadata = md
			continue
		}
		if name == "" {
			return fail("", "a tensor has an empty name")
		}
		var ri rawInfo
		sub := json.RawMessage{}
		if err := dec.Decode(&sub); err != nil {
			return fail(name, "header JSON: %v", err)
		}
		sd := json.NewDecoder(bytes.NewReader(sub))
		sd.DisallowUnknownFields()
		if err := sd.Decode(&ri); err != nil {
			return fail(name, "entry must be {dtype, shape, data_offsets}: %v", err)
		}
		ti, err := checkInfo(file, name, ri)
		if err != nil {
			return Header{}, err
		}
		h.Tensors = append(h.Tensors, ti)
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return fail("", "header JSON: %v", err)
	}
	rest := hb[dec.InputOffset():]
	if len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return fail("", "%d bytes of non-space data after the header's JSON object", len(bytes.TrimLeft(rest, " \t\r\n")))
	}
	if err := checkTiling(file, h.Tensors, dataLen); err != nil {
		return Header{}, err
	}
	return h, nil
}

// checkInfo validates one entry on its own: dtype, shape, offsets matching
// the element count.
func checkInfo(file, name string, ri rawInfo) (TensorInfo, error) {
	fail := func(format string, args ...any) (TensorInfo, error) {
		return TensorInfo{}, &FormatError{File: file, Tensor: name, Reason: fmt.Sprintf(format, args...)}
	}
	es, ok := knownDTypes[ri.DType]
	if !ok {
		return fail("unknown dtype %q", ri.DType)
	}
	if ri.Shape == nil {
		return fail("missing shape")
	}
	numel := int64(1)
	shape := make([]int, len(ri.Shape))
	for i, d := range ri.Shape {
		if d < 0 {
			return fail("negative dimension in shape %v", ri.Shape)
		}
		if d > 0 && numel > (1<<50)/d {
			return fail("shape %v is too large", ri.Shape)
		}
		numel *= d
		shape[i] = int(d)
	}
	if len(ri.DataOffsets) != 2 {
		return fail("data_offsets must be [begin, end], got %v", ri.DataOffsets)
	}
	b, e := ri.DataOffsets[0], ri.DataOffsets[1]
	if b < 0 || e < b {
		return fail("data_offsets %v are not 0 <= begin <= end", ri.DataOffsets)
	}
	if want := numel * int64(es); e-b != want {
		return fail("data_offsets %v span %d bytes but shape %v of %s needs %d", ri.DataOffsets, e-b, ri.Shape, ri.DType, want)
	}
	return TensorInfo{Name: name, DType: DType(ri.DType), Shape: shape, Begin: b, End: e}, nil
}

// checkTiling sorts infos by offset and requires them to cover [0, dataLen)
// exactly: no overlap, no gap, nothing after the last tensor.
func checkTiling(file string, infos []TensorInfo, dataLen int64) error {
	sort.SliceStable(infos, func(i, j int) bool {
		if infos[i].Begin != infos[j].Begin {
			return infos[i].Begin < infos[j].Begin
		}
		return infos[i].End < infos[j].End
	})
	var pos int64
	prev := ""
	for _, t := range infos {
		switch {
		case t.Begin < pos:
			return &FormatError{File: file, Tensor: t.Name, Reason: fmt.Sprintf("data [%d, %d) overlaps tensor %q, which ends at %d", t.Begin, t.End, prev, pos)}
		case t.Begin > pos:
			return &FormatError{File: file, Tensor: t.Name, Reason: fmt.Sprintf("data starts at %d, leaving a gap of %d unused bytes after %s", t.Begin, t.Begin-pos, describePrev(prev, pos))}
		}
		if t.End > dataLen {
			return &FormatError{File: file, Tensor: t.Name, Reason: fmt.Sprintf("data [%d, %d) runs past the end of the %d-byte data section (truncated file?)", t.Begin, t.End, dataLen)}
		}
		pos = t.End
		if t.End > t.Begin {
			prev = t.Name
		}
	}
	if pos != dataLen {
		return &FormatError{File: file, Reason: fmt.Sprintf("%d bytes of trailing data after the last tensor (data section is %d bytes, tensors end at %d)", dataLen-pos, dataLen, pos)}
	}
	return nil
}

func describePrev(prev string, pos int64) string {
	if prev == "" {
		return "the start of the data section"
	}
	return fmt.Sprintf("tensor %q (ends at %d)", prev, pos)
}

// ReadTensors reads every tensor of a parsed header from r and converts it to
// float32. A dtype other than F32, BF16 or F16 is an error naming the tensor.
func ReadTensors(file string, r io.ReaderAt, h Header) ([]Tensor, error) {
	return readTensorsInto(file, r, h, nil)
}

// TensorDest says where a loader decodes each tensor: the float32 slice
// for the tensor name of shape (exactly as many elements), nil to skip
// the tensor, or an error that stops the load.
type TensorDest func(name string, shape []int) ([]float32, error)

// readTensorsInto is ReadTensors decoding into dest's slices (fresh ones
// when dest is nil); the returned tensors alias them, and those dest
// skipped have no Data.
func readTensorsInto(file string, r io.ReaderAt, h Header, dest TensorDest) ([]Tensor, error) {
	out := make([]Tensor, 0, len(h.Tensors))
	var scratch []byte
	for _, ti := range h.Tensors {
		es := ti.DType.Size()
		if es == 0 {
			return nil, &FormatError{File: file, Tensor: ti.Name, Reason: fmt.Sprintf("dtype %s is not supported (this package reads F32, BF16 and F16; convert the file)", ti.DType)}
		}
		n := int((ti.End - ti.Begin) / int64(es))
		var data []float32
		if dest == nil {
			data = make([]float32, n)
		} else {
			d, err := dest(ti.Name, ti.Shape)
			if err != nil {
				return nil, err
			}
			if d == nil {
				out = append(out, Tensor{Name: ti.Name, Shape: append([]int{}, ti.Shape...)})
				continue
			}
			if len(d) != n {
				return nil, fmt.Errorf("safetensors %s: tensor %q has %d elements, its destination %d", file, ti.Name, n, len(d))
			}
			data = d
		}
		if err := readTensor(r, h.DataStart, ti, data, &scratch); err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: %w", file, ti.Name, err)
		}
		out = append(out, Tensor{Name: ti.Name, Shape: append([]int{}, ti.Shape...), Data: data})
	}
	return out, nil
}

// decodeChunk is the elements readTensor converts at a time (4 MiB of
// float32): a large tensor in another dtype needs no copy of its bytes.
const decodeChunk = 1 << 20

// readTensor decodes tensor ti into data (its element count).
func readTensor(r io.ReaderAt, dataStart int64, ti TensorInfo, data []float32, scratch *[]byte) error {
	off := dataStart + ti.Begin
	if ti.DType == F32 && nativeLittle {
		return readFull(r, f32Bytes(data), off)
	}
	es := ti.DType.Size()
	for lo := 0; lo < len(data); lo += decodeChunk {
		part := data[lo:min(lo+decodeChunk, len(data))]
		need := len(part) * es
		if cap(*scratch) < need {
			*scratch = make([]byte, need)
		}
		raw := (*scratch)[:need]
		if err := readFull(r, raw, off+int64(lo*es)); err != nil {
			return err
		}
		decodeInto(part, raw, ti.DType)
	}
	return nil
}

func readFull(r io.ReaderAt, b []byte, off int64) error {
	if len(b) == 0 {
		return nil
	}
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %d bytes at offset %d: %w", len(b), off, err)
}

// EncodeHeader builds the header block (length prefix included, JSON padded
// with spaces to a multiple of 8 bytes so that the data section is aligned)
// for tensors stored contiguously, in the given order, as dt.
func EncodeHeader(tensors []Tensor, dt DType, metadata map[string]string) ([]byte, error) {
	if dt.Size() == 0 {
		return nil, fmt.Errorf("safetensors: cannot save as dtype %q (use F32, BF16 or F16)", dt)
	}
	var js bytes.Buffer
	js.WriteByte('{')
	if len(metadata) > 0 {
		mb, err := json.Marshal(metadata)
		if err != nil {
			return nil, err
		}
		js.WriteString(`"` + metadataKey + `":`)
		js.Write(mb)
	}
	var off int64
	for i, t := range tensors {
		if t.Name == metadataKey {
			return nil, fmt.Errorf("safetensors: tensor name %q is reserved", t.Name)
		}
		if i > 0 || len(metadata) > 0 {
			js.WriteByte(',')
		}
		nb, err := json.Marshal(t.Name)
		if err != nil {
			return nil, err
		}
		js.Write(nb)
		js.WriteString(`:{"dtype":"` + string(dt) + `","shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				js.WriteByte(',')
			}
			js.WriteString(strconv.Itoa(d))
		}
		end := off + int64(len(t.Data)*dt.Size())
		fmt.Fprintf(&js, `],"data_offsets":[%d,%d]}`, off, end)
		off = end
	}
	js.WriteByte('}')
	for js.Len()%8 != 0 {
		js.WriteByte(' ')
	}
	out := make([]byte, 8, 8+js.Len())
	binary.LittleEndian.PutUint64(out, uint64(js.Len()))
	return append(out, js.Bytes()...), nil
}

// WriteSafetensors writes tensors to w as one safetensors file with elements
// of type dt, in the given order, and returns the bytes written.
func WriteSafetensors(w io.Writer, tensors []Tensor, dt DType, metadata map[string]string) (int64, error) {
	if err := validateSet(tensors); err != nil {
		return 0, fmt.Errorf("safetensors: %w", err)
	}
	hdr, err := EncodeHeader(tensors, dt, metadata)
	if err != nil {
		return 0, err
	}
	total, err := w.Write(hdr)
	written := int64(total)
	if err != nil {
		return written, err
	}
	const chunk = 1 << 16 // elements per conversion buffer
	buf := make([]byte, chunk*dt.Size())
	for _, t := range tensors {
		if dt == F32 && nativeLittle {
			n, err := w.Write(f32Bytes(t.Data))
			written += int64(n)
			if err != nil {
				return written, err
			}
			continue
		}
		for s := 0; s < len(t.Data); s += chunk {
			e := min(s+chunk, len(t.Data))
			raw := buf[:(e-s)*dt.Size()]
			encodeInto(raw, t.Data[s:e], dt)
			n, err := w.Write(raw)
			written += int64(n)
			if err != nil {
				return written, err
			}
		}
	}
	return written, nil
}
