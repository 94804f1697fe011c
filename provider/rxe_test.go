package provider

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/uverbs"
	"github.com/stretchr/testify/require"
)

// fakeRXEQueue is a queue buffer as the kernel lays it out (rxe_queue.c):
// slots of 2^shift bytes, n of them.
func fakeRXEQueue(shift, n uint32) []byte {
	b := make([]byte, rxeQData+int(n)<<shift)
	binary.NativeEndian.PutUint32(b[rxeQLog2Elem:], shift)
	binary.NativeEndian.PutUint32(b[rxeQIndexMask:], n-1)
	return b
}

func TestParseRXEQueue(t *testing.T) {
	set := func(b []byte, off int, v uint32) []byte { binary.NativeEndian.PutUint32(b[off:], v); return b }
	cases := []struct {
		name    string
		mem     []byte
		minElem int
		ok      bool
	}{
		{"SQ of 256-byte slots", fakeRXEQueue(8, 32), 224, true},
		{"CQ of 128-byte slots", fakeRXEQueue(7, 64), rxeWCSize, true},
		{"short mapping", make([]byte, 100), 64, false},
		{"slots smaller than a WQE", fakeRXEQueue(6, 32), 224, false},
		{"huge slots", set(fakeRXEQueue(8, 4), rxeQLog2Elem, 40), 64, false},
		{"mask not 2^n-1", set(fakeRXEQueue(8, 8), rxeQIndexMask, 5), 64, false},
		{"zero mask", set(fakeRXEQueue(8, 8), rxeQIndexMask, 0), 64, false},
		{"slots beyond the mapping", fakeRXEQueue(8, 32)[:rxeQData+31*256], 64, false},
		{"producer beyond the mask", set(fakeRXEQueue(8, 8), rxeQProducer, 9), 64, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := parseRXEQueue(c.mem, c.minElem)
			if !c.ok {
				require.ErrorIs(t, err, ErrNotSupported)
				return
			}
			require.NoError(t, err)
			require.Equal(t, int(q.mask), q.capacity())
			require.Len(t, q.slot(q.mask+3), 1<<q.shift, "indices wrap")
		})
	}
}

// FuzzParseRXEQueue: whatever header the kernel (or a corrupted mapping)
// shows, parsing refuses it or yields slots inside the mapping.
func FuzzParseRXEQueue(f *testing.F) {
	f.Add(fakeRXEQueue(8, 16), 64)
	f.Add(fakeRXEQueue(7, 2), 48)
	f.Fuzz(func(t *testing.T, mem []byte, minElem int) {
		q, err := parseRXEQueue(mem, minElem)
		if err != nil {
			return
		}
		for _, i := range []uint32{0, q.mask, q.producer(), q.consumer()} {
			_ = q.slot(i) // panics if outside the mapping
		}
	})
}

type countBell struct {
	n   int
	err error
}

func (b *countBell) Ring() error { b.n++; return b.err }

// rxeRig is a QP and a CQ on fake kernel rings: the provider's side of the
// rxe datapath without a kernel.
type rxeRig struct {
	qp   *QP
	cq   *CQ
	bell *countBell
	mem  *shm.Region
}

func newRXERig(t *testing.T) *rxeRig {
	mem, err := shm.New("rxe-test", 1<<16, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mem.Close() })
	sq, err := parseRXEQueue(fakeRXEQueue(9, 8), rxeSendWQEBase+64)
	require.NoError(t, err)
	rq, err := parseRXEQueue(fakeRXEQueue(6, 4), rxeRecvWQEBase+16)
	require.NoError(t, err)
	cqq, err := parseRXEQueue(fakeRXEQueue(7, 8), rxeWCSize)
	require.NoError(t, err)
	c := &Context{mem: mem}
	cq := &CQ{ctx: c, rx: &rxeCQ{q: cqq}, nent: 8}
	bell := &countBell{}
	qp := &QP{ctx: c, qpn: 0x11, typ: QPTypeRC, state: QPStateRTS, sendCQ: cq, recvCQ: cq,
		cap: QPCap{MaxSendWR: 7, MaxRecvWR: 3, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInline: 64},
		rx:  &rxeQP{sq: sq, rq: rq, db: bell}}
	return &rxeRig{qp: qp, cq: cq, bell: bell, mem: mem}
}

