package mmioring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/shm"
	"github.com/stretchr/testify/require"
)

// TestMain doubles as the child of the cross-process tests (cross_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// anonMem is an anonymous shared mapping of n bytes, unmapped at cleanup.
func anonMem(t testing.TB, n int) []byte {
	t.Helper()
	mem, err := syscall.Mmap(-1, 0, (n+4095)&^4095, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Munmap(mem) })
	return mem
}

// memfdMem is a memfd mapping of n bytes (shm.New) and its region.
func memfdMem(t testing.TB, n int) (*shm.Region, []byte) {
	t.Helper()
	r, err := shm.New("mmioring-test", n, 0)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, r.Bytes()
}

// backings are the two kinds of memory every basic test runs on.
var backings = []struct {
	name string
	mem  func(t testing.TB, n int) []byte
}{
	{"anon", anonMem},
	{"memfd", func(t testing.TB, n int) []byte { _, m := memfdMem(t, n); return m }},
}

func newTestRing(t testing.TB, mem func(testing.TB, int) []byte, slots int) (*Ring, *Producer, *Consumer) {
	t.Helper()
	r, err := Init(mem(t, Size(slots)), slots)
	require.NoError(t, err)
	return r, r.Producer(), r.Consumer()
}

func lineData(seed uint64) *[64]byte {
	var d [64]byte
	for i := range 8 {
		binary.LittleEndian.PutUint64(d[i*8:], seed*0x9e3779b97f4a7c15+uint64(i))
	}
	return &d
}

// genRecord is record i of a deterministic mixed stream: every kind, some
// flushed, offsets walking over four UAR pages.
// popInOrder pops from c until ErrClosed, k(next) records (at most 64) at
// a time with a 10 s deadline, requiring record i to be genRecord(i); it
// returns how many it popped.
func popInOrder(t *testing.T, c *Consumer, k func(next uint64) int) uint64 {
	t.Helper()
	var out [64]Record
	next := uint64(0)
	for {
		n, err := c.PopN(out[:k(next)], time.Now().Add(10*time.Second))
		if errors.Is(err, ErrClosed) {
			return next
		}
		require.NoError(t, err)
		for j := range n {
			if want := genRecord(next); out[j] != want {
				require.Equal(t, want, out[j], "record %d", next)
			}
			next++
		}
	}
}

func genRecord(i uint64) Record {
	t := int64(i * 1000)
	page := 0x1000 * (1 + i%4)
	var r Record
	switch i % 6 {
	case 0:
		r = Store32(page+0x20+(i%8)*4, uint32(i), t)
	case 1:
		r = Store64(page+0x800, i<<16|0xab, t)
	case 2:
		r = Line(page+0x800+(i%4)*64, lineData(i), FullMask, t)
	case 3:
		r = Line(page+0x900, lineData(i), 0x00ff00ff00ff00ff>>(i%8), t)
		r.Flags = FlagFlush
	case 4:
		r = Fence(t)
	case 5:
		r = Store64(page+0x20, ^i, t)
		r.Flags = FlagFlush
	}
	return r
}

func TestRoundTripKinds(t *testing.T) {
	cases := []struct {
		name string
		rec  Record
	}{
		{"store32", Store32(0x1020, 0xdeadbeef, 5)},
		{"store32 flush", func() Record { r := Store32(0x1024, 1, 6); r.Flags = FlagFlush; return r }()},
		{"store64 doorbell", Store64(0x1800, 0x0102030405060708, 7)},
		{"store64 flush", func() Record { r := Store64(0x1808, ^uint64(0), 8); r.Flags = FlagFlush; return r }()},
		{"line full", Line(0x1800, lineData(1), FullMask, 9)},
		{"line full flush", func() Record { r := Line(0x1840, lineData(2), FullMask, 10); r.Flags = FlagFlush; return r }()},
		{"line torn", Line(0x1900, lineData(3), 0x00000000ffffffff, 11)},
		{"line one byte", Line(0x1940, lineData(4), 1<<63, 12)},
		{"fence", Fence(13)},
		{"high offset", Store64(1<<40, 42, 1<<62)},
		{"negative time", Store32(0, 3, -1)},
	}
	for _, b := range backings {
		t.Run(b.name, func(t *testing.T) {
			_, p, c := newTestRing(t, b.mem, 8)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					require.NoError(t, tc.rec.Check())
					require.NoError(t, p.Push(&tc.rec, time.Time{}))
					var got Record
					for i := range got.Data {
						got.Data[i] = 0xee // Pop must clear bytes past Width
					}
					require.NoError(t, c.Pop(&got, time.Time{}))
					require.Equal(t, tc.rec, got)
					require.ErrorIs(t, c.Pop(&got, time.Time{}), ErrEmpty)
				})
			}
		})
	}
}

func TestValuesAndSlots(t *testing.T) {
	r := Store32(4, 0x11223344, 0)
	require.Equal(t, uint32(0x11223344), r.U32())
	require.Equal(t, 1, r.Slots())
	r = Store64(8, 0x1122334455667788, 0)
	require.Equal(t, uint64(0x1122334455667788), r.U64())
	r = Line(64, lineData(0), FullMask, 0)
	require.Equal(t, 2, r.Slots())
}

