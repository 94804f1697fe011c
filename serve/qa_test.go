package serve_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/mmioring"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/serve"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/uverbs"
	"github.com/stretchr/testify/require"
)

// qaRoles are the child roles of the attacks below (childMain runs them).
var qaRoles = map[string]func() error{
	"qa-silent":     silentChild,
	"qa-midattach":  midAttachChild,
	"qa-midrequest": midRequestChild,
	"qa-midcall":    midCallChild,
	"qa-busy":       busyChild,
	"qa-target":     targetChild,
	"qa-daemon":     fdLimitedDaemon,
}

// fdLimitedDaemon runs a daemon at $SOFTNIC_SOCKET with at most 40 open
// descriptors; it prints "ready", and "serve: ..." if Serve ever returns.
func fdLimitedDaemon() error {
	d, err := serve.New(serve.Config{Socket: childSocket(), Devices: 2})
	if err != nil {
		return err
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 40, Max: 40}); err != nil {
		return err
	}
	fmt.Println("ready")
	err = d.Serve()
	fmt.Printf("serve: %v\n", err)
	return err
}

func childSocket() string { return os.Getenv(provider.SocketEnv) }

// killSelf ends the child as a SIGKILL does, at exactly this point.
func killSelf() error {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
	return errors.New("still alive after SIGKILL")
}

// silentChild connects and never sends ATTACH.
func silentChild() error {
	c, err := net.Dial("unixpacket", childSocket())
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("ready")
	time.Sleep(time.Minute)
	return nil
}

// midAttachChild sends ATTACH and dies before the answer.
func midAttachChild() error {
	if _, err := rawAttach(childSocket(), "softnic0", 0x10000000, false); err != nil {
		return err
	}
	return killSelf()
}

// midRequestChild attaches and dies with a uverbs request unanswered.
func midRequestChild() error {
	r, err := rawAttach(childSocket(), "softnic0", 0x10000000, true)
	if err != nil {
		return err
	}
	if _, err := r.ctl.GetContext(); err != nil {
		return err
	}
	b := make([]byte, 64)
	n, err := uverbs.EncodeWrite(b, uverbs.CmdAllocPD, &uverbs.AllocPD{}, nil, 0)
	if err != nil {
		return err
	}
	if err := r.conn.Send(attach.TUverbs, 99, b[:n]); err != nil {
		return err
	}
	return killSelf()
}

// midCallChild attaches and dies with a ring call (and a doorbell
// before it) unanswered.
func midCallChild() error {
	r, err := rawAttach(childSocket(), "softnic0", 0x10000000, true)
	if err != nil {
		return err
	}
	rec := mmioring.Store64(3*4096+0x800, 0x0000010000000a08, 100)
	if err := r.prod.Push(&rec, time.Now().Add(time.Second)); err != nil {
		return err
	}
	call := mmioring.Record{Width: 0, Flags: mmioring.FlagCall, Time: 200}
	call.Data[0] = attach.OpStep
	if err := r.prod.Push(&call, time.Now().Add(time.Second)); err != nil {
		return err
	}
	return killSelf()
}

// loopSide is a client of one device with two RC QPs connected to each
// other over the device's loopback cable, one CQ armed on a channel.
type loopSide struct {
	ctx    *provider.Context
	pd     *provider.PD
	ch     *provider.CompChannel
	cq     *provider.CQ
	buf    provider.Buffer
	mr     *provider.MR
	qa, qb *provider.QP
}

func newLoopSide(n int, o provider.DialOptions) (*loopSide, error) {
	ctx, err := provider.Dial(fmt.Sprintf("softnic%d", n), o)
	if err != nil {
		return nil, err
	}
	s := &loopSide{ctx: ctx}
	if s.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if s.ch, err = ctx.CreateCompChannel(); err != nil {
		return nil, err
	}
	if s.cq, err = ctx.CreateCQEx(provider.CQInitAttr{Entries: 64, Channel: s.ch}); err != nil {
		return nil, err
	}
	if s.buf, err = ctx.AllocBuffer(1<<20, 4096); err != nil {
		return nil, err
	}
	if s.mr, err = s.pd.RegMR(s.buf.Addr, 1<<20, provider.AccessLocalWrite|provider.AccessRemoteWrite); err != nil {
		return nil, err
	}
	attr := provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if s.qa, err = ctx.CreateQP(s.pd, attr); err != nil {
		return nil, err
	}
	if s.qb, err = ctx.CreateQP(s.pd, attr); err != nil {
		return nil, err
	}
	id := serve.Identity(n)
	for _, p := range [][2]*provider.QP{{s.qa, s.qb}, {s.qb, s.qa}} {
		a := provider.DefaultConnectAttr()
		a.Peer = provider.Peer{QPN: p[1].QPN(), PSN: 0x100, GID: id.IP.As16(), MAC: id.MAC}
		a.PSN = 0x100
		a.Access = provider.AccessRemoteWrite
		if err := p[0].Connect(a); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// busyChild keeps softnic2 busy until killed: 64 KiB WRITEs between its
// two QPs with the CQ armed, PDs allocated and freed between them.
func busyChild() error {
	s, err := newLoopSide(2, provider.DialOptions{})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if err := s.cq.ReqNotify(false); err != nil {
			return err
		}
		if _, err := s.qa.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{s.mr.SGE(0, 64<<10)}, RemoteAddr: s.buf.Addr + 512<<10, RKey: s.mr.RKey}}); err != nil {
			return err
		}
		if _, err := waitWC(s.cq, 1, time.Now().Add(10*time.Second)); err != nil {
			return err
		}
		pd, err := s.ctx.AllocPD()
		if err != nil {
			return err
		}
		if err := pd.Dealloc(); err != nil {
			return err
		}
	}
	return nil
}

