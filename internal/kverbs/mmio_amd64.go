package kverbs

import "unsafe"

// Implemented in mmio_amd64.s.

//go:noescape
func store64(addr unsafe.Pointer, v uint64)

//go:noescape
func store32(addr unsafe.Pointer, v uint32)

func sfence()

//go:noescape
func copy64(dst, src unsafe.Pointer)
