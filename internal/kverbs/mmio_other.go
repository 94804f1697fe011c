//go:build !amd64

package kverbs

import (
	"sync/atomic"
	"unsafe"
)

// Without the amd64 helpers: atomic stores (ordered, never merged) and a
// full barrier for the fence. No ConnectX port targets these yet.

func store64(addr unsafe.Pointer, v uint64) { atomic.StoreUint64((*uint64)(addr), v) }
func store32(addr unsafe.Pointer, v uint32) { atomic.StoreUint32((*uint32)(addr), v) }

var fence uint32

func sfence() { atomic.AddUint32(&fence, 1) }

func copy64(dst, src unsafe.Pointer) {
	for i := 0; i < 64; i += 8 {
		store64(unsafe.Add(dst, i), *(*uint64)(unsafe.Add(src, i)))
	}
}