// targetChild is a QP on softnic0 whose 1 MiB MR the parent writes into:
// it prints "qpn Q rkey K addr A", reads the parent's QPN, connects and
// polls until killed.
func targetChild() error {
	ctx, err := provider.Dial("softnic0", provider.DialOptions{})
	if err != nil {
		return err
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return err
	}
	cq, err := ctx.CreateCQ(64)
	if err != nil {
		return err
	}
	buf, err := ctx.AllocBuffer(1<<20, 4096)
	if err != nil {
		return err
	}
	mr, err := pd.RegMR(buf.Addr, 1<<20, provider.AccessLocalWrite|provider.AccessRemoteWrite)
	if err != nil {
		return err
	}
	qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	fmt.Printf("qpn %x rkey %x addr %x\n", qp.QPN(), mr.RKey, buf.Addr)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return err
	}
	q, err := strconv.ParseUint(strings.TrimSpace(line), 16, 32)
	if err != nil {
		return err
	}
	s := &side{ctx: ctx, qp: qp}
	if err := s.connect(1, uint32(q), 0x1000, 0x2000); err != nil {
		return err
	}
	fmt.Println("ready")
	wcs := make([]provider.WC, 4)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if _, err := cq.Poll(wcs); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// startChild starts a child in role and returns it with its stdout lines
// and stdin; the child is killed and reaped at cleanup.
func startChild(t *testing.T, role, sock string) (*exec.Cmd, *bufio.Reader, io.Writer) {
	t.Helper()
	cmd := child(t, role, sock)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewReader(stdout), stdin
}

// readLine reads one line of a child's output within 20 s.
func readLine(t *testing.T, rd *bufio.Reader) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		l, _ := rd.ReadString('\n')
		ch <- l
	}()
	select {
	case l := <-ch:
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no line from the child")
	}
	return ""
}

// requireServing checks that the daemon has no client left, that each of
// its devices attaches again (at most 5 s after a teardown) and that a
// connection between two fresh clients works.
func requireServing(t *testing.T, d *serve.Daemon, sock string) {
	t.Helper()
	require.Eventually(t, func() bool { return d.Clients() == 0 }, 5*time.Second, 10*time.Millisecond, "every client torn down")
	for _, name := range d.Names() {
		ctx, err := provider.Dial(name, provider.DialOptions{Socket: sock})
		require.NoError(t, err, name)
		_, err = ctx.AllocPD()
		require.NoError(t, err, name)
		require.NoError(t, ctx.Close(), name)
	}
	eps, closeAll, err := dialPairOn(sock, 0, 1)
	require.NoError(t, err)
	defer closeAll()
	for _, o := range ops[:3] {
		require.NoError(t, runOp(eps, o, time.Now().Add(10*time.Second)), o.name)
	}
}

// TestKilledAtEveryStage: a client process killed with SIGKILL at each
// stage of its life — connected without ATTACH, mid-ATTACH, with a uverbs
// request or a ring call unanswered, in the middle of a busy loop of
// WRITEs, control commands and CQ arms (at several moments), and while the
// device DMAs into its memory on behalf of a peer — is torn down and
// leaves the daemon serving every device.
func TestKilledAtEveryStage(t *testing.T) {
	for _, tc := range []struct {
		role  string
		ready bool          // the child prints "ready" before it is killed
		after time.Duration // how long after that
	}{
		{"qa-silent", true, 0},
		{"qa-midattach", false, 0},
		{"qa-midrequest", false, 0},
		{"qa-midcall", false, 0},
		{"qa-busy", true, 0},
		{"qa-busy", true, 3 * time.Millisecond},
		{"qa-busy", true, 20 * time.Millisecond},
		{"qa-busy", true, 100 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.role, tc.after), func(t *testing.T) {
			d, sock, log := startDaemon(t, 3, nil)
			cmd, rd, _ := startChild(t, tc.role, sock)
			if tc.ready {
				require.Equal(t, "ready\n", readLine(t, rd))
				time.Sleep(tc.after)
				require.NoError(t, cmd.Process.Kill())
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "%v", err)
			require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "the child died of SIGKILL, not of a failure")
			requireServing(t, d, sock)
			t.Log(strings.TrimSpace(log.String()))
		})
	}
}

