package mmioring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Errors (test with errors.Is). ErrBadRing and ErrBadRecord come wrapped
// with what was wrong; the others are returned bare so that the hot path
// never allocates.
var (
	// ErrBadRing: the shared header, an index or a slot's sequence word is
	// inconsistent, so the peer is broken or hostile. Sticky: the endpoint
	// that saw it fails every later call with it.
	ErrBadRing = errors.New("mmioring: bad ring")
	// ErrBadRecord: one record is malformed (width, alignment, flags,
	// mask). Push refuses it; Pop skips it, so the ring stays usable.
	ErrBadRecord = errors.New("mmioring: bad record")
	// ErrBadArg: Init was given an unusable region or slot count.
	ErrBadArg = errors.New("mmioring: bad argument")
	// ErrFull: no room and the deadline was zero (do not wait).
	ErrFull = errors.New("mmioring: ring full")
	// ErrEmpty: no record and the deadline was zero (do not wait).
	ErrEmpty = errors.New("mmioring: ring empty")
	// ErrTimeout: the deadline passed while waiting for the peer.
	ErrTimeout = errors.New("mmioring: deadline exceeded")
	// ErrClosed: this endpoint or the peer closed the ring (a consumer
	// sees it only once every published record has been popped).
	ErrClosed = errors.New("mmioring: ring closed")
)

// Layout constants (doc.go draws the table).
const (
	Magic      = 0x524d4e53 // "SNMR" little-endian
	Version    = 1
	SlotSize   = 64  // one cache line
	HeaderSize = 512 // four 128-byte lines; slot 0 starts here
	MinSlots   = 2   // a 64-byte line record takes two slots
	MaxSlots   = 1 << 20

	offMagic    = 0
	offVersion  = 4
	offSlots    = 8
	offSlotSize = 12
	offHdrSize  = 16
	offFeatures = 20
	offRegion   = 24
	offClosed   = 32

	offProd      = 128 // producer line: producer index
	offConsSleep = 132 // producer line: "consumer sleeping" (consumer's futex word)
	offCons      = 256 // consumer line: consumer index
	offProdWait  = 260 // consumer line: "producer waiting" (producer's futex word)

	offReplySeq   = 384 // reply line: ring position of the call answered, + 1 (atomic)
	offReplyWait  = 388 // reply line: "producer awaiting a reply" (atomic)
	offReplyTime  = 392 // reply line: u64
	offReplyValue = 400 // reply line: u64
	offReplyState = 408 // reply line: u32 status

	closedProducer = 1
	closedConsumer = 2
)

// Slot layout of a record's header slot.
const (
	slotSeq   = 0  // u32: the slot's free-running ring position
	slotWidth = 4  // u8
	slotFlags = 5  // u8
	slotRsvd  = 6  // u16, zero
	slotOff   = 8  // u64 BAR0 offset
	slotTime  = 16 // u64 host virtual time, ps
	slotMask  = 24 // u64 byte enables of a line record, else 0
	slotData  = 32 // u64 data of a 4- or 8-byte store (little-endian)
	slotQPN   = 40 // u32 the QP the host's tracking says the write belongs to (label only)
	slotRsvd2 = 44 // u32, zero
	slotFlow  = 48 // u64 the trace flow of that post (label only)
)

// FlagFlush marks a write after which the host drained its write-combining
// buffers (x86 sfence, mmio_flush_writes). A Width-0 record is a flush with
// no store of its own.
const FlagFlush = 1

// FlagCall marks a Width-0 record as a call: a request the consumer
// answers on the ring's reply line (Consumer.Reply, Producer.Call). The
// ring does not interpret it: Data's first 8 bytes carry the caller's
// operation word and Off its argument, as the daemon defines them.
const FlagCall = 2

const knownFlags = FlagFlush | FlagCall

// FullMask is the byte-enable mask of a whole 64-byte line.
const FullMask = ^uint64(0)

