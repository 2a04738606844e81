package model
import ("testing"; "math/rand/v2"; "github.com/aipo-rl/aipo/learner/blas")
func TestZZProbe(t *testing.T) {
	r := rand.New(rand.NewPCG(1,1))
	for _, sz := range [][2]int{{64,192},{128,384},{512,1536},{512,8192},{1376,512}} {
		k, n := sz[0], sz[1]
		w := make([]float32, n*k); for i := range w { w[i] = float32(r.NormFloat64()) }
		x := make([]float32, 40*k); for i := range x { x[i] = float32(r.NormFloat64()) }
		ref := make([]float32, n)
		blas.SgemmSerial(false, true, 1, n, k, 1, x, k, w, k, 0, ref, n)
		bad := []int{}
		for M := 2; M <= 40; M++ {
			out := make([]float32, M*n)
			blas.Sgemm(false, true, M, n, k, 1, x, k, w, k, 0, out, n)
			for j := 0; j < n; j++ { if out[j] != ref[j] { bad = append(bad, M); break } }
		}
		// same row at other positions: row 0 data placed at row p
		badPos := []int{}
		for p := 1; p < 32; p++ {
			xx := make([]float32, 32*k); copy(xx, x[:32*k]); copy(xx[p*k:], x[:k])
			out := make([]float32, 32*n)
			blas.Sgemm(false, true, 32, n, k, 1, xx, k, w, k, 0, out, n)
			for j := 0; j < n; j++ { if out[p*n+j] != ref[j] { badPos = append(badPos, p); break } }
		}
		t.Logf("k=%d n=%d: M differing from M=1: %v; positions differing: %v", k, n, bad, badPos)
	}
	t.Log(blas.Backend())
}
