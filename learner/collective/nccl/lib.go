package nccl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/internal/libload"
)

// LibPathEnv holds extra directories (separated by ':') searched first for
// libnccl.so.2 and libcuda.so.1; it is the variable learner/cuda reads.
const LibPathEnv = libload.PathEnv

// NCCL's enums (nccl.h).
const (
	ncclSuccess         = 0
	ncclSystemError     = 2
	ncclInvalidArgument = 4
	ncclInvalidUsage    = 5
	ncclRemoteError     = 6
	ncclInProgress      = 7

	ncclUint8   = 1
	ncclFloat32 = 7
	ncclSum     = 0

	ncclUniqueIDBytes = 128
	ncclAPIMagic      = 0xcafebeef
	ncclConfigUndef   = -2147483648 // INT_MIN
)

// api holds the NCCL functions, bound once per process.
type api struct {
	path    string
	version int // ncclGetVersion: 10000*major + 100*minor + patch

	getVersion        func(v *int32) int32
	getUniqueID       func(id unsafe.Pointer) int32
	commInitScalable  func(comm *uintptr, nranks, rank, nID int32, ids unsafe.Pointer, cfg unsafe.Pointer) int32
	commGetAsyncError func(comm uintptr, r *int32) int32
	commAbort         func(comm uintptr) int32
	commFinalize      func(comm uintptr) int32
	commDestroy       func(comm uintptr) int32
	getErrorString    func(r int32) *byte
	getLastError      func(comm uintptr) *byte
	groupStart        func() int32
	groupEnd          func() int32
	allReduce         func(send, recv uintptr, count uint64, dtype, op int32, comm, stream uintptr) int32
	reduceScatter     func(send, recv uintptr, recvCount uint64, dtype, op int32, comm, stream uintptr) int32
	allGather         func(send, recv uintptr, sendCount uint64, dtype int32, comm, stream uintptr) int32
	reduce            func(send, recv uintptr, count uint64, dtype, op, root int32, comm, stream uintptr) int32
	broadcast         func(send, recv uintptr, count uint64, dtype, root int32, comm, stream uintptr) int32
	send              func(buf uintptr, count uint64, dtype, peer int32, comm, stream uintptr) int32
	recv              func(buf uintptr, count uint64, dtype, peer int32, comm, stream uintptr) int32
}

var (
	ncclOnce sync.Once
	ncclLib  *api
	ncclErr  error
)

// Info describes the loaded NCCL.
type Info struct {
	Path    string
	Version int // e.g. 22703 for 2.27.3
}

func (i Info) String() string {
	return fmt.Sprintf("NCCL %d.%d.%d (%s)", i.Version/10000, i.Version/100%100, i.Version%100, i.Path)
}

// Load loads libnccl.so.2 once per process and reports it. Without it the
// error matches collective.ErrUnavailable and lists every path tried.
func Load() (Info, error) {
	l, err := load()
	if err != nil {
		return Info{}, err
	}
	return Info{Path: l.path, Version: l.version}, nil
}

func load() (*api, error) {
	ncclOnce.Do(func() {
		h, path, err := openLib("libnccl.so.2", ncclCandidates())
		if err != nil {
			ncclErr = fmt.Errorf("collective: nccl: %w: %v; install NCCL 2.23 or newer (the libnccl2 package, or the nvidia-nccl-cu12 wheel PyTorch uses) or set %s to the directory holding it", collective.ErrUnavailable, err, LibPathEnv)
			return
		}
		l := &api{path: path}
		for _, b := range []struct {
			fn   any
			name string
		}{
			{&l.getVersion, "ncclGetVersion"},
			{&l.getUniqueID, "ncclGetUniqueId"},
			{&l.commInitScalable, "ncclCommInitRankScalable"},
			{&l.commGetAsyncError, "ncclCommGetAsyncError"},
			{&l.commAbort, "ncclCommAbort"},
			{&l.commFinalize, "ncclCommFinalize"},
			{&l.commDestroy, "ncclCommDestroy"},
			{&l.getErrorString, "ncclGetErrorString"},
			{&l.getLastError, "ncclGetLastError"},
			{&l.groupStart, "ncclGroupStart"},
			{&l.groupEnd, "ncclGroupEnd"},
			{&l.allReduce, "ncclAllReduce"},
			{&l.reduceScatter, "ncclReduceScatter"},
			{&l.allGather, "ncclAllGather"},
			{&l.reduce, "ncclReduce"},
			{&l.broadcast, "ncclBroadcast"},
			{&l.send, "ncclSend"},
			{&l.recv, "ncclRecv"},
		} {
			if err := bind(h, path, b.name, b.fn); err != nil {
				ncclErr = fmt.Errorf("collective: nccl: %w: %v; NCCL 2.23 or newer is needed", collective.ErrUnavailable, err)
				return
			}
		}
		var v int32
		if r := l.getVersion(&v); r != ncclSuccess {
			ncclErr = fmt.Errorf("collective: nccl: ncclGetVersion failed: %d", r)
			return
		}
		l.version = int(v)
		ncclLib = l
	})
	return ncclLib, ncclErr
}

