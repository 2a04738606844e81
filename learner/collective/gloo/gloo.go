//go:build cgo && !purego

package gloo

/*
#cgo CXXFLAGS: -std=c++17 -O2
#cgo LDFLAGS: -lgloo -lstdc++
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/cgo"
	"sync"
	"time"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/collective"
)

// Available reports whether this binary has the Gloo backend (it does).
func Available() error { return nil }

// Comm is a Gloo communicator over the group's ranks.
type Comm struct {
	g *collective.Group

	mu     sync.Mutex // one operation at a time; guards the fields below
	c      *C.aipo_gloo
	tag    uint32
	broken error // the failure that broke it, returned by every later call

	abort collective.Aborted // Abort, recorded once

	addr    string      // this rank's end of its pairs, and why there (Addr)
	sockets pairSockets // which of the process's sockets are this communicator's
}

// New connects a full mesh of Gloo TCP pairs between the group's ranks,
// exchanging addresses through the group's store, within the context's
// deadline or the group's RendezvousTimeout.
func New(ctx context.Context, g *collective.Group) (collective.Comm, error) {
	opts := g.Options()
	bound, err := collective.Timeout(ctx, opts.RendezvousTimeout)
	if err != nil {
		return nil, fmt.Errorf("collective: gloo: connect: %w", err)
	}
	host, iface, why, err := bindTarget(g.Env())
	if err != nil {
		return nil, err
	}
	h := cgo.NewHandle(g.Store())
	defer h.Delete()
	prefix := g.NextPrefix("gloo")
	cprefix, chost, ciface := C.CString(prefix), C.CString(host), C.CString(iface)
	defer C.free(unsafe.Pointer(cprefix))
	defer C.free(unsafe.Pointer(chost))
	defer C.free(unsafe.Pointer(ciface))
	start := time.Now()
	var out *C.aipo_gloo
	if e := C.aipo_gloo_new(C.int(g.Rank()), C.int(g.Size()), C.uintptr_t(h), cprefix, chost, ciface,
		C.int64_t(ms(bound)), C.int64_t(ms(opts.OpTimeout)), &out); e != nil {
		kind, cause := takeError(e)
		return nil, g.OpFailed("gloo", "connect", kind, time.Since(start), bound, cause)
	}
	sctx, cancel := context.WithTimeout(ctx, max(bound-time.Since(start), time.Second))
	defer cancel()
	sockets, err := exchangePairEnds(sctx, g, out, prefix)
	if err != nil {
		C.aipo_gloo_free(out)
		return nil, g.OpFailed("gloo", "connect", collective.ErrPeerLost, time.Since(start), bound, err)
	}
	return &Comm{g: g, c: out, addr: pairAddr(out, g.Rank(), g.Size(), why), sockets: sockets}, nil
}

// pairAddr describes this rank's end of its Gloo pairs: its address in
// the pair with the next rank, and why that address.
func pairAddr(g *C.aipo_gloo, rank, size int, why string) string {
	if size < 2 {
		return "no peers (" + why + ")"
	}
	a := C.aipo_gloo_address(g, C.int((rank+1)%size))
	if a == nil {
		return "an unknown address (" + why + ")"
	}
	defer C.free(unsafe.Pointer(a))
	return C.GoString(a) + " (" + why + ")"
}

// Addr is this rank's end of its TCP pair with the next rank ("IP:port",
// as ss -tn shows it) and why that address: the interface in
// GLOO_SOCKET_IFNAME, the address in AIPO_GLOO_ADDR, or the route to
// MASTER_ADDR; for a rank's startup log, where a wrong interface shows
// before any collective waits on it.
func (c *Comm) Addr() string { return c.addr }

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// takeError converts and frees a shim error.
func takeError(e *C.aipo_gloo_error) (kind error, cause error) {
	msg := "unknown error"
	if e == nil {
		return collective.ErrEngine, errors.New("gloo: out of memory reporting an error")
	}
	if e.msg != nil {
		msg = C.GoString(e.msg)
	}
	switch e.kind {
	case C.AIPO_GLOO_TIMEOUT:
		kind = collective.ErrTimeout
	case C.AIPO_GLOO_IO:
		kind = collective.ErrPeerLost
	case C.AIPO_GLOO_ENFORCE:
		kind = collective.ErrInvalid
	default:
		kind = collective.ErrEngine
	}
	C.aipo_gloo_free_error(e)
	return kind, fmt.Errorf("gloo: %s", msg)
}

func (c *Comm) Rank() int       { return c.g.Rank() }
func (c *Comm) Size() int       { return c.g.Size() }
func (c *Comm) Backend() string { return "gloo" }

func (c *Comm) args(op string) collective.Args {
	return collective.Args{Backend: "gloo", Op: op, Rank: c.g.Rank(), Size: c.g.Size()}
}

// invalid reports a bad argument to the other ranks too (they would
// otherwise wait for this rank until their deadline) and returns it.
func (c *Comm) invalid(err error) error {
	c.g.ReportFailure(err)
	return err
}

// run performs one operation under the comm's lock and deadline. On
// failure the Gloo context is freed at once (its sockets close, so the
// peers waiting on this rank fail now instead of at their deadline) and
// the error, naming the ranks that look responsible, sticks.
func (c *Comm) run(ctx context.Context, op string, f func(g *C.aipo_gloo, tag C.uint32_t, ms C.int64_t) *C.aipo_gloo_error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	bound, err := collective.Timeout(ctx, c.g.Options().OpTimeout)
	if err != nil {
		return &collective.OpError{Backend: "gloo", Op: op, Rank: c.g.Rank(), Size: c.g.Size(), Kind: collective.ErrTimeout, Err: err}
	}
	c.tag++
	start := time.Now()
	// A stopped rank answers nothing but keeps its sockets open: its
	// heartbeat's silence interrupts the operation (collective.Watch)
	// rather than its deadline.
	w := c.g.Watch(func() { _, _ = c.sockets.shutdown() })
	e := f(c.c, C.uint32_t(c.tag), C.int64_t(ms(bound)))
	w.Stop()
	_, stalled := w.Stalled()
	if e == nil {
		if ab := c.abort.Err(); ab != nil {
			c.freeLocked(ab)
			return ab
		}
		if stalled != nil {
			// It ended as the sockets were shut down: they are unusable.
			oe := c.g.OpFailed("gloo", op, collective.ErrPeerLost, time.Since(start), bound, stalled)
			c.freeLocked(oe)
			return oe
		}
		return nil
	}
	kind, cause := takeError(e)
	c.freeLocked(nil)
	if ab := c.abort.Err(); ab != nil {
		c.broken = ab
		return ab
	}
	if stalled != nil {
		kind, cause = collective.ErrPeerLost, fmt.Errorf("%w; the engine: %v", stalled, cause)
	}
	oe := c.g.OpFailed("gloo", op, kind, time.Since(start), bound, cause)
	c.broken = oe
	return oe
}

func (c *Comm) usable() error {
	if c.broken != nil {
		return c.broken
	}
	if c.c == nil {
		return fmt.Errorf("collective: gloo: %w", collective.ErrClosed)
	}
	return nil
}

func (c *Comm) freeLocked(broken error) {
	if c.c != nil {
		C.aipo_gloo_free(c.c)
		c.c = nil
	}
	if broken != nil && c.broken == nil {
		c.broken = broken
	}
}

// AllReduce sums buf across ranks in place.
func (c *Comm) AllReduce(ctx context.Context, buf collective.Buffer) error {
	a := c.args("allreduce")
	if err := a.Buf("buf", buf, -1, false); err != nil {
		return c.invalid(err)
	}
	p, n := collective.HostPointer(buf), buf.Len()
	if n == 0 {
		return c.empty(ctx)
	}
	return c.run(ctx, a.Op, func(g *C.aipo_gloo, tag C.uint32_t, ms C.int64_t) *C.aipo_gloo_error {
		return C.aipo_gloo_allreduce(g, (*C.float)(p), C.size_t(n), tag, ms)
	})
}

// empty answers an operation on globally empty buffers without the engine.
func (c *Comm) empty(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	return ctx.Err()
}

func int64s(c []int) []int64 {
	out := make([]int64, len(c))
	for i, v := range c {
		out[i] = int64(v)
	}
	return out
}

// ReduceScatter sums send across ranks and leaves rank r's segment in recv.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv collective.Buffer, counts []int) error {
	a := c.args("reducescatter")
	total, err := a.ReduceScatter(send, recv, counts)
	if err != nil {
		return c.invalid(err)
	}
	if total == 0 {
		return c.empty(ctx)
	}
	sp, rp, cn := collective.HostPointer(send), collective.HostPointer(recv), int64s(counts)
	return c.run(ctx, a.Op, func(g *C.aipo_gloo, tag C.uint32_t, ms C.int64_t) *C.aipo_gloo_error {
		return C.aipo_gloo_reduce_scatter(g, (*C.float)(sp), (*C.float)(rp), (*C.int64_t)(unsafe.Pointer(&cn[0])), tag, ms)
	})
}

// AllGather concatenates every rank's send into recv in rank order.
func (c *Comm) AllGather(ctx context.Context, send, recv collective.Buffer, counts []int) error {
	a := c.args("allgather")
	total, err := a.AllGather(send, recv, counts)
	if err != nil {
		return c.invalid(err)
	}
	if total == 0 {
		return c.empty(ctx)
	}
	sp, rp, cn := collective.HostPointer(send), collective.HostPointer(recv), int64s(counts)
	return c.run(ctx, a.Op, func(g *C.aipo_gloo, tag C.uint32_t, ms C.int64_t) *C.aipo_gloo_error {
		return C.aipo_gloo_allgatherv(g, (*C.float)(sp), (*C.float)(rp), (*C.int64_t)(unsafe.Pointer(&cn[0])), tag, ms)
	})
}

// AllToAll exchanges segments of uneven length between every pair of ranks.
func (c *Comm) AllToAll(ctx context.Context, send collective.Buffer, sendCounts []int, recv collective.Buffer, recvCounts []int) error {
	a := c.args("alltoall")
	if err := a.AllToAll(send, sendCounts, recv, recvCounts); err != nil {
		return c.invalid(err)
	}
	sp, rp, sc, rc := collective.HostPointer(send), collective.HostPointer(recv), int64s(sendCounts), int64s(recvCounts)
	return c.run(ctx, a.Op, func(g *C.aipo_gloo, tag C.uint32_t, ms C.int64_t) *C.aipo_gloo_error {
		return C.aipo_gloo_alltoallv(g, (*C.float)(sp), (*C.int64_t)(unsafe.Pointer(&sc[0])),
			(*C.float)(rp), (*C.int64_t)(unsafe.Pointer(&rc[0])), tag, ms)
	})
}

// Broadcast copies root's buf to every rank.
func (c *Comm) Broadcast(ctx context.Context, buf collective.Buffer, root int) error {
	a := c.args("broadcast")
	err := a.Buf("buf", buf, -1, true)
	if err == nil {
		err = a.Root(root)
	}
	if err != nil {
		return c.invalid(err)
	}
	p, n := collective.HostPointer(buf), buf.Len()*buf.ElemSize()
	if n == 0 {
		return c.empty(ctx)
	}
	return c.run(ctx, a.Op, func(g *C.aipo_gloo, tag C.uint32_t, ms C.int64_t) *C.aipo_gloo_error {
		return C.aipo_gloo_broadcast(g, p, C.size_t(n), C.int(root), tag, ms)
	})
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", func(g *C.aipo_gloo, tag C.uint32_t, ms C.int64_t) *C.aipo_gloo_error {
		return C.aipo_gloo_barrier(g, tag, ms)
	})
}

// Abort breaks the communicator and tells the other ranks through the
// store. When no operation is in flight the Gloo context is freed now;
// otherwise the operation ends at its deadline and frees it.
func (c *Comm) Abort(reason error) {
	err, first := c.abort.Mark(c.g, "gloo", reason)
	if !first {
		return
	}
	if c.mu.TryLock() {
		c.freeLocked(err)
		c.mu.Unlock()
	}
}

// Close frees the Gloo context, after the operation in flight (if any).
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.freeLocked(nil)
	return nil
}
