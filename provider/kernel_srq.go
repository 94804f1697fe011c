package provider

import (
	"github.com/softnic/softnic/internal/kverbs"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// Shared receive queues on rxe: CREATE_SRQ returns the ring's mmap info
// (rxe_create_srq_resp); receives go into the ring as into a QP's RQ
// (rxe_recv_wqe), with no system call; the kernel's responder takes them
// for every QP attached.

// kernCreateSRQ is CREATE_SRQ on a kernel device.
func (pd *PD) kernCreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	const op = "create_srq"
	c := pd.ctx
	a := &c.attr
	switch {
	case attr.MaxWR < 1 || attr.MaxWR >= a.MaxQPWR:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "max_wr %d (1..%d)", attr.MaxWR, a.MaxQPWR-1))
	case attr.MaxSGE < 0 || attr.MaxSGE > min(srqMaxSGE(a), rxeMaxSGE):
		return nil, opErr(op, 0, detail(ErrInvalidArg, "max_sge %d (0..%d)", attr.MaxSGE, min(srqMaxSGE(a), rxeMaxSGE)))
	case int(attr.SRQLimit) > attr.MaxWR:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "srq_limit %d > max_wr %d", attr.SRQLimit, attr.MaxWR))
	}
	r := c.kern.rxe
	uh := c.kev.handle()
	resp, mi, err := r.createSRQ(uverbs.CreateSRQ{UserHandle: uh, PDHandle: pd.pdn, MaxWR: uint32(attr.MaxWR),
		MaxSGE: uint32(max(attr.MaxSGE, 1)), SRQLimit: attr.SRQLimit})
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	q, err := c.kernMap(mi, rxeRecvWQEBase+int(resp.MaxSGE)*rxeSGESize)
	if err != nil {
		_ = r.DestroySRQ(resp.SRQHandle)
		return nil, opErr(op, 0, err)
	}
	s := &SRQ{ctx: c, pd: pd, ctl: r, srqn: resp.SRQHandle, cnt: q.mask + 1, maxGS: int(resp.MaxSGE), rx: q, uh: uh}
	pd.refs++
	c.srqs[s.srqn] = s
	c.kev.srqs[uh] = s
	return s, nil
}

func (s *SRQ) kernDestroy() error {
	if err := s.ctl.DestroySRQ(s.srqn); err != nil {
		return opErr("destroy_srq", 0, err)
	}
	c := s.ctx
	s.dead = true
	delete(c.srqs, s.srqn)
	delete(c.kev.srqs, s.uh)
	s.pd.refs--
	_ = kverbs.Munmap(s.rx.mem)
	return nil
}

// createSRQ is CREATE_SRQ with rxe's response (the ring's mmap info).
func (r *rxeControl) createSRQ(core uverbs.CreateSRQ) (uverbs.CreateSRQResp, uverbs.RXEMmapInfo, error) {
	const cmd = "CREATE_SRQ"
	core.Response = nominalResponse
	b, err := r.write(uverbs.CmdCreateSRQ, &core, nil, uverbs.CreateSRQRespSize+uverbs.RXECreateSRQRespSize)
	if err != nil {
		return uverbs.CreateSRQResp{}, uverbs.RXEMmapInfo{}, err
	}
	var resp uverbs.CreateSRQResp
	var drv uverbs.RXECreateSRQResp
	if err := decodeResp(cmd, b, &resp, uverbs.CreateSRQRespSize); err != nil {
		return resp, drv.MI, err
	}
	if err := decodeResp(cmd, b[uverbs.CreateSRQRespSize:], &drv, uverbs.RXEMmapInfoSize); err != nil {
		return resp, drv.MI, err
	}
	r.srqs[resp.SRQHandle] = resp.SRQHandle
	return resp, drv.MI, nil
}

// ModifySRQ is MODIFY_SRQ with rxe's driver data, which rxe requires
// (rxe_modify_srq_cmd; its mmap_info_addr is read only for a resize,
// which the provider does not ask for).
func (r *rxeControl) ModifySRQ(c mlx5.ModifySRQCmd) error {
	h, err := r.handle("MODIFY_SRQ", r.srqs, "SRQ", c.SRQN)
	if err != nil {
		return err
	}
	_, err = r.write(uverbs.CmdModifySRQ, &uverbs.ModifySRQ{SRQHandle: h, AttrMask: uverbs.SRQAttrMask(c.Mask), MaxWR: uint32(max(c.MaxWR, 0)), SRQLimit: c.Limit},
		&uverbs.RXEModifySRQCmd{}, 0)
	return err
}
