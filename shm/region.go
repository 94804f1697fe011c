package shm

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// Errors returned by Region methods (test with errors.Is).
var (
	ErrOutOfRange = errors.New("shm: address range outside the region")
	ErrNoSpace    = errors.New("shm: region has no free space for the allocation")
	ErrBadArg     = errors.New("shm: bad argument")
	ErrClosed     = errors.New("shm: region is closed")
)

// RangeError reports an access outside the region.
type RangeError struct {
	Op   string
	Addr uint64
	Len  int
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("shm: %s [%#x, +%d) outside the region", e.Op, e.Addr, e.Len)
}

// Unwrap makes errors.Is(err, ErrOutOfRange) true.
func (e *RangeError) Unwrap() error { return ErrOutOfRange }

// Region is a contiguous block of shared host memory.
type Region struct {
	mem   []byte
	base  uint64
	fd    int       // memfd, or -1 for an anonymous mapping
	free  *spanTree // by offset, never adjacent
	used  map[uint64]int
	inUse int
}

type span struct{ off, size int }

// New maps size bytes (rounded up to 4 KiB) backed by a memfd named name,
// falling back to an anonymous shared mapping. base is the IOVA of byte 0; 0
// means the mapping's own virtual address (what real hardware would see).
// A fixed base makes addresses, and so traces, identical from run to run.
func New(name string, size int, base uint64) (*Region, error) {
	if size <= 0 || size > math.MaxInt-4095 { // rounding up to 4 KiB must not wrap
		return nil, fmt.Errorf("%w: size %d", ErrBadArg, size)
	}
	size = (size + 4095) &^ 4095
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	var mem []byte
	if err == nil {
		if err = unix.Ftruncate(fd, int64(size)); err == nil {
			// Sealed against shrinking, so that a daemon that maps it
			// (Map) can never be made to fault by a truncation.
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
			mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		}
		if err != nil {
			unix.Close(fd)
			fd = -1
		}
	} else {
		fd = -1
	}
	if mem == nil {
		mem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("shm: mmap %d bytes: %w", size, err)
		}
	}
	// Device-visible memory must not be inherited by a forked child
	// (ibv_fork_init does the same); failure is harmless here.
	_ = unix.Madvise(mem, unix.MADV_DONTFORK)
	if base == 0 {
		base = uint64(uintptrOf(mem))
	}
	return &Region{mem: mem, fd: fd, base: base, free: newSpanTree(base, span{0, size}), used: map[uint64]int{}}, nil
}

