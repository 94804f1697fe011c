package uverbsdev

import (
	"encoding/binary"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// TestRoundTrip: every command the server serves, its response decoded
// and checked against the device's own answer.
func TestRoundTrip(t *testing.T) {
	r := newRig(t, 4<<20)
	s := r.s
	uc, page := r.open(s)
	dctx, _ := r.dev.GetContext()
	dattr, _ := r.dev.QueryDevice()
	require.Equal(t, uint32(dctx.BFRegSize), uc.BFRegSize)
	require.Zero(t, uc.TotBFRegs, "dynamic UARs: no legacy bfregs (mlx5_ib set_ucontext_resp)")
	require.Equal(t, uint32(dctx.TotBFRegs), uc.NumDynBFRegs)
	require.Equal(t, uint8(1), uc.CQEVersion)
	require.Equal(t, uint16(dattr.MaxSQDescSz), uc.MaxSQDescSz)
	require.Equal(t, dctx.UARIndex, page, "the first dynamic UAR is the context's first page")

	b := r.must(s, uverbs.CmdQueryDevice, &uverbs.QueryDevice{Response: 1}, nil, uverbs.QueryDeviceRespSize)
	qd := decode[uverbs.QueryDeviceResp](t, b)
	require.Equal(t, NodeGUID(rigMAC), qd.NodeGUID)
	require.Equal(t, uint32(dattr.MaxQP), qd.MaxQP)
	require.Equal(t, uint32(dattr.MaxCQE), qd.MaxCQE)
	require.Equal(t, dattr.MaxMRSize, qd.MaxMRSize)
	require.Equal(t, dattr.VendorPartID, qd.VendorPartID)
	require.Equal(t, uint8(1), qd.PhysPortCnt)

	b = r.must(s, uverbs.CmdQueryPort, &uverbs.QueryPort{Response: 1, PortNum: 1}, nil, uverbs.QueryPortRespSize)
	qp := decode[uverbs.QueryPortResp](t, b)
	require.Equal(t, uverbs.PortActive, qp.State)
	require.Equal(t, uint32(2), qp.GIDTblLen, "sgid 0 and 1")
	require.Equal(t, dattr.ActiveMTU, qp.ActiveMTU)
	require.Equal(t, uint8(linkLayerEthernet), qp.LinkLayer)

	// GID entries 0 and 1 by ioctl: both the IPv4-mapped GID.
	const gh = uverbs.IoctlHdrSize + 4*uverbs.AttrSize
	for idx := range 2 {
		io, err := uverbs.NewIoctl(r.req[:], uverbs.ObjectDevice, uverbs.MethodQueryGIDEntry, uverbs.DriverMLX5)
		require.NoError(t, err)
		for _, a := range []uverbs.AttrFields{uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryPort, uint64(1)), uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryGIDIndex, uint64(idx)),
			uverbs.AttrU32In(uverbs.AttrQueryGIDEntryFlags, 0), uverbs.AttrPtrOut(uverbs.AttrQueryGIDEntryRespEntry, gh, uverbs.GIDEntrySize)} {
			require.NoError(t, io.Add(a))
		}
		n, err := s.Handle(io.Bytes(), r.out[:gh+uverbs.GIDEntrySize])
		require.NoError(t, err)
		require.Equal(t, gh+uverbs.GIDEntrySize, n)
		require.Equal(t, rigIP.As16(), [16]byte(r.out[gh:gh+16]))
		require.Equal(t, uint32(idx), binary.NativeEndian.Uint32(r.out[gh+16:]), "gid_index")
		require.Equal(t, uint32(uverbs.GIDTypeRoCEv2), binary.NativeEndian.Uint32(r.out[gh+24:]))
	}

	pd, pdn := r.allocPD(s)
	require.NotZero(t, pdn)
	mr, lkey := r.regMR(s, pd)

	// A completion channel and a CQ reporting to it.
	b = r.must(s, uverbs.CmdCreateCompChannel, &uverbs.CreateCompChannel{Response: 1}, nil, uverbs.CreateCompChannelRespSize)
	ch := decode[uverbs.CreateCompChannelResp](t, b).FD
	cqCh, _, err := r.createCQ(s, page, int32(ch))
	require.NoError(t, err)
	cq, cqn, err := r.createCQ(s, page, uverbs.NoCompChannel)
	require.NoError(t, err)

	srq, srqn := r.createSRQ(s, pd)
	require.NoError(t, r.modifyErr(uverbs.ModifySRQ{SRQHandle: srq, AttrMask: uverbs.SRQAttrLimit, SRQLimit: 8}))
	b = r.must(s, uverbs.CmdQuerySRQ, &uverbs.QuerySRQ{Response: 1, SRQHandle: srq}, nil, uverbs.QuerySRQRespSize)
	qs := decode[uverbs.QuerySRQResp](t, b)
	require.Equal(t, uverbs.QuerySRQResp{MaxWR: 63, MaxSGE: 1, SRQLimit: 8}, qs)

	qpH, qpn, bfreg, err := r.createQP(s, pd, cq, 0)
	require.NoError(t, err)
	qp2, qpn2, _, err := r.createQP(s, pd, cqCh, srq)
	require.NoError(t, err)
	require.NotEqual(t, qpn, qpn2)
	require.Less(t, int(bfreg), dctx.TotBFRegs)
	r.connect(s, qpH)
	require.Equal(t, mlx5.QPStateRTS, r.state(qpn))
	b = r.must(s, uverbs.CmdQueryQP, &uverbs.QueryQP{Response: 1, QPHandle: qpH, AttrMask: uverbs.QPAttrState}, nil, uverbs.QueryQPRespSize)
	qq := decode[uverbs.QueryQPResp](t, b)
	require.Equal(t, uverbs.QPStateRTS, qq.QPState)
	require.Equal(t, uint32(0x123), qq.DestQPNum)
	require.Equal(t, uint32(0x1000), qq.SQPSN)
	require.Equal(t, uverbs.MTU1024, qq.PathMTU)

	// Extended MODIFY_QP: RTS → ERR.
	x := uverbs.ExModifyQP{Base: uverbs.ModifyQP{QPHandle: qpH, AttrMask: uverbs.QPAttrState, QPState: uverbs.QPStateErr}}
	k, err := uverbs.PutExWriteHdr(r.req[:], uverbs.ExCmdModifyQP, uverbs.ExModifyQPSize, 0, uverbs.ExModifyQPRespSize, 0, 1)
	require.NoError(t, err)
	_, _ = x.Encode(r.req[uverbs.CmdHdrSize+uverbs.ExCmdHdrSize:])
	n, err := s.Handle(r.req[:k], r.out[:uverbs.ExModifyQPRespSize])
	require.NoError(t, err)
	require.Equal(t, uverbs.ExModifyQPRespSize, n)
	require.Equal(t, mlx5.QPStateERR, r.state(qpn))

	// Extended QUERY_DEVICE, CREATE_CQ and CREATE_QP.
	b, err = r.ex(s, uverbs.ExCmdQueryDevice, &uverbs.ExQueryDevice{}, nil, uverbs.ExQueryDeviceRespSize, 0)
	require.NoError(t, err)
	xq := decode[uverbs.ExQueryDeviceResp](t, b)
	require.Equal(t, qd, xq.Base)
	require.Equal(t, uint32(uverbs.ExQueryDeviceRespSize), xq.ResponseLength)
	cb, cd := r.alloc(64*64), r.alloc(64)
	b, err = r.ex(s, uverbs.ExCmdCreateCQ, &uverbs.ExCreateCQ{CQE: 31, CompChannel: -1}, &uverbs.MLX5CreateCQ{BufAddr: cb, DBAddr: cd, CQESize: 64},
		uverbs.ExCreateCQRespSize, uverbs.MLX5CreateCQRespSize)
	require.NoError(t, err)
	xc := decode[uverbs.ExCreateCQResp](t, b)
	require.Equal(t, uint32(31), xc.Base.CQE)
	xcqn := decode[uverbs.MLX5CreateCQResp](t, b[uverbs.ExCreateCQRespSize:]).CQN
	require.NotZero(t, xcqn)
	c0, d0 := r.qpReq(pd, xc.Base.CQHandle, 0)
	b, err = r.ex(s, uverbs.ExCmdCreateQP, &uverbs.ExCreateQP{PDHandle: pd, SendCQHandle: xc.Base.CQHandle, RecvCQHandle: xc.Base.CQHandle,
		MaxSendWR: c0.MaxSendWR, MaxRecvWR: c0.MaxRecvWR, QPType: uverbs.QPTypeUC}, &d0, uverbs.ExCreateQPRespSize, uverbs.MLX5CreateQPRespSize)
	require.NoError(t, err)
	xp := decode[uverbs.ExCreateQPResp](t, b)
	require.NotZero(t, xp.Base.QPN)
	r.must(s, uverbs.CmdDestroyQP, &uverbs.DestroyQP{Response: 1, QPHandle: xp.Base.QPHandle}, nil, uverbs.DestroyQPRespSize)
	r.must(s, uverbs.CmdDestroyCQ, &uverbs.DestroyCQ{Response: 1, CQHandle: xc.Base.CQHandle}, nil, uverbs.DestroyCQRespSize)

	// An address handle: the kernel resolves the destination MAC.
	b = r.must(s, uverbs.CmdCreateAH, &uverbs.CreateAH{Response: 1, PDHandle: pd,
		Attr: uverbs.AHAttr{Grh: uverbs.GlobalRoute{DGID: peerIP.As16(), SGIDIndex: 1, HopLimit: 64}, IsGlobal: 1, PortNum: 1}},
		nil, uverbs.CreateAHRespSize+uverbs.MLX5CreateAHRespSize)
	ah := decode[uverbs.CreateAHResp](t, b).AHHandle
	require.Equal(t, peerMAC, decode[uverbs.MLX5CreateAHResp](t, b[4:]).DMAC)

	require.Equal(t, map[string]int{"PD": 1, "MR": 1, "CQ": 2, "QP": 2, "SRQ": 1, "AH": 1, "completion channel": 1, "UAR": 1}, s.Objects())

	// Tear down through both framings.
	r.must(s, uverbs.CmdDestroyAH, &uverbs.DestroyAH{AHHandle: ah}, nil, 0)
	r.must(s, uverbs.CmdDestroyQP, &uverbs.DestroyQP{Response: 1, QPHandle: qpH}, nil, uverbs.DestroyQPRespSize)
	io, err := uverbs.Destroy(r.req[:], uverbs.ObjectQP, qp2, uverbs.IoctlHdrSize+2*uverbs.AttrSize, uverbs.DriverMLX5)
	require.NoError(t, err)
	_, err = s.Handle(io.Bytes(), r.out[:uverbs.IoctlHdrSize+2*uverbs.AttrSize+uverbs.DestroyQPRespSize])
	require.NoError(t, err)
	_, err = r.dev.QueryQP(qpn2)
	require.Error(t, err, "QP destroyed on the device")
	r.must(s, uverbs.CmdDestroySRQ, &uverbs.DestroySRQ{Response: 1, SRQHandle: srq}, nil, uverbs.DestroySRQRespSize)
	_, err = r.dev.QuerySRQ(srqn)
	require.Error(t, err)
	r.must(s, uverbs.CmdDestroyCQ, &uverbs.DestroyCQ{Response: 1, CQHandle: cq}, nil, uverbs.DestroyCQRespSize)
	require.Error(t, r.dev.DestroyCQ(cqn), "CQ destroyed on the device")
	r.must(s, uverbs.CmdDestroyCQ, &uverbs.DestroyCQ{Response: 1, CQHandle: cqCh}, nil, uverbs.DestroyCQRespSize)
	r.must(s, uverbs.CmdDeregMR, &uverbs.DeregMR{MRHandle: mr}, nil, 0)
	require.Error(t, r.dev.DeregMR(lkey))
	io, err = uverbs.Destroy(r.req[:], uverbs.ObjectPD, pd, 0, uverbs.DriverMLX5)
	require.NoError(t, err)
	_, err = s.Handle(io.Bytes(), r.out[:])
	require.NoError(t, err)
	require.Error(t, r.dev.DeallocPD(pdn))
	require.Equal(t, map[string]int{"completion channel": 1, "UAR": 1}, s.Objects())
	require.NoError(t, s.Close())
	require.Empty(t, s.Objects())
	require.Equal(t, uint64(0), s.Counters()["refused"])
}

