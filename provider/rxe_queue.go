package provider

import (
	"encoding/binary"

	"github.com/softnic/softnic/uverbs"
	"sync/atomic"
	"unsafe"
)

// rxe's queue buffer (struct rxe_queue_buf, rdma_user_rxe.h): a header
// whose producer and consumer indices sit on their own cache lines, then
// the slots. Indices are stored masked (uverbs.md §5.2).
const (
	rxeQLog2Elem  = 0
	rxeQIndexMask = 4
	rxeQProducer  = 128
	rxeQConsumer  = 256
	rxeQData      = uverbs.RXEQueueBufSize
	rxeQMaxShift  = 16 // 64 KiB slots: far above any rxe element
)

// rxeQueue is one mapped rxe queue (SQ, RQ or CQ). Which index this side
// owns depends on the queue: the producer for SQ and RQ, the consumer for
// a CQ. Both are read and written with atomics only, which in Go are
// sequentially consistent: stronger than the acquire/release librxe uses.
type rxeQueue struct {
	mem   []byte // the mapping (kernel memory)
	shift uint32 // log2 of the slot size
	mask  uint32 // slots - 1
	prod  *uint32
	cons  *uint32
}

// parseRXEQueue checks the header the kernel filled before trusting it:
// a slot of at least minElem bytes (and no more than 64 KiB), a power of
// two of slots, and all of them inside the mapping. It never panics.
func parseRXEQueue(mem []byte, minElem int) (*rxeQueue, error) {
	if len(mem) < rxeQData {
		return nil, detail(ErrNotSupported, "rxe queue mapping of %d bytes, header is %d", len(mem), rxeQData)
	}
	shift := binary.NativeEndian.Uint32(mem[rxeQLog2Elem:])
	mask := binary.NativeEndian.Uint32(mem[rxeQIndexMask:])
	switch {
	case shift > rxeQMaxShift || 1<<shift < minElem:
		return nil, detail(ErrNotSupported, "rxe queue slots of 2^%d bytes, need at least %d", shift, minElem)
	case mask&(mask+1) != 0 || mask == 0 || mask > 1<<24:
		return nil, detail(ErrNotSupported, "rxe queue index mask %#x is not 2^n-1", mask)
	case uint64(rxeQData)+uint64(mask+1)<<shift > uint64(len(mem)):
		return nil, detail(ErrNotSupported, "rxe queue of %d slots of %d bytes overflows its %d-byte mapping", mask+1, 1<<shift, len(mem))
	}
	q := &rxeQueue{mem: mem, shift: shift, mask: mask,
		prod: (*uint32)(unsafe.Pointer(&mem[rxeQProducer])), cons: (*uint32)(unsafe.Pointer(&mem[rxeQConsumer]))}
	if q.producer() > mask || q.consumer() > mask {
		return nil, detail(ErrNotSupported, "rxe queue indices %d/%d beyond mask %#x", q.producer(), q.consumer(), mask)
	}
	return q, nil
}

func (q *rxeQueue) producer() uint32 { return atomic.LoadUint32(q.prod) }
func (q *rxeQueue) consumer() uint32 { return atomic.LoadUint32(q.cons) }

// slot is the element at index i (masked).
func (q *rxeQueue) slot(i uint32) []byte {
	off := rxeQData + int(i&q.mask)<<q.shift
	return q.mem[off : off+1<<q.shift]
}

// count is the number of elements between the consumer and the producer.
func (q *rxeQueue) count() uint32 { return (q.producer() - q.consumer()) & q.mask }

// full: one more element would make the producer meet the consumer.
func (q *rxeQueue) full() bool { return (q.producer()+1)&q.mask == q.consumer() }

// capacity is the slots less the one kept empty.
func (q *rxeQueue) capacity() int { return int(q.mask) }
