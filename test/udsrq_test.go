package test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/wqefetch"
	"github.com/stretchr/testify/require"
)

// countOps counts the frames of each BTH opcode that start on the wire.
func countOps(w *testbed.World) map[roce.Opcode]int {
	m := map[roce.Opcode]int{}
	w.Link.AddTap(func(_ sim.Time, f []byte) {
		var p roce.Packet
		if roce.ParseFrame(f, &p) == nil {
			m[p.Opcode]++
		}
	})
	return m
}

// TestUDSend: UD SEND and SEND_IMM of 0, 1, MTU-1 and MTU bytes. The
// receive buffer holds a 40-byte GRH area (20 zero bytes, then the IPv4
// header as on the wire) and the payload; the WC has byte_len + 40, the
// sender's QPN, the GRH flag and the IPv4 network header type.
func TestUDSend(t *testing.T) {
	const mtu = 4096 // the port's active MTU on the default profile
	for _, n := range []int{0, 1, mtu - 1, mtu} {
		for _, op := range []provider.WROpcode{provider.WRSend, provider.WRSendImm} {
			w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 16 << 10})
			ops := countOps(w)
			fill(req.Buf.Bytes[:n], byte(n))
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 5, SGL: []provider.SGE{rsp.MR.SGE(0, mtu+40)}}})
			require.NoError(t, err)
			wr := provider.SendWR{WRID: 6, Opcode: op, Flags: provider.SendSignaled, Imm: 0xfeedf00d,
				AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}
			if n > 0 {
				wr.SGL = []provider.SGE{req.MR.SGE(0, uint32(n))}
			}
			_, err = req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCSuccess, wc.Status)
			rwc := waitOne(t, rsp.RecvCQ)
			require.Equal(t, provider.WCSuccess, rwc.Status, "n=%d", n)
			require.Equal(t, uint64(5), rwc.WRID)
			require.Equal(t, uint32(n+40), rwc.ByteLen)
			require.Equal(t, req.QP.QPN(), rwc.SrcQP)
			require.NotZero(t, rwc.Flags&provider.WCFlagGRH)
			require.Equal(t, provider.NetHdrIPv4, rwc.NetworkHdr)
			if op == provider.WRSendImm {
				require.NotZero(t, rwc.Flags&provider.WCFlagWithImm)
				require.Equal(t, uint32(0xfeedf00d), rwc.Imm)
			}
			grh := rsp.Buf.Bytes[:40]
			require.Equal(t, make([]byte, 20), grh[:20], "20 zero bytes")
			require.Equal(t, byte(0x45), grh[20], "IPv4, IHL 5")
			require.Equal(t, byte(17), grh[29], "protocol UDP")
			require.Equal(t, testbed.IPs[0].AsSlice(), grh[32:36], "source address")
			require.Equal(t, testbed.IPs[1].AsSlice(), grh[36:40], "destination address")
			require.Equal(t, uint16(20+8+12+8+n+roce.PadLen(n)+4+4*btoi(op == provider.WRSendImm)), binary.BigEndian.Uint16(grh[22:24]), "IP total length")
			require.True(t, bytes.Equal(req.Buf.Bytes[:n], rsp.Buf.Bytes[40:40+n]))
			want := roce.OpUDSendOnly
			if op == provider.WRSendImm {
				want = roce.OpUDSendOnlyImm
			}
			require.Equal(t, 1, ops[want])
			require.Equal(t, 1, len(ops), "no ACK on UD")
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestUDOversize: a UD SEND over the port MTU fails as a ConnectX fails it:
// LOC_LEN_ERR, nothing on the wire, the QP in SQE (its send queue in
// error) and still receiving.
func TestUDOversize(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 16 << 10})
	ops := countOps(w)
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 4097)}, AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}})
	require.NoError(t, err)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCLocLenErr, wc.Status)
	require.Empty(t, ops)
	require.Equal(t, provider.QPStateSQE, qpState(t, req.QP))
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrUDOversize.String()))
	// A send posted to the queue in error is flushed.
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 4, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 10)}, AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}})
	require.NoError(t, err)
	fwc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCWRFlushErr, fwc.Status)
	require.Equal(t, uint64(4), fwc.WRID)
	// It still receives.
	_, err = req.QP.PostRecv([]provider.RecvWR{{WRID: 2, SGL: []provider.SGE{req.MR.SGE(8192, 1000)}}})
	require.NoError(t, err)
	_, err = rsp.QP.PostSend([]provider.SendWR{{WRID: 3, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{rsp.MR.SGE(0, 100)}, AH: rsp.AH, RemoteQPN: req.QP.QPN(), RemoteQKey: req.QKey}})
	require.NoError(t, err)
	rwc := waitOne(t, req.RecvCQ)
	require.Equal(t, provider.WCSuccess, rwc.Status)
	require.Equal(t, uint32(140), rwc.ByteLen)
}

