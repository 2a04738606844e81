package rundir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/storage"
)

// A marker is written once, read back as written, refused when unknown
// fields or trailing data appear, and its absence is ErrNotCommitted.
func TestMarkerWriteRead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := []byte("weights")
	hw := NewHashWriter(&strings.Builder{})
	if _, err := hw.Write(data); err != nil {
		t.Fatal(err)
	}
	type marker struct {
		Version int    `json:"version"`
		Files   []File `json:"files"`
	}
	want := marker{Version: 1, Files: []File{hw.File("a.bin")}}
	p := Committed(dir)
	if err := WriteMarker(ctx, p, want); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// The bytes of the previous build's markers: indented JSON, a newline.
	if !strings.HasPrefix(string(b), "{\n  \"version\": 1,\n  \"files\": [\n    {\n      \"path\": \"a.bin\",\n      \"bytes\": 7,\n      \"sha256\": \"") || !strings.HasSuffix(string(b), "}\n") {
		t.Errorf("marker bytes:\n%s", b)
	}
	if err := WriteMarker(ctx, p, want); !errors.Is(err, storage.ErrExist) {
		t.Errorf("second WriteMarker: %v, want storage.ErrExist", err)
	}
	var got marker
	if err := ReadMarker(ctx, p, &got); err != nil || got.Files[0] != want.Files[0] {
		t.Fatalf("ReadMarker: %+v, %v; want %+v", got, err, want)
	}
	if err := ReadMarker(ctx, Committed(filepath.Join(dir, "none")), &got); !errors.Is(err, ErrNotCommitted) {
		t.Errorf("missing marker: %v, want ErrNotCommitted", err)
	}
	if !errors.Is(NotCommitted("no marker here"), ErrNotCommitted) || NotCommitted("x").Error() != "x" {
		t.Error("NotCommitted is not ErrNotCommitted with its own text")
	}
	for _, bad := range []string{`{"version":1,"files":[],"extra":1}`, `{"version":1,"files":[]} {}`} {
		if err := DecodeMarker([]byte(bad), &got); err == nil {
			t.Errorf("DecodeMarker(%s) accepted it", bad)
		}
	}
}

// VerifyFile returns the bytes of a file that matches its entry and a
// *ChecksumError naming it otherwise.
func TestVerifyFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	hw := NewHashWriter(&strings.Builder{})
	hw.Write([]byte("abc"))
	f := hw.File("f")
	if b, err := VerifyFile(ctx, dir, f, CommittedName); err != nil || string(b) != "abc" {
		t.Fatalf("VerifyFile: %q, %v", b, err)
	}
	for _, c := range []struct {
		f    File
		what string
	}{
		{File{Path: "f", Bytes: 4, SHA256: f.SHA256}, "size"},
		{File{Path: "f", Bytes: 3, SHA256: strings.Repeat("0", 64)}, "sha256"},
	} {
		_, err := VerifyFile(ctx, dir, c.f, ManifestName)
		var ce *ChecksumError
		if !errors.As(err, &ce) || ce.What != c.what || !strings.Contains(err.Error(), filepath.Join(dir, "f")) {
			t.Errorf("VerifyFile with a wrong %s: %v, want a *ChecksumError naming the file", c.what, err)
		}
	}
	if _, err := VerifyFile(ctx, dir, File{Path: "gone", Bytes: 1, SHA256: f.SHA256}, ManifestName); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("VerifyFile of a missing file: %v", err)
	}
}
