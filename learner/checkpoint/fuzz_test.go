package checkpoint

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// FuzzParseHeader feeds arbitrary bytes to the header parser. It must never
// panic; a file it accepts must read without error (supported dtypes) and
// re-encode to a file that parses to the same names and shapes.
func FuzzParseHeader(f *testing.F) {
	var buf bytes.Buffer
	if _, err := WriteSafetensors(&buf, randTensors(9), F32, map[string]string{"format": "pt"}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	if b, err := os.ReadFile("testdata/mixed.safetensors"); err == nil {
		f.Add(b)
	}
	f.Add(craft(`{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(craft(`{"__metadata__":{"a":"b"}}  `, nil))
	f.Add(craft(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}`, make([]byte, 6)))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(craft(`{"z":{"dtype":"F32","shape":[35184372088832,0],"data_offsets":[0,0]}}`, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader("fuzz.safetensors", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		var ts []Tensor
		for _, ti := range h.Tensors {
			if ti.DType.Size() == 0 {
				return // other dtypes parse but are not read
			}
		}
		ts, err = ReadTensors("fuzz.safetensors", bytes.NewReader(b), h)
		if err != nil {
			t.Fatalf("accepted header but reading failed: %v", err)
		}
		var out bytes.Buffer
		if _, err := WriteSafetensors(&out, ts, F32, h.Metadata); err != nil {
			t.Fatalf("re-encoding accepted tensors: %v", err)
		}
		h2, err := ParseHeader("re.safetensors", bytes.NewReader(out.Bytes()), int64(out.Len()))
		if err != nil {
			t.Fatalf("re-encoded file rejected: %v", err)
		}
		if len(h2.Tensors) != len(h.Tensors) {
			t.Fatalf("re-encoded file has %d tensors, want %d", len(h2.Tensors), len(h.Tensors))
		}
		for i := range h.Tensors {
			if h2.Tensors[i].Name != h.Tensors[i].Name || !equalInts(h2.Tensors[i].Shape, h.Tensors[i].Shape) {
				t.Fatalf("tensor %d: %q %v became %q %v", i, h.Tensors[i].Name, h.Tensors[i].Shape, h2.Tensors[i].Name, h2.Tensors[i].Shape)
			}
		}
		m1, _ := json.Marshal(h.Metadata)
		m2, _ := json.Marshal(h2.Metadata)
		if len(h.Metadata) > 0 && !bytes.Equal(m1, m2) {
			t.Fatalf("metadata %s became %s", m1, m2)
		}
	})
}
