//go:build cgo && !purego

package gloo

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/collective"
)

// pairSockets tells this rank's Gloo sockets among the process's: for the
// pairs on which this rank accepted, the socket's local address is its own
// end of the pair; for those on which it connected, the socket's peer
// address is the other rank's end. Gloo keeps its sockets to itself, so
// the ends are exchanged through the group's store when the communicator
// connects.
type pairSockets struct {
	local map[string]bool // this rank's ends ("IP:port")
	peer  map[string]bool // the other ranks' ends of their pairs with this one
}

// exchangePairEnds publishes this rank's end of each of its pairs under
// prefix and reads every other rank's end of its pair with this one.
func exchangePairEnds(ctx context.Context, g *collective.Group, c *C.aipo_gloo, prefix string) (pairSockets, error) {
	ps := pairSockets{local: map[string]bool{}, peer: map[string]bool{}}
	ends := make([]string, g.Size())
	for r := range ends {
		if r == g.Rank() {
			continue
		}
		a := C.aipo_gloo_address(c, C.int(r))
		if a == nil {
			return ps, fmt.Errorf("collective: gloo: no address for the pair with rank %d", r)
		}
		ends[r] = C.GoString(a)
		C.free(unsafe.Pointer(a))
		ps.local[ends[r]] = true
	}
	key := func(r int) string { return prefix + "ends/" + strconv.Itoa(r) }
	if err := g.Store().Set(ctx, key(g.Rank()), []byte(strings.Join(ends, ","))); err != nil {
		return ps, err
	}
	for r := 0; r < g.Size(); r++ {
		if r == g.Rank() {
			continue
		}
		v, err := g.Store().Get(ctx, key(r))
		if err != nil {
			return ps, err
		}
		theirs := strings.Split(string(v), ",")
		if len(theirs) != g.Size() {
			return ps, fmt.Errorf("collective: gloo: rank %d published %d pair ends, want %d", r, len(theirs), g.Size())
		}
		ps.peer[theirs[g.Rank()]] = true
	}
	return ps, nil
}

// shutdown shuts down (without closing) every socket of the process that
// is one of this rank's Gloo pairs, and returns how many. Gloo's device
// thread then reads the end of each, and the operation in flight fails at
// once with an I/O error. The descriptors stay open, so that none is
// reused while Gloo still holds its number; freeing the context closes
// them.
func (ps pairSockets) shutdown() (int, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || typ != syscall.SOCK_STREAM {
			continue
		}
		local, lerr := syscall.Getsockname(fd)
		peer, perr := syscall.Getpeername(fd)
		if lerr != nil || perr != nil {
			continue // not connected: a listener, or not a socket at all
		}
		if ps.local[sockaddrString(local)] || ps.peer[sockaddrString(peer)] {
			if syscall.Shutdown(fd, syscall.SHUT_RDWR) == nil {
				n++
			}
		}
	}
	return n, nil
}

// sockaddrString formats a TCP address as the shim's
// aipo_gloo_address does ("IP:port", "[IPv6]:port").
func sockaddrString(sa syscall.Sockaddr) string {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *syscall.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	}
	return ""
}
