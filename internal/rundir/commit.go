package rundir

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
)

// The commit protocol of a run directory, the same for a step (its
// _MANIFEST.json), a checkpoint (its _COMMITTED) and an eval chunk (its
// _MANIFEST.json): the files are written first; then a marker listing
// every file with its size and sha256 is written last, only if absent,
// after checking that the run's lease still names the writer; a reader
// refuses a directory without its marker (ErrNotCommitted) and checks
// every file it reads against its entry (*ChecksumError). The markers keep
// the formats of earlier builds, so that their runs still read and resume.

// ErrNotCommitted is wrapped by every error for a directory without its
// marker (schemas.ErrNoManifest and checkpoint.ErrNotCommitted wrap it).
var ErrNotCommitted = errors.New("not committed")

// NotCommitted returns a sentinel error whose text is msg and which
// errors.Is matches with ErrNotCommitted.
func NotCommitted(msg string) error { return &notCommitted{msg} }

type notCommitted struct{ msg string }

func (e *notCommitted) Error() string        { return e.msg }
func (e *notCommitted) Is(target error) bool { return target == ErrNotCommitted }

// ErrUnreadable is wrapped by ReadMarker's error when the marker exists
// but could not be read (as opposed to decoded).
var ErrUnreadable = errors.New("cannot read")

// File is one file a marker commits: its path relative to the committed
// directory, its size and its sha256 (hex). A checkpoint's marker lists
// files in this form; a step's manifest adds row counts.
type File struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ChecksumError reports a committed file whose size or sha256 differs from
// its marker's entry.
type ChecksumError struct {
	File      string // full path of the file
	Want, Got string // sha256 in hex, or sizes as "N bytes"
	What      string // "sha256" or "size"
	// Marker names the marker that lists the file: ManifestName (also
	// when empty) or CommittedName.
	Marker string
}

func (e *ChecksumError) Error() string {
	if e.Marker == CommittedName {
		return fmt.Sprintf("%s is corrupt: %s is %s, %s says %s (corrupt or overwritten: use an earlier checkpoint, or remove this one and rerun the step that writes it)", e.File, e.What, e.Got, CommittedName, e.Want)
	}
	return fmt.Sprintf("shard %s is corrupt: %s is %s, manifest says %s (rewrite the step)", e.File, e.What, e.Got, e.Want)
}

// Check compares what was read of the file at path (n bytes with sha256
// sum, hex) with f; marker names the marker that lists it.
func (f File) Check(path string, n int64, sum, marker string) error {
	if n != f.Bytes {
		return &ChecksumError{File: path, What: "size", Want: fmt.Sprintf("%d bytes", f.Bytes), Got: fmt.Sprintf("%d bytes", n), Marker: marker}
	}
	if sum != f.SHA256 {
		return &ChecksumError{File: path, What: "sha256", Want: f.SHA256, Got: sum, Marker: marker}
	}
	return nil
}

// VerifyFile reads dir/f.Path, checks its size and sha256 against f and
// returns its bytes (so that the caller parses what it verified); marker
// names the marker that lists it.
func VerifyFile(ctx context.Context, dir string, f File, marker string) ([]byte, error) {
	p := storage.Join(dir, f.Path)
	b, err := storage.ReadFile(ctx, p)
	if err != nil {
		if errors.Is(err, storage.ErrNotExist) {
			return nil, fmt.Errorf("%s, listed in %s, is missing: %w", p, marker, err)
		}
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	sum := sha256.Sum256(b)
	if err := f.Check(p, int64(len(b)), hex.EncodeToString(sum[:]), marker); err != nil {
		return nil, err
	}
	return b, nil
}

// HashWriter counts and hashes (sha256) what passes through it to W, the
// way a committed file's entry is made. One made without NewHashWriter
// only counts.
type HashWriter struct {
	W io.Writer
	h hash.Hash
	n int64
}

// NewHashWriter hashes what is written through it to w.
func NewHashWriter(w io.Writer) *HashWriter { return &HashWriter{W: w, h: sha256.New()} }

func (hw *HashWriter) Write(p []byte) (int, error) {
	n, err := hw.W.Write(p)
	if hw.h != nil {
		hw.h.Write(p[:n])
	}
	hw.n += int64(n)
	return n, err
}

// File is the entry of what was written, under the relative path rel.
func (hw *HashWriter) File(rel string) File {
	f := File{Path: rel, Bytes: hw.n}
	if hw.h != nil {
		f.SHA256 = hex.EncodeToString(hw.h.Sum(nil))
	}
	return f
}

// WriteMarker writes the marker v (indented JSON and a newline, the format
// of every marker) at path, only if absent, after checking that the
// run's lease carried by ctx, if any, still names this writer. An existing
// marker is never replaced: the error then wraps storage.ErrExist.
func WriteMarker(ctx context.Context, path string, v any) error {
	if err := runlease.CheckContext(ctx); err != nil {
		return fmt.Errorf("commit %s: %w", path, err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("commit %s: %w", path, err)
	}
	return storage.CreateExclusive(ctx, path, append(b, '\n'))
}

// ReadMarker reads the marker at path into v. A missing marker is an
// error wrapping ErrNotCommitted and storage.ErrNotExist.
func ReadMarker(ctx context.Context, path string, v any) error {
	b, err := storage.ReadFile(ctx, path)
	if err != nil {
		if errors.Is(err, storage.ErrNotExist) {
			return fmt.Errorf("%s: %w (%w)", path, ErrNotCommitted, err)
		}
		return fmt.Errorf("%w %s: %w", ErrUnreadable, path, err)
	}
	return DecodeMarker(b, v)
}

// DecodeMarker decodes a marker's bytes into v: one JSON object, no field
// v does not know, nothing after it.
func DecodeMarker(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
