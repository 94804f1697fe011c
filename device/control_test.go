package device_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/stretchr/testify/require"
)

func newDev(t *testing.T) (*device.Device, *shm.Region) {
	t.Helper()
	mem, err := shm.New("devtest", 1<<20, 0x10000000)
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	d := device.New(sim.NewEngine(), device.DefaultSpec(), device.Identity{MAC: [6]byte{2, 0, 0, 0, 0, 1}}, mem, nil)
	return d, mem
}

func status(t *testing.T, err error) mlx5.CmdStatus {
	t.Helper()
	var ce *mlx5.CmdError
	require.True(t, errors.As(err, &ce), "want a *mlx5.CmdError, got %v", err)
	require.NotEmpty(t, ce.Reason)
	return ce.Status
}

func TestControlErrors(t *testing.T) {
	d, mem := newDev(t)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	buf, _ := mem.Alloc(64*64, 4096)
	dbr, _ := mem.Alloc(8, 8)
	cq, err := d.CreateCQ(mlx5.CreateCQCmd{Entries: 64, CQESize: 64, BufAddr: buf, DBAddr: dbr})
	require.NoError(t, err)
	qbuf, _ := mem.Alloc(8192, 4096)
	qdbr, _ := mem.Alloc(8, 8)
	good := mlx5.CreateQPCmd{Type: mlx5.QPTypeRC, PDN: pd.PDN, SendCQN: cq.CQN, RecvCQN: cq.CQN, BufAddr: qbuf, DBAddr: qdbr,
		SQWQECnt: 64, RQWQECnt: 64, RQWQEShift: 4}
	cases := []struct {
		name string
		run  func() error
		want mlx5.CmdStatus
	}{
		{"regmr unknown pd", func() error { _, e := d.RegMR(mlx5.RegMRCmd{PDN: 99, Addr: buf, Length: 64}); return e }, mlx5.StatusBadResource},
		{"regmr zero length", func() error { _, e := d.RegMR(mlx5.RegMRCmd{PDN: pd.PDN, Addr: buf}); return e }, mlx5.StatusBadParam},
		{"regmr outside memory", func() error {
			_, e := d.RegMR(mlx5.RegMRCmd{PDN: pd.PDN, Addr: 0x1000, Length: 64})
			return e
		}, mlx5.StatusBadParam},
		{"regmr remote write without local write", func() error {
			_, e := d.RegMR(mlx5.RegMRCmd{PDN: pd.PDN, Addr: buf, Length: 64, Access: mlx5.AccessRemoteWrite})
			return e
		}, mlx5.StatusBadParam},
		{"regmr unknown access bits", func() error {
			_, e := d.RegMR(mlx5.RegMRCmd{PDN: pd.PDN, Addr: buf, Length: 64, Access: 1 << 9})
			return e
		}, mlx5.StatusBadParam},
		{"cq not a power of two", func() error {
			_, e := d.CreateCQ(mlx5.CreateCQCmd{Entries: 65, CQESize: 64, BufAddr: buf, DBAddr: dbr})
			return e
		}, mlx5.StatusBadParam},
		{"cq 128-byte CQEs", func() error {
			_, e := d.CreateCQ(mlx5.CreateCQCmd{Entries: 64, CQESize: 128, BufAddr: buf, DBAddr: dbr})
			return e
		}, mlx5.StatusBadParam},
		{"cq ring outside memory", func() error {
			_, e := d.CreateCQ(mlx5.CreateCQCmd{Entries: 64, CQESize: 64, BufAddr: 0x40, DBAddr: dbr})
			return e
		}, mlx5.StatusBadParam},
		{"qp type XRC (not modelled)", func() error { c := good; c.Type = 3; _, e := d.CreateQP(c); return e }, mlx5.StatusBadParam},
		{"qp unknown srq", func() error { c := good; c.SRQN = 9; _, e := d.CreateQP(c); return e }, mlx5.StatusBadResource},
		{"qp unknown cq", func() error { c := good; c.SendCQN = 77; _, e := d.CreateQP(c); return e }, mlx5.StatusBadResource},
		{"qp unknown pd", func() error { c := good; c.PDN = 77; _, e := d.CreateQP(c); return e }, mlx5.StatusBadResource},
		{"qp sq not a power of two", func() error { c := good; c.SQWQECnt = 48; _, e := d.CreateQP(c); return e }, mlx5.StatusBadParam},
		{"qp buffer outside memory", func() error { c := good; c.BufAddr = 0x40; _, e := d.CreateQP(c); return e }, mlx5.StatusBadParam},
		{"modify unknown qp", func() error { return d.ModifyQP(mlx5.ModifyQPCmd{QPN: 0xabcdef}) }, mlx5.StatusBadResource},
		{"destroy unknown qp", func() error { return d.DestroyQP(0xabcdef) }, mlx5.StatusBadResource},
		{"destroy unknown cq", func() error { return d.DestroyCQ(99) }, mlx5.StatusBadResource},
		{"destroy cq in use", func() error { _, _ = d.CreateQP(good); return d.DestroyCQ(cq.CQN) }, mlx5.StatusResourceBusy},
		{"dealloc pd in use", func() error { return d.DeallocPD(pd.PDN) }, mlx5.StatusResourceBusy},
		{"dealloc unknown pd", func() error { return d.DeallocPD(1234) }, mlx5.StatusBadResource},
		{"dereg unknown key", func() error { return d.DeregMR(0x777700) }, mlx5.StatusBadResource},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			require.Error(t, err)
			require.Equal(t, c.want, status(t, err))
			require.True(t, errors.Is(err, c.want))
		})
	}
}

