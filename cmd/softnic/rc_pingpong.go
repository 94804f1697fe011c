package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/wallclock"
)

func init() {
	register("rc_pingpong", "ibv_rc_pingpong, either role: on a real network (--wire udp:/tap:), a device of softnic serve (-d softnicN --socket) or a kernel device (-d rxe0)", runRCPingpong)
}

// The work-request ids and the loop of rdma-core's
// libibverbs/examples/rc_pingpong.c, which this command mirrors so that
// ibv_rc_pingpong on any other RoCE stack is its peer in either role.
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// ppMsgLen is the handshake message: "%04x:%06x:%06x:%s" (LID, QPN, PSN,
// GID as 32 hex digits in raw byte order) plus its NUL.
const ppMsgLen = len("0000:000000:000000:00000000000000000000000000000000") + 1

// ppDone is what the client writes once it has the server's address.
const ppDone = "done\x00"

// ppRefused starts what a softnic server sends in place of its address
// when it refuses the client: "ERR:" and a reason, NUL-terminated, always
// shorter than the 52-byte address so that ibv_rc_pingpong as the client
// sees a short read ("Couldn't read remote address") as it would for a
// closed connection. ppRefusedGID is the reason for a client that sent no
// RoCEv2 GID (it ran without -g, or with another GID index).
const (
	ppRefused    = "ERR:"
	ppRefusedGID = "gid-index"
)

// ppClientRefused is what a softnic client writes in place of "done"
// when the server's address has no RoCEv2 GID (the server ran without
// -g): as long as "done", so that ibv_rc_pingpong as the server reads it
// whole (it checks only the length).
const ppClientRefused = "ERR:\x00"

// errRefused is returned by a client whose server refused it.
var errRefused = errors.New("the server refused the connection")

// errClientRefused is returned by a server whose client refused its
// address.
var errClientRefused = errors.New("the client refused the connection")

// refusalMsg is the message for reason, cut to fit below ppMsgLen.
func refusalMsg(reason string) []byte {
	m := ppRefused + reason
	if len(m) > ppMsgLen-2 {
		m = m[:ppMsgLen-2]
	}
	return append([]byte(m), 0)
}

// readServerReply reads the server's 52-byte address, or its refusal.
func readServerReply(c net.Conn, timeout time.Duration) ([]byte, error) {
	b, err := readMsg(c, ppMsgLen, timeout)
	if bytes.HasPrefix(b, []byte(ppRefused)) {
		reason := string(b[len(ppRefused):])
		if i := strings.IndexByte(reason, 0); i >= 0 {
			reason = reason[:i]
		}
		if reason == ppRefusedGID {
			return nil, fmt.Errorf("%w: GID index mismatch: the server runs with -g and this client sent no RoCEv2 GID: run both sides with -g 1", errRefused)
		}
		return nil, fmt.Errorf("%w: %s", errRefused, reason)
	}
	return b, err
}

const rcPingpongHelp = `usage:
  softnic rc_pingpong --wire SPEC --ip A.B.C.D [flags]           start a server and wait for connection
  softnic rc_pingpong --wire SPEC --ip A.B.C.D [flags] <host>    connect to server at <host>
  softnic rc_pingpong -d softnicN --socket PATH [flags] [<host>]  the same on a device of softnic serve
  softnic rc_pingpong -d rxe0 [flags] [<host>]                    the same on a kernel RDMA device (/dev/infiniband)

The flags and the TCP handshake of rdma-core's ibv_rc_pingpong (port 18515),
so that ibv_rc_pingpong on another RoCE stack is a peer in either role; run
both sides with -g 1 (RoCEv2 needs GIDs). The handshake runs over the host's
TCP/IP; the RDMA traffic over --wire, or, with --socket (default
$SOFTNIC_SOCKET when there is no --wire), between the devices of a softnic
serve daemon: -d names the device this process attaches to (softnic0 and
softnic1 are cabled back to back). The flags that describe a NIC of this
process (--ip, --mac, --neigh, --pcap, --lead, --mem, --profile, --faults,
--check) are for --wire only: a daemon's device and a kernel device have
their own.

Flags:
`

