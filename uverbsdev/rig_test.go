package uverbsdev

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/uverbs"
)

// rig is one device with its uverbs Device and a first client.
type rig struct {
	t   testing.TB
	mem *shm.Region
	dev *device.Device
	d   *Device
	s   *Server
	req [1024]byte
	out [1024]byte
}

var (
	rigMAC  = [6]byte{0x02, 0x53, 0x4e, 0, 0, 1}
	rigIP   = netip.MustParseAddr("192.0.2.1")
	peerMAC = [6]byte{0x02, 0x53, 0x4e, 0, 0, 2}
	peerIP  = netip.MustParseAddr("192.0.2.2")
)

const rigBase = 0x7f0000000000

func newRig(t testing.TB, memSize int) *rig { return newRigSpec(t, memSize, device.DefaultSpec()) }

// newRigSpec is newRig with a device of spec.
func newRigSpec(t testing.TB, memSize int, spec device.Spec) *rig {
	mem, err := shm.New("uverbsdev-test", memSize, rigBase)
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	dev := device.New(sim.NewEngine(), spec, device.Identity{MAC: rigMAC, IP: rigIP}, mem, nil)
	d := NewDevice(dev)
	d.SetNeighbour(func(g [16]byte) ([6]byte, bool) {
		if g == peerIP.As16() {
			return peerMAC, true
		}
		return [6]byte{}, false
	})
	return &rig{t: t, mem: mem, dev: dev, d: d, s: d.NewServer()}
}

// alloc reserves client memory.
func (r *rig) alloc(n int) uint64 {
	a, err := r.mem.Alloc(n, 4096)
	require.NoError(r.t, err)
	return a
}

// do sends a legacy write command to s and returns the response.
func (r *rig) do(s *Server, cmd uverbs.Command, core, drv uverbs.Struct, outLen int) ([]byte, error) {
	n, err := uverbs.EncodeWrite(r.req[:], cmd, core, drv, outLen)
	require.NoError(r.t, err)
	m, err := s.Handle(r.req[:n], r.out[:outLen])
	if err != nil {
		require.Zero(r.t, m)
		return nil, err
	}
	return r.out[:m], nil
}

// ex sends an extended write command (core and driver padded to 8
// bytes) and returns the response: core (outLen) then driver (drvOut).
func (r *rig) ex(s *Server, cmd uverbs.Command, core, drv uverbs.Struct, outLen, drvOut int) ([]byte, error) {
	pad := func(n int) int { return (n + 7) &^ 7 }
	cl, dl := pad(core.Size()), 0
	if drv != nil {
		dl = pad(drv.Size())
	}
	outLen, drvOut = pad(outLen), pad(drvOut)
	clear(r.req[:])
	n, err := uverbs.PutExWriteHdr(r.req[:], cmd, cl, dl, outLen, drvOut, 1)
	require.NoError(r.t, err)
	_, _ = core.Encode(r.req[uverbs.CmdHdrSize+uverbs.ExCmdHdrSize:])
	if drv != nil {
		_, _ = drv.Encode(r.req[uverbs.CmdHdrSize+uverbs.ExCmdHdrSize+cl:])
	}
	m, err := s.Handle(r.req[:n], r.out[:outLen+drvOut])
	if err != nil {
		return nil, err
	}
	return r.out[:m], nil
}

// must is do that must succeed.
func (r *rig) must(s *Server, cmd uverbs.Command, core, drv uverbs.Struct, outLen int) []byte {
	r.t.Helper()
	b, err := r.do(s, cmd, core, drv, outLen)
	require.NoError(r.t, err, "%v", cmd)
	return b
}

// errno is the errno of a refusal (0 for nil).
func errno(t testing.TB, err error) syscall.Errno {
	t.Helper()
	if err == nil {
		return 0
	}
	var ue *uverbs.Error
	require.True(t, errors.As(err, &ue), "%v is not a *uverbs.Error", err)
	require.True(t, errors.Is(err, ue.Errno))
	return ue.Errno
}

func decode[T any, P interface {
	*T
	uverbs.Struct
}](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	require.GreaterOrEqual(t, len(b), P(&v).Size())
	require.NoError(t, P(&v).Decode(b[:P(&v).Size()]))
	return v
}