func TestQPStateMachine(t *testing.T) {
	d, mem := newDev(t)
	pd, _ := d.AllocPD()
	buf, _ := mem.Alloc(64*64, 4096)
	dbr, _ := mem.Alloc(8, 8)
	cq, _ := d.CreateCQ(mlx5.CreateCQCmd{Entries: 64, CQESize: 64, BufAddr: buf, DBAddr: dbr})
	qbuf, _ := mem.Alloc(8192, 4096)
	qdbr, _ := mem.Alloc(8, 8)
	r, err := d.CreateQP(mlx5.CreateQPCmd{Type: mlx5.QPTypeRC, PDN: pd.PDN, SendCQN: cq.CQN, RecvCQN: cq.CQN, BufAddr: qbuf, DBAddr: qdbr, SQWQECnt: 64, RQWQECnt: 64, RQWQEShift: 4})
	require.NoError(t, err)
	qpn := r.QPN
	require.NotZero(t, r.BFBufSize)
	state := func() mlx5.QPState { a, err := d.QueryQP(qpn); require.NoError(t, err); return a.State }

	toInit := mlx5.ModifyQPCmd{QPN: qpn, Mask: mlx5.AttrState | mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrAccessFlags, State: mlx5.QPStateINIT, Port: 1}
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 2}
	toRTR := mlx5.ModifyQPCmd{QPN: qpn, Mask: mlx5.AttrState | mlx5.AttrAV | mlx5.AttrPathMTU | mlx5.AttrDestQPN | mlx5.AttrRQPSN | mlx5.AttrMaxDestRdAtomic | mlx5.AttrMinRNRTimer,
		State: mlx5.QPStateRTR, PathMTU: mlx5.MTU1024, DestQPN: 0x200, AV: mlx5.AV{DGID: gid}}
	toRTS := mlx5.ModifyQPCmd{QPN: qpn, Mask: mlx5.AttrState | mlx5.AttrTimeout | mlx5.AttrRetryCnt | mlx5.AttrRNRRetry | mlx5.AttrSQPSN | mlx5.AttrMaxQPRdAtomic, State: mlx5.QPStateRTS}

	// Skipping a state, or missing a required attribute, is refused.
	require.Equal(t, mlx5.StatusBadQPState, status(t, d.ModifyQP(toRTR)))
	bad := toInit
	bad.Mask &^= mlx5.AttrPort
	require.Equal(t, mlx5.StatusBadParam, status(t, d.ModifyQP(bad)))
	bad = toInit
	bad.Mask |= mlx5.AttrSQPSN
	require.Equal(t, mlx5.StatusBadParam, status(t, d.ModifyQP(bad)), "attribute not allowed in RST→INIT")
	bad = toInit
	bad.Port = 2
	require.Equal(t, mlx5.StatusBadParam, status(t, d.ModifyQP(bad)))
	require.Equal(t, mlx5.QPStateRST, state(), "a refused command changes nothing")

	require.NoError(t, d.ModifyQP(toInit))
	require.Equal(t, mlx5.QPStateINIT, state())
	bad = toRTR
	bad.PathMTU = 7
	require.Equal(t, mlx5.StatusBadParam, status(t, d.ModifyQP(bad)))
	bad = toRTR
	bad.AV.DGID = [16]byte{0xfe, 0x80}
	require.Equal(t, mlx5.StatusBadParam, status(t, d.ModifyQP(bad)), "not an IPv4-mapped GID")
	require.NoError(t, d.ModifyQP(toRTR))
	bad = toRTS
	bad.RetryCnt = 9
	require.Equal(t, mlx5.StatusBadParam, status(t, d.ModifyQP(bad)))
	require.NoError(t, d.ModifyQP(toRTS))
	require.Equal(t, mlx5.QPStateRTS, state())
	require.Equal(t, mlx5.StatusBadQPState, status(t, d.ModifyQP(toInit)), "RTS→INIT does not exist")
	cur := mlx5.ModifyQPCmd{QPN: qpn, Mask: mlx5.AttrState | mlx5.AttrCurState, State: mlx5.QPStateERR, CurState: mlx5.QPStateINIT}
	require.Equal(t, mlx5.StatusBadQPState, status(t, d.ModifyQP(cur)), "cur_state mismatch")
	require.NoError(t, d.ModifyQP(mlx5.ModifyQPCmd{QPN: qpn, Mask: mlx5.AttrState, State: mlx5.QPStateERR}))
	require.Equal(t, mlx5.QPStateERR, state())
	require.NoError(t, d.ModifyQP(mlx5.ModifyQPCmd{QPN: qpn, Mask: mlx5.AttrState, State: mlx5.QPStateRST}))
	require.Equal(t, mlx5.QPStateRST, state())
	require.NoError(t, d.DestroyQP(qpn))
	require.NoError(t, d.DestroyCQ(cq.CQN))
	require.NoError(t, d.DeallocPD(pd.PDN))
}