func (r *rig) modifyErr(m uverbs.ModifySRQ) error {
	_, err := r.do(r.s, uverbs.CmdModifySRQ, &m, nil, 0)
	return err
}

// TestBFRegLayout: the provider computes a QP's doorbell register from the
// bfreg_index CREATE_QP returns (two bfregs per UAR page from the
// context's first UAR, at 0x800 + n*bf_reg_size); that must be where the
// device put it.
func TestBFRegLayout(t *testing.T) {
	r := newRig(t, 4<<20)
	uctx, _ := r.dev.GetContext()
	o := r.build(r.s)
	for i := 0; i < 2*uctx.TotBFRegs+3; i++ {
		c, d := r.qpReq(o.pd, o.cq, 0)
		typ, _ := c.QPType.MLX5()
		resp, err := r.dev.CreateQP(mlx5.CreateQPCmd{Type: typ, PDN: o.pdn, SendCQN: o.cqn, RecvCQN: o.cqn, BufAddr: d.BufAddr, DBAddr: d.DBAddr,
			SQWQECnt: 64, RQWQECnt: 64, RQWQEShift: 6, BFRegIndex: -1})
		require.NoError(t, err)
		n := uint32(resp.BFRegIndex)
		want := uint64(uctx.UARIndex+n/2)*mlx5.UARPageSize + mlx5.UARBFRegOffset + uint64(n%2)*uint64(uctx.BFRegSize)
		require.Equal(t, want, resp.BFRegOffset, "qp %d bfreg %d", i, n)
		require.NoError(t, r.dev.DestroyQP(resp.QPN))
	}
}

