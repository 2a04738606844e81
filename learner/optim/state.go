package optim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
)

// The state format, all integers little-endian:
//
//	magic   [8]byte "AIPOADAM"
//	version uint32  (1)
//	hlen    uint32  length of the header
//	header  [hlen]byte JSON stateHeader
//	for each tensor of the header, in order: m then v, numel float32 each
//	crc     uint32  CRC-32 (IEEE) of every byte before it
const (
	stateMagic   = "AIPOADAM"
	stateVersion = 1
	// maxHeader bounds the JSON header a reader accepts.
	maxHeader = 64 << 20
)

type stateHeader struct {
	Steps   int64         `json:"steps"`
	Config  Config        `json:"config"` // informational: the run configuration governs
	Part    *Part         `json:"part,omitempty"`
	Tensors []TensorState `json:"tensors"`
}

// ErrState is wrapped by every error about malformed optimiser state.
var ErrState = errors.New("optim: malformed optimiser state")

// MarshalState returns the optimiser state (step count, and the first and
// second moments of every tensor) in the binary format described above.
func (o *AdamW) MarshalState() ([]byte, error) {
	var buf bytes.Buffer
	if _, err := o.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// UnmarshalState replaces the optimiser's state with the one in b. The
// configuration is not taken from b; the caller's Config governs.
func (o *AdamW) UnmarshalState(b []byte) error {
	tmp := &AdamW{cfg: o.cfg}
	n, err := tmp.ReadFrom(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if n != int64(len(b)) {
		return fmt.Errorf("%w: %d bytes after the end of the state", ErrState, int64(len(b))-n)
	}
	o.steps, o.state, o.order = tmp.steps, tmp.state, tmp.order
	return nil
}

// TensorState names one tensor's moments in a state: Numel floats of m,
// then as many of v.
type TensorState struct {
	Name  string `json:"name"`
	Numel int    `json:"numel"`
	// Offset is, in one part of a sharded state, the first element of
	// the tensor that the slice holds (0 for a whole tensor).
	Offset int `json:"offset,omitempty"`
}

// stateChunk is the floats one call of WriteState's fill or ReadState's
// put moves (1 MiB): large enough that a device copy per chunk costs
// little, small enough that the buffers stay small beside the state.
const stateChunk = 1 << 18

// WriteState streams a state in the format above to w: the header (steps,
// cfg, tensors in order), then each tensor's m and v, asking fill for
// them one chunk at a time (moment 0 is m, 1 is v; off is the chunk's
// first element within the tensor; fill writes len(vals) values). No
// whole copy of the state is made: the moments may live anywhere (host
// memory, a device).
func WriteState(w io.Writer, steps int64, cfg Config, tensors []TensorState, fill func(tensor, moment, off int, vals []float32) error) (int64, error) {
	return writeState(w, stateHeader{Steps: steps, Config: cfg, Tensors: tensors}, fill)
}

// writeState is WriteState with the header h (a part's, or a whole
// state's).
func writeState(w io.Writer, h stateHeader, fill func(tensor, moment, off int, vals []float32) error) (int64, error) {
	tensors := h.Tensors
	js, err := json.Marshal(h)
	if err != nil {
		return 0, fmt.Errorf("optim: encoding state header: %w", err)
	}
	cw := &countWriter{w: bufio.NewWriterSize(w, 1<<16), crc: crc32.NewIEEE()}
	var fixed [16]byte
	copy(fixed[:8], stateMagic)
	binary.LittleEndian.PutUint32(fixed[8:], stateVersion)
	binary.LittleEndian.PutUint32(fixed[12:], uint32(len(js)))
	cw.Write(fixed[:])
	cw.Write(js)
	vals := make([]float32, min(stateChunk, maxNumel(tensors)))
	buf := make([]byte, 4*len(vals))
	for ti, t := range tensors {
		for moment := 0; moment < 2; moment++ {
			for lo := 0; lo < t.Numel && cw.err == nil; lo += stateChunk {
				part := vals[:min(stateChunk, t.Numel-lo)]
				if err := fill(ti, moment, lo, part); err != nil {
					return cw.n, fmt.Errorf("optim: writing optimiser state: tensor %q: %w", t.Name, err)
				}
				for i, f := range part {
					binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
				}
				cw.Write(buf[:4*len(part)])
			}
		}
	}
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], cw.crc.Sum32())
	cw.Write(sum[:])
	if cw.err == nil {
		cw.err = cw.w.Flush()
	}
	if cw.err != nil {
		return cw.n, fmt.Errorf("optim: writing optimiser state: %w", cw.err)
	}
	return cw.n, nil
}

