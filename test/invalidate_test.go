package test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
)

// invPSN is the responder's expected PSN after testbed.ConnectRC (node 0's
// default initial PSN).
const invPSN = 0x1000

// TestSendWithInvalidate aims RC SEND_ONLY_WITH_INVALIDATE (0x17) and
// SEND_LAST_WITH_INVALIDATE (0x16) frames at a live responder QP. No key of
// the model can be invalidated remotely (ordinary MRs only; see
// dma.MR.RemoteInvalidate), so each is the row "SEND-with-invalidate on an
// un-invalidatable key" of rocev2.md §4.6, as rxe does it (class J): the
// data is placed, the receive completes with REM_INV_REQ_ERR, the packet
// is ACKed normally if it asks (never NAKed), and the QP goes to ERR. The
// old responder took these as a plain SEND: a SUCCESS receive, QP in RTS.
func TestSendWithInvalidate(t *testing.T) {
	type frame struct {
		op      roce.Opcode
		psn     uint32
		n       int // payload bytes
		ackReq  bool
		badRKey bool // the IETH names no key at all
	}
	cases := []struct {
		name   string
		mtu    int
		frames []frame
		acks   []uint32 // PSNs of the ACKs the responder sends, none a NAK
	}{
		{name: "SEND_ONLY_WITH_INVALIDATE of an ordinary MR's rkey",
			frames: []frame{{op: roce.OpRCSendOnlyInv, psn: invPSN, n: 64, ackReq: true}},
			acks:   []uint32{invPSN}},
		{name: "SEND_ONLY_WITH_INVALIDATE of an unknown rkey",
			frames: []frame{{op: roce.OpRCSendOnlyInv, psn: invPSN, n: 64, ackReq: true, badRKey: true}},
			acks:   []uint32{invPSN}},
		{name: "SEND_ONLY_WITH_INVALIDATE without AckReq is not ACKed",
			frames: []frame{{op: roce.OpRCSendOnlyInv, psn: invPSN, n: 8}}},
		{name: "SEND_LAST_WITH_INVALIDATE ends a three-packet SEND", mtu: 256,
			frames: []frame{{op: roce.OpRCSendFirst, psn: invPSN, n: 256}, {op: roce.OpRCSendMiddle, psn: invPSN + 1, n: 256},
				{op: roce.OpRCSendLastInv, psn: invPSN + 2, n: 100, ackReq: true}},
			acks: []uint32{invPSN + 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, eps, sent := tapped(t, testbed.ConnOpts{MTU: c.mtu})
			rsp := eps[1]
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 50, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}},
				{WRID: 51, SGL: []provider.SGE{rsp.MR.SGE(4096, 64)}}})
			require.NoError(t, err)
			clear(rsp.Buf.Bytes)

			var want []byte // what the receive buffer should hold
			for _, f := range c.frames {
				rkey := rsp.MR.RKey
				if f.badRKey {
					rkey ^= 0x5500
				}
				fp := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1],
					TTL: 64, SrcPort: 0xc000, InvRKey: rkey,
					BTH: roce.BTHFields{Opcode: f.op, PKey: 0xffff, DestQP: rsp.QP.QPN(), PSN: roce.PSN(f.psn), AckReq: f.ackReq}}
				payload := make([]byte, f.n)
				fill(payload, byte(len(want)))
				buf := make([]byte, 5000)
				n, err := roce.BuildFrame(buf, &fp, payload)
				require.NoError(t, err)
				w.Hosts[1].Dev.ReceiveFrame(w.Eng.Now(), buf[:n])
				w.Settle(0)
				want = append(want, payload...)
			}

			back := sent[1]
			require.Len(t, *back, len(c.acks), "responses")
			for i, p := range *back {
				require.Equal(t, roce.OpRCAck, p.Opcode)
				require.True(t, p.AETH.Syndrome().IsACK(), "an ACK, not a NAK: %v", p.AETH.Syndrome())
				require.Equal(t, roce.PSN(c.acks[i]), p.BTH.PSN())
			}
			wc := waitOne(t, rsp.RecvCQ)
			require.Equal(t, uint64(50), wc.WRID)
			require.Equal(t, provider.WCRemInvReqErr, wc.Status, "the receive the SEND used")
			require.Zero(t, wc.Flags&provider.WCFlagWithInv, "nothing was invalidated")
			require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
			wc = waitOne(t, rsp.RecvCQ)
			require.Equal(t, uint64(51), wc.WRID)
			require.Equal(t, provider.WCWRFlushErr, wc.Status, "the next receive is flushed")
			require.Equal(t, want, rsp.Buf.Bytes[:len(want)], "the data was placed first")
			require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxSendInvRKey.String()))
			require.Zero(t, ctr(w, 1, device.CtrRxSendInvalidate.String()))
			require.Zero(t, ctr(w, 1, device.CtrNAKsSent.String()))
			require.Zero(t, ctr(w, 1, device.CtrRespRemoteInvalidRequest.String()), "no NAK invalid request")
		})
	}
}

