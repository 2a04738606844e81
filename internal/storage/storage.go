// Package storage reads and writes files on local disk and on gs:// through
// Beam's filesystem registry, and adds what the commit protocol needs: an
// atomic whole-file write, durable local writes and random-access reads.
//
// Local paths are handled with package os directly (so that writes can be
// synced before a manifest commits them); every other scheme goes through
// github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem, so a path that
// works for a Beam pipeline works here. gs:// honours STORAGE_EMULATOR_HOST.
package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	gcs "cloud.google.com/go/storage"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/gcs" // registers gs://
)

// ErrNotExist is returned (wrapped) when a file does not exist, on any scheme.
var ErrNotExist = os.ErrNotExist

// IsRemote reports whether p names an object store rather than a local path.
func IsRemote(p string) bool { return strings.Contains(p, "://") }

// MissingLocal reports whether p is a local path that does not exist: a
// check of a configuration's files before anything runs (a remote path or
// an empty one is not judged here).
func MissingLocal(p string) bool {
	if p == "" || IsRemote(p) {
		return false
	}
	_, err := os.Stat(p)
	return err != nil
}

// Join joins path elements with "/" for remote paths and the OS separator
// for local ones.
func Join(base string, elem ...string) string {
	if !IsRemote(base) {
		return filepath.Join(append([]string{base}, elem...)...)
	}
	i := strings.Index(base, "://")
	scheme, rest := base[:i+3], base[i+3:]
	return scheme + path.Join(append([]string{rest}, elem...)...)
}

// Base returns the last element of p.
func Base(p string) string {
	if !IsRemote(p) {
		return filepath.Base(p)
	}
	return path.Base(p)
}

// Dir returns all but the last element of p.
func Dir(p string) string {
	if !IsRemote(p) {
		return filepath.Dir(p)
	}
	i := strings.Index(p, "://")
	return p[:i+3] + path.Dir(p[i+3:])
}

func remoteFS(ctx context.Context, p string) (filesystem.Interface, error) {
	fs, err := filesystem.New(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("storage: no filesystem for %q: %w", p, err)
	}
	return fs, nil
}

// ReadFile reads a whole file.
func ReadFile(ctx context.Context, p string) ([]byte, error) {
	if !IsRemote(p) {
		return os.ReadFile(p)
	}
	rc, err := OpenRead(ctx, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		var te *TimeoutError
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, fmt.Errorf("storage: read %s: %w", p, err)
	}
	return b, nil
}

// OpenRead opens a file for sequential reading. On an object store the
// opening waits at most Timeout() for the store's answer, and so does each
// Read.
func OpenRead(ctx context.Context, p string) (io.ReadCloser, error) {
	if !IsRemote(p) {
		return os.Open(p)
	}
	w := newWatch(ctx)
	fs, err := remoteFS(w.ctx, p)
	if err != nil {
		w.close()
		return nil, w.wrap("open", p, err)
	}
	rc, err := fs.OpenRead(w.ctx, p)
	w.disarm()
	if err != nil {
		fs.Close()
		w.close()
		return nil, w.wrap("open", p, wrapRemote("open", p, err))
	}
	return &closeBoth{ReadCloser: rc, fs: fs, w: w, p: p}, nil
}

// ReaderAt is a random-access view of a file with its size.
type ReaderAt interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

type fileReaderAt struct {
	*os.File
	size int64
}

func (f fileReaderAt) Size() int64 { return f.size }

type bytesReaderAt struct{ *bytes.Reader }

func (bytesReaderAt) Close() error { return nil }

// OpenReaderAt opens a file for random access (Parquet footers). Local files
// are read in place; remote objects are fetched whole into memory.
func OpenReaderAt(ctx context.Context, p string) (ReaderAt, error) {
	if !IsRemote(p) {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		return fileReaderAt{File: f, size: st.Size()}, nil
	}
	b, err := ReadFile(ctx, p)
	if err != nil {
		return nil, err
	}
	return bytesReaderAt{bytes.NewReader(b)}, nil
}

// Writer is a file being written. Close makes the content durable (local
// files are synced); Abort discards it where the scheme allows.
type Writer interface {
	io.Writer
	Close() error
}

type syncFile struct{ *os.File }

func (f syncFile) Close() error {
	if err := f.File.Sync(); err != nil {
		f.File.Close()
		return err
	}
	if err := f.File.Close(); err != nil {
		return err
	}
	Changed(f.File.Name())
	return nil
}

// Create opens p for writing, creating parent directories of local paths. On
// gs:// the object becomes visible only when Close succeeds.
func Create(ctx context.Context, p string) (Writer, error) {
	if !IsRemote(p) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, err
		}
		return syncFile{f}, nil
	}
	w := newWatch(ctx)
	fs, err := remoteFS(w.ctx, p)
	if err != nil {
		w.close()
		return nil, w.wrap("create", p, err)
	}
	wc, err := fs.OpenWrite(w.ctx, p)
	w.disarm()
	if err != nil {
		fs.Close()
		w.close()
		return nil, w.wrap("create", p, wrapRemote("create", p, err))
	}
	return &closeBothW{WriteCloser: wc, fs: fs, p: p, w: w}, nil
}

