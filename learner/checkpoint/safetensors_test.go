package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSafetensorsRoundTripF32IsExact(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "w.safetensors")
	want := randTensors(1)
	if err := SaveSafetensors(ctx, p, want, SaveOptions{Metadata: map[string]string{"step": "7"}}); err != nil {
		t.Fatal(err)
	}
	got, md, err := LoadSafetensors(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, want, got)
	if md["format"] != "pt" || md["step"] != "7" {
		t.Errorf("metadata = %v, want format=pt and step=7", md)
	}
	b, _ := os.ReadFile(p)
	if n := binary.LittleEndian.Uint64(b); n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8 (data section unaligned)", n)
	}
	if entries, _ := os.ReadDir(filepath.Dir(p)); len(entries) != 1 {
		t.Errorf("directory holds %d entries after the save, want only the file (temporary left behind?)", len(entries))
	}
}

// TestSafetensorsRoundTripHalf checks BF16 and F16 saves. Each stored value
// must be exactly the round-to-nearest-even image of the input (checked
// against the PyTorch-verified converters), and within half a unit in the
// last place: bfloat16 keeps 8 significant bits, so |err| <= |x| * 2^-8;
// float16 keeps 11, so |err| <= |x| * 2^-11 in its normal range
// [2^-14, 65504], and below it the spacing is fixed at 2^-24, so
// |err| <= 2^-25. Inputs beyond 65504 overflow to infinity in F16 and are
// only checked for that.
func TestSafetensorsRoundTripHalf(t *testing.T) {
	ctx := context.Background()
	in := randTensors(2)
	for _, c := range []struct {
		dt     DType
		round  func(float32) float32
		relErr float64
	}{
		{BF16, func(f float32) float32 { return BF16ToFloat32(Float32ToBF16(f)) }, math.Ldexp(1, -8)},
		{F16, func(f float32) float32 { return F16ToFloat32(Float32ToF16(f)) }, math.Ldexp(1, -11)},
	} {
		p := filepath.Join(t.TempDir(), string(c.dt)+".safetensors")
		if err := SaveSafetensors(ctx, p, in, SaveOptions{DType: c.dt}); err != nil {
			t.Fatal(err)
		}
		got, _, err := LoadSafetensors(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range in {
			g := got[i]
			if g.Name != w.Name || !equalInts(g.Shape, w.Shape) {
				t.Fatalf("%s: tensor %d is %q %v, want %q %v", c.dt, i, g.Name, g.Shape, w.Name, w.Shape)
			}
			for j, x := range w.Data {
				if r := c.round(x); math.Float32bits(r) != math.Float32bits(g.Data[j]) {
					t.Fatalf("%s: %s[%d]: stored %g, want rounded %g of %g", c.dt, w.Name, j, g.Data[j], r, x)
				}
				ax := math.Abs(float64(x))
				err := math.Abs(float64(g.Data[j]) - float64(x))
				switch {
				case c.dt == F16 && ax > 65504:
					if !math.IsInf(float64(g.Data[j]), 0) {
						t.Fatalf("F16: %s[%d] = %g beyond the F16 range came back as %g, want infinity", w.Name, j, x, g.Data[j])
					}
				case c.dt == F16 && ax < math.Ldexp(1, -14):
					if err > math.Ldexp(1, -25) {
						t.Fatalf("F16: %s[%d] = %g came back as %g, error %g above 2^-25", w.Name, j, x, g.Data[j], err)
					}
				case err > ax*c.relErr:
					t.Fatalf("%s: %s[%d] = %g came back as %g, error %g above |x|*%g", c.dt, w.Name, j, x, g.Data[j], err, c.relErr)
				}
			}
		}
	}
}

// TestSafetensorsForeignFile reads a file written by the PyTorch fixture
// script (F32, BF16 and F16 tensors, a scalar, an empty tensor) and compares
// with PyTorch's float32 view of the same tensors, exactly: widening
// bfloat16 and float16 to float32 is exact.
func TestSafetensorsForeignFile(t *testing.T) {
	var want map[string]struct {
		DType  string    `json:"dtype"`
		Shape  []int     `json:"shape"`
		Values []float32 `json:"values"`
	}
	readJSON(t, "testdata/mixed.json", &want)
	got, md, err := LoadSafetensors(context.Background(), "testdata/mixed.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if md["format"] != "pt" {
		t.Errorf("metadata %v lacks format=pt", md)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d tensors, want %d", len(got), len(want))
	}
	for _, g := range got {
		w, ok := want[g.Name]
		if !ok {
			t.Fatalf("unexpected tensor %q", g.Name)
		}
		if !equalInts(g.Shape, w.Shape) || len(g.Data) != len(w.Values) {
			t.Fatalf("%s: shape %v (%d values), want %v (%d)", g.Name, g.Shape, len(g.Data), w.Shape, len(w.Values))
		}
		for i := range w.Values {
			if g.Data[i] != w.Values[i] {
				t.Fatalf("%s (%s)[%d] = %g, PyTorch gives %g", g.Name, w.DType, i, g.Data[i], w.Values[i])
			}
		}
	}
}

// craft builds a safetensors file from a header object and a data section.
func craft(header any, data []byte) []byte {
	var hj []byte
	switch h := header.(type) {
	case string:
		hj = []byte(h)
	default:
		hj, _ = json.Marshal(h)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	return append(append(out, hj...), data...)
}

type entry = map[string]any

func TestSafetensorsCorruptHeaders(t *testing.T) {
	f32 := func(shape []int, b, e int) entry {
		return entry{"dtype": "F32", "shape": shape, "data_offsets": []int{b, e}}
	}
	data16 := make([]byte, 16)
	cases := []struct {
		name   string
		file   []byte
		tensor string // expected in the error, "" for none
		want   string
	}{
		{"short", []byte{1, 2, 3}, "", "shorter than the 8-byte header length"},
		{"huge length", binary.LittleEndian.AppendUint64(nil, 1<<40), "", "exceeds"},
		{"length past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "", "runs past the end"},
		{"not json", craft("[1,2]", nil), "", "not a JSON object"},
		{"broken json", craft(`{"a":`, nil), "", "header JSON"},
		{"garbage after json", craft(`{}xyz`, nil), "", "non-space data after"},
		{"overlap", craft(entry{"a": f32([]int{2}, 0, 8), "b": f32([]int{2}, 4, 12)}, data16[:12]), "b", "overlaps tensor \"a\""},
		{"gap", craft(entry{"a": f32([]int{1}, 0, 4), "b": f32([]int{1}, 8, 12)}, data16[:12]), "b", "gap of 4"},
		{"gap at start", craft(entry{"a": f32([]int{1}, 4, 8)}, data16[:8]), "a", "gap of 4"},
		{"trailing data", craft(entry{"a": f32([]int{2}, 0, 8)}, data16), "", "8 bytes of trailing data"},
		{"past end", craft(entry{"a": f32([]int{4}, 0, 16)}, data16[:8]), "a", "runs past the end"},
		{"size mismatch", craft(entry{"a": f32([]int{3}, 0, 8)}, data16[:8]), "a", "needs 12"},
		{"reversed offsets", craft(entry{"a": f32([]int{0}, 8, 0)}, nil), "a", "not 0 <= begin <= end"},
		{"three offsets", craft(entry{"a": entry{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0, 4, 8}}}, data16[:4]), "a", "must be [begin, end]"},
		{"negative dim", craft(entry{"a": f32([]int{-1}, 0, 0)}, nil), "a", "negative dimension"},
		{"no shape", craft(entry{"a": entry{"dtype": "F32", "data_offsets": []int{0, 0}}}, nil), "a", "missing shape"},
		{"unknown dtype", craft(entry{"a": entry{"dtype": "F33", "shape": []int{1}, "data_offsets": []int{0, 4}}}, data16[:4]), "a", `unknown dtype "F33"`},
		{"unknown field", craft(entry{"a": entry{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0, 4}, "x": 1}}, data16[:4]), "a", "unknown field"},
		{"duplicate", craft(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data16[:8]), "a", "listed twice"},
		{"bad metadata", craft(entry{"__metadata__": entry{"k": 1}}, nil), "", "__metadata__ must map strings"},
		{"empty name", craft(entry{"": f32([]int{1}, 0, 4)}, data16[:4]), "", "empty name"},
		{"invalid utf8", craft("{\"\xff\":1}", nil), "", "not valid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := "corrupt-" + strings.ReplaceAll(c.name, " ", "-") + ".safetensors"
			_, err := ParseHeader(file, bytes.NewReader(c.file), int64(len(c.file)))
			if err == nil {
				t.Fatalf("accepted a corrupt file (%s)", c.name)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, file) {
				t.Errorf("error %q does not name the file %s", msg, file)
			}
			if c.tensor != "" && fe.Tensor != c.tensor {
				t.Errorf("error %q names tensor %q, want %q", msg, fe.Tensor, c.tensor)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not say %q", msg, c.want)
			}
		})
	}
}

