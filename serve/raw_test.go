package serve_test

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/mmioring"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/uverbs"
	"github.com/stretchr/testify/require"
)

// raw is a hand-made client: the protocol without the provider, so that a
// test can send what a provider never would.
type raw struct {
	conn *attach.Conn
	uc   *net.UnixConn // conn's socket, for what attach.Conn never sends
	mem  *shm.Region
	rmem *shm.Region
	prod *mmioring.Producer
	seq  uint32
	ctl  *provider.UverbsControl
}

// dialRaw attaches to dev with 1 MiB of memory at base and a ring of 64 slots.
func dialRaw(t testing.TB, sock, dev string, base uint64) *raw {
	t.Helper()
	r, err := rawAttach(sock, dev, base, true)
	require.NoError(t, err)
	t.Cleanup(r.close)
	_, err = r.ctl.GetContext()
	require.NoError(t, err)
	return r
}

// rawAttach is dialRaw outside a test (a child process): it sends ATTACH
// and, if wait, reads the answer, which must be ATTACHED.
func rawAttach(sock, dev string, base uint64, wait bool) (*raw, error) {
	mem, err := shm.New("raw", 1<<20, base)
	if err != nil {
		return nil, err
	}
	rmem, err := shm.New("raw-ring", mmioring.Size(64), 0)
	if err != nil {
		mem.Close()
		return nil, err
	}
	r := &raw{mem: mem, rmem: rmem}
	ring, err := mmioring.Init(rmem.Bytes(), 64)
	if err != nil {
		r.close()
		return nil, err
	}
	r.prod = ring.Producer()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		r.close()
		return nil, err
	}
	r.conn, r.uc = attach.NewConn(uc), uc
	req := attach.AttachReq{Version: attach.Version, Device: dev, MemBase: mem.Base(), MemSize: uint64(mem.Size()),
		RingSize: uint64(mmioring.Size(64))}
	p, err := req.Encode(nil)
	if err == nil {
		err = r.conn.Send(attach.TAttach, 0, p, mem.Fd(), rmem.Fd())
	}
	if err == nil && wait {
		r.conn.SetDeadline(time.Now().Add(2 * time.Second))
		var h attach.Header
		h, _, _, err = r.conn.Recv()
		if err == nil && h.Type != attach.TAttached {
			err = fmt.Errorf("answered %v", h.Type)
		}
	}
	if err != nil {
		r.close()
		return nil, err
	}
	r.ctl = provider.NewUverbsControl(rawTransport{r})
	return r, nil
}

// close closes the raw client's socket and unmaps its memory and ring.
func (r *raw) close() {
	if r.conn != nil {
		r.conn.Close()
	}
	r.mem.Close()
	r.rmem.Close()
}

// send sends one message and returns the answer's type and payload.
func (r *raw) send(t attach.Type, p []byte) (attach.Type, []byte, error) {
	r.seq++
	r.conn.SetDeadline(time.Now().Add(2 * time.Second))
	if err := r.conn.Send(t, r.seq, p); err != nil {
		return 0, nil, err
	}
	h, rp, _, err := r.conn.Recv()
	return h.Type, rp, err
}

type rawTransport struct{ r *raw }

func (x rawTransport) Do(req, resp []byte) (int, error) {
	t, p, err := x.r.send(attach.TUverbs, req)
	if err != nil {
		return 0, err
	}
	if t == attach.TError {
		em, err := attach.DecodeError(p)
		if err != nil {
			return 0, err
		}
		return 0, &uverbs.Error{Errno: em.Errno, Reason: em.Reason}
	}
	return copy(resp, p), nil
}

// deallocPD sends DEALLOC_PD for handle h, as a client that lies about
// its handles would.
func (r *raw) deallocPD(h uint32) error {
	b := make([]byte, 64)
	n, err := uverbs.EncodeWrite(b, uverbs.CmdDeallocPD, &uverbs.DeallocPD{PDHandle: h}, nil, 0)
	if err != nil {
		return err
	}
	_, err = rawTransport{r}.Do(b[:n], nil)
	return err
}