type ppOpts struct {
	net     netOpts
	port    int
	ibDev   string
	ibPort  int
	size    int
	mtu     int
	rxDepth int
	iters   int
	sl      int
	events  bool
	gidIdx  int
	odp     bool
	ts      bool
	timeout time.Duration
	host    string
	socket  string // daemon mode: the softnic serve socket
	// nicFlags: the flags given that describe an emulated NIC of this
	// process (netOpts.nicOnly), refused for a daemon's or a kernel device.
	nicFlags []string

	chk bool // -c: the server checks the client's marks in the received buffer (ppMark)

	// ibv_rc_pingpong's -O, -P, -j and -N, refused with a reason.
	iodp, prefetch, dm, newSend bool
}

// parsePingpongArgs parses flags and at most one host argument, which may
// appear anywhere (getopt permutes arguments; Go's flag package stops at
// the first one that is not a flag).
func parsePingpongArgs(args []string, stderr io.Writer) (ppOpts, error) {
	fs := flag.NewFlagSet("rc_pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o ppOpts
	o.net.register(fs)
	both := func(short, long string, f func(name string)) { f(short); f(long) }
	both("p", "port", func(n string) { intVar(fs, &o.port, n, 18515, "listen on/connect to port `port`") })
	both("d", "ib-dev", func(n string) {
		fs.StringVar(&o.ibDev, n, "", "IB device: a kernel device (rxe0, mlx5_0) through /dev/infiniband; with --socket the daemon's device to attach to (default softnic0); ignored with --wire")
	})
	fs.StringVar(&o.socket, "socket", "", "attach to a device of the softnic serve daemon listening on this unix socket (default $"+provider.SocketEnv+" when there is no --wire)")
	both("i", "ib-port", func(n string) { intVar(fs, &o.ibPort, n, 1, "port of the IB device (only 1)") })
	both("s", "size", func(n string) { intVar(fs, &o.size, n, 4096, "size of message to exchange") })
	both("m", "mtu", func(n string) { intVar(fs, &o.mtu, n, 1024, "path MTU") })
	both("r", "rx-depth", func(n string) { intVar(fs, &o.rxDepth, n, 500, "number of receives to post at a time") })
	both("n", "iters", func(n string) { intVar(fs, &o.iters, n, 1000, "number of exchanges") })
	both("l", "sl", func(n string) { intVar(fs, &o.sl, n, 0, "service level value (ignored on RoCE)") })
	both("e", "events", func(n string) { fs.BoolVar(&o.events, n, false, "sleep on CQ events (default poll for CQ events)") })
	both("g", "gid-idx", func(n string) { intVar(fs, &o.gidIdx, n, -1, "local port gid index (0 and 1: the IPv4-mapped GID)") })
	both("o", "odp", func(n string) { fs.BoolVar(&o.odp, n, false, "use on demand paging (not supported)") })
	both("t", "ts", func(n string) { fs.BoolVar(&o.ts, n, false, "get CQE with timestamp (not supported)") })
	both("O", "iodp", func(n string) { fs.BoolVar(&o.iodp, n, false, "use implicit on demand paging (not supported)") })
	both("P", "prefetch", func(n string) { fs.BoolVar(&o.prefetch, n, false, "prefetch an ODP MR (not supported)") })
	both("c", "chk", func(n string) { fs.BoolVar(&o.chk, n, false, "validate received buffer") })
	both("j", "dm", func(n string) { fs.BoolVar(&o.dm, n, false, "use device memory (not supported)") })
	both("N", "new_send", func(n string) { fs.BoolVar(&o.newSend, n, false, "use the new post send WR API (not supported)") })
	durationVar(fs, &o.timeout, "timeout", 10*time.Second, "give up when the peer or a completion keeps us waiting this long; the server too when no client connects in this time (softnic only)")
	quietFlags(fs)
	for {
		if err := fs.Parse(args); err != nil {
			return o, asHelp(fs, rcPingpongHelp, err)
		}
		if fs.NArg() == 0 {
			break
		}
		if fs.Arg(0) == "" {
			return o, errEmptyHost
		}
		if o.host != "" {
			return o, fmt.Errorf("more than one host argument (%q, %q)", o.host, fs.Arg(0))
		}
		o.host = fs.Arg(0)
		args = fs.Args()[1:]
	}
	if o.socket == "" && o.net.wire == "" && !kernelDevice(o.ibDev) {
		o.socket = os.Getenv(provider.SocketEnv) // a daemon's device; a kernel one has no socket
	}
	o.nicFlags = o.net.nicOnly(fs)
	return o, nil
}

func (o *ppOpts) validate() error {
	switch {
	case o.odp:
		return errors.New("-o (on demand paging) is not supported")
	case o.ts:
		return errors.New("-t (completion timestamps) is not supported")
	case o.iodp, o.prefetch:
		return errors.New("-O and -P (implicit on demand paging, prefetch) are not supported")
	case o.dm:
		return errors.New("-j (device memory) is not supported")
	case o.newSend:
		return errors.New("-N (the ibv_wr_* post send API) is not supported")
	case o.port <= 0 || o.port > 65535:
		return fmt.Errorf("-p %d is not a TCP port", o.port)
	case o.ibPort != 1:
		return fmt.Errorf("-i %d: the emulated NIC has port 1 only", o.ibPort)
	case o.size <= 0 || o.size > 1<<30:
		return fmt.Errorf("-s %d out of range 1..1 GiB", o.size)
	case !validMTU(o.mtu):
		return mtuError("-m", o.mtu)
	case o.rxDepth < 1 || o.rxDepth > 16384:
		return fmt.Errorf("-r %d out of range 1..16384", o.rxDepth)
	case o.iters < 1:
		return fmt.Errorf("-n %d must be positive", o.iters)
	case o.gidIdx < -1 || o.gidIdx > 1:
		return fmt.Errorf("can't read sgid of index %d (softnic's GID table: 0 and 1, the IPv4-mapped GID)", o.gidIdx)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v must be positive", o.timeout)
	case o.socket != "" && o.net.wire != "":
		return errors.New("--socket and --wire exclude each other: a daemon's device is cabled by the daemon")
	case o.net.wire == "" && kernelDevice(o.ibDev) && len(o.nicFlags) > 0:
		return fmt.Errorf("%s a NIC that softnic emulates: -d %s is a kernel device, which has its own", flagsDescribe(o.nicFlags), o.ibDev)
	case o.socket != "" && len(o.nicFlags) > 0:
		// The daemon's device has the daemon's profile, faults and
		// checked mode; its host memory is sized from -s on attach.
		return fmt.Errorf("%s a NIC on a wire: with --socket the daemon owns the device (softnic serve --profile, --faults, --check), and sizes its host memory from -s", flagsDescribe(o.nicFlags))
	}
	return nil
}

func runRCPingpong(args []string, stdout, stderr io.Writer) int {
	o, err := parsePingpongArgs(args, stderr)
	if err != nil {
		var h helpError
		if errors.As(err, &h) {
			h.usage(stdout)
			return 0
		}
		fmt.Fprintln(stderr, "softnic rc_pingpong:", err)
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(stderr, "softnic rc_pingpong:", err)
		return 2 // a usage error, as a bad flag
	}
	if err := doRCPingpong(o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "softnic rc_pingpong:", err)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	return 0
}

// ppDest is one side's address as the handshake carries it.
type ppDest struct {
	lid, qpn, psn uint32
	gid           [16]byte
}

// encode formats d as the 52-byte handshake message.
func (d ppDest) encode() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, gidHex(d.gid))
	b := make([]byte, ppMsgLen)
	copy(b, s)
	return b
}