// TestUCSendErrorSQE: a send-side error moves a UC QP to SQE, not ERR
// (IB spec: SQE is implemented by every QP type except RC; mlx5.md §7.2:
// RTS→SQER on a send-side error of UD/UC-like QPs). The failing WQE
// completes with its error, the one behind it is flushed, the QP keeps
// receiving, and SQE→RTS brings its send queue back.
func TestUCSendErrorSQE(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUC})
	bad := req.MR.SGE(0, 64)
	bad.LKey ^= 0x4400
	write := func(id uint64, s provider.SGE) provider.SendWR {
		return provider.SendWR{WRID: id, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{s},
			RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}
	}
	_, err := req.QP.PostSend([]provider.SendWR{write(1, bad), write(2, req.MR.SGE(0, 64))})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 2)
	require.NoError(t, err)
	require.Equal(t, provider.WCLocProtErr, wcs[0].Status)
	require.Equal(t, provider.WCWRFlushErr, wcs[1].Status)
	require.Equal(t, provider.QPStateSQE, qpState(t, req.QP))
	require.NotZero(t, ctr(w, 0, device.CtrWQEBadLKey.String()))
	// It still receives.
	_, err = req.QP.PostRecv([]provider.RecvWR{{WRID: 3, SGL: []provider.SGE{req.MR.SGE(8192, 1000)}}})
	require.NoError(t, err)
	_, err = rsp.QP.PostSend([]provider.SendWR{{WRID: 4, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{rsp.MR.SGE(0, 100)}}})
	require.NoError(t, err)
	rwc := waitOne(t, req.RecvCQ)
	require.Equal(t, provider.WCSuccess, rwc.Status)
	require.Equal(t, uint64(3), rwc.WRID)
	// SQE→RTS: the send queue works again.
	require.NoError(t, req.QP.Modify(&provider.QPAttr{QPState: provider.QPStateRTS, CurQPState: provider.QPStateSQE}, mlx5.AttrState|mlx5.AttrCurState))
	_, err = req.QP.PostSend([]provider.SendWR{write(5, req.MR.SGE(0, 64))})
	require.NoError(t, err)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCSuccess, wc.Status)
	require.Equal(t, uint64(5), wc.WRID)
}

// TestUCReceiveWQEBadKey: a UC receive WQE whose buffer the device cannot
// use (here another key) completes LOC_PROT_ERR and the QP goes to ERR,
// its other receives flushed, as rxe treats a malformed receive WQE
// (class A). It used to be kept: the message was dropped and counted,
// and so was every later one, with no completion ever.
func TestUCReceiveWQEBadKey(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUC})
	bad := rsp.MR.SGE(0, 256)
	bad.LKey ^= 0x4400
	_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{bad}}, {WRID: 2, SGL: []provider.SGE{rsp.MR.SGE(256, 256)}}})
	require.NoError(t, err)
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 9, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 100)}}})
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status, "UC: the sender knows nothing")
	wcs, err := testbed.Wait(rsp.RecvCQ, 2)
	require.NoError(t, err)
	require.Equal(t, uint64(1), wcs[0].WRID)
	require.Equal(t, provider.WCLocProtErr, wcs[0].Status)
	require.Equal(t, uint64(2), wcs[1].WRID)
	require.Equal(t, provider.WCWRFlushErr, wcs[1].Status)
	require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
	require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxUCError.String()))
	untouched(t, rsp, 0, 0)
}

// TestReceiveOnlyQP: a QP created with max_send_wr 0 has no send queue
// (libmlx5 sizes none; mlx5_ib sets the QPC's no_sq) and receives as any
// other; a doorbell for it is refused and counted, as the device has no
// ring to fetch from.
func TestReceiveOnlyQP(t *testing.T) {
	for _, uv := range []bool{false, true} {
		t.Run(fmt.Sprintf("uverbs=%v", uv), func(t *testing.T) { receiveOnlyQP(t, uv) })
	}
}

func receiveOnlyQP(t *testing.T, uverbsControl bool) {
	cfg := testbed.DefaultConfig()
	cfg.UverbsControl = uverbsControl
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	h := rsp.Host
	qp, err := h.Ctx.CreateQP(rsp.PD, provider.QPInitAttr{Type: provider.QPTypeUD, SendCQ: rsp.SendCQ, RecvCQ: rsp.RecvCQ,
		Cap: provider.QPCap{MaxRecvWR: 4, MaxRecvSGE: 1}})
	require.NoError(t, err, "max_send_wr 0: a receive-only QP")
	require.Zero(t, qp.SQInfo().WQEBBs)
	require.NoError(t, qp.Connect(provider.ConnectAttr{QKey: rsp.QKey}))
	_, err = qp.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 1024)}}})
	require.NoError(t, err)
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 100)}, AH: req.AH, RemoteQPN: qp.QPN(), RemoteQKey: rsp.QKey}})
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
	wc := waitOne(t, rsp.RecvCQ)
	require.Equal(t, provider.WCSuccess, wc.Status)
	require.Equal(t, uint64(7), wc.WRID)
	require.Equal(t, qp.QPN(), wc.QPNum)
	_, err = qp.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, SGL: []provider.SGE{rsp.MR.SGE(0, 8)},
		AH: rsp.AH, RemoteQPN: req.QP.QPN(), RemoteQKey: req.QKey}})
	require.ErrorIs(t, err, provider.ErrQueueFull, "no send queue to post to")
	// A driver that rings anyway.
	var db [8]byte
	db[3] = byte(mlx5.OpSend)
	db[4], db[5], db[6], db[7] = byte(qp.QPN()>>16), byte(qp.QPN()>>8), byte(qp.QPN()), 2
	h.CPU.Store64(qp.SQInfo().BFRegOffset, binary.LittleEndian.Uint64(db[:]))
	h.CPU.Flush()
	w.Settle(0)
	require.Equal(t, uint64(1), ctr(w, 1, wqefetch.CtrDBNoSQ.String()))
	require.Equal(t, provider.QPStateRTS, qpState(t, qp))
}

