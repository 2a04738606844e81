// Package meminfo reads the host's memory from /proc/meminfo, for the
// plans and benchmarks that size a run against it, and a process's from
// /proc/PID/status.
package meminfo

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Source is the file Read reads.
const Source = "/proc/meminfo"

// Read returns MemTotal and MemAvailable of /proc/meminfo, in bytes.
func Read() (total, avail int64, err error) {
	f, err := os.Open(Source)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "MemTotal":
			total = n << 10
		case "MemAvailable":
			avail = n << 10
		}
	}
	if total == 0 || avail == 0 {
		return 0, 0, errors.New("/proc/meminfo has no MemTotal or MemAvailable")
	}
	return total, avail, sc.Err()
}

// Status returns field (VmRSS, VmHWM, ...) of /proc/PID/status in bytes;
// pid 0 reads this process's (/proc/self/status).
func Status(pid int, field string) (int64, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	return readKB(path, field)
}

// PSS is the proportional set size of process pid in bytes (Pss of
// /proc/PID/smaps_rollup): its private pages plus its share of the pages
// it shares, so that the PSS of several processes sharing libraries sums
// to the memory they hold together, each shared page counted once.
func PSS(pid int) (int64, error) {
	return readKB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss")
}

// readKB returns the "field: N kB" line of the proc file at path, in bytes.
func readKB(path, field string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", path, field, err)
		}
		return n << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", path, field)
}

// Peak is the peak resident memory, in bytes, of the exited process ps
// describes: getrusage's ru_maxrss of the child, which Linux counts in KiB.
// It covers the whole process, whatever it loaded (an interpreter and its
// libraries included).
func Peak(ps *os.ProcessState) int64 {
	return ps.SysUsage().(*syscall.Rusage).Maxrss << 10
}
