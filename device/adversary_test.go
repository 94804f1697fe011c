package device_test

import (
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// silentPeer connects a QP pair and moves node 1's QP to ERR, so that
// node 0's requests reach a peer that drops them: nothing answers node 0
// but the frames a test forges "from node 1".
func silentPeer(t *testing.T, o testbed.ConnOpts) *rxWorld {
	r := newRxWorld(t, o)
	require.NoError(t, r.eps[1].QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
	r.w.Settle(0)
	return r
}

// toReq is a well-formed response from node 1 to node 0's QP.
func (r *rxWorld) toReq(op roce.Opcode, psn uint32) roce.FrameParams {
	return roce.FrameParams{SrcMAC: testbed.MACs[1], DstMAC: testbed.MACs[0], SrcIP: testbed.IPs[1], DstIP: testbed.IPs[0],
		TTL: 64, SrcPort: 0xc000,
		BTH: roce.BTHFields{Opcode: op, PKey: 0xffff, DestQP: r.eps[0].QP.QPN(), PSN: roce.PSN(psn)}}
}

// injectReq hands node 0 a forged frame and runs nothing.
func (r *rxWorld) injectReq(t *testing.T, p roce.FrameParams, payload []byte) {
	t.Helper()
	buf := make([]byte, 5000)
	n, err := roce.BuildFrame(buf, &p, payload)
	require.NoError(t, err)
	r.w.Hosts[0].Dev.ReceiveFrame(r.w.Eng.Now(), buf[:n])
}

func (r *rxWorld) reqCtr(name string) uint64 { return r.w.Hosts[0].Dev.Counters().Get(name) }

// runUntil runs node 0's simulation until cond holds (bounded).
func (r *rxWorld) runUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 100000 && !cond(); i++ {
		if !r.w.Eng.Step() {
			break
		}
	}
	require.True(t, cond(), "the condition was never reached")
}

const reqPSN = 0x1000 // node 0's initial send PSN

// TestRequesterRejectsAnswersToUnsentPSNs forges answers "from the peer"
// for PSNs node 0 has assigned to a posted WQE but not yet transmitted
// (held by the 128-PSN window or by max_rd_atomic). A real requester
// takes an ACK, NAK or response only for a PSN it has sent (rxe's
// completer only completes a WQE whose packets were all sent, state
// pending; rocev2.md §4.3): such a frame is a ghost, dropped and counted.
// Before the fix the requester took any PSN below its next PSN to assign:
// the ACK completed a 256-packet WRITE of which 128 packets had never
// left (a completion for data that did not land), and the READ response
// landed bytes into, and completed, a READ never sent.
func TestRequesterRejectsAnswersToUnsentPSNs(t *testing.T) {
	opts := testbed.ConnOpts{MTU: 256, BufSize: 1 << 16, Timeout: 8, RetryCnt: 1, MaxRdAtomic: 1}
	const writePkts = 256 // a 64 KiB WRITE at MTU 256: twice the 128-PSN window
	cases := []struct {
		name string
		// post the WQEs; returns the PSN of one assigned but unsent and
		// the condition under which it is known to be held back.
		post   func(t *testing.T, r *rxWorld) (uint32, func() bool)
		forge  func(r *rxWorld, psn uint32) (roce.FrameParams, []byte)
		status provider.WCStatus // the first send completion, in the end
	}{
		{
			name: "ACK for the last PSN of a WRITE half sent",
			post: func(t *testing.T, r *rxWorld) (uint32, func() bool) {
				r.postWrite(t, 1, 0, 1<<16)
				return reqPSN + writePkts - 1, func() bool { return r.reqCtr(device.CtrWindowStall.String()) > 0 }
			},
			forge: func(r *rxWorld, psn uint32) (roce.FrameParams, []byte) {
				p := r.toReq(roce.OpRCAck, psn)
				p.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: 1}
				return p, nil
			},
			status: provider.WCRetryExcErr,
		},
		{
			name: "PSN-sequence NAK beyond what was sent",
			post: func(t *testing.T, r *rxWorld) (uint32, func() bool) {
				r.postWrite(t, 1, 0, 1<<16)
				return reqPSN + writePkts - 1, func() bool { return r.reqCtr(device.CtrWindowStall.String()) > 0 }
			},
			forge: func(r *rxWorld, psn uint32) (roce.FrameParams, []byte) {
				p := r.toReq(roce.OpRCAck, psn)
				p.AETH = roce.AETHFields{Syndrome: roce.NAKSyndrome(0), MSN: 0}
				return p, nil
			},
			status: provider.WCRetryExcErr,
		},
		{
			name: "RNR NAK beyond what was sent",
			post: func(t *testing.T, r *rxWorld) (uint32, func() bool) {
				r.postWrite(t, 1, 0, 1<<16)
				return reqPSN + writePkts - 1, func() bool { return r.reqCtr(device.CtrWindowStall.String()) > 0 }
			},
			forge: func(r *rxWorld, psn uint32) (roce.FrameParams, []byte) {
				p := r.toReq(roce.OpRCAck, psn)
				p.AETH = roce.AETHFields{Syndrome: roce.RNRNAKSyndrome(1), MSN: 0}
				return p, nil
			},
			status: provider.WCRetryExcErr,
		},
		{
			name: "READ response for a READ held by max_rd_atomic",
			post: func(t *testing.T, r *rxWorld) (uint32, func() bool) {
				// Two 64-byte READs, max_rd_atomic 1: the second waits for
				// the first, which nobody answers.
				req, rsp := r.eps[0], r.eps[1]
				_, err := req.QP.PostSend([]provider.SendWR{
					{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
					{WRID: 2, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(4096, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
				})
				require.NoError(t, err)
				return reqPSN + 1, func() bool { return r.reqCtr(device.CtrWindowStall.String()) > 0 }
			},
			forge: func(r *rxWorld, psn uint32) (roce.FrameParams, []byte) {
				p := r.toReq(roce.OpRCReadResponseOnly, psn)
				p.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: 2}
				return p, forged64
			},
			status: provider.WCRetryExcErr,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := silentPeer(t, opts)
			psn, held := c.post(t, r)
			r.runUntil(t, held)
			p, pl := c.forge(r, psn)
			r.injectReq(t, p, pl)
			require.Equal(t, uint64(1), r.reqCtr(device.CtrACKBadPSN.String()), "the ghost answer is dropped and counted")
			wcs, err := testbed.Wait(r.eps[0].SendCQ, 1)
			require.NoError(t, err)
			require.Equal(t, uint64(1), wcs[0].WRID)
			require.Equal(t, c.status, wcs[0].Status, "a WQE whose packets never all left cannot succeed")
			buf := r.eps[0].Buf.Bytes
			require.NotEqual(t, forged64, buf[4096:4096+64], "no bytes of a forged response land")
		})
	}
}

var forged64 = func() []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = 0xa5
	}
	return b
}()

