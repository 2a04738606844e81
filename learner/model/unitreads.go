package model

import (
	"cmp"
	"slices"
)

// UnitReads is what a pass that multiplies in bfloat16 (SetComputeBF16,
// and a device's bfloat16 passes alike) reads of one unit of UnitsOf:
// Float32, the flat spans of the unit's tensors it reads as float32
// values (an embedding block, the norms, the biases), in flat order; and
// BF16, whether its products round any of the unit's tensors to bfloat16
// (the projections of a layer, a block of the LM head, tied or not). A
// unit's Float32 spans laid one after another are its float32 image
// (Float32Len floats): a sharded model's bfloat16 passes need the unit in
// bfloat16 where BF16 says so, and its image in float32, and nothing
// else of it.
type UnitReads struct {
	Float32 []Span
	BF16    bool
}

// UnitReadsBF16 is UnitReads of each unit of UnitsOf(cfg), in its order:
// an embedding block is read in float32 (the embedding's rows), and with
// a tied head in bfloat16 too; a decoder layer's norms and biases in
// float32 and its projections in bfloat16; the final norm in float32; an
// untied head's block in bfloat16 alone.
func UnitReadsBF16(cfg Config) []UnitReads {
	units := UnitsOf(cfg)
	x := unitsIndex(cfg)
	sp := SpansOf(cfg)
	out := make([]UnitReads, len(units))
	for b := range x.blocks {
		out[x.emb(b)] = UnitReads{Float32: []Span{units[x.emb(b)]}, BF16: x.tied}
		if !x.tied {
			out[x.head(b)] = UnitReads{BF16: true}
		}
	}
	for l, ls := range sp.Layers {
		var f []Span
		for _, s := range []Span{ls.InNorm, ls.PostNorm, ls.QKVBias, ls.OBias, ls.QKNorm} {
			if s.Len > 0 {
				f = append(f, s)
			}
		}
		slices.SortFunc(f, func(a, b Span) int { return cmp.Compare(a.Off, b.Off) })
		out[x.layer(l)] = UnitReads{Float32: f, BF16: true}
	}
	out[x.norm()] = UnitReads{Float32: []Span{units[x.norm()]}}
	return out
}

// Float32Len is the floats of the unit's float32 image.
func (r UnitReads) Float32Len() int {
	n := 0
	for _, s := range r.Float32 {
		n += s.Len
	}
	return n
}

// Float32Before is how many floats of the unit's float32 image lie before
// flat position p: where p falls in the image. A run [lo, hi) of the flat
// buffer holds the image's floats [Float32Before(lo), Float32Before(hi)).
func (r UnitReads) Float32Before(p int) int {
	n := 0
	for _, s := range r.Float32 {
		n += min(max(p-s.Off, 0), s.Len)
	}
	return n
}

// Whole32 reports whether the unit's float32 image is the whole unit u of
// units (an embedding block, the final norm).
func (r UnitReads) Whole32(u Span) bool {
	return len(r.Float32) == 1 && r.Float32[0] == u
}
