package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
)

// Inference with a KV cache. A KVCache holds, for one sequence, the rotated
// keys and the values of every layer at every position fed so far, plus the
// tokens themselves. Extend feeds new tokens to several caches in one pass:
// the linear layers, norms and MLP run over the new tokens of all sequences
// packed together (one Sgemm per layer and projection), attention runs per
// sequence and head, the new queries at positions p0.. against the cached
// keys 0..p0+n-1 through attendBlock. A prefill is an Extend of one cache
// with the whole prompt; a decode step is an Extend of many caches with one
// token each; a continuation after external tokens is an Extend with those
// tokens. Shapes below: N = new tokens of the step, B = sequences, P = a
// sequence's cached positions.

// cacheChunk is the granularity, in positions, by which a cache grows.
const cacheChunk = 128

// KVCache is the attention state of one sequence: per layer k[P, KD] and
// v[P, KD] (key/value heads side by side in each row, keys rotated), and
// the P tokens they were computed from. A cache belongs to the model that
// filled it (other weights give other keys) and serves one Extend at a time.
type KVCache struct {
	d      dims
	tokens []int32
	k, v   [][]float32 // [L][cap*KD]
}

// NewKVCache returns an empty cache shaped for m.
func (m *Model) NewKVCache() *KVCache {
	return &KVCache{d: m.d, k: make([][]float32, m.d.L), v: make([][]float32, m.d.L)}
}

// Len is the number of positions cached.
func (c *KVCache) Len() int { return len(c.tokens) }

// Tokens are the cached tokens in order; the slice aliases the cache and is
// valid until the next Extend or Truncate.
func (c *KVCache) Tokens() []int32 { return c.tokens }

// Truncate keeps the first n positions (n is clamped to [0, Len]). Keys and
// values of a position depend only on the tokens up to it, so the kept part
// stays exact and later tokens may be fed after it.
func (c *KVCache) Truncate(n int) {
	c.tokens = c.tokens[:max(0, min(n, len(c.tokens)))]
}

// Bytes is the memory the cache holds (its capacity, not only Len).
func (c *KVCache) Bytes() int {
	n := 4 * cap(c.tokens)
	for l := range c.k {
		n += 4 * (cap(c.k[l]) + cap(c.v[l]))
	}
	return n
}

// BytesPerToken is the cache memory one position takes for m (keys and
// values of every layer).
func (m *Model) BytesPerToken() int { return 2 * 4 * m.d.L * m.d.KD }

// reserve grows the cache's capacity to at least n positions, by whole
// chunks and at least by half its size, keeping the cached rows.
func (c *KVCache) reserve(n int) {
	KD := c.d.KD
	if len(c.k) > 0 && cap(c.k[0]) >= n*KD {
		return
	}
	have := 0
	if len(c.k) > 0 {
		have = cap(c.k[0]) / max(KD, 1)
	}
	want := max(n, have+have/2)
	want = (want + cacheChunk - 1) / cacheChunk * cacheChunk
	used := len(c.tokens) * KD
	for l := range c.k {
		k, v := make([]float32, want*KD), make([]float32, want*KD)
		copy(k, c.k[l][:used])
		copy(v, c.v[l][:used])
		c.k[l], c.v[l] = k, v
	}
	toks := make([]int32, len(c.tokens), want)
	copy(toks, c.tokens)
	c.tokens = toks
}

// stepWork is the scratch of one Extend, reused across calls through a
// sync.Pool so that steps of varying sizes do not pile up buffers.
type stepWork struct{ buf, pad []float32 }

// smallGemmElems is the output size (rows × columns) at or below which
// OpenBLAS (0.3.21, x86-64) multiplies by a weight transposed with its
// "small matrix" kernel, whose summation order depends on the number of
// rows; larger products go through the blocked kernel, which computes
// every row the same way whatever the other rows are.
const smallGemmElems = 1200

// linear is linearForward for the rows of a step, made independent of how
// many rows the step has, so that a sequence's logits do not depend on
// which other sequences share its batch and a seeded sample is
// reproducible under any load. How depends on the BLAS kernels, which
// rowLayout probes once: rows padded with zero rows up to a multiple of
// the kernels' row block (1 for OpenBLAS 0.3.21's SkylakeX kernels, 12 for
// its Haswell and Zen ones), or, where no padding makes rows independent,
// one product per row.
func (w *stepWork) linear(out, in, wt, b []float32, N, I, O int) {
	pad := rowLayout()
	if pad == 0 {
		// Every row by the same call, whatever the batch: invariant by
		// construction.
		for r := 0; r < N; r++ {
			linearForward(out[r*O:(r+1)*O], in[r*I:(r+1)*I], wt, b, 1, I, O)
		}
		return
	}
	w.linearPadded(out, in, wt, b, N, I, O, pad)
}