// open is GET_CONTEXT (dynamic UARs) and one UAR_OBJ_ALLOC; it returns
// the mlx5 context response and the UAR page.
func (r *rig) open(s *Server) (uverbs.MLX5AllocUcontextResp, uint32) {
	drv := uverbs.MLX5AllocUcontextReqV2{MaxCQEVersion: 1, LibCaps: uverbs.MLX5LibCapDynUAR}
	b := r.must(s, uverbs.CmdGetContext, &uverbs.GetContext{Response: 1}, &drv, uverbs.GetContextRespSize+uverbs.MLX5AllocUcontextRespSize)
	uc := decode[uverbs.MLX5AllocUcontextResp](r.t, b[uverbs.GetContextRespSize:])
	_, page, err := r.uarAlloc(s)
	require.NoError(r.t, err)
	return uc, page
}

const uarHdr = uverbs.IoctlHdrSize + 5*uverbs.AttrSize

func (r *rig) uarAlloc(s *Server) (uverbs.Handle, uint32, error) {
	a := uverbs.MLX5UARAlloc{Type: uverbs.MLX5UARTypeBF, MmapOffset: uarHdr, MmapLength: uarHdr + 8, PageID: uarHdr + 12}
	io, err := a.Encode(r.req[:])
	require.NoError(r.t, err)
	n, err := s.Handle(io.Bytes(), r.out[:uarHdr+16])
	if err != nil {
		return 0, 0, err
	}
	require.Equal(r.t, uarHdr+16, n)
	out := uverbs.IoctlHdr(r.out[:uarHdr])
	for i := 2; i < 5; i++ {
		require.NotZero(r.t, out.Attr(i).Flags()&uverbs.AttrFValidOutput)
	}
	require.Equal(r.t, uint32(4096), binary.NativeEndian.Uint32(r.out[uarHdr+8:]))
	return uverbs.Handle(out.Attr(0).Data()), binary.NativeEndian.Uint32(r.out[uarHdr+12:]), nil
}

// objects a test builds on a client.
type objs struct {
	pd, mr, cq, qp, srq uverbs.Handle
	pdn, lkey, cqn, qpn uint32
	srqn                uint32
	uar                 uint32
}

func (r *rig) allocPD(s *Server) (uverbs.Handle, uint32) {
	b := r.must(s, uverbs.CmdAllocPD, &uverbs.AllocPD{Response: 1}, nil, uverbs.AllocPDRespSize+uverbs.MLX5AllocPDRespSize)
	return decode[uverbs.AllocPDResp](r.t, b).PDHandle, decode[uverbs.MLX5AllocPDResp](r.t, b[4:]).PDN
}

func (r *rig) createCQ(s *Server, uar uint32, ch int32) (uverbs.Handle, uint32, error) {
	buf, db := r.alloc(64*64), r.alloc(64)
	b, err := r.do(s, uverbs.CmdCreateCQ, &uverbs.CreateCQ{Response: 1, CQE: 63, CompChannel: ch},
		&uverbs.MLX5CreateCQ{BufAddr: buf, DBAddr: db, CQESize: 64, Flags: uverbs.MLX5CreateCQFlagUARPageIndex, UARPageIndex: uint16(uar)},
		uverbs.CreateCQRespSize+uverbs.MLX5CreateCQRespSize)
	if err != nil {
		return 0, 0, err
	}
	c := decode[uverbs.CreateCQResp](r.t, b)
	require.Equal(r.t, uint32(63), c.CQE)
	return c.CQHandle, decode[uverbs.MLX5CreateCQResp](r.t, b[8:]).CQN, nil
}

func (r *rig) qpReq(pd, cq, srq uverbs.Handle) (uverbs.CreateQP, uverbs.MLX5CreateQP) {
	buf, db := r.alloc(64*64+64*64), r.alloc(64)
	c := uverbs.CreateQP{Response: 1, PDHandle: pd, SendCQHandle: cq, RecvCQHandle: cq, MaxSendWR: 64, MaxRecvWR: 64,
		MaxSendSGE: 1, MaxRecvSGE: 1, QPType: uverbs.QPTypeRC}
	d := uverbs.MLX5CreateQP{BufAddr: buf, DBAddr: db, SQWQECount: 64, RQWQECount: 64, RQWQEShift: 6}
	if srq != 0 {
		c.SRQHandle, c.IsSRQ, d.RQWQECount = srq, 1, 0
	}
	return c, d
}

func (r *rig) createQP(s *Server, pd, cq, srq uverbs.Handle) (uverbs.Handle, uint32, uint32, error) {
	c, d := r.qpReq(pd, cq, srq)
	b, err := r.do(s, uverbs.CmdCreateQP, &c, &d, uverbs.CreateQPRespSize+uverbs.MLX5CreateQPRespSize)
	if err != nil {
		return 0, 0, 0, err
	}
	q := decode[uverbs.CreateQPResp](r.t, b)
	return q.QPHandle, q.QPN, decode[uverbs.MLX5CreateQPResp](r.t, b[uverbs.CreateQPRespSize:]).BFRegIndex, nil
}