// parsePPDest decodes a handshake message (as sscanf "%x:%x:%x:%s" would:
// the NUL and anything after it are ignored).
func parsePPDest(msg []byte) (ppDest, error) {
	s := string(msg)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Split(s, ":")
	if len(f) != 4 {
		return ppDest{}, fmt.Errorf("handshake message %q: want LID:QPN:PSN:GID", s)
	}
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 16, 32)
		if err != nil {
			return ppDest{}, fmt.Errorf("handshake message %q: field %d: %v", s, i+1, err)
		}
		v[i] = n
	}
	g, err := parseGIDHex(f[3])
	if err != nil {
		return ppDest{}, fmt.Errorf("handshake message %q: %w", s, err)
	}
	return ppDest{lid: uint32(v[0]), qpn: uint32(v[1]) & 0xffffff, psn: uint32(v[2]) & 0xffffff, gid: g}, nil
}

func (d ppDest) String(label string) string {
	return fmt.Sprintf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", label, d.lid, d.qpn, d.psn, netip.AddrFrom16(d.gid))
}

// pingpong is the state of one run (struct pingpong_context).
type pingpong struct {
	o       ppOpts
	rt      ppRuntime
	pd      *provider.PD
	cq      *provider.CQ
	qp      *provider.QP
	buf     provider.Buffer
	mr      *provider.MR
	flags   provider.SendFlags
	pending int
	ch      *provider.CompChannel // -e: the CQ's completion channel
	events  int                   // -e: completion events taken, acknowledged at the end
}

