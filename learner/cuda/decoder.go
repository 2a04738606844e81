package cuda

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
)

// Decoder is a backend.Decoder (an engine.Backend) on the GPU: learner/engine samples from it
// (engine.NewOn(decoder, ...)) as from the CPU model. Its attention caches
// hold each layer's rotated keys and values in device memory; Extend runs
// the new tokens of all sequences through the layers packed together,
// appends their keys and values to the caches and attends each sequence's
// new queries to its cache (attention_cached), then returns the logits of
// each sequence's last token to the host, where the engine samples.
//
// A bfloat16 decoder (NewDecoderBF16) holds the projections and the LM
// head in bfloat16 alone and multiplies them with each product's input
// rows rounded, as a bfloat16 training model does (UseBF16), and its
// caches hold keys and values in bfloat16: the CPU's model.DecodeBF16 on
// the device, about 2 bytes a parameter and half the bytes a cached
// position.
type Decoder struct {
	g    *Model
	own  *decoderMem // what Free, or a cleanup once d is unreachable, frees
	mu   sync.Mutex  // one Extend at a time
	half bool        // bfloat16 weights and caches
}

// decoderMem is a Decoder's device memory: the weights, and the head that
// makes the last rows' logits (from the first Extend on).
type decoderMem struct {
	g    *Model
	head *LMHead
}

func (m *decoderMem) free() error {
	if m.head != nil {
		m.head.Free()
	}
	return m.g.Free()
}

// decoderChunkBytes bounds the decoder's logits chunk: 64 MiB holds the
// last rows of 110 sequences of a 151,936-token vocabulary at once.
const decoderChunkBytes = 64 << 20

var _ backend.Decoder = (*Decoder)(nil)

// NewDecoder uploads m's parameters for decoding (no gradients), in
// float32.
func (dv *Device) NewDecoder(m *model.Model) (*Decoder, error) {
	g, err := dv.newModel(m, false)
	if err != nil {
		return nil, err
	}
	return dv.decoderOf(g, false), nil
}

// NewDecoderBF16 uploads m's parameters for decoding in bfloat16: the
// projections and the LM head rounded to bfloat16 alone (NewFrozen's
// bfloat16 model), the embedding, norms and biases float32, and caches
// of bfloat16 keys and values.
func (dv *Device) NewDecoderBF16(m *model.Model) (*Decoder, error) {
	g, err := dv.NewFrozen(m, true)
	if err != nil {
		return nil, err
	}
	return dv.decoderOf(g, true), nil
}

func (dv *Device) decoderOf(g *Model, half bool) *Decoder {
	d := &Decoder{g: g, own: &decoderMem{g: g}, half: half}
	// A server that reloads drops decoders while requests may still run on
	// them; their memory goes once nothing (engine, cache) refers to them.
	runtime.AddCleanup(d, func(m *decoderMem) { m.free() }, d.own)
	return d
}

// Free releases the decoder's weights now (else they are freed once the
// decoder is unreachable); caches free themselves when no longer
// referenced.
func (d *Decoder) Free() error { return d.own.free() }

// Close is Free (backend.Decoder).
func (d *Decoder) Close() error { return d.Free() }

// Config is the model's configuration.
func (d *Decoder) Config() model.Config { return d.g.cfg }

// BytesPerToken is the device memory of one cached position: keys and
// values of every layer, 4 bytes a value, 2 in a bfloat16 decoder.
func (d *Decoder) BytesPerToken() int { return 2 * d.cacheDType().Size() * d.g.L * d.g.KD }

func (d *Decoder) cacheDType() DType {
	if d.half {
		return BF16
	}
	return F32
}

// kvStore holds a cache's device buffers, apart from the cache so that a
// cleanup can free them once the cache is unreachable.
type kvStore struct {
	k, v []*Buffer // per layer, capacity*KD floats
	cap  int       // positions
}

func (s *kvStore) free() {
	for l := range s.k {
		if s.k[l] != nil {
			s.k[l].Free()
			s.v[l].Free()
		}
	}
}

type kvCache struct {
	dec    *Decoder
	tokens []int32
	st     *kvStore
}

// NewCache returns an empty cache.
func (d *Decoder) NewCache() backend.Cache {
	c := &kvCache{dec: d, st: &kvStore{k: make([]*Buffer, d.g.L), v: make([]*Buffer, d.g.L)}}
	runtime.AddCleanup(c, func(s *kvStore) { s.free() }, c.st)
	return c
}

func (c *kvCache) Len() int        { return len(c.tokens) }
func (c *kvCache) Tokens() []int32 { return c.tokens }
func (c *kvCache) Truncate(n int)  { c.tokens = c.tokens[:max(0, min(n, len(c.tokens)))] }
func (c *kvCache) Bytes() int      { return 4*cap(c.tokens) + c.dec.BytesPerToken()*c.st.cap }
func (c *kvCache) kd() int         { return c.dec.g.KD }
func (c *kvCache) dev() *Device    { return c.dec.g.dv }