// TestRefusals: bad input of every kind gets the errno the kernel gives,
// is counted, and leaves the server serving.
func TestRefusals(t *testing.T) {
	r := newRig(t, 4<<20)
	s := r.s
	other := r.d.NewServer()

	// Before GET_CONTEXT.
	_, err := r.do(s, uverbs.CmdAllocPD, &uverbs.AllocPD{Response: 1}, nil, 8)
	require.Equal(t, syscall.EINVAL, errno(t, err))
	_, err = r.do(s, uverbs.CmdReqNotifyCQ, &uverbs.ReqNotifyCQ{CQHandle: 1}, nil, 0)
	require.Equal(t, syscall.EOPNOTSUPP, errno(t, err), "a disabled command is EOPNOTSUPP with or without a context")
	_, err = r.do(s, uverbs.CmdGetContext, &uverbs.GetContext{Response: 1},
		&uverbs.MLX5AllocUcontextReqV2{Flags: uverbs.MLX5AllocUctxDevX}, uverbs.GetContextRespSize+uverbs.MLX5AllocUcontextRespSize)
	require.Equal(t, syscall.EPERM, errno(t, err), "DEVX")
	_, err = r.do(s, uverbs.CmdGetContext, &uverbs.GetContext{Response: 1},
		&uverbs.MLX5AllocUcontextReqV2{CompMask: 1}, uverbs.GetContextRespSize+uverbs.MLX5AllocUcontextRespSize)
	require.Equal(t, syscall.EOPNOTSUPP, errno(t, err))
	_, err = r.do(s, uverbs.CmdGetContext, &uverbs.GetContext{Response: 1},
		&uverbs.MLX5AllocUcontextReqV2{TotalNumBFRegs: 1 << 20}, uverbs.GetContextRespSize+uverbs.MLX5AllocUcontextRespSize)
	require.Equal(t, syscall.ENOMEM, errno(t, err))
	_, err = r.do(s, uverbs.CmdGetContext, &uverbs.GetContext{Response: 1}, nil, uverbs.GetContextRespSize)
	require.Equal(t, syscall.EINVAL, errno(t, err), "no driver data")
	// Without DYN_UAR the context's legacy bfregs are reported.
	legacy := r.d.NewServer()
	b0 := r.must(legacy, uverbs.CmdGetContext, &uverbs.GetContext{Response: 1}, &uverbs.MLX5AllocUcontextReqV2{TotalNumBFRegs: 4, NumLowLatencyBFRegs: 1},
		uverbs.GetContextRespSize+uverbs.MLX5AllocUcontextRespSize)
	dctx, _ := r.dev.GetContext()
	require.Equal(t, uint32(dctx.TotBFRegs), decode[uverbs.MLX5AllocUcontextResp](t, b0[uverbs.GetContextRespSize:]).TotBFRegs)
	// With DYN_UAR the bfreg counts asked for are not looked at.
	dynCtx := r.d.NewServer()
	b0 = r.must(dynCtx, uverbs.CmdGetContext, &uverbs.GetContext{Response: 1}, &uverbs.MLX5AllocUcontextReqV2{TotalNumBFRegs: 1 << 20, LibCaps: uverbs.MLX5LibCapDynUAR},
		uverbs.GetContextRespSize+uverbs.MLX5AllocUcontextRespSize)
	require.Zero(t, decode[uverbs.MLX5AllocUcontextResp](t, b0[uverbs.GetContextRespSize:]).TotBFRegs)

	o := r.build(s)
	oo := r.build(other)
	_, err = r.do(s, uverbs.CmdGetContext, &uverbs.GetContext{Response: 1}, &uverbs.MLX5AllocUcontextReqV2{}, uverbs.GetContextRespSize+uverbs.MLX5AllocUcontextRespSize)
	require.Equal(t, syscall.EINVAL, errno(t, err), "second context")

	raw := func(b []byte, out int) error {
		_, err := s.Handle(b, r.out[:out])
		return err
	}
	hdr := func(cmd uint32, inWords, outWords uint16, body int) []byte {
		b := make([]byte, body)
		binary.NativeEndian.PutUint32(b, cmd)
		binary.NativeEndian.PutUint16(b[4:], inWords)
		binary.NativeEndian.PutUint16(b[6:], outWords)
		return b
	}
	cq := func(c uverbs.CreateCQ, d uverbs.MLX5CreateCQ) error {
		c.Response = 1
		if d.BufAddr == 0 {
			d.BufAddr, d.DBAddr = r.alloc(64*64), r.alloc(64)
		}
		_, err := r.do(s, uverbs.CmdCreateCQ, &c, &d, 16)
		return err
	}
	qp := func(f func(*uverbs.CreateQP, *uverbs.MLX5CreateQP)) error {
		c, d := r.qpReq(o.pd, o.cq, 0)
		f(&c, &d)
		_, err := r.do(s, uverbs.CmdCreateQP, &c, &d, uverbs.CreateQPRespSize+uverbs.MLX5CreateQPRespSize)
		return err
	}
	mrAt := func(start, n uint64, acc uverbs.Access) error {
		_, err := r.do(s, uverbs.CmdRegMR, &uverbs.RegMR{Response: 1, Start: start, Length: n, HCAVA: start, PDHandle: o.pd, AccessFlags: acc}, nil, 12)
		return err
	}
	base := r.alloc(4096)
	refused := s.Counters()["refused"]
	cases := []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"short header", raw([]byte{1, 2, 3}, 0), syscall.EINVAL},
		{"EX_CREATE_CQ core below its reserved word", raw(append(hdr(uint32(uverbs.ExCmdCreateCQ)|uverbs.CmdFlagExtended, 3, 2, 8),
			append([]byte{0x10, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 8+24)...)...), 16), syscall.ENOSPC},
		{"EX_CREATE_CQ out words below response_length", raw(append(hdr(uint32(uverbs.ExCmdCreateCQ)|uverbs.CmdFlagExtended, 4, 1, 8),
			append([]byte{0x10, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 8+32)...)...), 16), syscall.ENOSPC},
		{"in_words disagree with the length", raw(hdr(3, 5, 2, 16), 8), syscall.EINVAL},
		{"reserved command bits", raw(hdr(3|1<<16, 4, 2, 16), 8), syscall.EINVAL},
		{"core request truncated", raw(hdr(uint32(uverbs.CmdCreateCQ), 4, 4, 16), 16), syscall.ENOSPC},
		{"out_words below the core response", raw(hdr(uint32(uverbs.CmdAllocPD), 4, 0, 16), 0), syscall.ENOSPC},
		{"response buffer shorter than out_words", raw(hdr(uint32(uverbs.CmdAllocPD), 4, 2, 16), 4), syscall.EFAULT},
		{"unknown command", raw(hdr(99, 2, 0, 8), 0), syscall.EOPNOTSUPP},
		{"unknown command beyond the kernel's table, in_words wrong", raw(hdr(99, 7, 0, 8), 0), syscall.EOPNOTSUPP},
		{"MODIFY_AH (no method), in_words wrong", raw(hdr(6, 7, 0, 8), 0), syscall.EINVAL},
		{"REQ_NOTIFY_CQ without its core (disabled on mlx5)", raw(hdr(uint32(uverbs.CmdReqNotifyCQ), 2, 0, 8), 0), syscall.EOPNOTSUPP},
		{"POLL_CQ, in_words wrong", raw(hdr(uint32(uverbs.CmdPollCQ), 9, 0, 16), 0), syscall.EINVAL},
		{"ALLOC_PD sent as extended (no such method)", raw(hdr(uint32(uverbs.CmdAllocPD)|uverbs.CmdFlagExtended, 4, 0, 16), 0), syscall.EOPNOTSUPP},
		{"ALLOC_PD sent as extended, in_words as ex words", raw(append(hdr(uint32(uverbs.CmdAllocPD)|uverbs.CmdFlagExtended, 1, 0, 8), make([]byte, 24)...), 0), syscall.EINVAL},
		{"DEALLOC_PD with non-zero bytes after the core", raw(append(hdr(uint32(uverbs.CmdDeallocPD), 5, 0, 8), byte(o.pd), 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0), 0), syscall.EOPNOTSUPP},
		{"DEALLOC_PD with zero bytes after the core (served: the PD is busy)", raw(append(hdr(uint32(uverbs.CmdDeallocPD), 5, 0, 8), byte(o.pd), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0), syscall.EBUSY},
		{"QUERY_PORT with non-zero bytes after the core", func() error {
			n, err := uverbs.PutWriteHdr(r.req[:], uverbs.CmdQueryPort, uverbs.QueryPortSize+8, uverbs.QueryPortRespSize)
			require.NoError(t, err)
			clear(r.req[uverbs.CmdHdrSize:n])
			_, _ = (&uverbs.QueryPort{Response: 1, PortNum: 1}).Encode(r.req[uverbs.CmdHdrSize:])
			r.req[n-1] = 1
			return raw(r.req[:n], uverbs.QueryPortRespSize)
		}(), syscall.EOPNOTSUPP},
		{"POST_SEND (mlx5 posts in user space)", raw(hdr(uint32(uverbs.CmdPostSend), 8, 1, 32), 4), syscall.EOPNOTSUPP},
		{"extended command not served", raw(append(hdr(99|uverbs.CmdFlagExtended, 1, 0, 8), make([]byte, 24)...), 0), syscall.EOPNOTSUPP},
		{"EX_QUERY_DEVICE without room for the response", raw(append(hdr(uint32(uverbs.ExCmdQueryDevice)|uverbs.CmdFlagExtended, 1, 0, 8), make([]byte, 24)...), 0), syscall.ENOSPC},
		{"EX_CREATE_QP with create flags", func() error {
			c, d := r.qpReq(o.pd, o.cq, 0)
			x := uverbs.ExCreateQP{PDHandle: c.PDHandle, SendCQHandle: c.SendCQHandle, RecvCQHandle: c.RecvCQHandle, QPType: c.QPType, CreateFlags: 2}
			_, err := r.ex(s, uverbs.ExCmdCreateQP, &x, &d, uverbs.ExCreateQPRespSize, uverbs.MLX5CreateQPRespSize)
			return err
		}(), syscall.EOPNOTSUPP},

		{"EX_CREATE_CQ with a comp_mask", func() error {
			_, err := r.ex(s, uverbs.ExCmdCreateCQ, &uverbs.ExCreateCQ{CQE: 63, CompChannel: -1, CompMask: 1},
				&uverbs.MLX5CreateCQ{BufAddr: r.alloc(4096), DBAddr: r.alloc(64), CQESize: 64}, uverbs.ExCreateCQRespSize, uverbs.MLX5CreateCQRespSize)
			return err
		}(), syscall.EINVAL},
		{"EX_CREATE_CQ with flags (not modelled)", func() error {
			_, err := r.ex(s, uverbs.ExCmdCreateCQ, &uverbs.ExCreateCQ{CQE: 63, CompChannel: -1, Flags: 1},
				&uverbs.MLX5CreateCQ{BufAddr: r.alloc(4096), DBAddr: r.alloc(64), CQESize: 64}, uverbs.ExCreateCQRespSize, uverbs.MLX5CreateCQRespSize)
			return err
		}(), syscall.EOPNOTSUPP},
		{"EX_CREATE_QP with an unknown comp_mask bit", func() error {
			c, d := r.qpReq(o.pd, o.cq, 0)
			x := uverbs.ExCreateQP{PDHandle: c.PDHandle, SendCQHandle: c.SendCQHandle, RecvCQHandle: c.RecvCQHandle, QPType: c.QPType, CompMask: 2}
			_, err := r.ex(s, uverbs.ExCmdCreateQP, &x, &d, uverbs.ExCreateQPRespSize, uverbs.MLX5CreateQPRespSize)
			return err
		}(), syscall.EINVAL},
		{"EX_CREATE_QP with an indirection table (not modelled)", func() error {
			c, d := r.qpReq(o.pd, o.cq, 0)
			x := uverbs.ExCreateQP{PDHandle: c.PDHandle, SendCQHandle: c.SendCQHandle, RecvCQHandle: c.RecvCQHandle, QPType: c.QPType, CompMask: 1}
			_, err := r.ex(s, uverbs.ExCmdCreateQP, &x, &d, uverbs.ExCreateQPRespSize, uverbs.MLX5CreateQPRespSize)
			return err
		}(), syscall.EOPNOTSUPP},

		{"unknown PD handle", func() error {
			_, err := r.do(s, uverbs.CmdDeallocPD, &uverbs.DeallocPD{PDHandle: 9999}, nil, 0)
			return err
		}(), syscall.ENOENT},
		{"another client's PD", func() error {
			_, err := r.do(s, uverbs.CmdDeallocPD, &uverbs.DeallocPD{PDHandle: oo.pd}, nil, 0)
			return err
		}(), syscall.EBADF},
		{"another client's QP", r.modify(s, uverbs.ModifyQP{QPHandle: oo.qp, AttrMask: uverbs.QPAttrState, QPState: uverbs.QPStateErr}), syscall.EBADF},
		{"a CQ handle as a PD", func() error {
			_, err := r.do(s, uverbs.CmdDeallocPD, &uverbs.DeallocPD{PDHandle: o.cq}, nil, 0)
			return err
		}(), syscall.EINVAL},
		{"PD with live MRs, QPs, SRQ", func() error {
			_, err := r.do(s, uverbs.CmdDeallocPD, &uverbs.DeallocPD{PDHandle: o.pd}, nil, 0)
			return err
		}(), syscall.EBUSY},
		{"CQ used by a QP", func() error {
			_, err := r.do(s, uverbs.CmdDestroyCQ, &uverbs.DestroyCQ{Response: 1, CQHandle: o.cq}, nil, 8)
			return err
		}(), syscall.EBUSY},

		{"MR outside the client's memory", mrAt(rigBase+8<<20, 4096, uverbs.AccessLocalWrite), syscall.EFAULT},
		{"MR of zero length", mrAt(base, 0, uverbs.AccessLocalWrite), syscall.EINVAL},
		{"MR remote write without local write", mrAt(base, 4096, uverbs.AccessRemoteWrite), syscall.EINVAL},
		{"MR on demand", mrAt(base, 4096, uverbs.AccessLocalWrite|uverbs.AccessOnDemand), syscall.EOPNOTSUPP},
		{"MR unknown access bit", mrAt(base, 4096, 1<<30), syscall.EINVAL},

		{"CQ of 0 entries is a ring of one", cq(uverbs.CreateCQ{CompChannel: -1}, uverbs.MLX5CreateCQ{CQESize: 64}), 0},
		{"CQ beyond max_cqe", cq(uverbs.CreateCQ{CQE: 1 << 30, CompChannel: -1}, uverbs.MLX5CreateCQ{CQESize: 64}), syscall.EINVAL},
		{"CQ of 32-byte CQEs", cq(uverbs.CreateCQ{CQE: 63, CompChannel: -1}, uverbs.MLX5CreateCQ{CQESize: 32}), syscall.EINVAL},
		{"CQ with 128-byte CQEs (not modelled)", cq(uverbs.CreateCQ{CQE: 63, CompChannel: -1}, uverbs.MLX5CreateCQ{CQESize: 128}), syscall.EINVAL},
		{"CQ on another context's UAR page", cq(uverbs.CreateCQ{CQE: 63, CompChannel: -1},
			uverbs.MLX5CreateCQ{CQESize: 64, Flags: uverbs.MLX5CreateCQFlagUARPageIndex, UARPageIndex: uint16(o.uar + 5)}), syscall.EINVAL},
		{"CQ on an unknown channel", cq(uverbs.CreateCQ{CQE: 63, CompChannel: 4242}, uverbs.MLX5CreateCQ{CQESize: 64}), syscall.ENOENT},
		{"CQ with comp_vector 3", cq(uverbs.CreateCQ{CQE: 63, CompChannel: -1, CompVector: 3}, uverbs.MLX5CreateCQ{CQESize: 64}), syscall.EINVAL},
		{"CQ ring outside memory", cq(uverbs.CreateCQ{CQE: 63, CompChannel: -1}, uverbs.MLX5CreateCQ{CQESize: 64, BufAddr: 0x1000, DBAddr: base}), syscall.EFAULT},
		{"CQ with CQE compression", cq(uverbs.CreateCQ{CQE: 63, CompChannel: -1}, uverbs.MLX5CreateCQ{CQESize: 64, CQECompEn: 1}), syscall.EOPNOTSUPP},
		{"CQ reserved core bytes", func() error {
			n, err := uverbs.EncodeWrite(r.req[:], uverbs.CmdCreateCQ, &uverbs.CreateCQ{Response: 1, CQE: 63, CompChannel: -1}, &uverbs.MLX5CreateCQ{CQESize: 64}, 16)
			require.NoError(t, err)
			r.req[uverbs.CmdHdrSize+28] = 1
			return raw(r.req[:n], 16)
		}(), syscall.EINVAL},
		{"CQ driver data with unknown trailing bytes", func() error {
			n, err := uverbs.PutWriteHdr(r.req[:], uverbs.CmdCreateCQ, uverbs.CreateCQSize+uverbs.MLX5CreateCQSize+8, 16)
			require.NoError(t, err)
			c := uverbs.CreateCQ{Response: 1, CQE: 63, CompChannel: -1}
			_, _ = c.Encode(r.req[uverbs.CmdHdrSize:])
			d := uverbs.MLX5CreateCQ{BufAddr: r.alloc(4096), DBAddr: r.alloc(64), CQESize: 64}
			_, _ = d.Encode(r.req[uverbs.CmdHdrSize+uverbs.CreateCQSize:])
			r.req[n-1] = 7
			return raw(r.req[:n], 16)
		}(), syscall.EOPNOTSUPP},

		{"QP of type XRC", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { c.QPType = uverbs.QPTypeXRCIni }), syscall.EOPNOTSUPP},
		{"QP of type 77", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { c.QPType = 77 }), syscall.EOPNOTSUPP},
		{"QP SQ not a power of two", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { d.SQWQECount = 48 }), syscall.EINVAL},
		{"QP beyond max_qp_wr", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { c.MaxRecvWR = 1 << 30 }), syscall.EINVAL},
		{"QP buffer outside memory", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { d.BufAddr = rigBase + 64<<20 }), syscall.EFAULT},
		{"QP with a huge RQ shift", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { d.RQWQEShift = 40 }), syscall.EINVAL},
		{"QP unknown mlx5 flag", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { d.Flags = 1 << 20 }), syscall.EINVAL},
		{"QP on a bfreg the context lacks", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) {
			d.Flags, d.BFRegIndex = uverbs.MLX5QPFlagBFRegIndex, 1<<20
		}), syscall.EINVAL},
		{"QP SQ not after the RQ", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { d.SQBufAddr = d.BufAddr }), syscall.EINVAL},
		{"QP on an unknown SRQ", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { c.IsSRQ, c.SRQHandle, d.RQWQECount = 1, 31337, 0 }), syscall.ENOENT},
		{"QP on an SRQ with its own RQ", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { c.IsSRQ, c.SRQHandle = 1, o.srq }), syscall.EINVAL},
		{"QP on another client's CQ", qp(func(c *uverbs.CreateQP, d *uverbs.MLX5CreateQP) { c.SendCQHandle = oo.cq }), syscall.EBADF},

		{"MODIFY_QP to state 9", r.modify(s, uverbs.ModifyQP{QPHandle: o.qp, AttrMask: uverbs.QPAttrState, QPState: 9}), syscall.EINVAL},
		{"MODIFY_QP RESET to RTS", r.modify(s, uverbs.ModifyQP{QPHandle: o.qp, AttrMask: uverbs.QPAttrState | uverbs.QPAttrSQPSN, QPState: uverbs.QPStateRTS}), syscall.EINVAL},
		{"MODIFY_QP INIT without port", r.modify(s, uverbs.ModifyQP{QPHandle: o.qp, AttrMask: uverbs.QPAttrState, QPState: uverbs.QPStateInit}), syscall.EINVAL},
		{"MODIFY_QP unknown mask bit", r.modify(s, uverbs.ModifyQP{QPHandle: o.qp, AttrMask: 1 << 28}), syscall.EOPNOTSUPP},
		{"MODIFY_QP AV without GRH", r.modify(s, uverbs.ModifyQP{QPHandle: o.qp, AttrMask: uverbs.QPAttrAV, Dest: uverbs.QPDest{PortNum: 1}}), syscall.EINVAL},
		{"MODIFY_QP INIT to RTR with the AV on port 0", func() error {
			qp, _, _, err := r.createQP(s, o.pd, o.cq, 0)
			require.NoError(t, err)
			require.NoError(t, r.modify(s, uverbs.ModifyQP{QPHandle: qp, AttrMask: uverbs.QPAttrState | uverbs.QPAttrPKeyIndex | uverbs.QPAttrPort | uverbs.QPAttrAccessFlags,
				QPState: uverbs.QPStateInit, PortNum: 1}))
			return r.modify(s, uverbs.ModifyQP{QPHandle: qp,
				AttrMask: uverbs.QPAttrState | uverbs.QPAttrAV | uverbs.QPAttrPathMTU | uverbs.QPAttrDestQPN | uverbs.QPAttrRQPSN | uverbs.QPAttrMaxDestRdAtomic | uverbs.QPAttrMinRNRTimer,
				QPState:  uverbs.QPStateRTR, PathMTU: uverbs.MTU1024, DestQPNum: 0x123, RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12,
				Dest: uverbs.QPDest{DGID: peerIP.As16(), SGIDIndex: 1, HopLimit: 64, IsGlobal: 1}})
		}(), syscall.EINVAL},
		{"MODIFY_QP of a destroyed... never-made QP", r.modify(s, uverbs.ModifyQP{QPHandle: 0}), syscall.ENOENT},

		{"SRQ of 0 WRs", func() error {
			_, err := r.do(s, uverbs.CmdCreateSRQ, &uverbs.CreateSRQ{Response: 1, PDHandle: o.pd, MaxSGE: 1}, &uverbs.MLX5CreateSRQ{BufAddr: base, DBAddr: base}, 24)
			return err
		}(), syscall.EINVAL},
		{"SRQ resize (mlx5 cannot)", r.modifyErr(uverbs.ModifySRQ{SRQHandle: o.srq, AttrMask: uverbs.SRQAttrMaxWR, MaxWR: 8}), syscall.EINVAL},
		{"SRQ used by a QP", func() error {
			_, _, _, err := r.createQP(s, o.pd, o.cq, o.srq)
			require.NoError(t, err)
			_, err = r.do(s, uverbs.CmdDestroySRQ, &uverbs.DestroySRQ{Response: 1, SRQHandle: o.srq}, nil, 4)
			return err
		}(), syscall.EBUSY},
		{"QUERY_PORT 2", func() error {
			_, err := r.do(s, uverbs.CmdQueryPort, &uverbs.QueryPort{Response: 1, PortNum: 2}, nil, uverbs.QueryPortRespSize)
			return err
		}(), syscall.EINVAL},
		{"AH without GRH", func() error {
			_, err := r.do(s, uverbs.CmdCreateAH, &uverbs.CreateAH{Response: 1, PDHandle: o.pd, Attr: uverbs.AHAttr{PortNum: 1}}, nil, 20)
			return err
		}(), syscall.EINVAL},
	}
	for _, c := range cases {
		require.Equal(t, c.want, errno(t, c.err), "%s: %v", c.name, c.err)
	}
	nrefused := 0
	for _, c := range cases {
		if c.want != 0 {
			nrefused++
		}
	}
	require.Equal(t, uint64(nrefused), s.Counters()["refused"]-refused, "every refusal counted")
	require.NotZero(t, s.Counters()["refused_errno_EBADF"])
	require.NotZero(t, s.Counters()["refused_cmd_CREATE_QP"])
	require.NotZero(t, r.d.Counters()["refused"])

	// cqe 0: one CQE, resp.cqe 0 (mlx5_ib_create_cq).
	b := r.must(s, uverbs.CmdCreateCQ, &uverbs.CreateCQ{Response: 1, CompChannel: -1},
		&uverbs.MLX5CreateCQ{BufAddr: r.alloc(4096), DBAddr: r.alloc(64), CQESize: 64}, uverbs.CreateCQRespSize+uverbs.MLX5CreateCQRespSize)
	require.Zero(t, decode[uverbs.CreateCQResp](t, b).CQE)

	// The server still serves, and the other client is untouched.
	_, _, err = r.createCQ(s, o.uar, -1)
	require.NoError(t, err)
	require.Equal(t, mlx5.QPStateRST, r.state(oo.qpn))
	require.Zero(t, other.Counters()["refused"])
}

