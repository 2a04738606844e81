package cuda

import (
	"strconv"

	"github.com/aipo-rl/aipo/learner/backend"
)

// DeviceInfo describes one GPU as the driver reports it.
type DeviceInfo struct {
	Ordinal      int
	Name         string
	TotalBytes   uint64 // cuMemGetInfo's total
	FreeBytes    uint64 // and free, with this process's context open
	Major, Minor int    // compute capability
}

// Probe opens GPU ordinal without cuBLAS (nothing is launched or
// allocated), reads its name, compute capability and memory, and closes
// it: what a planner needs to know before a run. Without a driver or a GPU it returns the error Open would (the
// libraries and paths that were tried).
func Probe(ordinal int) (DeviceInfo, error) {
	dv, err := open(ordinal, false)
	if err != nil {
		return DeviceInfo{}, err
	}
	defer dv.Close()
	free, total, err := dv.MemInfo()
	if err != nil {
		return DeviceInfo{}, err
	}
	return DeviceInfo{Ordinal: ordinal, Name: dv.Name(), TotalBytes: total, FreeBytes: free, Major: dv.major, Minor: dv.minor}, nil
}

// backendInfo is d as learner/backend describes a device.
func (d DeviceInfo) backendInfo() backend.DeviceInfo {
	return backend.DeviceInfo{Backend: Name, ID: strconv.Itoa(d.Ordinal), Name: d.Name, Kind: backend.KindGPU,
		TotalBytes: int64(d.TotalBytes), FreeBytes: int64(d.FreeBytes), MemorySource: "cuMemGetInfo",
		ComputeMajor: d.Major, ComputeMinor: d.Minor}
}
