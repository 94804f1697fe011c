package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/kverbs"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/uverbs"
	"github.com/stretchr/testify/require"
)

// KDevEnv names the kernel device to run the suite on as well (rxe0).
const KDevEnv = "SOFTNIC_KDEV"

// pollTimeout bounds every wait for a completion.
const pollTimeout = 5 * time.Second

// side is one end of a backend's pair: a context and its address.
type side struct {
	ctx *provider.Context
	gid [16]byte
	mac [6]byte
}

// backend is two contexts that reach each other: two emulated NICs on one
// wire, or two contexts on one kernel device (loopback).
type backend struct {
	name   string
	sides  [2]side
	kern   bool
	driver string // a kernel device's driver: "rxe", "mlx5"
	// setLink takes the link under the device down or up: the emulated
	// cable, or the kernel device's netdev (ip link set).
	setLink func(up bool) error
}

// backends opens every backend present for t; each is closed when t ends.
func backends(t testing.TB) []*backend {
	t.Helper()
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	emu := &backend{name: "emulated", setLink: func(up bool) error { w.SetLink(up); return nil }}
	for i, h := range w.Hosts {
		emu.sides[i] = side{ctx: h.Ctx, gid: h.ID.IP.As16(), mac: h.ID.MAC}
	}
	out := []*backend{emu}
	name := os.Getenv(KDevEnv)
	if name == "" {
		return out
	}
	k := &backend{name: "kernel-" + name, kern: true, setLink: func(up bool) error {
		netdev, err := netdevOf(name)
		if err != nil {
			return err
		}
		state := map[bool]string{true: "up", false: "down"}[up]
		out, err := exec.Command("ip", "link", "set", netdev, state).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip link set %s %s: %v: %s", netdev, state, err, out)
		}
		return nil
	}}
	for i := range k.sides {
		ctx, err := provider.OpenKernel(name, provider.KernelOptions{MemSize: 4 << 20})
		require.NoError(t, err, "open %s", name)
		t.Cleanup(func() { _ = ctx.Close() })
		p, err := ctx.QueryPort(1)
		require.NoError(t, err)
		require.Greater(t, len(p.GIDs), 1, "%s has no GID at index 1 (the RoCEv2 IPv4 GID)", name)
		// QUERY_GID_ENTRY's answer is what sysfs shows.
		sys, err := os.ReadFile("/sys/class/infiniband/" + name + "/ports/1/gids/1")
		require.NoError(t, err)
		want, err := netip.ParseAddr(strings.TrimSpace(string(sys)))
		require.NoError(t, err)
		require.Equal(t, want.As16(), p.GIDs[1].GID, "GID 1 of %s: sysfs says %s", name, sys)
		k.sides[i] = side{ctx: ctx, gid: p.GIDs[1].GID}
		k.driver, _ = ctx.Kernel()
	}
	return append(out, k)
}

// netdevOf is the netdev under an IB device: rxe's parent attribute, or
// the PCI function's net/ directory (mlx5).
func netdevOf(ib string) (string, error) {
	if b, err := os.ReadFile("/sys/class/infiniband/" + ib + "/parent"); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	ents, err := os.ReadDir("/sys/class/infiniband/" + ib + "/device/net")
	if err != nil || len(ents) == 0 {
		return "", fmt.Errorf("no netdev under %s: %v", ib, err)
	}
	return ents[0].Name(), nil
}

// each runs f as a subtest per backend: TestX/<backend>.
func each(t *testing.T, f func(t *testing.T, b *backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// pair is a connected RC pair with a registered buffer on each side.
type pair struct {
	b   *backend
	ep  [2]*ep
	cfg provider.QPCap
}

type ep struct {
	ctx *provider.Context
	pd  *provider.PD
	cq  *provider.CQ
	qp  *provider.QP
	buf provider.Buffer
	mr  *provider.MR
}

const bufSize = 64 << 10

var fullAccess = provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic

func newEP(t testing.TB, ctx *provider.Context, cp provider.QPCap) *ep {
	return newEPChannel(t, ctx, cp, nil, 128)
}

// newEPChannel is newEP with the CQ of cqe entries reporting to a
// completion channel (nil: none).
func newEPChannel(t testing.TB, ctx *provider.Context, cp provider.QPCap, ch *provider.CompChannel, cqe int) *ep {
	t.Helper()
	e := &ep{ctx: ctx}
	var err error
	e.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	e.cq, err = ctx.CreateCQEx(provider.CQInitAttr{Entries: cqe, Channel: ch})
	require.NoError(t, err)
	e.buf, err = ctx.AllocBuffer(bufSize, 4096)
	require.NoError(t, err)
	e.mr, err = e.pd.RegMR(e.buf.Addr, bufSize, fullAccess)
	require.NoError(t, err)
	e.qp, err = ctx.CreateQP(e.pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq, Cap: cp})
	require.NoError(t, err)
	return e
}

func (e *ep) destroy(t testing.TB) {
	require.NoError(t, e.qp.Destroy())
	require.NoError(t, e.mr.Dereg())
	require.NoError(t, e.cq.Destroy())
	require.NoError(t, e.pd.Dealloc())
	require.NoError(t, e.ctx.FreeBuffer(e.buf))
}

func connect(t testing.TB, b *backend) *pair { return connectOpts(t, b, pairOpts{}) }

// pairOpts shape a pair: each side's completion channel (nil: none) and
// CQ size (0: 128).
type pairOpts struct {
	chs [2]*provider.CompChannel
	cqe [2]int
	// closes: the test closes the contexts itself (no per-object teardown).
	closes bool
}

func connectOpts(t testing.TB, b *backend, o pairOpts) *pair {
	t.Helper()
	cp := provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}
	p := &pair{b: b, cfg: cp}
	for i := range p.ep {
		cqe := o.cqe[i]
		if cqe == 0 {
			cqe = 128
		}
		p.ep[i] = newEPChannel(t, b.sides[i].ctx, cp, o.chs[i], cqe)
	}
	psn := [2]uint32{0x1000, 0x2000}
	for i, e := range p.ep {
		peer := p.ep[1-i]
		a := provider.DefaultConnectAttr()
		a.Peer = provider.Peer{QPN: peer.qp.QPN(), PSN: psn[1-i], GID: b.sides[1-i].gid, MAC: b.sides[1-i].mac}
		a.PSN, a.Access = psn[i], fullAccess
		require.NoError(t, e.qp.ToInit(a))
		require.NoError(t, e.qp.ToRTR(a))
	}
	for i, e := range p.ep {
		a := provider.DefaultConnectAttr()
		a.PSN = psn[i]
		require.NoError(t, e.qp.ToRTS(a))
	}
	if !o.closes {
		t.Cleanup(func() {
			for _, e := range p.ep {
				e.destroy(t)
			}
		})
	}
	return p
}

// poll waits (at most pollTimeout) for n completions on cq.
func poll(t *testing.T, cq *provider.CQ, n int) []provider.WC {
	t.Helper()
	got, err := pollWithin(cq, n, pollTimeout)
	require.NoError(t, err)
	return got
}

