package collective

import (
	"context"
	"time"
)

// Comm is a communicator over a fixed group of ranks. Every rank must make
// the same calls in the same order with agreeing arguments. Calls on one
// Comm are serialized. Each call is bounded by ctx's deadline, or by the
// group's Options.OpTimeout when ctx has none, and fails with an *OpError;
// after a failure the Comm is broken and every later call returns the same
// error (close it and form a new group).
//
// Reductions are sums of float32. Counts are in elements; they need not be
// equal across ranks nor divide anything evenly, and zero counts (empty
// buffers) are allowed.
type Comm interface {
	Rank() int
	Size() int
	// Backend names the engine: "gloo" or "nccl".
	Backend() string

	// AllReduce replaces buf on every rank by the element-wise sum of
	// every rank's buf. The lengths must agree.
	AllReduce(ctx context.Context, buf Buffer) error
	// ReduceScatter sums send (sum(counts) elements on every rank) and
	// leaves elements [off_r, off_r+counts[r]) of the sum in recv on rank
	// r (counts[r] elements), where off_r is the sum of counts before r.
	ReduceScatter(ctx context.Context, send, recv Buffer, counts []int) error
	// AllGather concatenates every rank's send (counts[r] elements on rank
	// r) in rank order into recv (sum(counts) elements) on every rank.
	AllGather(ctx context.Context, send, recv Buffer, counts []int) error
	// AllToAll sends sendCounts[j] elements of send, in rank order, to
	// rank j, and receives recvCounts[j] elements from rank j into recv,
	// in rank order. sendCounts[j] on rank i must equal recvCounts[i] on
	// rank j.
	AllToAll(ctx context.Context, send Buffer, sendCounts []int, recv Buffer, recvCounts []int) error
	// Broadcast copies root's buf into buf on every other rank. Any
	// buffer kind the backend takes is allowed, bytes included.
	Broadcast(ctx context.Context, buf Buffer, root int) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error

	// Abort breaks the communicator: later calls fail with ErrAborted and
	// the other ranks learn of the failure through the store. An
	// operation in flight ends at its deadline at the latest (NCCL's is
	// aborted at once).
	Abort(reason error)
	// Close releases the engine's resources. It does not close the Group.
	Close() error
}

// Timeout returns how long an operation may run: until ctx's deadline, or
// def when ctx has none. It fails with ErrTimeout when ctx is already done.
func Timeout(ctx context.Context, def time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		if left <= 0 {
			return 0, context.DeadlineExceeded
		}
		return left, nil
	}
	return def, nil
}
