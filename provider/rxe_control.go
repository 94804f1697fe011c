package provider

import (
	"syscall"

	"github.com/softnic/softnic/internal/kverbs"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/uverbs"
)

// rxeControl is the control plane of a kernel rxe device: UverbsControl's
// commands where they carry no driver data (QUERY_DEVICE, QUERY_PORT and
// the GID table, REG/DEREG_MR, MODIFY/QUERY/DESTROY_QP, DESTROY_CQ,
// DEALLOC_PD), and rxe's own GET_CONTEXT, ALLOC_PD, CREATE_CQ and
// CREATE_QP, whose driver responses are the mmap offsets of the queues
// (uverbs.md §5.3). The Transport is the kernel's (kverbs.Dev).
type rxeControl struct {
	*UverbsControl
	dev   *kverbs.Dev
	async *kverbs.EventFD
	mem   *shm.Region // the context's host memory, unmapped last
}

func newRXEControl(dev *kverbs.Dev, mem *shm.Region) *rxeControl {
	return &rxeControl{UverbsControl: NewUverbsControl(dev), dev: dev, mem: mem}
}

// GetContext is GET_CONTEXT in the write form, which also creates the
// context's async-event fd (rxe has no driver data).
func (r *rxeControl) GetContext() (mlx5.ContextResp, error) {
	const cmd = "GET_CONTEXT"
	b, err := r.write(uverbs.CmdGetContext, &uverbs.GetContext{Response: nominalResponse}, nil, uverbs.GetContextRespSize)
	if err != nil {
		return mlx5.ContextResp{}, err
	}
	var resp uverbs.GetContextResp
	if err := decodeResp(cmd, b, &resp, uverbs.GetContextRespSize); err != nil {
		return mlx5.ContextResp{}, err
	}
	if int32(resp.AsyncFD) < 0 {
		return mlx5.ContextResp{}, detail(ErrNotSupported, "uverbs %s: async fd %d", cmd, int32(resp.AsyncFD))
	}
	r.async = kverbs.NewEventFD(int(resp.AsyncFD))
	r.haveCtx = true
	return mlx5.ContextResp{}, nil
}

// AllocPD is ALLOC_PD; rxe returns no pdn, so the handle names the PD.
func (r *rxeControl) AllocPD() (mlx5.PDResp, error) {
	const cmd = "ALLOC_PD"
	b, err := r.write(uverbs.CmdAllocPD, &uverbs.AllocPD{Response: nominalResponse}, nil, uverbs.AllocPDRespSize)
	if err != nil {
		return mlx5.PDResp{}, err
	}
	var resp uverbs.AllocPDResp
	if err := decodeResp(cmd, b, &resp, uverbs.AllocPDRespSize); err != nil {
		return mlx5.PDResp{}, err
	}
	r.pds[uint32(resp.PDHandle)] = resp.PDHandle
	return mlx5.PDResp{PDN: uint32(resp.PDHandle)}, nil
}

// CreateCQ and CreateQP of mlx5.Control carry mlx5 rings: not for rxe,
// whose queues are the kernel's (createCQ, createQP).
func (r *rxeControl) CreateCQ(mlx5.CreateCQCmd) (mlx5.CreateCQResp, error) {
	return mlx5.CreateCQResp{}, r.local("CREATE_CQ", syscall.EOPNOTSUPP, "rxe CQs are created with their ring mmap info")
}

// CreateQP: see CreateCQ.
func (r *rxeControl) CreateQP(mlx5.CreateQPCmd) (mlx5.CreateQPResp, error) {
	return mlx5.CreateQPResp{}, r.local("CREATE_QP", syscall.EOPNOTSUPP, "rxe QPs are created with their ring mmap info")
}

// createCQ is CREATE_CQ of at least cqe entries; the handle names the CQ.
func (r *rxeControl) createCQ(cqe int, userHandle uint64, channel int32) (uverbs.CreateCQResp, uverbs.RXEMmapInfo, error) {
	const cmd = "CREATE_CQ"
	core := uverbs.CreateCQ{Response: nominalResponse, UserHandle: userHandle, CQE: uint32(cqe), CompChannel: channel}
	b, err := r.write(uverbs.CmdCreateCQ, &core, nil, uverbs.CreateCQRespSize+uverbs.RXECreateCQRespSize)
	if err != nil {
		return uverbs.CreateCQResp{}, uverbs.RXEMmapInfo{}, err
	}
	var resp uverbs.CreateCQResp
	var drv uverbs.RXECreateCQResp
	if err := decodeResp(cmd, b, &resp, uverbs.CreateCQRespSize); err != nil {
		return resp, drv.MI, err
	}
	if err := decodeResp(cmd, b[uverbs.CreateCQRespSize:], &drv, uverbs.RXECreateCQRespSize); err != nil {
		return resp, drv.MI, err
	}
	r.cqs[uint32(resp.CQHandle)] = uverbs.Handle(resp.CQHandle)
	return resp, drv.MI, nil
}

// createQP is CREATE_QP (rxe takes no driver data); it returns the
// kernel's caps and the mmap info of the RQ and SQ.
func (r *rxeControl) createQP(core uverbs.CreateQP) (uverbs.CreateQPResp, uverbs.RXECreateQPResp, error) {
	const cmd = "CREATE_QP"
	core.Response = nominalResponse
	b, err := r.write(uverbs.CmdCreateQP, &core, nil, uverbs.CreateQPRespSize+uverbs.RXECreateQPRespSize)
	if err != nil {
		return uverbs.CreateQPResp{}, uverbs.RXECreateQPResp{}, err
	}
	var resp uverbs.CreateQPResp
	var drv uverbs.RXECreateQPResp
	if err := decodeResp(cmd, b, &resp, uverbs.CreateQPRespSize); err != nil {
		return resp, drv, err
	}
	if err := decodeResp(cmd, b[uverbs.CreateQPRespSize:], &drv, uverbs.RXECreateQPRespSize); err != nil {
		return resp, drv, err
	}
	r.qps[resp.QPN] = uverbs.Handle(resp.QPHandle)
	return resp, drv, nil
}

// Close closes the async-event fd and the uverbs fd (the kernel destroys
// whatever is left of the context).
func (r *rxeControl) Close() error {
	if r.async != nil {
		_ = r.async.Close()
		r.async = nil
	}
	err := r.dev.Close()
	if r.mem != nil {
		_ = r.mem.Close() // after the fd: the kernel has dropped its pins
		r.mem = nil
	}
	return err
}
