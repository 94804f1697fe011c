package provider

import (
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/shm"
	"github.com/stretchr/testify/require"
)

// EnvBase is the fixed IOVA of the test region, so addresses in failures
// are the same from run to run.
const EnvBase = 0x7f0000000000

// Env is a context on the fake device with a PD, a 64 KiB registered
// buffer, one CQ and one RC QP.
type Env struct {
	Mem *shm.Region
	Dev *FakeDev
	Ctx *Context
	PD  *PD
	Buf Buffer
	MR  *MR
	CQ  *CQ
	QP  *QP
}

// EnvOpts tunes NewEnv.
type EnvOpts struct {
	Progress  bool // Control also implements Progressor, MMIO HostWorker
	Cap       QPCap
	CQEntries int
	SigAll    bool
	BFBufSize int // -1: device reports no BlueFlame
	// Setup, if set, adjusts the fake device (its Attr, say) before the
	// context is opened.
	Setup func(d *FakeDev)
	// NoSRQ hides the fake's mlx5.SRQControl from the provider.
	NoSRQ bool
	// Type is the QP type NewQueues creates (default RC); SRQ, if set, is
	// the SRQ it attaches the QP to.
	Type QPType
	SRQ  *SRQ
}

// NewEnv builds an Env; the QP is left in RESET. The region is closed
// when the test ends.
func NewEnv(t testing.TB, o EnvOpts) *Env {
	t.Helper()
	e, err := NewEnvErr(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Mem.Close() })
	return e
}

// NewEnvErr builds an Env whose region the caller closes.
func NewEnvErr(o EnvOpts) (*Env, error) {
	mem, err := shm.New("provider-test", 8<<20, EnvBase)
	if err != nil {
		return nil, err
	}
	e, err := newEnv(mem, o)
	if err != nil {
		_ = mem.Close()
	}
	return e, err
}

func newEnv(mem *shm.Region, o EnvOpts) (*Env, error) {
	dev := NewFakeDev(mem)
	switch {
	case o.BFBufSize < 0:
		dev.BFBufSize = 0
	case o.BFBufSize > 0:
		dev.BFBufSize = o.BFBufSize
	}
	if o.Setup != nil {
		o.Setup(dev)
	}
	var ctl mlx5.Control = dev
	var mmio pcie.MMIO = dev
	if o.Progress {
		ctl, mmio = FakeProgDev{dev}, FakeHostMMIO{dev}
	}
	if o.NoSRQ {
		ctl = struct{ mlx5.Control }{ctl} // only the Control methods
	}
	ctx, err := Open(Device{Name: "fake0", Control: ctl, MMIO: mmio, Mem: mem})
	if err != nil {
		return nil, err
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, err
	}
	buf, err := ctx.AllocBuffer(64<<10, 4096)
	if err != nil {
		return nil, err
	}
	for i := range buf.Bytes {
		buf.Bytes[i] = byte(i*7 + 1)
	}
	mr, err := pd.RegMR(buf.Addr, uint64(len(buf.Bytes)), AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	if err != nil {
		return nil, err
	}
	e := &Env{Mem: mem, Dev: dev, Ctx: ctx, PD: pd, Buf: buf, MR: mr}
	return e, e.NewQueues(o)
}

// NewQueues gives the Env a fresh CQ and QP (in RESET).
func (e *Env) NewQueues(o EnvOpts) error {
	if o.CQEntries == 0 {
		o.CQEntries = 255
	}
	cq, err := e.Ctx.CreateCQ(o.CQEntries)
	if err != nil {
		return err
	}
	if o.Cap == (QPCap{}) {
		o.Cap = QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256}
	}
	qp, err := e.Ctx.CreateQP(e.PD, QPInitAttr{Type: o.Type, SendCQ: cq, RecvCQ: cq, SRQ: o.SRQ, Cap: o.Cap, SigAll: o.SigAll})
	if err != nil {
		return err
	}
	e.CQ, e.QP = cq, qp
	return nil
}

