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

// rxWorld connects a QP pair and records the frames node 1 sends back.
type rxWorld struct {
	w    *testbed.World
	eps  [2]*testbed.Endpoint
	back []roce.Packet
	raw  [][]byte
}

func newRxWorld(t *testing.T, o testbed.ConnOpts) *rxWorld {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(o)
	require.NoError(t, err)
	r := &rxWorld{w: w, eps: eps}
	w.Link.AddTap(func(_ sim.Time, f []byte) {
		var p roce.Packet
		if roce.ParseFrame(f, &p) == nil && p.SrcIP == testbed.IPs[1] {
			r.raw = append(r.raw, append([]byte(nil), f...))
		}
	})
	return r
}

// params is a well-formed request from node 0 to node 1's QP.
func (r *rxWorld) params(op roce.Opcode, psn uint32) roce.FrameParams {
	return roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1],
		TTL: 64, SrcPort: 0xc000,
		BTH: roce.BTHFields{Opcode: op, PKey: 0xffff, DestQP: r.eps[1].QP.QPN(), PSN: roce.PSN(psn), AckReq: true}}
}

func (r *rxWorld) inject(t *testing.T, p roce.FrameParams, payload []byte, mutate func([]byte)) {
	t.Helper()
	buf := make([]byte, 5000)
	n, err := roce.BuildFrame(buf, &p, payload)
	require.NoError(t, err)
	f := buf[:n]
	if mutate != nil {
		mutate(f)
	}
	r.w.Hosts[1].Dev.ReceiveFrame(r.w.Eng.Now(), f)
	r.w.Settle(0)
}

func (r *rxWorld) replies(t *testing.T) []roce.Packet {
	var out []roce.Packet
	for _, f := range r.raw {
		var p roce.Packet
		require.NoError(t, roce.ParseFrame(f, &p))
		out = append(out, p)
	}
	return out
}

func (r *rxWorld) ctr(name string) uint64 { return r.w.Hosts[1].Dev.Counters().Get(name) }

const ePSN = 0x1000 // testbed's default initial PSN of node 0 = node 1's expected PSN

func TestReceiveDrops(t *testing.T) {
	cases := []struct {
		name    string
		op      roce.Opcode
		edit    func(*roce.FrameParams)
		mutate  func([]byte)
		counter string
	}{
		{"bad ICRC", roce.OpRCSendOnly, nil, func(f []byte) { f[len(f)-1] ^= 0xff }, "rx_drop_bad_icrc"},
		{"truncated", roce.OpRCSendOnly, nil, func(f []byte) { f[17] = 0xff }, "rx_drop_malformed"},
		{"not RoCE (ARP)", roce.OpRCSendOnly, nil, func(f []byte) { f[12], f[13] = 0x08, 0x06 }, "rx_drop_not_roce"},
		{"wrong MAC", roce.OpRCSendOnly, func(p *roce.FrameParams) { p.DstMAC[5] = 0x99 }, nil, "rx_drop_wrong_mac"},
		{"wrong IP", roce.OpRCSendOnly, func(p *roce.FrameParams) { p.DstIP = testbed.IPs[0] }, nil, "rx_drop_wrong_ip"},
		{"no such QP", roce.OpRCSendOnly, func(p *roce.FrameParams) { p.BTH.DestQP = 0x7777 }, nil, "rx_drop_no_qp"},
		{"UC opcode on RC QP", roce.OpUCSendOnly, nil, nil, "rx_drop_bad_transport"},
		{"bad P_Key", roce.OpRCSendOnly, func(p *roce.FrameParams) { p.BTH.PKey = 0x1234 }, nil, "rx_drop_bad_pkey"},
		{"wrong source", roce.OpRCSendOnly, func(p *roce.FrameParams) { p.SrcIP = testbed.IPs[1] }, nil, "rx_drop_bad_src"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRxWorld(t, testbed.ConnOpts{})
			p := r.params(c.op, ePSN)
			if c.edit != nil {
				c.edit(&p)
			}
			r.inject(t, p, []byte("payload!"), c.mutate)
			require.Equal(t, uint64(1), r.ctr(c.counter), "counter %s", c.counter)
			require.Zero(t, r.ctr("rx_packets"), "nothing reached the transport")
			require.Empty(t, r.raw, "a dropped frame gets no answer")
		})
	}
}