// pollWithin collects n completions from cq for at most timeout; it
// touches no testing.T, so it may run on any goroutine.
func pollWithin(cq *provider.CQ, n int, timeout time.Duration) ([]provider.WC, error) {
	var got []provider.WC
	wcs := make([]provider.WC, n)
	deadline := time.Now().Add(timeout)
	for len(got) < n {
		k, err := cq.Poll(wcs[:n-len(got)])
		if err != nil {
			return got, err
		}
		got = append(got, wcs[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				return got, fmt.Errorf("%d of %d completions after %v", len(got), n, timeout)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return got, nil
}

// pollBoth collects completions from both sides' CQ until each has its
// count.
func pollBoth(t *testing.T, p *pair, n0, n1 int) (a, b []provider.WC) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	wcs := make([]provider.WC, 8)
	for len(a) < n0 || len(b) < n1 {
		k0, err := p.ep[0].cq.Poll(wcs[:min(8, max(n0-len(a), 0))])
		require.NoError(t, err)
		a = append(a, wcs[:k0]...)
		k1, err := p.ep[1].cq.Poll(wcs[:min(8, max(n1-len(b), 0))])
		require.NoError(t, err)
		b = append(b, wcs[:k1]...)
		if k0+k1 == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("completions %d/%d and %d/%d after %v", len(a), n0, len(b), n1, pollTimeout)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return a, b
}

func (e *ep) bytes(t *testing.T, off, n int) []byte {
	t.Helper()
	b, err := e.ctx.Mem().Slice(e.buf.Addr+uint64(off), n)
	require.NoError(t, err)
	return b
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// ---------------------------------------------------------------- device, PD, MR, CQ, QP verbs

func TestQueryDeviceAndPort(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		ctx := b.sides[0].ctx
		a := ctx.Attr()
		require.Positive(t, a.MaxQP)
		require.Positive(t, a.MaxCQE)
		require.Positive(t, a.MaxQPWR)
		require.Positive(t, a.MaxSGE)
		require.NotZero(t, a.ActiveMTU.Bytes())
		p, err := ctx.QueryPort(1)
		require.NoError(t, err)
		require.Equal(t, provider.PortActive, p.State)
		require.NotEmpty(t, p.GIDs)
		found := false
		for _, g := range p.GIDs {
			found = found || g.GID == b.sides[0].gid
		}
		require.True(t, found, "the RoCEv2 IPv4 GID %x is in the table", b.sides[0].gid)
	})
}

func TestPD(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		ctx := b.sides[0].ctx
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		buf, err := ctx.AllocBuffer(4096, 4096)
		require.NoError(t, err)
		defer func() { require.NoError(t, ctx.FreeBuffer(buf)) }()
		mr, err := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite)
		require.NoError(t, err)
		require.ErrorIs(t, pd.Dealloc(), provider.ErrBusy, "a PD with an MR")
		require.NoError(t, mr.Dereg())
		require.ErrorIs(t, mr.Dereg(), provider.ErrClosed, "twice")
		require.NoError(t, pd.Dealloc())
		require.ErrorIs(t, pd.Dealloc(), provider.ErrClosed, "twice")
	})
}

func TestRegMR(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		ctx := b.sides[0].ctx
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		defer func() { require.NoError(t, pd.Dealloc()) }()
		buf, err := ctx.AllocBuffer(8192, 4096)
		require.NoError(t, err)
		defer func() { require.NoError(t, ctx.FreeBuffer(buf)) }()
		cases := []struct {
			name   string
			addr   uint64
			length uint64
			access provider.Access
			err    error
		}{
			{"local", buf.Addr, 8192, provider.AccessLocalWrite, nil},
			{"remote read, write, atomic", buf.Addr, 4096, fullAccess, nil},
			{"read-only, unaligned", buf.Addr + 100, 1000, 0, nil},
			{"zero length", buf.Addr, 0, provider.AccessLocalWrite, provider.ErrInvalidArg},
			{"outside host memory", 0x10, 4096, provider.AccessLocalWrite, provider.ErrOutOfRange},
			{"remote write without local write", buf.Addr, 4096, provider.AccessRemoteWrite, provider.ErrInvalidArg},
			{"unknown access bit", buf.Addr, 4096, 1 << 20, provider.ErrInvalidArg},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				mr, err := pd.RegMR(c.addr, c.length, c.access)
				if c.err != nil {
					require.ErrorIs(t, err, c.err)
					return
				}
				require.NoError(t, err)
				require.Equal(t, c.length, mr.Length)
				require.NoError(t, mr.Dereg())
			})
		}
	})
}

func TestCQ(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		ctx := b.sides[0].ctx
		cases := []struct {
			name    string
			entries int
			err     error
		}{
			{"one", 1, nil},
			{"100", 100, nil},
			{"zero", 0, provider.ErrInvalidArg},
			{"negative", -1, provider.ErrInvalidArg},
			{"above the device max", ctx.Attr().MaxCQE + 1, provider.ErrInvalidArg},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				cq, err := ctx.CreateCQ(c.entries)
				if c.err != nil {
					require.ErrorIs(t, err, c.err)
					return
				}
				require.NoError(t, err)
				require.GreaterOrEqual(t, cq.Entries(), c.entries)
				n, err := cq.Poll(make([]provider.WC, 4))
				require.NoError(t, err)
				require.Zero(t, n, "a new CQ is empty")
				require.NoError(t, cq.Destroy())
				_, err = cq.Poll(make([]provider.WC, 1))
				require.ErrorIs(t, err, provider.ErrClosed)
			})
		}
	})
}

func TestCreateQP(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		ctx := b.sides[0].ctx
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		defer func() { require.NoError(t, pd.Dealloc()) }()
		cq, err := ctx.CreateCQ(16)
		require.NoError(t, err)
		defer func() { require.NoError(t, cq.Destroy()) }()
		a := ctx.Attr()
		cases := []struct {
			name string
			cap  provider.QPCap
			err  error
		}{
			{"small", provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, nil},
			{"inline 64", provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}, nil},
			{"too many send WRs", provider.QPCap{MaxSendWR: a.MaxQPWR + 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, provider.ErrInvalidArg},
			{"too many SGEs", provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: a.MaxSGE + 1, MaxRecvSGE: 1}, provider.ErrInvalidArg},
			{"negative", provider.QPCap{MaxSendWR: -1}, provider.ErrInvalidArg},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: c.cap})
				if c.err != nil {
					require.ErrorIs(t, err, c.err)
					return
				}
				require.NoError(t, err)
				require.Equal(t, provider.QPStateReset, qp.State())
				got := qp.Cap()
				require.GreaterOrEqual(t, got.MaxSendWR, c.cap.MaxSendWR)
				require.GreaterOrEqual(t, got.MaxRecvWR, c.cap.MaxRecvWR)
				require.GreaterOrEqual(t, got.MaxInline, c.cap.MaxInline)
				require.ErrorIs(t, cq.Destroy(), provider.ErrBusy, "a CQ in use")
				require.ErrorIs(t, pd.Dealloc(), provider.ErrBusy, "a PD in use")
				require.NoError(t, qp.Destroy())
				require.ErrorIs(t, qp.Destroy(), provider.ErrClosed)
			})
		}
		_, err = ctx.CreateQP(nil, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq})
		require.ErrorIs(t, err, provider.ErrInvalidArg, "no PD")
	})
}