// DropQueues destroys the Env's QP and CQ.
func (e *Env) DropQueues() error {
	if err := e.QP.Destroy(); err != nil {
		return err
	}
	return e.CQ.Destroy()
}

// RTSAttrs returns the attribute sets of the RESET→INIT→RTR→RTS walk.
func RTSAttrs() (init, rtr, rts *QPAttr) {
	init = &QPAttr{QPState: QPStateInit, PKeyIndex: 0, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead}
	rtr = &QPAttr{QPState: QPStateRTR, PathMTU: mlx5.MTU1024, DestQPN: 0x200, RQPSN: 0x100, MaxDestRdAtomic: 4,
		MinRNRTimer: 12, AV: AV{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}, HopLimit: 64}}
	rts = &QPAttr{QPState: QPStateRTS, SQPSN: 0x300, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
	return
}

// Masks for the RTSAttrs steps.
const (
	InitMask = mlx5.AttrState | mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrAccessFlags
	RTRMask  = mlx5.AttrState | mlx5.AttrAV | mlx5.AttrPathMTU | mlx5.AttrDestQPN | mlx5.AttrRQPSN |
		mlx5.AttrMaxDestRdAtomic | mlx5.AttrMinRNRTimer
	RTSMask = mlx5.AttrState | mlx5.AttrTimeout | mlx5.AttrRetryCnt | mlx5.AttrRNRRetry | mlx5.AttrSQPSN |
		mlx5.AttrMaxQPRdAtomic
)

// ToRTS walks qp to RTS.
func ToRTS(t testing.TB, qp *QP) {
	t.Helper()
	i, r, s := RTSAttrs()
	require.NoError(t, qp.Modify(i, InitMask))
	require.NoError(t, qp.Modify(r, RTRMask))
	require.NoError(t, qp.Modify(s, RTSMask))
}

// SQRing is the SQ ring bytes (aliasing host memory).
func (e *Env) SQRing(t testing.TB) []byte {
	info := e.QP.SQInfo()
	b, err := e.Mem.Slice(info.Addr, info.WQEBBs*mlx5.WQEBBSize)
	require.NoError(t, err)
	return b
}

// DBR is the QP's doorbell record.
func (e *Env) DBR(t testing.TB) mlx5.DBRec {
	b, err := e.Mem.Slice(e.QP.SQInfo().DBRAddr, 8)
	require.NoError(t, err)
	return mlx5.DBRec(b)
}

// UD and UC attribute sets of the RESET→INIT→RTR→RTS walk, with the masks
// the IB table requires for each type.
const (
	UDQKey     = 0x11111111
	UDInitMask = mlx5.AttrState | mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrQKey
	UDRTRMask  = mlx5.AttrState
	UDRTSMask  = mlx5.AttrState | mlx5.AttrSQPSN
	UCInitMask = InitMask
	UCRTRMask  = mlx5.AttrState | mlx5.AttrAV | mlx5.AttrPathMTU | mlx5.AttrDestQPN | mlx5.AttrRQPSN
	UCRTSMask  = mlx5.AttrState | mlx5.AttrSQPSN
)

// ToRTSAs walks qp of type t to RTS with the minimal attribute sets.
func ToRTSAs(t testing.TB, typ QPType, qp *QP) {
	t.Helper()
	i, r, s := RTSAttrs()
	switch typ {
	case QPTypeUD:
		require.NoError(t, qp.Modify(&QPAttr{QPState: QPStateInit, Port: 1, QKey: UDQKey}, UDInitMask))
		require.NoError(t, qp.Modify(&QPAttr{QPState: QPStateRTR}, UDRTRMask))
		require.NoError(t, qp.Modify(&QPAttr{QPState: QPStateRTS, SQPSN: 0x300}, UDRTSMask))
	case QPTypeUC:
		require.NoError(t, qp.Modify(i, UCInitMask))
		require.NoError(t, qp.Modify(r, UCRTRMask))
		require.NoError(t, qp.Modify(s, UCRTSMask))
	default:
		ToRTS(t, qp)
	}
}