// ppRuntime is what the ping-pong needs of the world its NIC lives in: a
// NIC on a real wire paced against the wall clock (*wallclock.Net), or a
// device of the softnic serve daemon (daemonRT).
type ppRuntime interface {
	Context() *provider.Context
	GID() [16]byte
	// Sync brings virtual time up to the wall clock before a post.
	Sync()
	PollCQ(cq *provider.CQ, wcs []provider.WC, timeout time.Duration, what func() string) (int, error)
	// Resolve is the peer's MAC for its IPv4 address (ARP on a wire).
	Resolve(ip netip.Addr) ([6]byte, error)
	// Idle waits d while the NIC keeps working (answers ARP on a wire).
	Idle(d time.Duration)
	CounterLine() string
	Close()
}

var _ ppRuntime = (*wallclock.Net)(nil)

func openPPRuntime(o ppOpts, stderr io.Writer) (ppRuntime, error) {
	if kernelDevice(o.ibDev) && o.net.wire == "" {
		// rxe0, mlx5_0: a kernel device, through /dev/infiniband.
		if o.socket != "" {
			return nil, usageError{fmt.Errorf("-d %s is a kernel device; --socket attaches to a softnic serve device (softnic<n>)", o.ibDev)}
		}
		return openKernelNet(o.ibDev, o.gidIdx, o.size+(1<<20))
	}
	if o.socket == "" {
		if o.net.wire == "" {
			return nil, usageError{fmt.Errorf("no device: give --wire SPEC --ip A.B.C.D (udp:LISTEN,PEER or tap:NAME), -d softnicN --socket PATH (or $%s) for a device of softnic serve, or -d rxe0 for a kernel device", provider.SocketEnv)}
		}
		return openRealNet(o.net, o.size+(1<<20), stderr)
	}
	name := o.ibDev
	if name == "" {
		name = "softnic0"
	}
	return openDaemonRT(name, o.socket, o.size+(1<<20))
}