func maxNumel(ts []TensorState) int {
	n := 0
	for _, t := range ts {
		n = max(n, t.Numel)
	}
	return n
}

// ReadState streams a state in the format above from r: begin gets the
// step count and the tensors once the header is read and validated (an
// error from it stops the read), then put gets each tensor's m and v one
// chunk at a time, in file order (moment 0 is m, 1 is v; off as for
// WriteState; vals is valid during the call only). The checksum covers
// everything and is checked last: when ReadState fails, whatever put
// received must be discarded. It returns the bytes read. One part of a
// sharded state (see Part) is refused: its tensors are slices, which only
// ReadPart gives with their offsets.
func ReadState(r io.Reader, begin func(steps int64, tensors []TensorState) error, put func(tensor, moment, off int, vals []float32) error) (int64, error) {
	d, err := newDecoder(r)
	if err != nil {
		return d.n(), err
	}
	if d.h.Part != nil {
		return d.n(), fmt.Errorf("%w: this is part %d of %d of a sharded optimiser state (one rank's share): read the parts together through their index (%s)", ErrState, d.h.Part.Index, d.h.Part.Of, PartIndexFormat)
	}
	err = d.stream(func() error { return begin(d.h.Steps, d.tensors) }, put)
	if err == nil {
		err = d.finish()
	}
	return d.n(), err
}

// decoder reads a state in the format above in file order: the preamble
// and header when it is made, then the values, then the checksum.
type decoder struct {
	cr      *crcReader
	h       stateHeader
	tensors []TensorState
	buf     []byte
}

// newDecoder reads and validates the preamble and the header from r.
func newDecoder(r io.Reader) (*decoder, error) {
	d := &decoder{cr: &crcReader{r: r, crc: crc32.NewIEEE()}}
	var fixed [16]byte
	if _, err := io.ReadFull(d.cr, fixed[:]); err != nil {
		return d, fmt.Errorf("%w: reading the preamble: %v", ErrState, err)
	}
	if string(fixed[:8]) != stateMagic {
		return d, fmt.Errorf("%w: magic %q, want %q (not an optimiser state file)", ErrState, fixed[:8], stateMagic)
	}
	if v := binary.LittleEndian.Uint32(fixed[8:]); v != stateVersion {
		return d, fmt.Errorf("%w: version %d, this build reads version %d", ErrState, v, stateVersion)
	}
	hlen := binary.LittleEndian.Uint32(fixed[12:])
	if hlen > maxHeader {
		return d, fmt.Errorf("%w: header of %d bytes exceeds the %d-byte limit", ErrState, hlen, maxHeader)
	}
	js := make([]byte, hlen)
	if _, err := io.ReadFull(d.cr, js); err != nil {
		return d, fmt.Errorf("%w: reading the header: %v", ErrState, err)
	}
	if err := json.Unmarshal(js, &d.h); err != nil {
		return d, fmt.Errorf("%w: header: %v", ErrState, err)
	}
	if d.h.Steps < 0 {
		return d, fmt.Errorf("%w: negative step count %d", ErrState, d.h.Steps)
	}
	if p := d.h.Part; p != nil && (p.Of < 1 || p.Index < 1 || p.Index > p.Of || p.Start < 0 || p.End < p.Start) {
		return d, fmt.Errorf("%w: part %d of %d holding elements [%d, %d) makes no sense", ErrState, p.Index, p.Of, p.Start, p.End)
	}
	seen := make(map[string]bool, len(d.h.Tensors))
	for _, t := range d.h.Tensors {
		if t.Numel < 0 || t.Numel > math.MaxInt32 || t.Offset < 0 || t.Offset > math.MaxInt32-t.Numel {
			return d, fmt.Errorf("%w: tensor %q has %d elements from element %d", ErrState, t.Name, t.Numel, t.Offset)
		}
		if seen[t.Name] {
			return d, fmt.Errorf("%w: tensor %q appears twice", ErrState, t.Name)
		}
		seen[t.Name] = true
	}
	d.tensors = d.h.Tensors
	return d, nil
}

// n is the bytes read so far.
func (d *decoder) n() int64 { return d.cr.n }

