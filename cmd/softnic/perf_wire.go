package main

// Mode 2 of `softnic perf`: one emulated NIC on a real wire (--wire), its
// peer stock perftest on another RoCE stack, in either role. The TCP
// exchange is perftest's (perftest_exchange.go) and follows, test by test,
// the order of exchanges of perftest's main functions, so that each side
// reads what the other writes. The loops are those of mode 1, stepped by
// the real-time driver (package wallclock); times are wall-clock (the
// peer's are too).

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/wallclock"
)

// wallClock is the wall clock since the run started, in ps.
type wallClock struct {
	rt    perfNet
	start time.Time
}

func (c wallClock) now() int64  { return time.Since(c.start).Nanoseconds() * 1000 }
func (c wallClock) beforePost() { c.rt.Sync() }

// perfOutReads is the emulated NIC's max_qp_rd_atom, the out_reads a
// READ or atomic test takes when --outs is not given (the header of mode 1
// when the profile says nothing else).
const perfOutReads = 16

// perfWireSide is the state of one mode-2 run.
type perfWireSide struct {
	o     *perfOpts
	rt    perfNet
	pd    *provider.PD
	scq   *provider.CQ
	rcq   *provider.CQ
	ch    *provider.CompChannel // -e
	qp    *provider.QP
	buf   provider.Buffer
	mr    *provider.MR
	area  int
	my    ptDest
	rem   ptDest
	pc    *ptConn
	mtu   int
	ep    *perfEP
	clk   wallClock
	wait  time.Duration // how long the peer's whole test may keep us waiting
	stdio io.Writer
	errw  io.Writer
}

// maxRdAtom is the device's max_qp_rd_atom (the most a peer's out_reads
// may make this QP's max_rd_atomic).
func (s *perfWireSide) maxRdAtom() uint32 {
	if m := s.rt.Context().Attr().MaxQPRdAtomic; m > 0 {
		return uint32(m)
	}
	return perfOutReads
}

func perfWire(o perfOpts, stdout, stderr io.Writer) error {
	if o.conn == "UD" {
		return errors.New("-c UD on a real wire: perftest's UD exchange (address handles from the first message) is not done yet; RC and UC are")
	}
	sizes := o.sizes()
	// The peer cycles its addresses through a cycle buffer (a page) past
	// the address softnic gives: two pages of room at least.
	area := max(perfArea(sizes[len(sizes)-1]), 2*4096)
	rt, err := openPerfNet(o, 2*area+4096, stderr)
	if err != nil {
		return err
	}
	defer rt.Close()
	defer reportUnfiredRules(stderr, "perf", rt)
	s := &perfWireSide{o: &o, rt: rt, area: area, clk: wallClock{rt: rt, start: time.Now()}, wait: 30 * o.timeout, stdio: stdout, errw: stderr}
	if err := s.init(); err != nil {
		return err
	}
	conn, err := s.connectTCP()
	if err != nil {
		return err
	}
	s.pc = &ptConn{c: conn, client: o.host != "", timeout: o.timeout, read: func(n int, timeout time.Duration) ([]byte, error) {
		return awaitIO(rt, bg(func() ([]byte, error) { return readFull(conn, n, timeout) }), timeout+time.Second, "the peer's perftest exchange")
	}}
	err = s.run(sizes)
	// The NIC is hardware to the peer: what it still owes (the ACK of the
	// peer's last WRITE, say) goes out before the process ends. Close
	// lingers for that (wallclock.Net.Close), while the TCP connection is still
	// open; the deferred Close is then a no-op.
	rt.Close()
	conn.Close()
	return err
}

// readFull reads exactly n bytes with a deadline.
func readFull(c net.Conn, n int, timeout time.Duration) ([]byte, error) {
	b := make([]byte, n)
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	k, err := io.ReadFull(c, b)
	if err != nil && k > 0 && errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w after %d of %d bytes", errPTShort, k, n)
	}
	return b, err
}

