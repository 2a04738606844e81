package optim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// partsFixture is a state of a few tensors (one longer than a chunk of
// the stream, one empty) held as flat moments, with the one-process file
// WriteState makes of them.
type partsFixture struct {
	tensors []TensorState
	m, v    [][]float32
	whole   []byte
}

func newPartsFixture(t *testing.T) partsFixture {
	rng := rand.New(rand.NewPCG(7, 7))
	f := partsFixture{tensors: []TensorState{{Name: "a", Numel: 5}, {Name: "big", Numel: stateChunk + 1234}, {Name: "empty"}, {Name: "b", Numel: 77}, {Name: "c", Numel: 1}}}
	for _, ts := range f.tensors {
		m, v := make([]float32, ts.Numel), make([]float32, ts.Numel)
		for i := range m {
			m[i], v[i] = rng.Float32()-0.5, rng.Float32()
		}
		f.m, f.v = append(f.m, m), append(f.v, v)
	}
	var b bytes.Buffer
	if _, err := WriteState(&b, 3, DefaultConfig(), f.tensors, f.fill); err != nil {
		t.Fatal(err)
	}
	f.whole = b.Bytes()
	return f
}

func (f partsFixture) fill(ti, moment, off int, vals []float32) error {
	src := f.m[ti]
	if moment == 1 {
		src = f.v[ti]
	}
	copy(vals, src[off:off+len(vals)])
	return nil
}

// write writes the parts of the state split at bounds and returns the
// index and the files by name.
func (f partsFixture) write(t *testing.T, steps int64, bounds []int64) (PartIndex, map[string][]byte) {
	x := NewPartIndex(steps, f.tensors, bounds, func(i, n int) string { return fmt.Sprintf("part-%d-of-%d", i, n) })
	files := map[string][]byte{}
	for i, pf := range x.Parts {
		var b bytes.Buffer
		p := Part{Index: i + 1, Of: len(x.Parts), Start: pf.Start, End: pf.End}
		if _, err := WritePart(&b, steps, DefaultConfig(), p, f.tensors, f.fill); err != nil {
			t.Fatal(err)
		}
		files[pf.File] = b.Bytes()
	}
	// The index goes through its JSON, as it does on disk.
	js, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	x, err = ParsePartIndex(js)
	if err != nil {
		t.Fatal(err)
	}
	return x, files
}

func opener(files map[string][]byte) func(string) (io.ReadCloser, error) {
	return func(name string) (io.ReadCloser, error) {
		b, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("no file %s", name)
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
}

// splits are ways to cut the fixture's 263,483 elements: one part, cuts
// inside tensors and at their edges, at the stream's chunk boundary, an
// empty part, more parts than tensors.
func splits(total int64) [][]int64 {
	return [][]int64{
		{0, total},
		{0, 3, total},
		{0, 5, 5 + stateChunk, total},
		{0, 0, 100, total},
		{0, 2, 1000, 200000, total - 1, total},
		{0, total / 3, 2 * total / 3, total, total},
	}
}

func TestJoinPartsGivesTheWholeState(t *testing.T) {
	f := newPartsFixture(t)
	var total int64
	for _, ts := range f.tensors {
		total += int64(ts.Numel)
	}
	for _, bounds := range splits(total) {
		x, files := f.write(t, 3, bounds)
		var got bytes.Buffer
		if _, err := JoinParts(&got, x, opener(files)); err != nil {
			t.Fatalf("bounds %v: %v", bounds, err)
		}
		if !bytes.Equal(got.Bytes(), f.whole) {
			t.Errorf("bounds %v: the joined parts are not the one-process state's bytes (%d against %d bytes)", bounds, got.Len(), len(f.whole))
		}
		// Every part is a state file that ReadState refuses to take for
		// a whole one.
		for name, b := range files {
			_, err := ReadState(bytes.NewReader(b), func(int64, []TensorState) error { return nil }, func(int, int, int, []float32) error { return nil })
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "sharded optimiser state") {
				t.Errorf("bounds %v: ReadState on %s: %v", bounds, name, err)
			}
		}
	}
}