// TestQPNSkipsLiveQPs: QP numbers are 24 bits and wrap; the next number
// may be one a live QP still holds (a client that keeps one QP and
// creates and destroys 2^24 others reaches it). CreateQP skips it, as the
// firmware's QPN allocator does, instead of handing the number out twice
// and overwriting the live QP in the device's table. It skips 0xffffff
// too, the multicast QPN (IBA 9.8.1): before, the QP after 0xfffffe got
// it, a number a packet uses to address a multicast group, not a QP.
func TestQPNSkipsLiveQPs(t *testing.T) {
	for _, tc := range []struct {
		name string
		next uint32 // nextQPN before the second QP
		last uint32 // nonzero: a QP made first gets this number
		want uint32 // the second QP's number
	}{
		{"next is a live QP", 2, 0, 3},
		{"wrap onto a live QP", 0xfffffe, 0xfffffe, 3}, // 0xfffffe for one, 0xffffff skipped, then 2 is taken
		{"the multicast QPN is no QP's", 0xffffff, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, mem := newDev(t)
			cmd := rcQPCmd(t, d, mem, 64, true)
			d.SetNextQPN(2)
			live, err := d.CreateQP(cmd)
			require.NoError(t, err)
			require.Equal(t, uint32(2), live.QPN)
			d.SetNextQPN(tc.next)
			if tc.last != 0 {
				last, err := d.CreateQP(cmd)
				require.NoError(t, err)
				require.Equal(t, tc.last, last.QPN, "the last number")
			}
			got, err := d.CreateQP(cmd)
			require.NoError(t, err)
			require.Equal(t, tc.want, got.QPN)
			require.NoError(t, d.ModifyQP(mlx5.ModifyQPCmd{QPN: got.QPN, Mask: mlx5.AttrState, State: mlx5.QPStateERR}))
			a, err := d.QueryQP(live.QPN)
			require.NoError(t, err)
			require.Equal(t, mlx5.QPStateRST, a.State, "the live QP is untouched")
			require.NoError(t, d.DestroyQP(got.QPN))
			require.NoError(t, d.DestroyQP(live.QPN), "the live QP is still in the table")
		})
	}
}

