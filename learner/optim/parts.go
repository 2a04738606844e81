package optim

import (
	"encoding/json"
	"fmt"
	"io"
)

// A sharded optimiser state is the state of one process's AdamW split
// into parts by the ranks of a data-parallel group: part i holds the
// moments of a contiguous run [Start, End) of the flat concatenation of
// the tensors (in the state's order), written by the rank that owns them
// as a state file of its own whose tensors are slices (TensorState.Offset)
// and whose header says which part it is. An index (PartIndex) lists the
// tensors and the parts. The parts name no world size a reader must have:
// a group of any size reads the runs that overlap its share (ReadParts),
// and JoinParts gives back the one-process state, byte for byte the one
// WriteState writes for the same moments.

// PartIndexFormat names the index format (PartIndex.Format).
const PartIndexFormat = "aipo-adamw-parts/1"

// Part is the header's note of which share of a sharded state a file holds:
// part Index of Of (1-based), the flat elements [Start, End).
type Part struct {
	Index int   `json:"index"`
	Of    int   `json:"of"`
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// PartFile is one part as the index lists it: its file name (beside the
// index) and its flat elements [Start, End).
type PartFile struct {
	File  string `json:"file"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
}

// PartIndex is the index of a sharded state: the step count, the whole
// tensors in order, and the parts in order, which cover every element once.
type PartIndex struct {
	Format  string        `json:"format"`
	Steps   int64         `json:"steps"`
	Tensors []TensorState `json:"tensors"`
	Parts   []PartFile    `json:"parts"`
}

// NewPartIndex is the index of a state of tensors (whole) after steps
// updates, split at the flat bounds (part i holds [bounds[i], bounds[i+1]),
// so len(bounds) is one more than the parts) into files named by file(i, n)
// (1-based i).
func NewPartIndex(steps int64, tensors []TensorState, bounds []int64, file func(i, n int) string) PartIndex {
	idx := PartIndex{Format: PartIndexFormat, Steps: steps, Tensors: tensors}
	n := len(bounds) - 1
	for i := range n {
		idx.Parts = append(idx.Parts, PartFile{File: file(i+1, n), Start: bounds[i], End: bounds[i+1]})
	}
	return idx
}

// Numel is the number of elements of the whole state (of one moment).
func (x PartIndex) Numel() int64 {
	var n int64
	for _, t := range x.Tensors {
		n += int64(t.Numel)
	}
	return n
}

// ParsePartIndex decodes and checks an index: its format, tensors that are
// whole and named once, and parts that cover the elements in order, once,
// in distinct plain files.
func ParsePartIndex(b []byte) (PartIndex, error) {
	var x PartIndex
	if err := json.Unmarshal(b, &x); err != nil {
		return x, fmt.Errorf("%w: index: %v", ErrState, err)
	}
	if x.Format != PartIndexFormat {
		return x, fmt.Errorf("%w: index format %q, this build reads %q", ErrState, x.Format, PartIndexFormat)
	}
	if x.Steps < 0 {
		return x, fmt.Errorf("%w: index: negative step count %d", ErrState, x.Steps)
	}
	seen := map[string]bool{}
	for _, t := range x.Tensors {
		if t.Numel < 0 || t.Offset != 0 || seen[t.Name] {
			return x, fmt.Errorf("%w: index: tensor %q (%d elements from %d) is not a whole tensor named once", ErrState, t.Name, t.Numel, t.Offset)
		}
		seen[t.Name] = true
	}
	if len(x.Parts) == 0 {
		return x, fmt.Errorf("%w: index lists no parts", ErrState)
	}
	files := map[string]bool{}
	var at int64
	for i, p := range x.Parts {
		if p.Start != at || p.End < p.Start {
			return x, fmt.Errorf("%w: index: part %d (%s) holds elements [%d, %d), the parts before it end at %d", ErrState, i+1, p.File, p.Start, p.End, at)
		}
		if p.File == "" || files[p.File] {
			return x, fmt.Errorf("%w: index: part %d's file %q is empty or listed twice", ErrState, i+1, p.File)
		}
		files[p.File] = true
		at = p.End
	}
	if total := x.Numel(); at != total {
		return x, fmt.Errorf("%w: index: the parts hold %d elements, the tensors %d (a part is missing)", ErrState, at, total)
	}
	return x, nil
}

// slice is the run of one tensor that a part holds: the tensor's index
// in the whole state, and the slice's header entry.
type slice struct {
	tensor int
	TensorState
}

// slicesOf are the runs of tensors (whole, in order) that the flat
// elements [lo, hi) cover, in order. A tensor of no elements is in no part
// (the index names it; its moments are empty).
func slicesOf(tensors []TensorState, lo, hi int64) []slice {
	var out []slice
	var at int64
	for i, t := range tensors {
		a, b := at, at+int64(t.Numel)
		at = b
		from, to := max(a, lo), min(b, hi)
		if from < to {
			out = append(out, slice{i, TensorState{Name: t.Name, Numel: int(to - from), Offset: int(from - a)}})
		}
	}
	return out
}

// WritePart writes part p of the state of tensors (whole, in order) after
// steps updates: a state file whose tensors are the slices of the flat
// elements [p.Start, p.End). fill is asked for their values in the whole
// tensors' terms (tensor index among tensors, moment 0 for m and 1 for v,
// off the first element within the whole tensor).
func WritePart(w io.Writer, steps int64, cfg Config, p Part, tensors []TensorState, fill func(tensor, moment, off int, vals []float32) error) (int64, error) {
	ss := slicesOf(tensors, p.Start, p.End)
	h := stateHeader{Steps: steps, Config: cfg, Part: &p, Tensors: make([]TensorState, len(ss))}
	for i, s := range ss {
		h.Tensors[i] = s.TensorState
	}
	return writeState(w, h, func(t, moment, off int, vals []float32) error {
		return fill(ss[t].tensor, moment, ss[t].Offset+off, vals)
	})
}

// openPart opens part i of x and checks its header against the index: the
// part it says it is, the step count, and the slices the index implies.
func openPart(x PartIndex, i int, open func(file string) (io.ReadCloser, error)) (_ *decoder, _ io.Closer, err error) {
	pf := x.Parts[i]
	rc, err := open(pf.File)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			rc.Close()
		}
	}()
	d, err := newDecoder(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", pf.File, err)
	}
	want := Part{Index: i + 1, Of: len(x.Parts), Start: pf.Start, End: pf.End}
	if d.h.Part == nil || *d.h.Part != want {
		return nil, nil, fmt.Errorf("%w: %s says it is %s, the index lists it as %s", ErrState, pf.File, describePart(d.h.Part), describePart(&want))
	}
	if d.h.Steps != x.Steps {
		return nil, nil, fmt.Errorf("%w: %s is the state after %d updates, the index's after %d (parts of two checkpoints mixed)", ErrState, pf.File, d.h.Steps, x.Steps)
	}
	ss := slicesOf(x.Tensors, pf.Start, pf.End)
	if len(ss) != len(d.tensors) {
		return nil, nil, fmt.Errorf("%w: %s holds %d tensor slices, the index implies %d", ErrState, pf.File, len(d.tensors), len(ss))
	}
	for j, s := range ss {
		if d.tensors[j] != s.TensorState {
			return nil, nil, fmt.Errorf("%w: %s's slice %d is %q [%d, +%d), the index implies %q [%d, +%d)", ErrState, pf.File, j, d.tensors[j].Name, d.tensors[j].Offset, d.tensors[j].Numel, s.Name, s.Offset, s.Numel)
		}
	}
	return d, rc, nil
}

// finishFile is finish for a decoder that reads a file of its own:
// nothing may follow the checksum, and reading on to the end lets a
// reader that verifies the file as a whole (its size and digest) do so.
func (d *decoder) finishFile() error {
	if err := d.finish(); err != nil {
		return err
	}
	var one [1]byte
	n, err := io.ReadFull(d.cr, one[:])
	switch {
	case n > 0:
		return fmt.Errorf("%w: bytes after the end of the state", ErrState)
	case err == io.EOF:
		return nil
	}
	return err
}

func describePart(p *Part) string {
	if p == nil {
		return "a whole state"
	}
	return fmt.Sprintf("part %d of %d, elements [%d, %d)", p.Index, p.Of, p.Start, p.End)
}

// ReadParts reads, from the parts of x that hold any of the flat elements
// [lo, hi), those elements' moments: put gets them one run at a time in
// the whole tensors' terms (as WritePart's fill), within [lo, hi) only;
// vals is valid during the call only. Each part read is checked whole
// (header against the index, checksum); when ReadParts fails, whatever put
// received must be discarded.
func ReadParts(x PartIndex, lo, hi int64, open func(file string) (io.ReadCloser, error), put func(tensor, moment, off int, vals []float32) error) error {
	offsets := make([]int64, len(x.Tensors))
	index := make(map[string]int, len(x.Tensors))
	var at int64
	for i, t := range x.Tensors {
		offsets[i], index[t.Name] = at, i
		at += int64(t.Numel)
	}
	for i, pf := range x.Parts {
		if pf.End <= lo || pf.Start >= hi {
			continue
		}
		d, c, err := openPart(x, i, open)
		if err != nil {
			return err
		}
		err = d.streamFile(func(t, moment, off int, vals []float32) error {
			s := d.tensors[t]
			ti := index[s.Name] // checked against the index on open
			first := offsets[ti] + int64(s.Offset+off)
			a, b := max(first, lo), min(first+int64(len(vals)), hi)
			if a >= b {
				return nil
			}
			return put(ti, moment, int(a-offsets[ti]), vals[a-first:b-first])
		})
		c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", pf.File, err)
		}
	}
	return nil
}

// JoinParts writes to w the one-process state (WriteState's format) that
// the parts of x hold: the index's tensors whole, the step count, and the
// configuration the first part records. Parts are opened as the stream
// reaches them and each is checked whole (header, checksum) before the
// joined checksum is written, so a damaged part fails the join.
func JoinParts(w io.Writer, x PartIndex, open func(file string) (io.ReadCloser, error)) (int64, error) {
	first, c, err := openPart(x, 0, open)
	if err != nil {
		return 0, err
	}
	decs := make([]*decoder, len(x.Parts))
	closers := make([]io.Closer, len(x.Parts))
	decs[0], closers[0] = first, c
	defer func() {
		for _, c := range closers {
			if c != nil {
				c.Close()
			}
		}
	}()
	offsets := make([]int64, len(x.Tensors)+1)
	for i, t := range x.Tensors {
		offsets[i+1] = offsets[i] + int64(t.Numel)
	}
	// finish checks and closes the parts that end by flat element end.
	next := 0 // the first part not yet finished
	finish := func(end int64) error {
		for ; next < len(x.Parts) && x.Parts[next].End <= end; next++ {
			if decs[next] == nil {
				d, c, err := openPart(x, next, open)
				if err != nil {
					return err
				}
				decs[next], closers[next] = d, c
			}
			if err := decs[next].finishFile(); err != nil {
				return fmt.Errorf("%s: %w", x.Parts[next].File, err)
			}
			closers[next].Close()
			closers[next] = nil
		}
		return nil
	}
	h := stateHeader{Steps: x.Steps, Config: first.h.Config, Tensors: x.Tensors}
	n, err := writeState(w, h, func(t, moment, off int, vals []float32) error {
		lo := offsets[t] + int64(off)
		hi := lo + int64(len(vals))
		for i := next; i < len(x.Parts) && lo < hi; i++ {
			pf := x.Parts[i]
			if pf.End <= lo {
				continue
			}
			if decs[i] == nil {
				d, c, err := openPart(x, i, open)
				if err != nil {
					return err
				}
				decs[i], closers[i] = d, c
			}
			k := min(hi, pf.End) - lo
			if err := decs[i].read(vals[:k], x.Tensors[t].Name); err != nil {
				return fmt.Errorf("%s: %w", pf.File, err)
			}
			vals, lo = vals[k:], lo+k
		}
		if moment == 1 && lo == offsets[t+1] {
			return finish(offsets[t+1])
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, finish(offsets[len(x.Tensors)])
}
