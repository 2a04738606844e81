package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/model"
)

// seq is one request in the engine. The fields below done are owned by the
// scheduler goroutine; res and err are read after done is closed.
type seq struct {
	req       Request
	room      int        // most new tokens
	stream    chan Token // nil unless streaming; capacity room
	done      chan struct{}
	cancelled atomic.Bool
	res       Result
	err       error

	w       *weights
	cache   Cache
	pending []int32 // tokens to feed before the next sample
	one     [1]int32
	rng     *rand.Rand
	text    []byte // decoded output, for stop strings
}

// stopLookback is how many prefix tokens' bytes a request's stop-string
// search starts with.
const stopLookback = 16

// loop is the scheduler: admit, step, repeat, until Close.
func (e *Engine) loop() {
	defer close(e.exited)
	var active []*seq
	smp := newSamplers()
	var logits []float32
	defer func() {
		for _, q := range active {
			e.finish(q, ErrClosed)
		}
	}()
	for {
		if len(active) == 0 {
			e.active.Store(0)
			select {
			case q := <-e.queue:
				active = e.admit(active, q)
			case <-e.quit:
				return
			}
		}
		for len(active) < e.cfg.MaxBatch {
			var q *seq
			select {
			case q = <-e.queue:
			default:
			}
			if q == nil {
				break
			}
			active = e.admit(active, q)
		}
		select {
		case <-e.quit:
			return
		default:
		}
		kept := active[:0]
		cur := e.cur.Load()
		for _, q := range active {
			if q.cancelled.Load() {
				e.finish(q, fmt.Errorf("engine: request cancelled"))
				continue
			}
			if e.cfg.InterruptOnReload && q.w != cur && !q.req.Pinned {
				// Weights were pushed: hand back what the old ones
				// sampled, for the caller to continue on the new.
				q.res.FinishReason = sampling.FinishAbort
				e.interrupted.Add(1)
				e.finish(q, nil)
				continue
			}
			kept = append(kept, q)
		}
		clear(active[len(kept):])
		active = kept
		e.active.Store(int64(len(active)))
		if len(active) > 0 {
			if e.stepHook != nil {
				e.stepHook()
			}
			active = e.step(active, smp, &logits)
		}
	}
}

// admit sets up q's sequence on the current weights, reusing its session's
// cache where the prefix allows, and adds it to active.
func (e *Engine) admit(active []*seq, q *seq) []*seq {
	if q.cancelled.Load() {
		return active // nobody waits for it
	}
	w := q.w // a pinned request's, chosen by Generate
	if w == nil {
		w = e.cur.Load()
	}
	q.w = w
	q.rng = newRNG(q.req.Params.Seed)
	prefix := q.req.Prefix
	if id := q.req.Session; id != "" {
		e.sessions.start(id, q)
		if ent := e.sessions.take(id); ent != nil && ent.version == w.version {
			c := ent.cache
			n := 0
			for n < min(c.Len(), len(prefix)) && c.Tokens()[n] == prefix[n] {
				n++
			}
			// The last prefix token is always fed: its logits give the
			// first sample.
			c.Truncate(min(n, len(prefix)-1))
			q.cache = c
		}
	}
	if q.cache == nil {
		q.cache = w.m.NewCache()
	}
	q.pending = prefix[q.cache.Len():]
	if len(q.req.Params.StopStrings) > 0 && e.tok != nil {
		// The prefix's last bytes, so that a stop string begun in the
		// prefix and completed by the output is found: a call continued
		// after an interruption (Config.InterruptOnReload) may have
		// stopped inside one. Only occurrences ending in a new token's
		// bytes stop generation (record), so one wholly in the prefix
		// does not.
		for _, id := range prefix[max(0, len(prefix)-stopLookback):] {
			q.text = append(q.text, e.tok.TokenBytes(int(id))...)
		}
	}
	q.res = Result{PolicyVersion: w.version, PrefixTokens: len(prefix), CachedTokens: q.cache.Len()}
	e.reused.Add(int64(q.cache.Len()))
	return append(active, q)
}