func TestBadRecordsRefused(t *testing.T) {
	cases := []struct {
		name string
		rec  Record
	}{
		{"width 2", Record{Width: 2, Off: 2}},
		{"width 65", Record{Width: 65, Mask: 1}},
		{"width 128", Record{Width: 128, Mask: 1}},
		{"unaligned 4", Store32(2, 0, 0)},
		{"unaligned 8", Store64(4, 0, 0)},
		{"unaligned line", Line(0x1808, lineData(0), FullMask, 0)},
		{"line no bytes", Line(0x1800, lineData(0), 0, 0)},
		{"mask on store", func() Record { r := Store64(8, 0, 0); r.Mask = 1; return r }()},
		{"unknown flag", func() Record { r := Store64(8, 0, 0); r.Flags = 0x80; return r }()},
		{"width 0 without flush", Record{}},
		{"fence with offset", Record{Flags: FlagFlush, Off: 8}},
	}
	_, p, c := newTestRing(t, anonMem, 8)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.rec.Check(), ErrBadRecord)
			good := Store64(0x800, 1, 0)
			n, err := p.PushN([]Record{good, tc.rec, good}, time.Time{})
			require.ErrorIs(t, err, ErrBadRecord)
			require.Equal(t, 1, n, "records before the bad one are published")
			var got Record
			require.NoError(t, c.Pop(&got, time.Time{}))
			require.Equal(t, good, got)
			require.ErrorIs(t, c.Pop(&got, time.Time{}), ErrEmpty)
		})
	}
}

func TestInitArgs(t *testing.T) {
	mem := anonMem(t, Size(64)+128)
	for _, n := range []int{0, 1, 3, 6, 100, MaxSlots * 2, -4} {
		_, err := Init(mem, n)
		require.ErrorIs(t, err, ErrBadArg, "slots %d", n)
	}
	_, err := Init(mem[:Size(64)-1], 64)
	require.ErrorIs(t, err, ErrBadArg, "short region")
	_, err = Init(mem[8:], 32)
	require.ErrorIs(t, err, ErrBadArg, "unaligned region")
	r, err := Init(mem, 64)
	require.NoError(t, err)
	require.Equal(t, 64, r.Slots())
	r2, err := Attach(mem)
	require.NoError(t, err, "Attach accepts what Init wrote, in a longer region")
	require.Equal(t, 64, r2.Slots())
}

// TestWraparound runs lines across the end of a small ring (slot N-1 +
// slot 0) and the u32 indices across 2^32.
func TestWraparound(t *testing.T) {
	for _, start := range []uint32{0, 0xffffffff - 40} {
		t.Run(fmt.Sprintf("start %#x", start), func(t *testing.T) {
			mem := anonMem(t, Size(4))
			_, err := Init(mem, 4)
			require.NoError(t, err)
			binary.LittleEndian.PutUint32(mem[offProd:], start)
			binary.LittleEndian.PutUint32(mem[offCons:], start)
			r, err := Attach(mem)
			require.NoError(t, err)
			p, c := r.Producer(), r.Consumer()
			var got [3]Record
			for i := range uint64(200) {
				// One, two or three records per round: with 4 slots
				// and lines of 2, every phase of the wrap occurs.
				k := 1 + int(i%3)
				recs := make([]Record, 0, 3)
				slots := 0
				for j := range k {
					rec := genRecord(i*3 + uint64(j))
					if slots+rec.Slots() > 4 {
						break
					}
					slots += rec.Slots()
					recs = append(recs, rec)
				}
				n, err := p.PushN(recs, time.Time{})
				require.NoError(t, err)
				require.Equal(t, len(recs), n)
				m, err := c.PopN(got[:], time.Time{})
				require.NoError(t, err)
				require.Equal(t, recs, got[:m])
			}
			require.NotEqual(t, start, atomic.LoadUint32(r.prod))
		})
	}
}

func TestFullRingDeadline(t *testing.T) {
	for _, b := range backings {
		t.Run(b.name, func(t *testing.T) {
			_, p, c := newTestRing(t, b.mem, 8)
			line := Line(0x1800, lineData(9), FullMask, 0)
			for range 4 {
				require.NoError(t, p.Push(&line, time.Time{}))
			}
			one := Store64(0x800, 7, 1)
			require.ErrorIs(t, p.Push(&one, time.Time{}), ErrFull)
			start := time.Now()
			require.ErrorIs(t, p.Push(&one, start.Add(30*time.Millisecond)), ErrTimeout)
			el := time.Since(start)
			require.GreaterOrEqual(t, el, 30*time.Millisecond)
			require.Less(t, el, 2*time.Second)

			// A blocked Push is woken by the consumer's release.
			done := make(chan error, 1)
			go func() { done <- p.Push(&one, time.Now().Add(10*time.Second)) }()
			time.Sleep(20 * time.Millisecond)
			var got Record
			require.NoError(t, c.Pop(&got, time.Time{}))
			require.Equal(t, line, got)
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("blocked Push not woken")
			}
			for range 3 {
				require.NoError(t, c.Pop(&got, time.Time{}))
			}
			require.NoError(t, c.Pop(&got, time.Time{}))
			require.Equal(t, one, got)

			// An empty ring: Pop times out, and a blocked Pop is woken by a push.
			start = time.Now()
			require.ErrorIs(t, c.Pop(&got, start.Add(30*time.Millisecond)), ErrTimeout)
			require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
			go func() { done <- c.Pop(&got, time.Now().Add(10*time.Second)) }()
			time.Sleep(20 * time.Millisecond)
			require.NoError(t, p.Push(&one, time.Time{}))
			select {
			case err := <-done:
				require.NoError(t, err)
				require.Equal(t, one, got)
			case <-time.After(5 * time.Second):
				t.Fatal("blocked Pop not woken")
			}
		})
	}
}