// TestIoctlRefusals: the ioctl side.
func TestIoctlRefusals(t *testing.T) {
	r := newRig(t, 4<<20)
	s := r.s
	_, _, err := r.uarAlloc(s)
	require.Equal(t, syscall.EINVAL, errno(t, err), "before GET_CONTEXT")
	// Before GET_CONTEXT, a method the device lacks is EPROTONOSUPPORT
	// (rdma-core's INVOKE_WRITE probe and its GET_CONTEXT ioctl then fall
	// back to write()), and a wrong driver id EINVAL.
	for _, c := range []struct {
		name string
		m    uverbs.MethodID
		drv  uverbs.DriverID
		want syscall.Errno
	}{
		{"INVOKE_WRITE probe", uverbs.MethodInvokeWrite, uverbs.DriverMLX5, syscall.EPROTONOSUPPORT},
		{"GET_CONTEXT ioctl", uverbs.MethodGetContext, uverbs.DriverMLX5, syscall.EPROTONOSUPPORT},
		{"wrong driver id", uverbs.MethodInvokeWrite, uverbs.DriverRXE, syscall.EINVAL},
	} {
		q, err := uverbs.NewIoctl(r.req[:], uverbs.ObjectDevice, c.m, c.drv)
		require.NoError(t, err)
		require.NoError(t, q.Add(uverbs.AttrConstIn(uverbs.AttrWriteCmd, uint64(uverbs.CmdQueryDevice))))
		_, err = s.Handle(q.Bytes(), r.out[:64])
		require.Equal(t, c.want, errno(t, err), c.name)
	}
	uctx, _ := r.dev.GetContext()
	r.open(s)
	for i := 1; i < uctx.NumUARs; i++ {
		_, _, err := r.uarAlloc(s)
		require.NoError(t, err)
	}
	_, _, err = r.uarAlloc(s)
	require.Equal(t, syscall.ENOMEM, errno(t, err), "every UAR page allocated")

	call := func(io uverbs.Ioctl, out int) error {
		_, err := s.Handle(io.Bytes(), r.out[:out])
		return err
	}
	io := func(obj uverbs.ObjectID, m uverbs.MethodID, drv uverbs.DriverID, attrs ...uverbs.AttrFields) uverbs.Ioctl {
		q, err := uverbs.NewIoctl(r.req[:], obj, m, drv)
		require.NoError(t, err)
		for _, a := range attrs {
			require.NoError(t, q.Add(a))
		}
		return q
	}
	gid := func(port, idx uint32, out uint64) uverbs.Ioctl {
		return io(uverbs.ObjectDevice, uverbs.MethodQueryGIDEntry, uverbs.DriverMLX5, uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryPort, uint64(port)),
			uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryGIDIndex, uint64(idx)), uverbs.AttrPtrOut(uverbs.AttrQueryGIDEntryRespEntry, out, uverbs.GIDEntrySize))
	}
	const h3 = uverbs.IoctlHdrSize + 3*uverbs.AttrSize
	require.NoError(t, call(gid(1, 0, h3), h3+uverbs.GIDEntrySize))
	cases := []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"wrong driver id", call(io(uverbs.ObjectDevice, uverbs.MethodQueryGIDEntry, uverbs.DriverRXE), 64), syscall.EINVAL},
		{"unknown method", call(io(uverbs.ObjectDevice, 77, uverbs.DriverMLX5), 64), syscall.EPROTONOSUPPORT},
		{"GID index beyond the table", call(gid(1, 3, h3), h3+uverbs.GIDEntrySize), syscall.EINVAL},
		{"GID of port 2", call(gid(2, 0, h3), h3+uverbs.GIDEntrySize), syscall.EINVAL},
		{"output outside the response", call(gid(1, 0, 4000), h3+uverbs.GIDEntrySize), syscall.EFAULT},
		{"output over the attribute array", call(gid(1, 0, 8), h3+uverbs.GIDEntrySize), syscall.EFAULT},
		{"response shorter than the attributes", call(gid(1, 0, h3), 16), syscall.EFAULT},
		{"output attribute too short", call(io(uverbs.ObjectDevice, uverbs.MethodQueryGIDEntry, uverbs.DriverMLX5, uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryPort, uint64(1)),
			uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryGIDIndex, uint64(0)), uverbs.AttrPtrOut(uverbs.AttrQueryGIDEntryRespEntry, h3, 8)), h3+uverbs.GIDEntrySize), syscall.EINVAL},
		{"output attribute longer than the struct", call(io(uverbs.ObjectDevice, uverbs.MethodQueryGIDEntry, uverbs.DriverMLX5, uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryPort, uint64(1)),
			uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryGIDIndex, uint64(0)), uverbs.AttrPtrOut(uverbs.AttrQueryGIDEntryRespEntry, h3, uverbs.GIDEntrySize+8)), h3+uverbs.GIDEntrySize+8), syscall.EINVAL},
		{"attr_data set on a CONST_IN", func() error {
			a := uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryPort, uint64(1))
			a.ElemID = 1
			return call(io(uverbs.ObjectDevice, uverbs.MethodQueryGIDEntry, uverbs.DriverMLX5, a,
				uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryGIDIndex, uint64(0)), uverbs.AttrPtrOut(uverbs.AttrQueryGIDEntryRespEntry, h3, uverbs.GIDEntrySize)), h3+uverbs.GIDEntrySize)
		}(), syscall.EINVAL},
		{"attr_data set on an IDR handle", call(io(uverbs.ObjectPD, uverbs.MethodPDDestroy, uverbs.DriverMLX5,
			uverbs.AttrFields{AttrID: uint16(uverbs.AttrDestroyPDHandle), Flags: uverbs.AttrFMandatory, ElemID: 2, Data: 4711}), 64), syscall.EINVAL},
		{"missing attribute", call(io(uverbs.ObjectDevice, uverbs.MethodQueryGIDEntry, uverbs.DriverMLX5, uverbs.AttrConstIn(uverbs.AttrQueryGIDEntryPort, uint64(1))), 64), syscall.EINVAL},
		{"unknown mandatory attribute", call(io(uverbs.ObjectPD, uverbs.MethodPDDestroy, uverbs.DriverMLX5, uverbs.AttrIDR(0, 1), uverbs.AttrU32In(9, 1)), 64), syscall.EPROTONOSUPPORT},
		{"destroy an unknown UAR", call(io(uverbs.MLX5ObjectUAR, uverbs.MLX5MethodUARObjDestroy, uverbs.DriverMLX5, uverbs.AttrIDR(uverbs.MLX5AttrUARObjDestroyHandle, 4711)), 64), syscall.ENOENT},
		{"UAR of type 5", call(io(uverbs.MLX5ObjectUAR, uverbs.MLX5MethodUARObjAlloc, uverbs.DriverMLX5, uverbs.AttrIDRNew(uverbs.MLX5AttrUARObjAllocHandle),
			uverbs.AttrConstIn(uverbs.MLX5AttrUARObjAllocType, 5), uverbs.AttrPtrOut(uverbs.MLX5AttrUARObjAllocMmapOffset, uarHdr, 8),
			uverbs.AttrPtrOut(uverbs.MLX5AttrUARObjAllocMmapLength, uarHdr+8, 4), uverbs.AttrPtrOut(uverbs.MLX5AttrUARObjAllocPageID, uarHdr+12, 4)), uarHdr+16), syscall.EINVAL},
		{"reserved header words", func() error {
			q := gid(1, 0, h3)
			b := q.Bytes()
			b[9] = 1
			_, err := s.Handle(b, r.out[:h3+uverbs.GIDEntrySize])
			return err
		}(), syscall.EPROTONOSUPPORT},
	}
	for _, c := range cases {
		require.Equal(t, c.want, errno(t, c.err), "%s: %v", c.name, c.err)
	}
}