// reserve grows the device buffers to at least n positions (by half their
// size at least, in multiples of 128), keeping the cached rows.
func (c *kvCache) reserve(n int) error {
	s := c.st
	if s.cap >= n {
		return nil
	}
	want := (max(n, s.cap+s.cap/2) + 127) / 128 * 128
	used := len(c.tokens) * c.kd()
	grown := &kvStore{k: make([]*Buffer, len(s.k)), v: make([]*Buffer, len(s.v)), cap: want}
	for l := range s.k {
		for _, p := range []struct{ dst, src **Buffer }{{&grown.k[l], &s.k[l]}, {&grown.v[l], &s.v[l]}} {
			b, err := c.dev().Alloc(c.dec.cacheDType(), want*c.kd())
			if err != nil {
				grown.free()
				return fmt.Errorf("cuda: growing a KV cache to %d positions: %w", want, err)
			}
			*p.dst = b
			if used > 0 {
				dst, _ := b.Slice(0, used)
				src, _ := (*p.src).Slice(0, used)
				if err := dst.CopyFrom(src); err != nil {
					grown.free()
					return err
				}
			}
		}
	}
	s.free()
	*s = *grown
	return nil
}

// Extend implements backend.Decoder (see model.Model.Extend).
func (d *Decoder) Extend(caches []backend.Cache, tokens [][]int32, dst []float32) ([]float32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.g
	B := len(caches)
	if B == 0 || len(tokens) != B {
		return nil, fmt.Errorf("cuda: Extend got %d caches and %d token lists; give one non-empty list per cache", B, len(tokens))
	}
	kc := make([]*kvCache, B)
	seen := map[*kvCache]bool{}
	N := 0
	for i, c := range caches {
		k, ok := c.(*kvCache)
		if !ok || k.dec != d {
			return nil, fmt.Errorf("cuda: Extend cache %d was not made by this decoder's NewCache", i)
		}
		if seen[k] {
			return nil, fmt.Errorf("cuda: Extend got cache %d twice", i)
		}
		seen[k] = true
		if len(tokens[i]) == 0 {
			return nil, fmt.Errorf("cuda: Extend sequence %d has no new tokens", i)
		}
		if n := k.Len() + len(tokens[i]); n > g.cfg.MaxPositionEmbeddings {
			return nil, fmt.Errorf("cuda: Extend sequence %d would reach %d positions, more than max_position_embeddings %d", i, n, g.cfg.MaxPositionEmbeddings)
		}
		for _, t := range tokens[i] {
			if t < 0 || int(t) >= g.V {
				return nil, fmt.Errorf("cuda: Extend sequence %d: token %d is outside the vocabulary [0,%d)", i, t, g.V)
			}
		}
		kc[i] = k
		N += len(tokens[i])
	}
	for i, k := range kc {
		if err := k.reserve(k.Len() + len(tokens[i])); err != nil {
			return nil, err
		}
	}
	// Packed new tokens, their positions, and each sequence's last row.
	toks, pos, last, off := make([]int32, 0, N), make([]int32, 0, N), make([]int32, B), make([]int, B+1)
	for i, k := range kc {
		off[i] = len(toks)
		for j, t := range tokens[i] {
			toks = append(toks, t)
			pos = append(pos, int32(k.Len()+j))
		}
		last[i] = int32(len(toks) - 1)
	}
	off[B] = N
	dv, C := g.dv, g.C
	s := &scratch{dv: dv}
	defer s.free()
	gt, gp, gl := s.ints(toks), s.ints(pos), s.ints(last)
	if s.err != nil {
		return nil, s.err
	}
	o := &decodeOps{layerOps: layerOps{g: g, s: s, N: N, tokens: gt, pos: gp}, caches: kc, off: off}
	lnf := model.DecodeLayers[*Buffer](o, model.ShapeOf(g.cfg, N))
	if o.err != nil {
		return nil, fmt.Errorf("cuda: Extend: %w", o.err)
	}
	// The last row of each sequence through the head.
	lnl := s.get(F32, B*C)
	if s.err != nil {
		return nil, s.err
	}
	if err := dv.EmbeddingForward(lnl, gl, lnf, C); err != nil { // gather
		return nil, err
	}
	if d.own.head == nil {
		h, err := dv.NewLMHead(g.V, C, decoderChunkBytes)
		if err != nil {
			return nil, err
		}
		if d.half {
			if err := h.UseBF16(g.w16.head); err != nil {
				h.Free()
				return nil, err
			}
		}
		d.own.head = h
	}
	if cap(dst) >= B*g.V {
		dst = dst[:B*g.V]
	} else {
		dst = make([]float32, B*g.V)
	}
	if err := d.own.head.Logits(lnl, g.w.head, B, dst); err != nil {
		return nil, err
	}
	for i, k := range kc {
		k.tokens = append(k.tokens, tokens[i]...)
	}
	return dst, nil
}

// decodeOps are the model.LayerOps of one Extend: the training pass's
// kernels, with attention that appends each layer's new keys and values to
// the caches and attends each sequence's new queries to its cache.
type decodeOps struct {
	layerOps
	caches []*kvCache
	off    []int // each sequence's first row, then N
}

func (o *decodeOps) Attention(y, lse, qkv *Buffer, l int) {
	g := o.g
	o.do(l, "attention", func() error {
		for i, k := range o.caches {
			n, p0 := o.off[i+1]-o.off[i], k.Len()
			rows, err := qkv.Slice(o.off[i]*g.QKV, o.off[i+1]*g.QKV)
			if err != nil {
				return err
			}
			yi, err := y.Slice(o.off[i]*g.QD, o.off[i+1]*g.QD)
			if err != nil {
				return err
			}
			if err := g.dv.KVAppend(k.st.k[l], k.st.v[l], rows, n, p0, g.QD, g.KD); err != nil {
				return err
			}
			if err := g.dv.AttentionCached(yi, rows, k.st.k[l], k.st.v[l], n, p0, g.H, g.KV, g.D); err != nil {
				return err
			}
		}
		return nil
	})
}
