package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/model"
)

// paused starts an engine whose scheduler blocks before each step until
// the test lets it go on; it returns the engine and the function that
// releases one step (or all, once closed).
func paused(t *testing.T, m *model.Model, cfg Config) (*Engine, chan struct{}) {
	t.Helper()
	e, err := newEngine(CPU(m), nil, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	e.stepHook = func() { <-gate }
	go e.loop()
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		e.Close()
	})
	return e, gate
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestQueueFull(t *testing.T) {
	e, gate := paused(t, peaked(t, tinyConfig(), 1), Config{MaxBatch: 1, MaxQueue: 2, EOS: []int32{}})
	ctx := testCtx(t)
	type out struct {
		res Result
		err error
	}
	results := make(chan out, 3)
	submit := func() {
		go func() {
			r, err := e.Generate(ctx, Request{Prefix: []int32{1, 2}, Params: sampling.Params{MaxTokens: 3}})
			results <- out{r, err}
		}()
	}
	submit()
	waitFor(t, "the first request to be admitted", func() bool { return e.Stats().Active == 1 })
	submit()
	submit()
	waitFor(t, "two queued requests", func() bool { return e.Stats().Queued == 2 })
	if _, err := e.Generate(ctx, Request{Prefix: []int32{1}}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fourth request with a full queue: %v, want ErrQueueFull", err)
	}
	close(gate)
	for i := 0; i < 3; i++ {
		o := <-results
		if o.err != nil || len(o.res.Tokens) != 3 {
			t.Fatalf("queued request: %d tokens, error %v", len(o.res.Tokens), o.err)
		}
	}
}

func TestCancellation(t *testing.T) {
	cfg := tinyConfig()
	cfg.MaxPositionEmbeddings = 4096
	e, gate := paused(t, peaked(t, cfg, 1), Config{MaxBatch: 1, EOS: []int32{}})
	ctx := testCtx(t)
	// A running request cancelled after its first tokens leaves the batch.
	runCtx, cancelRun := context.WithCancel(ctx)
	errc := make(chan error, 2)
	var streamed int
	go func() {
		_, err := e.GenerateStream(runCtx, Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 4000}}, func(Token) error {
			streamed++
			if streamed == 2 {
				cancelRun()
			}
			return nil
		})
		errc <- err
	}()
	// A queued request cancelled before it is admitted never runs.
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	waitFor(t, "the first request to be admitted", func() bool { return e.Stats().Active == 1 })
	go func() {
		_, err := e.Generate(queuedCtx, Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 4000}})
		errc <- err
	}()
	waitFor(t, "a queued request", func() bool { return e.Stats().Queued == 1 })
	cancelQueued()
	close(gate)
	for i := 0; i < 2; i++ {
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled request returned %v, want context.Canceled", err)
		}
	}
	waitFor(t, "the batch to empty", func() bool { st := e.Stats(); return st.Active == 0 && st.Queued == 0 })
	if g := e.Stats().Generated; g >= 4000 {
		t.Errorf("%d tokens generated: the cancelled request ran to the end", g)
	}
	res, err := e.Generate(ctx, Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 5}})
	if err != nil || len(res.Tokens) != 5 {
		t.Fatalf("request after cancellations: %d tokens, %v", len(res.Tokens), err)
	}
	if _, err := e.Generate(func() context.Context { c, cancel := context.WithCancel(ctx); cancel(); return c }(), Request{Prefix: []int32{1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("request with a cancelled context: %v", err)
	}
}

func TestCloseFailsWaitingRequests(t *testing.T) {
	e, gate := paused(t, peaked(t, tinyConfig(), 1), Config{MaxBatch: 1, EOS: []int32{}})
	errc := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := e.Generate(testCtx(t), Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 5}})
			errc <- err
		}()
	}
	waitFor(t, "one running and one queued request", func() bool { st := e.Stats(); return st.Active == 1 && st.Queued == 1 })
	// Close's first half, then let the scheduler run into it.
	e.closeOnce.Do(func() { close(e.quit) })
	close(gate)
	for i := 0; i < 2; i++ {
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("request of a closing engine returned %v, want ErrClosed", err)
		}
	}
	if _, err := e.Generate(testCtx(t), Request{Prefix: []int32{1}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("request after Close: %v, want ErrClosed", err)
	}
	e.Close()
}