// postWrite posts one signalled RDMA WRITE of n bytes from node 0's buffer
// at off to node 1's.
func (r *rxWorld) postWrite(t *testing.T, wrid, off uint64, n uint32) {
	t.Helper()
	req, rsp := r.eps[0], r.eps[1]
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: wrid, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(off, n)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
}

// TestResponderMessageInterrupted aims a request that is not the next
// packet of the SEND or WRITE in progress at a live RC responder, with
// the next expected PSN: a READ, an atomic, another message's First or
// Middle. The message in progress misses its Last: the responder NAKs
// invalid request, executes nothing, moves the QP to ERR and completes
// the receive the SEND had taken with REM_INV_REQ_ERR (rxe's
// check_op_seq, a class C error; rocev2.md §4.6 "missing First / missing
// Last"). Before the fix a READ or an atomic inside a message was
// executed and the message then carried on to complete as if nothing had
// come between its packets; a WRITE's First or Middle inside a SEND
// completed the SEND's receive WR_FLUSH_ERR instead of REM_INV_REQ_ERR.
func TestResponderMessageInterrupted(t *testing.T) {
	const mtu = 256
	cases := []struct {
		name  string
		first roce.Opcode // opens the message at ePSN
		next  roce.Opcode // at ePSN+1
		recv  bool        // the message took a receive WQE (a SEND)
	}{
		{"READ inside a SEND", roce.OpRCSendFirst, roce.OpRCReadRequest, true},
		{"FETCH_ADD inside a SEND", roce.OpRCSendFirst, roce.OpRCFetchAdd, true},
		{"CMP_SWAP inside a WRITE", roce.OpRCWriteFirst, roce.OpRCCmpSwap, false},
		{"READ inside a WRITE", roce.OpRCWriteFirst, roce.OpRCReadRequest, false},
		{"WRITE FIRST inside a SEND", roce.OpRCSendFirst, roce.OpRCWriteFirst, true},
		{"WRITE MIDDLE inside a SEND", roce.OpRCSendFirst, roce.OpRCWriteMiddle, true},
		{"WRITE ONLY inside a SEND", roce.OpRCSendFirst, roce.OpRCWriteOnly, true},
		{"SEND ONLY inside a SEND", roce.OpRCSendFirst, roce.OpRCSendOnly, true},
	}
	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRxWorld(t, testbed.ConnOpts{MTU: mtu, Access: all})
			rsp := r.eps[1]
			mem := rsp.Buf.Bytes
			for i := range mem {
				mem[i] = 0
			}
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
			require.NoError(t, err)
			open := r.params(c.first, ePSN)
			open.BTH.AckReq = false
			open.RETH = roce.RETHFields{VA: rsp.MR.Addr + 8192, RKey: rsp.MR.RKey, DMALen: 2 * mtu}
			r.inject(t, open, make([]byte, mtu), nil)
			p := r.params(c.next, ePSN+1)
			p.RETH = roce.RETHFields{VA: rsp.MR.Addr + 16384, RKey: rsp.MR.RKey, DMALen: mtu}
			p.AtomicETH = roce.AtomicETHFields{VA: rsp.MR.Addr + 24576, RKey: rsp.MR.RKey, SwapAdd: 5}
			var pl []byte
			if c.next != roce.OpRCReadRequest && c.next != roce.OpRCFetchAdd && c.next != roce.OpRCCmpSwap {
				pl = make([]byte, mtu)
				for i := range pl {
					pl[i] = 0x5a
				}
			}
			r.inject(t, p, pl, nil)
			rep := r.replies(t)
			require.Len(t, rep, 1, "one answer: the NAK")
			require.Equal(t, roce.OpRCAck, rep[0].Opcode)
			require.True(t, rep[0].AETH.Syndrome().IsNAK())
			require.Equal(t, uint8(1), rep[0].AETH.Syndrome().Value(), "NAK invalid request")
			require.Equal(t, roce.PSN(ePSN+1), rep[0].BTH.PSN())
			st, _ := rsp.QP.QueryState()
			require.Equal(t, mlx5.QPStateERR, st)
			require.Equal(t, make([]byte, 8), mem[24576:24576+8], "no atomic executed")
			require.NotContains(t, string(mem[16384:16384+mtu]), "\x5a", "no WRITE placed")
			require.Zero(t, r.ctr(device.CtrRxReadRequests.String())+r.ctr(device.CtrRxAtomicRequests.String()), "nothing executed")
			if c.recv {
				wcs, err := testbed.Wait(rsp.RecvCQ, 1)
				require.NoError(t, err)
				require.Equal(t, uint64(7), wcs[0].WRID)
				require.Equal(t, provider.WCRemInvReqErr, wcs[0].Status, "the SEND that missed its Last")
			}
		})
	}
}

