package mmioring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var le = binary.LittleEndian

// TestAttachCorruptHeader: every header field Attach reads, broken.
func TestAttachCorruptHeader(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(mem []byte) []byte
	}{
		{"magic", func(m []byte) []byte { le.PutUint32(m[offMagic:], 0x12345678); return m }},
		{"no ring (zeros)", func(m []byte) []byte { clear(m[:HeaderSize]); return m }},
		{"version", func(m []byte) []byte { le.PutUint32(m[offVersion:], 2); return m }},
		{"slot count 0", func(m []byte) []byte { le.PutUint32(m[offSlots:], 0); return m }},
		{"slot count 1", func(m []byte) []byte { le.PutUint32(m[offSlots:], 1); return m }},
		{"slot count not a power of two", func(m []byte) []byte { le.PutUint32(m[offSlots:], 12); return m }},
		{"slot count huge", func(m []byte) []byte { le.PutUint32(m[offSlots:], 1<<31); return m }},
		{"slot count larger than region", func(m []byte) []byte {
			le.PutUint32(m[offSlots:], 1024)
			le.PutUint64(m[offRegion:], uint64(Size(1024)))
			return m
		}},
		{"slot size 128", func(m []byte) []byte { le.PutUint32(m[offSlotSize:], 128); return m }},
		{"header size", func(m []byte) []byte { le.PutUint32(m[offHdrSize:], 256); return m }},
		{"features", func(m []byte) []byte { le.PutUint32(m[offFeatures:], 1); return m }},
		{"ring size", func(m []byte) []byte { le.PutUint64(m[offRegion:], 1<<62); return m }},
		{"closed junk", func(m []byte) []byte { le.PutUint32(m[offClosed:], 0x100); return m }},
		{"producer far ahead", func(m []byte) []byte { le.PutUint32(m[offProd:], 1000); return m }},
		{"consumer ahead of producer", func(m []byte) []byte { le.PutUint32(m[offCons:], 3); return m }},
		{"region shorter than header", func(m []byte) []byte { return m[:HeaderSize-1] }},
		{"region shorter than ring", func(m []byte) []byte { return m[:Size(16)-64] }},
		{"unaligned region", func(m []byte) []byte { return m[4:] }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := anonMem(t, Size(16)+4096)
			_, err := Init(mem, 16)
			require.NoError(t, err)
			_, err = Attach(mem)
			require.NoError(t, err)
			_, err = Attach(tc.corrupt(mem))
			require.ErrorIs(t, err, ErrBadRing)
		})
	}
}

// hostile is a ring whose slots a test writes by hand, as a hostile
// producer would.
type hostile struct {
	mem []byte
	r   *Ring
	c   *Consumer
}

func newHostile(t *testing.T, slots int) *hostile {
	mem := anonMem(t, Size(slots))
	r, err := Init(mem, slots)
	require.NoError(t, err)
	return &hostile{mem: mem, r: r, c: r.Consumer()}
}

// slot writes a header slot at ring position pos.
func (h *hostile) slot(pos uint32, seq uint32, width, flags uint8, off, mask, data uint64) {
	s := h.r.slot(pos)
	le.PutUint32(s[slotSeq:], seq)
	s[slotWidth], s[slotFlags] = width, flags
	le.PutUint64(s[slotOff:], off)
	le.PutUint64(s[slotTime:], 77)
	le.PutUint64(s[slotMask:], mask)
	le.PutUint64(s[slotData:], data)
}

func (h *hostile) publish(prod uint32) { le.PutUint32(h.mem[offProd:], prod) }

func TestPopCorrupt(t *testing.T) {
	var rec Record
	now := func() time.Time { return time.Now().Add(50 * time.Millisecond) }

	t.Run("producer index far ahead", func(t *testing.T) {
		h := newHostile(t, 8)
		h.publish(1 << 30)
		require.ErrorIs(t, h.c.Pop(&rec, now()), ErrBadRing)
		require.ErrorIs(t, h.c.Pop(&rec, now()), ErrBadRing, "sticky")
	})
	t.Run("producer index one past full", func(t *testing.T) {
		h := newHostile(t, 8)
		h.publish(9)
		require.ErrorIs(t, h.c.Pop(&rec, time.Time{}), ErrBadRing)
	})
	t.Run("producer index moves backwards", func(t *testing.T) {
		h := newHostile(t, 8)
		h.slot(0, 0, 8, 0, 0x800, 0, 1)
		h.slot(1, 1, 8, 0, 0x800, 0, 2)
		h.publish(2)
		var out [1]Record
		n, err := h.c.PopN(out[:], time.Time{})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		h.publish(0)
		// The consumer still holds the cached index 2 and pops slot 1;
		// the backwards step shows on the next refill.
		require.NoError(t, h.c.Pop(&rec, time.Time{}))
		require.ErrorIs(t, h.c.Pop(&rec, time.Time{}), ErrBadRing)
	})
	t.Run("sequence word stale", func(t *testing.T) {
		h := newHostile(t, 8)
		h.slot(0, 8, 8, 0, 0x800, 0, 1) // the previous lap's position
		h.publish(1)
		require.ErrorIs(t, h.c.Pop(&rec, time.Time{}), ErrBadRing)
	})
	t.Run("line data slot not published", func(t *testing.T) {
		h := newHostile(t, 8)
		h.slot(0, 0, 64, 0, 0x800, FullMask, 0)
		h.publish(1)
		require.ErrorIs(t, h.c.Pop(&rec, time.Time{}), ErrBadRing)
	})
	// Bad fields in a well-sequenced slot: the record is skipped, the
	// ring keeps working.
	for _, tc := range []struct {
		name        string
		width, flag uint8
		off, mask   uint64
		slots       uint32
	}{
		{"width 7", 7, 0, 0x800, 0, 1},
		{"width 65 (slot length > 64)", 65, 0, 0x800, FullMask, 1},
		{"width 255", 255, 0, 0x800, 0, 1},
		{"unaligned store", 8, 0, 0x804, 0, 1},
		{"unaligned line", 64, 0, 0x820, FullMask, 2},
		{"line without bytes", 64, 0, 0x800, 0, 2},
		{"mask on a store", 4, 0, 0x800, 1, 1},
		{"unknown flag", 8, 0x40, 0x800, 0, 1},
		{"fence with offset", 0, FlagFlush, 0x800, 0, 1},
		{"width 0 without flush", 0, 0, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostile(t, 8)
			h.slot(0, 0, 8, 0, 0x800, 0, 11) // a good record first
			h.slot(1, 1, tc.width, tc.flag, tc.off, tc.mask, 0)
			good := 1 + tc.slots
			h.slot(good, good, 4, FlagFlush, 0x20, 0, 0xaaaaaaaa00000022)
			h.publish(good + 1)
			var out [4]Record
			n, err := h.c.PopN(out[:], time.Time{})
			require.NoError(t, err)
			require.Equal(t, 1, n, "the good record before the bad one")
			require.Equal(t, uint64(11), out[0].U64())
			n, err = h.c.PopN(out[:], time.Time{})
			require.ErrorIs(t, err, ErrBadRecord)
			require.Zero(t, n)
			n, err = h.c.PopN(out[:], time.Time{})
			require.NoError(t, err, "the ring goes on after a skipped record")
			require.Equal(t, 1, n)
			require.Equal(t, uint32(0x22), out[0].U32(), "a 4-byte write keeps its low half only")
			require.Equal(t, uint64(0x22), out[0].U64())
		})
	}
}

