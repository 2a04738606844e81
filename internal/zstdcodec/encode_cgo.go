//go:build cgo && !purego

package zstdcodec

/*
#cgo pkg-config: libzstd
#include <zstd.h>
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// level is zstd's fast mode 1 ("--fast=1"): see the package comment.
const level = -1

// contexts holds compression contexts for reuse; one is not safe for
// concurrent use.
var contexts = sync.Pool{New: func() any { return C.ZSTD_createCCtx() }}

func encode(dst, src []byte) ([]byte, error) {
	bound := int(C.ZSTD_compressBound(C.size_t(len(src))))
	if cap(dst) < bound {
		dst = make([]byte, bound)
	}
	dst = dst[:cap(dst)]
	var in unsafe.Pointer
	if len(src) > 0 {
		in = unsafe.Pointer(&src[0])
	}
	cctx := contexts.Get().(*C.ZSTD_CCtx)
	n := C.ZSTD_compressCCtx(cctx, unsafe.Pointer(&dst[0]), C.size_t(len(dst)), in, C.size_t(len(src)), C.int(level))
	contexts.Put(cctx)
	if C.ZSTD_isError(n) != 0 {
		return dst[:0], fmt.Errorf("zstd compress %d bytes: %s", len(src), C.GoString(C.ZSTD_getErrorName(n)))
	}
	return dst[:n], nil
}

func backend() string {
	return fmt.Sprintf("libzstd %s level %d", C.GoString(C.ZSTD_versionString()), level)
}
