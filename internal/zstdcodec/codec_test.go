package zstdcodec

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	kz "github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// samples are inputs of the kinds shards hold: empty, tiny, text-like,
// random floats, small integers, incompressible bytes, and one larger than
// a zstd block.
func samples() map[string][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"the", "answer", "is", "boxed", "so", "we", "compute", "x", "=", "42", "\n"}
	var text []byte
	for len(text) < 300_000 {
		text = append(text, words[r.IntN(len(words))]...)
		text = append(text, ' ')
	}
	var floats, ints []byte
	for range 50_000 {
		floats = binary.LittleEndian.AppendUint32(floats, math.Float32bits(-float32(r.ExpFloat64())))
		ints = binary.LittleEndian.AppendUint32(ints, uint32(r.IntN(5)))
	}
	noise := make([]byte, 200_000)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	return map[string][]byte{"empty": {}, "one": {7}, "text": text, "floats": floats, "ints": ints, "noise": noise}
}

func TestRoundTrip(t *testing.T) {
	t.Logf("encoder: %s", Backend())
	var c Codec
	other, err := kz.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for name, src := range samples() {
		enc, err := c.Encode(make([]byte, 3), src)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		dec, err := c.Decode(nil, enc)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if !bytes.Equal(dec, src) {
			t.Fatalf("%s: round trip changed %d bytes into %d", name, len(src), len(dec))
		}
		// A decoder that is not ours reads the frame too.
		if dec, err = other.DecodeAll(enc, nil); err != nil || !bytes.Equal(dec, src) {
			t.Fatalf("%s: klauspost decoder: %v (len %d, want %d)", name, err, len(dec), len(src))
		}
		if name == "text" && len(enc)*2 > len(src) {
			t.Errorf("text compressed only to %d of %d bytes", len(enc), len(src))
		}
	}
}

// BenchmarkEncode compares this package's encoder with klauspost's
// SpeedFastest side by side on the same inputs; the ratio metric is the
// compressed share.
func BenchmarkEncode(b *testing.B) {
	coders := []struct {
		name string
		enc  func(dst, src []byte) ([]byte, error)
	}{
		{"aipo", (&Codec{}).Encode},
		{"klauspost-fastest", (&zstd.Codec{Level: zstd.SpeedFastest}).Encode},
	}
	s := samples()
	for _, in := range []string{"text", "floats", "ints"} {
		for _, c := range coders {
			b.Run(in+"/"+c.name, func(b *testing.B) {
				src := s[in]
				b.SetBytes(int64(len(src)))
				var out []byte
				for b.Loop() {
					out, _ = c.enc(out, src)
				}
				b.ReportMetric(float64(len(out))/float64(len(src)), "ratio")
			})
		}
	}
}