// init creates the PD, the buffer (send area, then receive area), the MR,
// the CQs and the QP, in INIT.
func (s *perfWireSide) init() error {
	ctx := s.rt.Context()
	if err := s.o.fitInline(ctx.Attr().MaxInline, "device "+ctx.Name()); err != nil {
		return err
	}
	var err error
	if s.pd, err = ctx.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	if s.buf, err = ctx.AllocBuffer(2*s.area, 4096); err != nil {
		return fmt.Errorf("couldn't allocate the buffer: %w", err)
	}
	clear(s.buf.Bytes)
	access := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	if s.mr, err = s.pd.RegMR(s.buf.Addr, uint64(2*s.area), access); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	if s.o.events {
		if s.ch, err = ctx.CreateCompChannel(); err != nil {
			return fmt.Errorf("Couldn't create completion channel: %w", err)
		}
	}
	depth := max(s.o.txDepth, s.o.postList) + s.o.rxDepth + 16
	if s.scq, err = ctx.CreateCQEx(provider.CQInitAttr{Entries: depth, Channel: s.ch}); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	if s.rcq, err = ctx.CreateCQEx(provider.CQInitAttr{Entries: s.o.rxDepth + 16, Channel: s.ch}); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	typ := provider.QPTypeRC
	if s.o.conn == "UC" {
		typ = provider.QPTypeUC
	}
	s.qp, err = ctx.CreateQP(s.pd, provider.QPInitAttr{Type: typ, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: provider.QPCap{MaxSendWR: max(s.o.txDepth, s.o.postList), MaxRecvWR: s.o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: s.o.inline}})
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	if err := s.qp.ToInit(provider.ConnectAttr{Access: access}); err != nil {
		return err
	}
	// perftest's out_reads: --outs fitted to the device's max_qp_rd_atom
	// for the READ and atomic tests, 1 for the others. It is announced in
	// the exchange and is this QP's max_dest_rd_atomic; the peer's is its
	// max_rd_atomic (connectQP).
	outReads := 1
	if t := s.o.test.verb; t == verbRead || t == verbAtomic {
		s.o.fitOuts(int(s.maxRdAtom()), s.errw)
		outReads = s.o.outs
	}
	s.my = ptDest{OutReads: uint32(outReads), QPN: s.qp.QPN(), PSN: rand.Uint32() & 0xffffff, RKey: s.mr.RKey,
		VAddr: s.mr.Addr + uint64(s.area), GID: s.rt.GID(), hasGID: true}
	return nil
}

// connectTCP is perftest's ethernet_server_connect (accept one client) or
// ethernet_client_connect. The client retries a refused connection until
// --timeout, so the two sides may start in any order.
func (s *perfWireSide) connectTCP() (net.Conn, error) {
	t := s.o.timeout
	if s.o.host == "" {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(s.o.port))
		if err != nil {
			return nil, fmt.Errorf("couldn't listen to port %d: %w", s.o.port, err)
		}
		defer ln.Close()
		if !s.o.json && s.o.output == "" {
			fmt.Fprintln(s.stdio, "\n************************************\n* Waiting for client to connect... *\n************************************")
		}
		c, err := awaitIO(s.rt, bg(ln.Accept), s.wait, "a perftest client")
		if errors.Is(err, wallclock.ErrTimeout) {
			return nil, fmt.Errorf("no client connected to port %d within %v (30 × --timeout)", s.o.port, s.wait)
		}
		return c, err
	}
	addr := net.JoinHostPort(s.o.host, strconv.Itoa(s.o.port))
	deadline := time.Now().Add(t)
	for {
		c, err := awaitIO(s.rt, bg(func() (net.Conn, error) { return net.DialTimeout("tcp", addr, t) }), 2*t, "the TCP connection to "+addr)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, wallclock.ErrTimeout) || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return nil, fmt.Errorf("couldn't connect to %s: %w", addr, err)
		}
		s.rt.Idle(100 * time.Millisecond)
	}
}

// connectQP is ctx_connect: RTR (after resolving the peer's MAC from its
// IPv4-mapped GID) and RTS, with perftest's attributes (provider.QP.Connect,
// from INIT).
func (s *perfWireSide) connectQP() error {
	ip, ok := gidIPv4(s.rem.GID)
	if !ok {
		return fmt.Errorf("the peer's GID %v is not an IPv4-mapped RoCEv2 GID: run perftest with -x and the index of its RoCEv2 IPv4 GID", netip.AddrFrom16(s.rem.GID))
	}
	mac, err := s.rt.Resolve(ip)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	a := provider.ConnectAttr{Peer: provider.Peer{QPN: s.rem.QPN, PSN: s.rem.PSN, GID: s.rem.GID, MAC: mac},
		PSN: s.my.PSN, MTU: s.mtu, SGIDIndex: uint8(s.o.gidIdx), HopLimit: 64, TrafficClass: uint8(s.o.tclass),
		MaxDestRdAtomic: uint8(s.my.OutReads), MinRNRTimer: 12,
		Timeout: uint8(s.o.qpTimeout), RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: uint8(min(max(s.rem.OutReads, 1), s.maxRdAtom()))}
	if err := s.qp.Connect(a); err != nil { // on from INIT, where init left it (perftest's ctx_init)
		return err
	}
	s.ep = &perfEP{qp: s.qp, scq: s.scq, rcq: s.rcq, mr: s.mr, buf: s.buf.Bytes, sendOff: 0, recvOff: uint64(s.area),
		remAddr: s.rem.VAddr, remKey: s.rem.RKey, maxInl: s.o.inline, atomicOp: atomicOpcode(s.o.atomic), ch: s.ch}
	return s.ep.armEvents(s.o.test.verb == verbSend)
}

