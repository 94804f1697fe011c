package test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/uverbs"
)

// The control plane is out of band: opening the provider over uverbs bytes
// (testbed.Config.UverbsControl, a uverbsdev.Server behind a loopback
// transport) must change neither what a workload computes nor a single
// byte of its trace. Each case runs a workload twice, once over the
// device's Go control interface and once over uverbs, and compares the
// workload's own digest (work completions, data), every hardware counter
// of both devices and the Chrome trace JSON.

// bothControls runs work on a fresh world with each control plane and
// requires identical results and traces.
func bothControls(t *testing.T, mod func(*testbed.Config), opts testbed.ConnOpts, work func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder)) {
	t.Helper()
	if os.Getenv("SOFTNIC_TESTBED_UVERBS") != "" {
		t.Skip("SOFTNIC_TESTBED_UVERBS puts both runs over uverbs: nothing to compare")
	}
	type run struct {
		digest, counters string
		trace            []byte
	}
	var runs [2]run
	for i, uv := range []bool{false, true} {
		cfg := testbed.DefaultConfig()
		cfg.Trace = true
		if mod != nil {
			mod(&cfg)
		}
		cfg.UverbsControl = uv
		w, err := testbed.New(cfg)
		require.NoError(t, err)
		eps, err := w.ConnectRC(opts)
		require.NoError(t, err, "uverbs control %v", uv)
		var log strings.Builder
		for _, e := range eps {
			// What QUERY_DEVICE, QUERY_PORT, the GID table and GET_CONTEXT
			// rebuild over uverbs is what the device says, but for the
			// inline limit, which no uverbs answer carries.
			a := e.Host.Ctx.Attr()
			a.MaxInline = 0
			p, err := e.Host.Ctx.QueryPort(1)
			require.NoError(t, err)
			fmt.Fprintf(&log, "attr %+v\nport %+v\n", a, p)
		}
		work(t, w, eps, &log)
		w.Settle(0)
		for _, e := range eps {
			fmt.Fprintf(&log, "buf %x\n", sha256.Sum256(e.Buf.Bytes))
		}
		var ctrs strings.Builder
		for n, h := range w.Hosts {
			if n == 1 && h == w.Hosts[0] {
				break
			}
			m := h.Dev.HWCounters()
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(&ctrs, "%d %s=%d\n", n, k, m[k])
			}
			if uv {
				require.NotNil(t, h.Uverbs)
				require.Zero(t, h.Uverbs.Counters()["refused"], "node %d: refused uverbs commands: %v", n, h.Uverbs.Counters())
				require.Greater(t, h.Uverbs.Counters()["commands"], uint64(8), "node %d: the control went over uverbs", n)
			}
		}
		var js bytes.Buffer
		require.NoError(t, trace.WriteChrome(&js, w.Rec.Events()))
		runs[i] = run{digest: log.String(), counters: ctrs.String(), trace: js.Bytes()}
		w.Close()
	}
	if testing.Verbose() && len(runs[0].digest) < 600 {
		t.Log(runs[0].digest)
	}
	t.Logf("digest %d bytes, %d counter lines, trace %d bytes", len(runs[0].digest), strings.Count(runs[0].counters, "\n"), len(runs[0].trace))
	require.Equal(t, runs[0].digest, runs[1].digest, "workload results")
	require.Equal(t, runs[0].counters, runs[1].counters, "device counters")
	require.NotEmpty(t, runs[0].trace)
	if !bytes.Equal(runs[0].trace, runs[1].trace) {
		a, b := runs[0].trace, runs[1].trace
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		lo := max(i-200, 0)
		t.Fatalf("trace JSON differs at byte %d of %d/%d:\ndirect: %s\nuverbs: %s", i, len(a), len(b),
			a[lo:min(i+200, len(a))], b[lo:min(i+200, len(b))])
	}
}

// wcLog waits for n completions on cq and logs them.
func wcLog(t *testing.T, cq *provider.CQ, n int, log *strings.Builder) []provider.WC {
	t.Helper()
	wcs, err := testbed.Wait(cq, n)
	require.NoError(t, err)
	for _, wc := range wcs {
		fmt.Fprintf(log, "wc %+v\n", wc)
	}
	return wcs
}

