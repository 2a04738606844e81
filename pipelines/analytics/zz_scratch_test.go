package analytics

import (
	"math/rand"
	"fmt"
	"testing"

	"github.com/aipo-rl/aipo/schemas"
)

func TestZZScratchRun(t *testing.T) {
	run := "/tmp/demo-run"
	rng := rand.New(rand.NewSource(1))
	for k := int64(1); k <= 30; k++ {
		var rows []schemas.Trajectory
		pSolve := 0.2 + 0.5*float64(k)/30
		callRate := 1.5 * float64(k) / 8
		if k > 8 { callRate = 1.5 - 0.1*float64(k-8) }
		if callRate < 0.4 { callRate = 0.4 }
		for p := 0; p < 32; p++ {
			diff := rng.Float64()
			for s := 0; s < 8; s++ {
				correct := rng.Float64() < pSolve*(1.5-diff)
				var calls []call
				src := []int8{}
				for i := 0; i < 50+rng.Intn(400); i++ { src = append(src, P) }
				for c := 0; c < 3 && rng.Float64() < callRate/3; c++ {
					ag := []string{"verify", "knowledge", "reason"}[rng.Intn(3)]
					st := "ok"
					if rng.Float64() < 0.05 { st = "error" }
					calls = append(calls, call{ag, st, float32(100 + rng.Intn(900)), rng.Float64() < 0.3})
					for i := 0; i < 30; i++ { src = append(src, map[string]int8{"verify": V, "knowledge": K, "reason": R}[ag]) }
					src = append(src, T, T)
				}
				r := float32(0)
				if correct { r = 1 }
				rows = append(rows, traj(k, fmt.Sprintf("p%d-%d", k, p), int32(s), correct, r, "eos", src, calls...))
			}
		}
		writeStep(t, run, k, k != 17, rows[:128], rows[128:])
	}
}
