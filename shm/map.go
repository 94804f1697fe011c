package shm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Map maps the memfd fd, which another process created and passed (for
// example over a unix socket with SCM_RIGHTS), as a region of size bytes
// whose byte 0 is at IOVA base. The region owns fd from then on, even when
// Map fails. The memfd must be at least size bytes long and sealed against
// shrinking (F_SEAL_SHRINK, as New seals its own): otherwise its owner
// could truncate it under the mapping and make every access of the mapper
// fault, so Map refuses it with ErrBadArg.
func Map(fd int, size int, base uint64) (*Region, error) {
	fail := func(format string, args ...any) (*Region, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s", ErrBadArg, fmt.Sprintf(format, args...))
	}
	if size <= 0 || size%4096 != 0 {
		return fail("size %d (want a positive multiple of 4096)", size)
	}
	if base == 0 || base%4096 != 0 || base+uint64(size) < base {
		return fail("base %#x for %d bytes", base, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fail("fd %d is not a sealable memfd: %v", fd, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fail("memfd is not sealed against shrinking (seals %#x)", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("fstat: %v", err)
	}
	if st.Size < int64(size) {
		return fail("memfd of %d bytes, %d claimed", st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap %d bytes: %v", size, err)
	}
	_ = unix.Madvise(mem, unix.MADV_DONTFORK)
	return &Region{mem: mem, fd: fd, base: base, free: newSpanTree(base, span{0, size}), used: map[uint64]int{}}, nil
}

// Revoke takes the region's memory away from whoever else maps it: the
// pages are replaced, at the same addresses, by private zero pages, and
// the memfd is closed. Reads and writes through the region stay valid
// (they see the zero pages) until Close, so a device whose accesses are
// still in flight cannot fault; nothing reaches the other process's
// memory any more. The daemon revokes a client's memory when the client
// goes away.
func (r *Region) Revoke() error {
	if r.mem == nil {
		return ErrClosed
	}
	if _, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(r.mem)), uintptr(len(r.mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED); err != nil {
		return fmt.Errorf("shm: revoke: %w", err)
	}
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
	return nil
}