func TestModifyQP(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		e := newEP(t, b.sides[0].ctx, provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
		defer e.destroy(t)
		a := provider.DefaultConnectAttr()
		a.Peer = provider.Peer{QPN: e.qp.QPN(), GID: b.sides[0].gid, MAC: b.sides[0].mac}
		// RESET -> RTR skips INIT.
		err := e.qp.ToRTR(a)
		require.ErrorIs(t, err, provider.ErrBadTransition)
		require.NoError(t, e.qp.ToInit(a))
		st, err := e.qp.QueryState()
		require.NoError(t, err)
		require.Equal(t, provider.QPStateInit, st)
		bad := a
		bad.MTU = 333
		require.ErrorIs(t, e.qp.ToRTR(bad), provider.ErrInvalidArg)
		require.NoError(t, e.qp.ToRTR(a))
		require.NoError(t, e.qp.ToRTS(a))
		st, err = e.qp.QueryState()
		require.NoError(t, err)
		require.Equal(t, provider.QPStateRTS, st)
		require.NoError(t, e.qp.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, 1))
		require.NoError(t, e.qp.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, 1))
		require.Equal(t, provider.QPStateReset, e.qp.State())
	})
}

func TestPostBeforeRTS(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		e := newEP(t, b.sides[0].ctx, provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
		defer e.destroy(t)
		_, err := e.qp.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{e.mr.SGE(0, 8)}}})
		require.ErrorIs(t, err, provider.ErrBadState, "RESET")
		_, err = e.qp.PostRecv([]provider.RecvWR{{SGL: []provider.SGE{e.mr.SGE(0, 8)}}})
		require.ErrorIs(t, err, provider.ErrBadState, "receives in RESET")
		a := provider.DefaultConnectAttr()
		require.NoError(t, e.qp.ToInit(a))
		n, err := e.qp.PostRecv([]provider.RecvWR{{SGL: []provider.SGE{e.mr.SGE(0, 8)}}})
		require.NoError(t, err, "receives from INIT on")
		require.Equal(t, 1, n)
		_, err = e.qp.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{e.mr.SGE(0, 8)}}})
		require.ErrorIs(t, err, provider.ErrBadState, "INIT")
	})
}

func TestRecvQueueFull(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		e := newEP(t, b.sides[0].ctx, provider.QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
		defer e.destroy(t)
		require.NoError(t, e.qp.ToInit(provider.DefaultConnectAttr()))
		capacity := e.qp.Cap().MaxRecvWR
		wrs := make([]provider.RecvWR, 4*capacity+4)
		for i := range wrs {
			wrs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{e.mr.SGE(0, 8)}}
		}
		n, err := e.qp.PostRecv(wrs)
		require.ErrorIs(t, err, provider.ErrQueueFull)
		require.GreaterOrEqual(t, n, capacity, "at least the capacity the device reported")
		var op *provider.OpError
		require.ErrorAs(t, err, &op)
		require.Equal(t, n, op.Index, "the error names the first WR not posted")
	})
}

func TestPostSendBadWR(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		p := connect(t, b)
		e := p.ep[0]
		cases := []struct {
			name string
			wr   provider.SendWR
			err  error
		}{
			{"too many SGEs", provider.SendWR{Opcode: provider.WRSend, SGL: make([]provider.SGE, e.qp.Cap().MaxSendSGE+1)}, provider.ErrTooManySGE},
			{"inline above max_inline_data", provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline,
				SGL: []provider.SGE{e.mr.SGE(0, uint32(e.qp.Cap().MaxInline+1))}}, provider.ErrInlineTooBig},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				n, err := e.qp.PostSend([]provider.SendWR{c.wr})
				require.ErrorIs(t, err, c.err)
				require.Zero(t, n)
			})
		}
	})
}

// ---------------------------------------------------------------- opcodes