// TestUDQKey: a SEND with the wrong Q_Key is dropped silently (counted);
// a RemoteQKey with bit 31 set sends the QP's own Q_Key.
func TestUDQKey(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUD})
	_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 1024)}}})
	require.NoError(t, err)
	send := func(qkey uint32) {
		_, err := req.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(0, 10)}, AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: qkey}})
		require.NoError(t, err)
		require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status, "the sender does not know")
	}
	send(rsp.QKey + 1)
	w.Settle(0)
	n, err := rsp.RecvCQ.Poll(make([]provider.WC, 1))
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxDropBadQKey.String()))
	send(0x80000000) // the QP's own Q_Key, which both sides share here
	require.Equal(t, provider.WCSuccess, waitOne(t, rsp.RecvCQ).Status)
}

// TestUDManyDestinations: one UD QP sends to 8 UD QPs on the peer, one AH
// each; every receiver gets its own message with the right src_qp.
func TestUDManyDestinations(t *testing.T) {
	w, req, _ := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUD})
	h := w.Hosts[1]
	pd, err := h.Ctx.AllocPD()
	require.NoError(t, err)
	buf, err := h.Ctx.AllocBuffer(64<<10, 4096)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf.Addr, uint64(len(buf.Bytes)), provider.AccessLocalWrite)
	require.NoError(t, err)
	pid := h.Dev.Identity()
	type dst struct {
		qp *provider.QP
		cq *provider.CQ
		ah *provider.AH
	}
	dsts := make([]dst, 8)
	for i := range dsts {
		cq, err := h.Ctx.CreateCQ(16)
		require.NoError(t, err)
		qp, err := h.Ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		for _, st := range []struct {
			a    provider.QPAttr
			mask uint32
		}{
			{provider.QPAttr{QPState: provider.QPStateInit, Port: 1, QKey: 0x1234}, 1 | 1<<4 | 1<<5 | 1<<6},
			{provider.QPAttr{QPState: provider.QPStateRTR}, 1},
			{provider.QPAttr{QPState: provider.QPStateRTS}, 1 | 1<<16},
		} {
			require.NoError(t, qp.Modify(&st.a, st.mask))
		}
		_, err = qp.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{mr.SGE(uint64(i)*4096, 4096)}}})
		require.NoError(t, err)
		ah, err := req.PD.CreateAH(provider.AHAttr{DGID: pid.IP.As16(), DMAC: pid.MAC, Port: 1, SGIDIndex: 1, HopLimit: 64})
		require.NoError(t, err)
		dsts[i] = dst{qp, cq, ah}
	}
	for i, d := range dsts {
		req.Buf.Bytes[i] = byte(0xa0 + i)
		_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRSend, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(uint64(i), 1)}, AH: d.ah, RemoteQPN: d.qp.QPN(), RemoteQKey: 0x1234}})
		require.NoError(t, err)
	}
	_, err = testbed.Wait(req.SendCQ, 8)
	require.NoError(t, err)
	for i, d := range dsts {
		wc := waitOne(t, d.cq)
		require.Equal(t, provider.WCSuccess, wc.Status)
		require.Equal(t, uint64(i), wc.WRID)
		require.Equal(t, req.QP.QPN(), wc.SrcQP)
		require.Equal(t, byte(0xa0+i), buf.Bytes[i*4096+40], "QP %d got its own message", i)
	}
}

// TestUCOperations: UC SEND, WRITE and WRITE_IMM at 0, 1, MTU-1 and MTU
// bytes: data lands, the requester completes with no ACK on the wire.
func TestUCOperations(t *testing.T) {
	const mtu = 1024
	for _, op := range []provider.WROpcode{provider.WRSend, provider.WRRDMAWrite, provider.WRRDMAWriteImm} {
		for _, n := range []int{0, 1, mtu - 1, mtu, 3*mtu + 5} {
			w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUC, MTU: mtu})
			ops := countOps(w)
			fill(req.Buf.Bytes[:n], byte(n+1))
			recv := op != provider.WRRDMAWrite
			if recv {
				_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 9, SGL: []provider.SGE{rsp.MR.SGE(0, 8192)}}})
				require.NoError(t, err)
			}
			wr := provider.SendWR{WRID: 1, Opcode: op, Flags: provider.SendSignaled, Imm: 7, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}
			if n > 0 {
				wr.SGL = []provider.SGE{req.MR.SGE(0, uint32(n))}
			}
			_, err := req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
			if recv {
				rwc := waitOne(t, rsp.RecvCQ)
				require.Equal(t, provider.WCSuccess, rwc.Status)
				require.Equal(t, uint32(n), rwc.ByteLen)
			}
			w.Settle(0)
			require.True(t, bytes.Equal(req.Buf.Bytes[:n], rsp.Buf.Bytes[:n]), "%v %d bytes", op, n)
			for o := range ops {
				require.Equal(t, roce.TransportUC, o.Transport(), "only UC frames, no ACK: %v", o)
			}
		}
	}
}

