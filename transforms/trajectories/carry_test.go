package trajectories

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/schemas"
)

// A process keeps the gates of its latest carryGatesKept rollouts, not one
// a step for its life: a rollout's gate is the same gate for its whole
// run (its decision holds), and one that newer rollouts pushed out is
// gone.
func TestCarryGatesAreBounded(t *testing.T) {
	key := func(i int) Carry {
		return Carry{Dir: "run/carry", MinGroups: 1, Key: fmt.Sprintf("test-bounded/%d", i)}
	}
	first := carryGateOf(key(0))
	first.finished()
	if !first.decide() {
		t.Fatal("one finished group of one needed: the batch should close")
	}
	if g := carryGateOf(key(0)); g != first || !g.closed() {
		t.Fatal("the same rollout's gate changed while it is among the latest")
	}
	for i := 1; i <= 3*carryGatesKept; i++ {
		carryGateOf(key(i))
		if g := carryGateOf(key(i)); g == nil {
			t.Fatalf("rollout %d: no gate", i)
		}
	}
	carryGatesMu.Lock()
	n := len(carryGates)
	_, kept := carryGates[key(0).Key]
	order := len(carryGatesOrder)
	carryGatesMu.Unlock()
	if n > carryGatesKept || order != n {
		t.Errorf("%d gates kept (%d keys in order) after %d rollouts, want at most %d", n, order, 3*carryGatesKept+1, carryGatesKept)
	}
	if kept {
		t.Error("the first rollout's gate is still kept after 48 newer ones")
	}
	if g := carryGateOf(key(3 * carryGatesKept)); g == nil || g.closed() {
		t.Error("the latest rollout's gate is missing or decided")
	}
}

// Carried groups in another layout than CarriedFormat (an earlier aipo's,
// whose stopped samples kept their responses outside the trajectory) are
// refused with the step to roll out again, not continued with an empty
// response; a file in the layout is read.
func TestReadCarriedRefusesAnotherLayout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	good, err := json.Marshal(CarriedGroup{Format: CarriedFormat, Prompt: schemas.Prompt{ID: "p0"}, Samples: make([]CarriedSample, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(CarriedFile(dir, "p0"), good, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadCarried(ctx, dir, 1); err != nil || len(got) != 1 {
		t.Fatalf("a group in layout %d: %d read, %v", CarriedFormat, len(got), err)
	}
	old := []byte(`{"prompt":{"ID":"p1"},"samples":[{"state":"stopped","resume":{"turn":1,"tokens":[5,6]}}]}`)
	if err := os.WriteFile(CarriedFile(dir, "p1"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadCarried(ctx, dir, 2)
	if err == nil || !strings.Contains(err.Error(), "is in layout 0, and this aipo reads layout 1") || !strings.Contains(err.Error(), "aipo rollout --step <k> --force") {
		t.Fatalf("a group in an earlier layout: %v, want a refusal naming the layouts and the step to roll out again", err)
	}
}
