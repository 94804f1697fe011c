package test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/wqefetch"
	"github.com/stretchr/testify/require"
)

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed ^ byte(i) ^ byte(i>>8)*31 ^ byte(i>>16)*7
	}
}

// connect builds a default two-NIC world and an RTS QP pair on it.
func connect(t *testing.T, o testbed.ConnOpts) (*testbed.World, *testbed.Endpoint, *testbed.Endpoint) {
	t.Helper()
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(o)
	require.NoError(t, err)
	return w, eps[0], eps[1]
}

// waitOne waits for one completion on cq and returns it.
func waitOne(t *testing.T, cq *provider.CQ) provider.WC {
	t.Helper()
	wcs, err := testbed.Wait(cq, 1)
	require.NoError(t, err)
	return wcs[0]
}

type xfer struct {
	op     provider.WROpcode
	size   int
	mtu    int
	inline bool
	noBF   bool
}

// runXfer posts one WR of x on a fresh connected pair and checks both sides
// byte for byte, and every work completion's fields.
func runXfer(t *testing.T, x xfer) {
	t.Helper()
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	buf := x.size + 64
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: x.mtu, BufSize: max(buf, 4096), MaxInline: 512})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	fill(req.Buf.Bytes[:x.size], 0x5a)
	fill(rsp.Buf.Bytes[:x.size], 0xc3)
	src, dst := req.Buf.Bytes[:x.size], rsp.Buf.Bytes[:x.size]
	if x.op == provider.WRRDMARead {
		src, dst = rsp.Buf.Bytes[:x.size], req.Buf.Bytes[:x.size]
	}
	want := append([]byte(nil), src...)

	recv := x.op == provider.WRSend || x.op == provider.WRSendImm || x.op == provider.WRRDMAWriteImm
	if recv {
		_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 77, SGL: []provider.SGE{rsp.MR.SGE(0, uint32(max(x.size, 1)))}}})
		require.NoError(t, err)
	}
	req.QP.SetBlueFlame(!x.noBF)
	wr := provider.SendWR{WRID: 42, Opcode: x.op, Flags: provider.SendSignaled, Imm: 0xdeadbeef,
		RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}
	if x.size > 0 {
		wr.SGL = []provider.SGE{req.MR.SGE(0, uint32(x.size))}
	}
	if x.inline {
		wr.Flags |= provider.SendInline
	}
	_, err = req.QP.PostSend([]provider.SendWR{wr})
	require.NoError(t, err)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCSuccess, wc.Status, "requester status")
	require.Equal(t, uint64(42), wc.WRID)
	require.Equal(t, req.QP.QPN(), wc.QPNum)
	wantOp := map[provider.WROpcode]provider.WCOpcode{provider.WRSend: provider.WCSend, provider.WRSendImm: provider.WCSend,
		provider.WRRDMAWrite: provider.WCRDMAWrite, provider.WRRDMAWriteImm: provider.WCRDMAWrite, provider.WRRDMARead: provider.WCRDMARead}[x.op]
	require.Equal(t, wantOp, wc.Opcode)
	if x.op == provider.WRRDMARead {
		require.Equal(t, uint32(x.size), wc.ByteLen)
	}
	if recv {
		r := waitOne(t, rsp.RecvCQ)
		require.Equal(t, provider.WCSuccess, r.Status, "responder status")
		require.Equal(t, uint64(77), r.WRID)
		require.Equal(t, uint32(x.size), r.ByteLen)
		require.Equal(t, rsp.QP.QPN(), r.QPNum)
		if x.op == provider.WRRDMAWriteImm {
			require.Equal(t, provider.WCRecvRDMAWithImm, r.Opcode)
		} else {
			require.Equal(t, provider.WCRecv, r.Opcode)
		}
		if x.op != provider.WRSend {
			require.Equal(t, uint32(0xdeadbeef), r.Imm)
			require.NotZero(t, r.Flags&provider.WCFlagWithImm)
		}
	}
	w.Settle(0)
	if !bytes.Equal(want, dst) {
		i := 0
		for i < len(dst) && dst[i] == want[i] {
			i++
		}
		t.Fatalf("data mismatch at byte %d of %d", i, len(dst))
	}
	require.True(t, bytes.Equal(want, src), "source must be untouched")
	for _, h := range w.Hosts {
		for _, name := range h.Dev.Counters().Names() {
			require.NotContains(t, name, "drop", "node %d counter %s=%d", h.Node, name, h.Dev.Counters().Get(name))
		}
	}
}