// TestUCLoss: a lost or reordered packet drops the UC message being
// received (counted); the next message arrives whole.
func TestUCLoss(t *testing.T) {
	for _, c := range []struct {
		name string
		rule fault.Rule
	}{
		{"middle packet lost", fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(0), Opcode: opc(roce.OpUCSendMiddle)}}},
		{"middle packet reordered", fault.Rule{Point: fault.WireTx, Action: fault.Reorder, Nth: 1, Match: fault.Match{Node: node(0), Opcode: opc(roce.OpUCSendMiddle)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUC, MTU: 1024}, c.rule)
			fill(req.Buf.Bytes[:8192], 0x3c)
			_, err := rsp.QP.PostRecv([]provider.RecvWR{
				{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}},
				{WRID: 2, SGL: []provider.SGE{rsp.MR.SGE(4096, 4096)}}})
			require.NoError(t, err)
			_, err = req.QP.PostSend([]provider.SendWR{
				{WRID: 10, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 3000)}},
				{WRID: 11, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(4096, 2500)}}})
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status, "UC completes once sent")
			rwc := waitOne(t, rsp.RecvCQ)
			require.Equal(t, provider.WCSuccess, rwc.Status)
			require.Equal(t, uint32(2500), rwc.ByteLen, "the damaged message is gone, the next is whole")
			require.Equal(t, uint64(1), rwc.WRID, "it used the receive the dropped message had taken")
			require.True(t, bytes.Equal(req.Buf.Bytes[4096:4096+2500], rsp.Buf.Bytes[:2500]))
			require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxUCDropped.String()), "one message dropped")
		})
	}
}

// TestSRQShared: one SRQ behind 4 RC QPs and a UD QP. The limit event
// fires exactly when fewer than srq_limit WQEs are left, and only once per
// arming; an empty SRQ is RNR-NAKed, and the SENDs complete once receives
// are posted again.
func TestSRQShared(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	h := w.Hosts[1]
	srq, _, mr := hostSRQ(t, h, 64, 256<<10)
	pairs := make([][2]*testbed.Endpoint, 4)
	for i := range pairs {
		pairs[i], err = w.ConnectRC(testbed.ConnOpts{UseSRQ: [2]*provider.SRQ{nil, srq}, MinRNR: 1})
		require.NoError(t, err)
	}
	posted := 0
	post := func(n int) {
		wrs := make([]provider.RecvWR, n)
		for i := range wrs {
			wrs[i] = provider.RecvWR{WRID: uint64(posted), SGL: []provider.SGE{mr.SGE(uint64(posted%64)*4096, 4096)}}
			posted++
		}
		k, err := srq.PostRecv(wrs)
		require.NoError(t, err)
		require.Equal(t, n, k)
	}
	limits := func() uint64 { return w.Hosts[1].Dev.Counters().Value(device.CtrSRQLimit) }
	post(8)
	require.NoError(t, srq.Modify(provider.SRQAttr{SRQLimit: 4}, provider.SRQAttrLimit))
	sent := 0
	send := func(pair int) {
		req := pairs[pair][0]
		_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(sent), Opcode: provider.WRSend, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(0, 100)}}})
		require.NoError(t, err)
		sent++
		require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
	}
	for i := 0; i < 8; i++ {
		send(i % 4)
		// 8 posted, i+1 taken: fewer than 4 left from the 5th SEND on.
		want := uint64(0)
		if i >= 4 {
			want = 1
		}
		require.Equal(t, want, limits(), "after %d SENDs", i+1)
	}
	a, err := srq.Query()
	require.NoError(t, err)
	require.Zero(t, a.SRQLimit, "the limit disarms when it fires")
	// Receives on the SRQ's CQs: each QP's recv CQ got its own.
	got := 0
	for _, p := range pairs {
		for {
			n, err := p[1].RecvCQ.Poll(make([]provider.WC, 8))
			require.NoError(t, err)
			if n == 0 {
				break
			}
			got += n
		}
	}
	require.Equal(t, 8, got)
	// Empty: the next SEND is RNR-NAKed until receives come.
	req := pairs[2][0]
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 99, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 100)}}})
	require.NoError(t, err)
	for i := 0; i < 2000 && w.Hosts[1].Dev.Counters().Value(device.CtrRNRNAKsSent) == 0; i++ {
		w.Eng.Step()
	}
	require.NotZero(t, w.Hosts[1].Dev.Counters().Value(device.CtrRNRNAKsSent))
	post(4)
	require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
	rwc := waitOne(t, pairs[2][1].RecvCQ)
	require.Equal(t, provider.WCSuccess, rwc.Status)
	require.Equal(t, uint64(8), rwc.WRID, "the first receive posted after the SRQ ran dry")
	// A UD QP takes its receives from the same SRQ.
	ud, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD, UseSRQ: [2]*provider.SRQ{nil, srq}})
	require.NoError(t, err)
	_, err = ud[0].QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{ud[0].MR.SGE(0, 64)}, AH: ud[0].AH, RemoteQPN: ud[1].QP.QPN(), RemoteQKey: ud[1].QKey}})
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, waitOne(t, ud[0].SendCQ).Status)
	uwc := waitOne(t, ud[1].RecvCQ)
	require.Equal(t, provider.WCSuccess, uwc.Status)
	require.Equal(t, uint32(64+40), uwc.ByteLen)
	require.Equal(t, uint64(9), uwc.WRID, "the next SRQ receive, shared with the RC QPs")
	require.Error(t, srq.Destroy(), "busy while QPs use it")
}