func TestOpcodes(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		p := connect(t, b)
		a, z := p.ep[0], p.ep[1]
		const n = 1500 // more than one 1024-byte MTU
		type want struct {
			op      provider.WCOpcode
			byteLen uint32
		}
		cases := []struct {
			name   string
			wr     func() provider.SendWR
			recv   bool // the responder consumes a receive
			sendWC want
			recvWC want
			imm    bool
			check  func(t *testing.T)
		}{
			{name: "SEND", recv: true, wr: func() provider.SendWR {
				fill(a.bytes(t, 0, n), 1)
				return provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{a.mr.SGE(0, n)}}
			}, sendWC: want{provider.WCSend, 0}, recvWC: want{provider.WCRecv, n}, check: func(t *testing.T) {
				require.Equal(t, a.bytes(t, 0, n), z.bytes(t, 8192, n))
			}},
			{name: "SEND two SGEs", recv: true, wr: func() provider.SendWR {
				fill(a.bytes(t, 0, 2000), 9)
				return provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{a.mr.SGE(0, 100), a.mr.SGE(1000, 200)}}
			}, sendWC: want{provider.WCSend, 0}, recvWC: want{provider.WCRecv, 300}, check: func(t *testing.T) {
				require.Equal(t, a.bytes(t, 0, 100), z.bytes(t, 8192, 100))
				require.Equal(t, a.bytes(t, 1000, 200), z.bytes(t, 8192+100, 200))
			}},
			{name: "SEND_WITH_IMM", recv: true, imm: true, wr: func() provider.SendWR {
				return provider.SendWR{Opcode: provider.WRSendImm, Imm: 0xc0ffee01, SGL: []provider.SGE{a.mr.SGE(0, 64)}}
			}, sendWC: want{provider.WCSend, 0}, recvWC: want{provider.WCRecv, 64}},
			{name: "SEND inline", recv: true, wr: func() provider.SendWR {
				fill(a.bytes(t, 0, 60), 3)
				return provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline, SGL: []provider.SGE{{Addr: a.buf.Addr, Length: 60}}}
			}, sendWC: want{provider.WCSend, 0}, recvWC: want{provider.WCRecv, 60}, check: func(t *testing.T) {
				require.Equal(t, a.bytes(t, 0, 60), z.bytes(t, 8192, 60))
			}},
			{name: "SEND zero bytes", recv: true, wr: func() provider.SendWR {
				return provider.SendWR{Opcode: provider.WRSend}
			}, sendWC: want{provider.WCSend, 0}, recvWC: want{provider.WCRecv, 0}},
			{name: "RDMA_WRITE", wr: func() provider.SendWR {
				fill(a.bytes(t, 0, n), 5)
				return provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{a.mr.SGE(0, n)}, RemoteAddr: z.buf.Addr + 16384, RKey: z.mr.RKey}
			}, sendWC: want{provider.WCRDMAWrite, 0}, check: func(t *testing.T) {
				require.Equal(t, a.bytes(t, 0, n), z.bytes(t, 16384, n))
			}},
			{name: "RDMA_WRITE_WITH_IMM", recv: true, imm: true, wr: func() provider.SendWR {
				fill(a.bytes(t, 0, 256), 7)
				return provider.SendWR{Opcode: provider.WRRDMAWriteImm, Imm: 0x12345678, SGL: []provider.SGE{a.mr.SGE(0, 256)}, RemoteAddr: z.buf.Addr + 20000, RKey: z.mr.RKey}
			}, sendWC: want{provider.WCRDMAWrite, 0}, recvWC: want{provider.WCRecvRDMAWithImm, 256}, check: func(t *testing.T) {
				require.Equal(t, a.bytes(t, 0, 256), z.bytes(t, 20000, 256))
			}},
			{name: "RDMA_READ", wr: func() provider.SendWR {
				fill(z.bytes(t, 24576, n), 11)
				return provider.SendWR{Opcode: provider.WRRDMARead, SGL: []provider.SGE{a.mr.SGE(4096, n)}, RemoteAddr: z.buf.Addr + 24576, RKey: z.mr.RKey}
			}, sendWC: want{provider.WCRDMARead, n}, check: func(t *testing.T) {
				require.Equal(t, z.bytes(t, 24576, n), a.bytes(t, 4096, n))
			}},
			{name: "ATOMIC_FETCH_AND_ADD", wr: func() provider.SendWR {
				binary.LittleEndian.PutUint64(z.bytes(t, 32768, 8), 40)
				return provider.SendWR{Opcode: provider.WRAtomicFetchAdd, SGL: []provider.SGE{a.mr.SGE(8192, 8)}, RemoteAddr: z.buf.Addr + 32768, RKey: z.mr.RKey, CompareAdd: 2}
			}, sendWC: want{provider.WCFetchAdd, 8}, check: func(t *testing.T) {
				require.Equal(t, uint64(40), binary.LittleEndian.Uint64(a.bytes(t, 8192, 8)), "the original value")
				require.Equal(t, uint64(42), binary.LittleEndian.Uint64(z.bytes(t, 32768, 8)))
			}},
			{name: "ATOMIC_CMP_AND_SWP", wr: func() provider.SendWR {
				binary.LittleEndian.PutUint64(z.bytes(t, 32776, 8), 7)
				return provider.SendWR{Opcode: provider.WRAtomicCmpSwp, SGL: []provider.SGE{a.mr.SGE(8200, 8)}, RemoteAddr: z.buf.Addr + 32776, RKey: z.mr.RKey, CompareAdd: 7, Swap: 99}
			}, sendWC: want{provider.WCCompSwap, 8}, check: func(t *testing.T) {
				require.Equal(t, uint64(7), binary.LittleEndian.Uint64(a.bytes(t, 8200, 8)))
				require.Equal(t, uint64(99), binary.LittleEndian.Uint64(z.bytes(t, 32776, 8)))
			}},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if c.recv {
					_, err := z.qp.PostRecv([]provider.RecvWR{{WRID: 0x100 + uint64(i), SGL: []provider.SGE{z.mr.SGE(8192, 4096)}}})
					require.NoError(t, err)
				}
				wr := c.wr()
				wr.WRID, wr.Flags = uint64(i+1), wr.Flags|provider.SendSignaled
				k, err := a.qp.PostSend([]provider.SendWR{wr})
				require.NoError(t, err)
				require.Equal(t, 1, k)
				nr := 0
				if c.recv {
					nr = 1
				}
				sw, rw := pollBoth(t, p, 1, nr)
				require.Equal(t, provider.WCSuccess, sw[0].Status, "%v", sw[0].Status)
				require.Equal(t, uint64(i+1), sw[0].WRID)
				require.Equal(t, c.sendWC.op, sw[0].Opcode)
				if c.sendWC.byteLen != 0 {
					require.Equal(t, c.sendWC.byteLen, sw[0].ByteLen)
				}
				require.Equal(t, a.qp.QPN(), sw[0].QPNum)
				if c.recv {
					require.Equal(t, provider.WCSuccess, rw[0].Status, "%v", rw[0].Status)
					require.Equal(t, 0x100+uint64(i), rw[0].WRID)
					require.Equal(t, c.recvWC.op, rw[0].Opcode)
					require.Equal(t, c.recvWC.byteLen, rw[0].ByteLen)
					require.Equal(t, c.imm, rw[0].Flags&provider.WCFlagWithImm != 0)
					if c.imm {
						require.Equal(t, wr.Imm, rw[0].Imm)
					}
				}
				if c.check != nil {
					c.check(t)
				}
			})
		}
	})
}

func TestPostList(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		p := connect(t, b)
		a, z := p.ep[0], p.ep[1]
		const k = 8
		recvs := make([]provider.RecvWR, k)
		sends := make([]provider.SendWR, k)
		for i := range k {
			recvs[i] = provider.RecvWR{WRID: uint64(100 + i), SGL: []provider.SGE{z.mr.SGE(uint64(i*256), 256)}}
			sends[i] = provider.SendWR{WRID: uint64(i), Opcode: provider.WRSend, Flags: provider.SendSignaled,
				SGL: []provider.SGE{a.mr.SGE(uint64(i*256), uint32(10+i))}}
		}
		n, err := z.qp.PostRecv(recvs)
		require.NoError(t, err)
		require.Equal(t, k, n)
		n, err = a.qp.PostSend(sends)
		require.NoError(t, err)
		require.Equal(t, k, n)
		sw, rw := pollBoth(t, p, k, k)
		for i := range k {
			require.Equal(t, uint64(i), sw[i].WRID, "send completions in order")
			require.Equal(t, uint64(100+i), rw[i].WRID, "receives in order")
			require.Equal(t, uint32(10+i), rw[i].ByteLen)
		}
	})
}

// ---------------------------------------------------------------- error completions

func TestRemoteAccessError(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		p := connect(t, b)
		a, z := p.ep[0], p.ep[1]
		_, err := a.qp.PostSend([]provider.SendWR{{WRID: 7, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{a.mr.SGE(0, 64)}, RemoteAddr: z.buf.Addr, RKey: z.mr.RKey ^ 0x5a5a00}})
		require.NoError(t, err)
		wc := poll(t, a.cq, 1)[0]
		require.Equal(t, uint64(7), wc.WRID)
		require.Equal(t, provider.WCRemAccessErr, wc.Status, "%v", wc.Status)
	})
}

