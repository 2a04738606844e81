package bf16

import (
	"math"
	"testing"
)

func TestFromFloat32(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // a tie: to the even 0x3f80
		{math.Float32frombits(0x3f818000), 0x3f82}, // a tie: to the even 0x3f82
		{math.Float32frombits(0x3f808001), 0x3f81}, // just above the tie
		{math.Float32frombits(0x7f7fffff), 0x7f80}, // the largest float rounds to +Inf
		{float32(math.Inf(-1)), 0xff80},
		{float32(math.Copysign(0, -1)), 0x8000},
		{math.Float32frombits(0xffc00001), 0xffc0}, // a negative NaN stays a negative quiet NaN
	} {
		if got := FromFloat32(c.in); got != c.want {
			t.Errorf("FromFloat32(%#08x) = %#04x, want %#04x", math.Float32bits(c.in), got, c.want)
		}
	}
	if got := Round(1.00390625 + 1.0/1024); got != 1.0078125 {
		t.Errorf("Round(1.0048828125) = %g, want 1.0078125", got)
	}
	for _, h := range []uint16{0, 0x3f80, 0xc2f7, 0x7f80} {
		if got := FromFloat32(ToFloat32(h)); got != h {
			t.Errorf("FromFloat32(ToFloat32(%#04x)) = %#04x", h, got)
		}
	}
}