// advance is the scheduler's wait on a wire: one pump of the driver, and
// an error once no actor has moved for --timeout.
func (s *perfWireSide) advance(actors []perfActor) func() error {
	last := -1.0
	since := time.Now()
	return func() error {
		var p float64
		for _, a := range actors {
			p += a.progress()
		}
		if p != last {
			last, since = p, time.Now()
		}
		if time.Since(since) > s.o.timeout {
			return fmt.Errorf("%w after %v without progress (counters: %s)", wallclock.ErrTimeout, s.o.timeout, s.rt.CounterLine())
		}
		return s.rt.Advance()
	}
}

// run is the test's sequence of exchanges and loops.
func (s *perfWireSide) run(sizes []int) error {
	o := s.o
	t := o.test
	pc := s.pc
	client := o.host != ""
	role := "server"
	if client {
		role = "client"
	}
	active := s.rt.ActiveMTU()
	if active == 0 {
		active = 4096
	}
	var err error
	if _, s.mtu, err = pc.preamble(4096, o.mtuBytes(active)); err != nil {
		return err
	}
	keys := func(what string) error {
		r, err := pc.keys(what, s.my, 0)
		if err == nil {
			s.rem = r
		}
		return err
	}
	// The keys exchanges before the test, in the order of each test's
	// main (perftest.md): write_lat and read/atomic_lat have one more
	// before the per-QP round; send tests have the barrier after connect.
	switch {
	case !t.bw && t.verb != verbSend:
		if err := keys("first"); err != nil {
			return err
		}
		fallthrough
	default:
		if err := keys("QP"); err != nil {
			return err
		}
	}
	if err := s.connectQP(); err != nil {
		return err
	}
	if t.verb == verbSend {
		if err := keys("after connect"); err != nil {
			return err
		}
	}
	if err := keys("print remote"); err != nil {
		return err
	}
	if t.verb != verbSend {
		if err := keys("after RTR"); err != nil {
			return err
		}
	}
	hdr := newPerfHeader(o, s.mtu, s.rt.ProfileName(), "wall clock (a real wire)", role)
	hdr.Local = []perfAddr{{LID: s.my.LID, QPN: s.my.QPN, PSN: s.my.PSN, RKey: s.my.RKey, VAddr: s.my.VAddr, OutReads: s.my.OutReads, GID: s.my.GID}}
	hdr.Remote = []perfAddr{{LID: s.rem.LID, QPN: s.rem.QPN, PSN: s.rem.PSN, RKey: s.rem.RKey, VAddr: s.rem.VAddr, OutReads: s.rem.OutReads, GID: s.rem.GID}}
	pr := &perfPrinter{w: s.stdio, o: o}
	pr.header(hdr)

	switch {
	case o.bidir:
		return s.runBidir(pr, sizes, keys)
	case !t.bw && t.verb == verbWrite:
		for _, size := range sizes {
			a := &writeLat{gap: o.postGap(), ep: s.ep, clk: s.clk, server: !client, iters: o.iters, size: size}
			if err := s.latRun(pr, size, a, &a.posted); err != nil {
				return err
			}
		}
		return pr.end()
	case !t.bw && t.verb == verbSend:
		for _, size := range sizes {
			if err := s.ep.postRecvs(size, o.rxDepth); err != nil {
				return err
			}
			if err := keys("receives posted"); err != nil {
				return err
			}
			a := &sendLat{gap: o.postGap(), ep: s.ep, clk: s.clk, server: !client, iters: o.iters, size: size, rxDepth: o.rxDepth, cqMod: o.cqMod}
			if err := s.latRun(pr, size, a, &a.posted); err != nil {
				return err
			}
		}
		if err := pr.end(); err != nil {
			return err
		}
		return pc.close(s.my, 0)
	case !t.bw:
		// read_lat, atomic_lat: the server only waits for the client's end.
		if !client {
			if _, err := pc.keys("close", s.my, s.wait); err != nil {
				return err
			}
			_, _ = s.pc.c.Write([]byte(ptDone))
			if !o.json && o.output == "" {
				fmt.Fprintln(s.stdio, perfRule) // the client measures; the server has no table (as perftest)
				return nil
			}
			return pr.end()
		}
		for _, size := range sizes {
			a := &reqLat{gap: o.postGap(), ep: s.ep, clk: s.clk, op: perfOpcode(t, s.ep.atomicOp), iters: o.iters, size: size}
			if err := s.latRun(pr, size, a, &a.posted); err != nil {
				return err
			}
		}
		if err := pr.end(); err != nil {
			return err
		}
		return pc.close(s.my, 0)
	case t.verb == verbSend:
		// send_bw: the server receives and times the first and last
		// message; both sides print their own table.
		for _, size := range sizes {
			var actors []perfActor
			var srv *bwServer
			var cli *bwClient
			if client {
				cli = newBWClient([]*perfEP{s.ep}, s.clk, provider.WRSend, o.iters, size, o.txDepth, o.postList, o.cqMod, 0)
				actors = []perfActor{cli}
			} else {
				if srv, err = newBWServer([]*perfEP{s.ep}, s.clk, o.iters, size, o.rxDepth, false); err != nil {
					return err
				}
				actors = []perfActor{srv}
			}
			if err := keys("receives posted"); err != nil {
				return err
			}
			if err := runActors(actors, actors, s.advance(actors), nil); err != nil {
				return fmt.Errorf("%s, %d bytes: %w", t.name, size, err)
			}
			if client {
				pr.bw(cli.stats(o.gbits, o.noPeak))
			} else {
				pr.bw(bwFromSpan(srv.rcnt, srv.last-srv.first, size, o.gbits))
			}
			if o.all {
				if err := keys("next size"); err != nil {
					return err
				}
			}
		}
		if err := pr.end(); err != nil {
			return err
		}
		return pc.close(s.my, 0)
	default:
		// write_bw, read_bw, atomic_bw: the server waits for the client's
		// report and prints it.
		if !client {
			if _, err := pc.keys("client done", s.my, s.wait); err != nil {
				return err
			}
			rep, err := pc.reports(ptReport{})
			if err != nil {
				return err
			}
			pr.bw(bwStats{Bytes: int(rep.Size), Iters: int(rep.Iters), Peak: rep.Peak, Avg: rep.Avg, MsgRate: rep.MsgRate})
			if err := pr.end(); err != nil {
				return err
			}
			return pc.close(s.my, 0)
		}
		var last bwStats
		for _, size := range sizes {
			cli := newBWClient([]*perfEP{s.ep}, s.clk, perfOpcode(t, s.ep.atomicOp), o.iters, size, o.txDepth, o.postList, o.cqMod, 0)
			if err := runActors([]perfActor{cli}, []perfActor{cli}, s.advance([]perfActor{cli}), nil); err != nil {
				return fmt.Errorf("%s, %d bytes: %w", t.name, size, err)
			}
			last = cli.stats(o.gbits, o.noPeak)
			pr.bw(last)
		}
		if err := pr.end(); err != nil {
			return err
		}
		if err := keys("client done"); err != nil {
			return err
		}
		if _, err := pc.reports(ptReport{Size: uint64(last.Bytes), Iters: uint64(last.Iters), Peak: last.Peak, Avg: last.Avg, MsgRate: last.MsgRate}); err != nil {
			return err
		}
		return pc.close(s.my, 0)
	}
}

// latRun runs one latency actor for size and prints its row from the post
// times it recorded in *posted.
func (s *perfWireSide) latRun(pr *perfPrinter, size int, a perfActor, posted *[]int64) error {
	if err := runActors([]perfActor{a}, []perfActor{a}, s.advance([]perfActor{a}), nil); err != nil {
		return fmt.Errorf("%s, %d bytes: %w", s.o.test.name, size, err)
	}
	st, ok := computeLat(*posted, size, s.o.test.rttDivisor())
	if !ok {
		return errors.New("too few iterations for the statistics")
	}
	pr.samples(*posted, s.o.test.rttDivisor(), size)
	pr.lat(st)
	return nil
}
