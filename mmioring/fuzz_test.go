package mmioring

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fuzzBuf is one page-aligned mapping reused by every fuzz input (each
// fuzz worker runs its inputs one at a time).
var fuzzBuf []byte

func fuzzMem(t testing.TB) []byte {
	if fuzzBuf == nil {
		m, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
		require.NoError(t, err)
		fuzzBuf = m
	}
	return fuzzBuf
}

// FuzzAttach: arbitrary header (and slot) bytes. Attach either refuses
// them with ErrBadRing or returns a ring both of whose endpoints then
// behave: no panic, no hang, no access outside the region.
func FuzzAttach(f *testing.F) {
	for _, s := range attachSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		buf := fuzzMem(t)
		n := copy(buf, data)
		clear(buf[n:])
		r, err := Attach(buf[:n])
		if err != nil {
			if !errors.Is(err, ErrBadRing) {
				t.Fatalf("Attach: %v does not wrap ErrBadRing", err)
			}
			return
		}
		if Size(r.Slots()) > n {
			t.Fatalf("ring of %d slots accepted in %d bytes", r.Slots(), n)
		}
		drain(t, r.Consumer(), r.Slots())
		p := r.Producer()
		rec := Store64(0x800, 1, 0)
		if err := p.Push(&rec, time.Time{}); err != nil && !errors.Is(err, ErrFull) &&
			!errors.Is(err, ErrClosed) && !errors.Is(err, ErrBadRing) {
			t.Fatalf("Push: %v", err)
		}
	})
}

// FuzzPop: a hostile producer wrote arbitrary slot contents and indices
// into a ring of 8 slots. The consumer never panics, pops at most what
// the ring can hold, and every record it returns is well-formed.
//
// data: [0:4] the starting index of both sides, [4:8] how far the
// producer index claims to be ahead, [8:520] the 8 slots.
func FuzzPop(f *testing.F) {
	for _, s := range popSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		buf := fuzzMem(t)
		r, err := Init(buf, 8)
		if err != nil {
			t.Fatal(err)
		}
		var hdr [8]byte
		copy(hdr[:], data)
		start, ahead := le.Uint32(hdr[0:]), le.Uint32(hdr[4:])
		le.PutUint32(buf[offCons:], start)
		le.PutUint32(buf[offProd:], start)
		if len(data) > 8 {
			copy(r.slots, data[8:])
		}
		c := r.Consumer()
		le.PutUint32(buf[offProd:], start+ahead)
		if slots := drain(t, c, 8); slots > 8 {
			t.Fatalf("consumed %d slots of a ring of 8", slots)
		}
	})
}

// drain pops until the ring is empty, closed or broken, and returns how
// many slots the good records took; it fails the test on a malformed
// record or an unexpected error.
func drain(t *testing.T, c *Consumer, slots int) int {
	var out [3]Record
	used := 0
	for range 4 * slots {
		n, err := c.PopN(out[:], time.Time{})
		for i := range n {
			if e := out[i].Check(); e != nil {
				t.Fatalf("Pop returned a malformed record: %v", e)
			}
			// A call carries its op in Data[:8]; every other record
			// has no bytes past its width.
			end := int(out[i].Width)
			if out[i].Flags == FlagCall {
				end = 8
			}
			for _, b := range out[i].Data[end:] {
				if b != 0 {
					t.Fatalf("Pop left bytes past width %d: % x", out[i].Width, out[i].Data)
				}
			}
			used += out[i].Slots()
		}
		switch {
		case err == nil, errors.Is(err, ErrBadRecord):
		case errors.Is(err, ErrEmpty), errors.Is(err, ErrClosed), errors.Is(err, ErrBadRing):
			return used
		default:
			t.Fatalf("Pop: %v", err)
		}
	}
	return used
}

