package mmioring

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCallOrderedAfterWrites: a call is popped after every write pushed
// before it, carries its op, argument and time, and gets the reply the
// consumer gave it.
func TestCallOrderedAfterWrites(t *testing.T) {
	_, p, c := newTestRing(t, anonMem, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	var seen []Record
	go func() {
		defer wg.Done()
		for {
			var rec Record
			if err := c.Pop(&rec, time.Now().Add(5*time.Second)); err != nil {
				return
			}
			seen = append(seen, rec)
			if rec.Flags == FlagCall {
				op := binary.LittleEndian.Uint64(rec.Data[:8])
				require.True(t, c.Reply(Reply{Time: rec.Time + 1, Value: op*1000 + rec.Off, Status: uint32(len(seen))}))
				require.False(t, c.Reply(Reply{}), "a second Reply without a call does nothing")
			}
		}
	}()
	for i := 0; i < 100; i++ { // more calls than slots: replies keep up
		rec := Store64(0x800, uint64(i), int64(i))
		require.NoError(t, p.Push(&rec, time.Now().Add(5*time.Second)))
		r, err := p.Call(7, uint64(i), int64(i)*10, time.Now().Add(5*time.Second))
		require.NoError(t, err)
		require.Equal(t, Reply{Time: int64(i)*10 + 1, Value: 7000 + uint64(i), Status: uint32(2 * (i + 1))}, r)
	}
	p.Close()
	wg.Wait()
	require.Len(t, seen, 200)
	for i, rec := range seen {
		if i%2 == 0 {
			require.Equal(t, uint8(8), rec.Width)
		} else {
			require.Equal(t, uint8(FlagCall), rec.Flags)
			require.Equal(t, uint64(i/2), rec.Off)
		}
	}
}

// TestCallNoConsumer: a call nobody answers ends at its deadline; one
// whose consumer closes ends at once with ErrClosed.
func TestCallNoConsumer(t *testing.T) {
	_, p, c := newTestRing(t, anonMem, 8)
	_, err := p.Call(1, 0, 0, time.Now().Add(50*time.Millisecond))
	require.ErrorIs(t, err, ErrTimeout)

	done := make(chan error, 1)
	go func() {
		_, err := p.Call(1, 0, 0, time.Now().Add(10*time.Second))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Call did not return after the consumer closed")
	}
}

// TestCallRecordRules: FlagCall only alone on a width-0 record.
func TestCallRecordRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  Record
		ok   bool
	}{
		{"call", Record{Flags: FlagCall, Off: 0x1234}, true},
		{"call with flush", Record{Flags: FlagCall | FlagFlush}, false},
		{"call on a store", Record{Width: 8, Flags: FlagCall}, false},
		{"call with mask", Record{Flags: FlagCall, Mask: 1}, false},
		{"flush with offset", Record{Flags: FlagFlush, Off: 8}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rec.Check()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.True(t, errors.Is(err, ErrBadRecord), "%v", err)
			}
		})
	}
}

// TestLabelsCarried: a record's QPN and flow labels cross the ring.
func TestLabelsCarried(t *testing.T) {
	_, p, c := newTestRing(t, anonMem, 8)
	in := Line(0x1800, lineData(3), FullMask, 42)
	in.QPN, in.Flow = 0x1234, 0x1234<<16|7
	require.NoError(t, p.Push(&in, time.Time{}))
	var out Record
	require.NoError(t, c.Pop(&out, time.Time{}))
	require.Equal(t, in, out)
}
