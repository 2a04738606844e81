package parquetio

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/schemas"
)

var vocab = strings.Fields("the of and to sum root prime equal integer answer check hence triangle modulo verify résumé 數學 √2 ∑")

func randText(rng *rand.Rand, words int) string {
	w := make([]string, words)
	for i := range w {
		w[i] = vocab[rng.IntN(len(vocab))]
	}
	return strings.Join(w, " ")
}

// randTrajectories returns n valid trajectories (schemas.Trajectory.Validate
// accepts them) of random shape: empty and non-empty prompt and response
// token lists, zero to three interactions, empty and non-empty strings.
func randTrajectories(rng *rand.Rand, n int, step int64) []schemas.Trajectory {
	out := make([]schemas.Trajectory, n)
	for i := range out {
		t := schemas.Trajectory{
			SchemaVersion: schemas.SchemaVersion,
			Run:           "run-a",
			Step:          step,
			PolicyVersion: step - 1,
			PromptID:      fmt.Sprintf("p-%04d", i/4),
			SampleIndex:   int32(i % 4),
			DataSource:    []string{"math/dapo", "math/aime24", ""}[rng.IntN(3)],
			ResponseText:  randText(rng, rng.IntN(30)),
			Reward:        float32(rng.IntN(2)),
			Advantage:     float32(rng.NormFloat64()),
			FinishReason:  []string{sampling.FinishEOS, sampling.FinishStop, sampling.FinishLength, schemas.FinishError}[rng.IntN(4)],
		}
		t.Correct = t.Reward > 0
		for range rng.IntN(3) * rng.IntN(40) { // often zero
			t.PromptIDs = append(t.PromptIDs, rng.Int32N(151_936))
		}
		// The response alternates policy segments and interaction spans of
		// external tokens.
		policy := func(k int) {
			for range k {
				t.ResponseIDs = append(t.ResponseIDs, rng.Int32N(151_936))
				t.TokenSource = append(t.TokenSource, schemas.SourcePolicy)
				t.BehaviorLogProbs = append(t.BehaviorLogProbs, -float32(rng.ExpFloat64()))
			}
		}
		if rng.IntN(8) != 0 { // one in eight has an empty response
			policy(rng.IntN(120))
			for range rng.IntN(4) {
				agent := rng.IntN(3)
				start := int32(len(t.ResponseIDs))
				for range rng.IntN(25) {
					src := schemas.SourceTemplate
					if rng.IntN(3) != 0 {
						src = int8(1 + agent)
					}
					t.ResponseIDs = append(t.ResponseIDs, rng.Int32N(151_936))
					t.TokenSource = append(t.TokenSource, src)
					t.BehaviorLogProbs = append(t.BehaviorLogProbs, 0)
				}
				t.InteractionAgent = append(t.InteractionAgent, schemas.InteractionAgents[agent])
				t.InteractionQuery = append(t.InteractionQuery, randText(rng, rng.IntN(8)))
				t.InteractionResult = append(t.InteractionResult, randText(rng, rng.IntN(12)))
				t.InteractionStatus = append(t.InteractionStatus, []string{schemas.StatusOK, schemas.StatusError, schemas.StatusTimeout, schemas.StatusLimit}[rng.IntN(4)])
				t.InteractionLatencyMs = append(t.InteractionLatencyMs, float32(rng.IntN(5000))/7)
				t.InteractionSpanStart = append(t.InteractionSpanStart, start)
				t.InteractionSpanEnd = append(t.InteractionSpanEnd, int32(len(t.ResponseIDs)))
				t.InteractionNoisy = append(t.InteractionNoisy, rng.IntN(4) == 0)
				policy(rng.IntN(40))
			}
		}
		if err := t.Validate(); err != nil {
			panic(fmt.Sprintf("generated trajectory %d is invalid: %v", i, err))
		}
		out[i] = t
	}
	return out
}

func randPrompts(rng *rand.Rand, n int) []schemas.Prompt {
	out := make([]schemas.Prompt, n)
	for i := range out {
		out[i] = schemas.Prompt{
			SchemaVersion: schemas.SchemaVersion,
			ID:            fmt.Sprintf("math/dapo/%d", i),
			DataSource:    "math/dapo",
			Problem:       randText(rng, 1+rng.IntN(40)),
			Answer:        fmt.Sprint(rng.IntN(1000)),
			Solution:      randText(rng, rng.IntN(20)),
			Extra:         []string{"", `{"level":3}`}[rng.IntN(2)],
		}
	}
	return out
}

func randEvalRecords(rng *rand.Rand, n int) []schemas.EvalRecord {
	out := make([]schemas.EvalRecord, n)
	for i := range out {
		out[i] = schemas.EvalRecord{
			SchemaVersion: schemas.SchemaVersion,
			Run:           "run-a",
			Checkpoint:    "step-000003",
			PolicyVersion: 3,
			Benchmark:     "aime24",
			ProblemID:     fmt.Sprintf("aime24/%d", i/4),
			SampleIndex:   int32(i % 4),
			Seed:          rng.Int64(),
			Prompt:        randText(rng, 1+rng.IntN(30)),
			Response:      randText(rng, rng.IntN(60)),
			Extracted:     fmt.Sprint(rng.IntN(100)),
			Answer:        fmt.Sprint(rng.IntN(100)),
			Correct:       rng.IntN(2) == 0,
			Score:         float32(rng.IntN(2)),
			Verdict:       "math_verify",
			FinishReason:  sampling.FinishEOS,
			ResponseLen:   int32(rng.IntN(4000)),
			LatencyMs:     float32(rng.IntN(90000)) / 3,
		}
	}
	return out
}

// canonical is a row's JSON with nil slices written as empty ones, so that
// rows that differ only in nil versus empty lists compare equal.
func canonical(row any) string {
	v := reflect.ValueOf(row)
	c := reflect.New(v.Type()).Elem()
	c.Set(v)
	for i := range c.NumField() {
		if f := c.Field(i); f.Kind() == reflect.Slice && f.IsNil() {
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		}
	}
	b, err := json.Marshal(c.Interface())
	if err != nil {
		panic(err)
	}
	return string(b)
}

// sameRows fails the test unless got and want hold the same rows with the
// same multiplicities, in any order.
func sameRows[T any](t *testing.T, what string, got, want []T) {
	t.Helper()
	count := map[string]int{}
	for _, r := range want {
		count[canonical(r)]++
	}
	for _, r := range got {
		count[canonical(r)]--
	}
	var missing, extra []string
	for k, n := range count {
		for ; n > 0; n-- {
			missing = append(missing, k)
		}
		for ; n < 0; n++ {
			extra = append(extra, k)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return
	}
	sort.Strings(missing)
	sort.Strings(extra)
	short := func(s []string) string {
		if len(s) == 0 {
			return "none"
		}
		r := s[0]
		if len(r) > 400 {
			r = r[:400] + "..."
		}
		return fmt.Sprintf("%d, first: %s", len(s), r)
	}
	t.Fatalf("%s: got %d rows, want %d; rows missing: %s; rows not expected: %s", what, len(got), len(want), short(missing), short(extra))
}