// TestClose: a client's Close destroys what it made, on the device too,
// and leaves another client's objects alone; a closed client gets EIO.
func TestClose(t *testing.T) {
	r := newRig(t, 4<<20)
	a, b := r.s, r.d.NewServer()
	oa, ob := r.build(a), r.build(b)
	r.connect(a, oa.qp)
	r.connect(b, ob.qp)
	require.NoError(t, a.Close())
	require.Empty(t, a.Objects())
	_, err := r.dev.QueryQP(oa.qpn)
	require.Error(t, err, "QP destroyed")
	_, err = r.dev.QuerySRQ(oa.srqn)
	require.Error(t, err, "SRQ destroyed")
	require.Error(t, r.dev.DeregMR(oa.lkey), "MR revoked")
	require.Error(t, r.dev.DestroyCQ(oa.cqn), "CQ destroyed")
	require.Error(t, r.dev.DeallocPD(oa.pdn), "PD freed")
	require.Equal(t, mlx5.QPStateRTS, r.state(ob.qpn), "the other client's QP is untouched")
	_, err = r.do(a, uverbs.CmdAllocPD, &uverbs.AllocPD{Response: 1}, nil, 8)
	require.Equal(t, syscall.EIO, errno(t, err))
	// The dead client's handles are gone for everyone: ENOENT, not EBADF.
	_, err = r.do(b, uverbs.CmdDeallocPD, &uverbs.DeallocPD{PDHandle: oa.pd}, nil, 0)
	require.Equal(t, syscall.ENOENT, errno(t, err))
	require.NoError(t, a.Close(), "twice is harmless")
	require.NoError(t, b.Close())
}

