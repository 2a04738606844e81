package schemas

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
)

// words is a small vocabulary for realistic, compressible text.
var words = strings.Fields(`the of and to a in is that for it as with be on by this are we
let so then sum root prime equal integer answer check since therefore hence number value
triangle angle area square modulo divisor function sequence term limit probability verify
retrieve reason result compute consider case both sides each`)

func randText(rng *rand.Rand, nWords int) string {
	if nWords == 0 {
		return ""
	}
	var b strings.Builder
	for i := range nWords {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()
}

// genOptions shapes a generated trajectory.
type genOptions struct {
	promptLen, respLen int // token counts
	maxInteractions    int // 0..maxInteractions interactions
	textPerToken       int // bytes of response text per token (roughly)
}

// genTrajectory builds a valid trajectory: policy tokens with negative
// log-probs, and per interaction a span of template and agent tokens with
// zero log-probs.
func genTrajectory(rng *rand.Rand, o genOptions, idx int) Trajectory {
	t := Trajectory{
		SchemaVersion: SchemaVersion,
		Run:           "run-" + fmt.Sprint(idx%3),
		Step:          int64(7 + idx%2),
		PolicyVersion: int64(idx % 5),
		PromptID:      fmt.Sprintf("dapo-%06d", idx/8),
		SampleIndex:   int32(idx % 8),
		DataSource:    []string{"math/dapo", "math/openr1", "science/osr2"}[idx%3],
		ResponseText:  randText(rng, o.respLen*o.textPerToken/5),
		Reward:        float32(rng.IntN(2)),
		Advantage:     float32(rng.NormFloat64()),
		FinishReason:  []string{sampling.FinishEOS, sampling.FinishStop, sampling.FinishLength, FinishError}[rng.IntN(4)],
	}
	t.Correct = t.Reward > 0
	if o.promptLen > 0 {
		t.PromptIDs = make([]int32, o.promptLen)
		for i := range t.PromptIDs {
			t.PromptIDs[i] = rng.Int32N(151_936)
		}
	}
	n := o.respLen
	if n > 0 {
		t.ResponseIDs = make([]int32, n)
		t.TokenSource = make([]int8, n)
		t.BehaviorLogProbs = make([]float32, n)
		for i := range n {
			t.ResponseIDs[i] = rng.Int32N(151_936)
			t.BehaviorLogProbs[i] = -float32(rng.ExpFloat64())
		}
	}
	k := 0
	if o.maxInteractions > 0 {
		k = rng.IntN(o.maxInteractions + 1)
	}
	// Place k spans in order inside the response, each in its own slot.
	for i := range k {
		slot := n / max(k, 1)
		if slot < 8 {
			break
		}
		lo := i * slot
		start := lo + rng.IntN(slot/2)
		end := start + 2 + rng.IntN(slot/2-1)
		agent := int8(1 + rng.IntN(3))
		for j := start; j < end; j++ {
			t.TokenSource[j] = agent
			if j == start || j == end-1 {
				t.TokenSource[j] = SourceTemplate
			}
			t.BehaviorLogProbs[j] = 0
		}
		t.InteractionAgent = append(t.InteractionAgent, SourceName(agent))
		t.InteractionQuery = append(t.InteractionQuery, randText(rng, 3+rng.IntN(12)))
		t.InteractionResult = append(t.InteractionResult, randText(rng, rng.IntN(40)))
		t.InteractionStatus = append(t.InteractionStatus, []string{StatusOK, StatusOK, StatusOK, StatusError, StatusTimeout, StatusLimit}[rng.IntN(6)])
		t.InteractionLatencyMs = append(t.InteractionLatencyMs, float32(rng.ExpFloat64()*800))
		t.InteractionSpanStart = append(t.InteractionSpanStart, int32(start))
		t.InteractionSpanEnd = append(t.InteractionSpanEnd, int32(end))
		t.InteractionNoisy = append(t.InteractionNoisy, agent == SourceKnowledge && rng.IntN(2) == 0)
	}
	// Every other row was sampled across a weight push: its tokens from a
	// random point on carry the next version, and policy_version is the
	// oldest version of its policy tokens.
	if n > 0 && idx%2 == 0 {
		cut := rng.IntN(n + 1)
		t.TokenPolicyVersion = make([]int64, n)
		oldest := int64(-1)
		for i := range n {
			t.TokenPolicyVersion[i] = t.PolicyVersion
			if i >= cut {
				t.TokenPolicyVersion[i]++
			}
			if t.TokenSource[i] == SourcePolicy && (oldest < 0 || t.TokenPolicyVersion[i] < oldest) {
				oldest = t.TokenPolicyVersion[i]
			}
		}
		if oldest >= 0 {
			t.PolicyVersion = oldest
		}
	}
	return t
}

// randomTrajectories makes n trajectories of random shape, including empty
// prompts, empty responses and responses without interactions.
func randomTrajectories(seed uint64, n int) []Trajectory {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]Trajectory, n)
	for i := range out {
		o := genOptions{promptLen: rng.IntN(60), respLen: rng.IntN(400), maxInteractions: 3, textPerToken: 4}
		switch i % 7 {
		case 0:
			o.respLen = 0
		case 1:
			o.promptLen = 0
		case 2:
			o.maxInteractions = 0
		}
		out[i] = genTrajectory(rng, o, i)
	}
	return out
}

// normalized returns t with empty lists as nil, so that rows compare equal
// whatever a reader returns for an empty list.
func normalized(t Trajectory) Trajectory {
	v := reflect.ValueOf(&t).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Slice && f.Len() == 0 {
			f.SetZero()
		}
	}
	return t
}

// diffRow names the first column where two rows differ, or returns "".
func diffRow[T any](want, got T) string {
	w, g := reflect.ValueOf(want), reflect.ValueOf(got)
	ty := w.Type()
	for i := range ty.NumField() {
		a, b := w.Field(i), g.Field(i)
		if a.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
			continue
		}
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			col := strings.Split(ty.Field(i).Tag.Get("parquet"), ",")[0]
			return fmt.Sprintf("column %s: want %s, got %s", col, short(a), short(b))
		}
	}
	return ""
}

func short(v reflect.Value) string {
	s := fmt.Sprintf("%v", v.Interface())
	if v.Kind() == reflect.Slice {
		s = fmt.Sprintf("(len %d) %s", v.Len(), s)
	}
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

// checkRowsEqual fails the test at the first row that differs.
func checkRowsEqual[T any](t *testing.T, what string, want, got []T) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: read %d rows, wrote %d", what, len(got), len(want))
	}
	for i := range want {
		if d := diffRow(want[i], got[i]); d != "" {
			t.Fatalf("%s: row %d differs: %s", what, i, d)
		}
	}
}

// splitRows cuts rows into shards of at most per rows.
func splitRows[T any](rows []T, per int) [][]T {
	var out [][]T
	for len(rows) > per {
		out = append(out, rows[:per])
		rows = rows[per:]
	}
	return append(out, rows)
}