// Record is one MMIO write from host to BAR0, as the host side emits it
// after its write-combining buffer.
type Record struct {
	Off   uint64 // BAR0 offset, a multiple of Width
	Time  int64  // host virtual time of the write, ps (sim.Time)
	Width uint8  // 4, 8, 64 (one write-combined line), or 0 (a flush alone)
	Flags uint8  // FlagFlush
	// Mask: for Width 64, bit i set = Data[i] was written (FullMask for a
	// whole BlueFlame line, fewer bits for a line evicted early); else 0.
	Mask uint64
	// Data: the first Width bytes are the write, little-endian for 4 and 8
	// (bytes past Width are zero on Pop); for a call, its first 8 bytes
	// are the operation word.
	Data [64]byte
	// QPN and Flow label the write with the doorbell or BlueFlame post
	// the host's tracking put it in (pcie.FlowPort): the trace and fault
	// rules name it by them, the device never acts on them.
	QPN  uint32
	Flow uint64
}

// Store32 is a 4-byte write.
func Store32(off uint64, v uint32, t int64) Record {
	r := Record{Off: off, Time: t, Width: 4}
	binary.LittleEndian.PutUint32(r.Data[:], v)
	return r
}

// Store64 is an 8-byte write.
func Store64(off uint64, v uint64, t int64) Record {
	r := Record{Off: off, Time: t, Width: 8}
	binary.LittleEndian.PutUint64(r.Data[:], v)
	return r
}

// Line is a write-combined 64-byte line (a BlueFlame chunk) with byte
// enables mask.
func Line(off uint64, data *[64]byte, mask uint64, t int64) Record {
	return Record{Off: off, Time: t, Width: 64, Mask: mask, Data: *data}
}

// Fence is a flush with no store of its own.
func Fence(t int64) Record { return Record{Time: t, Flags: FlagFlush} }

// U32 is the value of a 4-byte write.
func (r *Record) U32() uint32 { return binary.LittleEndian.Uint32(r.Data[:4]) }

// U64 is the value of an 8-byte write.
func (r *Record) U64() uint64 { return binary.LittleEndian.Uint64(r.Data[:8]) }

// Slots is how many ring slots the record occupies (1, or 2 for a line).
func (r *Record) Slots() int { return nslots(r.Width) }

func nslots(width uint8) int {
	if width == 64 {
		return 2
	}
	return 1
}

// Check reports why a record cannot be carried (nil if it can).
func (r *Record) Check() error {
	return checkFields(r.Width, r.Flags, r.Off, r.Mask)
}

// checkFields is the one validity rule, used by Push for the caller's
// records and by Pop for what a possibly hostile producer wrote.
func checkFields(width, flags uint8, off, mask uint64) error {
	if flags&^knownFlags != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrBadRecord, flags)
	}
	if flags&FlagCall != 0 && (width != 0 || flags != FlagCall || mask != 0) {
		return fmt.Errorf("%w: a call is a width-0 record with FlagCall alone and no mask (width %d, flags %#x, mask %#x)", ErrBadRecord, width, flags, mask)
	}
	switch width {
	case 0:
		if flags == FlagCall {
			return nil // a call: Off is its argument, not an offset
		}
		if flags&FlagFlush == 0 || off != 0 || mask != 0 {
			return fmt.Errorf("%w: a width-0 record is a flush alone or a call (flags %#x, off %#x, mask %#x)", ErrBadRecord, flags, off, mask)
		}
	case 4, 8:
		if mask != 0 {
			return fmt.Errorf("%w: mask %#x on a %d-byte write", ErrBadRecord, mask, width)
		}
	case 64:
		if mask == 0 {
			return fmt.Errorf("%w: line at %#x with no bytes enabled", ErrBadRecord, off)
		}
	default:
		return fmt.Errorf("%w: width %d (want 0, 4, 8 or 64)", ErrBadRecord, width)
	}
	if width != 0 && off%uint64(width) != 0 {
		return fmt.Errorf("%w: %d-byte write at unaligned offset %#x", ErrBadRecord, width, off)
	}
	return nil
}