// TestCQNWrapsAt24Bits: CQ numbers are 24 bits (the CQ arm doorbell and
// the EQE carry 24) and wrap past 0, skipping numbers live CQs hold.
// Before the fix CreateCQ counted on in 32 bits: the CQ after 0xffffff
// got 0x1000000, whose arm doorbell the device read as CQ 0 (unknown) or,
// for 0x1000001, armed the live CQ 1, so its events never came.
func TestCQNWrapsAt24Bits(t *testing.T) {
	for _, tc := range []struct {
		name string
		next uint32 // nextCQN before the last CQ
		want uint32 // the last CQ's number
	}{
		{"next is a live CQ", 1, 2},
		{"last number", 0xffffff, 0xffffff},
		{"wrap past 0 onto a live CQ", 0x1000000, 2},
		{"wrap onto a free number", 0x1000005, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, mem := newDev(t)
			cmd := func() mlx5.CreateCQCmd {
				buf, err := mem.Alloc(64*64, 4096)
				require.NoError(t, err)
				dbr, err := mem.Alloc(8, 8)
				require.NoError(t, err)
				return mlx5.CreateCQCmd{Entries: 64, CQESize: 64, BufAddr: buf, DBAddr: dbr}
			}
			live, err := d.CreateCQ(cmd())
			require.NoError(t, err)
			require.Equal(t, uint32(1), live.CQN)
			d.SetNextCQN(tc.next)
			got, err := d.CreateCQ(cmd())
			require.NoError(t, err)
			require.Equal(t, tc.want, got.CQN)
			// Its arm doorbell arms it, not another CQ or none.
			var db [8]byte
			binary.BigEndian.PutUint32(db[0:], mlx5.CQArm{CQN: got.CQN}.ArmWord())
			binary.BigEndian.PutUint32(db[4:], got.CQN)
			d.CQArm(0, 0, db)
			require.Zero(t, d.Counters().Value(device.CtrCQArmUnknownCQ))
			require.Equal(t, uint64(1), d.Counters().Value(device.CtrCQArms))
			require.NoError(t, d.DestroyCQ(got.CQN))
			require.NoError(t, d.DestroyCQ(live.CQN), "the live CQ is still in the table")
		})
	}
}

// TestMRKeyIndexWraps: an mkey is a 24-bit index and a variant byte. The
// index wraps past 0 after 2^24 registrations, a key a live MR holds is
// skipped, and a wrapped index comes back with another variant than its
// previous holder's key. Before the fix the index overflowed out of the
// key: registration 2^24+1 got MR 1's key while MR 1 was registered, and
// RegMR failed with BAD_PARAM (key exists).
func TestMRKeyIndexWraps(t *testing.T) {
	d, mem := newDev(t)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	buf, err := mem.Alloc(4096, 4096)
	require.NoError(t, err)
	reg := func(t *testing.T) uint32 {
		t.Helper()
		r, err := d.RegMR(mlx5.RegMRCmd{PDN: pd.PDN, Addr: buf, Length: 4096, Access: mlx5.AccessLocalWrite})
		require.NoError(t, err)
		require.Equal(t, r.LKey, r.RKey)
		return r.LKey
	}
	live := reg(t) // index 1
	gone := reg(t) // index 2, deregistered before the wrap
	require.NoError(t, d.DeregMR(gone))
	for _, tc := range []struct {
		name  string
		next  uint32 // the registration count before
		index uint32 // the key's index
		not   uint32 // a key it must not be
	}{
		{"last index", 0xffffff, 0xffffff, 0},
		{"wrap past index 0", 1 << 24, 1, live},
		{"wrap onto a live MR's index", 1<<24 + 1, 1, live},
		{"wrap onto a freed MR's index", 1<<24 + 2, 2, gone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.SetNextMR(tc.next)
			key := reg(t)
			require.Equal(t, tc.index, key>>8)
			require.NotEqual(t, tc.not, key)
			require.NoError(t, d.DeregMR(key))
		})
	}
	require.NoError(t, d.DeregMR(live), "the live MR keeps its key")
}