// TestSRQLimitCountsEveryPosted: the limit event fires when fewer than
// srq_limit receives are really left on the SRQ, not when fewer are left
// of those the device saw at its last doorbell-record read. Receives
// posted after that read count too (the device re-reads the record
// before it reports the limit).
func TestSRQLimitCountsEveryPosted(t *testing.T) {
	cases := []struct {
		name              string
		first, later      int    // receives posted before the first SEND, then after it
		limit             uint32 // armed after the first SEND
		sends, wantEvents int    // further SENDs, limit events expected after them
	}{
		{"later_posts_keep_above", 2, 10, 4, 1, 0},
		{"later_posts_then_drain", 2, 10, 4, 8, 1},
		{"no_later_posts", 2, 0, 4, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			defer w.Close()
			h := w.Hosts[1]
			srq, _, mr := hostSRQ(t, h, 32, 64<<10)
			pair, err := w.ConnectRC(testbed.ConnOpts{UseSRQ: [2]*provider.SRQ{nil, srq}, MinRNR: 1})
			require.NoError(t, err)
			posted := 0
			post := func(n int) {
				for i := 0; i < n; i++ {
					_, err := srq.PostRecv([]provider.RecvWR{{WRID: uint64(posted), SGL: []provider.SGE{mr.SGE(uint64(posted%16)*4096, 4096)}}})
					require.NoError(t, err)
					posted++
				}
			}
			send := func() {
				_, err := pair[0].QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, Flags: provider.SendSignaled,
					SGL: []provider.SGE{pair[0].MR.SGE(0, 64)}}})
				require.NoError(t, err)
				require.Equal(t, provider.WCSuccess, waitOne(t, pair[0].SendCQ).Status)
				require.Equal(t, provider.WCSuccess, waitOne(t, pair[1].RecvCQ).Status)
			}
			post(c.first)
			send()
			post(c.later)
			require.NoError(t, srq.Modify(provider.SRQAttr{SRQLimit: c.limit}, provider.SRQAttrLimit))
			for i := 0; i < c.sends; i++ {
				send()
			}
			left := c.first + c.later - 1 - c.sends
			require.Equal(t, uint64(c.wantEvents), h.Dev.Counters().Value(device.CtrSRQLimit), "%d receives left, srq_limit %d", left, c.limit)
		})
	}
}

// TestUCLossOnSRQ: a UC message that loses a packet after it took a
// receive from an SRQ completes that receive in error (REM_INV_REQ_ERR)
// instead of keeping it on the QP, as rxe's class E error for UC on an
// SRQ (rocev2.md §4.6: "with SRQ, UC posts an error CQE"): the WQE
// belongs to the SRQ, a QP holding it could be destroyed without ever
// completing it. The next message takes the next SRQ receive; the QP
// stays usable.
func TestUCLossOnSRQ(t *testing.T) {
	for _, c := range []struct {
		name string
		rule fault.Rule
	}{
		{"middle packet lost", fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(0), Opcode: opc(roce.OpUCSendMiddle)}}},
		{"last packet lost", fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(0), Opcode: opc(roce.OpUCSendLast)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUC, MTU: 1024, SRQ: true}, c.rule)
			fill(req.Buf.Bytes[:8192], 0x3c)
			_, err := rsp.SRQ.PostRecv([]provider.RecvWR{
				{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}},
				{WRID: 2, SGL: []provider.SGE{rsp.MR.SGE(4096, 4096)}}})
			require.NoError(t, err)
			_, err = req.QP.PostSend([]provider.SendWR{
				{WRID: 10, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 3000)}},
				{WRID: 11, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(4096, 2500)}}})
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status, "UC completes once sent")
			wcs, err := testbed.Wait(rsp.RecvCQ, 2)
			require.NoError(t, err)
			require.Equal(t, uint64(1), wcs[0].WRID)
			require.Equal(t, provider.WCRemInvReqErr, wcs[0].Status, "the damaged message's receive")
			require.Equal(t, uint64(2), wcs[1].WRID)
			require.Equal(t, provider.WCSuccess, wcs[1].Status)
			require.Equal(t, uint32(2500), wcs[1].ByteLen)
			require.True(t, bytes.Equal(req.Buf.Bytes[4096:4096+2500], rsp.Buf.Bytes[4096:4096+2500]))
			require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxUCDropped.String()), "one message dropped")
			require.Zero(t, rsp.SRQ.Outstanding(), "no SRQ receive left held by the QP")
			require.Equal(t, provider.QPStateRTS, rsp.QP.State(), "UC carries on")
		})
	}
}

