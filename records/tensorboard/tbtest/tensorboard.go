//go:build tensorboard

package tbtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/testtools"
)

// CheckWithTensorBoard reads a run's event files with TensorBoard's own
// reader (scripts/pychecks/read_tensorboard.py in the scripts/pychecks.sh
// environment; -tags tensorboard) and checks that every scalar of every
// metrics record is there once, at its step, equal as float32, and nothing
// else; and, from the records read here, the headline numbers by name.
// Each tag of series must hold steps 0 to n-1, n its value.
func CheckWithTensorBoard(t testing.TB, runDir string, series map[string]int) {
	t.Helper()
	seen := map[Key][]float32{}
	for tag, evs := range readWithTensorBoard(t, runDir) {
		for _, e := range evs {
			k := Key{int64(e[0]), tag}
			seen[k] = append(seen[k], float32(e[1]))
		}
	}
	check(t, runDir, "TensorBoard", seen, series)
}

// readWithTensorBoard is what TensorBoard reads from the run's event
// files: each tag's (step, value) pairs.
func readWithTensorBoard(t testing.TB, runDir string) map[string][][2]float64 {
	t.Helper()
	py := testtools.PyChecks(t)
	cmd := exec.Command(py, testtools.PyCheckScript("read_tensorboard.py"), rundir.TensorBoard(runDir))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("read_tensorboard.py: %v\n%s", err, stderr.String())
	}
	var got struct {
		TensorBoard string                  `json:"tensorboard"`
		Files       []string                `json:"files"`
		Scalars     map[string][][2]float64 `json:"scalars"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("read_tensorboard.py's output: %v\n%s", err, out)
	}
	t.Logf("TensorBoard %s read %d scalar series from %v", got.TensorBoard, len(got.Scalars), got.Files)
	return got.Scalars
}