// TestUverbsControlRCMatrix: every RC operation at sizes around the MTU
// and 64 KiB, BlueFlame and doorbell, inline, at two path MTUs.
func TestUverbsControlRCMatrix(t *testing.T) {
	ops := []provider.WROpcode{provider.WRSend, provider.WRSendImm, provider.WRRDMAWrite, provider.WRRDMAWriteImm, provider.WRRDMARead}
	for _, mtu := range []int{1024, 4096} {
		t.Run(fmt.Sprint("mtu", mtu), func(t *testing.T) {
			opts := testbed.ConnOpts{MTU: mtu, BufSize: 128 << 10, MaxInline: 256}
			bothControls(t, nil, opts, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
				req, rsp := eps[0], eps[1]
				fill(req.Buf.Bytes, 0x5a)
				fill(rsp.Buf.Bytes, 0xc3)
				wrid := uint64(1)
				for _, op := range ops {
					for _, n := range []int{0, 1, 63, mtu - 1, mtu, mtu + 1, 64 << 10} {
						for _, mode := range []string{"bf", "db", "inline"} {
							if mode == "inline" && (n > 200 || op == provider.WRRDMARead) {
								continue
							}
							recv := op == provider.WRSend || op == provider.WRSendImm || op == provider.WRRDMAWriteImm
							if recv {
								_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: wrid, SGL: []provider.SGE{rsp.MR.SGE(64<<10, uint32(max(n, 1)))}}})
								require.NoError(t, err)
							}
							req.QP.SetBlueFlame(mode != "db")
							wr := provider.SendWR{WRID: wrid, Opcode: op, Flags: provider.SendSignaled, Imm: uint32(wrid),
								RemoteAddr: rsp.MR.Addr + uint64(wrid%7), RKey: rsp.MR.RKey}
							if n > 0 {
								wr.SGL = []provider.SGE{req.MR.SGE(uint64(wrid%5), uint32(n))}
							}
							if mode == "inline" {
								wr.Flags |= provider.SendInline
							}
							_, err := req.QP.PostSend([]provider.SendWR{wr})
							require.NoError(t, err)
							wcLog(t, req.SendCQ, 1, log)
							if recv {
								wcLog(t, rsp.RecvCQ, 1, log)
							}
							wrid++
						}
					}
				}
				st, err := req.QP.QueryState()
				require.NoError(t, err)
				fmt.Fprintf(log, "query %v\n", st)
			})
		})
	}
}

// TestUverbsControlUDAndSRQ: UD sends through an AH, and RC receives from
// a shared receive queue (CREATE_SRQ, MODIFY_SRQ, QUERY_SRQ over uverbs).
func TestUverbsControlUDAndSRQ(t *testing.T) {
	t.Run("UD", func(t *testing.T) {
		bothControls(t, nil, testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 16 << 10}, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
			req, rsp := eps[0], eps[1]
			fill(req.Buf.Bytes, 7)
			for i, n := range []int{0, 1, 1000, 4096} {
				_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(0, 4096+40)}}})
				require.NoError(t, err)
				wr := provider.SendWR{WRID: uint64(100 + i), Opcode: provider.WRSendImm, Flags: provider.SendSignaled, Imm: uint32(i),
					AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}
				if n > 0 {
					wr.SGL = []provider.SGE{req.MR.SGE(0, uint32(n))}
				}
				_, err = req.QP.PostSend([]provider.SendWR{wr})
				require.NoError(t, err)
				wcLog(t, req.SendCQ, 1, log)
				wcLog(t, rsp.RecvCQ, 1, log)
			}
		})
	})
	t.Run("SRQ", func(t *testing.T) {
		bothControls(t, nil, testbed.ConnOpts{SRQ: true, RQDepth: 32}, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
			req, rsp := eps[0], eps[1]
			require.NoError(t, rsp.SRQ.Modify(provider.SRQAttr{SRQLimit: 2}, provider.SRQAttrLimit))
			a, err := rsp.SRQ.Query()
			require.NoError(t, err)
			fmt.Fprintf(log, "srq %+v\n", a)
			for i := 0; i < 8; i++ {
				_, err := rsp.SRQ.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*1024, 1024)}}})
				require.NoError(t, err)
			}
			for i := 0; i < 8; i++ {
				_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRSend, Flags: provider.SendSignaled,
					SGL: []provider.SGE{req.MR.SGE(uint64(i)*100, uint32(100+i))}}})
				require.NoError(t, err)
			}
			wcLog(t, req.SendCQ, 8, log)
			wcLog(t, rsp.RecvCQ, 8, log)
			ev, err := rsp.Host.Ctx.GetAsyncEvent(time.Millisecond)
			fmt.Fprintf(log, "async %+v %v\n", ev, err)
		})
	})
	t.Run("loopback cable", func(t *testing.T) {
		bothControls(t, func(c *testbed.Config) { c.Loopback = true }, testbed.ConnOpts{}, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
			req, rsp := eps[0], eps[1]
			for i := 0; i < 4; i++ {
				_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
					SGL: []provider.SGE{req.MR.SGE(0, uint32(1000*i+1))}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
				require.NoError(t, err)
				wcLog(t, req.SendCQ, 1, log)
			}
		})
	})
	t.Run("channel", func(t *testing.T) {
		bothControls(t, nil, testbed.ConnOpts{Channel: true}, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
			req, rsp := eps[0], eps[1]
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
			require.NoError(t, err)
			_, err = req.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
			require.NoError(t, err)
			cq, err := rsp.Channel.GetCQEvent(time.Second)
			require.NoError(t, err)
			fmt.Fprintf(log, "event on cq %#x\n", cq.CQN())
			cq.AckEvents(1)
			wcLog(t, rsp.RecvCQ, 1, log)
			wcLog(t, req.SendCQ, 1, log)
		})
	})
}

