package device_test

import (
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestUDReceiveKeepsPaceWithTheWire: a UD QP takes 64-byte datagrams as
// fast as a QP can send them (one per rx_cycles, the sender's packetizer
// rate too): the last CQE lands about one pipeline latency after the last
// datagram arrived, and none is dropped. Two defects made a receiver
// slower than its sender, its backlog grow without bound and, once the
// doorbell record it read on arrival lagged the host's reposts, drop
// datagrams (send_bw -c UD -s 64 lost 953 of 2000): the QP held its
// receive pipeline until each datagram's writes had landed (150 ns a
// datagram, where an RC SEND waits only until they are issued), and the
// eight receive WQEs left at a read-ahead refill lasted 320 ns, less than
// the read.
func TestUDReceiveKeepsPaceWithTheWire(t *testing.T) {
	const n = 400
	cfg := testbed.DefaultConfig()
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 64 << 10, RQDepth: 512, CQDepth: 1024})
	require.NoError(t, err)
	rsp := eps[1]
	recvs := make([]provider.RecvWR, n)
	for i := range recvs {
		recvs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i%64)*128, 128)}}
	}
	_, err = rsp.QP.PostRecv(recvs)
	require.NoError(t, err)
	w.Settle(0) // the read-ahead has the first WQEs on chip

	gap := cfg.Device.Core.Clock.Cycles(cfg.Device.Core.RxCycles)
	buf := make([]byte, 512)
	payload := make([]byte, 64)
	start := w.Eng.Now()
	for i := range n {
		fp := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1], TTL: 64,
			BTH:  roce.BTHFields{Opcode: roce.OpUDSendOnly, PKey: 0xffff, DestQP: rsp.QP.QPN(), PSN: roce.PSN(i)},
			DETH: roce.DETHFields{QKey: rsp.QKey, SrcQP: eps[0].QP.QPN()}}
		k, err := roce.BuildFrame(buf, &fp, payload)
		require.NoError(t, err)
		w.Hosts[1].Dev.ReceiveFrame(start.Add(sim.Duration(i)*gap), buf[:k])
	}
	last := start.Add(sim.Duration(n-1) * gap)

	wcs := make([]provider.WC, 64)
	got := 0
	var landed sim.Time
	for got < n {
		for rsp.RecvCQ.Ready() {
			k, err := rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			for _, wc := range wcs[:k] {
				require.Equal(t, provider.WCSuccess, wc.Status)
			}
			got += k
		}
		if got >= n {
			landed = w.Eng.Now()
			break
		}
		require.True(t, w.Eng.Step(), "the engine went idle with %d of %d datagrams completed (%d dropped without a receive WQE)",
			got, n, w.Hosts[1].Dev.Counters().Get("rx_ud_no_receive"))
	}
	require.Zero(t, w.Hosts[1].Dev.Counters().Get("rx_ud_no_receive"))
	// The pipeline's own latency (receive path, the WQE, the writes, the
	// CQE) is about 1 µs; a receiver slower than the wire by 10 % would
	// be 1.6 µs further behind after 400 datagrams.
	behind := landed.Sub(last)
	require.Less(t, behind, 2*sim.Microsecond, "the last of %d datagrams %v apart completed %v after it arrived", n, gap, behind)
}

