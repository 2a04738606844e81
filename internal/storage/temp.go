package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem"
)

// Temporary files are named after their owner so that a later process can
// tell a dead writer's leftovers from a live writer's work in progress:
//
//	.<base>.tmp-<pid>@<host>-<random>
//
// where host is 8 hex digits of the host name's sha256. TempName gives the
// os.CreateTemp pattern; SweepTemps removes the leftovers.

// tempMark separates a temporary file's base from its owner.
const tempMark = ".tmp-"

var (
	hostOnce sync.Once
	hostTag  string
)

// HostTag is the short, file-name-safe tag of this host used in temporary
// names and leases.
func HostTag() string {
	hostOnce.Do(func() {
		h, _ := os.Hostname()
		s := sha256.Sum256([]byte(h))
		hostTag = hex.EncodeToString(s[:4])
	})
	return hostTag
}

// TempOwner is this process's owner tag, "<pid>@<host>".
func TempOwner() string { return strconv.Itoa(os.Getpid()) + "@" + HostTag() }

// TempName is the os.CreateTemp pattern of a temporary file (or
// directory) that will be renamed to base: ".<base>.tmp-<owner>-*".
func TempName(base string) string { return "." + base + tempMark + TempOwner() + "-*" }

// IsTemp reports whether a file name is a temporary of this package's
// naming, or of the older ".tmp-<random>" forms still found in run
// directories written by earlier builds.
func IsTemp(name string) bool {
	return strings.Contains(name, tempMark) || strings.HasPrefix(name, ".tmp-")
}

// tempOwner parses the owner of a temporary name; ok is false for names
// without one (older builds).
func tempOwner(name string) (pid int, host string, ok bool) {
	i := strings.LastIndex(name, tempMark)
	if i < 0 {
		if !strings.HasPrefix(name, ".tmp-") {
			return 0, "", false
		}
		i = 0
		name = name[len(".tmp-"):]
	} else {
		name = name[i+len(tempMark):]
	}
	at := strings.IndexByte(name, '@')
	dash := strings.IndexByte(name, '-')
	if at <= 0 || dash < at {
		return 0, "", false
	}
	pid, err := strconv.Atoi(name[:at])
	if err != nil {
		return 0, "", false
	}
	return pid, name[at+1 : dash], true
}

// ProcessAlive reports whether a process of this host with the given pid
// exists (signal 0 reaches it, or it exists but belongs to someone else).
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// deadTemp decides whether the temporary name, last modified at mod, was
// left by a writer that is gone: this host's temporaries whose process has
// exited; any other once older than staleAfter. A temporary of this very
// process is never dead.
func deadTemp(name string, mod time.Time, staleAfter time.Duration) bool {
	pid, host, ok := tempOwner(name)
	if ok && host == HostTag() {
		if pid == os.Getpid() {
			return false
		}
		if !ProcessAlive(pid) {
			return true
		}
	}
	return time.Since(mod) > staleAfter
}

// SweepTemps removes the temporary files and directories under root that
// dead writers left (see deadTemp), and returns what it removed. Under the
// sub-directories named in owned (relative to root), which only the caller
// writes, every temporary not of this process is removed whatever its age.
func SweepTemps(ctx context.Context, root string, staleAfter time.Duration, owned ...string) ([]string, error) {
	rule := sweepRule{staleAfter: staleAfter, owned: owned}
	if !IsRemote(root) {
		return sweepLocal(root, rule)
	}
	return sweepRemote(ctx, root, rule)
}

// sweepRule decides which temporaries a sweep removes.
type sweepRule struct {
	staleAfter time.Duration
	owned      []string // patterns of root's sub-directories only the caller writes
}

// inOwned reports whether rel (relative to the sweep's root) lies in an
// owned sub-directory.
func (r sweepRule) inOwned(rel string) bool {
	for _, o := range r.owned {
		if ok, _ := filepath.Match(o, strings.SplitN(filepath.ToSlash(rel), "/", 2)[0]); ok {
			return true
		}
	}
	return false
}

// dead reports whether the file name at rel, last modified at mod, is a
// temporary to remove: in an owned sub-directory any not of this process,
// elsewhere one deadTemp finds dead.
func (r sweepRule) dead(rel, name string, mod time.Time) bool {
	if !IsTemp(name) {
		return false
	}
	if r.inOwned(rel) {
		pid, host, ok := tempOwner(name)
		return !(ok && host == HostTag() && pid == os.Getpid())
	}
	return deadTemp(name, mod, r.staleAfter)
}

// sweepLocal is SweepTemps on a local root: a dead temporary directory
// goes whole, without a walk inside it.
func sweepLocal(root string, rule sweepRule) ([]string, error) {
	var removed []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if p == root {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		rel, _ := filepath.Rel(root, p)
		if !rule.dead(rel, d.Name(), info.ModTime()) {
			return nil
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("storage: remove leftover %s: %w", p, err)
		}
		removed = append(removed, p)
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	return removed, err
}

// sweepRemote is SweepTemps on an object store: it lists every object
// under root and removes the dead ones. Where the store gives no
// modification times, a temporary's age counts as unknown (the zero time).
func sweepRemote(ctx context.Context, root string, rule sweepRule) ([]string, error) {
	fsys, err := remoteFS(ctx, root)
	if err != nil {
		return nil, err
	}
	defer fsys.Close()
	var all []string
	err = bounded(ctx, "list", root, func(ctx context.Context) error {
		var err error
		if all, err = fsys.List(ctx, Join(root, "**")); err != nil {
			return fmt.Errorf("storage: list %s: %w", root, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var removed []string
	prefix := strings.TrimSuffix(root, "/") + "/"
	for _, p := range all {
		rel := strings.TrimPrefix(p, prefix)
		mod, err := lastModified(ctx, fsys, p)
		if err != nil {
			return removed, err
		}
		if !rule.dead(rel, path.Base(rel), mod) {
			continue
		}
		if err := Remove(ctx, p); err != nil {
			return removed, fmt.Errorf("storage: remove leftover %s: %w", p, err)
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// lastModified is when object p was last modified, the zero time where
// fsys cannot tell or the look-up fails; the error is non-nil only when
// the look-up timed out.
func lastModified(ctx context.Context, fsys filesystem.Interface, p string) (time.Time, error) {
	lm, ok := fsys.(filesystem.LastModifiedGetter)
	if !ok {
		return time.Time{}, nil
	}
	var mod time.Time
	err := bounded(ctx, "stat", p, func(ctx context.Context) error {
		t, err := lm.LastModified(ctx, p)
		if err == nil {
			mod = t
		}
		return err
	})
	var te *TimeoutError
	if errors.As(err, &te) {
		return time.Time{}, err
	}
	return mod, nil
}