// TestReplayMatchesItsOwnREAD: a duplicate READ restarts the stream that
// answers that READ, not another stream that merely points at the same
// slot of the resource ring. A replay stream waiting behind a large READ
// keeps a pointer to its resource slot; when a later READ recycles the
// slot, a duplicate of that later READ matched the old replay by the
// pointer alone and replaced it: the older READ's replay was never sent
// and the later READ was answered twice, its first execution still
// counted against max_dest_rd_atomic. Under loss (softnic perf read_bw
// with the faults of a lossy wire) the responder then counted one READ
// too many, NAKed a well-behaved requester's next READ invalid request,
// and both QPs ended in error (RETRY_EXC_ERR). Frames are handed over
// without running the clock, so that every stream is still queued.
func TestReplayMatchesItsOwnREAD(t *testing.T) {
	const mtu = 256
	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	r := newRxWorld(t, testbed.ConnOpts{MTU: mtu, BufSize: 1 << 16, Access: all, MaxDestRdAtomic: 2})
	rsp := r.eps[1]
	for i := range rsp.Buf.Bytes {
		rsp.Buf.Bytes[i] = byte(i / mtu)
	}
	read := func(psn uint32, off uint64, n uint32) {
		p := r.params(roce.OpRCReadRequest, psn)
		p.RETH = roce.RETHFields{VA: rsp.MR.Addr + off, RKey: rsp.MR.RKey, DMALen: n}
		buf := make([]byte, 256)
		k, err := roce.BuildFrame(buf, &p, nil)
		require.NoError(t, err)
		r.w.Hosts[1].Dev.ReceiveFrame(r.w.Eng.Now(), buf[:k])
	}
	const (
		psnA = ePSN      // 1 packet, resource slot 0
		psnC = ePSN + 1  // 64 packets, slot 1: its responses hold up what follows
		psnB = ePSN + 65 // 1 packet, recycles slot 0
	)
	read(psnA, 0, 64)
	read(psnC, 4096, 64*mtu)
	read(psnA, 0, 64) // duplicate of A: a replay queued behind C
	read(psnB, 8*mtu, 64)
	read(psnB, 8*mtu, 64) // duplicate of B: must restart B's stream, not A's replay
	r.w.Settle(0)
	got := map[uint32][]byte{}
	count := map[uint32]int{}
	for _, p := range r.replies(t) {
		if p.Info.Operation != roce.OperationReadResponse {
			continue
		}
		psn := uint32(p.BTH.PSN())
		count[psn]++
		got[psn] = append([]byte(nil), p.Payload...)
	}
	require.Equal(t, 2, count[psnA], "A answered, then replayed")
	require.Equal(t, rsp.Buf.Bytes[:64], got[psnA])
	require.Equal(t, 1, count[psnB], "B's stream restarted in place: answered once")
	require.Equal(t, rsp.Buf.Bytes[8*mtu:8*mtu+64], got[psnB])
	require.Equal(t, 1, count[psnC+63], "C answered to its last packet")
	require.Zero(t, r.ctr(device.CtrRxReadTooMany.String()))
}

