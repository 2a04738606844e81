//go:build !unix

package model

import (
	"runtime"
	"time"
)

// peakRSS falls back to the Go heap obtained from the system.
func peakRSS() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapSys)
}

// cpuTime falls back to wall-clock time times GOMAXPROCS.
func cpuTime() float64 {
	return float64(time.Now().UnixNano()) / 1e9 * float64(runtime.GOMAXPROCS(0))
}
