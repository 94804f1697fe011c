package provider_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestGetCQEventLongTimeouts waits for a completion event that needs
// device steps to arrive, with timeouts up to the largest Duration (an
// application's "forever"): the virtual deadline must not overflow into
// the past and end the wait at once with ErrTimeout.
func TestGetCQEventLongTimeouts(t *testing.T) {
	cases := []struct {
		name    string
		timeout time.Duration
	}{
		{"5s", 5 * time.Second},
		{"1h", time.Hour},
		{"max_int64", math.MaxInt64},
		{"max_minus_1ns", math.MaxInt64 - 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{Channel: true})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
			require.NoError(t, err)
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			_, err = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 7)}}})
			require.NoError(t, err)
			cq, err := rsp.Channel.GetCQEvent(c.timeout)
			require.NoError(t, err)
			require.Same(t, rsp.RecvCQ, cq)
			cq.AckEvents(1)
		})
	}
}