// TestReloadUnderLoad: eight clients send requests while the weights are
// swapped three times; no request fails, and every result equals greedy
// decoding by the weights of the version it names.
func TestReloadUnderLoad(t *testing.T) {
	models := map[int64]*model.Model{}
	for v := int64(1); v <= 4; v++ {
		models[v] = peaked(t, tinyConfig(), uint64(10+v))
	}
	e := start(t, models[1], nil, Config{EOS: []int32{}, MaxBatch: 8})
	ctx := testCtx(t)
	type rec struct {
		prefix []int32
		res    Result
	}
	var mu sync.Mutex
	var recs []rec
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 12; i++ {
				p := []int32{257, int32(c), int32(i), int32(100 + c*i%100)}
				res, err := e.Generate(ctx, Request{Prefix: p, Params: sampling.Params{MaxTokens: 15}})
				if err != nil {
					errs <- fmt.Errorf("client %d request %d: %w", c, i, err)
					return
				}
				mu.Lock()
				recs = append(recs, rec{p, res})
				mu.Unlock()
			}
		}()
	}
	for v := int64(2); v <= 4; v++ {
		waitFor(t, "requests to complete", func() bool { mu.Lock(); defer mu.Unlock(); return len(recs) >= int(v-1)*20 })
		if err := e.Reload(models[v], v); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	byVersion := map[int64]int{}
	for _, r := range recs {
		m := models[r.res.PolicyVersion]
		if m == nil {
			t.Fatalf("result names version %d, which was never loaded", r.res.PolicyVersion)
		}
		byVersion[r.res.PolicyVersion]++
		if want := greedyRecompute(t, m, r.prefix, 15); sameTokens(r.res.Tokens, want) >= 0 {
			t.Fatalf("prefix %v: result of version %d is %v, that version's greedy decoding is %v", r.prefix, r.res.PolicyVersion, r.res.Tokens, want)
		}
	}
	if len(recs) != 96 || byVersion[1] == 0 || byVersion[4] == 0 {
		t.Fatalf("%d results, per version %v; want 96 spread over versions 1 to 4", len(recs), byVersion)
	}
	if got := e.Info().PolicyVersion; got != 4 {
		t.Errorf("Info names version %d after the last reload, want 4", got)
	}
}

