package demo

import (
	"math/rand/v2"
	"strconv"
)

// Example is one supervised line: a prompt and the response the warm start
// learns to write after it.
type Example struct {
	Prompt   string
	Response string
	Kind     string // which part of the mix produced it
}

// CorpusMix sets the shares of the warm-start corpus. Shares need not sum to
// one; they are normalised.
type CorpusMix struct {
	SeenDirect  float64 `yaml:"seen_direct" json:"seen_direct"`   // seen entity, recalled directly
	SeenCall    float64 `yaml:"seen_call" json:"seen_call"`       // seen entity, through the Knowledge Agent
	Arithmetic  float64 `yaml:"arithmetic" json:"arithmetic"`     // "v+n?" -> "v+n=s;"
	ReasonCall  float64 `yaml:"reason_call" json:"reason_call"`   // seen entity, sum through the Reasoning Agent
	VerifyCall  float64 `yaml:"verify_call" json:"verify_call"`   // seen entity, sum checked by the Verify Agent
	RandomNames float64 `yaml:"random_names" json:"random_names"` // invented non-entity names, half calls, half guesses
}

// DefaultMix follows the prototype that worked: seen facts, seen direct
// answers and calls, arithmetic, and a fifth of lines about random
// non-entity names so that "copy the name into the query, copy the value out
// of the result" generalises beyond the seen entities.
func DefaultMix() CorpusMix {
	return CorpusMix{SeenDirect: 0.30, SeenCall: 0.25, Arithmetic: 0.10, ReasonCall: 0.075, VerifyCall: 0.075, RandomNames: 0.20}
}

// Corpus draws n warm-start examples. No unseen entity's name or value
// appears in it.
func (t *Task) Corpus(n int, mix CorpusMix, seed uint64) []Example {
	rng := rand.New(rand.NewPCG(seed, 0xc0de))
	var seen []Entity
	for _, e := range t.entities {
		if e.Seen {
			seen = append(seen, e)
		}
	}
	weights := []float64{mix.SeenDirect, mix.SeenCall, mix.Arithmetic, mix.ReasonCall, mix.VerifyCall, mix.RandomNames}
	var total float64
	for _, w := range weights {
		total += w
	}
	out := make([]Example, 0, n)
	for len(out) < n {
		r := rng.Float64() * total
		k := 0
		for k < len(weights)-1 && r >= weights[k] {
			r -= weights[k]
			k++
		}
		num := 1 + rng.IntN(t.cfg.MaxN)
		switch k {
		case 0, 1, 3, 4:
			e := seen[rng.IntN(len(seen))]
			q := t.question(e, num)
			var resp string
			switch k {
			case 0:
				resp = Direct(e.Value, num)
			case 1:
				resp = Calling(e.Name, e.Value, num)
			case 3:
				resp = ReasonLine(e.Value, num)
			case 4:
				resp = VerifyLine(e.Value, num)
			}
			out = append(out, Example{Prompt: q.Prompt, Response: resp, Kind: [...]string{"seen_direct", "seen_call", "", "reason_call", "verify_call"}[k]})
		case 2:
			v := t.cfg.MinValue + rng.IntN(t.cfg.MaxValue-t.cfg.MinValue+1)
			out = append(out, Example{Prompt: strconv.Itoa(v) + "+" + strconv.Itoa(num) + "?", Response: Arith(v, num), Kind: "arithmetic"})
		case 5:
			name := RandomName(rng)
			if t.IsEntity(name) {
				continue
			}
			v := t.cfg.MinValue + rng.IntN(t.cfg.MaxValue-t.cfg.MinValue+1)
			resp := Direct(v, num)
			if rng.IntN(2) == 0 {
				resp = Calling(name, v, num)
			}
			out = append(out, Example{Prompt: name + "+" + strconv.Itoa(num) + "?", Response: resp, Kind: "random_names"})
		}
	}
	return out
}

// ReasonLine is a direct recall followed by a call to the Reasoning Agent
// for the sum.
func ReasonLine(value, n int) string {
	sum := strconv.Itoa(value) + "+" + strconv.Itoa(n)
	return TagResult + strconv.Itoa(value) + TagResultEnd + TagReason + sum + TagReasonEnd +
		TagResult + strconv.Itoa(value+n) + TagResultEnd + Arith(value, n)
}

// VerifyLine is a direct answer whose equation is checked by the Verify
// Agent before the final line.
func VerifyLine(value, n int) string {
	eq := strconv.Itoa(value) + "+" + strconv.Itoa(n) + "=" + strconv.Itoa(value+n)
	return TagResult + strconv.Itoa(value) + TagResultEnd + TagVerify + eq + TagVerifyEnd +
		TagResult + "yes" + TagResultEnd + Arith(value, n)
}
