// Package runlease gives a run directory one writer at a time.
//
// The command that owns a run (aipo train, aipo demo, aipo rollout, aipo
// learn) acquires the lease once, before it writes anything into the run
// directory, and hands it down in its context; the layers below take no
// lease of their own: they refuse to start without it (Require) and check
// it before every commit (Check). The lease is the file
// <run>/_LEASE.json, created only if absent and renewed by compare-and-swap
// (object generation preconditions on gs://, see storage.ReplaceIf), so
// that two writers on two machines cannot both hold it. The holder renews
// it every Timeout/4; a lease not renewed for Timeout is stale and the next
// writer takes it over. A lease whose holder ran on this host and whose
// process has exited is stale at once, so a run killed with SIGKILL starts
// again without waiting. --take-over takes a lease that still looks alive
// (its holder's machine is gone, say).
//
// Every commit of the run (a step's manifest, a checkpoint) calls Check
// first, from wherever it runs (a Beam worker included): the lease must
// still name the committing attempt. If it names another, the commit is
// refused and nothing is written or deleted.
//
// _LEASE.json holds wall-clock times (acquired_at, renewed_at): they are
// the only time stamps in a run directory besides measured durations, and
// the file is removed when its holder ends cleanly.
package runlease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aipo-rl/aipo/internal/storage"
)

// Name is the lease file of a run directory.
const Name = "_LEASE.json"

// DefaultTimeout is how long a lease lives without renewal.
const DefaultTimeout = 2 * time.Minute

// Holder is what the lease file says about its holder.
type Holder struct {
	// ID names the attempt: random, fresh for every acquisition.
	ID string `json:"id"`
	// Host is the holder's host tag (storage.HostTag), HostName its name.
	Host     string `json:"host"`
	HostName string `json:"host_name,omitempty"`
	PID      int    `json:"pid"`
	Command  string `json:"command,omitempty"`
	// AcquiredAt and RenewedAt are wall-clock times (UTC).
	AcquiredAt time.Time `json:"acquired_at"`
	RenewedAt  time.Time `json:"renewed_at"`
	// TimeoutSeconds is how long after RenewedAt the lease is stale.
	TimeoutSeconds float64 `json:"timeout_seconds"`
}

func (h Holder) timeout() time.Duration {
	return time.Duration(h.TimeoutSeconds * float64(time.Second))
}

// stale reports whether the lease can be taken over without --take-over,
// and why.
func (h Holder) stale(now time.Time) (bool, string) {
	if h.Host == storage.HostTag() && h.PID > 0 && !storage.ProcessAlive(h.PID) {
		return true, fmt.Sprintf("its process %d on this host has exited", h.PID)
	}
	if age := now.Sub(h.RenewedAt); age > h.timeout() {
		return true, fmt.Sprintf("it was last renewed %s ago, past its %s timeout", age.Round(time.Second), h.timeout())
	}
	return false, ""
}

func (h Holder) String() string {
	host := h.HostName
	if host == "" {
		host = "host " + h.Host
	}
	cmd := ""
	if h.Command != "" {
		cmd = " (" + h.Command + ")"
	}
	return fmt.Sprintf("process %d on %s%s, attempt %s", h.PID, host, cmd, h.ID)
}

// NotHeldError is returned by Require when the context does not carry the
// lease of the run directory.
type NotHeldError struct {
	Dir string
}

func (e *NotHeldError) Error() string {
	return fmt.Sprintf("run directory %s: the run's lease (%s) is not held by this process; "+
		"the command that owns the run takes it once, before anything writes there (train.Claim), and passes it down in the context", e.Dir, Name)
}

// HeldError is returned by Acquire when another writer holds the lease.
type HeldError struct {
	Dir     string
	Holder  Holder
	Renewed time.Duration // how long ago the holder last renewed
}

func (e *HeldError) Error() string {
	left := e.Holder.timeout() - e.Renewed
	return fmt.Sprintf("run directory %s is in use by %s, last renewed %s ago; only one writer may use a run directory at a time. "+
		"If that writer is still running, wait for it or stop it. If it is gone, the lease goes stale %s from now and the next start takes it over, "+
		"or start again with --take-over now",
		e.Dir, e.Holder, e.Renewed.Round(time.Second), left.Round(time.Second))
}

// LostError is returned by Check (and by the renewal) when the lease no
// longer names this attempt.
type LostError struct {
	Dir string
	ID  string
	Now *Holder // the holder now, nil when there is none
}

