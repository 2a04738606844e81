package demo

import (
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/transforms/verify"
)

// AnswerVerifier scores the task by its own rule, Score: the integer right after the response's last
// "=" and followed by the task's terminator must equal the ground truth,
// an integer. It is registered for data_source "demo", the data source of
// the demo's prompts.
type AnswerVerifier struct{}

// Verify implements verify.Verifier.
func (AnswerVerifier) Verify(response, groundTruth string) verify.Result {
	want, err := strconv.Atoi(strings.TrimSpace(groundTruth))
	if err != nil {
		return verdict(false, "", "the demo's ground truth "+strconv.Quote(groundTruth)+" is not an integer")
	}
	ok, extracted := Score(response, want)
	reason := "the demo's answer after the last \"=\" equals the ground truth"
	if !ok {
		reason = "no demo answer equal to the ground truth after the last \"=\" and before " + strconv.Quote(Terminator)
	}
	return verdict(ok, extracted, reason)
}

func verdict(ok bool, extracted, reason string) verify.Result {
	r := verify.Result{Correct: ok, Extracted: extracted, Reason: reason}
	if ok {
		r.Score = 1
	}
	return r
}