// TestKilledWhileDMATarget: the peer's WRITEs are in flight into a
// client's memory when the client is killed. The daemon revokes that
// memory under the DMA; the writer's WQEs complete (delivered before the
// death) or fail as towards a dead host, and the daemon serves on.
func TestKilledWhileDMATarget(t *testing.T) {
	d, sock, _ := startDaemon(t, 2, nil)
	cmd, rd, stdin := startChild(t, "qa-target", sock)
	var qpn, rkey uint32
	var addr uint64
	line := readLine(t, rd)
	_, err := fmt.Sscanf(line, "qpn %x rkey %x addr %x", &qpn, &rkey, &addr)
	require.NoError(t, err, line)

	me, err := newSide(1, provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	big, err := me.ctx.AllocBuffer(128<<10, 4096)
	require.NoError(t, err)
	bigMR, err := me.pd.RegMR(big.Addr, 128<<10, provider.AccessLocalWrite)
	require.NoError(t, err)
	_, err = fmt.Fprintf(stdin, "%x\n", me.qp.QPN())
	require.NoError(t, err)
	require.NoError(t, me.connect(0, qpn, 0x2000, 0x1000))
	require.Equal(t, "ready\n", readLine(t, rd))

	const n = 8
	var wrs []provider.SendWR
	for i := 0; i < n; i++ {
		wrs = append(wrs, provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{bigMR.SGE(0, 128<<10)}, RemoteAddr: addr + uint64(i%8)*(128<<10), RKey: rkey})
	}
	_, err = me.qp.PostSend(wrs)
	require.NoError(t, err)
	// Some of the WRITEs move before the kill, the rest after it.
	wcs := make([]provider.WC, 1)
	k, err := me.cq.Poll(wcs)
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	got, err := waitWC(me.cq, n-k, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	got = append(wcs[:k], got...)
	t.Logf("%d completions before the kill; statuses %v", k, statuses(got))
	for _, wc := range got {
		require.Contains(t, []provider.WCStatus{provider.WCSuccess, provider.WCRetryExcErr, provider.WCWRFlushErr}, wc.Status, "%+v", wc)
	}
	require.NoError(t, me.ctx.Close())
	requireServing(t, d, sock)
}

// TestEmptyMessage: a zero-length SOCK_SEQPACKET message is a malformed
// request, answered EPROTO; the connection goes on. It reads as zero
// bytes, as the end of the connection does, and the daemon took it for
// that and tore the client down.
func TestEmptyMessage(t *testing.T) {
	d, sock, _ := startDaemon(t, 1, nil)
	r := dialRaw(t, sock, "softnic0", 0x10000000)
	bad := d.Counters().BadMessages
	r.conn.SetDeadline(time.Now().Add(2 * time.Second))
	_, _, err := r.uc.WriteMsgUnix(nil, nil, nil)
	require.NoError(t, err)
	h, p, _, err := r.conn.Recv()
	require.NoError(t, err, "the daemon answers an empty message")
	require.Equal(t, attach.TError, h.Type)
	em, err := attach.DecodeError(p)
	require.NoError(t, err)
	require.Equal(t, syscall.EPROTO, em.Errno)
	typ, _, err := r.send(attach.TSim, attach.EncodeSim(nil, attach.SimPendingEvents, 0))
	require.NoError(t, err)
	require.Equal(t, attach.TSimResp, typ, "still serving the client")
	require.Equal(t, bad+1, d.Counters().BadMessages)
	require.Equal(t, 1, d.Clients())
	// The socket's close is still the end of the client.
	r.conn.Close()
	require.Eventually(t, func() bool { return d.Clients() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// TestCloseWithPendingConnections: Close (softnic serve's SIGTERM) while
// one connection has not sent ATTACH and a client is attached returns at
// once; the attached client's next call fails with ErrDeviceGone and the
// silent one reads the end of its connection. Close waited out the
// silent connection's AttachTimeout (5 s by default).
func TestCloseWithPendingConnections(t *testing.T) {
	sock := t.TempDir() + "/s.sock"
	d, err := serve.New(serve.Config{Socket: sock, Devices: 2, AttachTimeout: 30 * time.Second})
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- d.Serve() }()
	defer d.Close()
	silent, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	require.NoError(t, err)
	defer silent.Close()
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	_, err = ctx.AllocPD()
	require.NoError(t, err)

	start := time.Now()
	require.NoError(t, d.Close())
	require.Less(t, time.Since(start), 2*time.Second, "Close waited for the silent connection")
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	_, err = ctx.AllocPD()
	require.ErrorIs(t, err, provider.ErrDeviceGone)
	silent.SetDeadline(time.Now().Add(2 * time.Second))
	n, err := silent.Read(make([]byte, 64))
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF, "the silent connection is closed, not left open")
	require.Error(t, ctx.Close())
}

// TestAttachChurn: many clients at once attaching and detaching the same
// few devices, some closing cleanly and some only dropping their socket:
// every Dial succeeds or meets EBUSY (another holds the device), nothing
// else; afterwards no client is left and every device attaches.
func TestAttachChurn(t *testing.T) {
	d, sock, _ := startDaemon(t, 4, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for i := 0; i < 25; i++ {
				name := fmt.Sprintf("softnic%d", rng.Intn(4))
				ctx, err := provider.Dial(name, provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64, Timeout: 5 * time.Second})
				if errors.Is(err, syscall.EBUSY) {
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("dial %s: %w", name, err)
					return
				}
				if _, err := ctx.AllocPD(); err != nil {
					errs <- err
				}
				if _, err := ctx.CreateCQ(16); err != nil {
					errs <- err
				}
				if rng.Intn(3) == 0 {
					r, err := rawAttach(sock, name, 0x10000000, false) // refused EBUSY: its socket just goes
					if err == nil {
						r.close()
					}
				}
				if err := ctx.Close(); err != nil {
					errs <- fmt.Errorf("close %s: %w", name, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	requireServing(t, d, sock)
	c := d.Counters()
	require.Equal(t, c.Attaches, c.Detaches)
}

// TestSlowClientCQOverrun: a client that never polls its CQ while its
// WRITEs complete (a peer's poll runs the engine) overruns it as hardware
// does: CQ_ERR for the CQ and QP_FATAL for the QP on the client's async
// queue, the QP in error; the daemon and the peer go on.
func TestSlowClientCQOverrun(t *testing.T) {
	_, sock, _ := startDaemon(t, 2, nil)
	o := provider.DialOptions{Socket: sock}
	slow, err := provider.Dial("softnic0", o)
	require.NoError(t, err)
	defer slow.Close()
	pd, err := slow.AllocPD()
	require.NoError(t, err)
	cq, err := slow.CreateCQ(4)
	require.NoError(t, err)
	buf, err := slow.AllocBuffer(4096, 4096)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite)
	require.NoError(t, err)
	qp, err := slow.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	peer, err := newSide(1, o)
	require.NoError(t, err)
	defer peer.ctx.Close()
	s := &side{ctx: slow, qp: qp}
	require.NoError(t, s.connect(1, peer.qp.QPN(), 0x10, 0x20))
	require.NoError(t, peer.connect(0, qp.QPN(), 0x20, 0x10))

	n := min(cq.Entries()+8, 64)
	var wrs []provider.SendWR
	for i := 0; i < n; i++ {
		wrs = append(wrs, provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{mr.SGE(0, 64)}, RemoteAddr: peer.buf.Addr, RKey: peer.mr.RKey})
	}
	_, err = qp.PostSend(wrs)
	require.NoError(t, err)
	_, err = slow.AllocPD() // a control command: the daemon has the doorbell
	require.NoError(t, err)
	wcs := make([]provider.WC, 4)
	for i := 0; i < 20; i++ { // the peer's polls run the shared engine
		k, err := peer.cq.Poll(wcs)
		require.NoError(t, err)
		require.Zero(t, k)
	}
	var got []mlx5.EventType
	for len(got) < 2 {
		ev, err := slow.GetAsyncEvent(2 * time.Second)
		require.NoError(t, err, "events so far %v", got)
		got = append(got, ev.Type)
		switch ev.Type {
		case mlx5.EventCQErr:
			require.Same(t, cq, ev.CQ)
		case mlx5.EventQPFatal:
			require.Same(t, qp, ev.QP)
		}
		slow.AckAsyncEvent(ev)
	}
	require.Equal(t, []mlx5.EventType{mlx5.EventCQErr, mlx5.EventQPFatal}, got)
	_, err = slow.AllocPD()
	require.NoError(t, err, "the client still has its device")
	require.NoError(t, runPing(peer, 1))
}

// runPing checks that s's context still answers: a PD and a CQ.
func runPing(s *side, _ int) error {
	if _, err := s.ctx.AllocPD(); err != nil {
		return err
	}
	_, err := s.ctx.CreateCQ(4)
	return err
}

// TestResourceLimits: a client that creates objects until the device's
// table is full is refused with ENOMEM, keeps what it has, and gets one
// more once it frees one; the daemon serves another device meanwhile.
// SRQs had no bound: a client could grow the daemon without end. (A
// provider's AH never reaches the daemon: libmlx5 builds it in user
// space; uverbsdev's TestObjectLimits bounds a raw client's CREATE_AH.)
func TestResourceLimits(t *testing.T) {
	p := profile.Default()
	const limit = 3
	c := &p.Device.Caps
	c.MaxPD, c.MaxCQ, c.MaxMR, c.MaxQP = limit, limit, limit, limit
	d, sock := startDaemonCfg(t, serve.Config{Devices: 2, Profile: p})
	o := provider.DialOptions{Socket: sock}
	for _, tc := range []struct {
		name   string
		create func(ctx *provider.Context, pd *provider.PD, cq *provider.CQ) (func() error, error)
		have   int // objects of the kind the setup holds
	}{
		{"PD", func(ctx *provider.Context, _ *provider.PD, _ *provider.CQ) (func() error, error) {
			pd, err := ctx.AllocPD()
			if err != nil {
				return nil, err
			}
			return pd.Dealloc, nil
		}, 1},
		{"CQ", func(ctx *provider.Context, _ *provider.PD, _ *provider.CQ) (func() error, error) {
			cq, err := ctx.CreateCQ(4)
			if err != nil {
				return nil, err
			}
			return cq.Destroy, nil
		}, 1},
		{"comp channel", func(ctx *provider.Context, _ *provider.PD, _ *provider.CQ) (func() error, error) {
			ch, err := ctx.CreateCompChannel()
			if err != nil {
				return nil, err
			}
			return ch.Destroy, nil
		}, 0},
		{"MR", func(ctx *provider.Context, pd *provider.PD, _ *provider.CQ) (func() error, error) {
			mr, err := pd.RegMR(ctx.Mem().Base(), 4096, provider.AccessLocalWrite)
			if err != nil {
				return nil, err
			}
			return mr.Dereg, nil
		}, 0},
		{"QP", func(ctx *provider.Context, pd *provider.PD, cq *provider.CQ) (func() error, error) {
			qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
				Cap: provider.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				return nil, err
			}
			return qp.Destroy, nil
		}, 0},
		{"SRQ", func(ctx *provider.Context, pd *provider.PD, _ *provider.CQ) (func() error, error) {
			srq, err := pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 1, MaxSGE: 1})
			if err != nil {
				return nil, err
			}
			return srq.Destroy, nil
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, err := provider.Dial("softnic0", o)
			require.NoError(t, err)
			defer ctx.Close()
			pd, err := ctx.AllocPD()
			require.NoError(t, err)
			cq, err := ctx.CreateCQ(4)
			require.NoError(t, err)
			var frees []func() error
			for len(frees) < 100 {
				free, err := tc.create(ctx, pd, cq)
				if err != nil {
					require.ErrorIs(t, err, syscall.ENOMEM, "refused as a full table")
					break
				}
				frees = append(frees, free)
			}
			require.Len(t, frees, limit-tc.have, "refused at the device's limit")
			require.NoError(t, frees[0]())
			free, err := tc.create(ctx, pd, cq)
			require.NoError(t, err, "one freed, one more")
			require.NoError(t, free())
			other, err := provider.Dial("softnic1", o)
			require.NoError(t, err, "the daemon serves on")
			require.NoError(t, other.Close())
		})
	}
	require.Zero(t, d.Clients())
}