// TestSQWQEBBBudget: the send queues of one device hold at most 2^25
// WQEBBs in all. The model keeps some 300 bytes of heap per WQEBB it
// fetches from (a staging copy of the ring, in-flight ranges, WQE slots),
// and QPs may share one buffer, so a client creating QPs of the largest
// SQ (2^19 WQEBBs) could make the daemon allocate 150 MiB a QP, as many
// times as max_qp. The 65th is refused with NO_RESOURCES; a destroyed
// QP gives its share back.
func TestSQWQEBBBudget(t *testing.T) {
	const big = 1 << 19 // max_qp_wr 2^15 x 16 WQEBBs
	mem, err := shm.New("devtest", big*64+1<<20, 0x10000000)
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	d := device.New(sim.NewEngine(), device.DefaultSpec(), device.Identity{MAC: [6]byte{2, 0, 0, 0, 0, 1}}, mem, nil)
	cmd := rcQPCmd(t, d, mem, big, false)
	// The same buffer for all: the device does not mind.
	var a mlx5.CreateQPResp
	for i := 0; i < 1<<25/big; i++ {
		a, err = d.CreateQP(cmd)
		require.NoError(t, err, "QP %d", i)
	}
	_, err = d.CreateQP(cmd)
	require.Equal(t, mlx5.StatusNoResources, status(t, err))
	small := cmd
	small.SQWQECnt = 64
	_, err = d.CreateQP(small)
	require.Equal(t, mlx5.StatusNoResources, status(t, err), "the budget is full")
	require.NoError(t, d.DestroyQP(a.QPN))
	_, err = d.CreateQP(cmd)
	require.NoError(t, err, "the destroyed QP's share is free again")
}

// rcQPCmd allocates a PD, a 64-entry CQ and a send queue of sqBBs WQEBBs
// in mem, and returns the CREATE_QP command of an RC QP on them (a 64-WQE
// RQ of 16-byte WQEs when rq is set).
func rcQPCmd(t *testing.T, d *device.Device, mem *shm.Region, sqBBs int, rq bool) mlx5.CreateQPCmd {
	t.Helper()
	pd, err := d.AllocPD()
	require.NoError(t, err)
	buf, _ := mem.Alloc(64*64, 4096)
	dbr, _ := mem.Alloc(8, 8)
	cq, err := d.CreateCQ(mlx5.CreateCQCmd{Entries: 64, CQESize: 64, BufAddr: buf, DBAddr: dbr})
	require.NoError(t, err)
	size := sqBBs * 64
	if rq {
		size += 64 * 16
	}
	qbuf, err := mem.Alloc(max(size, 8192), 4096)
	require.NoError(t, err)
	qdbr, _ := mem.Alloc(8, 8)
	c := mlx5.CreateQPCmd{Type: mlx5.QPTypeRC, PDN: pd.PDN, SendCQN: cq.CQN, RecvCQN: cq.CQN, BufAddr: qbuf, DBAddr: qdbr, SQWQECnt: sqBBs}
	if rq {
		c.RQWQECnt, c.RQWQEShift = 64, 4
	}
	return c
}