// TestSendWithInvalidate: SEND_WITH_INV naming an ordinary MR's rkey,
// which neither rxe (a user MR is not IB_MR_TYPE_MEM_REG) nor the
// emulated NIC (no remotely invalidatable keys) can invalidate: the data
// is placed, the receive completes REM_INV_REQ_ERR and the responder's QP
// goes to error (rxe's class J error), while the packet is ACKed and the
// requester's SEND succeeds (rocev2.md §4.6).
func TestSendWithInvalidate(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		p := connect(t, b)
		a, z := p.ep[0], p.ep[1]
		_, err := z.qp.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{z.mr.SGE(0, 256)}}})
		require.NoError(t, err)
		fill(a.bytes(t, 0, 100), 0x21)
		_, err = a.qp.PostSend([]provider.SendWR{{WRID: 9, Opcode: provider.WRSendWithInv, Flags: provider.SendSignaled,
			SGL: []provider.SGE{a.mr.SGE(0, 100)}, InvalidateRKey: z.mr.RKey}})
		require.NoError(t, err)
		wc := poll(t, a.cq, 1)[0]
		require.Equal(t, uint64(9), wc.WRID)
		require.Equal(t, provider.WCSuccess, wc.Status, "%v", wc.Status)
		require.Equal(t, provider.WCSend, wc.Opcode)
		wc = poll(t, z.cq, 1)[0]
		require.Equal(t, uint64(1), wc.WRID)
		require.Equal(t, provider.WCRemInvReqErr, wc.Status, "%v", wc.Status)
		require.Equal(t, a.bytes(t, 0, 100), z.bytes(t, 0, 100), "the data was placed")
	})
}

func TestFlushOnError(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		p := connect(t, b)
		z := p.ep[1]
		_, err := z.qp.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{z.mr.SGE(0, 64)}}, {WRID: 2, SGL: []provider.SGE{z.mr.SGE(64, 64)}}})
		require.NoError(t, err)
		require.NoError(t, z.qp.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, 1))
		wcs := poll(t, z.cq, 2)
		for i, wc := range wcs {
			require.Equal(t, uint64(i+1), wc.WRID)
			require.Equal(t, provider.WCWRFlushErr, wc.Status, "%v", wc.Status)
		}
	})
}

func TestUseAfterClose(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		var ctx *provider.Context
		if b.kern {
			c, err := provider.OpenKernel(os.Getenv(KDevEnv), provider.KernelOptions{MemSize: 1 << 20})
			require.NoError(t, err)
			ctx = c
		} else {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			defer w.Close()
			ctx = w.Hosts[0].Ctx
		}
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		cq, err := ctx.CreateCQ(4)
		require.NoError(t, err)
		qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: provider.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, ctx.Close(), "Close destroys what is left")
		_, err = ctx.AllocPD()
		require.ErrorIs(t, err, provider.ErrClosed)
		_, err = qp.PostSend([]provider.SendWR{{Opcode: provider.WRSend}})
		require.ErrorIs(t, err, provider.ErrClosed)
		_, err = cq.Poll(make([]provider.WC, 1))
		require.ErrorIs(t, err, provider.ErrClosed)
	})
}

// TestNoDevice: a kernel device that is not there is ErrNoDevice, whatever
// the machine has.
func TestNoDevice(t *testing.T) {
	_, err := provider.OpenKernel("no_such_dev9", provider.KernelOptions{})
	require.ErrorIs(t, err, provider.ErrNoDevice)
}

// ---------------------------------------------------------------- events

func TestCompletionChannel(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		ctx := b.sides[1].ctx
		ch, err := ctx.CreateCompChannel()
		require.NoError(t, err)
		require.GreaterOrEqual(t, ch.Fd(), 0)
		// Registered before the pair's, so it runs after their CQs are gone.
		t.Cleanup(func() { require.NoError(t, ch.Destroy()) })
		p := connectOpts(t, b, pairOpts{chs: [2]*provider.CompChannel{nil, ch}})
		a, z := p.ep[0], p.ep[1]
		require.Same(t, ch, z.cq.Channel())
		_, err = ch.GetCQEvent(0)
		require.ErrorIs(t, err, provider.ErrTimeout, "nothing armed, nothing came")
		require.NoError(t, z.cq.ReqNotify(false))
		_, err = z.qp.PostRecv([]provider.RecvWR{{WRID: 5, SGL: []provider.SGE{z.mr.SGE(0, 64)}}})
		require.NoError(t, err)
		_, err = a.qp.PostSend([]provider.SendWR{{WRID: 6, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{a.mr.SGE(0, 64)}}})
		require.NoError(t, err)
		poll(t, a.cq, 1)
		cq, err := ch.GetCQEvent(pollTimeout)
		require.NoError(t, err)
		require.Same(t, z.cq, cq)
		require.Equal(t, 1, cq.UnackedEvents())
		cq.AckEvents(1)
		require.Zero(t, cq.UnackedEvents())
		wc := poll(t, z.cq, 1)[0]
		require.Equal(t, uint64(5), wc.WRID)
		_, err = ch.GetCQEvent(0)
		require.ErrorIs(t, err, provider.ErrTimeout, "one event per arm")
		require.ErrorIs(t, ch.Destroy(), provider.ErrBusy, "a channel in use")
	})
}

func TestAsyncEventAccessError(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		p := connect(t, b)
		a, z := p.ep[0], p.ep[1]
		fd, err := z.ctx.AsyncFd()
		require.NoError(t, err)
		require.GreaterOrEqual(t, fd, 0)
		_, err = a.qp.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{a.mr.SGE(0, 64)}, RemoteAddr: z.buf.Addr, RKey: z.mr.RKey ^ 0x5a5a00}})
		require.NoError(t, err)
		wc := poll(t, a.cq, 1)[0]
		require.Equal(t, provider.WCRemAccessErr, wc.Status)
		if b.driver == "rxe" {
			// rxe (6.1) raises no event for it: the responder's QP goes
			// to ERR and the async fd stays quiet. A ConnectX, and the
			// emulated model, raise QP_ACCESS_ERR on the responder.
			_, err := z.ctx.GetAsyncEvent(200 * time.Millisecond)
			require.ErrorIs(t, err, provider.ErrTimeout)
			st, err := z.qp.QueryState()
			require.NoError(t, err)
			require.Equal(t, provider.QPStateErr, st)
			return
		}
		ev, err := z.ctx.GetAsyncEvent(pollTimeout)
		require.NoError(t, err)
		require.Equal(t, mlx5.EventQPAccessErr, ev.Type, "%v", ev)
		require.Same(t, z.qp, ev.QP)
		z.ctx.AckAsyncEvent(ev)
	})
}

func TestAsyncEventCQOverrun(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		p := connectOpts(t, b, pairOpts{cqe: [2]int{1, 0}})
		a, z := p.ep[0], p.ep[1]
		n := a.cq.Entries() + 4 // completions the CQ cannot hold
		require.LessOrEqual(t, n, a.qp.Cap().MaxSendWR)
		sent := 0
		wr := provider.SendWR{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{a.mr.SGE(0, 8)},
			RemoteAddr: z.buf.Addr, RKey: z.mr.RKey}
		deadline := time.Now().Add(pollTimeout)
		for sent < n && time.Now().Before(deadline) {
			k, err := a.qp.PostSend([]provider.SendWR{wr})
			if errors.Is(err, provider.ErrQueueFull) {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			require.NoError(t, err)
			sent += k
		}
		require.Equal(t, n, sent, "posted more completions than the CQ holds")
		ev, err := a.ctx.GetAsyncEvent(pollTimeout)
		require.NoError(t, err)
		require.Equal(t, mlx5.EventCQErr, ev.Type, "%v", ev)
		require.Same(t, a.cq, ev.CQ)
		a.ctx.AckAsyncEvent(ev)
	})
}