// TestResponderAdversarialRequests aims single well-formed frames (valid
// ICRC, the right source) at a live RC responder: unknown QPNs, PSNs at
// the edges of the window, lengths and keys a requester must not send.
// Each is answered as rxe answers it (rocev2.md §4.5-§4.7): dropped and
// counted, NAKed once, re-ACKed, or refused with the NAK the error class
// gives and the QP in ERR; nothing in between.
func TestResponderAdversarialRequests(t *testing.T) {
	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	type reply struct {
		op   roce.Opcode
		synd roce.Syndrome
		psn  uint32
		n    int // payload bytes
	}
	cases := []struct {
		name    string
		op      roce.Opcode
		psn     uint32
		edit    func(r *rxWorld, p *roce.FrameParams)
		payload int
		recv    bool // a receive is posted, and completes with recvSt
		recvSt  provider.WCStatus
		want    []reply
		counter string
		state   mlx5.QPState
		prior   func(t *testing.T, r *rxWorld) // requests executed before, their replies not checked
	}{
		{name: "to QPN 0", op: roce.OpRCSendOnly, psn: ePSN, payload: 8, edit: func(_ *rxWorld, p *roce.FrameParams) { p.BTH.DestQP = 0 },
			counter: device.CtrRxDropNoQP.String(), state: mlx5.QPStateRTS},
		{name: "to QPN 1 (GSI)", op: roce.OpUDSendOnly, psn: ePSN, payload: 8, edit: func(_ *rxWorld, p *roce.FrameParams) { p.BTH.DestQP = 1 },
			counter: device.CtrRxDropNoQP.String(), state: mlx5.QPStateRTS},
		{name: "to QPN 0xffffff (multicast)", op: roce.OpUDSendOnly, psn: ePSN, payload: 8, edit: func(_ *rxWorld, p *roce.FrameParams) { p.BTH.DestQP = 0xffffff },
			counter: device.CtrRxDropNoQP.String(), state: mlx5.QPStateRTS},
		{name: "PSN 2^23-1 ahead: out of sequence", op: roce.OpRCWriteOnly, psn: (ePSN + 1<<23 - 1) & 0xffffff,
			want: []reply{{roce.OpRCAck, roce.NAKSyndrome(0), ePSN, 0}}, counter: device.CtrOutOfSequence.String(), state: mlx5.QPStateRTS},
		{name: "PSN 2^23 ahead: a duplicate", op: roce.OpRCWriteOnly, psn: (ePSN + 1<<23) & 0xffffff,
			want: []reply{{roce.OpRCAck, roce.ACKSyndrome(0x1f), ePSN - 1, 0}}, counter: device.CtrDuplicateRequest.String(), state: mlx5.QPStateRTS},
		{name: "zero-length WRITE with a bogus rkey and VA", op: roce.OpRCWriteOnly, psn: ePSN,
			edit: func(_ *rxWorld, p *roce.FrameParams) { p.RETH = roce.RETHFields{VA: 0xdead, RKey: 0x12345} },
			want: []reply{{roce.OpRCAck, roce.ACKSyndrome(0x1f), ePSN, 0}}, counter: device.CtrRxWriteRequests.String(), state: mlx5.QPStateRTS},
		{name: "WRITE ONLY shorter than its RETH length", op: roce.OpRCWriteOnly, psn: ePSN, payload: 50,
			edit: func(r *rxWorld, p *roce.FrameParams) {
				p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey, DMALen: 100}
			},
			want: []reply{{roce.OpRCAck, roce.NAKSyndrome(1), ePSN, 0}}, counter: device.CtrRxBadLength.String(), state: mlx5.QPStateERR},
		{name: "WRITE of 4 GiB - 1 into a 64 KiB MR", op: roce.OpRCWriteOnly, psn: ePSN, payload: 50,
			edit: func(r *rxWorld, p *roce.FrameParams) {
				p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey, DMALen: 0xffffffff}
			},
			want: []reply{{roce.OpRCAck, roce.NAKSyndrome(2), ePSN, 0}}, counter: device.CtrRxWriteRKey.String(), state: mlx5.QPStateERR},
		{name: "READ whose VA wraps", op: roce.OpRCReadRequest, psn: ePSN,
			edit: func(r *rxWorld, p *roce.FrameParams) {
				p.RETH = roce.RETHFields{VA: 0xffffffffffffff00, RKey: r.eps[1].MR.RKey, DMALen: 0x200}
			},
			want: []reply{{roce.OpRCAck, roce.NAKSyndrome(2), ePSN, 0}}, counter: device.CtrRxReadRKey.String(), state: mlx5.QPStateERR},
		{name: "zero-length READ with a bogus rkey", op: roce.OpRCReadRequest, psn: ePSN,
			edit: func(_ *rxWorld, p *roce.FrameParams) { p.RETH = roce.RETHFields{VA: 1, RKey: 0x999} },
			want: []reply{{roce.OpRCReadResponseOnly, roce.ACKSyndrome(0x1f), ePSN, 0}}, counter: device.CtrRxReadRequests.String(), state: mlx5.QPStateRTS},
		{name: "FETCH_ADD at a misaligned address", op: roce.OpRCFetchAdd, psn: ePSN,
			edit: func(r *rxWorld, p *roce.FrameParams) {
				p.AtomicETH = roce.AtomicETHFields{VA: r.eps[1].MR.Addr + 4, RKey: r.eps[1].MR.RKey, SwapAdd: 1}
			},
			want: []reply{{roce.OpRCAck, roce.NAKSyndrome(1), ePSN, 0}}, counter: device.CtrRxAtomicMisaligned.String(), state: mlx5.QPStateERR},
		{name: "SEND ONLY larger than the MTU", op: roce.OpRCSendOnly, psn: ePSN, payload: 1500, recv: true, recvSt: provider.WCRemInvReqErr,
			want: []reply{{roce.OpRCAck, roce.NAKSyndrome(1), ePSN, 0}}, counter: device.CtrRxBadLength.String(), state: mlx5.QPStateERR},
		{name: "WRITE LAST without a FIRST", op: roce.OpRCWriteLast, psn: ePSN, payload: 8,
			want: []reply{{roce.OpRCAck, roce.NAKSyndrome(1), ePSN, 0}}, counter: device.CtrRxMissingFirst.String(), state: mlx5.QPStateERR},
		// A duplicate READ at the PSN of an old WRITE: no READ resource
		// holds it, so rxe drops it (duplicate_request: find_resource
		// fails, class D). Before the fix softnic read the memory again
		// and answered with READ responses under the WRITE's PSNs.
		{name: "duplicate READ at an old WRITE's PSN", op: roce.OpRCReadRequest, psn: ePSN, prior: writeOnlyAt(ePSN, 64),
			edit: func(r *rxWorld, p *roce.FrameParams) {
				p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey, DMALen: 64}
			},
			counter: device.CtrReplayMiss.String(), state: mlx5.QPStateRTS},
		{name: "duplicate 2-packet READ over two old WRITEs", op: roce.OpRCReadRequest, psn: ePSN,
			prior: func(t *testing.T, r *rxWorld) { writeOnlyAt(ePSN, 8)(t, r); writeOnlyAt(ePSN+1, 8)(t, r) },
			edit: func(r *rxWorld, p *roce.FrameParams) {
				p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey, DMALen: 1500}
			},
			counter: device.CtrReplayMiss.String(), state: mlx5.QPStateRTS},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRxWorld(t, testbed.ConnOpts{Access: all})
			rsp := r.eps[1]
			if c.prior != nil {
				c.prior(t, r)
				r.raw = nil
			}
			if c.recv {
				_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
				require.NoError(t, err)
			}
			p := r.params(c.op, c.psn)
			if c.edit != nil {
				c.edit(r, &p)
			}
			var pl []byte
			if c.payload > 0 {
				pl = make([]byte, c.payload)
			}
			r.inject(t, p, pl, nil)
			var got []reply
			for _, q := range r.replies(t) {
				got = append(got, reply{q.Opcode, q.AETH.Syndrome(), uint32(q.BTH.PSN()), len(q.Payload)})
			}
			require.Equal(t, c.want, got)
			require.Equal(t, uint64(1), r.ctr(c.counter), c.counter)
			st, _ := rsp.QP.QueryState()
			require.Equal(t, c.state, st)
			if c.recv {
				wcs, err := testbed.Wait(rsp.RecvCQ, 1)
				require.NoError(t, err)
				require.Equal(t, c.recvSt, wcs[0].Status)
			}
		})
	}
}

