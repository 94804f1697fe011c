package provider

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// scripted is a Transport that records requests and answers with a
// function of them.
type scripted struct {
	reqs   [][]byte
	answer func(req, resp []byte) (int, error)
}

func (s *scripted) Do(req, resp []byte) (int, error) {
	s.reqs = append(s.reqs, append([]byte(nil), req...))
	return s.answer(req, resp)
}

func TestUverbsControlErrnoSentinels(t *testing.T) {
	cases := []struct {
		errno syscall.Errno
		want  error
	}{
		{syscall.EINVAL, ErrInvalidArg}, {syscall.ENOSPC, ErrInvalidArg}, {syscall.ENOMEM, ErrNoMemory}, {syscall.EAGAIN, ErrNoMemory},
		{syscall.EBUSY, ErrBusy}, {syscall.ENOENT, ErrClosed}, {syscall.EBADF, ErrClosed}, {syscall.EIO, ErrClosed},
		{syscall.EFAULT, ErrOutOfRange}, {syscall.EOPNOTSUPP, ErrNotSupported}, {syscall.EPROTONOSUPPORT, ErrNotSupported},
		{syscall.EPERM, ErrNotSupported}, {syscall.EXDEV, ErrInvalidArg},
	}
	for _, c := range cases {
		tr := &scripted{answer: func(req, resp []byte) (int, error) {
			return 0, &uverbs.Error{Cmd: "ALLOC_PD", Errno: c.errno, Reason: "the device says no"}
		}}
		_, err := NewUverbsControl(tr).AllocPD()
		require.ErrorIs(t, err, c.want, "%v", c.errno)
		require.ErrorIs(t, err, c.errno)
		var ue *uverbs.Error
		require.ErrorAs(t, err, &ue)
		require.Equal(t, "ALLOC_PD", ue.Cmd)
		require.Contains(t, err.Error(), "the device says no")
	}
	// MODIFY_QP's EINVAL is an attribute the device refused.
	require.ErrorIs(t, ErrnoSentinel("MODIFY_QP", syscall.EINVAL), ErrInvalidAttr)
	// So is its ENODATA: the address vector names an empty GID slot.
	require.ErrorIs(t, ErrnoSentinel("MODIFY_QP", syscall.ENODATA), ErrInvalidAttr)
	// A bare errno from a transport, and a transport that broke.
	tr := &scripted{answer: func(req, resp []byte) (int, error) { return 0, syscall.EBUSY }}
	_, err := NewUverbsControl(tr).AllocPD()
	require.ErrorIs(t, err, ErrBusy)
	tr = &scripted{answer: func(req, resp []byte) (int, error) { return 0, errors.New("broken pipe") }}
	_, err = NewUverbsControl(tr).AllocPD()
	require.ErrorIs(t, err, ErrClosed)
	require.Contains(t, err.Error(), "ALLOC_PD")
	require.Contains(t, err.Error(), "broken pipe")
}

func TestUverbsControlLocalRefusals(t *testing.T) {
	tr := &scripted{answer: func(req, resp []byte) (int, error) { t.Fatal("nothing may be sent"); return 0, nil }}
	u := NewUverbsControl(tr)
	require.ErrorIs(t, u.DeallocPD(7), ErrClosed)
	require.ErrorIs(t, u.DeallocPD(7), syscall.ENOENT)
	require.ErrorIs(t, u.DestroyQP(0x100), ErrClosed)
	_, err := u.QueryDevice()
	require.ErrorIs(t, err, ErrInvalidArg, "no context yet")
	u.qps[0x100] = 3
	err = u.ModifyQP(mlx5.ModifyQPCmd{QPN: 0x100, Mask: mlx5.AttrAV, AV: mlx5.AV{UDPSPort: 4791}})
	require.ErrorIs(t, err, ErrNotSupported)
	require.Empty(t, tr.reqs)
}