// TestUDReceivePostedWhileInThePipeline: a datagram reaches its QP's
// receive logic a pipeline latency after it arrives (rx_pipeline and
// rx_cycles: 290 ns on the default profile), and only then looks for a
// receive WQE: a receive the host posts in between catches it. The
// device used to read the doorbell record as the frame arrived, dropped
// the datagram for want of the receive posted 100 ns later, and, behind a
// busy pipeline, dropped most of a stream whose receives the host had
// long reposted (send_bw -c UD -s 64 -r 64: 4808 of 5000). Datagrams
// queued behind a waiting one keep their order; with no receive posted
// at all they are dropped.
func TestUDReceivePostedWhileInThePipeline(t *testing.T) {
	for _, post := range []bool{true, false} {
		name := map[bool]string{true: "posted 100 ns after arrival", false: "never posted"}[post]
		t.Run(name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 64 << 10, RQDepth: 16})
			require.NoError(t, err)
			rsp := eps[1]
			w.Settle(0) // the read-ahead's polls of the empty RQ are over

			const n = 3
			start := w.Eng.Now()
			if post {
				w.Eng.At(start.Add(100*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) {
					recvs := make([]provider.RecvWR, n)
					for i := range recvs {
						recvs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*256, 256)}}
					}
					_, err := rsp.QP.PostRecv(recvs)
					require.NoError(t, err)
				}))
			}
			buf := make([]byte, 512)
			for i := range n {
				fp := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1], TTL: 64,
					BTH:  roce.BTHFields{Opcode: roce.OpUDSendOnly, PKey: 0xffff, DestQP: rsp.QP.QPN(), PSN: roce.PSN(i)},
					DETH: roce.DETHFields{QKey: rsp.QKey, SrcQP: eps[0].QP.QPN()}}
				k, err := roce.BuildFrame(buf, &fp, []byte{byte('a' + i), byte('a' + i)})
				require.NoError(t, err)
				w.Hosts[1].Dev.ReceiveFrame(start.Add(sim.Duration(i)*40*sim.Nanosecond), buf[:k])
			}
			w.Settle(0)

			wcs := make([]provider.WC, 8)
			got, err := rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			dropped := w.Hosts[1].Dev.Counters().Get("rx_ud_no_receive")
			if !post {
				require.Zero(t, got)
				require.Equal(t, uint64(n), dropped)
				return
			}
			require.Zero(t, dropped)
			require.Equal(t, n, got)
			for i, wc := range wcs[:got] {
				require.Equal(t, provider.WCSuccess, wc.Status)
				require.Equal(t, uint64(i), wc.WRID, "in order")
				off := uint64(i)*256 + 40 // behind the GRH
				require.Equal(t, []byte{byte('a' + i), byte('a' + i)}, rsp.Buf.Bytes[off:off+2], "datagram %d in receive %d", i, i)
			}
		})
	}
}

// TestUDParkingIsBounded: a flood of datagrams for a UD QP whose first
// datagram waits for its doorbell-record read (no receive known, its
// receive stage still ahead of the engine) parks at most 1 MiB of frames
// behind it; the rest are dropped and counted (rx_ud_park_full), not held
// without bound. With no receive ever posted the parked ones are then
// dropped for want of a WQE, and the QP is still usable.
func TestUDParkingIsBounded(t *testing.T) {
	const n = 3000
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 64 << 10, RQDepth: 16})
	require.NoError(t, err)
	rsp := eps[1]
	w.Settle(0)
	dev := w.Hosts[1].Dev
	start := w.Eng.Now()
	buf := make([]byte, 2048)
	frame := 0
	for i := range n {
		fp := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1], TTL: 64,
			BTH:  roce.BTHFields{Opcode: roce.OpUDSendOnly, PKey: 0xffff, DestQP: rsp.QP.QPN(), PSN: roce.PSN(i)},
			DETH: roce.DETHFields{QKey: rsp.QKey, SrcQP: eps[0].QP.QPN()}}
		k, err := roce.BuildFrame(buf, &fp, make([]byte, 1024))
		require.NoError(t, err)
		frame = k
		dev.ReceiveFrame(start.Add(sim.Duration(i)*sim.Nanosecond), buf[:k])
	}
	full := dev.Counters().Get("rx_ud_park_full")
	parked := n - int(full)
	require.Equal(t, 1<<20/frame, parked, "1 MiB of %d-byte frames, the waiting one included", frame)
	w.Settle(0)
	require.Equal(t, uint64(parked), dev.Counters().Get("rx_ud_no_receive"))
	// Still receiving: a receive posted now catches the next datagram.
	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 256)}}})
	require.NoError(t, err)
	fp := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1], TTL: 64,
		BTH:  roce.BTHFields{Opcode: roce.OpUDSendOnly, PKey: 0xffff, DestQP: rsp.QP.QPN(), PSN: roce.PSN(n)},
		DETH: roce.DETHFields{QKey: rsp.QKey, SrcQP: eps[0].QP.QPN()}}
	k, err := roce.BuildFrame(buf, &fp, []byte{1, 2})
	require.NoError(t, err)
	dev.ReceiveFrame(w.Eng.Now(), buf[:k])
	wcs, err := testbed.Wait(rsp.RecvCQ, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(7), wcs[0].WRID)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
}
