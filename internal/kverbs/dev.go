package kverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/softnic/softnic/uverbs"
	"golang.org/x/sys/unix"
)

// ErrClosed: the Dev was closed.
var ErrClosed = errors.New("kverbs: device closed")

// Dev is an open /dev/infiniband/uverbsN: one ucontext. Do is safe for
// concurrent use; the mmap'd queues are the caller's.
type Dev struct {
	Info Device

	mu     sync.Mutex
	fd     int
	closed bool
	req    [maxReq]byte
	resp   [maxResp]byte
}

// Open opens the char device of d (O_RDWR|O_CLOEXEC: mmap needs both).
// A missing node is ErrNoDevice.
func Open(d Device) (*Dev, error) {
	if d.Driver.ID() == 0 {
		return nil, fmt.Errorf("%w: %s: driver %v is not one of mlx5, rxe", ErrNoDevice, d.Name, d.Driver)
	}
	fd, err := unix.Open(d.Path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) {
			return nil, fmt.Errorf("%w: open %s: %w", ErrNoDevice, d.Path, err)
		}
		return nil, fmt.Errorf("kverbs: open %s: %w", d.Path, err)
	}
	return &Dev{Info: d, fd: fd}, nil
}

// Fd is the uverbs file descriptor.
func (d *Dev) Fd() int { return d.fd }

// Close closes the uverbs fd: the kernel destroys every object of the
// context that is still open.
func (d *Dev) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	d.closed = true
	return unix.Close(d.fd)
}

// Do is the provider's Transport onto the kernel: req is a write()
// command or an RDMA_VERBS_IOCTL request whose response addresses are
// nominal (see provider.Transport); Do sends it with real pointers into
// its own response buffer and copies the answer to resp. The ioctl form's
// resp starts with the attribute array as the kernel left it. A refusal
// is a *uverbs.Error with the kernel's errno and the command's name.
func (d *Dev) Do(req, resp []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	base := uint64(uintptr(unsafe.Pointer(&d.resp[0])))
	respLen := min(len(resp), maxResp)
	f, err := prepare(d.req[:], req, respLen, base, d.Info.Driver.ID())
	if err != nil {
		return 0, err
	}
	clear(d.resp[:respLen])
	if f.ioctl {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(d.fd), RDMAVerbsIoctl, uintptr(unsafe.Pointer(&d.req[0])))
		runtime.KeepAlive(d)
		if e != 0 {
			return 0, &uverbs.Error{Cmd: f.name, Errno: e, Reason: "kernel refused"}
		}
		copy(resp[:f.respEnd], d.resp[:f.respEnd])
		finishIoctl(f, d.req[:], resp)
		return f.respEnd, nil
	}
	n, err := unix.Write(d.fd, d.req[:len(req)])
	runtime.KeepAlive(d)
	if err != nil {
		var e syscall.Errno
		if !errors.As(err, &e) {
			e = syscall.EIO
		}
		return 0, &uverbs.Error{Cmd: f.name, Errno: e, Reason: "kernel refused"}
	}
	if n != len(req) {
		return 0, localErr(f.name, syscall.EIO, "write of %d bytes returned %d", len(req), n)
	}
	copy(resp[:f.outLen], d.resp[:f.outLen])
	return f.outLen, nil
}

// Protections for Mmap: the rxe rings are read-write, an mlx5 UAR page
// write-only.
const (
	ProtRead  = unix.PROT_READ
	ProtWrite = unix.PROT_WRITE
)

// Mmap maps length bytes of the uverbs fd at offset (a queue or UAR
// offset the kernel returned).
func (d *Dev) Mmap(offset uint64, length int, prot int) ([]byte, error) {
	if length <= 0 || offset > 1<<62 {
		return nil, fmt.Errorf("kverbs: mmap %d bytes at %#x: %w", length, offset, syscall.EINVAL)
	}
	b, err := unix.Mmap(d.fd, int64(offset), length, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("kverbs: mmap %d bytes at %#x of %s: %w", length, offset, d.Info.Path, err)
	}
	return b, nil
}

