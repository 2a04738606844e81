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
	Tensors []stateTensor `json:"tensors"`
}

type stateTensor struct {
	Name  string `json:"name"`
	Numel int    `json:"numel"`
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

// WriteTo writes the state to w (io.WriterTo).
func (o *AdamW) WriteTo(w io.Writer) (int64, error) {
	h := stateHeader{Steps: o.steps, Config: o.cfg}
	for _, name := range o.order {
		h.Tensors = append(h.Tensors, stateTensor{name, len(o.state[name].m)})
	}
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
	buf := make([]byte, 4*4096)
	for _, name := range o.order {
		s := o.state[name]
		for _, arr := range [][]float32{s.m, s.v} {
			for lo := 0; lo < len(arr); lo += 4096 {
				part := arr[lo:min(lo+4096, len(arr))]
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

// ReadFrom replaces the state with one read from r (io.ReaderFrom). On
// error the optimiser is left unchanged.
func (o *AdamW) ReadFrom(r io.Reader) (int64, error) {
	cr := &crcReader{r: r, crc: crc32.NewIEEE()}
	var fixed [16]byte
	if _, err := io.ReadFull(cr, fixed[:]); err != nil {
		return cr.n, fmt.Errorf("%w: reading the preamble: %v", ErrState, err)
	}
	if string(fixed[:8]) != stateMagic {
		return cr.n, fmt.Errorf("%w: magic %q, want %q (not an optimiser state file)", ErrState, fixed[:8], stateMagic)
	}
	if v := binary.LittleEndian.Uint32(fixed[8:]); v != stateVersion {
		return cr.n, fmt.Errorf("%w: version %d, this build reads version %d", ErrState, v, stateVersion)
	}
	hlen := binary.LittleEndian.Uint32(fixed[12:])
	if hlen > maxHeader {
		return cr.n, fmt.Errorf("%w: header of %d bytes exceeds the %d-byte limit", ErrState, hlen, maxHeader)
	}
	js := make([]byte, hlen)
	if _, err := io.ReadFull(cr, js); err != nil {
		return cr.n, fmt.Errorf("%w: reading the header: %v", ErrState, err)
	}
	var h stateHeader
	if err := json.Unmarshal(js, &h); err != nil {
		return cr.n, fmt.Errorf("%w: header: %v", ErrState, err)
	}
	if h.Steps < 0 {
		return cr.n, fmt.Errorf("%w: negative step count %d", ErrState, h.Steps)
	}
	state := make(map[string]*moments, len(h.Tensors))
	order := make([]string, 0, len(h.Tensors))
	buf := make([]byte, 4*4096)
	for _, t := range h.Tensors {
		if t.Numel < 0 || t.Numel > math.MaxInt32 {
			return cr.n, fmt.Errorf("%w: tensor %q has %d elements", ErrState, t.Name, t.Numel)
		}
		if _, dup := state[t.Name]; dup {
			return cr.n, fmt.Errorf("%w: tensor %q appears twice", ErrState, t.Name)
		}
		s := &moments{m: make([]float32, t.Numel), v: make([]float32, t.Numel)}
		for _, arr := range [][]float32{s.m, s.v} {
			for lo := 0; lo < len(arr); lo += 4096 {
				part := arr[lo:min(lo+4096, len(arr))]
				if _, err := io.ReadFull(cr, buf[:4*len(part)]); err != nil {
					return cr.n, fmt.Errorf("%w: tensor %q truncated: %v", ErrState, t.Name, err)
				}
				for i := range part {
					part[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
				}
			}
		}
		state[t.Name] = s
		order = append(order, t.Name)
	}
	want := cr.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(cr, sum[:]); err != nil {
		return cr.n, fmt.Errorf("%w: missing checksum: %v", ErrState, err)
	}
	if got := binary.LittleEndian.Uint32(sum[:]); got != want {
		return cr.n, fmt.Errorf("%w: checksum %08x, computed %08x (the file is corrupt)", ErrState, got, want)
	}
	o.steps, o.state, o.order = h.Steps, state, order
	return cr.n, nil
}

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