// TestSRQInterleaved: several RC QPs and a UD QP share one SRQ and their
// multi-packet SENDs, SEND-with-immediates and WRITE-with-immediates are
// in flight at once. Every receive consumes exactly one SRQ WQE, holds
// exactly its own message (no packet of another QP's message lands in
// it), and a WRITE-with-immediate consumes a WQE without writing into it.
func TestSRQInterleaved(t *testing.T) {
	for _, c := range []struct {
		name   string
		rc, ud int // RC pairs, UD datagrams
		size   int // RC SEND size (MTU 1024)
	}{
		{"rc4_3pkt_ud2", 4, 2, 3000},
		{"rc3_5pkt", 3, 0, 4096},
		{"rc2_1pkt_ud4", 2, 4, 700},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			defer w.Close()
			h := w.Hosts[1]
			const slot = 8192
			srq, buf, mr := hostSRQ(t, h, 63, 64*slot)
			for i := range buf.Bytes {
				buf.Bytes[i] = 0xee
			}
			wrs := make([]provider.RecvWR, 63)
			for i := range wrs {
				wrs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{mr.SGE(uint64(i)*slot, slot)}}
			}
			n, err := srq.PostRecv(wrs)
			require.NoError(t, err)
			require.Equal(t, len(wrs), n)
			type msg struct {
				seed byte
				size int
				imm  bool // carries an immediate
				wr   bool // WRITE-with-immediate: no data in the receive
				ud   bool
			}
			want := map[uint32][]msg{} // by receiving QPN, in order
			cqs := map[uint32]*provider.CQ{}
			var reqs []*testbed.Endpoint
			for i := 0; i < c.rc; i++ {
				p, err := w.ConnectRC(testbed.ConnOpts{UseSRQ: [2]*provider.SRQ{nil, srq}, MinRNR: 1, BufSize: 16 << 10})
				require.NoError(t, err)
				req, rsp := p[0], p[1]
				seed := byte(0x10 * (i + 1))
				fill(req.Buf.Bytes, seed)
				_, err = req.QP.PostSend([]provider.SendWR{
					{WRID: 1, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, uint32(c.size))}},
					{WRID: 2, Opcode: provider.WRRDMAWriteImm, Imm: uint32(i), SGL: []provider.SGE{req.MR.SGE(0, 2000)},
						RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
					{WRID: 3, Opcode: provider.WRSendImm, Imm: 0x100 + uint32(i), Flags: provider.SendSignaled,
						SGL: []provider.SGE{req.MR.SGE(0, uint32(c.size))}}})
				require.NoError(t, err)
				cqs[rsp.QP.QPN()] = rsp.RecvCQ
				want[rsp.QP.QPN()] = []msg{{seed, c.size, false, false, false}, {seed, 2000, true, true, false}, {seed, c.size, true, false, false}}
				reqs = append(reqs, req)
			}
			if c.ud > 0 {
				p, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD, UseSRQ: [2]*provider.SRQ{nil, srq}})
				require.NoError(t, err)
				fill(p[0].Buf.Bytes, 0x77)
				cqs[p[1].QP.QPN()] = p[1].RecvCQ
				for i := 0; i < c.ud; i++ {
					flags := provider.SendFlags(0)
					if i == c.ud-1 {
						flags = provider.SendSignaled
					}
					_, err = p[0].QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRSend, Flags: flags,
						SGL: []provider.SGE{p[0].MR.SGE(0, 512)}, AH: p[0].AH, RemoteQPN: p[1].QP.QPN(), RemoteQKey: p[1].QKey}})
					require.NoError(t, err)
					want[p[1].QP.QPN()] = append(want[p[1].QP.QPN()], msg{0x77, 512, false, false, true})
				}
				reqs = append(reqs, p[0])
			}
			for _, r := range reqs {
				require.Equal(t, provider.WCSuccess, waitOne(t, r.SendCQ).Status)
			}
			// Every receive CQ of host 1 is polled; a QP's receives are in
			// its messages' order, each in a WQE no other receive used.
			used := map[uint64]bool{}
			for qpn, msgs := range want {
				wcs, err := testbed.Wait(cqs[qpn], len(msgs))
				require.NoError(t, err)
				for k, m := range msgs {
					wc := wcs[k]
					require.Equal(t, provider.WCSuccess, wc.Status, "QP %#x receive %d", qpn, k)
					require.False(t, used[wc.WRID], "SRQ WQE %d used twice", wc.WRID)
					used[wc.WRID] = true
					require.Equal(t, qpn, wc.QPNum)
					require.Equal(t, m.imm, wc.Flags&provider.WCFlagWithImm != 0, "QP %#x receive %d", qpn, k)
					got := buf.Bytes[wc.WRID*slot : (wc.WRID+1)*slot]
					exp := make([]byte, m.size)
					fill(exp, m.seed)
					switch {
					case m.wr:
						require.Equal(t, provider.WCRecvRDMAWithImm, wc.Opcode)
						require.Equal(t, uint32(m.size), wc.ByteLen)
						require.Equal(t, bytes.Repeat([]byte{0xee}, slot), got, "a WRITE-with-immediate writes nothing into its receive")
					case m.ud:
						require.Equal(t, uint32(40+m.size), wc.ByteLen)
						require.True(t, bytes.Equal(exp, got[40:40+m.size]), "UD receive %d", k)
						require.Equal(t, bytes.Repeat([]byte{0xee}, slot-40-m.size), got[40+m.size:])
					default:
						require.Equal(t, uint32(m.size), wc.ByteLen)
						require.True(t, bytes.Equal(exp, got[:m.size]), "QP %#x receive %d holds another message", qpn, k)
						require.Equal(t, bytes.Repeat([]byte{0xee}, slot-m.size), got[m.size:], "nothing past the message")
					}
				}
				n, err := cqs[qpn].Poll(make([]provider.WC, 4))
				require.NoError(t, err)
				require.Zero(t, n, "QP %#x: one receive per message", qpn)
			}
			require.Equal(t, len(used), len(wrs)-srq.Outstanding())
		})
	}
}

