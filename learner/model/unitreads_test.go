package model

import "testing"

// UnitReadsBF16 cuts each unit into what a bfloat16 pass reads of it, for
// the tiny Qwen2 (tied head, QKV bias), Qwen3 (untied head, q/k norm)
// and Llama 3 fixtures: an embedding block and the final norm are read
// whole in float32, an embedding block in bfloat16 too when the head is
// tied, an untied head's block in bfloat16 alone; a layer's float32
// spans are its norms and biases, in flat order, inside the layer,
// disjoint from its projections, and with them they cover the layer;
// Float32Before places every position in the image.
func TestUnitReadsBF16(t *testing.T) {
	for _, name := range []string{"tiny_qwen2", "tiny_qwen3", "tiny_llama3"} {
		cfg, err := LoadConfig("testdata/" + name + "_config.json")
		if err != nil {
			t.Fatal(err)
		}
		units, reads, x, sp := UnitsOf(cfg), UnitReadsBF16(cfg), unitsIndex(cfg), SpansOf(cfg)
		if len(reads) != len(units) {
			t.Fatalf("%s: %d reads for %d units", name, len(reads), len(units))
		}
		for u, rd := range reads {
			us := units[u]
			end := 0
			for _, s := range rd.Float32 {
				if s.Len <= 0 || s.Off < us.Off || s.Off+s.Len > us.Off+us.Len || s.Off < end {
					t.Errorf("%s: unit %d %v: float32 span %v out of it or out of order", name, u, us, s)
				}
				end = s.Off + s.Len
			}
			if rd.Float32Before(us.Off) != 0 || rd.Float32Before(us.Off+us.Len) != rd.Float32Len() {
				t.Errorf("%s: unit %d: the image runs from %d to %d, want 0 to %d", name, u, rd.Float32Before(us.Off), rd.Float32Before(us.Off+us.Len), rd.Float32Len())
			}
			k := 0
			for p := us.Off; p < us.Off+us.Len; p++ {
				if got := rd.Float32Before(p); got != k {
					t.Fatalf("%s: unit %d: position %d at %d of the image, want %d", name, u, p, got, k)
				}
				for _, s := range rd.Float32 {
					if p >= s.Off && p < s.Off+s.Len {
						k++
					}
				}
			}
		}
		for b := range x.blocks {
			if rd, us := reads[x.emb(b)], units[x.emb(b)]; !rd.Whole32(us) || rd.BF16 != cfg.TieWordEmbeddings {
				t.Errorf("%s: embedding block %d read %+v, want whole in float32, in bfloat16 too %v", name, b, rd, cfg.TieWordEmbeddings)
			}
			if !cfg.TieWordEmbeddings {
				if rd := reads[x.head(b)]; rd.Float32Len() != 0 || !rd.BF16 {
					t.Errorf("%s: head block %d read %+v, want bfloat16 alone", name, b, rd)
				}
			}
		}
		if rd := reads[x.norm()]; !rd.Whole32(units[x.norm()]) || rd.BF16 {
			t.Errorf("%s: the final norm read %+v, want whole in float32 alone", name, rd)
		}
		for l, ls := range sp.Layers {
			u := x.layer(l)
			rd, us := reads[u], units[u]
			if !rd.BF16 {
				t.Errorf("%s: layer %d's products do not round it", name, l)
			}
			projections := 0
			for _, p := range []Span{ls.QKV, ls.O, ls.GateUp, ls.Down} {
				projections += p.Len
				if rd.Float32Before(p.Off) != rd.Float32Before(p.Off+p.Len) {
					t.Errorf("%s: layer %d's projection %v is in its float32 image", name, l, p)
				}
			}
			if projections+rd.Float32Len() != us.Len {
				t.Errorf("%s: layer %d: projections %d and float32 tensors %d, the unit %d", name, l, projections, rd.Float32Len(), us.Len)
			}
		}
	}
}