// read fills vals with the next values of the stream; name is the tensor
// they belong to, for the error.
func (d *decoder) read(vals []float32, name string) error {
	if cap(d.buf) < 4*len(vals) {
		d.buf = make([]byte, 4*min(stateChunk, max(len(vals), maxNumel(d.tensors))))
	}
	for len(vals) > 0 {
		part := vals[:min(len(vals), len(d.buf)/4)]
		b := d.buf[:4*len(part)]
		if _, err := io.ReadFull(d.cr, b); err != nil {
			return fmt.Errorf("%w: tensor %q truncated: %v", ErrState, name, err)
		}
		for i := range part {
			part[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		vals = vals[len(part):]
	}
	return nil
}

// finish reads the checksum and compares it with the one of everything
// read before it.
func (d *decoder) finish() error {
	want := d.cr.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(d.cr, sum[:]); err != nil {
		return fmt.Errorf("%w: missing checksum: %v", ErrState, err)
	}
	if got := binary.LittleEndian.Uint32(sum[:]); got != want {
		return fmt.Errorf("%w: checksum %08x, computed %08x (the file is corrupt)", ErrState, got, want)
	}
	return nil
}

// streamFile is stream of a file of its own (see finishFile), without a
// begin.
func (d *decoder) streamFile(put func(tensor, moment, off int, vals []float32) error) error {
	if err := d.stream(func() error { return nil }, put); err != nil {
		return err
	}
	return d.finishFile()
}

// stream calls begin, then put with every tensor's m and v one chunk at a
// time, in file order, up to the checksum (finish reads it).
func (d *decoder) stream(begin func() error, put func(tensor, moment, off int, vals []float32) error) error {
	if err := begin(); err != nil {
		return err
	}
	vals := make([]float32, min(stateChunk, maxNumel(d.tensors)))
	for ti, t := range d.tensors {
		for moment := 0; moment < 2; moment++ {
			for lo := 0; lo < t.Numel; lo += stateChunk {
				part := vals[:min(stateChunk, t.Numel-lo)]
				if err := d.read(part, t.Name); err != nil {
					return err
				}
				if err := put(ti, moment, lo, part); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// WriteTo writes the state to w (io.WriterTo), streaming: no copy of the
// state is built.
func (o *AdamW) WriteTo(w io.Writer) (int64, error) {
	tensors := make([]TensorState, len(o.order))
	for i, name := range o.order {
		tensors[i] = TensorState{Name: name, Numel: len(o.state[name].m)}
	}
	return WriteState(w, o.steps, o.cfg, tensors, func(t, moment, off int, vals []float32) error {
		s := o.state[o.order[t]]
		src := s.m
		if moment == 1 {
			src = s.v
		}
		copy(vals, src[off:])
		return nil
	})
}

// ReadFrom replaces the state with one read from r (io.ReaderFrom),
// decoding into the new moments as it reads. The moments it replaces are
// dropped before the new ones are allocated, so that two whole copies
// never coexist: on an error past the header the optimiser keeps its step
// count but no moments (before it, nothing changes).
func (o *AdamW) ReadFrom(r io.Reader) (int64, error) {
	var steps int64
	var state map[string]*moments
	var order []string
	n, err := ReadState(r, func(st int64, ts []TensorState) error {
		o.state, o.order = map[string]*moments{}, nil
		steps, state, order = st, make(map[string]*moments, len(ts)), make([]string, len(ts))
		for i, t := range ts {
			state[t.Name] = &moments{m: make([]float32, t.Numel), v: make([]float32, t.Numel)}
			order[i] = t.Name
		}
		return nil
	}, func(t, moment, off int, vals []float32) error {
		s := state[order[t]]
		dst := s.m
		if moment == 1 {
			dst = s.v
		}
		copy(dst[off:], vals)
		return nil
	})
	if err != nil {
		return n, err
	}
	o.steps, o.state, o.order = steps, state, order
	return n, nil
}

// Advance counts one update applied where the moments are kept elsewhere
// (a device's AdamW, with the constants of Constants): the step count
// that the learning-rate schedule and the bias corrections read moves on.
func (o *AdamW) Advance() { o.steps++ }

// SetSteps sets the step count (restoring a state whose moments were read
// elsewhere, see ReadState).
func (o *AdamW) SetSteps(n int64) { o.steps = n }

type countWriter struct {
	w   *bufio.Writer
	crc hash.Hash32
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.crc.Write(p)
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

type crcReader struct {
	r   io.Reader
	crc hash.Hash32
	n   int64
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc.Write(p[:n])
	c.n += int64(n)
	return n, err
}
