package verify

import (
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/internal/demotask"
)

// DemoVerifier scores the built-in demo task (internal/demotask) by its
// own rule, demotask.Score: the integer right after the response's last
// "=" and followed by the task's terminator must equal the ground truth,
// an integer. It is registered for data_source "demo", the data source of
// the demo's prompts.
type DemoVerifier struct{}

// Verify implements Verifier.
func (DemoVerifier) Verify(response, groundTruth string) Result {
	want, err := strconv.Atoi(strings.TrimSpace(groundTruth))
	if err != nil {
		return verdict(false, "", "the demo's ground truth "+strconv.Quote(groundTruth)+" is not an integer")
	}
	ok, extracted := demotask.Score(response, want)
	reason := "the demo's answer after the last \"=\" equals the ground truth"
	if !ok {
		reason = "no demo answer equal to the ground truth after the last \"=\" and before " + strconv.Quote(demotask.Terminator)
	}
	return verdict(ok, extracted, reason)
}
