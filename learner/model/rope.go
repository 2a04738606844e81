package model

import (
	"math"
	"sync"

	"github.com/aipo-rl/aipo/learner/hfconfig"
)

// ropeTable holds cos and sin of pos*theta^(-2i/D) for i < D/2, in the
// rotate_half convention of Hugging Face: element i of a head pairs with
// element i+D/2. Rows are added on demand up to the longest position seen.
type ropeTable struct {
	mu       sync.Mutex
	half     int
	invFreq  []float64
	cos, sin []float32 // [positions, D/2]
}

// newRopeTable builds the table for head dimension D, base theta and, when
// scaling is of rope_type llama3, Llama 3's rescaled frequencies.
func newRopeTable(D int, theta float64, scaling *hfconfig.RopeScaling) *ropeTable {
	t := &ropeTable{half: D / 2, invFreq: make([]float64, D/2)}
	for i := range t.invFreq {
		t.invFreq[i] = 1 / math.Pow(theta, float64(2*i)/float64(D))
	}
	if scaling != nil && scaling.Kind() == hfconfig.RopeLlama3 {
		llama3Frequencies(t.invFreq, scaling)
	}
	return t
}

// llama3Frequencies rescales inverse frequencies in place as Llama 3.x
// does (rope_type "llama3"). With wavelength w = 2*pi/f and o the original
// context length: components whose wavelength is shorter than
// o/high_freq_factor (many turns within the original context) keep f;
// those longer than o/low_freq_factor are slowed by factor; in between f
// moves linearly in o/w from f/factor to f:
// f' = (1-s)*f/factor + s*f with s = (o/w - low)/(high - low).
func llama3Frequencies(invFreq []float64, r *hfconfig.RopeScaling) {
	orig := float64(r.OriginalMaxPositionEmbeddings)
	lowWave, highWave := orig/r.LowFreqFactor, orig/r.HighFreqFactor
	for i, f := range invFreq {
		wave := 2 * math.Pi / f
		switch {
		case wave < highWave:
		case wave > lowWave:
			invFreq[i] = f / r.Factor
		default:
			s := (orig/wave - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
			invFreq[i] = (1-s)*f/r.Factor + s*f
		}
	}
}

// upTo grows the table to cover positions [0, n) and returns the cos and
// sin rows as they stand: later growth appends, so the returned slices stay
// valid and unshared with writers, and concurrent passes need no lock.
func (t *ropeTable) upTo(n int) (cos, sin []float32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	have := len(t.cos) / t.half
	for p := have; p < n; p++ {
		for _, f := range t.invFreq {
			a := float64(p) * f
			t.cos = append(t.cos, float32(math.Cos(a)))
			t.sin = append(t.sin, float32(math.Sin(a)))
		}
	}
	return t.cos[: n*t.half : n*t.half], t.sin[: n*t.half : n*t.half]
}

// ropeForward adds bias[ld] (when not nil) to each row of x[N,ld], then
// rotates, in place, heads 0..nHeads-1 of the row (head h at columns
// h*D..h*D+D-1) by the angle of the row's position, cos and sin being rows
// [position, D/2] of a ropeTable:
// x1' = x1*cos - x2*sin, x2' = x2*cos + x1*sin, x1 = x[:D/2], x2 = x[D/2:].
// The bias is added here rather than by the projection's own pass so that
// each row is visited once.
func ropeForward(x []float32, ld int, bias []float32, pos []int32, nHeads, D int, cos, sin []float32) {
	ropeRotate(x, ld, bias, pos, nHeads, D, cos, sin, false)
}

// ropeBackward applies, in place, the transposed rotation to the gradient
// dx[N,ld] of ropeForward's output: dx1 = d1*cos + d2*sin, dx2 = d2*cos - d1*sin.
func ropeBackward(dx []float32, ld int, pos []int32, nHeads, D int, cos, sin []float32) {
	ropeRotate(dx, ld, nil, pos, nHeads, D, cos, sin, true)
}

// ropeRotate is ropeForward with sin negated when flip: the transposed
// rotation, with the same bits as a*c + b*s and b*c - a*s.
func ropeRotate(x []float32, ld int, bias []float32, pos []int32, nHeads, D int, cos, sin []float32, flip bool) {
	half := D / 2
	parallelFor(len(pos), 64, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			if bias != nil {
				addInto(x[r*ld:(r+1)*ld], x[r*ld:(r+1)*ld], bias)
			}
			c := cos[int(pos[r])*half : int(pos[r]+1)*half]
			s := sin[int(pos[r])*half : int(pos[r]+1)*half]
			for h := 0; h < nHeads; h++ {
				x1 := x[r*ld+h*D : r*ld+h*D+half]
				x2 := x[r*ld+h*D+half : r*ld+h*D+D]
				for i := ropeVector(x1, x2, c, s, flip); i < len(c); i++ {
					a, b, sn := x1[i], x2[i], s[i]
					if flip {
						sn = -sn
					}
					x1[i] = float32(a*c[i]) - float32(b*sn)
					x2[i] = float32(b*c[i]) + float32(a*sn)
				}
			}
		}
	})
}