// DisruptEnv allows the tests that take a kernel device's link down (in
// the guest: its netdev is the test's own).
const DisruptEnv = "SOFTNIC_KDEV_DISRUPT"

// TestLinkDown: a port that loses its link reports PORT_ERR, a send that
// cannot reach the peer completes in error (it does not hang), and the
// port comes back with PORT_ACTIVE.
func TestLinkDown(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		if b.kern && os.Getenv(DisruptEnv) != "1" {
			t.Skipf("set %s=1 to take %s's netdev down (the guest run does)", DisruptEnv, b.name)
		}
		p := connect(t, b)
		a := p.ep[0]
		require.NoError(t, b.setLink(false))
		linkUp := false
		defer func() {
			if !linkUp {
				_ = b.setLink(true)
			}
		}()
		waitEvent := func(want mlx5.EventType) {
			t.Helper()
			deadline := time.Now().Add(pollTimeout)
			for {
				ev, err := a.ctx.GetAsyncEvent(time.Until(deadline))
				require.NoError(t, err, "waiting for %v", want)
				a.ctx.AckAsyncEvent(ev)
				if ev.Type == want {
					require.Equal(t, 1, ev.Port)
					return
				}
			}
		}
		waitEvent(mlx5.EventPortErr)
		_, err := a.qp.PostSend([]provider.SendWR{{WRID: 9, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{a.mr.SGE(0, 64)}, RemoteAddr: p.ep[1].buf.Addr, RKey: p.ep[1].mr.RKey}})
		if err == nil {
			// RC retries (timeout 14: ~67 ms, 7 times), then gives up.
			deadline := time.Now().Add(4 * pollTimeout)
			wcs := make([]provider.WC, 1)
			for {
				k, err := a.cq.Poll(wcs)
				require.NoError(t, err)
				if k == 1 {
					require.NotEqual(t, provider.WCSuccess, wcs[0].Status, "a send over a dead link succeeded")
					break
				}
				require.True(t, time.Now().Before(deadline), "no completion for a send over a dead link")
				time.Sleep(time.Millisecond)
			}
		} else {
			require.ErrorIs(t, err, provider.ErrClosed)
		}
		require.NoError(t, b.setLink(true))
		linkUp = true
		waitEvent(mlx5.EventPortActive)
	})
}

// TestMLX5Hardware says whether this machine can run the suite on a
// ConnectX through the mlx5 kernel backend, and how (docs/hardware.md).
func TestMLX5Hardware(t *testing.T) {
	ds, err := kverbs.List()
	var mlx []string
	for _, d := range ds {
		if d.Driver == kverbs.DriverMLX5 {
			mlx = append(mlx, d.Name)
		}
	}
	if len(mlx) == 0 {
		t.Skipf("no ConnectX (mlx5) device on this machine (%v): the mlx5 kernel backend needs one; see docs/hardware.md", err)
	}
	if dev := os.Getenv(KDevEnv); !strings.HasPrefix(dev, "mlx5") {
		t.Skipf("mlx5 devices %v present: run %s=%s go test ./test/conformance (docs/hardware.md)", mlx, KDevEnv, mlx[0])
	}
	ctx, err := provider.OpenKernel(os.Getenv(KDevEnv), provider.KernelOptions{MemSize: 1 << 20})
	require.NoError(t, err)
	defer ctx.Close()
	drv, ok := ctx.Kernel()
	require.True(t, ok)
	require.Equal(t, "mlx5", drv)
}

// TestKernelRefusal: a command the device refuses fails with the
// provider's sentinel; through the kernel it also names the command and
// carries the errno (*uverbs.Error).
func TestKernelRefusal(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		e := newEP(t, b.sides[0].ctx, provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
		defer e.destroy(t)
		a := provider.DefaultConnectAttr()
		a.Peer = provider.Peer{QPN: e.qp.QPN(), GID: b.sides[0].gid, MAC: b.sides[0].mac}
		require.NoError(t, e.qp.ToInit(a))
		a.SGIDIndex = 200 // an empty slot of the GID table
		err := e.qp.ToRTR(a)
		require.Error(t, err)
		// Through uverbs (the kernel) an errno, mapped to the provider's
		// sentinel; through the emulated device's direct control, the
		// mlx5 command status it answered.
		if b.kern {
			require.ErrorIs(t, err, provider.ErrInvalidAttr)
		} else {
			require.ErrorIs(t, err, mlx5.StatusBadParam)
		}
		require.Equal(t, provider.QPStateInit, e.qp.State(), "a refused move leaves the state")
		if b.kern {
			var ue *uverbs.Error
			require.ErrorAs(t, err, &ue)
			require.Equal(t, "MODIFY_QP", ue.Cmd)
			require.NotZero(t, ue.Errno)
			require.ErrorIs(t, err, ue.Errno)
		}
	})
}

// TestUC: an unreliable connection carries SEND and RDMA WRITE.
func TestUC(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		var eps [2]*ep
		cp := provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
		for i := range eps {
			ctx := b.sides[i].ctx
			e := &ep{ctx: ctx}
			var err error
			e.pd, err = ctx.AllocPD()
			require.NoError(t, err)
			e.cq, err = ctx.CreateCQ(16)
			require.NoError(t, err)
			e.buf, err = ctx.AllocBuffer(bufSize, 4096)
			require.NoError(t, err)
			e.mr, err = e.pd.RegMR(e.buf.Addr, bufSize, provider.AccessLocalWrite|provider.AccessRemoteWrite)
			require.NoError(t, err)
			e.qp, err = ctx.CreateQP(e.pd, provider.QPInitAttr{Type: provider.QPTypeUC, SendCQ: e.cq, RecvCQ: e.cq, Cap: cp})
			require.NoError(t, err)
			eps[i] = e
			t.Cleanup(func() { e.destroy(t) })
		}
		for i, e := range eps {
			a := provider.DefaultConnectAttr()
			a.Peer = provider.Peer{QPN: eps[1-i].qp.QPN(), PSN: 0x300, GID: b.sides[1-i].gid, MAC: b.sides[1-i].mac}
			a.PSN, a.Access = 0x300, provider.AccessRemoteWrite
			require.NoError(t, e.qp.Connect(a))
		}
		a, z := eps[0], eps[1]
		fill(a.bytes(t, 0, 2000), 13)
		_, err := z.qp.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{z.mr.SGE(0, 2048)}}})
		require.NoError(t, err)
		_, err = a.qp.PostSend([]provider.SendWR{
			{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{a.mr.SGE(0, 1500)}},
			{WRID: 3, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{a.mr.SGE(0, 2000)},
				RemoteAddr: z.buf.Addr + 8192, RKey: z.mr.RKey},
		})
		require.NoError(t, err)
		sw := poll(t, a.cq, 2)
		require.Equal(t, []uint64{2, 3}, []uint64{sw[0].WRID, sw[1].WRID})
		for _, wc := range sw {
			require.Equal(t, provider.WCSuccess, wc.Status)
		}
		rw := poll(t, z.cq, 1)[0]
		require.Equal(t, provider.WCSuccess, rw.Status)
		require.Equal(t, uint32(1500), rw.ByteLen)
		require.Equal(t, a.bytes(t, 0, 1500), z.bytes(t, 0, 1500))
		// A UC WRITE completes at the requester when sent; wait for the
		// data (polling the responder's CQ drives an emulated device).
		deadline := time.Now().Add(pollTimeout)
		for !bytes.Equal(a.bytes(t, 0, 2000), z.bytes(t, 8192, 2000)) {
			require.True(t, time.Now().Before(deadline), "the WRITE's data never landed")
			n, err := z.cq.Poll(make([]provider.WC, 1))
			require.NoError(t, err)
			require.Zero(t, n, "a WRITE without immediate consumes no receive")
			time.Sleep(time.Millisecond)
		}
	})
}