// errString describes a ncclResult_t, with the communicator's last error
// when there is one.
func (l *api) errString(r int32, comm uintptr) string {
	s := fmt.Sprintf("ncclResult %d", r)
	if p := l.getErrorString(r); p != nil {
		s = goString(p)
	}
	if comm != 0 {
		if p := l.getLastError(comm); p != nil {
			if last := goString(p); last != "" {
				s += ": " + last
			}
		}
	}
	return s
}

// openLib dlopens the first candidate that loads (libload.Open).
func openLib(what string, candidates []string) (uintptr, string, error) {
	return libload.Open(what, candidates)
}

func bind(h uintptr, lib, name string, fn any) error {
	sym, err := purego.Dlsym(h, name)
	if err != nil || sym == 0 {
		return fmt.Errorf("%s has no %s: %v", lib, name, err)
	}
	purego.RegisterFunc(fn, sym)
	return nil
}

// ncclCandidates: LibPathEnv, the dynamic loader, then the nvidia/nccl/lib
// folder of the wheel under the active virtual or conda environment and
// the usual site-packages.
func ncclCandidates() []string {
	c := libload.InDirs(libload.ExtraDirs(), "libnccl.so.2")
	c = append(c, "libnccl.so.2")
	return append(c, libload.InDirs(libload.WheelDirs("nvidia/nccl/lib"), "libnccl.so.2")...)
}

// goString copies a NUL-terminated C string owned by a library.
func goString(p *byte) string {
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

// config is ncclConfig_t as of NCCL 2.30 (nccl.h's ncclConfig_v23000
// layout). NCCL reads only the first size bytes and ignores the fields its
// version lacks.
type config struct {
	size                uintptr
	magic               uint32
	version             uint32
	blocking            int32
	cgaClusterSize      int32
	minCTAs             int32
	maxCTAs             int32
	netName             uintptr
	splitShare          int32
	trafficClass        int32
	commName            uintptr
	collnetEnable       int32
	ctaPolicy           int32
	shrinkShare         int32
	nvlsCTAs            int32
	nChannelsPerNetPeer int32
	nvlinkCentricSched  int32
	graphUsageMode      int32
	numRmaCtx           int32
	maxP2pPeers         int32
	graphStreamOrdering int32
}

// configSize is sizeof(ncclConfig_t) in the headers of NCCL version v,
// which is what NCCL_CONFIG_INITIALIZER puts in the size field.
func configSize(v int) uintptr {
	switch {
	case v < 21700:
		return 24
	case v < 21800:
		return 40
	case v < 22700:
		return 48
	case v < 22800:
		return 72
	case v < 22900:
		return 80
	case v < 23000:
		return 88
	}
	return unsafe.Sizeof(config{})
}

// nonBlockingConfig is NCCL_CONFIG_INITIALIZER for version v with
// blocking = 0.
func nonBlockingConfig(v int) config {
	u := int32(ncclConfigUndef)
	return config{size: configSize(v), magic: ncclAPIMagic, version: uint32(v), blocking: 0,
		cgaClusterSize: u, minCTAs: u, maxCTAs: u, splitShare: u, trafficClass: u, collnetEnable: u,
		ctaPolicy: u, shrinkShare: u, nvlsCTAs: u, nChannelsPerNetPeer: u, nvlinkCentricSched: u,
		graphUsageMode: u, numRmaCtx: u, maxP2pPeers: u, graphStreamOrdering: u}
}
