package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// condPlaces are the two kinds of place the conditional writes must work
// on: a local directory and a prefix in an in-process fake GCS server
// (127.0.0.1), which implements the generation preconditions.
func condPlaces(t *testing.T) map[string]string {
	t.Helper()
	testtools.InProcessGCS(t, "cond")
	return map[string]string{"local": t.TempDir(), "gcs": "gs://cond/" + strings.ReplaceAll(t.Name(), "/", "_")}
}

func TestConditionalWrites(t *testing.T) {
	ctx := context.Background()
	for name, root := range condPlaces(t) {
		t.Run(name, func(t *testing.T) {
			p := Join(root, "lease.json")
			if err := CreateExclusive(ctx, p, []byte("one")); err != nil {
				t.Fatal(err)
			}
			if err := CreateExclusive(ctx, p, []byte("two")); !errors.Is(err, ErrExist) {
				t.Fatalf("second CreateExclusive: %v, want ErrExist", err)
			}
			b, g1, err := ReadGen(ctx, p)
			if err != nil || string(b) != "one" {
				t.Fatalf("ReadGen: %q %v, want the first writer's content", b, err)
			}
			g2, err := ReplaceIf(ctx, p, []byte("three"), g1)
			if err != nil {
				t.Fatalf("ReplaceIf at the read generation: %v", err)
			}
			// A writer still holding the old generation loses, and changes
			// nothing.
			if _, err := ReplaceIf(ctx, p, []byte("stale"), g1); !errors.Is(err, ErrPrecondition) {
				t.Fatalf("ReplaceIf at a stale generation: %v, want ErrPrecondition", err)
			}
			if err := RemoveIf(ctx, p, g1); err != nil && !errors.Is(err, ErrPrecondition) {
				t.Fatalf("RemoveIf at a stale generation: %v, want nil or ErrPrecondition", err)
			}
			if b, _, _ := ReadGen(ctx, p); string(b) != "three" {
				t.Fatalf("after the lost races the file holds %q, want %q", b, "three")
			}
			if _, err := ReplaceIf(ctx, p, []byte("x"), Gen{}); !errors.Is(err, ErrPrecondition) {
				t.Fatalf("ReplaceIf(zero Gen) of an existing file: %v, want ErrPrecondition", err)
			}
			if err := RemoveIf(ctx, p, g2); err != nil {
				t.Fatalf("RemoveIf at the current generation: %v", err)
			}
			if _, _, err := ReadGen(ctx, p); !errors.Is(err, ErrNotExist) {
				t.Fatalf("after RemoveIf: %v, want ErrNotExist", err)
			}
			if err := RemoveIf(ctx, p, g2); err != nil {
				t.Fatalf("RemoveIf of a file already gone: %v", err)
			}
		})
	}
}

// Many writers race to create one file and then to replace it from the
// same generation: exactly one wins each race.
func TestConditionalWritesRace(t *testing.T) {
	ctx := context.Background()
	for name, root := range condPlaces(t) {
		t.Run(name, func(t *testing.T) {
			p := Join(root, "race.json")
			const n = 16
			var wg sync.WaitGroup
			wins := make(chan int, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := CreateExclusive(ctx, p, []byte{byte('a' + i)}); err == nil {
						wins <- i
					} else if !errors.Is(err, ErrExist) {
						t.Errorf("writer %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			close(wins)
			if len(wins) != 1 {
				t.Fatalf("%d writers created the file, want exactly 1", len(wins))
			}
			_, g, err := ReadGen(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			wins = make(chan int, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := ReplaceIf(ctx, p, []byte{byte('A' + i)}, g); err == nil {
						wins <- i
					} else if !errors.Is(err, ErrPrecondition) {
						t.Errorf("writer %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			close(wins)
			if len(wins) != 1 {
				t.Fatalf("%d writers replaced the file from one generation, want exactly 1", len(wins))
			}
		})
	}
}

func TestSweepTemps(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	// A process that has exited: its pid names a dead owner.
	dead := testtools.ExitedPID(t)
	files := map[string]bool{ // path -> removed by the sweep
		"metrics/.eval-000002.json" + tempMark + strconv.Itoa(dead) + "@" + HostTag() + "-77": true,  // dead local writer
		"metrics/.learn-000001.json" + tempMark + TempOwner() + "-1":                          false, // this process
		"report/.report.md" + tempMark + strconv.Itoa(os.Getppid()) + "@" + HostTag() + "-5":  false, // a live process, young
		"report/.report.md.tmp-123456":                     false, // older build, young
		"step-000003/shards/.tmp-0123456789abcdef.parquet": true,  // owned area: any attempt but ours
		"step-000003/._MANIFEST.json.tmp-99":               true,
		"step-000003/shards/part-0123.parquet":             false, // not a temporary
		"metrics.jsonl":                                    false,
		"checkpoints/step-000004/model.safetensors":        false,
	}
	for p := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A checkpoint's temporary directory, with files inside.
	ckTmp := filepath.Join(root, "checkpoints", ".step-000005"+tempMark+"1@ffffffff-9")
	os.MkdirAll(ckTmp, 0o755)
	os.WriteFile(filepath.Join(ckTmp, "model.safetensors"), []byte("x"), 0o644)
	removed, err := SweepTemps(ctx, root, 3600e9, "checkpoints", "step-*")
	if err != nil {
		t.Fatal(err)
	}
	for p, gone := range files {
		_, err := os.Stat(filepath.Join(root, p))
		if gone && err == nil {
			t.Errorf("%s was left by a dead writer and is still there", p)
		}
		if !gone && err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if _, err := os.Stat(ckTmp); err == nil {
		t.Errorf("the checkpoint temporary directory %s is still there", ckTmp)
	}
	if len(removed) != 4 {
		t.Errorf("removed %d entries, want 4: %v", len(removed), removed)
	}
}