// TestUverbsControlErrorClasses: completions in error and the QP states
// they leave (bad lkey, bad rkey, RNR retries exceeded, a flushed RQ after
// a responder error), and control refusals that map to the same provider
// sentinels either way.
func TestUverbsControlErrorClasses(t *testing.T) {
	opts := testbed.ConnOpts{MinRNR: 1, RNRRetry: 1, Timeout: 8, RetryCnt: 1}
	bothControls(t, nil, opts, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
		req, rsp := eps[0], eps[1]
		state := func() {
			for _, e := range eps {
				st, err := e.QP.QueryState()
				require.NoError(t, err)
				fmt.Fprintf(log, "state %v\n", st)
			}
		}
		s := req.MR.SGE(0, 64)
		s.LKey ^= 0x4400
		_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{s}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
		require.NoError(t, err)
		wcLog(t, req.SendCQ, 1, log)
		state()
	})
	bothControls(t, nil, opts, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
		req, rsp := eps[0], eps[1]
		_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 9, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}, {WRID: 10, SGL: []provider.SGE{rsp.MR.SGE(64, 64)}}})
		require.NoError(t, err)
		_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey ^ 0x1100}})
		require.NoError(t, err)
		wcLog(t, req.SendCQ, 1, log)
		wcLog(t, rsp.RecvCQ, 2, log) // flushed
	})
	bothControls(t, nil, opts, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
		req := eps[0]
		_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
		require.NoError(t, err)
		wcLog(t, req.SendCQ, 1, log) // RNR retries exceeded
		// Control refusals: the provider's sentinels either way.
		pd := req.PD
		err = pd.Dealloc()
		fmt.Fprintf(log, "dealloc busy pd: busy=%v\n", errors.Is(err, provider.ErrBusy))
		err = req.SendCQ.Destroy()
		fmt.Fprintf(log, "destroy busy cq: busy=%v\n", errors.Is(err, provider.ErrBusy))
		// Back to RESET and up again: MODIFY_QP's transitions over uverbs.
		require.NoError(t, req.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
		st, err := req.QP.QueryState()
		require.NoError(t, err)
		fmt.Fprintf(log, "after reset %v\n", st)
	})
}

// TestUverbsControlRefusals: what a refused command looks like to the
// provider over uverbs: the sentinel, the errno and the device's reason.
func TestUverbsControlRefusals(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.UverbsControl = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	h := w.Hosts[0]
	ctl := provider.NewUverbsControl(h.Uverbs)
	// The context exists: a second GET_CONTEXT on the same file is EINVAL.
	_, err = ctl.GetContext()
	require.ErrorIs(t, err, provider.ErrInvalidArg)
	require.ErrorIs(t, err, syscall.EINVAL)
	var ue *uverbs.Error
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "GET_CONTEXT", ue.Cmd)

	pd, err := h.Ctx.AllocPD()
	require.NoError(t, err)
	buf, err := h.Ctx.AllocBuffer(4096, 4096)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite)
	require.NoError(t, err)
	// The device refuses a CQ it cannot hold (the provider's own check is
	// the same: MaxCQE came over QUERY_DEVICE).
	_, err = h.Ctx.CreateCQ(h.Ctx.Attr().MaxCQE + 1)
	require.ErrorIs(t, err, provider.ErrInvalidArg)
	require.NoError(t, mr.Dereg())
	require.NoError(t, pd.Dealloc())
	require.Equal(t, testbed.MACs[0], h.Ctx.Attr().MAC)
	require.Equal(t, testbed.IPs[0].As16(), h.Ctx.Attr().GID)
	p, err := h.Ctx.QueryPort(1)
	require.NoError(t, err)
	require.Len(t, p.GIDs, 2, "sgid indexes 0 and 1, the ones modify_qp takes")
	for _, g := range p.GIDs {
		require.Equal(t, testbed.IPs[0].As16(), g.GID)
	}
	require.NoError(t, h.Uverbs.Close())
	_, err = h.Ctx.AllocPD()
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorIs(t, err, provider.ErrClosed)
}

