package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/collective"
)

// Options choose the GPU.
type Options struct {
	// Device is the CUDA device ordinal; negative means LOCAL_RANK.
	Device int
}

// Comm is an NCCL communicator over the group's ranks, one GPU per rank.
type Comm struct {
	g    *collective.Group
	nccl *api
	cu   *cudaAPI

	dev     int32
	ctx     uintptr // the device's primary context
	stream  uintptr
	scratch uint64 // one float32 for Barrier

	mu     sync.Mutex // one operation at a time; guards comm and broken
	comm   uintptr
	broken error

	abort collective.Aborted // Abort, recorded once
}

// New creates the communicator: rank 0 makes NCCL's unique id and puts it in
// the group's store, every rank reads it and joins with a non-blocking
// ncclCommInitRankScalable, all within ctx's deadline or the group's
// RendezvousTimeout (the watchdog aborts the attempt at that bound).
func New(ctx context.Context, g *collective.Group, opts Options) (*Comm, error) {
	l, err := load()
	if err != nil {
		return nil, err
	}
	if l.version < 22300 {
		return nil, fmt.Errorf("collective: nccl: %w: %s lacks ncclCommInitRankScalable; NCCL 2.23 or newer is needed", collective.ErrUnavailable, Info{Path: l.path, Version: l.version})
	}
	cu, err := loadCUDA()
	if err != nil {
		return nil, err
	}
	bound, err := collective.Timeout(ctx, g.Options().RendezvousTimeout)
	if err != nil {
		return nil, fmt.Errorf("collective: nccl: connect: %w", err)
	}
	ordinal := opts.Device
	if ordinal < 0 {
		ordinal = g.Env().LocalRank
	}
	c := &Comm{g: g, nccl: l, cu: cu}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.openDevice(ordinal); err != nil {
		c.release()
		return nil, err
	}
	var id [ncclUniqueIDBytes]byte
	key := g.NextPrefix("nccl") + "unique-id"
	idCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	if g.Rank() == 0 {
		if r := l.getUniqueID(unsafe.Pointer(&id[0])); r != ncclSuccess {
			c.release()
			return nil, fmt.Errorf("collective: nccl: ncclGetUniqueId: %s", l.errString(r, 0))
		}
		if err := g.Store().Set(idCtx, key, id[:]); err != nil {
			c.release()
			return nil, fmt.Errorf("collective: nccl: publishing the unique id: %w", err)
		}
	} else {
		v, err := g.Store().Get(idCtx, key)
		if err != nil {
			c.release()
			return nil, g.OpFailed("nccl", "connect", collective.ErrTimeout, time.Since(start), bound, fmt.Errorf("waiting for rank 0's unique id: %w", err))
		}
		if len(v) != ncclUniqueIDBytes {
			c.release()
			return nil, fmt.Errorf("collective: nccl: the unique id in the store has %d bytes, want %d", len(v), ncclUniqueIDBytes)
		}
		copy(id[:], v)
	}
	cfg := nonBlockingConfig(l.version)
	r := l.commInitScalable(&c.comm, int32(g.Size()), int32(g.Rank()), 1, unsafe.Pointer(&id[0]), unsafe.Pointer(&cfg))
	runtime.KeepAlive(&cfg)
	if r != ncclSuccess && r != ncclInProgress {
		c.release()
		return nil, fmt.Errorf("collective: nccl: ncclCommInitRankScalable: %s", l.errString(r, 0))
	}
	if err := c.watch("connect", start, bound, false); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// openDevice retains the device's primary context, makes it current on
// this thread and creates the stream and the scratch float.
func (c *Comm) openDevice(ordinal int) error {
	var n int32
	if err := c.cu.err("cuDeviceGetCount", c.cu.cuDeviceGetCount(&n)); err != nil {
		return fmt.Errorf("collective: nccl: %w", err)
	}
	if ordinal >= int(n) {
		return fmt.Errorf("collective: nccl: %w: device %d asked for (LOCAL_RANK or Options.Device) but this machine has %d GPUs; start at most %d ranks per machine", collective.ErrInvalid, ordinal, n, n)
	}
	c.dev = -1
	var dev int32
	if err := c.cu.err("cuDeviceGet", c.cu.cuDeviceGet(&dev, int32(ordinal))); err != nil {
		return fmt.Errorf("collective: nccl: %w", err)
	}
	if err := c.cu.err("cuDevicePrimaryCtxRetain", c.cu.cuDevicePrimaryCtxRetain(&c.ctx, dev)); err != nil {
		return fmt.Errorf("collective: nccl: %w", err)
	}
	c.dev = dev
	if err := c.cu.err("cuCtxSetCurrent", c.cu.cuCtxSetCurrent(c.ctx)); err != nil {
		return fmt.Errorf("collective: nccl: %w", err)
	}
	if err := c.cu.err("cuStreamCreate", c.cu.cuStreamCreate(&c.stream, cuStreamNonBlocking)); err != nil {
		return fmt.Errorf("collective: nccl: %w", err)
	}
	if err := c.cu.err("cuMemAlloc", c.cu.cuMemAlloc(&c.scratch, 4)); err != nil {
		return fmt.Errorf("collective: nccl: %w", err)
	}
	return nil
}

// release frees the CUDA resources (the communicator is already gone).
// The calling thread must be locked.
func (c *Comm) release() {
	if c.ctx != 0 {
		c.cu.cuCtxSetCurrent(c.ctx)
	}
	if c.scratch != 0 {
		c.cu.cuMemFree(c.scratch)
		c.scratch = 0
	}
	if c.stream != 0 {
		c.cu.cuStreamDestroy(c.stream)
		c.stream = 0
	}
	if c.ctx != 0 {
		c.cu.cuDevicePrimaryCtxRelease(c.dev)
		c.ctx = 0
	}
}

// watch is the watchdog: it polls the communicator's asynchronous error
// and, when stream is set, the stream, until the work is done. At the
// deadline, on Abort, on an error, or once another rank's heartbeat has
// been silent for the group's StallAfter (collective.Watch) it calls
// ncclCommAbort and returns the failure, naming the ranks the store
// suspects.
func (c *Comm) watch(op string, start time.Time, bound time.Duration, stream bool) error {
	deadline := start.Add(bound)
	pause := 20 * time.Microsecond
	// A stopped rank's heartbeat stops long before the deadline: the
	// group's Watch flags it, and the loop aborts as at the deadline.
	var stalled atomic.Bool
	gw := c.g.Watch(func() { stalled.Store(true) })
	defer gw.Stop()
	for {
		var ae int32
		r := c.nccl.commGetAsyncError(c.comm, &ae)
		if r != ncclSuccess {
			ae = r
		}
		switch {
		case ae == ncclSuccess && !stream:
			return nil
		case ae == ncclSuccess:
			q := c.cu.cuStreamQuery(c.stream)
			if q == cudaSuccess {
				return nil
			}
			if q != cudaErrorNotReady {
				return c.fail(op, collective.ErrEngine, start, bound, c.cu.err("cuStreamQuery", q))
			}
		case ae != ncclInProgress:
			kind := collective.ErrEngine
			switch ae {
			case ncclRemoteError, ncclSystemError:
				kind = collective.ErrPeerLost
			case ncclInvalidArgument, ncclInvalidUsage:
				kind = collective.ErrInvalid
			}
			return c.fail(op, kind, start, bound, errors.New("nccl: "+c.nccl.errString(ae, c.comm)))
		}
		if ab := c.abort.Err(); ab != nil {
			c.abortComm()
			c.broken = ab
			return ab
		}
		if stalled.Load() {
			_, why := gw.Stalled()
			return c.fail(op, collective.ErrPeerLost, start, bound, why)
		}
		if time.Now().After(deadline) {
			return c.fail(op, collective.ErrTimeout, start, bound, fmt.Errorf("nccl: %s did not complete within %s", op, bound.Round(time.Millisecond)))
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

// fail aborts the communicator and records the error that broke it.
func (c *Comm) fail(op string, kind error, start time.Time, bound time.Duration, cause error) error {
	c.abortComm()
	oe := c.g.OpFailed("nccl", op, kind, time.Since(start), bound, cause)
	c.broken = oe
	return oe
}

func (c *Comm) abortComm() {
	if c.comm != 0 {
		c.nccl.commAbort(c.comm)
		c.comm = 0
	}
}

func (c *Comm) Rank() int       { return c.g.Rank() }
func (c *Comm) Size() int       { return c.g.Size() }
func (c *Comm) Backend() string { return "nccl" }

func (c *Comm) args(op string) collective.Args {
	return collective.Args{Backend: "nccl", Op: op, Rank: c.g.Rank(), Size: c.g.Size(), Device: true}
}

func (c *Comm) invalid(err error) error {
	c.g.ReportFailure(err)
	return err
}

// run enqueues one operation (calls of NCCL, grouped when there are
// several) on the stream and waits for it under the watchdog.
func (c *Comm) run(ctx context.Context, op string, enqueue func() int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return c.broken
	}
	if c.comm == 0 {
		return fmt.Errorf("collective: nccl: %w", collective.ErrClosed)
	}
	bound, err := collective.Timeout(ctx, c.g.Options().OpTimeout)
	if err != nil {
		return &collective.OpError{Backend: "nccl", Op: op, Rank: c.g.Rank(), Size: c.g.Size(), Kind: collective.ErrTimeout, Err: err}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.cu.err("cuCtxSetCurrent", c.cu.cuCtxSetCurrent(c.ctx)); err != nil {
		return fmt.Errorf("collective: nccl: %w", err)
	}
	start := time.Now()
	if r := enqueue(); r != ncclSuccess && r != ncclInProgress {
		kind := collective.ErrEngine
		if r == ncclInvalidArgument || r == ncclInvalidUsage {
			kind = collective.ErrInvalid
		}
		return c.fail(op, kind, start, bound, errors.New("nccl: "+c.nccl.errString(r, c.comm)))
	}
	return c.watch(op, start, bound, true)
}

// grouped runs the calls between ncclGroupStart and ncclGroupEnd.
func (c *Comm) grouped(calls func() int32) int32 {
	if r := c.nccl.groupStart(); r != ncclSuccess {
		return r
	}
	r := calls()
	if e := c.nccl.groupEnd(); r == ncclSuccess || r == ncclInProgress {
		r = e
	}
	return r
}

func allEqual(c []int) bool {
	for _, v := range c {
		if v != c[0] {
			return false
		}
	}
	return true
}

func prefix(c []int) []int {
	off := make([]int, len(c)+1)
	for i, v := range c {
		off[i+1] = off[i] + v
	}
	return off
}

// AllReduce sums buf across ranks in place.
func (c *Comm) AllReduce(ctx context.Context, buf collective.Buffer) error {
	a := c.args("allreduce")
	if err := a.Buf("buf", buf, -1, false); err != nil {
		return c.invalid(err)
	}
	p, n := collective.DevicePointer(buf), uint64(buf.Len())
	return c.run(ctx, a.Op, func() int32 {
		return c.nccl.allReduce(p, p, n, ncclFloat32, ncclSum, c.comm, c.stream)
	})
}

// ReduceScatter sums send across ranks and leaves rank r's segment in recv.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv collective.Buffer, counts []int) error {
	a := c.args("reducescatter")
	if _, err := a.ReduceScatter(send, recv, counts); err != nil {
		return c.invalid(err)
	}
	sp, rp, off := collective.DevicePointer(send), collective.DevicePointer(recv), prefix(counts)
	return c.run(ctx, a.Op, func() int32 {
		if allEqual(counts) {
			return c.nccl.reduceScatter(sp, rp, uint64(counts[0]), ncclFloat32, ncclSum, c.comm, c.stream)
		}
		return c.grouped(func() int32 {
			for root, n := range counts {
				seg := sp + uintptr(4*off[root])
				dst := seg // ignored on ranks other than root
				if root == a.Rank {
					dst = rp
				}
				if r := c.nccl.reduce(seg, dst, uint64(n), ncclFloat32, ncclSum, int32(root), c.comm, c.stream); r != ncclSuccess && r != ncclInProgress {
					return r
				}
			}
			return ncclSuccess
		})
	})
}

// AllGather concatenates every rank's send into recv in rank order.
func (c *Comm) AllGather(ctx context.Context, send, recv collective.Buffer, counts []int) error {
	a := c.args("allgather")
	if _, err := a.AllGather(send, recv, counts); err != nil {
		return c.invalid(err)
	}
	sp, rp, off := collective.DevicePointer(send), collective.DevicePointer(recv), prefix(counts)
	return c.run(ctx, a.Op, func() int32 {
		if allEqual(counts) {
			return c.nccl.allGather(sp, rp, uint64(counts[0]), ncclFloat32, c.comm, c.stream)
		}
		return c.grouped(func() int32 {
			for root, n := range counts {
				dst := rp + uintptr(4*off[root])
				src := dst
				if root == a.Rank {
					src = sp
				}
				if r := c.nccl.broadcast(src, dst, uint64(n), ncclFloat32, int32(root), c.comm, c.stream); r != ncclSuccess && r != ncclInProgress {
					return r
				}
			}
			return ncclSuccess
		})
	})
}

// AllToAll exchanges segments of uneven length between every pair of ranks.
func (c *Comm) AllToAll(ctx context.Context, send collective.Buffer, sendCounts []int, recv collective.Buffer, recvCounts []int) error {
	a := c.args("alltoall")
	if err := a.AllToAll(send, sendCounts, recv, recvCounts); err != nil {
		return c.invalid(err)
	}
	sp, rp, so, ro := collective.DevicePointer(send), collective.DevicePointer(recv), prefix(sendCounts), prefix(recvCounts)
	return c.run(ctx, a.Op, func() int32 {
		return c.grouped(func() int32 {
			for peer := 0; peer < a.Size; peer++ {
				if n := sendCounts[peer]; n > 0 {
					if r := c.nccl.send(sp+uintptr(4*so[peer]), uint64(n), ncclFloat32, int32(peer), c.comm, c.stream); r != ncclSuccess && r != ncclInProgress {
						return r
					}
				}
				if n := recvCounts[peer]; n > 0 {
					if r := c.nccl.recv(rp+uintptr(4*ro[peer]), uint64(n), ncclFloat32, int32(peer), c.comm, c.stream); r != ncclSuccess && r != ncclInProgress {
						return r
					}
				}
			}
			return ncclSuccess
		})
	})
}

// Broadcast copies root's buf (float32 or bytes) to every rank.
func (c *Comm) Broadcast(ctx context.Context, buf collective.Buffer, root int) error {
	a := c.args("broadcast")
	err := a.Buf("buf", buf, -1, true)
	if err == nil {
		err = a.Root(root)
	}
	if err != nil {
		return c.invalid(err)
	}
	dtype := int32(ncclFloat32)
	if !buf.Float() {
		dtype = ncclUint8
	}
	p, n := collective.DevicePointer(buf), uint64(buf.Len())
	return c.run(ctx, a.Op, func() int32 {
		return c.nccl.broadcast(p, p, n, dtype, int32(root), c.comm, c.stream)
	})
}

// Barrier is an all-reduce of one float on the device.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", func() int32 {
		p := uintptr(c.scratch)
		return c.nccl.allReduce(p, p, 1, ncclFloat32, ncclSum, c.comm, c.stream)
	})
}

