package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/aipo-rl/aipo/learner/blas"
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
// filled it (other weights give other keys) and serves one Extend at a
// time. A model that decodes in bfloat16 (DecodeBF16) makes caches that
// hold keys and values in bfloat16 (k16, v16), rounded as they enter;
// others hold them in float32 (k, v).
type KVCache struct {
	d        dims
	tokens   []int32
	k, v     [][]float32 // [L][cap*KD]
	k16, v16 [][]uint16  // [L][cap*KD], in place of k and v
}

// NewKVCache returns an empty cache shaped for m, in the precision m
// decodes in now: bfloat16 after DecodeBF16(true), float32 otherwise. A
// cache made in one precision is refused by Extend in the other.
func (m *Model) NewKVCache() *KVCache {
	c := &KVCache{d: m.d}
	if m.bf16 != nil {
		c.k16, c.v16 = make([][]uint16, m.d.L), make([][]uint16, m.d.L)
	} else {
		c.k, c.v = make([][]float32, m.d.L), make([][]float32, m.d.L)
	}
	return c
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

// half reports whether the cache holds bfloat16 keys and values.
func (c *KVCache) half() bool { return c.k16 != nil }

// Bytes is the memory the cache holds (its capacity, not only Len).
func (c *KVCache) Bytes() int {
	n := 4 * cap(c.tokens)
	for l := range c.k {
		n += 4 * (cap(c.k[l]) + cap(c.v[l]))
	}
	for l := range c.k16 {
		n += 2 * (cap(c.k16[l]) + cap(c.v16[l]))
	}
	return n
}

// BytesPerToken is the cache memory one position takes for m (keys and
// values of every layer) in the precision m decodes in now: 4 bytes a
// value in float32, 2 in bfloat16.
func (m *Model) BytesPerToken() int {
	if m.bf16 != nil {
		return 2 * 2 * m.d.L * m.d.KD
	}
	return 2 * 4 * m.d.L * m.d.KD
}

// reserve grows the cache's capacity to at least n positions, by whole
// chunks and at least by half its size, keeping the cached rows.
func (c *KVCache) reserve(n int) {
	KD := c.d.KD
	have := c.capacity()
	if have >= n {
		return
	}
	want := max(n, have+have/2)
	want = (want + cacheChunk - 1) / cacheChunk * cacheChunk
	used := len(c.tokens) * KD
	for l := range c.k {
		c.k[l], c.v[l] = regrow(c.k[l], want*KD, used), regrow(c.v[l], want*KD, used)
	}
	for l := range c.k16 {
		c.k16[l], c.v16[l] = regrow(c.k16[l], want*KD, used), regrow(c.v16[l], want*KD, used)
	}
	toks := make([]int32, len(c.tokens), want)
	copy(toks, c.tokens)
	c.tokens = toks
}

// capacity is the positions the cache has room for.
func (c *KVCache) capacity() int {
	KD := max(c.d.KD, 1)
	switch {
	case len(c.k) > 0:
		return cap(c.k[0]) / KD
	case len(c.k16) > 0:
		return cap(c.k16[0]) / KD
	}
	return 0
}

// regrow is a new slice of n elements holding s's first used.
func regrow[T float32 | uint16](s []T, n, used int) []T {
	out := make([]T, n)
	copy(out, s[:used])
	return out
}

// stepWork is the scratch of one Extend, reused across calls through a
// sync.Pool so that steps of varying sizes do not pile up buffers. plain
// is the model's batchVariant for the step.
type stepWork struct {
	buf, pad []float32
	plain    bool
	x16      []uint16 // a product's rows rounded to bfloat16 (DecodeBF16)
}

// SetBatchInvariantDecode chooses how Extend multiplies the rows of a
// step. On (the default), a sequence's logits are bit for bit the same
// whatever other sequences share its step, so that a seeded sample is
// reproducible under any load; on BLAS kernels that compute a row of a
// product by its position among the rows (OpenBLAS 0.3.21's Haswell and
// Zen kernels) that costs a step of many rows several products (see
// stepWork.linear). Off, a step's rows go through one plain product, the
// fastest on every kernel, and a sequence's logits may differ in the last
// bits with the step's other rows. Set it before the first Extend.
func (m *Model) SetBatchInvariantDecode(on bool) { m.batchVariant = !on }

// DecodeProduct says how Extend multiplies a step's rows on this CPU, for
// start-up logs.
func (m *Model) DecodeProduct() string {
	switch {
	case m.bf16 != nil:
		return m.bf16.describe()
	case m.batchVariant:
		return "one plain product a step (" + blas.Backend() + "), batch-variant"
	case decodeRowDots:
		return "fixed-order products (" + blas.RowDotsKernel() + "), batch-invariant"
	}
	switch l := decodeLayout(); {
	case l.pad > 0:
		return fmt.Sprintf("rows padded to a multiple of %d (%s), batch-invariant", l.pad, blas.Backend())
	case l.block > 0:
		return fmt.Sprintf("blocks of up to %d rows (%s), batch-invariant", l.block, blas.Backend())
	}
	return "one product a row (" + blas.Backend() + "), batch-invariant"
}

// smallGemmElems is the output size (rows × columns) at or below which
// OpenBLAS (0.3.21, x86-64) multiplies by a weight transposed with its
// "small matrix" kernel, whose summation order depends on the number of
// rows; larger products go through the blocked kernel, which computes
// every row the same way whatever the other rows are.
const smallGemmElems = 1200

// linear is linearForward for the rows of a step, made independent of how
// many rows the step has, so that a sequence's logits do not depend on
// which other sequences share its batch and a seeded sample is
// reproducible under any load. Where the CPU has AVX2 or AVX-512 (a cgo
// build) the step goes through blas.RowDots, which computes every output
// by one fixed sequence of operations whatever the rows beside it (and,
// on 2 cores of an AVX-512 CPU, at about twice OpenBLAS 0.3.21's Haswell
// sgemm on a 32-row step of a width-1024 model: BenchmarkRowDots in
// learner/blas). Elsewhere it depends on the BLAS kernels, which
// decodeLayout probes once: rows padded with zero rows up to a multiple of
// the kernels' row block in one product (OpenBLAS 0.3.21's SkylakeX
// kernels); else blocks of at most a fixed number of rows, each one
// product with the weight as the left operand (its Haswell and Zen
// kernels, which compute a row of a product by its position among the
// rows, compute a column of the transposed product the same way at every
// position of a block of up to 15 rows); else one product per row.
func (w *stepWork) linear(out, in, wt, b []float32, N, I, O int) {
	if w.plain {
		linearForward(out, in, wt, b, N, I, O)
		return
	}
	if decodeRowDots {
		linearDots(out, in, wt, b, N, I, O)
		return
	}
	switch l := decodeLayout(); {
	case l.pad > 0:
		w.linearPadded(out, in, wt, b, N, I, O, l.pad)
	case l.block > 0:
		w.linearBlocked(out, in, wt, b, N, I, O, l)
	default:
		// Every row by the same call, whatever the batch: invariant by
		// construction.
		for r := 0; r < N; r++ {
			linearForward(out[r*O:(r+1)*O], in[r*I:(r+1)*I], wt, b, 1, I, O)
		}
	}
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

// linearBlocked computes the N rows of the product in blocks of at most
// l.block rows (with l.fill, the last block padded with zero rows to
// l.block), each block as the transposed product W·Xᵀ over a slice of the
// weight's rows at a time: every output is computed by a call whose
// weight slice depends on I and O alone, at a position among the call's
// rows that the probe found not to matter. A slice is small enough to
// stay in cache while every block multiplies it, so the weight is read
// from memory once a step whatever the blocks. Slices are a multiple of
// sliceUnit rows; the last one, when shorter, is multiplied as a copy
// padded with zero rows.
func (w *stepWork) linearBlocked(out, in, wt, b []float32, N, I, O int, l stepLayout) {
	M := N
	if l.fill {
		M = (N + l.block - 1) / l.block * l.block
	}
	rows := blockSliceRows(I, O)
	nSlices := (O + rows - 1) / rows
	o0Tail := (nSlices - 1) * rows
	tailPad := (O - o0Tail + sliceUnit - 1) / sliceUnit * sliceUnit
	Op := o0Tail + tailPad
	need := M*I + M*Op + tailPad*I
	if cap(w.pad) < need {
		w.pad = make([]float32, need)
	}
	// pin holds the rows (padded to whole blocks with fill); ct the
	// transposed result of each block, [Op][nb] from row b0*Op; wTail
	// the last slice of the weight padded to tailPad rows.
	pin, ct, wTail := w.pad[:M*I], w.pad[M*I:M*(I+Op)], w.pad[M*(I+Op):need]
	copy(pin, in[:N*I])
	clear(pin[N*I:])
	copy(wTail, wt[o0Tail*I:O*I])
	clear(wTail[(O-o0Tail)*I:])
	parallelFor(nSlices, 1, func(lo, hi int) {
		for s := lo; s < hi; s++ {
			o0, n, ws := s*rows, rows, wt[s*rows*I:]
			if s == nSlices-1 {
				n, ws = tailPad, wTail
			}
			for b0 := 0; b0 < M; b0 += l.block {
				nb := min(l.block, M-b0)
				c := ct[b0*Op+o0*nb:]
				blas.SgemmSerial(false, true, n, nb, I, 1, ws, I, pin[b0*I:], I, 0, c, nb)
				for r := b0; r < min(b0+nb, N); r++ {
					dst := out[r*O+o0 : r*O+min(o0+n, O)]
					for j := range dst {
						dst[j] = c[j*nb+r-b0]
					}
				}
			}
		}
	})
	addBias(out, b, N, O)
}

// decodeRowDots says whether stepWork.linear multiplies through
// blas.RowDots; tests turn it off to hold the layouts of other CPUs to
// their contract on this one.
var decodeRowDots = blas.RowDotsAvailable()

// linearDots computes the step's N rows with blas.RowDots, the weight's
// rows split among the cores in slices of 12 rows, whole tiles of both of
// RowDots' widths (6 and 4 rows), so that a split leaves no narrower
// tiles behind (each output is computed alike in any slice; the split
// only shares the work).
func linearDots(out, in, wt, b []float32, N, I, O int) {
	const tile = 12
	parallelFor((O+tile-1)/tile, 5, func(lo, hi int) {
		o0, o1 := lo*tile, min(hi*tile, O)
		blas.RowDots(N, o1-o0, I, in, I, wt[o0*I:], I, out[o0:], O)
	})
	addBias(out, b, N, O)
}

// sliceUnit divides the weight slices of linearBlocked: OpenBLAS 0.3.21's
// Haswell kernels multiply 12 weight rows at a time, and compute a column
// of W·Xᵀ alike in every block of up to 15 rows only where no shorter
// group of weight rows is left over.
const sliceUnit = 12

// blockSliceRows is how many weight rows of width I linearBlocked
// multiplies at a time: about 256 KiB of them, a multiple of sliceUnit.
func blockSliceRows(I, O int) int {
	r := max(1, (1<<16)/max(I, 1)/sliceUnit) * sliceUnit
	return min(r, (O+sliceUnit-1)/sliceUnit*sliceUnit)
}

// stepLayout is how stepWork.linear computes a step's rows: padded to a
// multiple of pad rows in one product (pad > 0); or in blocks of at most
// block rows through the transposed product (block > 0), the last block
// padded to block rows when fill is set; or, with neither, one row at a
// time.
type stepLayout struct {
	pad, block int
	fill       bool
}

// decodeLayout is the first layout, in the order of preference below, that
// computes every row the same way whatever rows share its step, on the
// kernels this process runs. It is probed once (see layoutExact).
var decodeLayout = sync.OnceValue(func() stepLayout {
	var cands []stepLayout
	for _, pad := range []int{1, 2, 4, 8, 12, 16, 24, 32} {
		cands = append(cands, stepLayout{pad: pad})
	}
	// Unpadded blocks first: a step of one row is then one product of
	// one row (and the largest block the fewest products); a padded block
	// of 8 before 16: a step of one row pays for block-1 padding rows.
	for _, block := range []int{15, 7} {
		cands = append(cands, stepLayout{block: block})
	}
	for _, block := range []int{8, 16, 4} {
		cands = append(cands, stepLayout{block: block, fill: true})
	}
	for _, l := range cands {
		if layoutExact(l) {
			return l
		}
	}
	return stepLayout{}
})

// layoutExact reports whether layout l computes each row of random
// products, for batch sizes up to the serving engine's default maximum
// (64), bit for bit as the row computed alone. The shapes are a few on
// both sides of OpenBLAS's small-matrix threshold, a tiny model's, and
// the projections of a model of width 1024 (more batch sizes on the
// small ones, which cost little).
func layoutExact(l stepLayout) bool {
	r := rand.New(rand.NewPCG(5, 8))
	var w stepWork
	small := []int{2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 19, 24, 25, 31, 32, 33, 40, 47, 48, 49, 63, 64}
	for _, sh := range []struct {
		I, O  int
		sizes []int
	}{
		{64, 172, small}, {64, 600, small}, {128, 1500, small}, {32, 50, small}, {64, 128, small},
		{1024, 3072, []int{2, 7, 9, 17, 33, 64}}, {3072, 1024, []int{3, 12, 25}},
	} {
		I, O, rows := sh.I, sh.O, slices.Max(sh.sizes)
		wt, in := make([]float32, O*I), make([]float32, rows*I)
		for i := range wt {
			wt[i] = r.Float32() - 0.5
		}
		for i := range in {
			in[i] = r.Float32() - 0.5
		}
		alone := make([]float32, rows*O)
		for row := range rows {
			w.linearWith(l, alone[row*O:(row+1)*O], in[row*I:(row+1)*I], wt, 1, I, O)
		}
		out := make([]float32, rows*O)
		for _, n := range sh.sizes {
			w.linearWith(l, out, in, wt, n, I, O)
			for i := range n * O {
				if out[i] != alone[i] {
					return false
				}
			}
		}
	}
	return true
}

// linearWith is stepWork.linear under layout l (which must pad or block).
func (w *stepWork) linearWith(l stepLayout, out, in, wt []float32, N, I, O int) {
	if l.pad > 0 {
		w.linearPadded(out, in, wt, nil, N, I, O, l.pad)
	} else {
		w.linearBlocked(out, in, wt, nil, N, I, O, l)
	}
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
		if c.half() != (m.bf16 != nil) {
			return nil, fmt.Errorf("model: Extend cache %d holds keys and values in %s, but the model decodes in %s: make its caches with NewKVCache after DecodeBF16", i, precisionName(c.half()), precisionName(m.bf16 != nil))
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
	w.plain = m.batchVariant
	// What DecodeLayers takes (counted by walking it: decodeFloats), the
	// last rows and the attention tasks' scratch.
	need := decodeFloats(m.shape(N)) + B*d.C + nw*scratchLen
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
	if o.err != nil {
		return nil, o.err
	}
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
	if m.bf16 != nil {
		if err := w.linearBF16(dst, last, m.bf16.head, nil, B, d.C); err != nil {
			return nil, err
		}
	} else {
		w.linear(dst, last, m.w.head, nil, B, d.C, d.V)
	}
	for i, c := range caches {
		c.tokens = append(c.tokens, tokens[i]...)
	}
	return dst, nil
}

// LogSumExp is log sum_j exp(logits[j]) computed as the learner's forward
// pass computes it, so that logits[t] - LogSumExp(logits) is bit-for-bit
// the log-probability arithmetic of Forward.
func LogSumExp(logits []float32) float32 {
	lse, _ := logSoftmax(logits)
	return lse
}

// decodeOps are the LayerOps of one Extend: the CPU ops, with buffers from
// the step's scratch, rows multiplied as stepWork.linear does (independent
// of the batch), and attention that appends each layer's new keys and
// values to the caches and attends to them (the q/k norm keeps nothing:
// DecodeLayers gives it nowhere to).
type decodeOps struct {
	cpuOps
	w       *stepWork
	off     int
	caches  []*KVCache
	tokens  [][]int32
	starts  []int // each sequence's first row
	tasks   []decodeTask
	scratch [][]float32 // per worker
	err     error       // the first failed bfloat16 product, which Extend returns
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
	if bd := o.m.bf16; bd != nil {
		if o.err == nil {
			o.err = o.w.linearBF16(out, in, bd.matrix(l, w), b, o.n(), I)
		}
	} else {
		o.w.linear(out, in, wt, b, o.n(), I, O)
	}
	o.adapterForward(out, in, l, w, O) // a LoRA adapter's, when attached (lora.go)
}

func (o *decodeOps) Attention(y, lse, qkv []float32, l int) {
	d := o.m.d
	// Append the new rotated keys and values to each cache.
	for i, c := range o.caches {
		p0 := c.Len()
		for j := range o.tokens[i] {
			row := qkv[(o.starts[i]+j)*d.QKV:]
			at, end := (p0+j)*d.KD, (p0+j+1)*d.KD
			if c.half() {
				blas.RoundBF16(c.k16[l][at:end], row[d.QD:d.QD+d.KD])
				blas.RoundBF16(c.v16[l][at:end], row[d.QD+d.KD:d.QD+2*d.KD])
				continue
			}
			copy(c.k[l][at:end], row[d.QD:d.QD+d.KD])
			copy(c.v[l][at:end], row[d.QD+d.KD:d.QD+2*d.KD])
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
		y, lse, q := y[row*d.QD+tk.h*d.D:], lse[row*d.H+tk.h:], qkv[row*d.QKV+tk.h*d.D:]
		if c.half() {
			attendBlockBF16(y, d.QD, lse, d.H, q, d.QKV, c.k16[l][g*d.D:], c.v16[l][g*d.D:], d.KD,
				nq, c.Len()+tk.i0, d.D, scale, o.scratch[wk])
			return
		}
		attendBlock(y, d.QD, lse, d.H, q, d.QKV, c.k[l][g*d.D:], c.v[l][g*d.D:], d.KD,
			nil, 0, nq, c.Len()+tk.i0, d.D, scale, o.scratch[wk], false)
	})
}

// precisionName names bfloat16 or float32, for errors.
func precisionName(half bool) string {
	if half {
		return "bfloat16"
	}
	return "float32"
}
