package collective

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func quick() Options {
	return Options{RendezvousTimeout: 2 * time.Second, Heartbeat: 100 * time.Millisecond, StaleAfter: 400 * time.Millisecond, CloseTimeout: 2 * time.Second}
}

// joinAll joins the given ranks concurrently, each with its own world size.
func joinAll(t *testing.T, port int, sizes map[int]int) (map[int]*Group, map[int]error) {
	var mu sync.Mutex
	groups, errs := map[int]*Group{}, map[int]error{}
	var wg sync.WaitGroup
	for r, n := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := Join(context.Background(), Env{Rank: r, WorldSize: n, MasterAddr: "127.0.0.1", MasterPort: port}, quick())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[r] = err
			} else {
				groups[r] = g
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, g := range groups {
			go g.Close()
		}
	})
	return groups, errs
}

func TestJoinAndHealth(t *testing.T) {
	gs, errs := joinAll(t, freePort(t), map[int]int{0: 3, 1: 3, 2: 3})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	states, err := gs[1].Health()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Gone || s.SinceBeat < 0 || s.SinceBeat > time.Second {
			t.Fatalf("after join: %+v", s)
		}
	}
	// A rank that dies (its connections close without Close) is named.
	gs[2].stopHeartbeat()
	gs[2].closeConns()
	sus := gs[1].Suspects(2 * time.Second)
	if len(sus) != 1 || sus[0].Rank != 2 || !sus[0].Gone || !strings.Contains(sus[0].String(), "rank 2 exited") {
		t.Fatalf("suspects %v, want rank 2 gone", sus)
	}
	// A failure reported by a rank is named too.
	gs[0].ReportFailure(errors.New("out of memory"))
	sus = gs[1].Suspects(0)
	if len(sus) != 2 || sus[1].Rank != 0 || !strings.Contains(sus[1].String(), "out of memory") {
		t.Fatalf("suspects %v, want rank 2 gone then rank 0's failure", sus)
	}
}

func TestJoinStalledRankIsNamed(t *testing.T) {
	gs, errs := joinAll(t, freePort(t), map[int]int{0: 2, 1: 2})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	gs[1].stopHeartbeat() // alive but silent, as a stopped process is
	start := time.Now()
	sus := gs[0].Suspects(3 * time.Second)
	if len(sus) != 1 || sus[0].Rank != 1 || sus[0].Gone || !strings.Contains(sus[0].String(), "rank 1 stopped answering (last heartbeat") {
		t.Fatalf("suspects %v", sus)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("naming took %s with StaleAfter 400 ms", took)
	}
}

func TestJoinMissingRank(t *testing.T) {
	start := time.Now()
	_, errs := joinAll(t, freePort(t), map[int]int{0: 4, 1: 4, 3: 4})
	for _, r := range []int{0, 1, 3} {
		var re *RendezvousError
		if !errors.As(errs[r], &re) || !errors.Is(errs[r], ErrRendezvous) {
			t.Fatalf("rank %d: %v, want a *RendezvousError", r, errs[r])
		}
		if fmt.Sprint(re.Missing) != "[2]" || !strings.Contains(re.Error(), "rank 2 did not arrive within 2s") {
			t.Fatalf("rank %d: %v", r, re)
		}
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("took %s for a 2 s bound", took)
	}
}

func TestJoinRankZeroMissing(t *testing.T) {
	_, errs := joinAll(t, freePort(t), map[int]int{1: 2})
	var re *RendezvousError
	if !errors.As(errs[1], &re) || fmt.Sprint(re.Missing) != "[0]" || !strings.Contains(re.Error(), "rank 0") {
		t.Fatalf("got %v, want rank 0 named", errs[1])
	}
}

func TestJoinWorldSizeMismatch(t *testing.T) {
	port := freePort(t)
	var g0 *Group
	var err0 error
	done := make(chan struct{})
	go func() {
		g0, err0 = Join(context.Background(), Env{Rank: 0, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port}, quick())
		close(done)
	}()
	_, err := Join(context.Background(), Env{Rank: 1, WorldSize: 3, MasterAddr: "127.0.0.1", MasterPort: port}, quick())
	if err == nil || !strings.Contains(err.Error(), "WORLD_SIZE=3 on rank 1, but rank 0's store holds WORLD_SIZE=2") {
		t.Fatalf("got %v", err)
	}
	<-done
	if g0 != nil {
		g0.Close()
	}
	if err0 == nil || !strings.Contains(err0.Error(), "rank 1 did not arrive") {
		t.Fatalf("rank 0: got %v, want rank 1 missing", err0)
	}
}

func TestJoinDuplicateRank(t *testing.T) {
	port := freePort(t)
	gs, errs := joinAll(t, port, map[int]int{0: 2, 1: 2})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	_ = gs
	_, err := Join(context.Background(), Env{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port}, quick())
	if err == nil || !strings.Contains(err.Error(), "RANK=1 is already checked in by another process") {
		t.Fatalf("got %v, want the second RANK=1 refused", err)
	}
}