// TestErrnoTable pins the status → errno mapping.
func TestErrnoTable(t *testing.T) {
	want := map[mlx5.CmdStatus]syscall.Errno{
		mlx5.StatusOK: 0, mlx5.StatusInternalErr: syscall.EIO, mlx5.StatusBadOp: syscall.EINVAL, mlx5.StatusBadParam: syscall.EINVAL,
		mlx5.StatusBadSysState: syscall.EIO, mlx5.StatusBadResource: syscall.EINVAL, mlx5.StatusResourceBusy: syscall.EBUSY,
		mlx5.StatusExceedLim: syscall.ENOMEM, mlx5.StatusBadResState: syscall.EINVAL, mlx5.StatusBadIndex: syscall.EINVAL,
		mlx5.StatusNoResources: syscall.ENOMEM, mlx5.StatusBadQPState: syscall.EINVAL, mlx5.StatusBadPkt: syscall.EINVAL,
		mlx5.StatusBadSize: syscall.EINVAL, mlx5.StatusBadInputLength: syscall.EIO, mlx5.StatusBadOutputLength: syscall.EIO,
	}
	for st, e := range want {
		require.Equal(t, e, Errno(st), "%v", st)
	}
	ue := refusal("CREATE_QP", &mlx5.CmdError{Cmd: "CREATE_QP", Status: mlx5.StatusNoResources, Reason: "64 QPs in use"})
	require.ErrorIs(t, ue, syscall.ENOMEM)
	require.Contains(t, ue.Error(), "64 QPs in use")
}

