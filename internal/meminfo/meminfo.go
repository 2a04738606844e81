// Package meminfo reads the host's memory from /proc/meminfo, for the
// plans and benchmarks that size a run against it.
package meminfo

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
)

// Read returns MemTotal and MemAvailable of /proc/meminfo, in bytes.
func Read() (total, avail int64, err error) {
	f, err := os.Open("/proc/meminfo")
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
