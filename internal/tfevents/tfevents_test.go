package tfevents

import (
	"encoding/hex"
	"errors"
	"hash/crc32"
	"testing"
	"time"
)

// The bytes TensorBoard's own RecordWriter writes for the same two events
// (tensorboard 2.21.0: event_pb2.Event(wall_time=1700000000.5,
// file_version="brain.Event:2") and Event(wall_time=1700000001.25, step=7,
// summary with train/loss 0.25 and lr 3e-4), serialized and framed).
const tensorboardBytes = "1800000000000000a37f4b220900002040fc54d9411a0d627261696e2e4576656e743a322b3531102b00000000000000861bc34b0900005040fc54d94110072a1e0a110a0a747261696e2f6c6f7373150000803e0a090a026c721552499d39a0f9dd08"

func TestEncodingMatchesTensorBoard(t *testing.T) {
	b := AppendFileVersion(nil, time.Unix(1700000000, 5e8))
	b = AppendScalars(b, time.Unix(1700000001, 25e7), 7, []Scalar{{"train/loss", 0.25}, {"lr", 3e-4}})
	if got := hex.EncodeToString(b); got != tensorboardBytes {
		t.Fatalf("encoded\n%s\nTensorBoard's RecordWriter wrote\n%s", got, tensorboardBytes)
	}
	want, _ := hex.DecodeString(tensorboardBytes)
	ev, err := Read(want)
	if err != nil || len(ev) != 2 {
		t.Fatalf("Read: %d events, %v", len(ev), err)
	}
	if ev[0].FileVersion != FileVersion || ev[0].WallTime != 1700000000.5 || len(ev[0].Scalars) != 0 {
		t.Errorf("first event %+v", ev[0])
	}
	if e := ev[1]; e.Step != 7 || e.WallTime != 1700000001.25 || len(e.Scalars) != 2 ||
		e.Scalars[0] != (Scalar{"train/loss", 0.25}) || e.Scalars[1] != (Scalar{"lr", 3e-4}) {
		t.Errorf("second event %+v", e)
	}
}

func TestCRC32C(t *testing.T) {
	// The check value of CRC-32C (RFC 3720 B.4).
	if c := crc32.Checksum([]byte("123456789"), castagnoli); c != 0xe3069283 {
		t.Fatalf("crc32c = %08x", c)
	}
}

// A file cut anywhere inside its last record reads as the records before
// it, with ErrTruncated; a flipped byte is a checksum error.
func TestReadTruncatedAndCorrupt(t *testing.T) {
	b := AppendFileVersion(nil, time.Unix(1, 0))
	one := len(b)
	b = AppendScalars(b, time.Unix(2, 0), 3, []Scalar{{"x", 1}})
	for cut := one + 1; cut < len(b); cut++ {
		ev, err := Read(b[:cut])
		if !errors.Is(err, ErrTruncated) || len(ev) != 1 {
			t.Fatalf("cut at %d of %d: %d events, %v", cut, len(b), len(ev), err)
		}
	}
	bad := append([]byte(nil), b...)
	bad[len(bad)-6] ^= 1
	if ev, err := Read(bad); err == nil || errors.Is(err, ErrTruncated) || len(ev) != 1 {
		t.Fatalf("corrupt data: %d events, %v", len(ev), err)
	}
}

func TestFileName(t *testing.T) {
	n := FileName(time.Unix(1700000000, 0), "host a/b", 42, 1)
	if n != "events.out.tfevents.1700000000.host_a_b.42.1" || !IsEventFile(n) {
		t.Fatalf("FileName = %q", n)
	}
	if IsEventFile(".events.out.tfevents.1.h.1.0.tmp-1@x-2") || IsEventFile("metrics.jsonl") {
		t.Fatal("IsEventFile takes a temporary or another file")
	}
}