// TestGarbageRing: a client that scribbles over every byte of its MMIO
// ring — header, indices, futex words, closed word, reply line, slots —
// breaks only its own attachment (counted as a ring failure or bad
// records, never a daemon fault); a connection of two other clients
// works throughout.
func TestGarbageRing(t *testing.T) {
	d, sock, _ := startDaemon(t, 4, nil)
	eps, closeAll, err := dialPairOn(sock, 0, 1)
	require.NoError(t, err)
	defer closeAll()
	rng := rand.New(rand.NewSource(1))
	for _, tc := range []struct {
		name     string
		scribble func(b []byte)
	}{
		{"random bytes everywhere", func(b []byte) { rng.Read(b) }},
		{"all ones", func(b []byte) {
			for i := range b {
				b[i] = 0xff
			}
		}},
		{"producer index a ring ahead", func(b []byte) { putU32(b[128:], 65) }},
		{"producer index backwards", func(b []byte) { putU32(b[128:], ^uint32(0)) }},
		{"consumer index garbage", func(b []byte) { putU32(b[256:], 12345) }},
		{"closed word garbage", func(b []byte) { putU32(b[32:], 0xdeadbeef) }},
		{"slots garbage, index honest", func(b []byte) {
			rng.Read(b[mmioring.HeaderSize:])
			putU32(b[128:], 8)
		}},
		{"futex words set", func(b []byte) {
			putU32(b[132:], 1)
			putU32(b[260:], 1)
			putU32(b[388:], 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, sock, "softnic2", 0x30000000)
			for i := 0; i < 10; i++ {
				tc.scribble(r.rmem.Bytes()[:mmioring.Size(64)])
				time.Sleep(time.Millisecond)
			}
			require.NoError(t, runOp(eps, ops[0], time.Now().Add(10*time.Second)))
			// The scribbler is torn down at its socket's close at the latest.
			r.conn.Close()
			require.Eventually(t, func() bool { return d.Clients() == 2 }, 5*time.Second, 10*time.Millisecond)
			ctx, err := provider.Dial("softnic2", provider.DialOptions{Socket: sock})
			require.NoError(t, err)
			require.NoError(t, ctx.Close())
		})
	}
	t.Logf("%+v", d.Counters())
}