// TestOperationsBySize is the end-to-end matrix: every operation at sizes
// 0, 1, 63, 64, 65, MTU-1, MTU, MTU+1 and 1 MiB.
func TestOperationsBySize(t *testing.T) {
	ops := []struct {
		name string
		op   provider.WROpcode
	}{{"send", provider.WRSend}, {"send_imm", provider.WRSendImm}, {"write", provider.WRRDMAWrite},
		{"write_imm", provider.WRRDMAWriteImm}, {"read", provider.WRRDMARead}}
	const mtu = 1024
	sizes := []int{0, 1, 63, 64, 65, mtu - 1, mtu, mtu + 1, 1 << 20}
	for _, o := range ops {
		for _, sz := range sizes {
			if sz == 1<<20 && testing.Short() {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", o.name, sz), func(t *testing.T) {
				runXfer(t, xfer{op: o.op, size: sz, mtu: mtu})
			})
		}
	}
}

func TestPathMTUs(t *testing.T) {
	for _, mtu := range []int{256, 512, 2048, 4096} {
		for _, sz := range []int{mtu - 1, mtu, mtu + 1, 3*mtu + 5} {
			t.Run(fmt.Sprintf("mtu%d/write/%d", mtu, sz), func(t *testing.T) {
				runXfer(t, xfer{op: provider.WRRDMAWrite, size: sz, mtu: mtu})
			})
			t.Run(fmt.Sprintf("mtu%d/send/%d", mtu, sz), func(t *testing.T) {
				runXfer(t, xfer{op: provider.WRSend, size: sz, mtu: mtu})
			})
		}
	}
}

func TestInlineAndDoorbellPaths(t *testing.T) {
	for _, c := range []xfer{
		{op: provider.WRRDMAWrite, size: 12, inline: true},
		{op: provider.WRRDMAWrite, size: 200, inline: true},
		{op: provider.WRSendImm, size: 60, inline: true},
		{op: provider.WRRDMAWrite, size: 64, noBF: true},
		{op: provider.WRSend, size: 300, inline: true, noBF: true},
		{op: provider.WRRDMARead, size: 64, noBF: true},
	} {
		c.mtu = 1024
		t.Run(fmt.Sprintf("%v/%d/inline=%v/bf=%v", c.op, c.size, c.inline, !c.noBF), func(t *testing.T) { runXfer(t, c) })
	}
}

// TestPostListAndUnsignaled posts a list of WRs with one doorbell where only
// the last is signalled: one CQE retires them all, and every byte lands.
func TestPostListAndUnsignaled(t *testing.T) {
	w, req, rsp := connect(t, testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10})
	fill(req.Buf.Bytes[:16<<10], 9)
	const n = 16
	wrs := make([]provider.SendWR, n)
	for i := range wrs {
		wrs[i] = provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{req.MR.SGE(uint64(i*1000), 1000)},
			RemoteAddr: rsp.MR.Addr + uint64(i*1000), RKey: rsp.MR.RKey}
	}
	wrs[n-1].Flags = provider.SendSignaled
	doorbellsBefore := w.Hosts[0].Dev.Counters().Get("doorbells")
	_, err := req.QP.PostSend(wrs)
	require.NoError(t, err)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, uint64(n-1), wc.WRID)
	require.Equal(t, provider.WCSuccess, wc.Status)
	w.Settle(0)
	require.Equal(t, req.Buf.Bytes[:n*1000], rsp.Buf.Bytes[:n*1000])
	c := w.Hosts[0].Dev.Counters()
	require.Equal(t, doorbellsBefore+1, c.Get("doorbells"), "one doorbell for the whole list")
	require.Equal(t, uint64(1), c.Get("cqes"), "unsignalled WQEs complete silently")
	require.Equal(t, uint64(n-1), c.Get("wqe_unsignaled"))
	// Nothing more shows up.
	more, _ := req.SendCQ.Poll(make([]provider.WC, 4))
	require.Zero(t, more)
}

// TestBadLKey: a WR whose lkey names no MR completes with a local protection
// error CQE, the QP goes to error and the next WR is flushed — no panic.
func TestBadLKey(t *testing.T) {
	w, req, rsp := connect(t, testbed.ConnOpts{})
	bad := req.MR.SGE(0, 64)
	bad.LKey ^= 0x5500
	wr := provider.SendWR{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{bad},
		RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}
	_, err := req.QP.PostSend([]provider.SendWR{wr})
	require.NoError(t, err)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCLocProtErr, wc.Status)
	require.Equal(t, uint64(1), wc.WRID)
	require.Equal(t, uint64(1), w.Hosts[0].Dev.Counters().Get("wqe_bad_lkey"))
	st, err := req.QP.QueryState()
	require.NoError(t, err)
	require.Equal(t, provider.QPStateErr, st)
}

