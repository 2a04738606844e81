// Package gloo is the CPU backend of learner/collective: Gloo's collectives over its TCP transport, on host float32 and byte buffers.
//
// Gloo is C++ (Debian's libgloo-dev, see scripts/setup.sh); shim.cc wraps it
// behind a C interface that returns errors instead of throwing, and
// implements gloo::rendezvous::Store by calling back into the group's Go
// store (store.go). Built without cgo (or with -tags purego) the package
// still compiles, and New fails with collective.ErrUnavailable saying why.
//
// The TCP device binds, in order of preference: the interface named by
// GLOO_SOCKET_IFNAME, the address in AIPO_GLOO_ADDR, or the local address
// this machine uses to reach MASTER_ADDR.
//
// Deadlines are Gloo's own per-operation timeouts, set from the context's
// deadline (or the group's OpTimeout) on every call. ReduceScatter is an
// all-to-all of the segments followed by a sum in rank order in the shim,
// so its result is the same on every run.
package gloo