// writeOnlyAt has node 1 execute a WRITE ONLY of n bytes at the start of
// its MR with PSN psn, ACKed.
func writeOnlyAt(psn uint32, n int) func(t *testing.T, r *rxWorld) {
	return func(t *testing.T, r *rxWorld) {
		t.Helper()
		p := r.params(roce.OpRCWriteOnly, psn)
		p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey, DMALen: uint32(n)}
		before := r.ctr(device.CtrRxWriteRequests.String())
		r.inject(t, p, make([]byte, n), nil)
		require.Equal(t, before+1, r.ctr(device.CtrRxWriteRequests.String()), "the WRITE executed")
	}
}

// TestResponseOfTheWrongKindAcksWhatPrecedes: a READ response or an atomic
// ACK carrying the PSN of a later WRITE fails that WRITE with BAD_RESP,
// but, like every response, it first acknowledges the requests before its
// PSN (rxe's completer completes those, then fails the WQE the response
// does not fit; rocev2.md §4.3, §4.6). Before the fix the WRITE before it,
// fully sent, was flushed WR_FLUSH_ERR as if it had never been answered.
func TestResponseOfTheWrongKindAcksWhatPrecedes(t *testing.T) {
	cases := []struct {
		name string
		op   roce.Opcode
	}{
		{"READ RESPONSE ONLY", roce.OpRCReadResponseOnly},
		{"ATOMIC ACKNOWLEDGE", roce.OpRCAtomicAck},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := silentPeer(t, testbed.ConnOpts{Timeout: 10})
			r.postWrite(t, 1, 0, 64)
			r.postWrite(t, 2, 64, 64)
			r.runUntil(t, func() bool { return r.reqCtr(device.CtrTxPackets.String()) >= 2 })
			p := r.toReq(c.op, reqPSN+1)
			p.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: 2}
			var pl []byte
			if c.op == roce.OpRCReadResponseOnly {
				pl = make([]byte, 64)
			}
			r.injectReq(t, p, pl)
			wcs, err := testbed.Wait(r.eps[0].SendCQ, 2)
			require.NoError(t, err)
			require.Equal(t, uint64(1), wcs[0].WRID)
			require.Equal(t, provider.WCSuccess, wcs[0].Status, "implicitly acknowledged by the response after it")
			require.Equal(t, uint64(2), wcs[1].WRID)
			require.Equal(t, provider.WCBadRespErr, wcs[1].Status)
			st, _ := r.eps[0].QP.QueryState()
			require.Equal(t, mlx5.QPStateERR, st)
		})
	}
}