// TestModifyQPRefusesWhatTheKernelRefuses: MODIFY_QP to RESET or ERR
// takes the state alone (ib_modify_qp_is_ok: no attribute for either
// target, CUR_STATE included; the provider refuses the same locally), and
// max_dest_rd_atomic above the responder resources the device reports is
// EINVAL (mlx5_ib_modify_qp against log_max_ra_res_qp). The device took
// all of them from a raw uverbs client: an ERR move carrying a 30-bit SQ
// PSN, and an RTR QP keeping 256 READ responder resources it was never
// offered. A refused command leaves the QP where it was.
func TestModifyQPRefusesWhatTheKernelRefuses(t *testing.T) {
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 2}
	toInit := mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrAccessFlags, State: mlx5.QPStateINIT, Port: 1}
	toRTR := mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrAV | mlx5.AttrPathMTU | mlx5.AttrDestQPN | mlx5.AttrRQPSN | mlx5.AttrMaxDestRdAtomic | mlx5.AttrMinRNRTimer,
		State: mlx5.QPStateRTR, PathMTU: mlx5.MTU1024, DestQPN: 0x200, AV: mlx5.AV{DGID: gid}, MaxDestRdAtomic: 1}
	toRTS := mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrTimeout | mlx5.AttrRetryCnt | mlx5.AttrRNRRetry | mlx5.AttrSQPSN | mlx5.AttrMaxQPRdAtomic, State: mlx5.QPStateRTS}
	with := func(c mlx5.ModifyQPCmd, f func(*mlx5.ModifyQPCmd)) mlx5.ModifyQPCmd { f(&c); return c }
	cases := []struct {
		name string
		path []mlx5.ModifyQPCmd // taken first, each must succeed
		bad  mlx5.ModifyQPCmd
		want mlx5.CmdStatus
	}{
		{"RESET to ERR with a QKey", nil, mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrQKey, State: mlx5.QPStateERR, QKey: 7}, mlx5.StatusBadParam},
		{"INIT to ERR with an SQ PSN", []mlx5.ModifyQPCmd{toInit},
			mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrSQPSN, State: mlx5.QPStateERR, SQPSN: 1 << 30}, mlx5.StatusBadParam},
		{"RTS to ERR with cur_state", []mlx5.ModifyQPCmd{toInit, toRTR, toRTS},
			mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrCurState, State: mlx5.QPStateERR, CurState: mlx5.QPStateRTS}, mlx5.StatusBadParam},
		{"RESET to INIT with cur_state", nil,
			with(toInit, func(c *mlx5.ModifyQPCmd) { c.Mask |= mlx5.AttrCurState; c.CurState = mlx5.QPStateRST }), mlx5.StatusBadParam},
		{"INIT to RTR with cur_state", []mlx5.ModifyQPCmd{toInit},
			with(toRTR, func(c *mlx5.ModifyQPCmd) { c.Mask |= mlx5.AttrCurState; c.CurState = mlx5.QPStateINIT }), mlx5.StatusBadParam},
		{"INIT to RESET with a port", []mlx5.ModifyQPCmd{toInit},
			mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrPort, State: mlx5.QPStateRST, Port: 7}, mlx5.StatusBadParam},
		{"ERR to ERR with a timeout", []mlx5.ModifyQPCmd{toInit, {Mask: mlx5.AttrState, State: mlx5.QPStateERR}},
			mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrTimeout, State: mlx5.QPStateERR, Timeout: 99}, mlx5.StatusBadParam},
		{"RTR with max_dest_rd_atomic 255", []mlx5.ModifyQPCmd{toInit},
			with(toRTR, func(c *mlx5.ModifyQPCmd) { c.MaxDestRdAtomic = 255 }), mlx5.StatusBadParam},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, mem := newDev(t)
			r, err := d.CreateQP(rcQPCmd(t, d, mem, 64, true))
			require.NoError(t, err)
			for _, c := range tc.path {
				c.QPN = r.QPN
				require.NoError(t, d.ModifyQP(c))
			}
			before, err := d.QueryQP(r.QPN)
			require.NoError(t, err)
			tc.bad.QPN = r.QPN
			require.Equal(t, tc.want, status(t, d.ModifyQP(tc.bad)))
			after, err := d.QueryQP(r.QPN)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused MODIFY_QP changed the QP")
		})
	}
}

