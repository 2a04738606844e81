package cuda

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/model"
)

func TestSegmentBounds(t *testing.T) {
	start, end := SegmentBounds([]int{2, 0, 3})
	if !reflect.DeepEqual(start, []int32{0, 0, 2, 2, 2}) || !reflect.DeepEqual(end, []int32{2, 2, 5, 5, 5}) {
		t.Fatalf("SegmentBounds([2 0 3]) = %v, %v", start, end)
	}
}

func TestAttentionShapeErrors(t *testing.T) {
	for _, c := range []struct {
		N, H, KV, D int
		want        string
	}{
		{4, 6, 4, 32, "do not split"},
		{4, 4, 2, 256, "exceeds"},
		{4, 0, 1, 32, "must be positive"},
	} {
		err := attShape("AttentionForward", c.N, c.H, c.KV, c.D)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("attShape(%d, %d, %d, %d) = %v, want an error saying %q", c.N, c.H, c.KV, c.D, err, c.want)
		}
	}
}

// Attention tolerances: the GPU sums each score's D products and each
// output's weighted values in another order than the CPU's GEMMs and uses
// expf instead of the CPU's exp32 (both within 2 ulp), so results agree to
// a few float32 ulp of the terms' magnitude, ~1e-6 relative, growing with
// sqrt(terms). The forward is held to 1e-4 relative plus 1e-5 of the
// largest output; the gradients, which subtract nearly equal sums (dP -
// delta), to 1e-4 of the largest gradient.
func TestParityAttention(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct {
		lens     []int
		H, KV, D int
	}{
		{[]int{1, 37, 100, 5}, 4, 2, 32}, // GQA, sequences shorter and longer than a tile
		{[]int{130}, 2, 1, 128},          // widest head, one long sequence
		{[]int{64, 64, 3}, 3, 3, 16},     // multi-head without grouping, tile-aligned sequences
		{[]int{70, 33}, 4, 1, 64},        // the width-64 kernels (Qwen2.5-0.5B's heads)
	} {
		N := 0
		for _, l := range c.lens {
			N += l
		}
		QKV, QD := (c.H+2*c.KV)*c.D, c.H*c.D
		qkv := randn(r, N*QKV, 1)
		y, lse := make([]float32, N*QD), make([]float32, N*c.H)
		model.AttentionForward(y, lse, qkv, c.lens, c.H, c.KV, c.D)
		start, end := SegmentBounds(c.lens)
		gs, ge := uploadI32(t, dv, start), uploadI32(t, dv, end)
		gqkv := upload(t, dv, qkv)
		gy, glse := alloc(t, dv, F32, N*QD), alloc(t, dv, F32, N*c.H)
		must(t, dv.AttentionForward(gy, glse, gqkv, gs, N, c.H, c.KV, c.D))
		closeTo(t, "attention y", download(t, gy), y, 1e-4, 1e-5*maxAbs(y))
		closeTo(t, "attention lse", download(t, glse), lse, 1e-5, 1e-6)

		dy := randn(r, N*QD, 1)
		dqkv := make([]float32, N*QKV)
		model.AttentionBackward(dqkv, dy, qkv, y, lse, c.lens, c.H, c.KV, c.D)
		gdqkv, delta := alloc(t, dv, F32, N*QKV), alloc(t, dv, F32, N*c.H)
		// The GPU backward gets the CPU's y and lse so that it is checked alone.
		must(t, dv.AttentionBackward(gdqkv, upload(t, dv, dy), gqkv, upload(t, dv, y), upload(t, dv, lse), gs, ge, delta,
			N, c.H, c.KV, c.D))
		closeTo(t, "attention dqkv", download(t, gdqkv), dqkv, 1e-4, 1e-4*maxAbs(dqkv))
	}
}