// TestForeignHandles: handles are per client, so one client naming
// another's handle reaches nothing of it.
func TestForeignHandles(t *testing.T) {
	_, sock, _ := startDaemon(t, 2, nil)
	a := dialRaw(t, sock, "softnic0", 0x10000000)
	b := dialRaw(t, sock, "softnic1", 0x20000000)
	pd, err := a.ctl.AllocPD()
	require.NoError(t, err)
	for h := uint32(0); h < 8; h++ {
		err := b.deallocPD(h)
		var ue *uverbs.Error
		require.True(t, errors.As(err, &ue), "handle %d: %v", h, err)
		require.Contains(t, []syscall.Errno{syscall.ENOENT, syscall.EINVAL}, ue.Errno, "handle %d", h)
	}
	require.NoError(t, a.ctl.DeallocPD(pd.PDN), "a's PD survived b's attempts")
}

// TestBadMessagesKeepServing: malformed socket messages get EPROTO and
// the connection goes on.
func TestBadMessagesKeepServing(t *testing.T) {
	d, sock, _ := startDaemon(t, 1, nil)
	r := dialRaw(t, sock, "softnic0", 0x10000000)
	for _, tc := range []struct {
		name string
		t    attach.Type
		p    []byte
	}{
		{"attach again", attach.TAttach, make([]byte, attach.AttachReqSize)},
		{"response type", attach.TUverbsResp, nil},
		{"short sim", attach.TSim, []byte{1}},
		{"unknown sim op", attach.TSim, attach.EncodeSim(nil, 99)},
		{"sim args missing", attach.TSim, attach.EncodeSim(nil, attach.SimAttachCQ)},
		{"empty uverbs", attach.TUverbs, nil},
		{"garbage uverbs", attach.TUverbs, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}},
		{"detach with a payload", attach.TDetach, []byte{1}},
		{"detached from a client", attach.TDetached, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, p, err := r.send(tc.t, tc.p)
			require.NoError(t, err)
			require.Equal(t, attach.TError, typ)
			em, err := attach.DecodeError(p)
			require.NoError(t, err)
			require.NotZero(t, em.Errno)
		})
	}
	typ, _, err := r.send(attach.TSim, attach.EncodeSim(nil, attach.SimPendingEvents, 0))
	require.NoError(t, err)
	require.Equal(t, attach.TSimResp, typ, "still serving")
	require.NotZero(t, d.Counters().BadMessages)
}

// TestLyingRecords: records a provider never makes — doorbells for QPs
// the client does not have, BlueFlame lines of garbage, stores outside the
// BAR, times in the past and far future — cost the liar counted drops and
// nothing else: a connection of two other clients keeps working.
func TestLyingRecords(t *testing.T) {
	d, sock, _ := startDaemon(t, 3, nil)
	liar := dialRaw(t, sock, "softnic2", 0x30000000)
	eps, closeAll, err := dialPairOn(sock, 0, 1)
	require.NoError(t, err)
	defer closeAll()
	var junk [64]byte
	for i := range junk {
		junk[i] = byte(i * 37)
	}
	recs := []mmioring.Record{
		mmioring.Store64(3*4096+0x800, 0x0000010000000a08, 10), // doorbell naming QP 0x100, which softnic2 does not have
		mmioring.Line(3*4096+0x800, &junk, mmioring.FullMask, 20),
		mmioring.Line(4*4096+0x900, &junk, 0x00ff00ff00ff00ff, 30),
		mmioring.Store32(1<<30, 7, 40), // far outside BAR0
		mmioring.Store64(0x18, ^uint64(0), 1<<62),
		mmioring.Store64(3*4096+0x20, 0, -5),
	}
	for i := 0; i < 20; i++ {
		_, err := liar.prod.PushN(recs, time.Now().Add(time.Second))
		require.NoError(t, err)
		r, err := liar.prod.Call(attach.OpSync, 0, 50, time.Now().Add(2*time.Second))
		require.NoError(t, err)
		require.Zero(t, r.Status)
		for _, o := range ops {
			require.NoError(t, runOp(eps, o, time.Now().Add(10*time.Second)), o.name)
		}
	}
	_, err = liar.prod.Call(99, 0, 50, time.Now().Add(2*time.Second)) // an unknown call is refused, not fatal
	require.NoError(t, err)
	require.NotZero(t, d.Counters().ClampedTimes)
}