func (r *rig) createSRQ(s *Server, pd uverbs.Handle) (uverbs.Handle, uint32) {
	buf, db := r.alloc(64*32), r.alloc(64)
	b := r.must(s, uverbs.CmdCreateSRQ, &uverbs.CreateSRQ{Response: 1, PDHandle: pd, MaxWR: 63, MaxSGE: 1},
		&uverbs.MLX5CreateSRQ{BufAddr: buf, DBAddr: db}, uverbs.CreateSRQRespSize+uverbs.MLX5CreateSRQRespSize)
	c := decode[uverbs.CreateSRQResp](r.t, b)
	require.Equal(r.t, uint32(63), c.MaxWR)
	require.Equal(r.t, uint32(1), c.MaxSGE)
	require.Equal(r.t, c.SRQN, decode[uverbs.MLX5CreateSRQResp](r.t, b[16:]).SRQN)
	return c.SRQHandle, c.SRQN
}

func (r *rig) regMR(s *Server, pd uverbs.Handle) (uverbs.Handle, uint32) {
	a := r.alloc(8192)
	b := r.must(s, uverbs.CmdRegMR, &uverbs.RegMR{Response: 1, Start: a, Length: 8192, HCAVA: a, PDHandle: pd,
		AccessFlags: uverbs.AccessLocalWrite | uverbs.AccessRemoteWrite}, nil, uverbs.RegMRRespSize)
	m := decode[uverbs.RegMRResp](r.t, b)
	require.Equal(r.t, m.LKey, m.RKey)
	return m.MRHandle, m.LKey
}

// build creates one of everything on client s (which it opens).
func (r *rig) build(s *Server) objs {
	var o objs
	_, o.uar = r.open(s)
	o.pd, o.pdn = r.allocPD(s)
	o.mr, o.lkey = r.regMR(s, o.pd)
	var err error
	o.cq, o.cqn, err = r.createCQ(s, o.uar, uverbs.NoCompChannel)
	require.NoError(r.t, err)
	o.srq, o.srqn = r.createSRQ(s, o.pd)
	o.qp, o.qpn, _, err = r.createQP(s, o.pd, o.cq, 0)
	require.NoError(r.t, err)
	return o
}

// modify sends a MODIFY_QP.
func (r *rig) modify(s *Server, m uverbs.ModifyQP) error {
	_, err := r.do(s, uverbs.CmdModifyQP, &m, nil, 0)
	return err
}

// connect moves a QP RESET → INIT → RTR → RTS.
func (r *rig) connect(s *Server, qp uverbs.Handle) {
	r.t.Helper()
	require.NoError(r.t, r.modify(s, uverbs.ModifyQP{QPHandle: qp, AttrMask: uverbs.QPAttrState | uverbs.QPAttrPKeyIndex | uverbs.QPAttrPort | uverbs.QPAttrAccessFlags,
		QPState: uverbs.QPStateInit, PortNum: 1, QPAccessFlags: uverbs.AccessRemoteWrite}))
	require.NoError(r.t, r.modify(s, uverbs.ModifyQP{QPHandle: qp,
		AttrMask: uverbs.QPAttrState | uverbs.QPAttrAV | uverbs.QPAttrPathMTU | uverbs.QPAttrDestQPN | uverbs.QPAttrRQPSN | uverbs.QPAttrMaxDestRdAtomic | uverbs.QPAttrMinRNRTimer,
		QPState:  uverbs.QPStateRTR, PathMTU: uverbs.MTU1024, DestQPNum: 0x123, RQPSN: 0x2000, MaxDestRdAtomic: 4, MinRNRTimer: 12,
		Dest: uverbs.QPDest{DGID: peerIP.As16(), SGIDIndex: 1, HopLimit: 64, IsGlobal: 1, PortNum: 1}}))
	require.NoError(r.t, r.modify(s, uverbs.ModifyQP{QPHandle: qp,
		AttrMask: uverbs.QPAttrState | uverbs.QPAttrTimeout | uverbs.QPAttrRetryCnt | uverbs.QPAttrRNRRetry | uverbs.QPAttrSQPSN | uverbs.QPAttrMaxQPRdAtomic,
		QPState:  uverbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0x1000, MaxRdAtomic: 4}))
}

// state asks the device directly.
func (r *rig) state(qpn uint32) mlx5.QPState {
	a, err := r.dev.QueryQP(qpn)
	require.NoError(r.t, err)
	return a.State
}