// TestSendWithInvalidateNoAckBehindRead: a SEND_ONLY_WITH_INVALIDATE that
// asks for no ACK, arriving right behind a 16-response READ request, has
// nothing to answer: the QP goes to ERR once the READ's responses are all
// built, and they all leave (TestSendWithInvalidateBehindRead has the
// ACKed case through the provider). Before, the QP went to ERR at once
// and dropped them.
func TestSendWithInvalidateNoAckBehindRead(t *testing.T) {
	const n = 16 << 10
	w, eps, sent := tapped(t, testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10})
	rsp := eps[1]
	_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 50, SGL: []provider.SGE{rsp.MR.SGE(n, 4096)}}})
	require.NoError(t, err)
	base := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1],
		TTL: 64, SrcPort: 0xc000, BTH: roce.BTHFields{PKey: 0xffff, DestQP: rsp.QP.QPN()}}
	read, send := base, base
	read.BTH.Opcode, read.BTH.PSN, read.BTH.AckReq = roce.OpRCReadRequest, invPSN, true
	read.RETH = roce.RETHFields{VA: rsp.MR.Addr, RKey: rsp.MR.RKey, DMALen: n}
	send.BTH.Opcode, send.BTH.PSN, send.InvRKey = roce.OpRCSendOnlyInv, invPSN+n/1024, rsp.MR.RKey
	for _, f := range []struct {
		fp      roce.FrameParams
		payload []byte
	}{{read, nil}, {send, make([]byte, 8)}} {
		buf := make([]byte, 5000)
		k, err := roce.BuildFrame(buf, &f.fp, f.payload)
		require.NoError(t, err)
		w.Hosts[1].Dev.ReceiveFrame(w.Eng.Now(), buf[:k]) // no settling between: the READ is still answered
	}
	w.Settle(0)
	var reads int
	for _, p := range *sent[1] {
		require.Equal(t, roce.OperationReadResponse, p.Info.Operation, "only READ responses: %v", p.Opcode)
		reads++
	}
	require.Equal(t, n/1024, reads, "every READ response left")
	wc := waitOne(t, rsp.RecvCQ)
	require.Equal(t, uint64(50), wc.WRID)
	require.Equal(t, provider.WCRemInvReqErr, wc.Status)
	require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
	require.Equal(t, uint64(1), ctr(w, 1, device.CtrQPToError.String()), "to ERR once")
}

// TestPostSendWithInvalidate: a posted IBV_WR_SEND_WITH_INV becomes a SEND
// whose last packet is SEND_LAST/ONLY_WITH_INVALIDATE with the IETH naming
// SendWR.InvalidateRKey (libmlx5 puts the key in the ctrl segment's
// immediate; the device moves it to the IETH). The requester completes it
// as a SEND once it is ACKed; the responder, which cannot invalidate an
// ordinary MR's key, completes the receive with REM_INV_REQ_ERR
// (TestSendWithInvalidate). UC and UD QPs refuse the opcode, as it is RC
// (and XRC) only.
func TestPostSendWithInvalidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mtu  int
		n    uint32
		want []roce.Opcode
	}{
		{"one packet", 0, 64, []roce.Opcode{roce.OpRCSendOnlyInv}},
		{"three packets", 256, 600, []roce.Opcode{roce.OpRCSendFirst, roce.OpRCSendMiddle, roce.OpRCSendLastInv}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, eps, sent := tapped(t, testbed.ConnOpts{MTU: c.mtu})
			req, rsp := eps[0], eps[1]
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 50, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
			require.NoError(t, err)
			fill(req.Buf.Bytes[:c.n], 0x3c)
			const key = 0x00c0ffee
			_, err = req.QP.PostSend([]provider.SendWR{{WRID: 7, Opcode: provider.WRSendWithInv, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, c.n)}, InvalidateRKey: key}})
			require.NoError(t, err)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCSuccess, wc.Status)
			require.Equal(t, provider.WCSend, wc.Opcode)
			require.Equal(t, uint64(7), wc.WRID)
			require.Len(t, *sent[0], len(c.want))
			for i, p := range *sent[0] {
				require.Equal(t, c.want[i], p.Opcode, "packet %d", i)
				if i == len(*sent[0])-1 {
					require.Equal(t, uint32(key), p.IETH.RKey(), "the IETH names the key")
				}
			}
			wc = waitOne(t, rsp.RecvCQ)
			require.Equal(t, provider.WCRemInvReqErr, wc.Status, "no key of the model is remotely invalidatable")
			require.Equal(t, req.Buf.Bytes[:c.n], rsp.Buf.Bytes[:c.n], "the data was placed")
		})
	}
	for _, typ := range []provider.QPType{provider.QPTypeUC, provider.QPTypeUD} {
		t.Run("refused on "+map[provider.QPType]string{provider.QPTypeUC: "UC", provider.QPTypeUD: "UD"}[typ], func(t *testing.T) {
			_, eps, _ := tapped(t, testbed.ConnOpts{Type: typ})
			ep := eps[0]
			_, err := ep.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSendWithInv, SGL: []provider.SGE{ep.MR.SGE(0, 8)}}})
			require.ErrorIs(t, err, provider.ErrInvalidArg)
		})
	}
}

// tapped connects a QP pair on a default world and returns, per node, the
// RoCE packets it sends from then on.
func tapped(t *testing.T, o testbed.ConnOpts) (*testbed.World, [2]*testbed.Endpoint, [2]*[]roce.Packet) {
	t.Helper()
	w, req, rsp := connect(t, o)
	eps := [2]*testbed.Endpoint{req, rsp}
	sent := [2]*[]roce.Packet{new([]roce.Packet), new([]roce.Packet)}
	w.Link.AddTap(func(_ sim.Time, f []byte) {
		var p roce.Packet
		if roce.ParseFrame(f, &p) != nil {
			return
		}
		for i := range sent {
			if p.SrcIP == testbed.IPs[i] {
				*sent[i] = append(*sent[i], p)
			}
		}
	})
	return w, eps, sent
}
