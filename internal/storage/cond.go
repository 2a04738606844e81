package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	gcs "cloud.google.com/go/storage"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/gcsx"
	"google.golang.org/api/googleapi"
)

// Conditional writes: the compare-and-swap operations that a run
// directory's lease and its create-only commits are built on. On gs:// they
// are object generation preconditions (ifGenerationMatch, with 0 meaning
// "does not exist"), so two writers on two machines cannot both win. On
// local disk a writer holds flock(2) on the file's directory for the few
// microseconds between comparing and replacing, and a create-only write is a
// hard link of a synced temporary file, which fails if the name exists.

// ErrExist is returned (wrapped) by CreateExclusive when the file exists.
var ErrExist = os.ErrExist

// ErrPrecondition is returned (wrapped) when a conditional replace or remove
// finds the file changed since it was read.
var ErrPrecondition = errors.New("the file changed since it was read (another writer got there first)")

// Gen identifies one version of a file: its object generation on gs://, a
// digest of its content locally. The zero Gen means "the file does not
// exist".
type Gen struct {
	remote int64
	local  string
}

// IsZero reports whether g stands for a missing file.
func (g Gen) IsZero() bool { return g.remote == 0 && g.local == "" }

// lockWait bounds how long a local conditional write waits for another
// process's flock on the same directory (held for microseconds normally).
const lockWait = 10 * time.Second

// CreateExclusive writes data to p only if p does not exist, atomically: a
// reader sees no file or the whole file. It fails with an error wrapping
// ErrExist when p exists, and then leaves p untouched.
func CreateExclusive(ctx context.Context, p string, data []byte) error {
	if IsRemote(p) {
		_, err := writeRemoteIf(ctx, p, data, gcs.Conditions{DoesNotExist: true})
		if errors.Is(err, ErrPrecondition) {
			return fmt.Errorf("storage: create %s: %w", p, ErrExist)
		}
		return err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := writeTemp(dir, filepath.Base(p), data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, p); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("storage: create %s: %w", p, ErrExist)
		}
		return err
	}
	if err := SyncDir(dir); err != nil {
		return err
	}
	Changed(p)
	return nil
}

// ReadGen reads p with its generation. A missing file is an error wrapping
// ErrNotExist.
func ReadGen(ctx context.Context, p string) ([]byte, Gen, error) {
	if !IsRemote(p) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, Gen{}, err
		}
		return b, localGen(b), nil
	}
	var b []byte
	var g Gen
	err := bounded(ctx, "read", p, func(ctx context.Context) error {
		o, err := remoteObject(ctx, p)
		if err != nil {
			return err
		}
		r, err := o.NewReader(ctx)
		if err != nil {
			return wrapRemote("read", p, err)
		}
		defer r.Close()
		if b, err = io.ReadAll(r); err != nil {
			return fmt.Errorf("storage: read %s: %w", p, err)
		}
		g = Gen{remote: r.Attrs.Generation}
		return nil
	})
	if err != nil {
		return nil, Gen{}, err
	}
	return b, g, nil
}

// ReplaceIf writes data to p only if p is still at generation g (the zero
// Gen: only if p does not exist), and returns the new generation. A lost
// race is an error wrapping ErrPrecondition, and p is left as the other
// writer made it.
func ReplaceIf(ctx context.Context, p string, data []byte, g Gen) (Gen, error) {
	if IsRemote(p) {
		c := gcs.Conditions{DoesNotExist: true}
		if !g.IsZero() {
			c = gcs.Conditions{GenerationMatch: g.remote}
		}
		return writeRemoteIf(ctx, p, data, c)
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Gen{}, err
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return Gen{}, err
	}
	defer unlock()
	cur, err := os.ReadFile(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if !g.IsZero() {
			return Gen{}, fmt.Errorf("storage: replace %s: %w (it was removed)", p, ErrPrecondition)
		}
	case err != nil:
		return Gen{}, err
	case localGen(cur) != g:
		return Gen{}, fmt.Errorf("storage: replace %s: %w", p, ErrPrecondition)
	}
	tmp, err := writeTemp(dir, filepath.Base(p), data)
	if err != nil {
		return Gen{}, err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return Gen{}, err
	}
	if err := SyncDir(dir); err != nil {
		return Gen{}, err
	}
	Changed(p)
	return localGen(data), nil
}

