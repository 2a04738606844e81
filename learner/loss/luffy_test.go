package loss

import (
	"math"
	"strings"
	"testing"
)

// TestLUFFYShaping checks the shaped term's closed forms: f(pi) =
// pi/(pi+gamma) is 1/2 at pi = gamma, where its gradient weight
// gamma*pi/(pi+gamma)^2 peaks at 1/4, and the weight falls off on both
// sides (unlike AIPO's max(pi, omega), which never falls below omega).
func TestLUFFYShaping(t *testing.T) {
	const gamma = 0.1
	l, g := luffyToken(math.Log(gamma), 1, gamma)
	if math.Abs(l+0.5) > 1e-15 || math.Abs(g+0.25) > 1e-15 {
		t.Errorf("at pi = gamma: loss %v grad %v, want -1/2 and -1/4", l, g)
	}
	for _, pi := range []float64{1e-4, 0.01, 0.05, 0.2, 0.5, 1} {
		_, g := luffyToken(math.Log(pi), 1, gamma)
		if -g >= 0.25 {
			t.Errorf("pi %v: weight %v, want below the peak 1/4", pi, -g)
		}
	}
	cfg := DefaultConfig()
	cfg.External, cfg.Gamma = ExternalLUFFY, 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "gamma") {
		t.Errorf("gamma 0 under luffy: %v", err)
	}
	cfg.External = ExternalAIPO
	if err := cfg.Validate(); err != nil {
		t.Errorf("gamma 0 is unused under aipo, yet: %v", err)
	}
}