// TestUD: datagrams through address handles: SEND and SEND_WITH_IMM, the
// 40-byte GRH area in front of the payload, the sender's QPN.
func TestUD(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		const qkey = 0x11111111
		var eps [2]*ep
		var ahs [2]*provider.AH
		cp := provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
		for i := range eps {
			ctx := b.sides[i].ctx
			e := &ep{ctx: ctx}
			var err error
			e.pd, err = ctx.AllocPD()
			require.NoError(t, err)
			e.cq, err = ctx.CreateCQ(16)
			require.NoError(t, err)
			e.buf, err = ctx.AllocBuffer(bufSize, 4096)
			require.NoError(t, err)
			e.mr, err = e.pd.RegMR(e.buf.Addr, bufSize, provider.AccessLocalWrite)
			require.NoError(t, err)
			e.qp, err = ctx.CreateQP(e.pd, provider.QPInitAttr{Type: provider.QPTypeUD, SendCQ: e.cq, RecvCQ: e.cq, Cap: cp})
			require.NoError(t, err)
			a := provider.DefaultConnectAttr()
			a.QKey = qkey
			require.NoError(t, e.qp.Connect(a))
			peer := b.sides[1-i]
			ahs[i], err = e.pd.CreateAH(provider.AHAttr{DGID: peer.gid, DMAC: peer.mac, Port: 1, SGIDIndex: 1, HopLimit: 64})
			require.NoError(t, err)
			eps[i] = e
			ah := ahs[i]
			t.Cleanup(func() {
				require.NoError(t, ah.Destroy())
				e.destroy(t)
			})
		}
		a, z := eps[0], eps[1]
		cases := []struct {
			name string
			wr   provider.SendWR
			imm  bool
		}{
			{"SEND", provider.SendWR{Opcode: provider.WRSend}, false},
			{"SEND_WITH_IMM, the QP's own Q_Key", provider.SendWR{Opcode: provider.WRSendImm, Imm: 0xabcd0123, RemoteQKey: 0x80000000}, true},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				const n = 700
				fill(a.bytes(t, 0, n), byte(40+i))
				_, err := z.qp.PostRecv([]provider.RecvWR{{WRID: uint64(10 + i), SGL: []provider.SGE{z.mr.SGE(4096, 40+n)}}})
				require.NoError(t, err)
				wr := c.wr
				wr.WRID, wr.Flags, wr.AH, wr.RemoteQPN = uint64(i+1), provider.SendSignaled, ahs[0], z.qp.QPN()
				wr.SGL = []provider.SGE{a.mr.SGE(0, n)}
				if wr.RemoteQKey == 0 {
					wr.RemoteQKey = qkey
				}
				_, err = a.qp.PostSend([]provider.SendWR{wr})
				require.NoError(t, err)
				sw, rw := pollBoth(t, &pair{ep: [2]*ep{a, z}}, 1, 1)
				require.Equal(t, provider.WCSuccess, sw[0].Status, "%v", sw[0].Status)
				require.Equal(t, provider.WCSend, sw[0].Opcode)
				r := rw[0]
				require.Equal(t, provider.WCSuccess, r.Status, "%v", r.Status)
				require.Equal(t, provider.WCRecv, r.Opcode)
				require.Equal(t, uint32(40+n), r.ByteLen, "the GRH area counts")
				require.Equal(t, a.qp.QPN(), r.SrcQP)
				require.NotZero(t, r.Flags&provider.WCFlagGRH)
				require.Equal(t, c.imm, r.Flags&provider.WCFlagWithImm != 0)
				if c.imm {
					require.Equal(t, wr.Imm, r.Imm)
				}
				require.Equal(t, a.bytes(t, 0, n), z.bytes(t, 4096+40, n))
			})
		}
		_, err := a.qp.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, AH: ahs[0], RemoteQPN: z.qp.QPN()}})
		require.ErrorIs(t, err, provider.ErrInvalidArg, "no RDMA on UD")
		_, err = a.qp.PostSend([]provider.SendWR{{Opcode: provider.WRSend}})
		require.ErrorIs(t, err, provider.ErrInvalidArg, "no AH")
	})
}