// Abort breaks the communicator: the watchdog of an operation in flight
// calls ncclCommAbort within a millisecond; with none in flight it is
// called here. The other ranks learn of it through the store.
func (c *Comm) Abort(reason error) {
	err, first := c.abort.Mark(c.g, "nccl", reason)
	if !first {
		return
	}
	if c.mu.TryLock() {
		c.abortComm()
		if c.broken == nil {
			c.broken = err
		}
		c.mu.Unlock()
	}
}

// Close finalizes and destroys the communicator (or aborts it when it is
// broken), then frees the stream, the scratch memory and the context.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var err error
	if c.comm != 0 {
		c.cu.cuCtxSetCurrent(c.ctx)
		if r := c.nccl.commFinalize(c.comm); r == ncclSuccess || r == ncclInProgress {
			err = c.watch("close", time.Now(), c.g.Options().CloseTimeout, false)
		}
		if c.comm != 0 {
			c.nccl.commDestroy(c.comm)
			c.comm = 0
		}
	}
	c.release()
	if err != nil && c.broken == nil {
		c.broken = err
	}
	return err
}

// upload copies host floats to new device memory (for the tests).
func (c *Comm) upload(v []float32) (collective.DeviceFloat32s, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c.cu.cuCtxSetCurrent(c.ctx)
	var p uint64
	if err := c.cu.err("cuMemAlloc", c.cu.cuMemAlloc(&p, uint64(4*max(len(v), 1)))); err != nil {
		return collective.DeviceFloat32s{}, err
	}
	if len(v) > 0 {
		if err := c.cu.err("cuMemcpyHtoD", c.cu.cuMemcpyHtoD(p, unsafe.Pointer(&v[0]), uint64(4*len(v)))); err != nil {
			c.cu.cuMemFree(p)
			return collective.DeviceFloat32s{}, err
		}
	}
	return collective.DeviceFloat32s{Ptr: uintptr(p), N: len(v)}, nil
}

// download copies device floats back (for the tests).
func (c *Comm) download(b collective.DeviceFloat32s) ([]float32, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c.cu.cuCtxSetCurrent(c.ctx)
	out := make([]float32, b.N)
	if b.N == 0 {
		return out, nil
	}
	return out, c.cu.err("cuMemcpyDtoH", c.cu.cuMemcpyDtoH(unsafe.Pointer(&out[0]), uint64(b.Ptr), uint64(4*b.N)))
}

// free releases memory from upload.
func (c *Comm) free(b collective.DeviceFloat32s) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c.cu.cuCtxSetCurrent(c.ctx)
	c.cu.cuMemFree(uint64(b.Ptr))
}

var _ collective.Comm = (*Comm)(nil)
