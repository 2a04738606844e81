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
package nccl