func TestClose(t *testing.T) {
	t.Run("producer closes: consumer drains, then ErrClosed", func(t *testing.T) {
		_, p, c := newTestRing(t, anonMem, 16)
		recs := []Record{genRecord(0), genRecord(1), genRecord(2)}
		_, err := p.PushN(recs, time.Time{})
		require.NoError(t, err)
		require.NoError(t, p.Close())
		_, err = p.PushN(recs, time.Time{})
		require.ErrorIs(t, err, ErrClosed)
		var got [8]Record
		n, err := c.PopN(got[:], time.Now().Add(time.Second))
		require.NoError(t, err)
		require.Equal(t, recs, got[:n])
		_, err = c.PopN(got[:], time.Now().Add(time.Second))
		require.ErrorIs(t, err, ErrClosed)
	})
	t.Run("producer close wakes a sleeping consumer", func(t *testing.T) {
		_, p, c := newTestRing(t, anonMem, 16)
		done := make(chan error, 1)
		go func() {
			var r Record
			done <- c.Pop(&r, time.Now().Add(20*time.Second))
		}()
		time.Sleep(30 * time.Millisecond)
		start := time.Now()
		require.NoError(t, p.Close())
		require.ErrorIs(t, <-done, ErrClosed)
		require.Less(t, time.Since(start), 2*time.Second)
	})
	t.Run("consumer close fails a blocked producer", func(t *testing.T) {
		_, p, c := newTestRing(t, anonMem, 2)
		line := genRecord(2)
		require.NoError(t, p.Push(&line, time.Time{}))
		done := make(chan error, 1)
		go func() { done <- p.Push(&line, time.Now().Add(20*time.Second)) }()
		time.Sleep(30 * time.Millisecond)
		start := time.Now()
		require.NoError(t, c.Close())
		require.ErrorIs(t, <-done, ErrClosed)
		require.Less(t, time.Since(start), 2*time.Second)
		var r Record
		require.ErrorIs(t, c.Pop(&r, time.Time{}), ErrClosed)
	})
}

// TestOrderMillion: 10^6 records of mixed kinds from one goroutine to
// another through a small ring, in random-sized batches, in order.
func TestOrderMillion(t *testing.T) {
	const total = 1_000_000
	for _, b := range backings {
		t.Run(b.name, func(t *testing.T) {
			_, p, c := newTestRing(t, b.mem, 256)
			var wg sync.WaitGroup
			var perr error
			wg.Go(func() {
				var batch [37]Record
				i := uint64(0)
				for i < total {
					k := min(1+int(i*7919%37), total-int(i))
					for j := range k {
						batch[j] = genRecord(i + uint64(j))
					}
					n, err := p.PushN(batch[:k], time.Now().Add(10*time.Second))
					i += uint64(n)
					if err != nil {
						perr = err
						return
					}
				}
				perr = p.Close()
			})
			next := popInOrder(t, c, func(next uint64) int { return 1 + int(next%29) })
			wg.Wait()
			require.NoError(t, perr)
			require.Equal(t, uint64(total), next)
		})
	}
}

// TestSoak is the long run of TestOrderMillion's kind, with a single-slot
// ring pressure and both single and batch calls (SOFTNIC_RING_SOAK=N
// records, e.g. 100000000).
func TestSoak(t *testing.T) {
	s := os.Getenv("SOFTNIC_RING_SOAK")
	if s == "" {
		t.Skip("set SOFTNIC_RING_SOAK=<records> for the soak")
	}
	var total uint64
	_, err := fmt.Sscan(s, &total)
	require.NoError(t, err)
	_, p, c := newTestRing(t, anonMem, 4)
	go func() {
		var batch [3]Record
		for i := uint64(0); i < total; {
			if i%2 == 0 {
				batch[0] = genRecord(i)
				if err := p.Push(&batch[0], time.Now().Add(10*time.Second)); err != nil {
					return
				}
				i++
				continue
			}
			k := int(min(3, total-i))
			for j := range k {
				batch[j] = genRecord(i + uint64(j))
			}
			n, err := p.PushN(batch[:k], time.Now().Add(10*time.Second))
			i += uint64(n)
			if err != nil {
				return
			}
		}
		p.Close()
	}()
	require.Equal(t, total, popInOrder(t, c, func(next uint64) int { return 1 + int(next%5) }))
}
