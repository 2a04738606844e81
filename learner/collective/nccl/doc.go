// Package nccl is the GPU backend of learner/collective: NCCL's collectives on device memory, with libnccl and the CUDA driver loaded at run time through purego (no cgo, no CUDA toolkit at build time).
//
// The communicator is created non-blocking (ncclConfig_t.blocking = 0)
// with ncclCommInitRankScalable from a unique id that rank 0 makes and
// carries through the group's store. Each call enqueues the NCCL work on
// the communicator's stream and then polls ncclCommGetAsyncError and the
// stream until the work completes, the deadline passes or Abort is
// called; in the last two cases the watchdog calls ncclCommAbort, and the
// error names the ranks the store reports as exited or stalled.
//
// Uneven ReduceScatter and AllGather are grouped ncclReduce and
// ncclBroadcast calls, one per rank (ncclReduceScatter and ncclAllGather
// when the counts are equal); AllToAll is grouped ncclSend and ncclRecv.
//
// Without a GPU the package's tests run over stand-ins: the CUDA driver of
// learner/cuda/testdata/fakecuda.c (device memory is host memory) and the
// NCCL of testdata/fakenccl.c, which carries NCCL's calls between the
// ranks' processes over sockets on 127.0.0.1 (both built by
// internal/fakecuda). TestStandInCollectives runs every collective at 2
// and 4 ranks through this package's code and checks the results against
// the plain computation and the Gloo backend's; the fault tests kill or
// stop a rank inside an all-reduce. What only a GPU shows (NCCL's own
// kernels, its transports, a GPU a rank) is left to scripts/gpu-check.sh.
package nccl