// Size is the number of bytes a ring of slots slots occupies.
func Size(slots int) int { return HeaderSize + slots*SlotSize }

// Ring is one process's view of a ring in shared memory. Take one
// endpoint from it: Producer in the client, Consumer in the device.
type Ring struct {
	mem   []byte // the ring's bytes: header + slots
	slots []byte
	n     uint32 // slot count
	mask  uint32

	closed    *uint32
	prod      *uint32
	consSleep *uint32
	cons      *uint32
	prodWait  *uint32
	replySeq  *uint32
	replyWait *uint32
}

// Init lays out a new ring of slots slots (a power of two, MinSlots to
// MaxSlots) at the start of mem, which must be 64-byte aligned and at
// least Size(slots) long; the slots are zeroed. The magic word is stored
// last, atomically, so a peer that attaches concurrently sees either no
// ring or a whole header.
func Init(mem []byte, slots int) (*Ring, error) {
	if slots < MinSlots || slots > MaxSlots || slots&(slots-1) != 0 {
		return nil, fmt.Errorf("%w: slot count %d (want a power of two in [%d, %d])", ErrBadArg, slots, MinSlots, MaxSlots)
	}
	if len(mem) < Size(slots) {
		return nil, fmt.Errorf("%w: region of %d bytes, ring of %d slots needs %d", ErrBadArg, len(mem), slots, Size(slots))
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%SlotSize != 0 {
		return nil, fmt.Errorf("%w: region not 64-byte aligned", ErrBadArg)
	}
	mem = mem[:Size(slots)]
	r := newRing(mem, uint32(slots))
	atomic.StoreUint32(word(mem, offMagic), 0)
	clear(mem[4:])
	le := binary.LittleEndian
	le.PutUint32(mem[offVersion:], Version)
	le.PutUint32(mem[offSlots:], uint32(slots))
	le.PutUint32(mem[offSlotSize:], SlotSize)
	le.PutUint32(mem[offHdrSize:], HeaderSize)
	le.PutUint64(mem[offRegion:], uint64(len(mem)))
	atomic.StoreUint32(word(mem, offMagic), Magic)
	return r, nil
}

// Attach validates the ring header at the start of mem (written by Init,
// perhaps in another, untrusted process) and returns a view of it. Any
// mismatch is an error wrapping ErrBadRing.
func Attach(mem []byte) (*Ring, error) {
	bad := func(format string, args ...any) (*Ring, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadRing, fmt.Sprintf(format, args...))
	}
	if len(mem) < HeaderSize {
		return bad("region of %d bytes is shorter than the %d-byte header", len(mem), HeaderSize)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%SlotSize != 0 {
		return bad("region not 64-byte aligned")
	}
	le := binary.LittleEndian
	if m := atomic.LoadUint32(word(mem, offMagic)); m != Magic {
		return bad("magic %#x (want %#x)", m, Magic)
	}
	if v := le.Uint32(mem[offVersion:]); v != Version {
		return bad("version %d (want %d)", v, Version)
	}
	n := le.Uint32(mem[offSlots:])
	if n < MinSlots || n > MaxSlots || n&(n-1) != 0 {
		return bad("slot count %d", n)
	}
	if s := le.Uint32(mem[offSlotSize:]); s != SlotSize {
		return bad("slot size %d (want %d)", s, SlotSize)
	}
	if h := le.Uint32(mem[offHdrSize:]); h != HeaderSize {
		return bad("header size %d (want %d)", h, HeaderSize)
	}
	if f := le.Uint32(mem[offFeatures:]); f != 0 {
		return bad("unknown features %#x", f)
	}
	want := uint64(Size(int(n)))
	if sz := le.Uint64(mem[offRegion:]); sz != want {
		return bad("ring size %d (want %d for %d slots)", sz, want, n)
	}
	if uint64(len(mem)) < want {
		return bad("region of %d bytes, ring needs %d", len(mem), want)
	}
	r := newRing(mem[:want], n)
	if c := atomic.LoadUint32(r.closed); c&^(closedProducer|closedConsumer) != 0 {
		return bad("closed word %#x", c)
	}
	p, c := atomic.LoadUint32(r.prod), atomic.LoadUint32(r.cons)
	if p-c > n {
		return bad("producer index %d is %d ahead of consumer index %d in a ring of %d", p, p-c, c, n)
	}
	return r, nil
}

func newRing(mem []byte, n uint32) *Ring {
	return &Ring{
		mem: mem, slots: mem[HeaderSize:], n: n, mask: n - 1,
		closed:    word(mem, offClosed),
		prod:      word(mem, offProd),
		consSleep: word(mem, offConsSleep),
		cons:      word(mem, offCons),
		prodWait:  word(mem, offProdWait),
		replySeq:  word(mem, offReplySeq),
		replyWait: word(mem, offReplyWait),
	}
}

// word is the aligned u32 at off in mem (bounds-checked by the slice).
func word(mem []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&mem[off : off+4][0]))
}