func (e *LostError) Error() string {
	if e.Now == nil {
		return fmt.Sprintf("run directory %s: this writer (attempt %s) no longer holds its lease (%s is gone); nothing was committed. Start the run again", e.Dir, e.ID, Name)
	}
	return fmt.Sprintf("run directory %s: this writer (attempt %s) lost its lease to %s; nothing was committed. The other writer now owns the run", e.Dir, e.ID, *e.Now)
}

// Options tune Acquire.
type Options struct {
	// Timeout is how long the lease lives without renewal (DefaultTimeout
	// when zero).
	Timeout time.Duration
	// TakeOver takes the lease even from a holder that looks alive.
	TakeOver bool
	// Command names the holder in messages ("aipo train").
	Command string
	// Log receives one line when a stale lease is taken over; nil drops it.
	Log func(string)
}

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	dir, path string
	holder    Holder

	mu      sync.Mutex
	gen     storage.Gen
	lost    error
	stop    chan struct{}
	stopped chan struct{}
	cancel  context.CancelCauseFunc
	once    sync.Once
}

// Token identifies a held lease to a commit that runs elsewhere (a Beam
// worker): the lease file's path and the attempt's ID.
type Token struct {
	Path string `json:"path"`
	ID   string `json:"id"`
}

// IsZero reports whether t names no lease.
func (t Token) IsZero() bool { return t.Path == "" }

// Path is the lease file of runDir.
func Path(runDir string) string { return storage.Join(runDir, Name) }

// Acquire takes the lease of runDir for this process and starts renewing
// it. The returned context is ctx, cancelled (with the *LostError as its
// cause) if the lease is lost, and carrying the lease for FromContext.
// Release it when done.
func Acquire(ctx context.Context, runDir string, o Options) (*Lease, context.Context, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, nil, err
	}
	hn, _ := os.Hostname()
	now := time.Now().UTC()
	l := &Lease{dir: runDir, path: Path(runDir), holder: Holder{
		ID: hex.EncodeToString(idb[:]), Host: storage.HostTag(), HostName: hn, PID: os.Getpid(), Command: o.Command,
		AcquiredAt: now, RenewedAt: now, TimeoutSeconds: o.Timeout.Seconds(),
	}}
	data, err := l.encode()
	if err != nil {
		return nil, nil, err
	}
	// A few rounds: another writer may take or drop the lease between our
	// read and our write.
	for round := 0; ; round++ {
		if round == 8 {
			return nil, nil, fmt.Errorf("run directory %s: the lease changed hands 8 times while this writer tried to take it; is another writer starting in a loop?", runDir)
		}
		err := storage.CreateExclusive(ctx, l.path, data)
		if err == nil {
			if _, l.gen, err = storage.ReadGen(ctx, l.path); err != nil {
				return nil, nil, fmt.Errorf("run directory %s: read back its lease: %w", runDir, err)
			}
			break
		}
		if !errors.Is(err, storage.ErrExist) {
			return nil, nil, fmt.Errorf("run directory %s: take its lease %s: %w", runDir, l.path, err)
		}
		b, gen, err := storage.ReadGen(ctx, l.path)
		if errors.Is(err, storage.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, nil, fmt.Errorf("run directory %s: read its lease %s: %w", runDir, l.path, err)
		}
		var cur Holder
		reason := ""
		if jerr := json.Unmarshal(b, &cur); jerr != nil || cur.ID == "" {
			reason = "the lease file is unreadable"
		} else if ok, why := cur.stale(time.Now()); ok {
			reason = why
		} else if o.TakeOver {
			reason = "--take-over was given"
		} else {
			return nil, nil, &HeldError{Dir: runDir, Holder: cur, Renewed: time.Since(cur.RenewedAt)}
		}
		g, err := storage.ReplaceIf(ctx, l.path, data, gen)
		if errors.Is(err, storage.ErrPrecondition) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("run directory %s: take over its lease %s: %w", runDir, l.path, err)
		}
		l.gen = g
		if o.Log != nil && cur.ID != "" {
			o.Log(fmt.Sprintf("run directory %s: took over the lease of %s (%s)", runDir, cur, reason))
		}
		break
	}
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, ctxKey{}, l))
	l.cancel = cancel
	l.stop, l.stopped = make(chan struct{}), make(chan struct{})
	go l.renewLoop(o.Timeout / 4)
	return l, lctx, nil
}

