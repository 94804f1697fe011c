package device_test

import (
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestRCSendWaitsForItsReceiveStage: an RC SEND arrives behind a backlog
// in the responder's receive pipeline, with no receive WQE posted; the
// host posts one after the SEND arrived but before the pipeline gets to
// it. The device reads the doorbell record at the SEND's receive stage,
// so it takes that WQE and ACKs. It used to read the record when the
// frame arrived and answer RNR NAK for a receive the host had posted
// (send_bw -s 64 -r 64: 13 RNR NAKs, all of them so, 2.0 Mpps instead of
// 12.8). Later packets of the QP keep their order behind it.
func TestRCSendWaitsForItsReceiveStage(t *testing.T) {
	t.Run("RC", func(t *testing.T) { sendWaitsForReceiveStage(t, provider.QPTypeRC) })
	t.Run("UC", func(t *testing.T) { sendWaitsForReceiveStage(t, provider.QPTypeUC) })
}

// sendWaitsForReceiveStage: UC has no RNR NAK, the SEND was dropped.
func sendWaitsForReceiveStage(t *testing.T, typ provider.QPType) {
	r := newRxWorld(t, testbed.ConnOpts{Type: typ})
	write, send := roce.OpRCWriteOnly, roce.OpRCSendOnly
	if typ == provider.QPTypeUC {
		write, send = roce.OpUCWriteOnly, roce.OpUCSendOnly
	}
	dev := r.w.Hosts[1].Dev
	frame := func(p roce.FrameParams) []byte {
		buf := make([]byte, 256)
		n, err := roce.BuildFrame(buf, &p, []byte("payload"))
		require.NoError(t, err)
		return buf[:n]
	}
	const backlog = 200
	for i := range backlog {
		p := r.params(write, ePSN+uint32(i))
		p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey, DMALen: 7}
		dev.ReceiveFrame(r.w.Eng.Now(), frame(p))
	}
	t0 := r.w.Eng.Now()
	dev.ReceiveFrame(t0, frame(r.params(send, ePSN+backlog)))
	dev.ReceiveFrame(t0, frame(r.params(send, ePSN+backlog+1)))
	rq := newRawRQ(r.eps[1])
	r.w.Eng.At(t0.Add(sim.Nanosecond), sim.HandlerFunc(func(sim.Time) {
		rq.post(t, 0, 0, 64)
		rq.post(t, 1, 64, 64)
		rq.record(t, 2)
	}))
	r.w.Settle(0)
	require.Zero(t, r.ctr("out_of_buffer"), "no RNR NAK, no UC drop")
	require.Equal(t, []byte("payload"), r.eps[1].Buf.Bytes[64:71], "the second SEND in the second WQE")
	if typ == provider.QPTypeUC {
		return
	}
	var acked []uint32
	for _, p := range r.replies(t) {
		require.True(t, p.AETH.Syndrome().IsACK(), "PSN %#x: %v", uint32(p.BTH.PSN()), p.AETH.Syndrome())
		acked = append(acked, uint32(p.BTH.PSN()))
	}
	require.NotEmpty(t, acked)
	require.Equal(t, uint32(ePSN+backlog+1), acked[len(acked)-1], "both SENDs acknowledged, in order")
}