// Close unmaps the region.
func (r *Region) Close() error {
	if r.mem == nil {
		return ErrClosed
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
	return err
}

// Base is the IOVA of the region's first byte.
func (r *Region) Base() uint64 { return r.base }

// Size is the region's length in bytes.
func (r *Region) Size() int { return len(r.mem) }

// Fd is the memfd backing the region, or -1.
func (r *Region) Fd() int { return r.fd }

// Bytes is the whole region.
func (r *Region) Bytes() []byte { return r.mem }

// Contains reports whether [addr, addr+n) lies inside the region.
func (r *Region) Contains(addr uint64, n int) bool {
	if n < 0 || addr < r.base {
		return false
	}
	off := addr - r.base
	return off <= uint64(len(r.mem)) && uint64(n) <= uint64(len(r.mem))-off
}

// Slice returns the n bytes at addr, aliasing the region.
func (r *Region) Slice(addr uint64, n int) ([]byte, error) {
	if !r.Contains(addr, n) {
		return nil, &RangeError{Op: "slice", Addr: addr, Len: n}
	}
	off := addr - r.base
	return r.mem[off : off+uint64(n) : off+uint64(n)], nil
}

// Read copies len(dst) bytes at addr into dst.
func (r *Region) Read(addr uint64, dst []byte) error {
	if !r.Contains(addr, len(dst)) {
		return &RangeError{Op: "read", Addr: addr, Len: len(dst)}
	}
	copy(dst, r.mem[addr-r.base:])
	return nil
}

// Write copies src to addr.
func (r *Region) Write(addr uint64, src []byte) error {
	if !r.Contains(addr, len(src)) {
		return &RangeError{Op: "write", Addr: addr, Len: len(src)}
	}
	copy(r.mem[addr-r.base:], src)
	return nil
}

// allocArgs checks an allocation's size and alignment (a power of two)
// and rounds them up to whole, 8-byte aligned words.
func allocArgs(size, align int) (int, int, error) {
	if size <= 0 || align <= 0 || align&(align-1) != 0 {
		return 0, 0, fmt.Errorf("%w: alloc size %d align %d", ErrBadArg, size, align)
	}
	if size > math.MaxInt-7 { // rounding up to 8 would wrap negative
		return 0, 0, fmt.Errorf("%w: alloc size %d", ErrNoSpace, size)
	}
	return (size + 7) &^ 7, max(align, 8), nil
}

// Alloc reserves size bytes aligned to align (a power of two, at least 8),
// zeroed, first fit, and returns their IOVA.
func (r *Region) Alloc(size, align int) (uint64, error) {
	size, align, err := allocArgs(size, align)
	if err != nil {
		return 0, err
	}
	if size > len(r.mem) { // no span holds it; and holds must not wrap
		return 0, r.noSpace(size, align)
	}
	s, a, ok := r.free.first(size, align)
	if !ok {
		return 0, r.noSpace(size, align)
	}
	return r.carve(s, a, size), nil
}

// noSpace is the error of a request no free span holds.
func (r *Region) noSpace(size, align int) error {
	return fmt.Errorf("%w: %d bytes (align %d), %d of %d in use", ErrNoSpace, size, align, r.inUse, len(r.mem))
}

// carve takes [a, a+size) out of free span s, zeroes it and records it.
func (r *Region) carve(s span, a, size int) uint64 {
	lo := span{s.off, a - s.off}
	hi := span{a + size, s.off + s.size - a - size}
	switch {
	case lo.size > 0:
		r.free.replace(s.off, lo)
		if hi.size > 0 {
			r.free.insert(hi)
		}
	case hi.size > 0:
		r.free.replace(s.off, hi)
	default:
		r.free.remove(s.off)
	}
	clear(r.mem[a : a+size])
	addr := r.base + uint64(a)
	r.used[addr] = size
	r.inUse += size
	return addr
}

// AllocTop is Alloc from the highest free addresses: for memory a device
// keeps for itself (its event queues), out of the way of what the
// application allocates from the bottom, so that those addresses do not
// depend on it.
func (r *Region) AllocTop(size, align int) (uint64, error) {
	size, align, err := allocArgs(size, align)
	if err != nil {
		return 0, err
	}
	if size > len(r.mem) { // no span holds it
		return 0, r.noSpace(size, align)
	}
	s, a, ok := r.free.last(size, align)
	if !ok {
		return 0, r.noSpace(size, align)
	}
	return r.carve(s, a, size), nil
}

// Free releases an allocation made by Alloc.
func (r *Region) Free(addr uint64) error {
	size, ok := r.used[addr]
	if !ok {
		return fmt.Errorf("%w: free of %#x, which Alloc did not return", ErrBadArg, addr)
	}
	delete(r.used, addr)
	r.inUse -= size
	s := span{int(addr - r.base), size}
	// Merge with the span just before, the one just after, or both.
	p, pok := r.free.before(s.off)
	pok = pok && p.off+p.size == s.off
	n, nok := r.free.after(s.off)
	nok = nok && s.off+s.size == n.off
	switch {
	case pok && nok:
		r.free.remove(n.off)
		r.free.replace(p.off, span{p.off, p.size + s.size + n.size})
	case pok:
		r.free.replace(p.off, span{p.off, p.size + s.size})
	case nok:
		r.free.replace(n.off, span{s.off, s.size + n.size})
	default:
		r.free.insert(s)
	}
	return nil
}

// InUse is the number of allocated bytes.
func (r *Region) InUse() int { return r.inUse }
