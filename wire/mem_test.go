package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMemTransport: sends are kept, deliveries received in order, a full
// queue or a closed transport drops and counts.
func TestMemTransport(t *testing.T) {
	m := NewMemTransport(2)
	require.NoError(t, m.Send([]byte{1, 2}))
	require.Equal(t, [][]byte{{1, 2}}, m.Sent())
	require.True(t, m.Deliver([]byte{7}))
	require.True(t, m.Deliver([]byte{8}))
	require.False(t, m.Deliver([]byte{9}), "queue of 2 is full")
	require.Equal(t, []byte{7}, <-m.Frames())
	st := m.Stats()
	require.Equal(t, RealStats{TxFrames: 1, TxBytes: 2, RxFrames: 2, RxBytes: 2, RxQueueFull: 1}, st)
	require.NoError(t, m.Close())
	require.True(t, m.Closed())
	require.ErrorIs(t, m.Send([]byte{1}), ErrClosed)
	require.False(t, m.Deliver([]byte{1}))
	require.Equal(t, []byte{8}, <-m.Frames())
	_, ok := <-m.Frames()
	require.False(t, ok)
}