// TestModifyQPIgnoresUnmaskedValues: MODIFY_QP reads only the attributes
// its mask selects, as the kernel does (ib_modify_qp ignores the fields of
// attributes not in attr_mask, which in C are whatever the caller's stack
// held). Before the fix the PSN check looked at both PSNs whenever either
// was in the mask: RTR→RTS with SQ_PSN was refused (bad parameter, "PSN
// over 24 bits") for a stale RQ PSN the command did not set, and INIT→RTR
// with RQ_PSN for a stale SQ PSN.
func TestModifyQPIgnoresUnmaskedValues(t *testing.T) {
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 2}
	toInit := mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrAccessFlags, State: mlx5.QPStateINIT, Port: 1}
	toRTR := mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrAV | mlx5.AttrPathMTU | mlx5.AttrDestQPN | mlx5.AttrRQPSN | mlx5.AttrMaxDestRdAtomic | mlx5.AttrMinRNRTimer,
		State: mlx5.QPStateRTR, PathMTU: mlx5.MTU1024, DestQPN: 0x200, AV: mlx5.AV{DGID: gid}, MaxDestRdAtomic: 1, RQPSN: 0x123}
	toRTS := mlx5.ModifyQPCmd{Mask: mlx5.AttrState | mlx5.AttrTimeout | mlx5.AttrRetryCnt | mlx5.AttrRNRRetry | mlx5.AttrSQPSN | mlx5.AttrMaxQPRdAtomic,
		State: mlx5.QPStateRTS, SQPSN: 0x456}
	with := func(c mlx5.ModifyQPCmd, f func(*mlx5.ModifyQPCmd)) mlx5.ModifyQPCmd { f(&c); return c }
	cases := []struct {
		name string
		path []mlx5.ModifyQPCmd // taken first
		cmd  mlx5.ModifyQPCmd   // must succeed
		want mlx5.QPAttr        // the fields checked: RQPSN, SQPSN, Timeout
	}{
		{"RTR to RTS with a stale RQ PSN", []mlx5.ModifyQPCmd{toInit, toRTR},
			with(toRTS, func(c *mlx5.ModifyQPCmd) { c.RQPSN = 0x1000000 }), mlx5.QPAttr{RQPSN: 0x123, SQPSN: 0x456}},
		{"INIT to RTR with a stale SQ PSN", []mlx5.ModifyQPCmd{toInit},
			with(toRTR, func(c *mlx5.ModifyQPCmd) { c.SQPSN = 0xffffffff }), mlx5.QPAttr{RQPSN: 0x123}},
		{"RTR to RTS with a stale min RNR timer", []mlx5.ModifyQPCmd{toInit, toRTR},
			with(toRTS, func(c *mlx5.ModifyQPCmd) { c.MinRNRTimer = 99; c.Timeout = 14 }), mlx5.QPAttr{RQPSN: 0x123, SQPSN: 0x456, Timeout: 14}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, mem := newDev(t)
			r, err := d.CreateQP(rcQPCmd(t, d, mem, 64, true))
			require.NoError(t, err)
			for _, c := range tc.path {
				c.QPN = r.QPN
				require.NoError(t, d.ModifyQP(c))
			}
			tc.cmd.QPN = r.QPN
			require.NoError(t, d.ModifyQP(tc.cmd))
			a, err := d.QueryQP(r.QPN)
			require.NoError(t, err)
			require.Equal(t, tc.cmd.State, a.State)
			require.Equal(t, tc.want.RQPSN, a.RQPSN)
			require.Equal(t, tc.want.SQPSN, a.SQPSN)
			require.Equal(t, tc.want.Timeout, a.Timeout)
		})
	}
}

// TestSRQNWrapsAt24Bits: SRQ numbers are 24 bits (the EQE of an SRQ event
// carries 24, and 0 is CREATE_QP's "no SRQ") and wrap past 0, skipping
// numbers live SRQs hold, as CQ and QP numbers do. Before the fix
// CreateSRQ counted on in 32 bits: the SRQ after 0xffffff got 0x1000000,
// whose limit event named no SRQ (0), and 0x1000001's named the live SRQ 1.
func TestSRQNWrapsAt24Bits(t *testing.T) {
	for _, tc := range []struct {
		name string
		next uint32 // nextSRQN before the last SRQ
		want uint32 // the last SRQ's number
	}{
		{"next is a live SRQ", 1, 2},
		{"last number", 0xffffff, 0xffffff},
		{"wrap past 0 onto a live SRQ", 0x1000000, 2},
		{"wrap onto a free number", 0x1000005, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, mem := newDev(t)
			pd, err := d.AllocPD()
			require.NoError(t, err)
			cmd := func() mlx5.CreateSRQCmd {
				buf, err := mem.Alloc(16*32, 4096)
				require.NoError(t, err)
				dbr, err := mem.Alloc(8, 8)
				require.NoError(t, err)
				return mlx5.CreateSRQCmd{PDN: pd.PDN, BufAddr: buf, DBAddr: dbr, WQECnt: 16, WQEShift: 5}
			}
			live, err := d.CreateSRQ(cmd())
			require.NoError(t, err)
			require.Equal(t, uint32(1), live.SRQN)
			d.SetNextSRQN(tc.next)
			got, err := d.CreateSRQ(cmd())
			require.NoError(t, err)
			require.Equal(t, tc.want, got.SRQN)
			require.LessOrEqual(t, got.SRQN, uint32(0xffffff), "an SRQ number fits the EQE's 24 bits")
			_, err = d.QuerySRQ(got.SRQN)
			require.NoError(t, err)
			require.NoError(t, d.DestroySRQ(got.SRQN))
			require.NoError(t, d.DestroySRQ(live.SRQN), "the live SRQ is still in the table")
		})
	}
}