// TestBadRKey: the responder NAKs with remote access error and the
// requester completes with REM_ACCESS_ERR.
func TestBadRKey(t *testing.T) {
	for _, c := range []struct {
		name string
		off  func(mr *provider.MR) uint64 // remote address offset into the peer's MR
		rkey func(mr *provider.MR) uint32
	}{
		{"bad rkey", func(*provider.MR) uint64 { return 0 }, func(mr *provider.MR) uint32 { return mr.RKey ^ 0x3300 }},
		{"out of bounds", func(mr *provider.MR) uint64 { return mr.Length - 8 }, func(mr *provider.MR) uint32 { return mr.RKey }},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := connect(t, testbed.ConnOpts{})
			before := append([]byte(nil), rsp.Buf.Bytes...)
			_, err := req.QP.PostSend([]provider.SendWR{{WRID: 5, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr + c.off(rsp.MR), RKey: c.rkey(rsp.MR)}})
			require.NoError(t, err)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCRemAccessErr, wc.Status)
			require.Equal(t, uint64(1), w.Hosts[1].Dev.Counters().Get("rx_write_rkey"))
			require.Equal(t, before, rsp.Buf.Bytes, "the target MR is untouched")
		})
	}
}

// TestMalformedWQE: a WQE corrupted in host memory after the doorbell (a
// driver bug) becomes a LOCAL_QP_OP error CQE, not a panic.
func TestMalformedWQE(t *testing.T) {
	for _, c := range []struct {
		name    string
		corrupt func(wqe []byte)
	}{
		{"bad opcode", func(b []byte) { b[3] = 0x3f }},
		{"DS zero", func(b []byte) { b[7] = 0 }},
		{"wrong QPN", func(b []byte) { b[4] ^= 0x7f }},
		{"wrong wqe_index", func(b []byte) { b[2] ^= 0x5 }},
		{"write without raddr", func(b []byte) { b[7] = 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := connect(t, testbed.ConnOpts{})
			req.QP.SetBlueFlame(false)
			idx := req.QP.SQProducer()
			_, err := req.QP.PostSend([]provider.SendWR{{WRID: 9, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			info := req.QP.SQInfo()
			slot := uint64(int(idx) & (info.WQEBBs - 1))
			ring, err := req.Host.Mem.Slice(info.Addr+slot*mlx5.WQEBBSize, mlx5.WQEBBSize)
			require.NoError(t, err)
			c.corrupt(ring)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCLocQPOpErr, wc.Status)
			require.NotZero(t, w.Hosts[0].Dev.Counters().Get("wqe_malformed"))
		})
	}
}

// TestEmptyRQ: a SEND with no receive posted is RNR-NAKed and retried; once
// a receive is posted the data arrives intact.
func TestEmptyRQ(t *testing.T) {
	w, req, rsp := connect(t, testbed.ConnOpts{MinRNR: 1})
	fill(req.Buf.Bytes[:2000], 3)
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 2000)}}})
	require.NoError(t, err)
	// Let the first attempt be NAKed.
	for i := 0; i < 200 && w.Hosts[1].Dev.Counters().Get("rnr_naks_sent") == 0; i++ {
		w.Eng.Step()
	}
	require.NotZero(t, w.Hosts[1].Dev.Counters().Get("rnr_naks_sent"))
	out := w.Hosts[0].Dev.Outstanding(req.QP.QPN())
	require.Len(t, out, 1, "the SEND waits for the RNR timer inside the device")
	require.Equal(t, wqefetch.StateExecuting, out[0].State)
	require.Equal(t, 2, out[0].Packets)
	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 2, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
	require.NoError(t, err)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCSuccess, wc.Status)
	rwc := waitOne(t, rsp.RecvCQ)
	require.Equal(t, uint32(2000), rwc.ByteLen)
	require.Equal(t, req.Buf.Bytes[:2000], rsp.Buf.Bytes[:2000])
}

// TestLoopback connects two QPs of one NIC through a port cabled to itself.
func TestLoopback(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Loopback = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	require.Same(t, w.Hosts[0], w.Hosts[1])
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, BufSize: 16 << 10})
	require.NoError(t, err)
	a, b := eps[0], eps[1]
	require.NotEqual(t, a.QP.QPN(), b.QP.QPN())
	fill(a.Buf.Bytes[:5000], 0x11)
	_, err = b.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{b.MR.SGE(8192, 8000)}}})
	require.NoError(t, err)
	_, err = a.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{a.MR.SGE(0, 5000)}, RemoteAddr: b.MR.Addr, RKey: b.MR.RKey},
		{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{a.MR.SGE(0, 5000)}},
	})
	require.NoError(t, err)
	wc := waitOne(t, a.SendCQ)
	require.Equal(t, provider.WCSuccess, wc.Status)
	rwc := waitOne(t, b.RecvCQ)
	require.Equal(t, uint32(5000), rwc.ByteLen)
	require.Equal(t, a.Buf.Bytes[:5000], b.Buf.Bytes[:5000])
	require.Equal(t, a.Buf.Bytes[:5000], b.Buf.Bytes[8192:8192+5000])
}