func (l *Lease) encode() ([]byte, error) {
	b, err := json.MarshalIndent(l.holder, "", "  ")
	return append(b, '\n'), err
}

// Token identifies the lease to commits that run elsewhere.
func (l *Lease) Token() Token { return Token{Path: l.path, ID: l.holder.ID} }

// ID is the attempt's ID.
func (l *Lease) ID() string { return l.holder.ID }

func (l *Lease) renewLoop(every time.Duration) {
	defer close(l.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if err := l.renew(); err != nil {
			var lost *LostError
			if errors.As(err, &lost) {
				l.cancel(err)
				return
			}
			// A transient failure (the store did not answer): try again at
			// the next tick; the lease lives Timeout, four ticks.
		}
	}
}

// renew extends the lease by one timeout.
func (l *Lease) renew() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.holder.timeout()/4)
	defer cancel()
	h := l.holder
	h.RenewedAt = time.Now().UTC()
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	g, err := storage.ReplaceIf(ctx, l.path, append(b, '\n'), l.gen)
	if errors.Is(err, storage.ErrPrecondition) {
		l.lost = l.lostNow(ctx)
		return l.lost
	}
	if err != nil {
		return err
	}
	l.holder, l.gen = h, g
	return nil
}

func (l *Lease) lostNow(ctx context.Context) error {
	e := &LostError{Dir: l.dir, ID: l.holder.ID}
	if b, _, err := storage.ReadGen(ctx, l.path); err == nil {
		var h Holder
		if json.Unmarshal(b, &h) == nil && h.ID != "" {
			e.Now = &h
		}
	}
	return e
}

// Check returns nil if l still holds its lease (the file names it).
func (l *Lease) Check(ctx context.Context) error {
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	return Check(ctx, l.Token())
}

// Release stops the renewal and removes the lease file if it still names
// this attempt. It is safe to call more than once.
func (l *Lease) Release() error {
	var err error
	l.once.Do(func() {
		close(l.stop)
		<-l.stopped
		l.cancel(context.Canceled)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lost != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if e := storage.RemoveIf(ctx, l.path, l.gen); e != nil && !errors.Is(e, storage.ErrPrecondition) {
			err = fmt.Errorf("run directory %s: release its lease: %w", l.dir, e)
		}
	})
	return err
}

// Check returns nil if the lease file named by t names t's attempt, and a
// *LostError otherwise. A zero token checks nothing.
func Check(ctx context.Context, t Token) error {
	if t.IsZero() {
		return nil
	}
	dir := storage.Dir(t.Path)
	b, _, err := storage.ReadGen(ctx, t.Path)
	if errors.Is(err, storage.ErrNotExist) {
		return &LostError{Dir: dir, ID: t.ID}
	}
	if err != nil {
		return fmt.Errorf("run directory %s: read its lease before committing: %w", dir, err)
	}
	var h Holder
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("run directory %s: its lease %s is unreadable: %w", dir, t.Path, err)
	}
	if h.ID != t.ID {
		return &LostError{Dir: dir, ID: t.ID, Now: &h}
	}
	return nil
}

type ctxKey struct{}

// FromContext returns the lease that Acquire put in ctx, or nil.
func FromContext(ctx context.Context) *Lease {
	l, _ := ctx.Value(ctxKey{}).(*Lease)
	return l
}

// TokenFrom is the token of the lease in ctx, zero if there is none.
func TokenFrom(ctx context.Context) Token {
	if l := FromContext(ctx); l != nil {
		return l.Token()
	}
	return Token{}
}

// CheckContext checks the lease in ctx, if any.
func CheckContext(ctx context.Context) error {
	if l := FromContext(ctx); l != nil {
		return l.Check(ctx)
	}
	return nil
}

// Require returns nil if ctx carries the lease of runDir and this process
// has not lost it; a *NotHeldError when ctx carries no lease of runDir, a
// *LostError when the renewal found it taken. It reads nothing: the layers
// below the owning command call it before they write anything, and the
// commits check the lease file itself (Check).
func Require(ctx context.Context, runDir string) error {
	if !Held(ctx, runDir) {
		return &NotHeldError{Dir: runDir}
	}
	l := FromContext(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Held reports whether ctx carries the lease of runDir.
func Held(ctx context.Context, runDir string) bool {
	l := FromContext(ctx)
	return l != nil && sameDir(l.dir, runDir)
}

func sameDir(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}