func TestRXESendWQE(t *testing.T) {
	u32 := func(b []byte, off int) uint32 { return binary.NativeEndian.Uint32(b[off:]) }
	u64 := func(b []byte, off int) uint64 { return binary.NativeEndian.Uint64(b[off:]) }
	sgl := []SGE{{Addr: 0x1000, Length: 100, LKey: 7}, {Addr: 0x2000, Length: 28, LKey: 8}}
	cases := []struct {
		name  string
		wr    SendWR
		check func(t *testing.T, w []byte)
	}{
		{"SEND with two SGEs", SendWR{WRID: 9, Opcode: WRSend, Flags: SendSignaled, SGL: sgl}, func(t *testing.T, w []byte) {
			require.Equal(t, uint64(9), u64(w, 0))
			require.Equal(t, uint32(WRSend), u32(w, rxeWROpcode))
			require.Equal(t, uint32(SendSignaled), u32(w, rxeWRFlags))
			require.Equal(t, uint32(128), u32(w, rxeSendDMA+rxeDMALength))
			require.Equal(t, uint32(128), u32(w, rxeSendDMA+rxeDMAResid))
			require.Equal(t, uint32(2), u32(w, rxeSendDMA+rxeDMANumSGE))
			require.Equal(t, uint64(0x2000), u64(w, rxeSendSGE+16))
			require.Equal(t, uint32(28), u32(w, rxeSendSGE+24))
			require.Equal(t, uint32(8), u32(w, rxeSendSGE+28))
		}},
		{"WRITE_WITH_IMM: remote address, rkey, big-endian imm", SendWR{Opcode: WRRDMAWriteImm, SGL: sgl[:1], RemoteAddr: 0xabc000, RKey: 0x55, Imm: 0x01020304},
			func(t *testing.T, w []byte) {
				require.Equal(t, uint64(0xabc000), u64(w, rxeWRRemote))
				require.Equal(t, uint32(0x55), u32(w, rxeWRRdmaRKey))
				require.Equal(t, uint64(0xabc000), u64(w, rxeSendIOVA))
				require.Equal(t, []byte{1, 2, 3, 4}, w[rxeWRImm:rxeWRImm+4])
			}},
		{"SEND_WITH_INV: opcode 9, invalidate_rkey in host order", SendWR{Opcode: WRSendWithInv, SGL: sgl[:1], InvalidateRKey: 0x01020304},
			func(t *testing.T, w []byte) {
				require.Equal(t, uint32(9), u32(w, rxeWROpcode))
				require.Equal(t, uint32(0x01020304), u32(w, rxeWRImm), "ex.invalidate_rkey is a __u32, not __be32")
			}},
		{"CMP_SWP: the atomic union", SendWR{Opcode: WRAtomicCmpSwp, SGL: []SGE{{Addr: 0x3000, Length: 8, LKey: 1}}, RemoteAddr: 0x8000, RKey: 3, CompareAdd: 5, Swap: 6},
			func(t *testing.T, w []byte) {
				require.Equal(t, uint64(0x8000), u64(w, rxeWRRemote))
				require.Equal(t, uint64(5), u64(w, rxeWRCmpAdd))
				require.Equal(t, uint64(6), u64(w, rxeWRSwap))
				require.Equal(t, uint32(3), u32(w, rxeWRAtomRKey))
			}},
		{"inline SEND copies the payload", SendWR{Opcode: WRSend, Flags: SendInline, SGL: nil}, func(t *testing.T, w []byte) {
			require.Equal(t, uint32(16), u32(w, rxeSendDMA+rxeDMALength))
			require.Equal(t, uint32(0), u32(w, rxeSendDMA+rxeDMANumSGE))
			require.Equal(t, []byte("inline-payload!!"), w[rxeSendSGE:rxeSendSGE+16])
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRXERig(t)
			wr := c.wr
			if wr.Flags&SendInline != 0 {
				a, err := r.mem.Alloc(16, 8)
				require.NoError(t, err)
				require.NoError(t, r.mem.Write(a, []byte("inline-payload!!")))
				wr.SGL = []SGE{{Addr: a, Length: 16}}
			}
			n, err := r.qp.PostSend([]SendWR{wr})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, uint32(1), r.qp.rx.sq.producer(), "producer published")
			require.Equal(t, 1, r.bell.n, "one doorbell")
			c.check(t, r.qp.rx.sq.slot(0))
		})
	}
}