func statuses(wcs []provider.WC) []provider.WCStatus {
	var s []provider.WCStatus
	for _, wc := range wcs {
		s = append(s, wc.Status)
	}
	return s
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// TestLyingCalls: ring calls a provider never makes — reads of BAR0
// offsets far outside it or misaligned, a CQ step on memory outside the
// client's or on a CQ of 2^40 entries, steps bounded in the past and the
// far future, unknown ops — are each answered (an errno where they make
// no sense) and the daemon serves on.
func TestLyingCalls(t *testing.T) {
	d, sock, _ := startDaemon(t, 3, nil)
	liar := dialRaw(t, sock, "softnic2", 0x30000000)
	eps, closeAll, err := dialPairOn(sock, 0, 1)
	require.NoError(t, err)
	defer closeAll()
	base := liar.mem.Base()
	for _, tc := range []struct {
		name   string
		rec    mmioring.Record
		op     uint64
		status syscall.Errno
	}{
		{"read32 at the top of the address space", mmioring.Record{Off: ^uint64(3)}, attach.OpRead32, 0},
		{"read32 past BAR0", mmioring.Record{Off: 1 << 40}, attach.OpRead32, 0},
		{"read32 misaligned", mmioring.Record{Off: 0x1002}, attach.OpRead32, syscall.EINVAL},
		{"read32 of a UAR doorbell", mmioring.Record{Off: 3*4096 + 0x800}, attach.OpRead32, 0},
		{"step CQ outside memory", mmioring.Record{Off: 0x1000}, attach.OpStepCQ, syscall.EINVAL},
		{"step CQ at the memory's last bytes", mmioring.Record{Off: base + 1<<20 - 32}, attach.OpStepCQ, syscall.EINVAL},
		{"step CQ of 2^40 entries", mmioring.Record{Off: base}, attach.OpStepCQ | 40<<32, syscall.EINVAL},
		{"step CQ, garbage CQE, huge consumer index", mmioring.Record{Off: base, QPN: ^uint32(0)}, attach.OpStepCQ | 24<<32, 0},
		{"step bounded in the past", mmioring.Record{Off: 1}, attach.OpStep, 0},
		{"step bounded in the far future", mmioring.Record{Off: 1 << 62}, attach.OpStep, 0},
		{"unknown op", mmioring.Record{Off: 7}, 0xffffffff, syscall.EINVAL},
		{"op with high bits", mmioring.Record{}, attach.OpSync | 0xdead<<32, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			rec.Time = int64(d.Now())
			rep, err := liar.prod.CallRecord(rec, tc.op, time.Now().Add(5*time.Second))
			require.NoError(t, err, "answered")
			require.Equal(t, uint32(tc.status), rep.Status)
			require.NoError(t, runOp(eps, ops[0], time.Now().Add(10*time.Second)))
		})
	}
	alive(t, liar)
}

// TestDoorbellFlood: a client that floods its ring with doorbells and
// BlueFlame lines for QPs it does not have, as fast as the ring takes
// them, costs the others no more than a slice of the world now and then:
// a connection of two other clients completes its operations meanwhile,
// and the daemon counts the flood as unknown-QP doorbells.
func TestDoorbellFlood(t *testing.T) {
	d, sock, _ := startDaemon(t, 3, nil)
	flooder := dialRaw(t, sock, "softnic2", 0x30000000)
	eps, closeAll, err := dialPairOn(sock, 0, 1)
	require.NoError(t, err)
	defer closeAll()
	stop := make(chan struct{})
	pushed := make(chan int, 1)
	go func() {
		var line [64]byte
		for i := range line {
			line[i] = byte(i)
		}
		n := 0
		recs := make([]mmioring.Record, 32)
		for {
			select {
			case <-stop:
				pushed <- n
				return
			default:
			}
			for i := range recs {
				uar := uint64(3 + i%8)
				if i%2 == 0 {
					recs[i] = mmioring.Store64(uar*4096+0x800, uint64(0x100+n+i)<<32|0x0a08, int64(n+i))
				} else {
					recs[i] = mmioring.Line(uar*4096+0x900, &line, mmioring.FullMask, int64(n+i))
				}
			}
			k, err := flooder.prod.PushN(recs, time.Now().Add(5*time.Second))
			n += k
			if err != nil {
				pushed <- -n
				return
			}
		}
	}()
	start := time.Now()
	for i := 0; i < 20; i++ {
		for _, o := range ops[:3] {
			require.NoError(t, runOp(eps, o, time.Now().Add(10*time.Second)), o.name)
		}
	}
	took := time.Since(start)
	close(stop)
	n := <-pushed
	require.Positive(t, n, "the flood's pushes never failed")
	t.Logf("60 operations took %v beside a flood of %d records", took, n)
	// The flood's last records may still wait in its ring, and the
	// doorbells applied so far be in flight on PCIe (the daemon's clock
	// moves only when a client runs it; the other pair may have finished
	// first). A sync call behind them, stamped past their delivery, has
	// the daemon apply every one and run the engine through their decode
	// before the counters are read.
	_, err = flooder.prod.Call(attach.OpSync, 0, int64(d.Now().Add(10*sim.Microsecond)), time.Now().Add(10*time.Second))
	require.NoError(t, err)
	alive(t, flooder)
	// The device's counters, as the flooder reads them (the daemon's
	// world is busy with the others: no direct look at the device).
	typ, p, err := flooder.send(attach.TSim, attach.EncodeSim(nil, attach.SimCounters))
	require.NoError(t, err)
	require.Equal(t, attach.TSimResp, typ)
	ctrs := map[string]uint64{}
	for _, l := range strings.Split(string(p), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			ctrs[k], _ = strconv.ParseUint(v, 10, 64)
		}
	}
	require.Positive(t, ctrs["db_unknown_qp"], "%s", p)
	require.Zero(t, d.Counters().RingFailures)
}