// TestSRQ: receives from a shared receive queue, in order, with no
// receive queue of the QP's own; the verbs around it (query, busy
// destroy, limits).
func TestSRQ(t *testing.T) {
	each(t, func(t *testing.T, b *backend) {
		cp := provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
		a := newEP(t, b.sides[0].ctx, cp)
		t.Cleanup(func() { a.destroy(t) })
		ctx := b.sides[1].ctx
		z := &ep{ctx: ctx}
		var err error
		z.pd, err = ctx.AllocPD()
		require.NoError(t, err)
		_, err = z.pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 0, MaxSGE: 1})
		require.ErrorIs(t, err, provider.ErrInvalidArg, "max_wr 0")
		srq, err := z.pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
		require.NoError(t, err)
		require.GreaterOrEqual(t, srq.MaxWR(), 16)
		q, err := srq.Query()
		require.NoError(t, err)
		require.GreaterOrEqual(t, q.MaxWR, 16)
		z.cq, err = ctx.CreateCQ(32)
		require.NoError(t, err)
		z.buf, err = ctx.AllocBuffer(bufSize, 4096)
		require.NoError(t, err)
		z.mr, err = z.pd.RegMR(z.buf.Addr, bufSize, fullAccess)
		require.NoError(t, err)
		z.qp, err = ctx.CreateQP(z.pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: z.cq, RecvCQ: z.cq, SRQ: srq, Cap: cp})
		require.NoError(t, err)
		require.Same(t, srq, z.qp.SRQ())
		t.Cleanup(func() {
			require.NoError(t, z.qp.Destroy())
			require.NoError(t, srq.Destroy())
			require.NoError(t, z.mr.Dereg())
			require.NoError(t, z.cq.Destroy())
			require.NoError(t, z.pd.Dealloc())
			require.NoError(t, ctx.FreeBuffer(z.buf))
		})
		require.ErrorIs(t, srq.Destroy(), provider.ErrBusy, "an SRQ in use")
		psn := [2]uint32{0x10, 0x20}
		eps := [2]*ep{a, z}
		for i, e := range eps {
			c := provider.DefaultConnectAttr()
			c.Peer = provider.Peer{QPN: eps[1-i].qp.QPN(), PSN: psn[1-i], GID: b.sides[1-i].gid, MAC: b.sides[1-i].mac}
			c.PSN, c.Access = psn[i], fullAccess
			require.NoError(t, e.qp.ToInit(c))
			require.NoError(t, e.qp.ToRTR(c))
		}
		for i, e := range eps {
			c := provider.DefaultConnectAttr()
			c.PSN = psn[i]
			require.NoError(t, e.qp.ToRTS(c))
		}
		_, err = z.qp.PostRecv([]provider.RecvWR{{SGL: []provider.SGE{z.mr.SGE(0, 8)}}})
		require.ErrorIs(t, err, provider.ErrInvalidArg, "a QP on an SRQ has no receive queue")
		const k = 4
		recvs := make([]provider.RecvWR, k)
		sends := make([]provider.SendWR, k)
		for i := range k {
			recvs[i] = provider.RecvWR{WRID: uint64(50 + i), SGL: []provider.SGE{z.mr.SGE(uint64(i*1024), 1024)}}
			sends[i] = provider.SendWR{WRID: uint64(i), Opcode: provider.WRSend, Flags: provider.SendSignaled,
				SGL: []provider.SGE{a.mr.SGE(0, uint32(100+i))}}
		}
		n, err := srq.PostRecv(recvs)
		require.NoError(t, err)
		require.Equal(t, k, n)
		_, err = srq.PostRecv([]provider.RecvWR{{SGL: make([]provider.SGE, srq.MaxSGE()+1)}})
		require.ErrorIs(t, err, provider.ErrTooManySGE)
		// Armed at 2 with 4 posted: the event comes when fewer than 2 are left.
		require.NoError(t, srq.Modify(provider.SRQAttr{SRQLimit: 2}, provider.SRQAttrLimit))
		_, err = a.qp.PostSend(sends)
		require.NoError(t, err)
		sw, rw := pollBoth(t, &pair{ep: eps}, k, k)
		for i := range k {
			require.Equal(t, provider.WCSuccess, sw[i].Status)
			require.Equal(t, provider.WCSuccess, rw[i].Status, "%v", rw[i].Status)
			require.Equal(t, uint64(50+i), rw[i].WRID, "SRQ receives in order")
			require.Equal(t, uint32(100+i), rw[i].ByteLen)
			require.Equal(t, z.qp.QPN(), rw[i].QPNum)
		}
		ev, err := ctx.GetAsyncEvent(pollTimeout)
		require.NoError(t, err)
		require.Equal(t, mlx5.EventSRQLimitReached, ev.Type, "%v", ev)
		require.Same(t, srq, ev.SRQ)
		ctx.AckAsyncEvent(ev)
	})
}

// RemoveEnv allows TestDeviceRemoval to delete the kernel device (and add
// it back): the guest run sets it, for a separate last invocation.
const RemoveEnv = "SOFTNIC_KDEV_REMOVE"

// TestDeviceRemoval: the kernel device is deleted (rdma link delete) under
// an open context with a connected QP. rxe cannot disassociate a context,
// so the kernel waits for the context to close: every verb keeps
// answering (success or an error) instead of hanging, Close returns, and
// the removal then completes. The device is added back afterwards.
func TestDeviceRemoval(t *testing.T) {
	name := os.Getenv(KDevEnv)
	if name == "" || os.Getenv(RemoveEnv) != "1" {
		t.Skipf("set %s and %s=1 to delete and re-add the kernel device (the guest run does, last)", KDevEnv, RemoveEnv)
	}
	netdev, err := netdevOf(name)
	require.NoError(t, err)
	var kb *backend
	for _, b := range backends(t) {
		if b.kern {
			kb = b
		}
	}
	require.NotNil(t, kb)
	p := connectOpts(t, kb, pairOpts{closes: true})
	a := p.ep[0]
	done := make(chan error, 1)
	rm, cancel := context.WithCancel(context.Background())
	defer cancel() // a failed test does not leave the removal behind
	go func() {
		out, err := exec.CommandContext(rm, "rdma", "link", "delete", name).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("rdma link delete %s: %v: %s", name, err, out)
		}
		done <- err
	}()
	// Its uverbs device goes while the kernel waits for its users: no
	// new context can find it.
	deadline := time.Now().Add(pollTimeout)
	for {
		if _, err := kverbs.Find(name); errors.Is(err, kverbs.ErrNoDevice) {
			break
		}
		require.True(t, time.Now().Before(deadline), "%s's uverbs device never left sysfs", name)
		time.Sleep(10 * time.Millisecond)
	}
	_, err = provider.OpenKernel(name, provider.KernelOptions{MemSize: 1 << 20})
	require.ErrorIs(t, err, provider.ErrNoDevice, "a device being removed")
	select {
	case err := <-done:
		t.Fatalf("rdma link delete returned with a context open: %v", err)
	default:
	}
	// Every verb answers, within a bound, whatever it answers.
	within := func(what string, f func() error) {
		t.Helper()
		ch := make(chan error, 1)
		go func() { ch <- f() }()
		select {
		case err := <-ch:
			t.Logf("%s during removal: %v", what, err)
		case <-time.After(pollTimeout):
			t.Fatalf("%s hung during the device's removal", what)
		}
	}
	within("query_port", func() error { _, err := a.ctx.QueryPort(1); return err })
	within("post_send + poll", func() error {
		_, err := a.qp.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{a.mr.SGE(0, 8)}, RemoteAddr: p.ep[1].buf.Addr, RKey: p.ep[1].mr.RKey}})
		if err != nil {
			return err
		}
		// Within half of within's bound, and without t: this runs on
		// within's goroutine.
		wcs, err := pollWithin(a.cq, 1, pollTimeout/2)
		if err != nil {
			return err
		}
		return fmt.Errorf("completion status %v", wcs[0].Status)
	})
	within("create_cq", func() error {
		cq, err := a.ctx.CreateCQ(4)
		if err == nil {
			err = cq.Destroy()
		}
		return err
	})
	for _, s := range kb.sides {
		within("close", s.ctx.Close)
	}
	select {
	case err := <-done:
		require.NoError(t, err, "the removal completes once the contexts are closed")
	case <-time.After(4 * pollTimeout):
		t.Fatal("rdma link delete still waits after every context closed")
	}
	// Back as it was, for whoever runs next.
	out, err := exec.Command("rdma", "link", "add", name, "type", "rxe", "netdev", netdev).CombinedOutput()
	require.NoError(t, err, "%s", out)
	deadline = time.Now().Add(pollTimeout)
	for {
		b, err := os.ReadFile("/sys/class/infiniband/" + name + "/ports/1/gids/1")
		if err == nil && strings.TrimSpace(string(b)) != "0000:0000:0000:0000:0000:0000:0000:0000" {
			break
		}
		require.True(t, time.Now().Before(deadline), "%s has no GID 1 after re-adding it", name)
		time.Sleep(20 * time.Millisecond)
	}
}