// TestUCAdversarialSequences aims frame sequences at a live UC responder.
// UC never answers and never goes to ERR over what a peer sends: a
// message damaged by a lost, reordered or refused packet is dropped and
// counted, its receive WQE kept for the next message, and reception goes
// on at the next First or Only (IB spec; rxe's class D1). UC has no
// duplicate detection: a SEND ONLY that arrives twice is two messages, as
// on rxe.
func TestUCAdversarialSequences(t *testing.T) {
	const mtu = 256
	type fr struct {
		op     roce.Opcode
		psn    uint32
		n      int
		badKey bool
	}
	type wc struct {
		wrid uint64
		len  uint32
	}
	cases := []struct {
		name     string
		frames   []fr
		want     []wc // receive completions, all successful
		counters map[string]uint64
	}{
		{"SEND MIDDLE without a FIRST", []fr{{roce.OpUCSendMiddle, ePSN, mtu, false}, {roce.OpUCSendOnly, ePSN + 1, 10, false}},
			[]wc{{7, 10}}, map[string]uint64{device.CtrRxUCError.String(): 1}},
		{"WRITE FIRST with a bad rkey, then its LAST", []fr{{roce.OpUCWriteFirst, ePSN, mtu, true}, {roce.OpUCWriteLast, ePSN + 1, 10, false}, {roce.OpUCSendOnly, ePSN + 2, 10, false}},
			[]wc{{7, 10}}, map[string]uint64{device.CtrRxUCError.String(): 2}},
		{"a FIRST while a SEND is open", []fr{{roce.OpUCSendFirst, ePSN, mtu, false}, {roce.OpUCSendFirst, ePSN + 1, mtu, false}, {roce.OpUCSendLast, ePSN + 2, 10, false}},
			[]wc{{7, mtu + 10}}, map[string]uint64{device.CtrRxUCDropped.String(): 1}},
		{"a lost MIDDLE", []fr{{roce.OpUCSendFirst, ePSN, mtu, false}, {roce.OpUCSendLast, ePSN + 2, 10, false}, {roce.OpUCSendOnly, ePSN + 3, 10, false}},
			[]wc{{7, 10}}, map[string]uint64{device.CtrRxUCDropped.String(): 1, device.CtrOutOfSequence.String(): 1}},
		{"SEND ONLY over the MTU", []fr{{roce.OpUCSendOnly, ePSN, mtu + 4, false}, {roce.OpUCSendOnly, ePSN + 1, 10, false}},
			[]wc{{7, 10}}, map[string]uint64{device.CtrRxBadLength.String(): 1, device.CtrRxUCError.String(): 1}},
		{"a SEND ONLY twice", []fr{{roce.OpUCSendOnly, ePSN, 20, false}, {roce.OpUCSendOnly, ePSN, 20, false}},
			[]wc{{7, 20}, {8, 20}}, map[string]uint64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRxWorld(t, testbed.ConnOpts{Type: provider.QPTypeUC, MTU: mtu, Access: provider.AccessLocalWrite | provider.AccessRemoteWrite})
			rsp := r.eps[1]
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 2048)}}, {WRID: 8, SGL: []provider.SGE{rsp.MR.SGE(4096, 2048)}}})
			require.NoError(t, err)
			for _, f := range c.frames {
				p := r.params(f.op, f.psn)
				p.BTH.AckReq = false
				p.RETH = roce.RETHFields{VA: rsp.MR.Addr + 8192, RKey: rsp.MR.RKey, DMALen: mtu + 10}
				if f.badKey {
					p.RETH.RKey ^= 0x100
				}
				r.inject(t, p, make([]byte, f.n), nil)
			}
			require.Empty(t, r.raw, "UC answers nothing")
			st, _ := rsp.QP.QueryState()
			require.Equal(t, mlx5.QPStateRTS, st)
			var got []wc
			wcs := make([]provider.WC, 4)
			n, err := rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			for _, w := range wcs[:n] {
				require.Equal(t, provider.WCSuccess, w.Status, "WR %d", w.WRID)
				got = append(got, wc{w.WRID, w.ByteLen})
			}
			require.Equal(t, c.want, got)
			for name, v := range c.counters {
				require.Equal(t, v, r.ctr(name), name)
			}
		})
	}
}

// postRead posts one signalled READ of n bytes into node 0's buffer at off
// from node 1's MR at off.
func (r *rxWorld) postRead(t *testing.T, wrid, off uint64, n uint32) {
	t.Helper()
	req, rsp := r.eps[0], r.eps[1]
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: wrid, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(off, n)}, RemoteAddr: rsp.MR.Addr + off, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
}

