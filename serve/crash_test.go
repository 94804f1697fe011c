package serve_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/serve"
	"github.com/stretchr/testify/require"
)

// side is one process's end of a connection across processes.
type side struct {
	ctx *provider.Context
	pd  *provider.PD
	cq  *provider.CQ
	qp  *provider.QP
	buf provider.Buffer
	mr  *provider.MR
}

// newSide opens softnic<n> and creates a QP with one CQ and a buffer.
func newSide(n int, o provider.DialOptions) (*side, error) {
	ctx, err := provider.Dial(fmt.Sprintf("softnic%d", n), o)
	if err != nil {
		return nil, err
	}
	s := &side{ctx: ctx}
	if s.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if s.cq, err = ctx.CreateCQ(64); err != nil {
		return nil, err
	}
	if s.buf, err = ctx.AllocBuffer(8192, 4096); err != nil {
		return nil, err
	}
	if s.mr, err = s.pd.RegMR(s.buf.Addr, 8192, provider.AccessLocalWrite|provider.AccessRemoteWrite); err != nil {
		return nil, err
	}
	s.qp, err = ctx.CreateQP(s.pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	return s, err
}

// connect brings s's QP to RTS towards the QP peerQPN on softnic<peer>.
func (s *side) connect(peer int, peerQPN, psn, peerPSN uint32) error {
	id := serve.Identity(peer)
	a := provider.DefaultConnectAttr()
	a.Peer = provider.Peer{QPN: peerQPN, PSN: peerPSN, GID: id.IP.As16(), MAC: id.MAC}
	a.PSN = psn
	a.Access = provider.AccessRemoteWrite
	return s.qp.Connect(a)
}

// peerChild is the "peer" role: softnic0's side of a connection to the
// parent's QP on softnic1, set up over stdin/stdout; then it waits to be
// killed.
func peerChild(in io.Reader) error {
	s, err := newSide(0, provider.DialOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("qpn %x\n", s.qp.QPN())
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil {
		return err
	}
	q, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "qpn ")), 16, 32)
	if err != nil {
		return err
	}
	if err := s.connect(1, uint32(q), 0x1000, 0x2000); err != nil {
		return err
	}
	if _, err := s.qp.PostRecv([]provider.RecvWR{{WRID: 9, SGL: []provider.SGE{s.mr.SGE(0, 4096)}}}); err != nil {
		return err
	}
	fmt.Println("ready")
	// Keep polling, as an application does, until killed.
	wcs := make([]provider.WC, 4)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if _, err := s.cq.Poll(wcs); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// TestPeerOfKilledClient: a client process killed with SIGKILL mid-run;
// the daemon tears it down, and the QP connected to one of its QPs sees
// retry-exceeded, as the peer of a dead host does.
func TestPeerOfKilledClient(t *testing.T) {
	d, sock, log := startDaemon(t, 2, nil)
	victim := child(t, "peer", sock)
	stdin, err := victim.StdinPipe()
	require.NoError(t, err)
	stdout, err := victim.StdoutPipe()
	require.NoError(t, err)
	victim.Stderr = os.Stderr
	require.NoError(t, victim.Start())
	defer victim.Process.Kill()
	rd := bufio.NewReader(stdout)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	q, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "qpn ")), 16, 32)
	require.NoError(t, err, line)

	me, err := newSide(1, provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	defer me.ctx.Close()
	_, err = fmt.Fprintf(stdin, "qpn %x\n", me.qp.QPN())
	require.NoError(t, err)
	require.NoError(t, me.connect(0, uint32(q), 0x2000, 0x1000))
	line, err = rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)

	send := func(id uint64) provider.WC {
		_, err := me.qp.PostSend([]provider.SendWR{{WRID: id, Opcode: provider.WRSend, Flags: provider.SendSignaled,
			SGL: []provider.SGE{me.mr.SGE(0, 64)}}})
		require.NoError(t, err)
		wcs, err := waitWC(me.cq, 1, time.Now().Add(20*time.Second))
		require.NoError(t, err)
		return wcs[0]
	}
	require.Equal(t, provider.WCSuccess, send(1).Status, "the connection works while the peer lives")

	require.NoError(t, victim.Process.Kill())
	victim.Wait()
	// teardown frees the slot, then logs: wait for both.
	require.Eventually(t, func() bool { return d.Clients() == 1 && strings.Contains(log.String(), "detach softnic0") },
		5*time.Second, 10*time.Millisecond, "the daemon tears the killed client down: %s", log)
	start := d.Now()
	wc := send(2)
	require.Equal(t, provider.WCRetryExcErr, wc.Status, "%+v", wc)
	t.Logf("retry exceeded after %v of virtual time", d.Now()-start)
}