// WriteAtomic writes data to p so that readers see either the old file or
// the whole new one: locally through a synced temporary file renamed over p
// (and the directory synced); on object stores through a single object
// write, which the store makes visible only once complete.
func WriteAtomic(ctx context.Context, p string, data []byte) error {
	if IsRemote(p) {
		w, err := Create(ctx, p)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			w.Close()
			return remoteErr("write", p, err)
		}
		if err := w.Close(); err != nil {
			return remoteErr("commit", p, err)
		}
		Changed(p)
		return nil
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, TempName(filepath.Base(p)))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	if err := SyncDir(dir); err != nil {
		return err
	}
	Changed(p)
	return nil
}

// SyncDir makes renames and creations inside a local directory durable. It is
// a no-op for remote paths.
func SyncDir(dir string) error {
	if IsRemote(dir) {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// Exists reports whether p exists.
func Exists(ctx context.Context, p string) (bool, error) {
	_, err := Size(ctx, p)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, ErrNotExist) {
		return false, nil
	}
	return false, err
}

// Size returns the size of p in bytes.
func Size(ctx context.Context, p string) (int64, error) {
	if !IsRemote(p) {
		st, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
	var n int64
	err := bounded(ctx, "stat", p, func(ctx context.Context) error {
		fs, err := remoteFS(ctx, p)
		if err != nil {
			return err
		}
		defer fs.Close()
		if n, err = fs.Size(ctx, p); err != nil {
			return wrapRemote("stat", p, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// List returns the files matching a glob (Beam's glob syntax for remote
// paths, filepath.Match for local ones), sorted.
func List(ctx context.Context, glob string) ([]string, error) {
	if !IsRemote(glob) {
		return filepath.Glob(glob)
	}
	var out []string
	err := bounded(ctx, "list", glob, func(ctx context.Context) error {
		fs, err := remoteFS(ctx, glob)
		if err != nil {
			return err
		}
		defer fs.Close()
		if out, err = fs.List(ctx, glob); err != nil {
			return fmt.Errorf("storage: list %s: %w", glob, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortStrings(out)
	return out, nil
}

// Remove deletes p. Removing a file that does not exist is not an error.
func Remove(ctx context.Context, p string) error {
	if !IsRemote(p) {
		err := os.Remove(p)
		if err == nil {
			Changed(p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return bounded(ctx, "remove", p, func(ctx context.Context) error {
		fs, err := remoteFS(ctx, p)
		if err != nil {
			return err
		}
		defer fs.Close()
		r, ok := fs.(filesystem.Remover)
		if !ok {
			return fmt.Errorf("storage: %s: filesystem cannot remove files", p)
		}
		if err := r.Remove(ctx, p); err != nil {
			if errors.Is(wrapRemote("remove", p, err), ErrNotExist) {
				return nil
			}
			return wrapRemote("remove", p, err)
		}
		Changed(p)
		return nil
	})
}

// wrapRemote turns object-store "not found" errors into ErrNotExist. GCS
// reads report a missing object as gcs.ErrObjectNotExist ("object doesn't
// exist"), without a status code in the message.
func wrapRemote(op, p string, err error) error {
	msg := strings.ToLower(err.Error())
	if errors.Is(err, gcs.ErrObjectNotExist) || strings.Contains(msg, "not exist") || strings.Contains(msg, "not found") || strings.Contains(msg, "404") {
		return fmt.Errorf("storage: %s %s: %w (%v)", op, p, ErrNotExist, err)
	}
	return fmt.Errorf("storage: %s %s: %w", op, p, err)
}

// remoteErr wraps a failed remote write, keeping a TimeoutError as it is.
func remoteErr(op, p string, err error) error {
	var te *TimeoutError
	if errors.As(err, &te) {
		return err
	}
	return fmt.Errorf("storage: %s %s: %w", op, p, err)
}

// closeBoth is a remote reader: each Read waits at most the bound.
type closeBoth struct {
	io.ReadCloser
	fs filesystem.Interface
	w  *watch
	p  string
}

func (c *closeBoth) Read(b []byte) (int, error) {
	c.w.arm()
	n, err := c.ReadCloser.Read(b)
	c.w.disarm()
	if err != nil && err != io.EOF {
		err = c.w.wrap("read", c.p, err)
	}
	return n, err
}

func (c *closeBoth) Close() error {
	err := c.ReadCloser.Close()
	c.fs.Close()
	c.w.close()
	return err
}

// closeBothW is a remote writer: each Write, and the Close that commits
// the object, waits at most the bound.
type closeBothW struct {
	io.WriteCloser
	fs filesystem.Interface
	p  string
	w  *watch
}

func (c *closeBothW) Write(b []byte) (int, error) {
	c.w.arm()
	n, err := c.WriteCloser.Write(b)
	c.w.disarm()
	return n, c.w.wrap("write", c.p, err)
}

func (c *closeBothW) Close() error {
	c.w.arm()
	err := c.WriteCloser.Close()
	c.fs.Close()
	defer c.w.close()
	if err != nil {
		if c.w.fired() {
			return c.w.wrap("close", c.p, err)
		}
		return wrapRemote("close", c.p, err)
	}
	Changed(c.p)
	return nil
}

func sortStrings(s []string) { sort.Strings(s) }