func TestReadPartsGivesARange(t *testing.T) {
	f := newPartsFixture(t)
	total := int64(0)
	offsets := []int64{}
	for _, ts := range f.tensors {
		offsets = append(offsets, total)
		total += int64(ts.Numel)
	}
	for _, bounds := range splits(total) {
		x, files := f.write(t, 3, bounds)
		for _, r := range [][2]int64{{0, total}, {0, 1}, {4, 9}, {1000, 1000 + stateChunk}, {total - 80, total}, {7, 7}} {
			opened := map[string]bool{}
			open := func(name string) (io.ReadCloser, error) {
				opened[name] = true
				return opener(files)(name)
			}
			got := make([][2][]float32, len(f.tensors))
			for i, ts := range f.tensors {
				got[i] = [2][]float32{make([]float32, ts.Numel), make([]float32, ts.Numel)}
			}
			err := ReadParts(x, r[0], r[1], open, func(ti, moment, off int, vals []float32) error {
				a := offsets[ti] + int64(off)
				if a < r[0] || a+int64(len(vals)) > r[1] {
					t.Fatalf("bounds %v, range %v: put got [%d, %d)", bounds, r, a, a+int64(len(vals)))
				}
				copy(got[ti][moment][off:], vals)
				return nil
			})
			if err != nil {
				t.Fatalf("bounds %v, range %v: %v", bounds, r, err)
			}
			for i := range f.tensors {
				for j := range f.tensors[i].Numel {
					flat := offsets[i] + int64(j)
					want := [2]float32{}
					if flat >= r[0] && flat < r[1] {
						want = [2]float32{f.m[i][j], f.v[i][j]}
					}
					if got[i][0][j] != want[0] || got[i][1][j] != want[1] {
						t.Fatalf("bounds %v, range %v: element %d of %s is (%g, %g), want (%g, %g)", bounds, r, j, f.tensors[i].Name, got[i][0][j], got[i][1][j], want[0], want[1])
					}
				}
			}
			for _, pf := range x.Parts {
				if overlaps := pf.Start < r[1] && pf.End > r[0]; opened[pf.File] != overlaps {
					t.Errorf("bounds %v, range %v: %s opened %v, it overlaps %v", bounds, r, pf.File, opened[pf.File], overlaps)
				}
			}
		}
	}
}

func TestPartsRefuseWhatDoesNotAddUp(t *testing.T) {
	f := newPartsFixture(t)
	var total int64
	for _, ts := range f.tensors {
		total += int64(ts.Numel)
	}
	bounds := []int64{0, 1000, total}
	x, files := f.write(t, 3, bounds)
	_, later := f.write(t, 4, bounds)

	join := func(files map[string][]byte) error {
		_, err := JoinParts(io.Discard, x, opener(files))
		return err
	}
	with := func(name string, b []byte) map[string][]byte {
		out := map[string][]byte{}
		for k, v := range files {
			out[k] = v
		}
		out[name] = b
		return out
	}
	second := x.Parts[1].File
	flipped := bytes.Clone(files[second])
	flipped[len(flipped)-40] ^= 1
	cases := map[string]struct {
		files  map[string][]byte
		phrase string
	}{
		"a damaged part":           {with(second, flipped), "checksum"},
		"a part of another step":   {with(second, later[second]), "after 4 updates, the index's after 3"},
		"the parts swapped":        {with(second, files[x.Parts[0].File]), "says it is part 1 of 2"},
		"a part missing":           {map[string][]byte{x.Parts[0].File: files[x.Parts[0].File]}, "no file " + second},
		"a whole state for a part": {with(second, f.whole), "says it is a whole state"},
		"a part cut short":         {with(second, files[second][:len(files[second])-100]), "truncated"},
	}
	for name, c := range cases {
		err := join(c.files)
		if err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("%s: JoinParts: %v, want an error mentioning %q", name, err, c.phrase)
		}
		err = ReadParts(x, 0, total, opener(c.files), func(int, int, int, []float32) error { return nil })
		if err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("%s: ReadParts: %v, want an error mentioning %q", name, err, c.phrase)
		}
	}

	indexes := map[string]struct {
		edit   func(*PartIndex)
		phrase string
	}{
		"a gap":            {func(x *PartIndex) { x.Parts[1].Start++ }, "the parts before it end at 1000"},
		"an element short": {func(x *PartIndex) { x.Parts[1].End-- }, "a part is missing"},
		"a file twice":     {func(x *PartIndex) { x.Parts[1].File = x.Parts[0].File }, "listed twice"},
		"another format":   {func(x *PartIndex) { x.Format = "zero-1" }, `index format "zero-1"`},
		"no parts":         {func(x *PartIndex) { x.Parts = nil }, "lists no parts"},
		"a tensor twice":   {func(x *PartIndex) { x.Tensors[1].Name = "a" }, `tensor "a"`},
	}
	for name, c := range indexes {
		y := x
		y.Parts = append([]PartFile(nil), x.Parts...)
		y.Tensors = append([]TensorState(nil), x.Tensors...)
		c.edit(&y)
		js, _ := json.Marshal(y)
		if _, err := ParsePartIndex(js); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("index with %s: %v, want ErrState mentioning %q", name, err, c.phrase)
		}
	}
}