// TestSRQDry: an SRQ with no receive posted. RC is RNR-NAKed rnr_retry+1
// times and then completes with RNR_RETRY_EXC_ERR (the responder stays
// in RTS and takes the next message once receives come); UD drops the
// datagram and counts it (out_of_buffer).
func TestSRQDry(t *testing.T) {
	for _, c := range []struct {
		name     string
		typ      provider.QPType
		rnrRetry uint8
	}{
		{"rc_rnr_retry_1", provider.QPTypeRC, 1},
		{"rc_rnr_retry_3", provider.QPTypeRC, 3},
		{"ud", provider.QPTypeUD, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := faulty(t, testbed.ConnOpts{Type: c.typ, SRQ: true, MinRNR: 1, RNRRetry: c.rnrRetry})
			wr := provider.SendWR{WRID: 5, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 100)}}
			if c.typ == provider.QPTypeUD {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = req.AH, rsp.QP.QPN(), rsp.QKey
			}
			_, err := req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			wc := waitOne(t, req.SendCQ)
			if c.typ == provider.QPTypeUD {
				require.Equal(t, provider.WCSuccess, wc.Status)
				w.Drain(10000)
				require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxUDNoRecv.String()))
				require.Equal(t, uint64(1), ctr(w, 1, device.CtrOutOfBuffer.String()))
			} else {
				require.Equal(t, provider.WCRNRRetryExcErr, wc.Status)
				require.Equal(t, uint64(c.rnrRetry)+1, ctr(w, 1, device.CtrRNRNAKsSent.String()))
				require.Equal(t, provider.QPStateRTS, rsp.QP.State())
			}
			n, err := rsp.RecvCQ.Poll(make([]provider.WC, 2))
			require.NoError(t, err)
			require.Zero(t, n, "nothing received")
			require.Zero(t, rsp.SRQ.Outstanding())
		})
	}
}

// TestSRQQPErrMidMessage: two RC QPs on one SRQ; the first loses the last
// packet of a 3-packet SEND (it holds an SRQ WQE) and is moved to ERR.
// That WQE is flushed to the first QP's receive CQ with WR_FLUSH_ERR and
// its own wr_id, it goes back to the SRQ's free list, no other SRQ WQE is
// flushed, and the second QP keeps receiving from the SRQ.
func TestSRQQPErrMidMessage(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []roce.Opcode // dropped once each: nothing after FIRST draws a NAK
	}{
		{"send_last_lost", []roce.Opcode{roce.OpRCSendLast}},
		{"send_middle_and_last_lost", []roce.Opcode{roce.OpRCSendMiddle, roce.OpRCSendLast}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			cfg.Faults = &fault.Plan{Seed: 1}
			for _, op := range c.ops {
				cfg.Faults.Rules = append(cfg.Faults.Rules, fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(0), Opcode: opc(op)}})
			}
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			defer w.Close()
			h := w.Hosts[1]
			srq, _, mr := hostSRQ(t, h, 15, 16*4096)
			wrs := make([]provider.RecvWR, 4)
			for i := range wrs {
				wrs[i] = provider.RecvWR{WRID: uint64(100 + i), SGL: []provider.SGE{mr.SGE(uint64(i)*4096, 4096)}}
			}
			_, err = srq.PostRecv(wrs)
			require.NoError(t, err)
			a, err := w.ConnectRC(testbed.ConnOpts{UseSRQ: [2]*provider.SRQ{nil, srq}, Timeout: -1})
			require.NoError(t, err)
			b, err := w.ConnectRC(testbed.ConnOpts{UseSRQ: [2]*provider.SRQ{nil, srq}})
			require.NoError(t, err)
			_, err = a[0].QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{a[0].MR.SGE(0, 3000)}}})
			require.NoError(t, err)
			w.Drain(100000)
			require.Equal(t, 4, srq.Outstanding(), "the device took one, the provider does not know yet")
			require.NoError(t, a[1].QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
			wc := waitOne(t, a[1].RecvCQ)
			require.Equal(t, provider.WCWRFlushErr, wc.Status)
			require.Equal(t, uint64(100), wc.WRID)
			require.Equal(t, 3, srq.Outstanding())
			n, err := a[1].RecvCQ.Poll(make([]provider.WC, 4))
			require.NoError(t, err)
			require.Zero(t, n, "only the WQE it held")
			_, err = b[0].QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{b[0].MR.SGE(0, 3000)}}})
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, waitOne(t, b[0].SendCQ).Status)
			bwc := waitOne(t, b[1].RecvCQ)
			require.Equal(t, provider.WCSuccess, bwc.Status)
			require.Equal(t, uint64(101), bwc.WRID)
			require.Equal(t, uint32(3000), bwc.ByteLen)
		})
	}
}