// RemoveIf deletes p only if it is still at generation g. A file already
// gone is not an error. A file another writer changed is left as it is; the
// error then wraps ErrPrecondition, except on stores that answer "not
// found" for a generation that is no longer the live one (then nil).
func RemoveIf(ctx context.Context, p string, g Gen) error {
	if IsRemote(p) {
		return bounded(ctx, "remove", p, func(ctx context.Context) error {
			o, err := remoteObject(ctx, p)
			if err != nil {
				return err
			}
			// Deleting that generation, with the generation precondition
			// too: a newer generation is then either refused (412) or not
			// found (404, which some emulators answer instead), and stays
			// either way.
			err = o.Generation(g.remote).If(gcs.Conditions{GenerationMatch: g.remote}).Delete(ctx)
			switch {
			case err == nil:
				return nil
			case isPreconditionFailed(err):
				return fmt.Errorf("storage: remove %s: %w", p, ErrPrecondition)
			case errors.Is(wrapRemote("remove", p, err), ErrNotExist):
				return nil
			}
			return wrapRemote("remove", p, err)
		})
	}
	dir := filepath.Dir(p)
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer unlock()
	cur, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if localGen(cur) != g {
		return fmt.Errorf("storage: remove %s: %w", p, ErrPrecondition)
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := SyncDir(dir); err != nil {
		return err
	}
	Changed(p)
	return nil
}

func localGen(b []byte) Gen {
	s := sha256.Sum256(b)
	return Gen{local: hex.EncodeToString(s[:])}
}

// writeTemp writes data to a synced temporary file in dir named after base
// (TempName) and returns its path.
func writeTemp(dir, base string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, TempName(base))
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// lockDir takes flock(2) on dir, retrying until lockWait has passed.
func lockDir(ctx context.Context, dir string) (func(), error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
				d.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			d.Close()
			return nil, fmt.Errorf("storage: lock %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			d.Close()
			return nil, fmt.Errorf("storage: lock %s: still held by another process after %s", dir, lockWait)
		}
		select {
		case <-ctx.Done():
			d.Close()
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

var (
	gcsMu     sync.Mutex
	gcsHost   string // STORAGE_EMULATOR_HOST when the client was made
	gcsClient *gcs.Client
)

// remoteObject is the gs:// object p, through one client per process
// (STORAGE_EMULATOR_HOST is honoured by the client library). Credentials
// are the application default ones, as for Beam's gs:// filesystem, with
// the same fallback to unauthenticated access.
func remoteObject(ctx context.Context, p string) (*gcs.ObjectHandle, error) {
	bucket, object, err := gcsx.ParseObject(p)
	if err != nil {
		return nil, fmt.Errorf("storage: %s: %w (conditional writes support gs:// only)", p, err)
	}
	c, err := client()
	if err != nil {
		return nil, err
	}
	return c.Bucket(bucket).Object(object), nil
}

// client is the process's GCS client, made again when
// STORAGE_EMULATOR_HOST changes (tests start one emulator each).
func client() (*gcs.Client, error) {
	gcsMu.Lock()
	defer gcsMu.Unlock()
	host := os.Getenv("STORAGE_EMULATOR_HOST")
	if gcsClient != nil && host == gcsHost {
		return gcsClient, nil
	}
	c, err := gcsx.NewClient(context.Background(), gcs.ScopeReadWrite)
	if err != nil {
		if c, err = gcsx.NewUnauthenticatedClient(context.Background()); err != nil {
			return nil, fmt.Errorf("storage: GCS client: %w", err)
		}
	}
	if gcsClient != nil {
		gcsClient.Close()
	}
	gcsClient, gcsHost = c, host
	return c, nil
}

func writeRemoteIf(ctx context.Context, p string, data []byte, c gcs.Conditions) (Gen, error) {
	var g Gen
	err := bounded(ctx, "write", p, func(ctx context.Context) error {
		var err error
		g, err = writeRemoteIfOnce(ctx, p, data, c)
		return err
	})
	if err == nil {
		Changed(p)
	}
	return g, err
}

func writeRemoteIfOnce(ctx context.Context, p string, data []byte, c gcs.Conditions) (Gen, error) {
	o, err := remoteObject(ctx, p)
	if err != nil {
		return Gen{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := o.If(c).NewWriter(wctx)
	w.ChunkSize = 0 // one request: the object appears whole or not at all
	if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
		cancel()
		w.Close()
		return Gen{}, fmt.Errorf("storage: write %s: %w", p, err)
	}
	if err := w.Close(); err != nil {
		if isPreconditionFailed(err) {
			return Gen{}, fmt.Errorf("storage: write %s: %w", p, ErrPrecondition)
		}
		return Gen{}, wrapRemote("write", p, err)
	}
	return Gen{remote: w.Attrs().Generation}, nil
}

func isPreconditionFailed(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusPreconditionFailed
}