// Munmap unmaps what Mmap returned.
func Munmap(b []byte) error { return unix.Munmap(b) }

// Doorbell is a fixed request that a QP writes to the fd for each
// doorbell (rxe's POST_SEND with no work requests): its buffers are heap
// memory of its own, so that the response address it carries stays valid.
type Doorbell struct {
	fd   int
	req  [64]byte
	resp [16]byte
	n    int
}

// NewDoorbell builds the rxe send doorbell of QP handle h.
func (d *Dev) NewDoorbell(h uverbs.Handle) (*Doorbell, error) {
	db := &Doorbell{fd: d.fd}
	n, err := uverbs.RXEDoorbell(db.req[:], h, uint64(uintptr(unsafe.Pointer(&db.resp[0]))))
	if err != nil {
		return nil, err
	}
	db.n = n
	return db, nil
}

// Ring writes the doorbell: one write() system call.
func (db *Doorbell) Ring() error {
	_, _, e := unix.Syscall(unix.SYS_WRITE, uintptr(db.fd), uintptr(unsafe.Pointer(&db.req[0])), uintptr(db.n))
	runtime.KeepAlive(db)
	if e != 0 {
		return &uverbs.Error{Cmd: "POST_SEND", Errno: e, Reason: "doorbell refused"}
	}
	return nil
}

// EventFD is an event file of the context: the async-event fd, or a
// completion channel.
type EventFD struct {
	fd int
}

// NewEventFD wraps fd, which the caller hands over.
func NewEventFD(fd int) *EventFD { return &EventFD{fd: fd} }

// Fd is the file descriptor.
func (e *EventFD) Fd() int { return e.fd }

// Close closes it.
func (e *EventFD) Close() error { return unix.Close(e.fd) }

// ErrTimeout: no event within the time asked.
var ErrTimeout = errors.New("kverbs: no event before the timeout")

// read waits up to timeout for one record of n bytes; a timeout <= 0
// does not wait (poll(2) would take a negative one as for ever).
func (e *EventFD) read(b []byte, timeout time.Duration) (int, error) {
	ms := 0
	if timeout > 0 {
		ms = max(int(timeout/time.Millisecond), 1)
	}
	pfd := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
	for {
		k, err := unix.Poll(pfd, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("kverbs: poll event fd: %w", err)
		}
		if k == 0 {
			return 0, ErrTimeout
		}
		break
	}
	n, err := unix.Read(e.fd, b)
	if err != nil {
		return 0, fmt.Errorf("kverbs: read event fd: %w", err)
	}
	return n, nil
}

// AsyncEvent waits up to timeout for one ib_uverbs_async_event_desc.
func (e *EventFD) AsyncEvent(timeout time.Duration) (uverbs.AsyncEventDesc, error) {
	var b [uverbs.AsyncEventDescSize]byte
	n, err := e.read(b[:], timeout)
	if err != nil {
		return uverbs.AsyncEventDesc{}, err
	}
	return DecodeAsyncEvent(b[:n])
}

// CompEvent waits up to timeout for one ib_uverbs_comp_event_desc and
// returns the CQ's user handle.
func (e *EventFD) CompEvent(timeout time.Duration) (uint64, error) {
	var b [uverbs.CompEventDescSize]byte
	n, err := e.read(b[:], timeout)
	if err != nil {
		return 0, err
	}
	if n != len(b) {
		return 0, fmt.Errorf("kverbs: completion event of %d bytes, want %d: %w", n, len(b), syscall.EIO)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// DecodeAsyncEvent decodes what read() returned from the async fd; a
// record of any other size is an error.
func DecodeAsyncEvent(b []byte) (uverbs.AsyncEventDesc, error) {
	var ev uverbs.AsyncEventDesc
	if len(b) != uverbs.AsyncEventDescSize {
		return ev, fmt.Errorf("kverbs: async event of %d bytes, want %d: %w", len(b), uverbs.AsyncEventDescSize, syscall.EIO)
	}
	ev.Element = binary.NativeEndian.Uint64(b)
	ev.EventType = binary.NativeEndian.Uint32(b[8:])
	return ev, nil
}