func TestRXEPostErrors(t *testing.T) {
	cases := []struct {
		name  string
		setup func(r *rxeRig)
		wrs   []SendWR
		n     int
		err   error
		bells int
	}{
		{"too many SGEs", nil, []SendWR{{Opcode: WRSend, SGL: make([]SGE, 3)}}, 0, ErrTooManySGE, 0},
		{"inline too big", nil, []SendWR{{Opcode: WRSend, Flags: SendInline, SGL: []SGE{{Length: 65}}}}, 0, ErrInlineTooBig, 0},
		{"unknown opcode", nil, []SendWR{{Opcode: 8}}, 0, ErrInvalidArg, 0}, // BIND_MW
		{"inline READ", nil, []SendWR{{Opcode: WRRDMARead, Flags: SendInline}}, 0, ErrInvalidArg, 0},
		{"UD send without an AH", func(r *rxeRig) { r.qp.typ = QPTypeUD }, []SendWR{{Opcode: WRSend}}, 0, ErrInvalidArg, 0},
		{"not in RTS", func(r *rxeRig) { r.qp.state = QPStateRTR }, []SendWR{{Opcode: WRSend}}, 0, ErrBadState, 0},
		{"queue full after 7", nil, make([]SendWR, 8), 7, ErrQueueFull, 1},
		{"doorbell refused", func(r *rxeRig) { r.bell.err = errors.New("EIO") }, []SendWR{{Opcode: WRSend}}, 1, nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRXERig(t)
			if c.setup != nil {
				c.setup(r)
			}
			n, err := r.qp.PostSend(c.wrs)
			require.Equal(t, c.n, n)
			require.Error(t, err)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
			}
			require.Equal(t, c.bells, r.bell.n)
		})
	}
}

func TestRXERecvAndPoll(t *testing.T) {
	r := newRXERig(t)
	n, err := r.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{{Addr: 0x5000, Length: 64, LKey: 2}}}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	w := r.qp.rx.rq.slot(0)
	require.Equal(t, uint64(1), binary.NativeEndian.Uint64(w))
	require.Equal(t, uint32(64), binary.NativeEndian.Uint32(w[rxeRecvDMA+rxeDMALength:]))
	require.Equal(t, uint64(0x5000), binary.NativeEndian.Uint64(w[rxeRecvSGE:]))
	_, err = r.qp.PostRecv(make([]RecvWR, 3))
	require.ErrorIs(t, err, ErrQueueFull, "3 slots of 4 taken")

	// The kernel writes two completions and publishes them.
	q := r.cq.rx.q
	put := func(i uint32, wrid uint64, status, op, flags uint32, imm []byte) {
		s := q.slot(i)
		binary.NativeEndian.PutUint64(s, wrid)
		binary.NativeEndian.PutUint32(s[8:], status)
		binary.NativeEndian.PutUint32(s[12:], op)
		binary.NativeEndian.PutUint32(s[20:], 64)
		copy(s[24:], imm)
		binary.NativeEndian.PutUint32(s[28:], 0x11)
		binary.NativeEndian.PutUint32(s[36:], flags)
	}
	put(0, 1, 0, uint32(WCRecv), uint32(WCFlagWithImm), []byte{0xa, 0xb, 0xc, 0xd})
	put(1, 2, uint32(WCWRFlushErr), uint32(WCSend), 0, nil)
	binary.NativeEndian.PutUint32(q.mem[rxeQProducer:], 2)
	wcs := make([]WC, 4)
	n, err = r.cq.Poll(wcs)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, WC{WRID: 1, Opcode: WCRecv, ByteLen: 64, Imm: 0x0a0b0c0d, QPNum: 0x11, Flags: WCFlagWithImm}, wcs[0])
	require.Equal(t, WCWRFlushErr, wcs[1].Status)
	require.Equal(t, uint32(2), q.consumer(), "consumer published")
	n, err = r.cq.Poll(wcs)
	require.NoError(t, err)
	require.Zero(t, n)
}