// TestSafetensorsUnsupportedDType: a valid file with an I64 tensor parses
// but reading names the tensor and the dtype.
func TestSafetensorsUnsupportedDType(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ids.safetensors")
	b := craft(entry{"ids": entry{"dtype": "I64", "shape": []int{2}, "data_offsets": []int{0, 16}}}, make([]byte, 16))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadSafetensors(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), `tensor "ids": dtype I64 is not supported`) || !strings.Contains(err.Error(), p) {
		t.Fatalf("got %v, want an error naming %s, tensor ids and dtype I64", err, p)
	}
}

// TestSafetensorsZeroSizeTensorsShareOffsets: several empty tensors may sit
// at the same offset (the reference writer produces this).
func TestSafetensorsZeroSizeTensorsShareOffsets(t *testing.T) {
	b := craft(entry{
		"a": entry{"dtype": "F32", "shape": []int{0}, "data_offsets": []int{0, 0}},
		"b": entry{"dtype": "BF16", "shape": []int{0, 5}, "data_offsets": []int{0, 0}},
		"c": entry{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0, 4}},
		"d": entry{"dtype": "F16", "shape": []int{}, "data_offsets": []int{4, 6}},
	}, []byte{0, 0, 0x80, 0x3f, 0x00, 0x3c})
	h, err := ParseHeader("zero.safetensors", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := ReadTensors("zero.safetensors", bytes.NewReader(b), h)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float32{}
	for _, t := range ts {
		got[t.Name] = t.Data
	}
	if len(got["a"]) != 0 || len(got["b"]) != 0 || len(got["c"]) != 1 || got["c"][0] != 1 || len(got["d"]) != 1 || got["d"][0] != 1 {
		t.Fatalf("got %v, want a=[] b=[] c=[1] d=[1]", got)
	}
}

