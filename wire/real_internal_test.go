package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A full queue drops (and counts) new frames instead of blocking the
// reader; queued frames are private copies.
func TestRxQueueDropsWhenFull(t *testing.T) {
	var st realStats
	q := newRxQueue(2, &st)
	buf := []byte("frame-one-xxxxxx")
	q.push(buf)
	buf[0] = 'F'
	q.push(buf)
	q.push(buf)
	s := st.snapshot()
	require.Equal(t, uint64(2), s.RxFrames)
	require.Equal(t, uint64(32), s.RxBytes)
	require.Equal(t, uint64(1), s.RxQueueFull)
	require.Equal(t, byte('f'), (<-q.ch)[0], "the queued frame is a copy")
	require.Equal(t, byte('F'), (<-q.ch)[0])
}