// TestUverbsClientDies: when a client's uverbs context closes (the daemon
// does it when the process dies), its QPs are flushed and destroyed and
// its MRs revoked; the peer of its QP runs into retry-exceeded, as on a
// real fabric, and the other host's client keeps working.
func TestUverbsClientDies(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.UverbsControl = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{Timeout: 8, RetryCnt: 2})
	require.NoError(t, err)
	dead, peer := eps[0], eps[1]
	_, err = peer.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{peer.MR.SGE(0, 64)}, RemoteAddr: dead.MR.Addr, RKey: dead.MR.RKey}})
	require.NoError(t, err)
	wc := waitOne(t, peer.SendCQ)
	require.Equal(t, provider.WCSuccess, wc.Status)

	objs := dead.Host.Uverbs.Objects()
	require.Equal(t, 1, objs["QP"])
	require.NoError(t, dead.Host.Uverbs.Close())
	require.Empty(t, dead.Host.Uverbs.Objects())
	_, err = dead.Host.Dev.QueryQP(dead.QP.QPN())
	require.Error(t, err, "the dead client's QP is destroyed on the device")
	require.Error(t, dead.Host.Dev.DeregMR(dead.MR.LKey), "its MR is revoked")

	_, err = peer.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{peer.MR.SGE(0, 64)}, RemoteAddr: dead.MR.Addr, RKey: dead.MR.RKey}})
	require.NoError(t, err)
	wc = waitOne(t, peer.SendCQ)
	require.Equal(t, provider.WCRetryExcErr, wc.Status, "the peer of a dead client's QP")
	// The surviving client's context still serves commands.
	pd, err := peer.Host.Ctx.AllocPD()
	require.NoError(t, err)
	require.NoError(t, pd.Dealloc())
	_, err = dead.Host.Ctx.AllocPD()
	require.ErrorIs(t, err, provider.ErrClosed)
}

// TestUverbsControlQueryQP: QP.Query (ibv_query_qp) gives back, over
// either control plane alike, what the QP was connected with: the remote
// access bits, the path, the RNR and retry settings, the outstanding
// READs, the RQ's size. (QUERY_QP used to answer only the state, the MTU,
// the destination QPN and the PSNs.)
func TestUverbsControlQueryQP(t *testing.T) {
	for _, c := range []struct {
		name string
		opts testbed.ConnOpts
	}{
		{"RC", testbed.ConnOpts{MTU: 2048, Timeout: 17, MaxRdAtomic: 8, MaxDestRdAtomic: 4, MinRNR: 9, RQDepth: 32}},
		{"RC on SRQ", testbed.ConnOpts{SRQ: true, RQDepth: 32}},
		{"UD", testbed.ConnOpts{Type: provider.QPTypeUD}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bothControls(t, nil, c.opts, func(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint, log *strings.Builder) {
				for i, e := range eps {
					a, caps, err := e.QP.Query()
					require.NoError(t, err)
					fmt.Fprintf(log, "qp %d %+v %+v\n", i, a, caps)
					require.Equal(t, provider.QPStateRTS, a.QPState)
					require.Equal(t, uint8(1), a.Port)
					if c.opts.Type == provider.QPTypeUD {
						require.Equal(t, e.QKey, a.QKey)
						require.Zero(t, a.AV.DGID, "a UD QP has no path")
					} else {
						peer := eps[1-i]
						require.Equal(t, provider.AccessRemoteWrite|provider.AccessRemoteRead, a.AccessFlags, "the remote bits")
						require.Equal(t, peer.QP.QPN(), a.DestQPN)
						require.Equal(t, peer.Host.ID.IP.As16(), a.AV.DGID)
						require.Equal(t, uint8(64), a.AV.HopLimit)
						require.Equal(t, uint8(1), a.AV.SGIDIndex)
						require.Equal(t, uint8(7), a.RetryCnt)
						tmo, rd, dest, rnr := uint8(14), uint8(16), uint8(16), uint8(12)
						if c.opts.Timeout != 0 {
							tmo, rd, dest, rnr = uint8(c.opts.Timeout), uint8(c.opts.MaxRdAtomic), uint8(c.opts.MaxDestRdAtomic), c.opts.MinRNR
						}
						require.Equal(t, []uint8{tmo, rd, dest, rnr}, []uint8{a.Timeout, a.MaxRdAtomic, a.MaxDestRdAtomic, a.MinRNRTimer},
							"timeout, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer")
					}
					if c.opts.SRQ {
						require.Zero(t, caps.MaxRecvWR, "an SRQ's QP has no RQ")
					} else {
						require.GreaterOrEqual(t, caps.MaxRecvWR, e.QP.Cap().MaxRecvWR, "the RQ ring holds at least what was asked")
						require.NotZero(t, caps.MaxRecvSGE)
					}
				}
			})
		})
	}
}
