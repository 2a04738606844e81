//go:build !tensorboard

package train

import (
	"slices"
	"testing"
)

// checkTensorBoard is, without -tags tensorboard, the check of
// tensorboard_reader_test.go with the package's own reader (tfevents.Read)
// in place of TensorBoard's: every scalar of every metrics record is in the
// run's event files once, at its step, equal as float32, and nothing else
// is; each tag of series holds steps 0 to n-1, n its value.
func checkTensorBoard(t *testing.T, runDir string, series map[string]int) {
	t.Helper()
	checkEventsOnce(t, runDir, "the event files")
	_, seen := eventFiles(t, runDir)
	for tag, n := range series {
		var steps []int64
		for k, vs := range seen {
			if k.tag == tag {
				for range vs {
					steps = append(steps, k.step)
				}
			}
		}
		slices.Sort(steps)
		ok := len(steps) == n
		for i := 0; ok && i < n; i++ {
			ok = steps[i] == int64(i)
		}
		if !ok {
			t.Errorf("%s has steps %v, want 0 to %d, each once", tag, steps, n-1)
		}
	}
}