// A stream of every kind of record pushed by a real producer, as bytes:
// the region of a ring of 8 slots starting at index start.
func seedRing(tb testing.TB, start uint32, recs []Record) []byte {
	mem := anonMem(tb, Size(8))
	_, err := Init(mem, 8)
	require.NoError(tb, err)
	le.PutUint32(mem[offProd:], start)
	le.PutUint32(mem[offCons:], start)
	r, err := Attach(mem)
	require.NoError(tb, err)
	_, err = r.Producer().PushN(recs, time.Time{})
	require.NoError(tb, err)
	return append([]byte(nil), mem[:Size(8)]...)
}

var seedRecs = []Record{
	Store32(0x1020, 7, 1), Line(0x1800, lineData(1), FullMask, 2), Store64(0x1800, 9, 3),
	func() Record { r := Line(0x1840, lineData(2), 0xff, 4); r.Flags = FlagFlush; return r }(),
	Fence(5),
}

// A call as CallRecord publishes it: op 0xff27 in Data[:8], arg in Off.
var seedCall = func() Record {
	r := Record{Off: 0x40, Time: 6, Width: 0, Flags: FlagCall}
	le.PutUint64(r.Data[:8], 0xff27)
	return r
}()

func attachSeeds(tb testing.TB) [][]byte {
	good := seedRing(tb, 0, seedRecs)
	mod := func(f func(b []byte)) []byte { b := append([]byte(nil), good...); f(b); return b }
	return [][]byte{
		good,
		seedRing(tb, 0xfffffffc, seedRecs),
		good[:HeaderSize],
		good[:HeaderSize-1],
		mod(func(b []byte) { le.PutUint32(b[offMagic:], 0) }),
		mod(func(b []byte) { le.PutUint32(b[offSlots:], 1<<20) }),
		mod(func(b []byte) { le.PutUint32(b[offSlots:], 7) }),
		mod(func(b []byte) { le.PutUint32(b[offProd:], 1<<31) }),
		mod(func(b []byte) { le.PutUint32(b[offClosed:], closedProducer) }),
		mod(func(b []byte) { le.PutUint32(b[HeaderSize:], 99) }),
		mod(func(b []byte) { b[HeaderSize+slotWidth] = 65 }),
	}
}

func popSeeds(tb testing.TB) [][]byte {
	enc := func(start, ahead uint32, slots []byte) []byte {
		b := make([]byte, 8, 8+len(slots))
		le.PutUint32(b[0:], start)
		le.PutUint32(b[4:], ahead)
		return append(b, slots...)
	}
	ring := seedRing(tb, 0, seedRecs)[HeaderSize:]
	used := 0
	for i := range seedRecs {
		used += seedRecs[i].Slots()
	}
	wrapped := seedRing(tb, 6, seedRecs)[HeaderSize:]
	badWidth := append([]byte(nil), ring...)
	badWidth[64+slotWidth] = 65
	badSeq := append([]byte(nil), ring...)
	badSeq[64*3] ^= 1
	call := seedRing(tb, 0, []Record{seedRecs[0], seedCall})[HeaderSize:]
	return [][]byte{
		enc(0, uint32(used), ring),
		enc(6, uint32(used), wrapped),
		enc(0, 1000, ring),
		enc(0, 1, ring[:64]),
		enc(0, uint32(used), badWidth),
		enc(0, uint32(used), badSeq),
		enc(0, ^uint32(0), nil),
		enc(0, 2, call),
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz from the seeds above
// (SOFTNIC_RING_WRITE_CORPUS=1), so the committed corpora match the
// layout.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("SOFTNIC_RING_WRITE_CORPUS") == "" {
		t.Skip("set SOFTNIC_RING_WRITE_CORPUS=1 to rewrite testdata/fuzz")
	}
	for name, seeds := range map[string][][]byte{"FuzzAttach": attachSeeds(t), "FuzzPop": popSeeds(t)} {
		dir := filepath.Join("testdata", "fuzz", name)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644))
		}
	}
}