func TestProducerSeesCorruptConsumer(t *testing.T) {
	for _, tc := range []struct {
		name string
		cons uint32
	}{
		{"consumer ahead of producer", 5},
		{"consumer far behind", 1 << 31},
	} {
		for _, wait := range []time.Duration{0, time.Second} {
			t.Run(fmt.Sprintf("%s wait %v", tc.name, wait), func(t *testing.T) {
				mem := anonMem(t, Size(4))
				r, err := Init(mem, 4)
				require.NoError(t, err)
				p := r.Producer()
				rec := Store64(0x800, 1, 0)
				for range 4 {
					require.NoError(t, p.Push(&rec, time.Time{}))
				}
				le.PutUint32(mem[offCons:], tc.cons)
				var deadline time.Time
				if wait > 0 {
					deadline = time.Now().Add(wait)
				}
				require.ErrorIs(t, p.Push(&rec, deadline), ErrBadRing)
				require.ErrorIs(t, p.Push(&rec, time.Time{}), ErrBadRing, "sticky")
			})
		}
	}
}

// TestFlagScribble: a peer that keeps clearing or setting the futex words
// costs wake-ups, never correctness or a hang past the deadline.
func TestFlagScribble(t *testing.T) {
	mem := anonMem(t, Size(4))
	r, err := Init(mem, 4)
	require.NoError(t, err)
	c := r.Consumer()
	stop, done := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-done }() // before the cleanup unmaps mem
	go func() {
		defer close(done)
		for i := uint32(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			atomic.StoreUint32(r.consSleep, i&1)
		}
	}()
	start := time.Now()
	var rec Record
	require.ErrorIs(t, c.Pop(&rec, start.Add(40*time.Millisecond)), ErrTimeout)
	require.Less(t, time.Since(start), 2*time.Second)
}

// TestHostileWriterConcurrent: a producer that scribbles on slots and
// indices while the consumer pops. The consumer returns errors or
// well-formed records, within its deadlines, and never panics.
func TestHostileWriterConcurrent(t *testing.T) {
	mem := anonMem(t, Size(16))
	r, err := Init(mem, 16)
	require.NoError(t, err)
	c := r.Consumer()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		x := uint64(0x243f6a8885a308d3)
		for {
			select {
			case <-stop:
				return
			default:
			}
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			// Plausible records at positions the consumer is about to
			// read, a producer index near the consumer's, and now and
			// then a random word anywhere in the slots.
			cons := atomic.LoadUint32(r.cons)
			pos := cons + uint32(x>>8)%16
			s := r.slot(pos)
			widths := [...]uint8{0, 4, 8, 64, 64, 7, 65}
			le.PutUint32(s[slotSeq:], pos)
			s[slotWidth] = widths[(x>>20)%uint64(len(widths))]
			s[slotFlags] = uint8(x>>28) & 3
			le.PutUint64(s[slotOff:], (x>>32)&0xfc0)
			le.PutUint64(s[slotMask:], x&-(x>>63))
			if x&0x300 == 0 {
				atomic.StoreUint32(r.prod, cons+uint32(x>>12)%18)
			}
			if x&0xf000 == 0 {
				o := HeaderSize + int(x>>40)%(16*SlotSize-4)&^3
				atomic.StoreUint32(word(mem, o), uint32(x))
			}
		}
	}()
	defer func() { close(stop); <-done }()
	var out [4]Record
	good, bad := 0, 0
	end := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(end) {
		start := time.Now()
		n, err := c.PopN(out[:], start.Add(5*time.Millisecond))
		require.Less(t, time.Since(start), time.Second)
		for i := range n {
			require.NoError(t, out[i].Check())
		}
		good += n
		if errors.Is(err, ErrBadRing) {
			bad++
			c = r.Consumer() // a new endpoint from the shared index, as a daemon re-attaching would
		}
	}
	t.Logf("%d records passed the checks, %d ring errors", good, bad)
}
