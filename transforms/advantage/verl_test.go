//go:build verl

package advantage

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// veRL (PyPI verl 0.9.1) judges GRPO's advantages: scripts/verl/
// core_algos_check.py runs veRL's compute_grpo_outcome_advantage in float64
// on the same rewards, groups interleaved in the batch as veRL's index
// allows, with and without the std normalisation (norm_adv_by_std_in_grpo;
// without it is Dr.GRPO). Advantages are float32 here, so they agree
// within one float32 rounding; 1e-6 relative is asked.
const verlTol = 1e-6

type verlAdvCase struct {
	Name    string      `json:"name"`
	Kind    string      `json:"kind"`
	Rewards []float64   `json:"rewards"` // float32 values, exactly
	Index   []int       `json:"index"`
	Mask    [][]float32 `json:"response_mask"`
	NormStd bool        `json:"norm_adv_by_std_in_grpo"`
	Epsilon float64     `json:"epsilon"`
}

// verlGroups draws groups of 1 to 8 responses: binary rewards (the
// verifier's), continuous ones, and groups whose rewards are all equal;
// group 0 has a single response. It returns the rewards per group.
func verlGroups(rng *rand.Rand, n int) [][]float32 {
	groups := make([][]float32, n)
	for g := range groups {
		size := 2 + rng.IntN(7)
		if g == 0 {
			size = 1
		}
		r := make([]float32, size)
		for i := range r {
			switch g % 3 {
			case 0:
				r[i] = float32(rng.IntN(2))
			case 1:
				r[i] = float32(rng.NormFloat64())
			case 2:
				r[i] = 0.5
			}
		}
		groups[g] = r
	}
	groups[0][0] = 1 // the reward a group of one passes on in veRL
	return groups
}

func TestAgreesWithVerl(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 3))
	groups := verlGroups(rng, 12)
	// The batch in a shuffled order: veRL groups by index, not position.
	type slot struct{ g, i int }
	var slots []slot
	for g, r := range groups {
		for i := range r {
			slots = append(slots, slot{g, i})
		}
	}
	rng.Shuffle(len(slots), func(a, b int) { slots[a], slots[b] = slots[b], slots[a] })
	base := verlAdvCase{Kind: "advantage", Epsilon: DefaultEpsilon}
	for _, s := range slots {
		base.Rewards = append(base.Rewards, float64(groups[s.g][s.i]))
		base.Index = append(base.Index, s.g)
		m := make([]float32, 1+rng.IntN(6))
		for j := range m {
			m[j] = 1
		}
		base.Mask = append(base.Mask, append(m, make([]float32, 6-len(m)+1)...))
	}
	std, noStd := base, base
	std.Name, std.NormStd = "grpo", true
	noStd.Name, noStd.NormStd = "drgrpo", false
	res := runVerl(t, []verlAdvCase{std, noStd})

	for _, c := range []struct {
		name string
		cfg  Config
	}{{"grpo", Config{Method: GRPO}}, {"drgrpo", Config{Method: DrGRPO}}} {
		want := res[c.name]
		adv := make([][]float32, len(groups))
		for g, r := range groups {
			a, err := c.cfg.Advantages(r)
			if err != nil {
				t.Fatal(err)
			}
			adv[g] = a
		}
		worst, single := 0.0, 0
		for k, s := range slots {
			got, v := float64(adv[s.g][s.i]), want[k][0]
			if len(groups[s.g]) == 1 {
				// A group of one has no baseline: aipo gives it no
				// advantage; veRL takes mean 0 and std 1, so the reward
				// itself (over 1+eps with the std normalisation) passes.
				r := float64(groups[s.g][s.i])
				wantVerl := r
				if c.name == "grpo" {
					wantVerl = r / (1 + DefaultEpsilon)
				}
				if got != 0 || relDiff(v, wantVerl) > verlTol {
					t.Errorf("%s: a group of one with reward %v: aipo %v (want 0), veRL %v (want %v)", c.name, r, got, v, wantVerl)
				}
				single++
				continue
			}
			d := relDiff(got, v)
			worst = math.Max(worst, d)
			if d > verlTol {
				t.Errorf("%s: group %d response %d (rewards %v): advantage %v, veRL %v", c.name, s.g, s.i, groups[s.g], got, v)
			}
			for j, m := range base.Mask[k] {
				if m == 0 && want[k][j] != 0 {
					t.Errorf("%s: veRL's advantage at masked position [%d][%d] is %v", c.name, k, j, want[k][j])
				}
			}
		}
		if single == 0 {
			t.Errorf("%s: the batch has no group of one", c.name)
		}
		t.Logf("%-8s %d responses in %d groups: worst relative difference %.1e; %d group of one: aipo 0, veRL the reward", c.name, len(slots), len(groups), worst, single)
	}
}

func relDiff(a, b float64) float64 {
	d := math.Abs(a - b)
	if d == 0 {
		return 0
	}
	return d / math.Max(math.Abs(a), math.Abs(b))
}

// runVerl returns veRL's advantages ([response][position]) per case name.
func runVerl(t *testing.T, cases []verlAdvCase) map[string][][]float64 {
	t.Helper()
	var out struct {
		Cases []struct {
			Name       string      `json:"name"`
			Advantages [][]float64 `json:"advantages"`
		} `json:"cases"`
	}
	testtools.VerlCheck(t, 5*time.Minute, map[string]any{"cases": cases}, &out)
	res := map[string][][]float64{}
	for _, c := range out.Cases {
		res[c.Name] = c.Advantages
	}
	return res
}