// TestQueryQPAttributes: QUERY_QP answers every attribute of
// ib_uverbs_query_qp_resp the QP was given, as mlx5_ib does (it used to
// answer the state, MTU, destination QPN and PSNs only): the access flags
// (remote bits), port, pkey index, RNR and retry settings, outstanding
// READs, the primary path of RTR, the RQ's size and SGEs, sq_sig_all; and
// zero for what mlx5_ib answers zero (a user QP's send caps).
func TestQueryQPAttributes(t *testing.T) {
	rts := func(o objsLike) uverbs.QueryQPResp {
		return uverbs.QueryQPResp{QPState: uverbs.QPStateRTS, CurQPState: uverbs.QPStateRTS, PathMTU: uverbs.MTU1024,
			DestQPNum: 0x123, RQPSN: 0x2000, SQPSN: 0x1000, QPAccessFlags: uverbs.AccessRemoteWrite, PortNum: 1,
			MaxRdAtomic: 4, MaxDestRdAtomic: 4, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
			MaxRecvWR: o.recvWR, MaxRecvSGE: o.recvSGE, SQSigAll: o.sigAll,
			Dest: uverbs.QPDest{DGID: peerIP.As16(), SGIDIndex: 1, HopLimit: 64, IsGlobal: 1, PortNum: 1}}
	}
	for _, c := range []struct {
		name    string
		srq     bool
		sigAll  bool
		connect bool
		want    func(objsLike) uverbs.QueryQPResp
	}{
		{"RTS", false, false, true, rts},
		{"RTS on an SRQ", true, false, true, rts},
		{"RTS sq_sig_all", false, true, true, rts},
		{"INIT: no path yet", false, false, false, func(o objsLike) uverbs.QueryQPResp {
			return uverbs.QueryQPResp{QPState: uverbs.QPStateInit, CurQPState: uverbs.QPStateInit, QPAccessFlags: uverbs.AccessRemoteWrite,
				PortNum: 1, MaxRecvWR: o.recvWR, MaxRecvSGE: o.recvSGE}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 4<<20)
			s := r.s
			_, page := r.open(s)
			pd, _ := r.allocPD(s)
			cq, _, err := r.createCQ(s, page, uverbs.NoCompChannel)
			require.NoError(t, err)
			var srq uverbs.Handle
			if c.srq {
				srq, _ = r.createSRQ(s, pd)
			}
			cr, drv := r.qpReq(pd, cq, srq)
			o := objsLike{recvWR: 64, recvSGE: 64 / 16}
			if c.srq {
				o.recvWR, o.recvSGE = 0, 0
			}
			if c.sigAll {
				cr.SQSigAll, o.sigAll = 1, 1
			}
			b := r.must(s, uverbs.CmdCreateQP, &cr, &drv, uverbs.CreateQPRespSize+uverbs.MLX5CreateQPRespSize)
			qp := decode[uverbs.CreateQPResp](t, b).QPHandle
			if c.connect {
				r.connect(s, qp)
			} else {
				// connect's INIT step, with local write too: QUERY_QP
				// gives back the remote bits only, as mlx5_ib does.
				require.NoError(t, r.modify(s, uverbs.ModifyQP{QPHandle: qp, AttrMask: uverbs.QPAttrState | uverbs.QPAttrPKeyIndex | uverbs.QPAttrPort | uverbs.QPAttrAccessFlags,
					QPState: uverbs.QPStateInit, PortNum: 1, QPAccessFlags: uverbs.AccessLocalWrite | uverbs.AccessRemoteWrite}))
			}
			b = r.must(s, uverbs.CmdQueryQP, &uverbs.QueryQP{Response: 1, QPHandle: qp, AttrMask: uverbs.QPAttrState}, nil, uverbs.QueryQPRespSize)
			require.Equal(t, c.want(o), decode[uverbs.QueryQPResp](t, b))
		})
	}
}