// TestClockHorizon: a client cannot run the shared engine to the end of
// time, where every other client's timers wrap around int64 and nothing
// completes any more: a step's limit (its own next timer, in the
// client's word) is held to 10 s ahead as a record's time is, and no
// record or step takes the engine past the horizon (2^62 ps). A step
// limit of 2^63-1000 ps jumped the engine there in one call.
func TestClockHorizon(t *testing.T) {
	for _, tc := range []struct {
		name string
		lie  func(t *testing.T, r *raw, now int64)
	}{
		{"step limit at the end of time", func(t *testing.T, r *raw, now int64) {
			for i := 0; i < 3; i++ { // the first steps run what is scheduled, then the limit
				_, err := r.prod.CallRecord(mmioring.Record{Off: 1<<63 - 1000, Time: now}, attach.OpStep, time.Now().Add(5*time.Second))
				require.NoError(t, err)
			}
		}},
		{"step CQ limit at the end of time", func(t *testing.T, r *raw, now int64) {
			for i := 0; i < 3; i++ {
				_, err := r.prod.CallRecord(mmioring.Record{Off: r.mem.Base(), QPN: 1, Flow: 1<<63 - 1000, Time: now}, attach.OpStepCQ, time.Now().Add(5*time.Second))
				require.NoError(t, err)
			}
		}},
		{"records stamped 10 s ahead, again and again", func(t *testing.T, r *raw, now int64) {
			// 2^62 ps is 461169 jumps of 10 s, the end of int64 922337.
			recs := make([]mmioring.Record, 32)
			for i := 0; i < 940000; i += len(recs) {
				for j := range recs {
					recs[j] = mmioring.Store32(0x18, 0, 1<<63-1)
				}
				_, err := r.prod.PushN(recs, time.Now().Add(5*time.Second))
				require.NoError(t, err)
			}
			_, err := r.prod.Call(attach.OpSync, 0, 1<<63-1, time.Now().Add(5*time.Second))
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, sock, _ := startDaemon(t, 3, nil)
			liar := dialRaw(t, sock, "softnic2", 0x30000000)
			before := d.Now()
			tc.lie(t, liar, int64(before))
			now := d.Now()
			t.Logf("the engine went from %v to %v", before, now)
			require.LessOrEqual(t, now, sim.Time(1<<62)+sim.Time(sim.Second), "past the horizon")
			if !strings.HasPrefix(tc.name, "records") {
				require.LessOrEqual(t, now, before.Add(3*10*sim.Second), "at most 10 s a step")
			}
			eps, closeAll, err := dialPairOn(sock, 0, 1)
			require.NoError(t, err)
			defer closeAll()
			for _, o := range ops[:3] {
				require.NoError(t, runOp(eps, o, time.Now().Add(10*time.Second)), o.name)
			}
		})
	}
}

// vmSize is this process's virtual memory size (/proc/self/status).
func vmSize(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmSize")
	return 0
}

// TestDetachFreesMemory: a client that attaches and detaches again and
// again, with a large host memory each time, does not grow the daemon.
// The daemon kept every departed client's revoked memory mapped until
// it closed: 256 MiB of address space a cycle here, all of it at 16 GiB,
// until its mmaps (the Go heap's among them) failed.
func TestDetachFreesMemory(t *testing.T) {
	_, sock, _ := startDaemon(t, 2, nil)
	const mem = 256 << 20
	o := provider.DialOptions{Socket: sock, MemSize: mem, RingSlots: 64}
	cycle := func() {
		ctx, err := provider.Dial("softnic0", o)
		require.NoError(t, err)
		_, err = ctx.AllocPD()
		require.NoError(t, err)
		require.NoError(t, ctx.Close())
	}
	for i := 0; i < 8; i++ { // the slot's share of revoked memories
		cycle()
	}
	before := vmSize(t)
	const n = 40
	for i := 0; i < n; i++ {
		cycle()
	}
	grew := int64(vmSize(t)) - int64(before)
	t.Logf("%d cycles of %d MiB: virtual size grew %d MiB", n, mem>>20, grew>>20)
	require.Less(t, grew, int64(n*mem/4), "the departed clients' memory is given back")
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	es, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(es)
}

// TestPassedFDsClosed: file descriptors a client passes where none
// belong — with requests after ATTACH, more than an ATTACH takes, more
// than fit the daemon's control buffer — are closed by the daemon, never
// kept: the daemon's descriptor table does not grow.
func TestPassedFDsClosed(t *testing.T) {
	d, sock, _ := startDaemon(t, 2, nil)
	r := dialRaw(t, sock, "softnic0", 0x10000000)
	devnull, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer devnull.Close()
	fds := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = int(devnull.Fd())
		}
		return out
	}
	sendRaw := func(c *net.UnixConn, typ attach.Type, p []byte, n int) (attach.Header, []byte) {
		t.Helper()
		msg := make([]byte, attach.HeaderSize, attach.HeaderSize+len(p))
		le := func(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
		le(msg[0:], attach.Magic)
		msg[4] = byte(typ)
		le(msg[12:], uint32(len(p)))
		msg = append(msg, p...)
		_, _, err := c.WriteMsgUnix(msg, syscall.UnixRights(fds(n)...), nil)
		require.NoError(t, err)
		conn := attach.NewConn(c)
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		h, rp, _, err := conn.Recv()
		require.NoError(t, err)
		return h, rp
	}
	before := openFDs(t)
	for _, tc := range []struct {
		name string
		n    int
		want attach.Type
	}{
		{"two with a SIM request", 2, attach.TSimResp},
		{"sixty-four with a SIM request", 64, attach.TError}, // MSG_CTRUNC: a malformed message
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 20; i++ {
				h, _ := sendRaw(r.uc, attach.TSim, attach.EncodeSim(nil, attach.SimPendingEvents, 0), tc.n)
				require.Equal(t, tc.want, h.Type)
			}
		})
	}
	for _, n := range []int{0, 1, 3, 64} {
		t.Run(fmt.Sprintf("ATTACH with %d", n), func(t *testing.T) {
			c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
			require.NoError(t, err)
			defer c.Close()
			req := attach.AttachReq{Version: attach.Version, Device: "softnic1", MemBase: 0x10000000, MemSize: 1 << 20, RingSize: uint64(mmioring.Size(64))}
			p, err := req.Encode(nil)
			require.NoError(t, err)
			h, rp := sendRaw(c, attach.TAttach, p, n)
			require.Equal(t, attach.TError, h.Type)
			em, err := attach.DecodeError(rp)
			require.NoError(t, err)
			require.Contains(t, []syscall.Errno{syscall.EBADF, syscall.EPROTO}, em.Errno, "%v", em)
		})
	}
	alive(t, r)
	require.Eventually(t, func() bool { return openFDs(t) <= before }, 5*time.Second, 10*time.Millisecond,
		"descriptors kept: %d before, %d after", before, openFDs(t))
	require.Equal(t, 1, d.Clients())
}

