//go:build !tensorboard

package tbtest

import "testing"

// CheckWithTensorBoard is, without -tags tensorboard, the check of
// tensorboard.go with the package's own reader (tfevents.Read) in place of
// TensorBoard's: every scalar of every metrics record is in the run's event
// files once, at its step, equal as float32, and nothing else is; the
// headline numbers by name; each tag of series holds steps 0 to n-1, n its
// value.
func CheckWithTensorBoard(t testing.TB, runDir string, series map[string]int) {
	t.Helper()
	_, seen := EventFiles(t, runDir)
	check(t, runDir, "the event files", seen, series)
}