// linearPadded computes the N rows of the product among at least M rows:
// a product small enough for OpenBLAS's small-matrix kernel (whose
// summation order depends on the number of rows) gets zero rows past
// smallGemmElems, and the row count is rounded up to a multiple of pad.
// The padding costs at most smallGemmElems + (pad-1)*O extra outputs.
func (w *stepWork) linearPadded(out, in, wt, b []float32, N, I, O, pad int) {
	M := N
	if N*O <= smallGemmElems {
		M = smallGemmElems/O + 1
	}
	M = (M + pad - 1) / pad * pad
	if M == N {
		linearForward(out, in, wt, b, N, I, O)
		return
	}
	if cap(w.pad) < M*(I+O) {
		w.pad = make([]float32, M*(I+O))
	}
	pin, pout := w.pad[:M*I], w.pad[M*I:M*(I+O)]
	copy(pin, in[:N*I])
	clear(pin[N*I:])
	linearForward(pout, pin, wt, b, M, I, O)
	copy(out[:N*O], pout)
}

// rowLayout is the row padding that makes linearPadded compute every row
// the same way whatever rows share its product, on the kernels this
// process runs (0: none does; compute one row at a time). It is probed
// once, on random products of a few shapes on both sides of the
// small-matrix threshold, each row of each batch size against the row
// computed alone.
var rowLayout = sync.OnceValue(func() int {
	for _, pad := range []int{1, 2, 4, 8, 12, 16, 24, 32} {
		if rowsIndependent(pad) {
			return pad
		}
	}
	return 0
})

func rowsIndependent(pad int) bool {
	r := rand.New(rand.NewPCG(5, 8))
	var w stepWork
	for _, sh := range [][2]int{{64, 172}, {64, 600}, {128, 1500}} {
		I, O := sh[0], sh[1]
		wt, in := make([]float32, O*I), make([]float32, 40*I)
		for i := range wt {
			wt[i] = r.Float32() - 0.5
		}
		for i := range in {
			in[i] = r.Float32() - 0.5
		}
		alone := make([]float32, 40*O)
		for row := 0; row < 40; row++ {
			w.linearPadded(alone[row*O:(row+1)*O], in[row*I:(row+1)*I], wt, nil, 1, I, O, pad)
		}
		out := make([]float32, 40*O)
		for _, n := range []int{2, 3, 5, 7, 12, 13, 19, 25, 40} {
			w.linearPadded(out, in, wt, nil, n, I, O, pad)
			for i := range n * O {
				if out[i] != alone[i] {
					return false
				}
			}
		}
	}
	return true
}

var stepPool = sync.Pool{New: func() any { return new(stepWork) }}

// take returns a slice of n floats from w.buf at *off and advances *off.
func (w *stepWork) take(off *int, n int) []float32 {
	s := w.buf[*off : *off+n : *off+n]
	*off += n
	return s
}

// Extend feeds tokens[i] (at least one token each) to caches[i] for every i
// in one batched pass, appends them to the caches, and returns the logits
// after the last new token of each sequence, [B, V] row-major. The result
// is written into dst when it has the capacity, else freshly allocated.
// On error no cache is changed. The caches must be distinct; different
// Extend calls on disjoint caches may run concurrently.
func (m *Model) Extend(caches []*KVCache, tokens [][]int32, dst []float32) ([]float32, error) {
	if m.narrow != nil {
		return nil, errNarrow
	}
	d := m.d
	B := len(caches)
	if B == 0 || len(tokens) != B {
		return nil, fmt.Errorf("model: Extend got %d caches and %d token lists; give one non-empty list per cache", B, len(tokens))
	}
	N, maxPos := 0, 0
	seen := make(map[*KVCache]bool, B)
	for i, c := range caches {
		if c == nil || c.d != d {
			return nil, fmt.Errorf("model: Extend cache %d was not made by this model's NewKVCache (or by a model of another shape)", i)
		}
		if seen[c] {
			return nil, fmt.Errorf("model: Extend got cache %d twice in one step", i)
		}
		seen[c] = true
		if len(tokens[i]) == 0 {
			return nil, fmt.Errorf("model: Extend sequence %d has no new tokens", i)
		}
		for j, tok := range tokens[i] {
			if tok < 0 || int(tok) >= d.V {
				return nil, fmt.Errorf("model: Extend sequence %d token %d is %d, outside the vocabulary [0,%d)", i, j, tok, d.V)
			}
		}
		end := c.Len() + len(tokens[i])
		if end > m.cfg.MaxPositionEmbeddings {
			return nil, fmt.Errorf("model: Extend sequence %d would reach %d positions, more than max_position_embeddings %d", i, end, m.cfg.MaxPositionEmbeddings)
		}
		N += len(tokens[i])
		maxPos = max(maxPos, end)
	}

	// Packed inputs: the new tokens of every sequence end to end, their
	// absolute positions, and the row where each sequence starts.
	flat := make([]int32, 0, N)
	pos := make([]int32, 0, N)
	starts := make([]int, B)
	for i, c := range caches {
		starts[i] = len(flat)
		flat = append(flat, tokens[i]...)
		for j := range tokens[i] {
			pos = append(pos, int32(c.Len()+j))
		}
		c.reserve(c.Len() + len(tokens[i]))
	}
	cos, sin := m.rope.upTo(maxPos)

	nw := workers()
	scratchLen := qBlock * maxPos
	w := stepPool.Get().(*stepWork)
	defer stepPool.Put(w)
	// What DecodeLayers takes (see runLayers), the last rows and the
	// attention tasks' scratch.
	need := N*(7*d.C+d.QKV+d.QD+d.H+4*d.F) + 3*N + B*d.C + nw*scratchLen
	if cap(w.buf) < need {
		w.buf = make([]float32, need)
	}
	w.buf = w.buf[:cap(w.buf)]
	o := &decodeOps{cpuOps: cpuOps{m: m, p: &prepared{tokens: flat, pos: pos, cos: cos, sin: sin}},
		w: w, caches: caches, tokens: tokens, starts: starts, scratch: make([][]float32, nw)}
	for k := range o.scratch {
		o.scratch[k] = o.Get(scratchLen)
	}
	last := o.Get(B * d.C)
	for i := range caches {
		for hd := 0; hd < d.H; hd++ {
			for i0 := 0; i0 < len(tokens[i]); i0 += qBlock {
				o.tasks = append(o.tasks, decodeTask{i, hd, i0})
			}
		}
	}
	lnf := DecodeLayers[[]float32](o, m.shape(N))
	// The head on the last new row of each sequence only.
	for i := range caches {
		r := starts[i] + len(tokens[i]) - 1
		copy(last[i*d.C:(i+1)*d.C], lnf[r*d.C:])
	}
	if cap(dst) >= B*d.V {
		dst = dst[:B*d.V]
	} else {
		dst = make([]float32, B*d.V)
	}
	w.linear(dst, last, m.w.head, nil, B, d.C, d.V)
	for i, c := range caches {
		c.tokens = append(c.tokens, tokens[i]...)
	}
	return dst, nil
}