// TestAcceptOutOfDescriptors: a client that holds more connections open
// than the daemon has descriptors for makes accept fail with EMFILE for a
// while; the daemon waits and accepts again once they close. Serve
// returned the error, and softnic serve exited, for every client.
func TestAcceptOutOfDescriptors(t *testing.T) {
	sock := t.TempDir() + "/s.sock"
	cmd, rd, _ := startChild(t, "qa-daemon", sock)
	require.Equal(t, "ready\n", readLine(t, rd))
	var conns []*net.UnixConn
	for i := 0; i < 60; i++ {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			break // the backlog is full: the daemon is not accepting
		}
		conns = append(conns, c)
	}
	time.Sleep(100 * time.Millisecond) // the daemon meets EMFILE meanwhile
	for _, c := range conns {
		c.Close()
	}
	var ctx *provider.Context
	var err error
	require.Eventually(t, func() bool {
		ctx, err = provider.Dial("softnic0", provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the daemon serves again")
	_, err = ctx.AllocPD()
	require.NoError(t, err)
	require.NoError(t, ctx.Close())
	require.NoError(t, cmd.Process.Signal(syscall.Signal(0)), "the daemon is still running")
}

// TestPendingConnectionsBounded: connections that never send ATTACH cost
// the daemon a goroutine and their buffers each until AttachTimeout; past
// Config.MaxPending (4 x MaxDevices by default) one more is closed at
// once and logged, so a client opening connections by the thousand
// cannot grow the daemon without bound. Once they go, clients attach.
func TestPendingConnectionsBounded(t *testing.T) {
	d, sock, log := startDaemon(t, 2, nil)
	dial := func() *net.UnixConn {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		require.NoError(t, err)
		return c
	}
	var silent []*net.UnixConn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for i := 0; i < 4*serve.MaxDevices; i++ {
		silent = append(silent, dial())
	}
	extra := dial()
	defer extra.Close()
	extra.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2048)
	n, err := extra.Read(buf)
	require.NoError(t, err, "one connection too many is told why")
	h, p, err := attach.ParseMessage(buf[:n])
	require.NoError(t, err)
	require.Equal(t, attach.TError, h.Type)
	em, err := attach.DecodeError(p)
	require.NoError(t, err)
	require.Equal(t, syscall.EAGAIN, em.Errno)
	require.Contains(t, em.Reason, "connections are waiting to attach")
	n, err = extra.Read(buf)
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF, "then closed at once")
	require.Contains(t, log.String(), "connections are waiting to attach")
	refusals := d.Counters().Refusals
	require.NotZero(t, refusals)
	// A provider that sends its ATTACH meanwhile (the daemon closes with
	// it unread: a reset) still gets the refusal, as ErrBusy and EAGAIN.
	_, err = provider.Dial("softnic0", provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64})
	require.ErrorIs(t, err, provider.ErrBusy)
	require.ErrorIs(t, err, syscall.EAGAIN)
	require.ErrorContains(t, err, "daemon busy")
	for _, c := range silent {
		c.Close()
	}
	silent = nil
	require.Eventually(t, func() bool {
		ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64})
		if err != nil {
			return false
		}
		return ctx.Close() == nil
	}, 5*time.Second, 20*time.Millisecond, "clients attach once the silent connections are gone")
}

