package storage

import (
	"os/exec"
	"strconv"
	"testing"
)

func itoa(i int) string { return strconv.Itoa(i) }

// exitedPID runs a process to its end and returns its pid, which then
// names no running process (pids are not reused this quickly).
func exitedPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
