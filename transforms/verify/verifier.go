package verify

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Result is the verdict on one response.
type Result struct {
	// Correct reports whether the extracted answer equals the ground truth.
	Correct bool
	// Score is the reward: 1 when correct, 0 otherwise.
	Score float32
	// Extracted is the final answer found in the response ("" when none).
	Extracted string
	// Reason says in words how the verdict was reached.
	Reason string
}

// Verifier scores a response against the ground truth of its problem.
// Implementations are safe for concurrent use.
type Verifier interface {
	Verify(response, groundTruth string) Result
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Verifier{}
)

func init() {
	math := MathVerifier{}
	for _, ds := range []string{
		"math", "math500", "math_500", "deepscaler", "deepscaler_math", "gsm8k",
		"aime", "aime24", "aime25", "aime_1983_2023", "amc", "amc23",
	} {
		registry[ds] = math
	}
	registry["mc"] = ChoiceVerifier{}
	registry["integer"] = IntegerVerifier{}
}

// aliases maps the data_source names of datasets prepared for other
// frameworks (veRL's preprocessing scripts, DAPO-Math-17k) to the verifier
// names registered here.
var aliases = map[string]string{
	"openai/gsm8k":                       "gsm8k",
	"lighteval/math":                     "math",
	"digitallearninggmbh/math-lighteval": "math",
	"hendrycks/competition_math":         "math",
	"huggingfaceh4/math-500":             "math500",
	"math_dapo":                          "math",
	"math_dapo_reasoning":                "math",
	"aime2024":                           "aime24",
	"aime2025":                           "aime25",
}

// Canonical returns the registered name for data_source ds (matched
// case-insensitively, directly or through the aliases of other
// frameworks' names, "openai/gsm8k" being "gsm8k") and whether a verifier
// is registered under it.
func Canonical(ds string) (string, bool) {
	key := strings.ToLower(strings.TrimSpace(ds))
	if a, ok := aliases[key]; ok {
		key = a
	}
	registryMu.RLock()
	_, ok := registry[key]
	registryMu.RUnlock()
	return key, ok
}

// ForDataSource returns the verifier registered for a data_source. Names are
// matched case-insensitively, and other frameworks' names through their
// aliases (see Canonical). An unknown name gives an error listing the
// known ones.
func ForDataSource(ds string) (Verifier, error) {
	key, _ := Canonical(ds)
	registryMu.RLock()
	v, ok := registry[key]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("verify: no verifier for data_source %q; known data sources: %s (register others with verify.Register)",
			ds, strings.Join(DataSources(), ", "))
	}
	return v, nil
}

// Register makes v the verifier for data_source name (case-insensitive),
// replacing any earlier one; a task uses it to configure its own verifier.
// It panics on an empty name or a nil verifier, which are programming errors.
func Register(name string, v Verifier) {
	key := strings.ToLower(strings.TrimSpace(name))
	if key == "" || v == nil {
		panic(fmt.Sprintf("verify.Register(%q, %v): name and verifier must be set", name, v))
	}
	registryMu.Lock()
	registry[key] = v
	registryMu.Unlock()
}

// Stricter is a verifier that has a strict form: one that accepts only a
// final answer given the way the format marks it (a box, a tag) and never
// falls back to the last number or letter of the text.
type Stricter interface {
	StrictForm() Verifier
}

// ForTraining returns the verifier of a data_source as training rewards
// use it: with strict set, its strict form (see Stricter), so that a policy
// cannot collect reward by ending its text with a guess; otherwise the
// registered one. Evaluation uses ForDataSource as registered.
func ForTraining(ds string, strict bool) (Verifier, error) {
	v, err := ForDataSource(ds)
	if err != nil || !strict {
		return v, err
	}
	if s, ok := v.(Stricter); ok {
		return s.StrictForm(), nil
	}
	return v, nil
}

// DataSources lists the registered data_source names in sorted order.
func DataSources() []string {
	registryMu.RLock()
	names := make([]string, 0, len(registry))
	for k := range registry {
		names = append(names, k)
	}
	registryMu.RUnlock()
	sort.Strings(names)
	return names
}

// verdict builds a Result from a boolean.
func verdict(ok bool, extracted, reason string) Result {
	r := Result{Correct: ok, Extracted: extracted, Reason: reason}
	if ok {
		r.Score = 1
	}
	return r
}