// Slots is the ring's capacity in slots.
func (r *Ring) Slots() int { return int(r.n) }

// Closed reports whether either side has closed the ring.
func (r *Ring) Closed() bool { return atomic.LoadUint32(r.closed) != 0 }

// slot is the 64 bytes of ring position pos.
func (r *Ring) slot(pos uint32) *[SlotSize]byte {
	o := int(pos&r.mask) * SlotSize
	return (*[SlotSize]byte)(r.slots[o : o+SlotSize])
}

// close sets bit in the closed word and wakes whoever sleeps on either
// futex word, so a blocked peer (or a blocked goroutine of ours) sees it.
func (r *Ring) close(bit uint32) {
	atomic.OrUint32(r.closed, bit)
	atomic.StoreUint32(r.consSleep, 0)
	atomic.StoreUint32(r.prodWait, 0)
	atomic.StoreUint32(r.replyWait, 0)
	futexWake(r.consSleep, 1<<30)
	futexWake(r.prodWait, 1<<30)
	futexWake(r.replyWait, 1<<30)
}

// waiter is the endpoint a blocked call waits for: ready reports whether
// it can go on, or the sticky error that stops it; closedErr is what it
// returns once the ring is closed.
type waiter interface {
	ready() (bool, error)
	closedErr() error
}

// await is the one wait of both endpoints: spin polls of w.ready, yield
// more after runtime.Gosched each, then sleeps on the futex word, which it
// sets before its last look so that a peer's store-and-wake between that
// look and the sleep is never missed. It ends at the deadline with
// ErrTimeout; the zero deadline is a poll, one look and then empty.
func await[W waiter](r *Ring, word *uint32, spin, yield int, deadline time.Time, empty error, w W) error {
	if deadline.IsZero() {
		spin, yield = 0, 0 // a poll: one look, no spinning
	}
	for i := 0; i < spin+yield; i++ {
		if i >= spin {
			runtime.Gosched()
		}
		if ok, err := w.ready(); ok || err != nil {
			return err
		}
	}
	defer atomic.StoreUint32(word, 0)
	for {
		if atomic.LoadUint32(r.closed) != 0 {
			return w.closedErr()
		}
		if deadline.IsZero() {
			return empty
		}
		d := time.Until(deadline)
		if d <= 0 {
			return ErrTimeout
		}
		atomic.StoreUint32(word, 1)
		if ok, err := w.ready(); ok || err != nil {
			return err
		}
		if atomic.LoadUint32(r.closed) != 0 {
			continue
		}
		futexWait(word, 1, d)
		if ok, err := w.ready(); ok || err != nil {
			return err
		}
	}
}