func TestSaveWeightsSharded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := randTensors(3)
	// 64 F32 values per shard at most: the 256-value embedding gets a shard
	// of its own, the rest are grouped.
	names, err := SaveWeights(ctx, dir, want, SaveOptions{MaxShardBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 4 || names[len(names)-1] != WeightsIndexName {
		t.Fatalf("files %v: want several shards and the index last", names)
	}
	if _, err := os.Stat(filepath.Join(dir, WeightsName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sharded save also wrote %s", WeightsName)
	}
	var idx struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	readJSON(t, filepath.Join(dir, WeightsIndexName), &idx)
	var total int64
	for _, w := range want {
		total += int64(4 * len(w.Data))
		if !strings.HasPrefix(idx.WeightMap[w.Name], "model-0000") {
			t.Errorf("weight_map[%q] = %q", w.Name, idx.WeightMap[w.Name])
		}
	}
	if idx.Metadata["total_size"] != total {
		t.Errorf("total_size = %d, want %d", idx.Metadata["total_size"], total)
	}
	if idx.WeightMap["model.embed_tokens.weight"] != ShardName(1, len(names)-1) {
		t.Errorf("embedding in %s, want %s", idx.WeightMap["model.embed_tokens.weight"], ShardName(1, len(names)-1))
	}
	got, err := LoadWeightsDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, want, got)

	// An index that disagrees with the shards is refused, naming the tensor.
	idx.WeightMap["model.norm.weight"] = ShardName(1, len(names)-1)
	b, _ := json.Marshal(idx)
	if err := os.WriteFile(filepath.Join(dir, WeightsIndexName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadWeightsDir(ctx, dir); err == nil || !strings.Contains(err.Error(), "model.norm.weight") {
		t.Fatalf("inconsistent index: got %v, want an error naming model.norm.weight", err)
	}
}

func TestSaveWeightsSingleFileWhenSmall(t *testing.T) {
	dir := t.TempDir()
	names, err := SaveWeights(context.Background(), dir, randTensors(4), SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != WeightsName {
		t.Fatalf("files %v, want [%s]", names, WeightsName)
	}
}