// TestRegMRAtMaxMRSize: REG_MR takes a region of the max_mr_size
// QUERY_DEVICE reports and refuses one byte more with BAD_PARAM. Before
// the fix the device took regions up to twice max_mr_size: a reported cap
// it did not enforce (a raw uverbs client registered 3 GiB under a
// max_mr_size of 2 GiB).
func TestRegMRAtMaxMRSize(t *testing.T) {
	mem, err := shm.New("devtest", 1<<20, 0x10000000)
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	spec := device.DefaultSpec()
	spec.Caps.MaxMsgSize = 64 << 10
	d := device.New(sim.NewEngine(), spec, device.Identity{MAC: [6]byte{2, 0, 0, 0, 0, 1}}, mem, nil)
	a, err := d.QueryDevice()
	require.NoError(t, err)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		length uint64
		ok     bool
	}{
		{"max_mr_size", a.MaxMRSize, true},
		{"one byte more", a.MaxMRSize + 1, false},
		{"twice max_mr_size", 2 * a.MaxMRSize, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := d.RegMR(mlx5.RegMRCmd{PDN: pd.PDN, Addr: mem.Base(), Length: tc.length, Access: mlx5.AccessLocalWrite})
			if tc.ok {
				require.NoError(t, err)
				require.NoError(t, d.DeregMR(r.LKey))
				return
			}
			require.Equal(t, mlx5.StatusBadParam, status(t, err))
		})
	}
}

// TestPDNWrapsAt24Bits: PD numbers are 24 bits (the QP and mkey contexts'
// pd field) and wrap past 0, skipping live PDs, as CQ, SRQ and QP numbers
// do. AllocPD counted on in 32 bits: a PD past 0xffffff got a number no
// ConnectX has, and after 2^32 PDs the numbers of live PDs again.
func TestPDNWrapsAt24Bits(t *testing.T) {
	for _, tc := range []struct {
		name string
		next uint32 // nextPD before the last PD
		want uint32
	}{
		{"next is a live PD", 1, 2},
		{"last number", 0xffffff, 0xffffff},
		{"wrap past 0 onto a live PD", 0x1000000, 2},
		{"wrap onto a free number", 0x1000005, 5},
		{"past 24 bits onto a live PD", 0x1000001, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDev(t)
			live, err := d.AllocPD()
			require.NoError(t, err)
			require.Equal(t, uint32(1), live.PDN)
			d.SetNextPDN(tc.next)
			got, err := d.AllocPD()
			require.NoError(t, err)
			require.Equal(t, tc.want, got.PDN)
			require.NoError(t, d.DeallocPD(got.PDN))
			require.NoError(t, d.DeallocPD(live.PDN), "the live PD is still its own")
		})
	}
}

// TestCompChannelNumbersWrap: channel numbers are 32 bits, 0 naming the
// async queue. Past 2^32 creations they wrap to 1, not 0, and skip the
// ones still open: an event for one channel never reaches another.
func TestCompChannelNumbersWrap(t *testing.T) {
	d, _ := newDev(t)
	first, err := d.CreateCompChannel()
	require.NoError(t, err)
	require.Equal(t, uint32(1), first)
	d.SetNextCompChannel(^uint32(0) - 1)
	last, err := d.CreateCompChannel()
	require.NoError(t, err)
	require.Equal(t, ^uint32(0), last)
	next, err := d.CreateCompChannel()
	require.NoError(t, err)
	require.Equal(t, uint32(2), next, "wraps past 0 (the async queue) and 1 (still open)")
	require.NoError(t, d.DestroyCompChannel(first))
	d.SetNextCompChannel(0)
	again, err := d.CreateCompChannel()
	require.NoError(t, err)
	require.Equal(t, uint32(1), again, "a closed channel's number is free again")
}