// objsLike is what a TestQueryQPAttributes case expects of its QP's creation.
type objsLike struct {
	recvWR, recvSGE uint32
	sigAll          uint8
}

// TestObjectLimits: SRQs and address handles are bounded as QPs are, at
// the max_srq and max_ah that QUERY_DEVICE reports (max_qp): the next one
// is refused with ENOMEM, one freed makes room again, and a second client
// of the device shares the bound. Neither had a bound: a client could
// grow the daemon without end (SRQs may all share one buffer; an AH is
// table memory only).
func TestObjectLimits(t *testing.T) {
	spec := device.DefaultSpec()
	const limit = 4
	spec.Caps.MaxQP = limit
	for _, tc := range []struct {
		name    string
		create  func(r *rig, s *Server, pd uverbs.Handle, buf, db uint64) (uverbs.Handle, error)
		destroy func(r *rig, s *Server, h uverbs.Handle) error
	}{
		{"SRQ", func(r *rig, s *Server, pd uverbs.Handle, buf, db uint64) (uverbs.Handle, error) {
			b, err := r.do(s, uverbs.CmdCreateSRQ, &uverbs.CreateSRQ{Response: 1, PDHandle: pd, MaxWR: 63, MaxSGE: 1},
				&uverbs.MLX5CreateSRQ{BufAddr: buf, DBAddr: db}, uverbs.CreateSRQRespSize+uverbs.MLX5CreateSRQRespSize)
			if err != nil {
				return 0, err
			}
			return decode[uverbs.CreateSRQResp](t, b).SRQHandle, nil
		}, func(r *rig, s *Server, h uverbs.Handle) error {
			_, err := r.do(s, uverbs.CmdDestroySRQ, &uverbs.DestroySRQ{Response: 1, SRQHandle: h}, nil, uverbs.DestroySRQRespSize)
			return err
		}},
		{"AH", func(r *rig, s *Server, pd uverbs.Handle, _, _ uint64) (uverbs.Handle, error) {
			b, err := r.do(s, uverbs.CmdCreateAH, &uverbs.CreateAH{Response: 1, PDHandle: pd,
				Attr: uverbs.AHAttr{Grh: uverbs.GlobalRoute{DGID: peerIP.As16(), SGIDIndex: 1, HopLimit: 64}, IsGlobal: 1, PortNum: 1}},
				nil, uverbs.CreateAHRespSize+uverbs.MLX5CreateAHRespSize)
			if err != nil {
				return 0, err
			}
			return decode[uverbs.CreateAHResp](t, b).AHHandle, nil
		}, func(r *rig, s *Server, h uverbs.Handle) error {
			_, err := r.do(s, uverbs.CmdDestroyAH, &uverbs.DestroyAH{AHHandle: h}, nil, 0)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigSpec(t, 1<<20, spec)
			a, b := r.s, r.d.NewServer()
			r.open(a)
			r.open(b)
			pda, _ := r.allocPD(a)
			pdb, _ := r.allocPD(b)
			buf, db := r.alloc(64*64), r.alloc(64) // every SRQ on the same buffer
			var hs []uverbs.Handle
			for i := 0; i < limit-1; i++ {
				h, err := tc.create(r, a, pda, buf, db)
				require.NoError(t, err, "%s %d", tc.name, i)
				hs = append(hs, h)
			}
			hb, err := tc.create(r, b, pdb, buf, db)
			require.NoError(t, err, "the other client's, the last one")
			_, err = tc.create(r, a, pda, buf, db)
			require.Equal(t, syscall.ENOMEM, errno(t, err), "a full table")
			_, err = tc.create(r, b, pdb, buf, db)
			require.Equal(t, syscall.ENOMEM, errno(t, err), "shared by the device's clients")
			require.NoError(t, tc.destroy(r, a, hs[0]))
			_, err = tc.create(r, b, pdb, buf, db)
			require.NoError(t, err, "one freed, one more")
			require.NoError(t, tc.destroy(r, b, hb))
			require.NoError(t, b.Close(), "a closed client's objects leave the table")
			_, err = tc.create(r, a, pda, buf, db)
			require.NoError(t, err)
		})
	}
}

// TestRefusalCountersBounded: a client naming thousands of commands that
// do not exist (ioctl methods, write command numbers) is refused each
// time, counted, and grows the per-command counters by at most a bounded
// set: they kept one counter per name a client made up, without end.
func TestRefusalCountersBounded(t *testing.T) {
	r := newRig(t, 1<<20)
	r.open(r.s)
	const n = 3000
	for i := 0; i < n; i++ {
		io, err := uverbs.NewIoctl(r.req[:], uverbs.ObjectID(0x100+i/7), uverbs.MethodID(i%7+0x40), uverbs.DriverMLX5)
		require.NoError(t, err)
		_, err = r.s.Handle(io.Bytes(), r.out[:])
		require.Error(t, err)
	}
	for _, m := range []map[string]uint64{r.s.Counters(), r.d.Counters()} {
		names := 0
		for k := range m {
			if strings.HasPrefix(k, "refused_cmd_") {
				names++
			}
		}
		require.LessOrEqual(t, names, 257, "per-command counters")
		require.GreaterOrEqual(t, m["refused"], uint64(n), "every refusal counted")
		require.NotZero(t, m["refused_cmd_OTHER"])
	}
}