// TestBadAttach: ATTACHes a provider never sends — another version, host
// memory that is no sealed memfd or shorter than claimed, sizes and bases
// out of range, a ring with a bad header or a truncated request — are
// each refused with their errno; the descriptors they carried are
// closed and the daemon serves on.
func TestBadAttach(t *testing.T) {
	d, sock, _ := startDaemon(t, 1, nil)
	ringFd := func(t *testing.T, slots int, corrupt func(b []byte)) int {
		r, err := shm.New("qa-ring", mmioring.Size(slots), 0)
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		_, err = mmioring.Init(r.Bytes(), slots)
		require.NoError(t, err)
		if corrupt != nil {
			corrupt(r.Bytes())
		}
		return r.Fd()
	}
	good := func() attach.AttachReq {
		return attach.AttachReq{Version: attach.Version, Device: "softnic0", MemBase: 0x10000000, MemSize: 1 << 20, RingSize: uint64(mmioring.Size(64))}
	}
	pipeFd := func(t *testing.T) int {
		var p [2]int
		require.NoError(t, syscall.Pipe(p[:]))
		t.Cleanup(func() { syscall.Close(p[0]); syscall.Close(p[1]) })
		return p[0]
	}
	fileFd := func(t *testing.T) int {
		f, err := os.CreateTemp(t.TempDir(), "mem")
		require.NoError(t, err)
		require.NoError(t, f.Truncate(1<<20))
		t.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	dirFd := func(t *testing.T) int {
		f, err := os.Open(t.TempDir())
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	socketFd := func(t *testing.T) int {
		p, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
		require.NoError(t, err)
		t.Cleanup(func() { syscall.Close(p[0]); syscall.Close(p[1]) })
		return p[0]
	}
	readOnlyFd := func(t *testing.T) int {
		// A memfd of shm.New (sealed against shrinking), unmapped, then
		// sealed against writes too: no writable mapping of it is possible.
		m, err := shm.New("qa-ro", 1<<20, 0x10000000)
		require.NoError(t, err)
		fd, err := syscall.Dup(m.Fd())
		require.NoError(t, err)
		t.Cleanup(func() { syscall.Close(fd) })
		require.NoError(t, m.Close())
		const fAddSeals, fSealWrite = 1033, 0x8 // F_ADD_SEALS, F_SEAL_WRITE (<fcntl.h>)
		_, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fAddSeals, fSealWrite)
		require.Zero(t, errno)
		return fd
	}
	for _, tc := range []struct {
		name  string
		req   func(r *attach.AttachReq)
		mem   func(t *testing.T) int
		ring  func(t *testing.T) int
		raw   []byte // the payload as it is, instead of req's encoding
		errno syscall.Errno
	}{
		{"memory sealed against writes", nil, readOnlyFd, nil, nil, syscall.EINVAL},
		{"memory is a directory", nil, dirFd, nil, nil, syscall.EINVAL},
		{"memory is a socket", nil, socketFd, nil, nil, syscall.EINVAL},
		{"ring is a directory", nil, nil, dirFd, nil, syscall.EINVAL},
		{"ring is a socket", nil, nil, socketFd, nil, syscall.EINVAL},
		{"another version", func(r *attach.AttachReq) { r.Version = 2 }, nil, nil, nil, syscall.EPROTONOSUPPORT},
		{"memory shorter than claimed", nil, func(t *testing.T) int {
			m, err := shm.New("qa-short", 1<<16, 0x10000000)
			require.NoError(t, err)
			t.Cleanup(func() { m.Close() })
			return m.Fd()
		}, nil, nil, syscall.EINVAL},
		{"memory is a pipe", nil, pipeFd, nil, nil, syscall.EINVAL},
		{"memory is a file, not sealed", nil, fileFd, nil, nil, syscall.EINVAL},
		{"no memory", func(r *attach.AttachReq) { r.MemSize = 0 }, nil, nil, nil, syscall.EINVAL},
		{"memory over 16 GiB", func(r *attach.AttachReq) { r.MemSize = 32 << 30 }, nil, nil, nil, syscall.EINVAL},
		{"memory not in pages", func(r *attach.AttachReq) { r.MemSize = 1<<20 - 8 }, nil, nil, nil, syscall.EINVAL},
		{"base 0", func(r *attach.AttachReq) { r.MemBase = 0 }, nil, nil, nil, syscall.EINVAL},
		{"base not in pages", func(r *attach.AttachReq) { r.MemBase = 0x10000008 }, nil, nil, nil, syscall.EINVAL},
		{"base wraps", func(r *attach.AttachReq) { r.MemBase = ^uint64(4095) }, nil, nil, nil, syscall.EINVAL},
		{"ring shorter than its header", func(r *attach.AttachReq) { r.RingSize = 64 }, nil, nil, nil, syscall.EINVAL},
		{"ring larger than any", func(r *attach.AttachReq) { r.RingSize = 1 << 40 }, nil, nil, nil, syscall.EINVAL},
		{"ring without magic", nil, nil, func(t *testing.T) int { return ringFd(t, 64, func(b []byte) { putU32(b, 0) }) }, nil, syscall.EINVAL},
		{"ring of more slots than its memory", nil, nil, func(t *testing.T) int { return ringFd(t, 64, func(b []byte) { putU32(b[8:], 1<<20) }) }, nil, syscall.EINVAL},
		{"ring is a file, not sealed", nil, nil, fileFd, nil, syscall.EINVAL},
		{"truncated request", nil, nil, nil, make([]byte, attach.AttachReqSize-1), syscall.EPROTO},
		{"unknown device", func(r *attach.AttachReq) { r.Device = "softnic9" }, nil, nil, nil, syscall.ENODEV},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, err := shm.New("qa-mem", 1<<20, 0x10000000)
			require.NoError(t, err)
			defer mem.Close()
			memFd, rFd := mem.Fd(), 0
			if tc.mem != nil {
				memFd = tc.mem(t)
			}
			if tc.ring != nil {
				rFd = tc.ring(t)
			} else {
				rFd = ringFd(t, 64, nil)
			}
			req := good()
			if tc.req != nil {
				tc.req(&req)
			}
			p := tc.raw
			if p == nil {
				p, err = req.Encode(nil)
				require.NoError(t, err)
			}
			before := openFDs(t)
			conn, err := attach.Dial(sock, time.Second)
			require.NoError(t, err)
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(2 * time.Second))
			require.NoError(t, conn.Send(attach.TAttach, 0, p, memFd, rFd))
			h, rp, _, err := conn.Recv()
			require.NoError(t, err)
			require.Equal(t, attach.TError, h.Type)
			em, err := attach.DecodeError(rp)
			require.NoError(t, err)
			require.Equal(t, tc.errno, em.Errno, "%s", em.Reason)
			conn.Close()
			require.Eventually(t, func() bool { return openFDs(t) <= before }, 2*time.Second, 10*time.Millisecond, "the passed descriptors are closed")
		})
	}
	t.Run("ring memfd not rounded up to pages", func(t *testing.T) {
		// A ring of a size that is not a multiple of 4096 in a memfd that
		// holds less than that rounded up to pages: the reason names the
		// size claimed and the page-rounded one its memfd must hold.
		mem, err := shm.New("qa-mem", 1<<20, 0x10000000)
		require.NoError(t, err)
		defer mem.Close()
		size := mmioring.Size(64)
		require.NotZero(t, size%4096, "the case needs a ring that is not whole pages")
		// A sealed memfd of the claim rounded down to pages: shorter than
		// the page-rounded size the daemon maps.
		short, err := shm.New("qa-ring-short", size&^4095, 0)
		require.NoError(t, err)
		defer short.Close()
		fd := short.Fd()
		req := good()
		p, err := req.Encode(nil)
		require.NoError(t, err)
		conn, err := attach.Dial(sock, time.Second)
		require.NoError(t, err)
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		require.NoError(t, conn.Send(attach.TAttach, 0, p, mem.Fd(), fd))
		h, rp, _, err := conn.Recv()
		require.NoError(t, err)
		require.Equal(t, attach.TError, h.Type)
		em, err := attach.DecodeError(rp)
		require.NoError(t, err)
		require.Equal(t, syscall.EINVAL, em.Errno)
		require.Contains(t, em.Reason, fmt.Sprintf("ring of %d bytes claimed, its memfd must hold it rounded up to pages (%d bytes)", size, (size+4095)&^4095))
	})
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err, "the daemon serves on")
	require.NoError(t, ctx.Close())
	require.Zero(t, d.Clients())
}