// TestUverbsControlBytes: what CREATE_CQ and CREATE_QP put on the wire.
func TestUverbsControlBytes(t *testing.T) {
	tr := &scripted{answer: func(req, resp []byte) (int, error) {
		m, err := uverbs.ParseWrite(req)
		require.NoError(t, err)
		switch m.Cmd {
		case uverbs.CmdCreateCQ:
			r := uverbs.CreateCQResp{CQHandle: 11, CQE: 63}
			d := uverbs.MLX5CreateCQResp{CQN: 0x42}
			_, _ = r.Encode(resp)
			_, _ = d.Encode(resp[8:])
			return 16, nil
		case uverbs.CmdCreateQP:
			r := uverbs.CreateQPResp{QPHandle: 12, QPN: 0x107, MaxInlineData: 48}
			d := uverbs.MLX5CreateQPResp{BFRegIndex: 3}
			_, _ = r.Encode(resp)
			_, _ = d.Encode(resp[uverbs.CreateQPRespSize:])
			return uverbs.CreateQPRespSize + uverbs.MLX5CreateQPRespSize, nil
		}
		return 0, &uverbs.Error{Cmd: m.Cmd.String(), Errno: syscall.EOPNOTSUPP}
	}}
	u := NewUverbsControl(tr)
	u.uctx = mlx5.ContextResp{UARIndex: 8, BFRegSize: 512}
	u.pds[1] = 5
	r, err := u.CreateCQ(mlx5.CreateCQCmd{Entries: 64, CQESize: 64, BufAddr: 0x1000, DBAddr: 0x2000, UARIndex: 8})
	require.NoError(t, err)
	require.Equal(t, uint32(0x42), r.CQN)
	m, err := uverbs.ParseWrite(tr.reqs[0])
	require.NoError(t, err)
	var c uverbs.CreateCQ
	var d uverbs.MLX5CreateCQ
	require.NoError(t, c.Decode(m.Core))
	require.NoError(t, d.Decode(m.Driver))
	require.Equal(t, uint32(63), c.CQE, "cqe is the ring less one")
	require.Equal(t, uverbs.NoCompChannel, c.CompChannel)
	require.Equal(t, uverbs.MLX5CreateCQ{BufAddr: 0x1000, DBAddr: 0x2000, CQESize: 64, Flags: uverbs.MLX5CreateCQFlagUARPageIndex, UARPageIndex: 8}, d)

	q, err := u.CreateQP(mlx5.CreateQPCmd{Type: mlx5.QPTypeUD, PDN: 1, SendCQN: 0x42, RecvCQN: 0x42, BufAddr: 0x4000, DBAddr: 0x5000,
		SQWQECnt: 64, RQWQECnt: 16, RQWQEShift: 5, MaxInline: 60, BFRegIndex: -1})
	require.NoError(t, err)
	require.Equal(t, mlx5.CreateQPResp{QPN: 0x107, BFRegIndex: 3, BFRegOffset: 9*4096 + 0x800 + 512, BFBufSize: 256,
		MaxInline: 48, HasMaxInline: true}, q, "the max_inline_data answered (48 of the 60 asked) comes back")
	m, err = uverbs.ParseWrite(tr.reqs[1])
	require.NoError(t, err)
	var qc uverbs.CreateQP
	var qd uverbs.MLX5CreateQP
	require.NoError(t, qc.Decode(m.Core))
	require.NoError(t, qd.Decode(m.Driver))
	require.Equal(t, uverbs.QPTypeUD, qc.QPType)
	require.Equal(t, [3]uint32{5, 11, 11}, [3]uint32{qc.PDHandle, qc.SendCQHandle, qc.RecvCQHandle})
	require.Equal(t, uint32(60), qc.MaxInlineData)
	require.Equal(t, uverbs.MLX5CreateQP{BufAddr: 0x4000, DBAddr: 0x5000, SQWQECount: 64, RQWQECount: 16, RQWQEShift: 5}, qd)
}

// TestUverbsControlDynamicUAR: on a kernel mlx5 context (dynamic UARs, no
// static bfregs) a QP names the context's UAR by page index and rings
// through that page's first bfreg, whatever bfreg_index the kernel
// answers (uverbs.md §4.2, §4.4).
func TestUverbsControlDynamicUAR(t *testing.T) {
	cases := []struct {
		name      string
		dyn       bool
		flags     uint32
		bfreg     uint32
		bfregOffs uint64
	}{
		{"emulated: the device's bfreg", false, 0, 0, 9*4096 + 0x800 + 512},
		{"kernel: UAR_PAGE_INDEX", true, uverbs.MLX5QPFlagUARPageIndex, 8, 8*4096 + 0x800},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := &scripted{answer: func(req, resp []byte) (int, error) {
				r := uverbs.CreateQPResp{QPHandle: 12, QPN: 0x107}
				d := uverbs.MLX5CreateQPResp{BFRegIndex: 3}
				_, _ = r.Encode(resp)
				_, _ = d.Encode(resp[uverbs.CreateQPRespSize:])
				return uverbs.CreateQPRespSize + uverbs.MLX5CreateQPRespSize, nil
			}}
			u := NewUverbsControl(tr)
			u.uctx = mlx5.ContextResp{UARIndex: 8, BFRegSize: 512}
			u.dynUAR = c.dyn
			u.pds[1], u.cqs[0x42] = 5, 11
			q, err := u.CreateQP(mlx5.CreateQPCmd{Type: mlx5.QPTypeRC, PDN: 1, SendCQN: 0x42, RecvCQN: 0x42, BufAddr: 0x4000, DBAddr: 0x5000,
				SQWQECnt: 64, RQWQECnt: 16, RQWQEShift: 5, BFRegIndex: -1})
			require.NoError(t, err)
			require.Equal(t, c.bfregOffs, q.BFRegOffset)
			m, err := uverbs.ParseWrite(tr.reqs[0])
			require.NoError(t, err)
			var qd uverbs.MLX5CreateQP
			require.NoError(t, qd.Decode(m.Driver))
			require.Equal(t, c.flags, qd.Flags)
			require.Equal(t, c.bfreg, qd.BFRegIndex)
		})
	}
}

// TestUverbsControlDeviceGone: a transport that lost its device (a daemon
// gone) fails the command with ErrDeviceGone, whatever errno its socket
// met: an EPIPE inside the error made the command look refused with
// EPIPE (ErrInvalidArg), and the caller's errors.Is(err, ErrDeviceGone)
// missed the daemon's death.
func TestUverbsControlDeviceGone(t *testing.T) {
	for _, c := range []struct {
		name  string
		cause error
	}{
		{"EPIPE", syscall.EPIPE},
		{"ECONNRESET", syscall.ECONNRESET},
		{"no errno", errors.New("i/o timeout")},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := &scripted{answer: func(req, resp []byte) (int, error) {
				return 0, fmt.Errorf("%w: softnic daemon (softnic0): UVERBS: %w", ErrDeviceGone, c.cause)
			}}
			_, err := NewUverbsControl(tr).AllocPD()
			require.ErrorIs(t, err, ErrDeviceGone)
			require.NotErrorIs(t, err, ErrInvalidArg, "no refusal of the command")
			require.Contains(t, err.Error(), "ALLOC_PD")
		})
	}
}