func TestResponderSequenceAndErrors(t *testing.T) {
	t.Run("PSN ahead is NAKed once", func(t *testing.T) {
		r := newRxWorld(t, testbed.ConnOpts{})
		r.inject(t, r.params(roce.OpRCWriteOnly, ePSN+5), nil, nil)
		r.inject(t, r.params(roce.OpRCWriteOnly, ePSN+6), nil, nil)
		rep := r.replies(t)
		require.Len(t, rep, 1)
		require.Equal(t, roce.OpRCAck, rep[0].Opcode)
		require.True(t, rep[0].AETH.Syndrome().IsNAK())
		require.Equal(t, uint8(0), rep[0].AETH.Syndrome().Value(), "PSN sequence error")
		require.Equal(t, roce.PSN(ePSN), rep[0].BTH.PSN())
		require.Equal(t, uint64(2), r.ctr(device.CtrOutOfSequence.String()))
	})
	t.Run("duplicate is re-ACKed with the last good PSN", func(t *testing.T) {
		r := newRxWorld(t, testbed.ConnOpts{})
		r.inject(t, r.params(roce.OpRCWriteOnly, ePSN-1), nil, nil)
		rep := r.replies(t)
		require.Len(t, rep, 1)
		require.True(t, rep[0].AETH.Syndrome().IsACK())
		require.Equal(t, roce.PSN(ePSN-1), rep[0].BTH.PSN())
		require.Equal(t, uint64(1), r.ctr(device.CtrDuplicateRequest.String()))
	})
	t.Run("middle without first", func(t *testing.T) {
		r := newRxWorld(t, testbed.ConnOpts{MTU: 256})
		r.inject(t, r.params(roce.OpRCSendMiddle, ePSN), make([]byte, 256), nil)
		rep := r.replies(t)
		require.Len(t, rep, 1)
		require.Equal(t, uint8(1), rep[0].AETH.Syndrome().Value(), "NAK invalid request")
		require.Equal(t, uint64(1), r.ctr("rx_missing_first"))
		st, _ := r.eps[1].QP.QueryState()
		require.Equal(t, mlx5.QPStateERR, st)
	})
	t.Run("first shorter than the MTU", func(t *testing.T) {
		r := newRxWorld(t, testbed.ConnOpts{MTU: 256})
		p := r.params(roce.OpRCWriteFirst, ePSN)
		p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey, DMALen: 1000}
		r.inject(t, p, make([]byte, 100), nil)
		require.Equal(t, uint64(1), r.ctr("rx_bad_length"))
		require.True(t, r.replies(t)[0].AETH.Syndrome().IsNAK())
	})
	t.Run("write with a bad rkey", func(t *testing.T) {
		r := newRxWorld(t, testbed.ConnOpts{})
		p := r.params(roce.OpRCWriteOnly, ePSN)
		p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey + 0x100, DMALen: 8}
		r.inject(t, p, make([]byte, 8), nil)
		rep := r.replies(t)
		require.Equal(t, uint8(2), rep[0].AETH.Syndrome().Value(), "NAK remote access")
		require.Equal(t, uint64(1), r.ctr("rx_write_rkey"))
	})
	t.Run("read without remote-read access", func(t *testing.T) {
		r := newRxWorld(t, testbed.ConnOpts{Access: 1 | 2}) // local + remote write only
		p := r.params(roce.OpRCReadRequest, ePSN)
		p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey, DMALen: 8}
		r.inject(t, p, nil, nil)
		require.Equal(t, uint64(1), r.ctr("rx_read_not_allowed"))
		require.Equal(t, uint8(1), r.replies(t)[0].AETH.Syndrome().Value())
	})
	t.Run("send with no receive posted is RNR-NAKed", func(t *testing.T) {
		r := newRxWorld(t, testbed.ConnOpts{MinRNR: 5})
		r.inject(t, r.params(roce.OpRCSendOnly, ePSN), []byte("x"), nil)
		rep := r.replies(t)
		require.True(t, rep[0].AETH.Syndrome().IsRNRNAK())
		require.Equal(t, uint8(5), rep[0].AETH.Syndrome().Value())
		st, _ := r.eps[1].QP.QueryState()
		require.Equal(t, mlx5.QPStateRTS, st, "RNR changes no state")
	})
	t.Run("atomic without remote-atomic access", func(t *testing.T) {
		r := newRxWorld(t, testbed.ConnOpts{})
		r.inject(t, r.params(roce.OpRCFetchAdd, ePSN), nil, nil)
		require.Equal(t, uint64(1), r.ctr(device.CtrRxAtomicNotAllowed.String()))
		require.Equal(t, uint8(1), r.replies(t)[0].AETH.Syndrome().Value())
	})
}

