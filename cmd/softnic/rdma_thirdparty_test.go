package main

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce"
)

// Frames a third party aims at the endpoint's port: random bytes, a
// well-formed SEND to a QPN that does not exist, one to the endpoint's QP
// with a bad ICRC. Each is a counted drop; the connection goes on.
func TestRDMAThirdPartyFrames(t *testing.T) {
	ep, tr, out := newTestEP(t, 2*time.Second)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 13, 14, 15, 41, 42, 57, 58, 61, 62, 100, 1082, 4200, 9000} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		tr.Deliver(b)
		if n >= 14 {
			// the same behind a valid Ethernet/IPv4/UDP 4791 header
			c := append([]byte(nil), b...)
			fp := reply(ep, &roce.Packet{}, roce.OpRCSendOnly, fakePeerPSN)
			hdr := make([]byte, 256)
			k, err := roce.BuildFrame(hdr, fp, nil)
			require.NoError(t, err)
			copy(c, hdr[:min(k-4, len(c))])
			tr.Deliver(c)
		}
	}
	send := func(qpn uint32, psn uint32) []byte {
		fp := reply(ep, &roce.Packet{}, roce.OpRCSendOnly, roce.PSN(psn))
		fp.BTH.DestQP = qpn
		fp.BTH.AckReq = true
		b := make([]byte, 2048)
		k, err := roce.BuildFrame(b, fp, make([]byte, 64))
		require.NoError(t, err)
		return b[:k]
	}
	tr.Deliver(send(0x777, fakePeerPSN))
	bad := send(ep.qp.QPN(), fakePeerPSN)
	bad[len(bad)-1] ^= 0xff
	tr.Deliver(bad)
	startResponder(t, ep, tr, len(tr.Sent()), ackAll)
	got := ep.run(t, out, "write 7f0000000000 1 8 1")
	require.Equal(t, []string{"WC 5 SUCCESS RDMA_WRITE 0 0"}, got)
	c := ep.run(t, out, "counters")
	require.Len(t, c, 1)
	m := counterMap(t, strings.Fields(c[0]))
	require.Zero(t, m["qp_to_error"], "%v", m)
	require.Zero(t, m["rx_write_requests"]+m["rx_send_requests"]+m["naks_sent"], "nothing reached the responder: %v", m)
	require.NotZero(t, m["rx_drop_no_qp"], "%v", m)
	require.NotZero(t, m["rx_drop_bad_icrc"], "%v", m)
	// Every frame but the one ACK is a named drop.
	drops := uint64(0)
	for k, v := range m {
		if strings.HasPrefix(k, "port_drop_") || strings.HasPrefix(k, "rx_drop_") {
			drops += v
		}
	}
	require.Equal(t, m["real_rx_frames"]-m["acks_rcvd"], drops, "%v", m)
}
