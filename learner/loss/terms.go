package loss

import "math"

// This file holds the per-token terms as small pure functions of float64
// scalars. Each returns the token's loss (to be minimised) and its
// derivative with respect to the token's log-probability logp. Arguments
// named sg* are stop-gradient copies: they hold the same values as the live
// ones in the forward pass but are constants for differentiation, as
// .detach() is in PyTorch.

// ratioTerm is the result of a clipped-ratio surrogate for one token.
type ratioTerm struct {
	loss, grad float64
	ratio      float64 // the ratio as used (after the log guard)
	clipLow    bool    // A < 0 and ratio < 1-low: the lower clip is active
	clipHigh   bool    // A > 0 and ratio > 1+high: the upper clip is active
	dual       bool    // A < 0 and the dual-clip bound is active
}

// ppoToken is the token-level clipped surrogate with decoupled clip and
// optional dual clip:
//
//	r = exp(clamp(logp - old, -20, 20))
//	l = max(-A*r, -A*clip(r, 1-low, 1+high))
//	if dual > 1 and A < 0: l = min(l, -A*dual)
func ppoToken(logp, old, a, low, high, dual float64) ratioTerm {
	lr, dlr := logp-old, 1.0
	if lr > maxLogRatio {
		lr, dlr = maxLogRatio, 0
	} else if lr < -maxLogRatio {
		lr, dlr = -maxLogRatio, 0
	}
	r := math.Exp(lr)
	t := ratioTerm{ratio: r}
	l1 := -a * r
	l2 := -a * math.Min(math.Max(r, 1-low), 1+high)
	if l2 > l1 {
		// Only possible when the clamp moved r: the clipped branch is
		// constant in logp.
		t.loss, t.grad = l2, 0
		t.clipHigh, t.clipLow = a > 0, a < 0
	} else {
		t.loss, t.grad = l1, -a*r*dlr
	}
	if dual > 0 && a < 0 {
		if l3 := -a * dual; t.loss > l3 {
			t.loss, t.grad, t.dual = l3, 0, true
		}
	}
	return t
}

// gspoToken is GSPO's surrogate in its token form: the token's ratio has
// the value of its trajectory's sequence ratio but the gradient of its own
// log-probability,
//
//	s = exp(min(logp - sg(logp) + sgSeqLogRatio, 10))
//	l = max(-A*s, -A*clip(s, 1-low, 1+high))
//
// where sgSeqLogRatio is the (detached) mean of log pi - log pi_old over
// the trajectory's Internal tokens. With a per-trajectory token mean this
// has the value and gradient of GSPO's sequence-level objective.
func gspoToken(logp, sgLogp, sgSeqLogRatio, a, low, high float64) ratioTerm {
	ls, dls := logp-sgLogp+sgSeqLogRatio, 1.0
	if ls > maxSeqLogRatio {
		ls, dls = maxSeqLogRatio, 0
	}
	s := math.Exp(ls)
	t := ratioTerm{ratio: s}
	l1 := -a * s
	l2 := -a * math.Min(math.Max(s, 1-low), 1+high)
	if l2 > l1 {
		t.loss, t.grad = l2, 0
		t.clipHigh, t.clipLow = a > 0, a < 0
	} else {
		t.loss, t.grad = l1, -a*s*dls
	}
	return t
}

// aipoToken is AIPO's External term (Eq. 5-7): coefficient pi with the
// stop-gradient lower bound,
//
//	c = clip(pi, omega/sg(pi)*pi, +inf),  l = -A*c
//
// so the value is max(pi, omega) and the gradient max(pi, omega)*A*d log pi
// (with the sign of a loss). The second result is the coefficient's value.
func aipoToken(logp, sgLogp, a, omega float64) (loss, grad, coef float64) {
	pi := math.Exp(logp)
	lower := omega / math.Exp(sgLogp) * pi
	c := pi
	if lower > pi {
		c = lower
	}
	// d pi/d logp = pi and d lower/d logp = lower: either branch's
	// derivative equals its value.
	return -a * c, -a * c, c
}

// plainToken is the External term without the lower bound ("w/o CS"):
// l = -A*pi.
func plainToken(logp, a float64) (loss, grad float64) {
	pi := math.Exp(logp)
	return -a * pi, -a * pi
}

// luffyToken is LUFFY's shaped off-policy term: with pi_off taken as 1 the
// importance ratio is pi, shaped by f(pi) = pi/(pi+gamma) and not clipped,
//
//	l = -A*pi/(pi+gamma),  dl/dlogp = -A*gamma*pi/(pi+gamma)^2
//
// (d f/d pi = gamma/(pi+gamma)^2 and d pi/d logp = pi).
func luffyToken(logp, a, gamma float64) (loss, grad float64) {
	pi := math.Exp(logp)
	d := pi + gamma
	return -a * pi / d, -a * gamma * pi / (d * d)
}

// K3 is k3Token, exported as the reference of other backends' KL kernels.
func K3(logp, ref float64) (kl, grad float64) { return k3Token(logp, ref) }

// k3Token is the "low_var_kl" estimate of KL(pi || pi_ref) at one token,
//
//	d = clamp(ref - logp, -20, 20),  k = min(exp(d) - d - 1, 10)
//
// (it is never negative, so the lower guard of veRL's clamp never acts).
func k3Token(logp, ref float64) (kl, grad float64) {
	d, dd := ref-logp, -1.0
	if d > maxLogRatio {
		d, dd = maxLogRatio, 0
	} else if d < -maxLogRatio {
		d, dd = -maxLogRatio, 0
	}
	e := math.Exp(d)
	k := e - d - 1
	if k > maxKL {
		return maxKL, 0
	}
	return k, (e - 1) * dd
}
