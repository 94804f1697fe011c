package kverbs

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// UAR is an mlx5 UAR page mapped from the uverbs fd, addressed the way
// the provider addresses BAR0: offset base is byte 0 of the mapping (the
// UAR's page id times 4096). It is a pcie.MMIO and a pcie.LineStorer.
// Stores outside the mapping are dropped and counted, never made; the
// page is write-only (PROT_WRITE, as libmlx5 maps it), so Load32 reads
// nothing.
type UAR struct {
	mem     []byte
	base    uint64
	dropped atomic.Uint64
}

// MapUAR maps length bytes of the uverbs fd at offset (what
// MLX5_IB_METHOD_UAR_OBJ_ALLOC returned) as the UAR whose BAR0 offset is
// base.
func (d *Dev) MapUAR(offset uint64, length int, base uint64) (*UAR, error) {
	mem, err := d.Mmap(offset, length, ProtWrite)
	if err != nil {
		return nil, err
	}
	return &UAR{mem: mem, base: base}, nil
}

// NewUAR is a UAR over mem (tests: ordinary memory stands in for the page).
func NewUAR(mem []byte, base uint64) *UAR { return &UAR{mem: mem, base: base} }

// Unmap unmaps a UAR MapUAR mapped.
func (u *UAR) Unmap() error { return Munmap(u.mem) }

// Dropped is the number of stores outside the mapping.
func (u *UAR) Dropped() uint64 { return u.dropped.Load() }

// Covers reports whether the n bytes at BAR0 offset off all lie in the
// mapping.
func (u *UAR) Covers(off uint64, n int) bool {
	return n >= 0 && off >= u.base && off-u.base <= uint64(len(u.mem)) && uint64(len(u.mem))-(off-u.base) >= uint64(n)
}

func (u *UAR) addr(off uint64, n int) (unsafe.Pointer, bool) {
	if !u.Covers(off, n) || (off-u.base)%uint64(min(n, 8)) != 0 {
		u.dropped.Add(1)
		return nil, false
	}
	return unsafe.Pointer(&u.mem[off-u.base]), true
}

// Store64 is one 8-byte store at BAR0 offset off.
func (u *UAR) Store64(off uint64, v uint64) {
	if a, ok := u.addr(off, 8); ok {
		store64(a, v)
	}
}

// Store32 is one 4-byte store.
func (u *UAR) Store32(off uint64, v uint32) {
	if a, ok := u.addr(off, 4); ok {
		store32(a, v)
	}
}

// Load32 reads nothing: the page is mapped write-only.
func (u *UAR) Load32(uint64) uint32 { return 0 }

// Flush drains the write-combining buffers (sfence).
func (u *UAR) Flush() { sfence() }

// StoreLines is a BlueFlame copy: fence, a then b in 64-byte chunks of
// eight 8-byte stores, fence (pcie.LineStorer).
func (u *UAR) StoreLines(off uint64, a, b []byte) {
	sfence()
	for _, part := range [2][]byte{a, b} {
		for i := 0; i+64 <= len(part); i += 64 {
			if d, ok := u.addr(off, 64); ok {
				copy64(d, unsafe.Pointer(&part[i]))
			}
			off += 64
		}
	}
	sfence()
}

func (u *UAR) String() string { return fmt.Sprintf("UAR at BAR0 %#x, %d bytes", u.base, len(u.mem)) }