func doRCPingpong(o ppOpts, stdout, stderr io.Writer) error {
	rt, err := openPPRuntime(o, stderr)
	if err != nil {
		return err
	}
	defer rt.Close()
	defer reportUnfiredRules(stderr, "rc_pingpong", rt)
	pp := &pingpong{o: o, rt: rt}
	if err := pp.init(); err != nil {
		return err
	}
	routs, err := pp.postRecv(o.rxDepth)
	if err != nil || routs < o.rxDepth {
		return fmt.Errorf("couldn't post receive (%d): %v", routs, err)
	}
	my := ppDest{qpn: pp.qp.QPN(), psn: rand.Uint32() & 0xffffff}
	if o.gidIdx >= 0 {
		my.gid = rt.GID()
	}
	fmt.Fprintln(stdout, my.String("local address: "))

	var rem ppDest
	if o.host != "" {
		rem, err = pp.clientExchange(my)
	} else {
		rem, err = pp.serverExchange(my)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, rem.String("remote address:"))
	if o.host != "" {
		if err := pp.connect(my.psn, rem); err != nil {
			return err
		}
	}

	pp.pending = ppRecvWRID
	if o.host != "" {
		if o.chk {
			ppMark(pp.buf.Bytes[:o.size])
		}
		if err := pp.postSend(); err != nil {
			return fmt.Errorf("couldn't post send: %w", err)
		}
		pp.pending |= ppSendWRID
	}
	start := time.Now()
	if err := pp.loop(&routs); err != nil {
		fmt.Fprintln(stderr, "softnic rc_pingpong: counters:", rt.CounterLine())
		return err
	}
	usec := float64(time.Since(start).Microseconds())
	if usec <= 0 {
		usec = 1
	}
	bytes := int64(o.size) * int64(o.iters) * 2
	fmt.Fprintf(stdout, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(stdout, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec/1e6, usec/float64(o.iters))
	if o.chk && o.host == "" {
		if bad := ppCheckMarks(pp.buf.Bytes[:o.size], stdout); bad > 0 {
			return fmt.Errorf("-c: the received buffer is invalid in %d of %d pages", bad, (o.size+ppPage-1)/ppPage)
		}
	}
	return nil
}

// ppPage is the stride of -c's marks: ibv_rc_pingpong's page_size,
// sysconf(_SC_PAGESIZE) on its host.
var ppPage = os.Getpagesize()

// ppMark is -c on the client, before its first send: ibv_rc_pingpong
// writes, into the first byte of each page of its buffer (which is
// otherwise 0x7b), the page's index modulo sizeof(char), that is 0. The
// server's buffer starts as 0x7b too, so a mark is only there when the
// client's data reached it.
func ppMark(buf []byte) {
	for i := 0; i < len(buf); i += ppPage {
		buf[i] = ppPageMark
	}
}

// ppPageMark is the mark of every page: rdma-core computes it as
// i / page_size % sizeof(char), which is 0 whatever the page.
const ppPageMark = 0

// ppCheckMarks is -c on the server, after the run: ibv_rc_pingpong's
// "invalid data in page N" on stdout for each page whose first byte is
// not the client's mark. It returns how many pages were invalid (unlike
// ibv_rc_pingpong, which only prints, the command then fails).
func ppCheckMarks(buf []byte, stdout io.Writer) int {
	bad := 0
	for i := 0; i < len(buf); i += ppPage {
		if buf[i] != ppPageMark {
			fmt.Fprintf(stdout, "invalid data in page %d\n", i/ppPage)
			bad++
		}
	}
	return bad
}

// init is pp_init_ctx: the buffer (filled with 0x7b), a local-write MR, one
// CQ for both directions, an RC QP with one send WR, and INIT.
func (pp *pingpong) init() error {
	ctx := pp.rt.Context()
	var err error
	if pp.pd, err = ctx.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	if pp.buf, err = ctx.AllocBuffer(pp.o.size, 4096); err != nil {
		return fmt.Errorf("couldn't allocate work buf: %w", err)
	}
	for i := range pp.buf.Bytes {
		pp.buf.Bytes[i] = 0x7b
	}
	if pp.mr, err = pp.pd.RegMR(pp.buf.Addr, uint64(pp.o.size), provider.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	if pp.o.events {
		if pp.ch, err = ctx.CreateCompChannel(); err != nil {
			return fmt.Errorf("couldn't create completion channel: %w", err)
		}
	}
	if pp.cq, err = ctx.CreateCQEx(provider.CQInitAttr{Entries: pp.o.rxDepth + 1, Channel: pp.ch}); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	pp.qp, err = ctx.CreateQP(pp.pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: pp.cq, RecvCQ: pp.cq,
		Cap: provider.QPCap{MaxSendWR: 1, MaxRecvWR: pp.o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	if pp.o.events {
		// Armed before the receives are posted and the peer can send, as
		// ibv_rc_pingpong does: a completion that lands before the arm
		// raises no event on rxe (IB_CQ_NEXT_COMP), and the loop would
		// wait for ever.
		if err := pp.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	pp.flags = provider.SendSignaled
	if pp.qp.Cap().MaxInline >= pp.o.size {
		pp.flags |= provider.SendInline
	}
	return pp.qp.ToInit(provider.ConnectAttr{})
}

// postRecv posts n receives of the whole buffer; it returns how many went.
func (pp *pingpong) postRecv(n int) (int, error) {
	wr := []provider.RecvWR{{WRID: ppRecvWRID, SGL: []provider.SGE{pp.mr.SGE(0, uint32(pp.o.size))}}}
	for i := 0; i < n; i++ {
		if _, err := pp.qp.PostRecv(wr); err != nil {
			return i, err
		}
	}
	return n, nil
}

func (pp *pingpong) postSend() error {
	pp.rt.Sync()
	_, err := pp.qp.PostSend([]provider.SendWR{{WRID: ppSendWRID, Opcode: provider.WRSend, Flags: pp.flags,
		SGL: []provider.SGE{pp.mr.SGE(0, uint32(pp.o.size))}}})
	return err
}

// connect is pp_connect_ctx: RTR (after resolving the peer's MAC, as rxe
// does inside modify_qp) then RTS, with ibv_rc_pingpong's attributes
// (provider.QP.Connect, from INIT).
func (pp *pingpong) connect(myPSN uint32, rem ppDest) error {
	ip, ok := gidIPv4(rem.gid)
	if !ok {
		return fmt.Errorf("the peer's GID %v is not an IPv4-mapped RoCEv2 GID: run it with -g 1 (RoCE needs a GID)",
			netip.AddrFrom16(rem.gid))
	}
	mac, err := pp.rt.Resolve(ip)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	sgid := uint8(1)
	if pp.o.gidIdx >= 0 {
		sgid = uint8(pp.o.gidIdx)
	}
	a := provider.DefaultConnectAttr() // ibv_rc_pingpong's attributes
	a.Peer = provider.Peer{QPN: rem.qpn, PSN: rem.psn, GID: rem.gid, MAC: mac}
	a.PSN, a.MTU, a.SGIDIndex, a.HopLimit = myPSN, pp.o.mtu, sgid, 1
	return pp.qp.Connect(a) // on from INIT (init), where the receives were posted
}

// ioResult carries a blocking network call's outcome to the driver.
type ioResult[T any] struct {
	v   T
	err error
}

// bg runs f on its own goroutine; the driver awaits the result while it
// keeps the emulated NIC answering (ARP from a peer in modify_qp(RTR)
// arrives while we block on TCP).
func bg[T any](f func() (T, error)) <-chan ioResult[T] {
	ch := make(chan ioResult[T], 1)
	go func() {
		v, err := f()
		ch <- ioResult[T]{v, err}
	}()
	return ch
}

// awaitIO waits for ch while the runtime keeps the NIC working (ARP from a
// peer in modify_qp(RTR) arrives while we block on TCP), for at most
// timeout; it then fails with wallclock.ErrTimeout.
func awaitIO[T any](rt ppRuntime, ch <-chan ioResult[T], timeout time.Duration, what string) (T, error) {
	r, err := wallclock.AwaitWith(func() error { rt.Idle(wallclock.IdleWait); return nil }, ch, timeout, what)
	if err != nil {
		return r.v, err
	}
	return r.v, r.err
}

// readMsg reads exactly n bytes from c with a deadline.
func readMsg(c net.Conn, n int, timeout time.Duration) ([]byte, error) {
	b := make([]byte, n)
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.ReadFull(c, b)
	return b, err
}

// clientExchange is pp_client_exch_dest: connect, send our address, read
// the server's, write "done".
//
// Unlike ibv_rc_pingpong it retries, until --timeout, a connection that is
// refused or that closes before the server's address arrives: the two sides
// may then be started in any order, and a forwarded port that accepts
// before anything listens behind it (qemu's user networking does that,
// rxe-peer.md) is tried again.
func (pp *pingpong) clientExchange(my ppDest) (ppDest, error) {
	t := pp.o.timeout
	addr := net.JoinHostPort(pp.o.host, strconv.Itoa(pp.o.port))
	deadline := time.Now().Add(t)
	for {
		msg, retry, err := pp.clientTry(addr, my)
		if err == nil {
			return parsePPDest(msg)
		}
		if !retry || time.Now().After(deadline) {
			return ppDest{}, err
		}
		pp.rt.Idle(100 * time.Millisecond)
	}
}

// clientTry is one connection attempt; retry says whether a failure may be
// retried (nothing reached a server).
func (pp *pingpong) clientTry(addr string, my ppDest) (msg []byte, retry bool, err error) {
	t := pp.o.timeout
	conn, err := awaitIO(pp.rt, bg(func() (net.Conn, error) { return net.DialTimeout("tcp", addr, t) }),
		2*t, "the TCP connection to "+addr)
	if err != nil {
		return nil, !errors.Is(err, wallclock.ErrTimeout), fmt.Errorf("couldn't connect to %s: %w", addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write(my.encode()); err != nil {
		return nil, true, fmt.Errorf("couldn't send local address: %w", err)
	}
	msg, err = awaitIO(pp.rt, bg(func() ([]byte, error) { return readServerReply(conn, t) }), 2*t, "the server's address")
	if errors.Is(err, errRefused) {
		return nil, false, err
	}
	if err != nil {
		// EOF before a single byte: nobody served the connection.
		return nil, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET),
			fmt.Errorf("couldn't read remote address: %w", err)
	}
	if rem, err := parsePPDest(msg); err == nil {
		if _, ok := gidIPv4(rem.gid); !ok {
			// connect would fail on it: tell the server, which would
			// otherwise wait its --timeout for our first message.
			_, _ = conn.Write([]byte(ppClientRefused))
			return nil, false, fmt.Errorf("couldn't connect to remote QP: the server's GID %v is not an IPv4-mapped RoCEv2 GID: run it with -g 1 (told the server)",
				netip.AddrFrom16(rem.gid))
		}
	}
	if _, err := conn.Write([]byte(ppDone)); err != nil {
		return nil, false, fmt.Errorf("couldn't write done: %w", err)
	}
	return msg, false, nil
}

// serverExchange is pp_server_exch_dest: accept one connection, read the
// client's address, connect the QP (RTR/RTS), send our address, read
// "done".
func (pp *pingpong) serverExchange(my ppDest) (ppDest, error) {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(pp.o.port))
	if err != nil {
		return ppDest{}, fmt.Errorf("couldn't listen to port %d: %w", pp.o.port, err)
	}
	// Unlike ibv_rc_pingpong, which waits for ever, the server gives up
	// when no client connects within --timeout.
	t := pp.o.timeout
	conn, err := awaitIO(pp.rt, bg(ln.Accept), t, "a client")
	ln.Close()
	if errors.Is(err, wallclock.ErrTimeout) {
		return ppDest{}, fmt.Errorf("no client connected to port %d within --timeout %v", pp.o.port, t)
	}
	if err != nil {
		return ppDest{}, fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	msg, err := awaitIO(pp.rt, bg(func() ([]byte, error) { return readMsg(conn, ppMsgLen, t) }), 2*t, "the client's address")
	if err != nil {
		return ppDest{}, fmt.Errorf("couldn't read remote address: %w", err)
	}
	// A refusal tells the client why before the connection closes.
	refuse := func(reason string) { _, _ = conn.Write(refusalMsg(reason)) }
	rem, err := parsePPDest(msg)
	if err != nil {
		refuse("bad address message")
		return ppDest{}, err
	}
	if _, ok := gidIPv4(rem.gid); !ok {
		refuse(ppRefusedGID)
		return ppDest{}, fmt.Errorf("couldn't connect to remote QP: the client's GID %v is not an IPv4-mapped RoCEv2 GID: run it with -g 1 (told the client)",
			netip.AddrFrom16(rem.gid))
	}
	if err := pp.connect(my.psn, rem); err != nil {
		refuse(err.Error())
		return ppDest{}, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	if _, err := conn.Write(my.encode()); err != nil {
		return ppDest{}, fmt.Errorf("couldn't send local address: %w", err)
	}
	done, err := awaitIO(pp.rt, bg(func() ([]byte, error) { return readMsg(conn, len(ppDone), t) }), 2*t, `the client's "done"`)
	if err == nil && string(done) == ppClientRefused {
		return ppDest{}, fmt.Errorf("%w: GID index mismatch: this server sent no RoCEv2 GID (GID %v): run both sides with -g 1",
			errClientRefused, netip.AddrFrom16(my.gid))
	}
	if err != nil || string(done[:4]) != "done" {
		return ppDest{}, fmt.Errorf("couldn't recv done (%q): %v", done, err)
	}
	return rem, nil
}

// eventSlice is how long one GetCQEvent of -e waits before the loop looks
// at the clock and lets the runtime work (a NIC on a wire answers ARP).
const eventSlice = 10 * time.Millisecond

// awaitEvent is -e's ibv_get_cq_event then ibv_req_notify_cq, for at most
// --timeout: the wait sleeps in the provider (the kernel's fd, or the
// emulated device's progress), slice by slice.
func (pp *pingpong) awaitEvent(what func() string) error {
	deadline := time.Now().Add(pp.o.timeout)
	for {
		cq, err := pp.ch.GetCQEvent(eventSlice)
		if err == nil {
			if cq != pp.cq {
				return fmt.Errorf("CQ event for unknown CQ %p", cq)
			}
			pp.events++
			if err := cq.ReqNotify(false); err != nil {
				return fmt.Errorf("couldn't request CQ notification: %w", err)
			}
			return nil
		}
		if !errors.Is(err, provider.ErrTimeout) {
			return fmt.Errorf("failed to get cq_event: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("failed to get cq_event: %w after %v waiting for %s (counters: %s)",
				wallclock.ErrTimeout, pp.o.timeout, what(), pp.rt.CounterLine())
		}
		pp.rt.Idle(50 * time.Microsecond)
	}
}

// loop is ibv_rc_pingpong's loop with parse_single_wc: it polls, or with
// -e sleeps on a CQ event and then polls once.
func (pp *pingpong) loop(routs *int) error {
	var rcnt, scnt int
	iters := pp.o.iters
	var wcs [2]provider.WC
	if pp.o.events {
		defer func() { pp.cq.AckEvents(pp.events) }()
	}
	for rcnt < iters || scnt < iters {
		what := func() string {
			return fmt.Sprintf("a completion (%d of %d sends and %d of %d receives done)", scnt, iters, rcnt, iters)
		}
		var ne int
		var err error
		if pp.o.events {
			if err := pp.awaitEvent(what); err != nil {
				return err
			}
			if ne, err = pp.cq.Poll(wcs[:]); err != nil {
				return fmt.Errorf("poll CQ failed: %w", err)
			}
		} else if ne, err = pp.rt.PollCQ(pp.cq, wcs[:], pp.o.timeout, what); err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		for i := 0; i < ne; i++ {
			wc := &wcs[i]
			if wc.Status != provider.WCSuccess {
				if g, ok := pp.rt.(interface{ Gone() error }); ok {
					if err := g.Gone(); err != nil {
						return fmt.Errorf("failed status %s (%d) for wr_id %d: %w", wc.Status, wc.Status, wc.WRID, err)
					}
				}
				return fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID)
			}
			switch wc.WRID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				if *routs--; *routs <= 1 {
					n, err := pp.postRecv(pp.o.rxDepth - *routs)
					*routs += n
					if *routs < pp.o.rxDepth {
						return fmt.Errorf("couldn't post receive (%d): %v", *routs, err)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			pp.pending &^= int(wc.WRID)
			if scnt < iters && pp.pending == 0 {
				if err := pp.postSend(); err != nil {
					return fmt.Errorf("couldn't post send: %w", err)
				}
				pp.pending = ppRecvWRID | ppSendWRID
			}
		}
	}
	return nil
}
