package runlease

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/testtools"
)

// places are a local run directory and one on an in-process fake GCS server
// (127.0.0.1).
func places(t *testing.T) map[string]string {
	t.Helper()
	testtools.InProcessGCS(t, "runs")
	return map[string]string{"local": t.TempDir(), "gcs": "gs://runs/" + strings.ReplaceAll(t.Name(), "/", "_")}
}

func writeHolder(t *testing.T, dir string, h Holder) {
	t.Helper()
	b, _ := json.Marshal(h)
	if err := storage.CreateExclusive(context.Background(), Path(dir), b); err != nil {
		t.Fatal(err)
	}
}

func TestOneWriterAtATime(t *testing.T) {
	ctx := context.Background()
	for name, dir := range places(t) {
		t.Run(name, func(t *testing.T) {
			a, actx, err := Acquire(ctx, dir, Options{Command: "aipo train", Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = Acquire(ctx, dir, Options{Command: "aipo train"})
			var held *HeldError
			if !errors.As(err, &held) {
				t.Fatalf("second Acquire: %v, want a *HeldError", err)
			}
			msg := err.Error()
			for _, want := range []string{dir, "aipo train", a.ID(), "--take-over", "stale"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal does not name %q: %s", want, msg)
				}
			}
			if err := a.Check(ctx); err != nil {
				t.Fatalf("the holder's Check: %v", err)
			}
			// --take-over wins, and the first holder finds out: its commit
			// check fails and its context is cancelled at the next renewal.
			b, _, err := Acquire(ctx, dir, Options{TakeOver: true, Timeout: time.Minute})
			if err != nil {
				t.Fatalf("Acquire with TakeOver: %v", err)
			}
			defer b.Release()
			var lost *LostError
			if err := Check(ctx, a.Token()); !errors.As(err, &lost) || lost.Now == nil || lost.Now.ID != b.ID() {
				t.Fatalf("old holder's Check after the take-over: %v, want a *LostError naming %s", err, b.ID())
			}
			if err := a.renew(); !errors.As(err, &lost) {
				t.Fatalf("old holder's renewal after the take-over: %v, want a *LostError", err)
			}
			a.cancel(a.lost)
			if cause := context.Cause(actx); !errors.As(cause, &lost) {
				t.Errorf("old holder's context: cause %v, want the *LostError", cause)
			}
			// The old holder's release leaves the new lease alone.
			if err := a.Release(); err != nil {
				t.Fatal(err)
			}
			if err := b.Check(ctx); err != nil {
				t.Fatalf("new holder lost its lease to the old one's release: %v", err)
			}
			if err := b.Release(); err != nil {
				t.Fatal(err)
			}
			if ok, _ := storage.Exists(ctx, Path(dir)); ok {
				t.Errorf("%s still exists after the holder released it", Path(dir))
			}
		})
	}
}

func TestStaleLeasesAreTakenOver(t *testing.T) {
	ctx := context.Background()
	for name, dir := range places(t) {
		t.Run(name, func(t *testing.T) {
			now := time.Now().UTC()
			// A holder on this host whose process has exited: stale at once.
			writeHolder(t, dir, Holder{ID: "dead", Host: storage.HostTag(), PID: testtools.ExitedPID(t), AcquiredAt: now, RenewedAt: now, TimeoutSeconds: 3600})
			var logs []string
			l, _, err := Acquire(ctx, dir, Options{Log: func(s string) { logs = append(logs, s) }})
			if err != nil {
				t.Fatalf("Acquire over a dead local holder: %v", err)
			}
			if len(logs) != 1 || !strings.Contains(logs[0], "has exited") {
				t.Errorf("take-over notice %q, want one line saying the holder exited", logs)
			}
			l.Release()
			// A holder on another host, renewed within its timeout: held;
			// renewed longer ago than its timeout: stale.
			writeHolder(t, dir, Holder{ID: "far", Host: "00000000", HostName: "elsewhere", PID: 1, AcquiredAt: now, RenewedAt: now, TimeoutSeconds: 60})
			if _, _, err := Acquire(ctx, dir, Options{}); err == nil || !strings.Contains(err.Error(), "elsewhere") {
				t.Fatalf("Acquire over a live remote holder: %v, want a refusal naming its host", err)
			}
			storage.Remove(ctx, Path(dir))
			writeHolder(t, dir, Holder{ID: "far", Host: "00000000", PID: 1, AcquiredAt: now.Add(-time.Hour), RenewedAt: now.Add(-2 * time.Minute), TimeoutSeconds: 60})
			l, _, err = Acquire(ctx, dir, Options{})
			if err != nil {
				t.Fatalf("Acquire over a lease not renewed past its timeout: %v", err)
			}
			l.Release()
		})
	}
}

// The holder renews its lease: a lease held far longer than its timeout
// stays held.
func TestRenewal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, lctx, err := Acquire(ctx, dir, Options{Timeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	time.Sleep(1500 * time.Millisecond)
	if lctx.Err() != nil {
		t.Fatalf("the holder's context ended: %v", context.Cause(lctx))
	}
	if _, _, err := Acquire(ctx, dir, Options{}); err == nil {
		t.Fatal("a lease renewed by a live holder was taken over")
	}
	b, _, _ := storage.ReadGen(ctx, Path(dir))
	var h Holder
	json.Unmarshal(b, &h)
	if !h.RenewedAt.After(h.AcquiredAt) {
		t.Errorf("renewed_at %s is not after acquired_at %s", h.RenewedAt, h.AcquiredAt)
	}
}

// Require passes only under the lease of the directory asked about, and
// fails once the lease is lost.
func TestRequire(t *testing.T) {
	ctx := context.Background()
	dir, other := t.TempDir(), t.TempDir()
	var notHeld *NotHeldError
	if err := Require(ctx, dir); !errors.As(err, &notHeld) || notHeld.Dir != dir || !strings.Contains(err.Error(), "not held by this process") {
		t.Fatalf("Require without a lease: %v, want a *NotHeldError naming %s", err, dir)
	}
	l, lctx, err := Acquire(ctx, dir, Options{Timeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := Require(lctx, dir); err != nil {
		t.Fatalf("Require under the lease: %v", err)
	}
	if err := Require(lctx, dir+"/"); err != nil {
		t.Fatalf("Require of the same directory with a trailing slash: %v", err)
	}
	if err := Require(lctx, other); !errors.As(err, &notHeld) || notHeld.Dir != other {
		t.Fatalf("Require of another directory under this one's lease: %v, want a *NotHeldError naming %s", err, other)
	}
	thief, _, err := Acquire(ctx, dir, Options{TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	defer thief.Release()
	<-lctx.Done() // the renewal finds the lease taken
	var lost *LostError
	if err := Require(lctx, dir); !errors.As(err, &lost) {
		t.Fatalf("Require after the lease was taken over: %v, want a *LostError", err)
	}
}