// TestRequesterReadResponseSequence forges READ responses "from the peer"
// at the PSN where a READ's response stream must open. rxe's completer
// checks the response opcode sequence (check_ack): while no READ
// response is open, a packet without the start mask (a MIDDLE or a LAST)
// is an error and the QP goes to ERR; softnic completes the READ with
// BAD_RESP_ERR. Before the fix a MIDDLE was taken as the READ's first
// 256 bytes (the READ then timed out, RETRY_EXC_ERR), and a LAST of the
// right length completed a one-packet READ successfully.
func TestRequesterReadResponseSequence(t *testing.T) {
	const mtu = 256
	cases := []struct {
		name   string
		size   uint32 // the READ's length
		op     roce.Opcode
		n      int // payload bytes
		status provider.WCStatus
		ctr    string // counted once (failures)
	}{
		{"MIDDLE where the FIRST is due", 3 * mtu, roce.OpRCReadResponseMiddle, mtu, provider.WCBadRespErr, device.CtrReadRespNoFirst.String()},
		{"LAST where the FIRST is due", 3 * mtu, roce.OpRCReadResponseLast, mtu, provider.WCBadRespErr, device.CtrReadRespNoFirst.String()},
		{"LAST where the ONLY is due", 64, roce.OpRCReadResponseLast, 64, provider.WCBadRespErr, device.CtrReadRespNoFirst.String()},
		{"ONLY where the ONLY is due (control)", 64, roce.OpRCReadResponseOnly, 64, provider.WCSuccess, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := silentPeer(t, testbed.ConnOpts{MTU: mtu, Timeout: 8, RetryCnt: 1})
			r.postRead(t, 1, 0, c.size)
			r.runUntil(t, func() bool { return r.reqCtr(device.CtrTxPackets.String()) >= 1 })
			p := r.toReq(c.op, reqPSN)
			if c.op != roce.OpRCReadResponseMiddle {
				p.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: 1}
			}
			pl := make([]byte, c.n)
			for i := range pl {
				pl[i] = 0xa5
			}
			r.injectReq(t, p, pl)
			wcs, err := testbed.Wait(r.eps[0].SendCQ, 1)
			require.NoError(t, err)
			require.Equal(t, uint64(1), wcs[0].WRID)
			require.Equal(t, c.status, wcs[0].Status)
			st, _ := r.eps[0].QP.QueryState()
			if c.status == provider.WCSuccess {
				require.Equal(t, mlx5.QPStateRTS, st)
				require.Zero(t, r.reqCtr(device.CtrReadRespNoFirst.String()))
				return
			}
			require.Equal(t, mlx5.QPStateERR, st)
			require.Equal(t, uint64(1), r.reqCtr(c.ctr), c.ctr)
			require.Zero(t, r.reqCtr(device.CtrImpliedNAKSeqErr.String())+r.reqCtr(device.CtrLocalACKTimeoutErr.String()), "failed at once, no retry")
			require.NotContains(t, string(r.eps[0].Buf.Bytes[:c.size]), "\xa5", "no forged byte lands")
		})
	}
}

// TestBadResponseBuildsNoFrames: a response of the wrong kind
// acknowledges the requests before the WQE it does not fit, then fails
// that WQE and moves the QP to ERR. The acknowledgement opens the send
// window (here 128 PSNs, held by a long WRITE), but nothing may be built
// into it: the QP is going to ERR, and every frame built would be dropped
// (tx_drop_destroyed_qp). Before the fix the acknowledgement pumped one
// more packet of the long WRITE, built only to be dropped.
func TestBadResponseBuildsNoFrames(t *testing.T) {
	const mtu = 256
	cases := []struct {
		name   string
		read   bool        // WQE 2 is a READ (else a WRITE)
		op     roce.Opcode // the response at WQE 2's PSN
		nak    uint8       // with op ACKNOWLEDGE: the NAK code
		n      int         // its payload
		ctr    string
		status provider.WCStatus // WQE 2's
	}{
		{"READ RESPONSE ONLY for a WRITE", false, roce.OpRCReadResponseOnly, 0, 64, device.CtrRxResponseBadOpcode.String(), provider.WCBadRespErr},
		{"ATOMIC ACKNOWLEDGE for a WRITE", false, roce.OpRCAtomicAck, 0, 0, device.CtrRxResponseBadOpcode.String(), provider.WCBadRespErr},
		{"READ RESPONSE MIDDLE where the READ's FIRST is due", true, roce.OpRCReadResponseMiddle, 0, mtu, device.CtrReadRespNoFirst.String(), provider.WCBadRespErr},
		{"READ RESPONSE FIRST short of the MTU", true, roce.OpRCReadResponseFirst, 0, mtu / 2, device.CtrRxResponseLength.String(), provider.WCBadRespErr},
		{"NAK remote access error", false, roce.OpRCAck, 2, 0, device.CtrReqRemoteAccessErrors.String(), provider.WCRemAccessErr},
		{"NAK invalid request", false, roce.OpRCAck, 1, 0, device.CtrReqRemoteInvalidRequest.String(), provider.WCRemInvReqErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := silentPeer(t, testbed.ConnOpts{MTU: mtu, Timeout: 10})
			r.postWrite(t, 1, 0, 64)
			if c.read {
				r.postRead(t, 2, 64, 3*mtu)
			} else {
				r.postWrite(t, 2, 64, 64)
			}
			r.postWrite(t, 3, 4096, 200*mtu) // PSNs 2..201: the window stops it at 127
			// Run until the window stops the long WRITE and its packets
			// have left the port (long before the retry timeout).
			tx, drop := device.CtrTxPackets.String(), device.CtrTxDropDestroyed.String()
			r.runUntil(t, func() bool { return r.reqCtr(device.CtrWindowStall.String()) > 0 })
			r.w.Eng.RunUntil(r.w.Eng.Now().Add(50 * sim.Microsecond))
			sent := uint64(128) // PSNs 0..127
			if c.read {
				sent = 126 // the READ takes 3 PSNs for its 3 responses
			}
			require.Equal(t, sent, r.reqCtr(tx), "the window holds the long WRITE")
			require.Zero(t, r.reqCtr(drop))
			p := r.toReq(c.op, reqPSN+1)
			switch c.op {
			case roce.OpRCAck:
				p.AETH = roce.AETHFields{Syndrome: roce.NAKSyndrome(c.nak), MSN: 1}
			case roce.OpRCReadResponseOnly, roce.OpRCAtomicAck, roce.OpRCReadResponseFirst:
				p.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: 2}
			}
			r.injectReq(t, p, make([]byte, c.n))
			wcs, err := testbed.Wait(r.eps[0].SendCQ, 3)
			require.NoError(t, err)
			require.Equal(t, []uint64{1, 2, 3}, []uint64{wcs[0].WRID, wcs[1].WRID, wcs[2].WRID})
			require.Equal(t, []provider.WCStatus{provider.WCSuccess, c.status, provider.WCWRFlushErr},
				[]provider.WCStatus{wcs[0].Status, wcs[1].Status, wcs[2].Status})
			st, _ := r.eps[0].QP.QueryState()
			require.Equal(t, mlx5.QPStateERR, st)
			r.w.Settle(0)
			require.Equal(t, uint64(1), r.reqCtr(c.ctr), c.ctr)
			require.Zero(t, r.reqCtr(drop), "no frame built only to be dropped")
			require.Equal(t, sent, r.reqCtr(tx), "no packet built after the bad response")
		})
	}
}

