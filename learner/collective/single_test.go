package collective

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// The one-rank communicator does what a group of one would: sums leave the
// buffer as it is, gathers and exchanges copy send into recv; it checks
// its arguments as the engines do and refuses device memory, and once
// closed or aborted every call fails.
func TestSingle(t *testing.T) {
	ctx := context.Background()
	c := Single()
	if c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("rank %d of %d", c.Rank(), c.Size())
	}
	buf := Float32s{1, 2, 3}
	if err := c.AllReduce(ctx, buf); err != nil || !slices.Equal(buf, Float32s{1, 2, 3}) {
		t.Errorf("allreduce: %v, %v", buf, err)
	}
	for name, op := range map[string]func(send, recv Float32s) error{
		"reducescatter": func(s, r Float32s) error { return c.ReduceScatter(ctx, s, r, []int{3}) },
		"allgather":     func(s, r Float32s) error { return c.AllGather(ctx, s, r, []int{3}) },
		"alltoall":      func(s, r Float32s) error { return c.AllToAll(ctx, s, []int{3}, r, []int{3}) },
	} {
		recv := make(Float32s, 3)
		if err := op(Float32s{4, 5, 6}, recv); err != nil || !slices.Equal(recv, Float32s{4, 5, 6}) {
			t.Errorf("%s: %v, %v", name, recv, err)
		}
	}
	if err := c.AllGather(ctx, Float32s{1}, make(Float32s, 2), []int{1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a gather into a buffer of the wrong length: %v", err)
	}
	if err := c.AllToAll(ctx, Float32s{1, 2}, []int{2}, make(Float32s, 1), []int{1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an exchange that receives less than it sends: %v", err)
	}
	if err := c.AllReduce(ctx, DeviceFloat32s{Ptr: 1, N: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("device memory: %v", err)
	}
	if err := c.Broadcast(ctx, Bytes{1}, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("a broadcast from rank 1: %v", err)
	}
	if err := c.Broadcast(ctx, Bytes{1}, 0); err != nil {
		t.Errorf("a broadcast of bytes: %v", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Barrier(done); !errors.Is(err, context.Canceled) {
		t.Errorf("a barrier under a cancelled context: %v", err)
	}
	c.Abort(errors.New("test"))
	if err := c.Barrier(ctx); !errors.Is(err, ErrAborted) {
		t.Errorf("after Abort: %v", err)
	}
	d := Single()
	d.Close()
	if err := d.Barrier(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}
