package collective

import (
	"context"
	"fmt"
	"sync"
)

// Single returns the communicator of a group of one rank: the process
// alone, without a store or an engine. A one-process learner takes its
// steps as rank 0 of this group, so that its arithmetic is the group's
// (the same bits as any group that divides its virtual shards) and there
// is one step function. Its collectives move host memory only: a sum over
// one rank is the rank's own buffer, a gather or an exchange a copy from
// send to recv. A device's one-rank group copies its buffers itself (the
// engine would only copy them too); device memory here is refused.
func Single() Comm { return &single{} }

type single struct {
	mu     sync.Mutex
	broken error
}

func (*single) Rank() int       { return 0 }
func (*single) Size() int       { return 1 }
func (*single) Backend() string { return "single" }

// args checks the call's buffers as the engines do, and that the
// communicator is usable.
func (s *single) args(ctx context.Context, op string) (Args, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return Args{}, s.broken
	}
	if err := ctx.Err(); err != nil {
		return Args{}, fmt.Errorf("collective: single %s: %w", op, err)
	}
	return Args{Backend: "single", Op: op, Rank: 0, Size: 1}, nil
}

// copyHost copies src's elements into dst (both host memory of one kind,
// as the checks made sure).
func copyHost(dst, src Buffer) {
	switch d := dst.(type) {
	case Float32s:
		copy(d, src.(Float32s))
	case Bytes:
		copy(d, src.(Bytes))
	}
}

func (s *single) AllReduce(ctx context.Context, buf Buffer) error {
	a, err := s.args(ctx, "allreduce")
	if err == nil {
		err = a.Buf("buf", buf, -1, false)
	}
	return err
}

func (s *single) ReduceScatter(ctx context.Context, send, recv Buffer, counts []int) error {
	a, err := s.args(ctx, "reducescatter")
	if err == nil {
		_, err = a.ReduceScatter(send, recv, counts)
	}
	if err == nil {
		copyHost(recv, send)
	}
	return err
}

func (s *single) AllGather(ctx context.Context, send, recv Buffer, counts []int) error {
	a, err := s.args(ctx, "allgather")
	if err == nil {
		_, err = a.AllGather(send, recv, counts)
	}
	if err == nil {
		copyHost(recv, send)
	}
	return err
}

func (s *single) AllToAll(ctx context.Context, send Buffer, sendCounts []int, recv Buffer, recvCounts []int) error {
	a, err := s.args(ctx, "alltoall")
	if err == nil {
		err = a.AllToAll(send, sendCounts, recv, recvCounts)
	}
	if err == nil && sendCounts[0] != recvCounts[0] {
		err = Invalid("single", "alltoall", "rank 0 sends itself %d elements but receives %d", sendCounts[0], recvCounts[0])
	}
	if err == nil {
		copyHost(recv, send)
	}
	return err
}

func (s *single) Broadcast(ctx context.Context, buf Buffer, root int) error {
	a, err := s.args(ctx, "broadcast")
	if err == nil {
		err = a.Buf("buf", buf, -1, true)
	}
	if err == nil {
		err = a.Root(root)
	}
	return err
}

func (s *single) Barrier(ctx context.Context) error {
	_, err := s.args(ctx, "barrier")
	return err
}

func (s *single) Abort(reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == nil {
		s.broken = fmt.Errorf("collective: single: %w: %v", ErrAborted, reason)
	}
}

func (s *single) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == nil {
		s.broken = fmt.Errorf("collective: single: %w", ErrClosed)
	}
	return nil
}