// The builders' bytes, read back through the layouts test/uverbslayout
// checks against rdma_user_rxe.h.
func TestRXEWQEsAgainstUapiLayouts(t *testing.T) {
	r := newRXERig(t)
	sgl := []SGE{{Addr: 0x1000, Length: 100, LKey: 7}}
	_, err := r.qp.PostSend([]SendWR{
		{WRID: 1, Opcode: WRRDMAWriteImm, Flags: SendSignaled, SGL: sgl, RemoteAddr: 0xabc000, RKey: 0x55, Imm: 0x01020304},
		{WRID: 2, Opcode: WRAtomicFetchAdd, SGL: []SGE{{Addr: 0x3000, Length: 8, LKey: 1}}, RemoteAddr: 0x8000, RKey: 3, CompareAdd: 5, Swap: 6},
	})
	require.NoError(t, err)
	var w uverbs.RXESendWQE
	require.NoError(t, w.Decode(r.qp.rx.sq.slot(0)[:uverbs.RXESendWQESize]))
	require.Equal(t, uverbs.RXESendWQE{WRID: 1, NumSGE: 1, Opcode: uint32(WRRDMAWriteImm), SendFlags: uint32(SendSignaled),
		ImmData: 0x01020304, RemoteAddr: 0xabc000, RKey: 0x55, IOVA: 0xabc000, SSN: 0, DMALength: 100, DMAResid: 100, DMANumSGE: 1}, w)
	var sge uverbs.RXESGE
	require.NoError(t, sge.Decode(r.qp.rx.sq.slot(0)[uverbs.RXESendWQESize:]))
	require.Equal(t, uverbs.RXESGE{Addr: 0x1000, Length: 100, LKey: 7}, sge)
	var at uverbs.RXESendWQEAtomic
	require.NoError(t, at.Decode(r.qp.rx.sq.slot(1)[:uverbs.RXESendWQESize]))
	require.Equal(t, uverbs.RXESendWQEAtomic{RemoteAddr: 0x8000, CompareAdd: 5, Swap: 6, RKey: 3}, at)
	require.NoError(t, w.Decode(r.qp.rx.sq.slot(1)[:uverbs.RXESendWQESize]))
	require.Equal(t, uint32(1), w.SSN, "ssn counts the WQEs")

	// UD: the destination, the Q_Key (the QP's own with bit 31) and the AH number.
	u := newRXERig(t)
	u.qp.typ, u.qp.qkey = QPTypeUD, 0x1234
	pd := &PD{ctx: u.qp.ctx}
	u.qp.pd = pd
	ah := &AH{pd: pd, kern: &kernAH{handle: 4, num: 9}}
	_, err = u.qp.PostSend([]SendWR{{Opcode: WRSend, AH: ah, RemoteQPN: 0x77, RemoteQKey: 0x80000000}})
	require.NoError(t, err)
	var ud uverbs.RXESendWQEUD
	require.NoError(t, ud.Decode(u.qp.rx.sq.slot(0)[:uverbs.RXESendWQESize]))
	require.Equal(t, uverbs.RXESendWQEUD{RemoteQPN: 0x77, RemoteQKey: 0x1234, AHNum: 9}, ud)

	_, err = r.qp.PostRecv([]RecvWR{{WRID: 3, SGL: sgl}})
	require.NoError(t, err)
	var rw uverbs.RXERecvWQE
	require.NoError(t, rw.Decode(r.qp.rx.rq.slot(0)[:uverbs.RXERecvWQESize]))
	require.Equal(t, uverbs.RXERecvWQE{WRID: 3, DMALength: 100, DMAResid: 100, DMANumSGE: 1}, rw)
	require.NoError(t, sge.Decode(r.qp.rx.rq.slot(0)[uverbs.RXERecvWQESize:]))
	require.Equal(t, uverbs.RXESGE{Addr: 0x1000, Length: 100, LKey: 7}, sge)
}

// The queue header the provider parses, as uverbs encodes rxe_queue_buf.
func TestRXEQueueHeaderLayout(t *testing.T) {
	mem := make([]byte, uverbs.RXEQueueBufSize+8*256)
	_, err := (&uverbs.RXEQueueBuf{Log2ElemSize: 8, IndexMask: 7, ProducerIndex: 3, ConsumerIndex: 1}).Encode(mem)
	require.NoError(t, err)
	q, err := parseRXEQueue(mem, 208)
	require.NoError(t, err)
	require.Equal(t, [4]uint32{8, 7, 3, 1}, [4]uint32{q.shift, q.mask, q.producer(), q.consumer()})
}