// TestRequesterACKInsideRead forges an ACK "from the peer" whose PSN is
// one of an unanswered READ's (or atomic's) response PSNs. Only an ACK
// beyond a READ/atomic's last PSN implies its responses were lost
// (rocev2.md §4.3; rxe's check_psn: psn_compare(psn, last_psn) > 0): one
// inside acknowledges the requests before the READ and is otherwise
// dropped (rx_ack_inside_read). Before the fix an ACK equal to the
// READ's last PSN was taken as an implied NAK and the READ asked again.
func TestRequesterACKInsideRead(t *testing.T) {
	const mtu = 256
	cases := []struct {
		name    string
		post    func(t *testing.T, r *rxWorld) int // posts; returns the number of packets sent
		psn     uint32                             // the ACK's
		implied uint64                             // implied_nak_seq_err expected
		inside  uint64                             // rx_ack_inside_read expected
		first   provider.WCStatus                  // status of WR 1
	}{
		{name: "ACK at the last PSN of a 3-packet READ",
			post: func(t *testing.T, r *rxWorld) int { r.postRead(t, 1, 0, 3*mtu); return 1 },
			psn:  reqPSN + 2, inside: 1, first: provider.WCRetryExcErr},
		{name: "ACK at the middle PSN of a 3-packet READ",
			post: func(t *testing.T, r *rxWorld) int { r.postRead(t, 1, 0, 3*mtu); return 1 },
			psn:  reqPSN + 1, inside: 1, first: provider.WCRetryExcErr},
		{name: "ACK at a one-packet READ's PSN",
			post: func(t *testing.T, r *rxWorld) int { r.postRead(t, 1, 0, 64); return 1 },
			psn:  reqPSN, inside: 1, first: provider.WCRetryExcErr},
		{name: "ACK at a FETCH_ADD's PSN",
			post: func(t *testing.T, r *rxWorld) int {
				req, rsp := r.eps[0], r.eps[1]
				_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled,
					SGL: []provider.SGE{req.MR.SGE(0, 8)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey, CompareAdd: 1}})
				require.NoError(t, err)
				return 1
			},
			psn: reqPSN, inside: 1, first: provider.WCRetryExcErr},
		{name: "ACK inside a READ acknowledges the WRITE before it",
			post: func(t *testing.T, r *rxWorld) int { r.postWrite(t, 1, 0, 64); r.postRead(t, 2, 4096, 3*mtu); return 2 },
			psn:  reqPSN + 3, inside: 1, first: provider.WCSuccess},
		{name: "ACK beyond a READ implies a NAK (control)",
			post: func(t *testing.T, r *rxWorld) int { r.postRead(t, 1, 0, 64); r.postWrite(t, 2, 4096, 64); return 2 },
			psn:  reqPSN + 1, implied: 1, first: provider.WCRetryExcErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := silentPeer(t, testbed.ConnOpts{MTU: mtu, Timeout: 8, RetryCnt: 1, Access: provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic})
			n := c.post(t, r)
			r.runUntil(t, func() bool { return r.reqCtr(device.CtrTxPackets.String()) >= uint64(n) })
			sent := r.reqCtr(device.CtrTxPackets.String())
			p := r.toReq(roce.OpRCAck, c.psn)
			p.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: 1}
			r.injectReq(t, p, nil)
			r.runUntil(t, func() bool {
				return r.reqCtr(device.CtrACKInsideRead.String())+r.reqCtr(device.CtrImpliedNAKSeqErr.String()) > 0
			})
			require.Equal(t, c.inside, r.reqCtr(device.CtrACKInsideRead.String()), "dropped as inside")
			require.Equal(t, c.implied, r.reqCtr(device.CtrImpliedNAKSeqErr.String()), "implied NAK")
			if c.implied == 0 {
				require.Equal(t, sent, r.reqCtr(device.CtrTxPackets.String()), "nothing asked again")
			}
			wcs, err := testbed.Wait(r.eps[0].SendCQ, 1)
			require.NoError(t, err)
			require.Equal(t, uint64(1), wcs[0].WRID)
			require.Equal(t, c.first, wcs[0].Status)
		})
	}
}