// step feeds every sequence that takes part its next tokens, samples for
// those whose pending tokens are all fed, and returns the sequences still
// running.
func (e *Engine) step(active []*seq, smp []sampler, logits *[]float32) []*seq {
	type group struct {
		seqs   []*seq
		caches []Cache
		toks   [][]int32
	}
	var order []*weights
	groups := map[*weights]*group{}
	prompt := 0
	for _, q := range active {
		n := len(q.pending)
		if n > 1 {
			n = min(n, e.cfg.PrefillChunk)
			if prompt > 0 && prompt+n > e.cfg.StepTokens {
				continue // waits for a later step
			}
			prompt += n
		}
		g := groups[q.w]
		if g == nil {
			g = &group{}
			groups[q.w] = g
			order = append(order, q.w)
		}
		g.seqs = append(g.seqs, q)
		g.caches = append(g.caches, q.cache)
		g.toks = append(g.toks, q.pending[:n])
	}
	finished := map[*seq]bool{}
	for _, w := range order {
		g := groups[w]
		lg, err := w.m.Extend(g.caches, g.toks, *logits)
		e.steps.Add(1)
		if err != nil {
			for _, q := range g.seqs {
				e.finish(q, fmt.Errorf("engine: model step: %w", err))
				finished[q] = true
			}
			continue
		}
		*logits = lg
		V := len(lg) / len(g.seqs)
		var due []int // rows whose pending tokens are all fed: they sample
		for i, q := range g.seqs {
			fed := len(g.toks[i])
			e.fed.Add(int64(fed))
			q.pending = q.pending[fed:]
			if len(q.pending) == 0 {
				due = append(due, i)
			}
		}
		draws := drawRows(smp, len(due), func(j int, s *sampler) draw {
			i := due[j]
			return drawRow(g.seqs[i], lg[i*V:(i+1)*V], s)
		})
		for j, i := range due {
			q := g.seqs[i]
			if e.record(q, draws[j]) {
				e.finish(q, nil)
				finished[q] = true
			}
		}
	}
	if len(finished) == 0 {
		return active
	}
	kept := active[:0]
	for _, q := range active {
		if !finished[q] {
			kept = append(kept, q)
		}
	}
	clear(active[len(kept):])
	return kept
}

// draw is one sampled token with its log-prob and, when asked for, the
// most likely tokens' log-probs.
type draw struct {
	tok int32
	lp  float32
	top []TokenLogProb
}

// drawRow samples q's next token from its logits row. It touches nothing
// but q's random stream and s, so rows draw in parallel.
func drawRow(q *seq, row []float32, s *sampler) draw {
	p := &q.req.Params
	tok := s.sample(row, p, q.rng)
	lse := model.LogSumExp(row)
	d := draw{tok: tok, lp: row[tok] - lse}
	if p.TopLogprobs > 0 {
		d.top = topLogProbs(row, p.TopLogprobs, lse)
	}
	return d
}

// record appends q's drawn token and reports whether the sequence is
// finished; otherwise the token is pending.
func (e *Engine) record(q *seq, d draw) bool {
	p := &q.req.Params
	tok, lp, top := d.tok, d.lp, d.top
	r := &q.res
	r.Tokens = append(r.Tokens, tok)
	r.LogProbs = append(r.LogProbs, lp)
	if p.TopLogprobs > 0 {
		r.TopLogProbs = append(r.TopLogProbs, top)
	}
	e.generated.Add(1)
	if q.stream != nil {
		q.stream <- Token{Index: len(r.Tokens) - 1, ID: tok, LogProb: lp, Top: top}
	}
	for _, id := range e.eos {
		if tok == id {
			r.FinishReason = sampling.FinishEOS
			return true
		}
	}
	for _, id := range p.StopTokenIDs {
		if tok == id {
			r.FinishReason, r.Stop = sampling.FinishStop, strconv.Itoa(int(id))
			return true
		}
	}
	if len(p.StopStrings) > 0 {
		added := e.tok.TokenBytes(int(tok))
		q.text = append(q.text, added...)
		for _, s := range p.StopStrings {
			// Occurrences that end inside the newest token's bytes.
			from := max(0, len(q.text)-len(added)-len(s)+1)
			if bytes.Contains(q.text[from:], []byte(s)) {
				r.FinishReason, r.Stop = sampling.FinishStop, s
				return true
			}
		}
	}
	if len(r.Tokens) >= q.room {
		r.FinishReason = sampling.FinishLength
		return true
	}
	q.one[0] = tok
	q.pending = q.one[:]
	return false
}

// finish completes q with err (nil: its result), keeping its cache for its
// session.
func (e *Engine) finish(q *seq, err error) {
	if id := q.req.Session; id != "" {
		e.sessions.finish(id, q, q.cache, q.w.version)
	}
	q.cache = nil
	q.err = err
	if err != nil {
		q.res = Result{}
	}
	close(q.done)
}