// TestSRQReceiveTooSmall: a message longer than the SRQ receive it takes
// completes that receive with LOC_LEN_ERR on the QP's receive CQ (its own
// wr_id, the WQE back on the SRQ's free list) and the responder QP goes to
// ERR, the SRQ's other WQE left posted on the SRQ; RC also NAKs it
// (REM_INV_REQ_ERR at the requester). UD (the sender completes, UD has no
// acknowledgement) used to carry on in RTS (TestUDReceiveErrorToErr).
func TestSRQReceiveTooSmall(t *testing.T) {
	for _, c := range []struct {
		name    string
		typ     provider.QPType
		size    uint32
		reqWant provider.WCStatus
	}{
		{"rc_one_packet", provider.QPTypeRC, 600, provider.WCRemInvReqErr},
		{"rc_multi_packet", provider.QPTypeRC, 3000, provider.WCRemInvReqErr},
		{"ud", provider.QPTypeUD, 600, provider.WCSuccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, req, rsp := faulty(t, testbed.ConnOpts{Type: c.typ, SRQ: true})
			_, err := rsp.SRQ.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 256)}},
				{WRID: 8, SGL: []provider.SGE{rsp.MR.SGE(4096, 4096)}}})
			require.NoError(t, err)
			wr := provider.SendWR{WRID: 5, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, c.size)}}
			if c.typ == provider.QPTypeUD {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = req.AH, rsp.QP.QPN(), rsp.QKey
			}
			_, err = req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			require.Equal(t, c.reqWant, waitOne(t, req.SendCQ).Status)
			rwc := waitOne(t, rsp.RecvCQ)
			require.Equal(t, uint64(7), rwc.WRID)
			require.Equal(t, provider.WCLocLenErr, rwc.Status)
			require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
			require.Equal(t, 1, rsp.SRQ.Outstanding(), "only WQE 8 left posted: the SRQ's, not flushed")
		})
	}
}

// TestUDReceiveErrorToErr: a UD receive that completes in error takes the
// QP to ERR, its other receives flushed behind the error CQE (on an SRQ:
// the SRQ keeps them and the QP raises QP_LAST_WQE_REACHED), no other
// async event, and a later datagram finds the QP in ERR and is dropped.
// The receive QP used to stay in RTS and take the next datagram into its
// next WQE. Why ERR: the comment at the end of device's responder.rxUD
// (rxe's class A for an unusable WQE; the IB state machine, assumed for a
// ConnectX, for a datagram too long).
func TestUDReceiveErrorToErr(t *testing.T) {
	for _, c := range []struct {
		name    string
		srq     bool
		badKey  bool   // the first receive's lkey is wrong
		size    uint32 // of the datagram (the first receive is 256 bytes, 40 of them the GRH)
		status  provider.WCStatus
		counter string
	}{
		{"too_long", false, false, 600, provider.WCLocLenErr, device.CtrRxUDTooLong.String()},
		{"too_long_srq", true, false, 600, provider.WCLocLenErr, device.CtrRxUDTooLong.String()},
		{"bad_lkey", false, true, 100, provider.WCLocProtErr, device.CtrRxRecvProt.String()},
		{"bad_lkey_srq", true, true, 100, provider.WCLocProtErr, device.CtrRxRecvProt.String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := faulty(t, testbed.ConnOpts{Type: provider.QPTypeUD, SRQ: c.srq})
			first := rsp.MR.SGE(0, 256)
			if c.badKey {
				first.LKey ^= 0x4400
			}
			recvs := []provider.RecvWR{{WRID: 7, SGL: []provider.SGE{first}}, {WRID: 8, SGL: []provider.SGE{rsp.MR.SGE(4096, 4096)}}}
			var err error
			if c.srq {
				_, err = rsp.SRQ.PostRecv(recvs)
			} else {
				_, err = rsp.QP.PostRecv(recvs)
			}
			require.NoError(t, err)
			asyncEvents(t, w.Hosts[1]) // none so far; clears nothing
			wr := provider.SendWR{WRID: 5, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, c.size)},
				AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}
			_, err = req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status, "UD: the sender knows nothing")
			rwc := waitOne(t, rsp.RecvCQ)
			require.Equal(t, uint64(7), rwc.WRID)
			require.Equal(t, c.status, rwc.Status)
			require.Equal(t, uint64(1), ctr(w, 1, c.counter))
			require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
			require.Equal(t, uint64(1), ctr(w, 1, device.CtrQPToError.String()))
			var wantEvents []mlx5.EventType
			if c.srq {
				require.Equal(t, 1, rsp.SRQ.Outstanding(), "WQE 8 stays on the SRQ")
				wantEvents = []mlx5.EventType{mlx5.EventQPLastWQEReached}
			} else {
				fwc := waitOne(t, rsp.RecvCQ)
				require.Equal(t, uint64(8), fwc.WRID)
				require.Equal(t, provider.WCWRFlushErr, fwc.Status)
			}
			require.Equal(t, wantEvents, asyncEvents(t, w.Hosts[1]))
			// The next datagram finds the QP in ERR: dropped, nothing completes.
			_, err = req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
			w.Settle(1_000_000)
			n, err := rsp.RecvCQ.Poll(make([]provider.WC, 4))
			require.NoError(t, err)
			require.Zero(t, n)
			require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxDropQPState.String()))
		})
	}
}

// hostSRQ makes, on h, an SRQ of maxWR one-entry receives and an n-byte
// buffer registered for local write, for those receives to point into.
func hostSRQ(t *testing.T, h *testbed.Host, maxWR, n int) (*provider.SRQ, provider.Buffer, *provider.MR) {
	t.Helper()
	pd, err := h.Ctx.AllocPD()
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(provider.SRQInitAttr{MaxWR: maxWR, MaxSGE: 1})
	require.NoError(t, err)
	buf, err := h.Ctx.AllocBuffer(n, 4096)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf.Addr, uint64(len(buf.Bytes)), provider.AccessLocalWrite)
	require.NoError(t, err)
	return srq, buf, mr
}