// TestInterruptOnReload: with Config.InterruptOnReload, a Reload stops a
// running sequence at the next step; it returns the tokens the old weights
// sampled (finish reason abort, their log-probs the old model's), and the
// request continued from its prefix plus those tokens runs on the new
// weights, whose log-probs it then carries. Without the option the
// sequence finishes on the weights it started with.
func TestInterruptOnReload(t *testing.T) {
	v1, v2 := peaked(t, tinyConfig(), 21), peaked(t, tinyConfig(), 22)
	for _, interrupt := range []bool{true, false} {
		e, gate := paused(t, v1, Config{EOS: []int32{}, MaxBatch: 4, InterruptOnReload: interrupt})
		ctx := testCtx(t)
		prefix := []int32{257, 3, 9, 40}
		done := make(chan Result, 1)
		go func() {
			r, err := e.Generate(ctx, Request{Prefix: prefix, Params: sampling.Params{MaxTokens: 20}, Session: "s"})
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		// Prefill, then four tokens on version 1.
		for range 5 {
			gate <- struct{}{}
		}
		waitFor(t, "four tokens", func() bool { return e.Stats().Generated >= 4 })
		if err := e.Reload(v2, 2); err != nil {
			t.Fatal(err)
		}
		close(gate)
		first := <-done
		if !interrupt {
			if first.FinishReason != sampling.FinishLength || len(first.Tokens) != 20 || first.PolicyVersion != 1 {
				t.Fatalf("without InterruptOnReload: %d tokens, finish %q, version %d; want all 20 on version 1", len(first.Tokens), first.FinishReason, first.PolicyVersion)
			}
			checkLogProbs(t, "uninterrupted, version 1", first.LogProbs, learnerLogProbs(t, v1, prefix, first.Tokens))
			continue
		}
		if first.FinishReason != sampling.FinishAbort || first.PolicyVersion != 1 || len(first.Tokens) < 4 || len(first.Tokens) >= 20 {
			t.Fatalf("interrupted: %d tokens, finish %q, version %d; want 4 to 19 tokens of version 1, finish %q", len(first.Tokens), first.FinishReason, first.PolicyVersion, sampling.FinishAbort)
		}
		if e.Stats().Interrupted != 1 {
			t.Errorf("Stats.Interrupted = %d, want 1", e.Stats().Interrupted)
		}
		checkLogProbs(t, "interrupted part, version 1", first.LogProbs, learnerLogProbs(t, v1, prefix, first.Tokens))
		// Continue by token ids: prefix plus what version 1 sampled.
		cont := append(append([]int32(nil), prefix...), first.Tokens...)
		rest, err := e.Generate(ctx, Request{Prefix: cont, Params: sampling.Params{MaxTokens: 20 - len(first.Tokens)}, Session: "s"})
		if err != nil {
			t.Fatal(err)
		}
		if rest.PolicyVersion != 2 || rest.FinishReason != sampling.FinishLength || len(rest.Tokens) != 20-len(first.Tokens) {
			t.Fatalf("continuation: %d tokens, finish %q, version %d; want the remaining %d on version 2", len(rest.Tokens), rest.FinishReason, rest.PolicyVersion, 20-len(first.Tokens))
		}
		if rest.CachedTokens != 0 {
			t.Errorf("continuation reused %d cached positions of version 1's cache, want none (the new weights recompute the prefix)", rest.CachedTokens)
		}
		checkLogProbs(t, "continuation, version 2", rest.LogProbs, learnerLogProbs(t, v2, cont, rest.Tokens))
	}
}

// TestPinnedVersions: with Config.KeepPrevious, a request that names its
// version (Request.Pinned) is sampled by that version's weights whatever
// the engine serves: one for the next version waits for the Reload that
// brings it, one for the version before the current is served by the
// weights kept, and InterruptOnReload interrupts none of them. A version older than those kept is refused, naming
// the versions held. Each result equals its version's greedy decoding,
// with that version's log-probs.
func TestPinnedVersions(t *testing.T) {
	v1, v2, v3 := peaked(t, tinyConfig(), 31), peaked(t, tinyConfig(), 32), peaked(t, tinyConfig(), 33)
	e := start(t, v1, nil, Config{EOS: []int32{}, MaxBatch: 4, KeepPrevious: true, InterruptOnReload: true})
	ctx := testCtx(t)
	prefix := []int32{257, 5, 8, 13}
	check := func(what string, res Result, m *model.Model, version int64) {
		t.Helper()
		if res.PolicyVersion != version || res.FinishReason != sampling.FinishLength || len(res.Tokens) != 12 {
			t.Fatalf("%s: %d tokens, finish %q, version %d; want 12 of version %d", what, len(res.Tokens), res.FinishReason, res.PolicyVersion, version)
		}
		if want := greedyRecompute(t, m, prefix, 12); sameTokens(res.Tokens, want) >= 0 {
			t.Fatalf("%s: %v, version %d's greedy decoding is %v", what, res.Tokens, version, want)
		}
		checkLogProbs(t, what, res.LogProbs, learnerLogProbs(t, m, prefix, res.Tokens))
	}
	// A request for version 2 waits until it is loaded.
	early := make(chan Result, 1)
	go func() {
		r, err := e.Generate(ctx, Request{Prefix: prefix, Params: sampling.Params{MaxTokens: 12}, Pinned: true, Version: 2})
		if err != nil {
			t.Error(err)
		}
		early <- r
	}()
	select {
	case r := <-early:
		t.Fatalf("a request pinned to version 2 returned before version 2 was loaded: version %d", r.PolicyVersion)
	case <-time.After(50 * time.Millisecond):
	}
	if err := e.Reload(v2, 2); err != nil {
		t.Fatal(err)
	}
	check("pinned to version 2, sent before its Reload", <-early, v2, 2)
	// Version 1 is kept beside version 2.
	res, err := e.Generate(ctx, Request{Prefix: prefix, Params: sampling.Params{MaxTokens: 12}, Pinned: true, Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	check("pinned to version 1 after the Reload to 2", res, v1, 1)
	if err := e.Reload(v3, 3); err != nil {
		t.Fatal(err)
	}
	res, err = e.Generate(ctx, Request{Prefix: prefix, Params: sampling.Params{MaxTokens: 12}, Pinned: true, Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	check("pinned to version 2 after the Reload to 3", res, v2, 2)
	if e.Stats().Interrupted != 0 {
		t.Errorf("Stats.Interrupted = %d, want 0: pinned requests are never interrupted", e.Stats().Interrupted)
	}
	_, err = e.Generate(ctx, Request{Prefix: prefix, Params: sampling.Params{MaxTokens: 12}, Pinned: true, Version: 1})
	if err == nil || !strings.Contains(err.Error(), "holds version 2 and 3") {
		t.Fatalf("request pinned to version 1 with versions 2 and 3 held: %v, want an error naming them", err)
	}
}
