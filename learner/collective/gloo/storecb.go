//go:build cgo && !purego

package gloo

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"fmt"
	"runtime/cgo"
	"time"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/collective"
)

// The store calls of shim.cc's GoStore. They run on the thread that called
// aipo_gloo_new, inside it; a panic is turned into an error because it must
// not unwind through C++.

func cErr(err error) *C.char {
	if err == nil {
		return nil
	}
	return C.CString(err.Error())
}

func storeOf(h C.uintptr_t) *collective.Store { return cgo.Handle(h).Value().(*collective.Store) }

func msContext(ms C.int64_t) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
}

//export aipoGlooStoreSet
func aipoGlooStoreSet(h C.uintptr_t, key *C.char, klen C.int, val *C.char, vlen C.int) (msg *C.char) {
	defer func() {
		if r := recover(); r != nil {
			msg = C.CString(fmt.Sprintf("store set panicked: %v", r))
		}
	}()
	return cErr(storeOf(h).Set(context.Background(), C.GoStringN(key, klen), C.GoBytes(unsafe.Pointer(val), vlen)))
}

//export aipoGlooStoreGet
func aipoGlooStoreGet(h C.uintptr_t, key *C.char, klen C.int, ms C.int64_t, val **C.char, vlen *C.int) (msg *C.char) {
	defer func() {
		if r := recover(); r != nil {
			msg = C.CString(fmt.Sprintf("store get panicked: %v", r))
		}
	}()
	ctx, cancel := msContext(ms)
	defer cancel()
	v, err := storeOf(h).Get(ctx, C.GoStringN(key, klen))
	if err != nil {
		return cErr(err)
	}
	*val = (*C.char)(C.CBytes(v))
	*vlen = C.int(len(v))
	return nil
}

//export aipoGlooStoreWait
func aipoGlooStoreWait(h C.uintptr_t, keys *C.char, klens *C.int, nkeys C.int, ms C.int64_t) (msg *C.char) {
	defer func() {
		if r := recover(); r != nil {
			msg = C.CString(fmt.Sprintf("store wait panicked: %v", r))
		}
	}()
	lens := unsafe.Slice(klens, int(nkeys))
	p := unsafe.Pointer(keys)
	names := make([]string, len(lens))
	for i, l := range lens {
		names[i] = C.GoStringN((*C.char)(p), l)
		p = unsafe.Add(p, int(l))
	}
	ctx, cancel := msContext(ms)
	defer cancel()
	return cErr(storeOf(h).Wait(ctx, names...))
}