// LogSumExp is log sum_j exp(logits[j]) computed as the learner's forward
// pass computes it, so that logits[t] - LogSumExp(logits) is bit-for-bit
// the log-probability arithmetic of Forward.
func LogSumExp(logits []float32) float32 {
	lse, _ := logSoftmax(logits, false)
	return lse
}

// decodeOps are the LayerOps of one Extend: the CPU ops, with buffers from
// the step's scratch, rows multiplied as stepWork.linear does (independent
// of the batch), the q/k norm keeping nothing, and attention that appends
// each layer's new keys and values to the caches and attends to them.
type decodeOps struct {
	cpuOps
	w       *stepWork
	off     int
	caches  []*KVCache
	tokens  [][]int32
	starts  []int // each sequence's first row
	tasks   []decodeTask
	scratch [][]float32 // per worker
}

// decodeTask is one query block of one head of one sequence.
type decodeTask struct{ seq, h, i0 int }

func (o *decodeOps) Get(n int) []float32 {
	if o.off+n <= len(o.w.buf) {
		return o.w.take(&o.off, n)
	}
	return make([]float32, n)
}

func (o *decodeOps) Zeroed(n int) []float32 {
	b := o.Get(n)
	clear(b)
	return b
}

func (o *decodeOps) Linear(out, in []float32, l int, w Weight, bias bool) {
	wt, b, I, O := o.linear(&o.m.w, l, w)
	if !bias {
		b = nil
	}
	o.w.linear(out, in, wt, b, o.n(), I, O)
}

// QKNorm normalises in place: the cache keeps normalised, rotated keys.
func (o *decodeOps) QKNorm(qkv []float32, l int) {
	if qn := o.m.w.layers[l].qkNorm; qn != nil {
		qkNormForward(qkv, nil, nil, qn, o.n(), o.m.d, o.m.cfg.RMSNormEps)
	}
}

func (o *decodeOps) Attention(y, lse, qkv []float32, l int) {
	d := o.m.d
	// Append the new rotated keys and values to each cache.
	for i, c := range o.caches {
		p0 := c.Len()
		for j := range o.tokens[i] {
			row := qkv[(o.starts[i]+j)*d.QKV:]
			copy(c.k[l][(p0+j)*d.KD:(p0+j+1)*d.KD], row[d.QD:d.QD+d.KD])
			copy(c.v[l][(p0+j)*d.KD:(p0+j+1)*d.KD], row[d.QD+d.KD:d.QD+2*d.KD])
		}
	}
	scale := float32(1 / math.Sqrt(float64(d.D)))
	group := d.H / d.KV
	parallelTasks(len(o.tasks), func(wk, ti int) {
		tk := o.tasks[ti]
		c := o.caches[tk.seq]
		g := tk.h / group
		nq := min(qBlock, len(o.tokens[tk.seq])-tk.i0)
		row := o.starts[tk.seq] + tk.i0
		attendBlock(y[row*d.QD+tk.h*d.D:], d.QD, lse[row*d.H+tk.h:], d.H,
			qkv[row*d.QKV+tk.h*d.D:], d.QKV,
			c.k[l][g*d.D:], c.v[l][g*d.D:], d.KD,
			nil, 0, nq, c.Len()+tk.i0, d.D, scale, o.scratch[wk], false)
	})
}