// TestSendWithInvalidateOfInvalidatableKey: a SEND with invalidate naming
// a key that may be invalidated remotely (reachable only through a test
// hook: the model registers no such key) invalidates it: the receive
// completes with IBV_WC_WITH_INV and the rkey, the packet is ACKed, the
// QP stays in RTS, and a WRITE through the key is then NAKed with a remote
// access error. Before the fix the WRITE was ACKed and the receive carried
// no WITH_INV.
func TestSendWithInvalidateOfInvalidatableKey(t *testing.T) {
	cases := []struct {
		name   string
		mtu    int
		frames []roce.Opcode // the last carries the IETH
	}{
		{name: "SEND_ONLY_WITH_INVALIDATE", frames: []roce.Opcode{roce.OpRCSendOnlyInv}},
		{name: "SEND_LAST_WITH_INVALIDATE after FIRST", mtu: 256, frames: []roce.Opcode{roce.OpRCSendFirst, roce.OpRCSendLastInv}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRxWorld(t, testbed.ConnOpts{MTU: c.mtu})
			rsp := r.eps[1]
			// The key invalidated is a second MR over the upper half of
			// the buffer; the receive lands in the first MR.
			half := uint64(len(rsp.Buf.Bytes) / 2)
			mr, err := rsp.PD.RegMR(rsp.Buf.Addr+half, half, rsp.MR.Access)
			require.NoError(t, err)
			require.True(t, r.w.Hosts[1].Dev.AllowRemoteInvalidate(mr.RKey))
			_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 1024)}}})
			require.NoError(t, err)
			psn := uint32(ePSN)
			total := 0
			for i, op := range c.frames {
				p := r.params(op, psn)
				p.BTH.AckReq = i == len(c.frames)-1
				p.InvRKey = mr.RKey
				n := 256
				if i == len(c.frames)-1 {
					n = 40
				}
				r.inject(t, p, make([]byte, n), nil)
				psn++
				total += n
			}
			wcs, err := testbed.Wait(rsp.RecvCQ, 1)
			require.NoError(t, err)
			wc := wcs[0]
			require.Equal(t, provider.WCSuccess, wc.Status)
			require.Equal(t, provider.WCRecv, wc.Opcode)
			require.NotZero(t, wc.Flags&provider.WCFlagWithInv, "IBV_WC_WITH_INV")
			require.Equal(t, mr.RKey, wc.Imm, "the invalidated rkey")
			require.Equal(t, uint32(total), wc.ByteLen)
			require.Equal(t, uint64(1), r.ctr(device.CtrRxSendInvalidate.String()))
			st, _ := rsp.QP.QueryState()
			require.Equal(t, mlx5.QPStateRTS, st)

			w := r.params(roce.OpRCWriteOnly, psn)
			w.RETH = roce.RETHFields{VA: mr.Addr, RKey: mr.RKey, DMALen: 8}
			r.inject(t, w, make([]byte, 8), nil)
			rep := r.replies(t)
			require.Len(t, rep, 2)
			require.True(t, rep[0].AETH.Syndrome().IsACK(), "the SEND is ACKed")
			require.Equal(t, roce.PSN(psn-1), rep[0].BTH.PSN())
			require.True(t, rep[1].AETH.Syndrome().IsNAK())
			require.Equal(t, uint8(2), rep[1].AETH.Syndrome().Value(), "NAK remote access: the key is invalidated")
			require.Equal(t, uint64(1), r.ctr(device.CtrRxWriteRKey.String()))
		})
	}
}

// TestResponderSequenceNAKs: a PSN ahead of the expected one draws a
// PSN-sequence NAK once per gap, and again only when the requester is
// seen to have gone back (a PSN at or before the one that drew the NAK,
// before the packet seen last). A second copy of the packet seen last, a
// duplicate the network made, draws none: before, each copy drew a NAK,
// each NAK cost the requester a retry, and the 1M-message soak (seed 1)
// ended a SEND RETRY_EXC_ERR.
func TestResponderSequenceNAKs(t *testing.T) {
	cases := []struct {
		name string
		psns []uint32 // offsets from the expected PSN, injected in order
		naks int
	}{
		{"ahead, then further ahead", []uint32{1, 2, 3}, 1},
		{"a duplicate of the packet that drew the NAK", []uint32{1, 1}, 1},
		{"a duplicate of a later packet", []uint32{1, 2, 2}, 1},
		{"back to the packet that drew the NAK", []uint32{1, 2, 1}, 2},
		{"back before it", []uint32{2, 3, 1}, 2},
		{"a duplicate of the go-back packet", []uint32{1, 2, 1, 1}, 2},
		{"two go-backs", []uint32{1, 2, 1, 2, 1}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRxWorld(t, testbed.ConnOpts{})
			for _, off := range c.psns {
				r.inject(t, r.params(roce.OpRCWriteOnly, ePSN+off), nil, nil)
			}
			naks := 0
			for _, p := range r.replies(t) {
				require.True(t, p.AETH.Syndrome().IsNAK(), "only NAKs")
				require.Equal(t, uint8(0), p.AETH.Syndrome().Value(), "PSN sequence error")
				require.Equal(t, roce.PSN(ePSN), p.BTH.PSN(), "for the expected PSN")
				naks++
			}
			require.Equal(t, c.naks, naks)
			require.Equal(t, uint64(len(c.psns)), r.ctr(device.CtrOutOfSequence.String()))
		})
	}
}
