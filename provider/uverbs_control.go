package provider

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// Transport carries one uverbs control command to a device and its
// response back (DESIGN.md §1: the control channel). req is a write()
// command (ib_uverbs_cmd_hdr, core request, mlx5 driver data) or an
// RDMA_VERBS_IOCTL request; the device writes its response into resp and
// returns its length, or an error: a *uverbs.Error (errno and reason) for a
// command it refused, anything else for a transport that failed. In one
// process uverbsdev.Server is a Transport (the loopback); the daemon's
// client carries the same bytes over its socket.
//
// Command buffers have no shared address space: the response address a
// write() carries is nominal (the response is resp), and an ioctl's
// PTR_OUT attributes name offsets in resp, after the copy of the
// attribute array the device returns at its head (package uverbsdev). A
// Transport onto the kernel's /dev/infiniband/uverbsN sends the same bytes
// after turning those nominal addresses into pointers into resp (the
// response word of a write(), ex_hdr.response, the PTR_OUT data words),
// as an ioctl proxy rewrites attribute pointers.
type Transport interface {
	Do(req, resp []byte) (int, error)
}

// nominalResponse is the response address UverbsControl puts in every
// command: the Transport carries the response buffer itself.
const nominalResponse = 1 << 12

// UverbsControl is the provider's control plane over uverbs bytes: an
// mlx5.Control (and mlx5.SRQControl, mlx5.PortControl) that encodes each
// call with the uverbs encoders, as a backend for /dev/infiniband/uverbsN
// would, sends it through a Transport and decodes the kernel's response.
// It keeps the handles the device returned, by firmware number (pdn,
// lkey, cqn, qpn, srqn), because mlx5.Control names objects by number.
//
// A refused command fails with an error that matches the provider's
// sentinel for its errno (errors.Is: ErrInvalidArg, ErrNoMemory, ErrBusy,
// ErrClosed, ErrOutOfRange, ErrNotSupported; see ErrnoSentinel), the
// syscall.Errno itself, and, with errors.As, the *uverbs.Error that names
// the command and carries the device's reason.
//
// Completion channels, event reads, CQ moderation and resizing, progress
// of an emulated device and its counters are not uverbs write commands
// (the kernel serves them through event fds, mmap and sysfs); a caller
// that has them combines an UverbsControl with those interfaces of the
// device (testbed does, for the loopback).
//
// It is not safe for concurrent use, like the provider's Context.
type UverbsControl struct {
	t    Transport
	req  [1024]byte
	resp [1024]byte

	haveCtx bool
	uctx    mlx5.ContextResp
	ucResp  uverbs.MLX5AllocUcontextResp
	uar     uverbs.Handle // the dynamic UAR of the context
	// Where the kernel lets the UAR be mapped (MMAP_OFFSET, MMAP_LENGTH
	// of the UAR allocation), for a kernel mlx5 backend.
	uarMmapOffset uint64
	uarMmapLength uint32
	// dynUAR: QPs name the context's UAR by page index
	// (MLX5_QP_FLAG_UAR_PAGE_INDEX), as libmlx5 does with dynamic UARs on
	// a kernel that returned no static bfregs. The emulated device
	// allocates bfregs itself.
	dynUAR bool

	pds, mrs, cqs, qps, srqs map[uint32]uverbs.Handle

	// Kernel event support (the mlx5 kernel backend, withEvents): the
	// user_handle given to each CQ, QP and SRQ, which the kernel's event
	// records carry, the async fd GET_CONTEXT created, and the completion
	// channel fd the next CREATE_CQ names.
	events    bool
	nextUH    uint64
	uhs       map[uhKey]uint64
	asyncFD   int32
	cqChannel int32
}

// uhKey names an object for its user_handle: 'c' CQ, 'q' QP, 's' SRQ.
type uhKey struct {
	kind byte
	num  uint32
}

// userHandle is the next user_handle to give the kernel for object k (0
// without event support); the object is recorded under it by created.
func (u *UverbsControl) userHandle() uint64 {
	if !u.events {
		return 0
	}
	u.nextUH++
	return u.nextUH
}

func (u *UverbsControl) created(kind byte, num uint32, uh uint64) {
	if uh != 0 {
		u.uhs[uhKey{kind, num}] = uh
	}
}

// UserHandle is the user_handle the kernel's events name object num of
// kind ('c', 'q', 's') by, 0 if none was given.
func (u *UverbsControl) UserHandle(kind byte, num uint32) uint64 {
	if u == nil {
		return 0
	}
	return u.uhs[uhKey{kind, num}]
}

// forget drops an object's user_handle once it is destroyed.
func (u *UverbsControl) forget(kind byte, num uint32) { delete(u.uhs, uhKey{kind, num}) }

// createCompChannel is CREATE_COMP_CHANNEL: the kernel returns an fd.
func (u *UverbsControl) createCompChannel() (int, error) {
	const cmd = "CREATE_COMP_CHANNEL"
	b, err := u.write(uverbs.CmdCreateCompChannel, &uverbs.CreateCompChannel{Response: nominalResponse}, nil, uverbs.CreateCompChannelRespSize)
	if err != nil {
		return -1, err
	}
	var resp uverbs.CreateCompChannelResp
	if err := decodeResp(cmd, b, &resp, uverbs.CreateCompChannelRespSize); err != nil {
		return -1, err
	}
	if int32(resp.FD) < 0 {
		return -1, detail(ErrNotSupported, "uverbs %s: fd %d", cmd, int32(resp.FD))
	}
	return int(resp.FD), nil
}

// NewUverbsControl returns a control plane that speaks uverbs through t.
func NewUverbsControl(t Transport) *UverbsControl {
	return &UverbsControl{t: t, pds: map[uint32]uverbs.Handle{}, mrs: map[uint32]uverbs.Handle{},
		cqs: map[uint32]uverbs.Handle{}, qps: map[uint32]uverbs.Handle{}, srqs: map[uint32]uverbs.Handle{},
		uhs: map[uhKey]uint64{}, asyncFD: -1, cqChannel: uverbs.NoCompChannel}
}

var (
	_ mlx5.Control     = (*UverbsControl)(nil)
	_ mlx5.SRQControl  = (*UverbsControl)(nil)
	_ mlx5.PortControl = (*UverbsControl)(nil)
)

// ErrnoSentinel is the provider sentinel an errno of a control command
// maps to (cmd: the uverbs command name, e.g. "MODIFY_QP").
//
//	EINVAL, ENOSPC, E2BIG, ERANGE,
//	ENODATA (an empty GID slot)        ErrInvalidArg (MODIFY_QP: ErrInvalidAttr)
//	ENOMEM, EAGAIN                     ErrNoMemory
//	EBUSY                              ErrBusy
//	ENOENT, EBADF, EIO                 ErrClosed (no such object, or the context is gone)
//	EFAULT                             ErrOutOfRange
//	EOPNOTSUPP, ENOSYS, EPROTONOSUPPORT, EPERM, EACCES  ErrNotSupported
//	anything else                      ErrInvalidArg
//
// A daemon's refusal of an ATTACH (cmd "ATTACH") maps ENODEV (no such
// device) to ErrNoDevice and EAGAIN (too many connections waiting to
// attach) to ErrBusy, the rest as above.
func ErrnoSentinel(cmd string, e syscall.Errno) error {
	if cmd == "ATTACH" {
		// The daemon's refusals of an ATTACH (serve): no such device,
		// or too many connections waiting to attach (try again).
		switch e {
		case syscall.ENODEV:
			return ErrNoDevice
		case syscall.EAGAIN:
			return ErrBusy
		}
	}
	switch e {
	case syscall.EINVAL, syscall.ENOSPC, syscall.E2BIG, syscall.ERANGE, syscall.ENODATA:
		if cmd == "MODIFY_QP" || cmd == "EX_MODIFY_QP" {
			return ErrInvalidAttr
		}
		return ErrInvalidArg
	case syscall.ENOMEM, syscall.EAGAIN:
		return ErrNoMemory
	case syscall.EBUSY:
		return ErrBusy
	case syscall.ENOENT, syscall.EBADF, syscall.EIO:
		return ErrClosed
	case syscall.EFAULT:
		return ErrOutOfRange
	case syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EPROTONOSUPPORT, syscall.EPERM, syscall.EACCES:
		return ErrNotSupported
	}
	return ErrInvalidArg
}

// fail wraps a refusal or a transport failure of command cmd.
func (u *UverbsControl) fail(cmd string, err error) error {
	if errors.Is(err, ErrDeviceGone) {
		// The transport lost the device (a daemon that died or closed
		// the connection): that is the error, whatever errno its socket
		// met on the way (EPIPE, ECONNRESET), which is no refusal of
		// the command.
		return fmt.Errorf("uverbs %s: %w", cmd, err)
	}
	ue := uverbs.ErrorOf(cmd, err)
	if ue == nil {
		return fmt.Errorf("%w: uverbs %s: control transport: %w", ErrClosed, cmd, err)
	}
	if ue.Cmd == "" {
		// A refusal from a daemon (socketTransport) carries the errno and
		// the reason: name the command here. A daemon from before this
		// one sent its whole message ("uverbs: CMD: errno: reason"), so
		// that prefix is cut when it is there.
		r := *ue
		r.Cmd = cmd
		r.Reason = strings.TrimPrefix(r.Reason, "uverbs: "+cmd+": "+r.Errno.Error()+": ")
		ue = &r
	}
	return fmt.Errorf("%w: %w", ErrnoSentinel(cmd, ue.Errno), ue)
}

// local is a refusal decided before anything is sent (an unknown number,
// a value the ABI cannot carry).
func (u *UverbsControl) local(cmd string, errno syscall.Errno, format string, args ...any) error {
	return u.fail(cmd, &uverbs.Error{Cmd: cmd, Errno: errno, Reason: fmt.Sprintf(format, args...)})
}

// noTransport refuses a command of a UverbsControl that has no transport
// to send it on: a nil one, a zero value the application built instead of
// calling NewUverbsControl, or one made with a nil Transport.
func (u *UverbsControl) noTransport(cmd string) error {
	if u == nil || u.t == nil {
		return fmt.Errorf("%w: uverbs %s: no control transport (use NewUverbsControl with a Transport)", ErrClosed, cmd)
	}
	return nil
}

// write sends a legacy write() command and returns its response.
func (u *UverbsControl) write(cmd uverbs.Command, core, drv uverbs.Struct, outLen int) ([]byte, error) {
	if err := u.noTransport(cmd.String()); err != nil {
		return nil, err
	}
	n, err := uverbs.EncodeWrite(u.req[:], cmd, core, drv, outLen)
	if err != nil {
		return nil, u.fail(cmd.String(), err)
	}
	m, err := u.t.Do(u.req[:n], u.resp[:outLen])
	if err != nil {
		return nil, u.fail(cmd.String(), err)
	}
	return u.resp[:m], nil
}

// decode decodes st from b, zero-filling what the device did not write (a
// response is copied as min(outlen, sizeof)); a response shorter than min
// is the device failing the ABI.
func decodeResp(cmd string, b []byte, st uverbs.Struct, min int) error {
	if len(b) < min {
		return detail(ErrNotSupported, "uverbs %s: response of %d bytes, need %d", cmd, len(b), min)
	}
	n := st.Size()
	if len(b) < n {
		b = append(make([]byte, 0, n), b...)[:n] // the rare short response
	}
	if err := st.Decode(b[:n]); err != nil {
		return detail(ErrNotSupported, "uverbs %s: response: %v", cmd, err)
	}
	return nil
}

// handle looks up the handle of a firmware number.
func (u *UverbsControl) handle(cmd string, m map[uint32]uverbs.Handle, what string, num uint32) (uverbs.Handle, error) {
	h, ok := m[num]
	if !ok {
		return 0, u.local(cmd, syscall.ENOENT, "no %s %#x on this context", what, num)
	}
	return h, nil
}

// destroy sends cmd, built by req from the handle of the object numbered
// num in m, and forgets the number once the device has agreed.
func (u *UverbsControl) destroy(cmd uverbs.Command, m map[uint32]uverbs.Handle, what string, num uint32, outLen int,
	req func(uverbs.Handle) uverbs.Struct) error {
	h, err := u.handle(cmd.String(), m, what, num)
	if err != nil {
		return err
	}
	if _, err := u.write(cmd, req(h), nil, outLen); err != nil {
		return err
	}
	delete(m, num)
	return nil
}

// ---------------------------------------------------------------- context and device

// GetContext is GET_CONTEXT with libmlx5's driver data (asking for dynamic
// UARs), then MLX5_IB_METHOD_UAR_OBJ_ALLOC for the context's first UAR,
// whose page id is the UAR index CQs and QPs then name.
func (u *UverbsControl) GetContext() (mlx5.ContextResp, error) {
	const cmd = "GET_CONTEXT"
	core := uverbs.GetContext{Response: nominalResponse}
	drv := uverbs.MLX5AllocUcontextReqV2{MaxCQEVersion: 1, LibCaps: uverbs.MLX5LibCap4KUAR | uverbs.MLX5LibCapDynUAR}
	b, err := u.write(uverbs.CmdGetContext, &core, &drv, uverbs.GetContextRespSize+uverbs.MLX5AllocUcontextRespSize)
	if err != nil {
		return mlx5.ContextResp{}, err
	}
	var r uverbs.MLX5AllocUcontextResp
	if err := decodeResp(cmd, b[min(len(b), uverbs.GetContextRespSize):], &r, 48); err != nil {
		return mlx5.ContextResp{}, err
	}
	if u.events {
		// The write form's GET_CONTEXT creates the async-event fd.
		var core uverbs.GetContextResp
		if err := decodeResp(cmd, b, &core, uverbs.GetContextRespSize); err != nil {
			return mlx5.ContextResp{}, err
		}
		u.asyncFD = int32(core.AsyncFD)
	}
	// The UAR: its outputs go after the copy of the attribute array.
	const hdr = uverbs.IoctlHdrSize + 5*uverbs.AttrSize
	a := uverbs.MLX5UARAlloc{Type: uverbs.MLX5UARTypeBF, MmapOffset: hdr, MmapLength: hdr + 8, PageID: hdr + 12}
	io, err := a.Encode(u.req[:])
	if err != nil {
		return mlx5.ContextResp{}, u.fail("MLX5_IB_METHOD_UAR_OBJ_ALLOC", err)
	}
	n, err := u.t.Do(io.Bytes(), u.resp[:hdr+16])
	if err != nil {
		return mlx5.ContextResp{}, u.fail("MLX5_IB_METHOD_UAR_OBJ_ALLOC", err)
	}
	if n < hdr+16 {
		return mlx5.ContextResp{}, detail(ErrNotSupported, "uverbs MLX5_IB_METHOD_UAR_OBJ_ALLOC: response of %d bytes", n)
	}
	out := uverbs.IoctlHdr(u.resp[:hdr])
	u.uar = uverbs.Handle(out.Attr(0).Data())
	page := binary.NativeEndian.Uint32(u.resp[hdr+12:])
	u.uarMmapOffset = binary.NativeEndian.Uint64(u.resp[hdr:])
	u.uarMmapLength = binary.NativeEndian.Uint32(u.resp[hdr+8:])
	u.ucResp, u.haveCtx = r, true
	bfregs := int(ctxBFRegs(&r))
	u.uctx = mlx5.ContextResp{UARIndex: page, NumUARs: bfregs / 2, TotBFRegs: bfregs,
		BFRegSize: int(r.BFRegSize), CQEVersion: int(r.CQEVersion)}
	return u.uctx, nil
}

// ctxBFRegs is how many bfregs the context has: tot_bfregs, or for a
// context with dynamic UARs, where mlx5_ib answers tot_bfregs 0, the
// num_dyn_bfregs it may allocate.
func ctxBFRegs(r *uverbs.MLX5AllocUcontextResp) uint32 { return max(r.TotBFRegs, r.NumDynBFRegs) }

// QueryDevice is QUERY_DEVICE, with QUERY_PORT (the active MTU) and
// UVERBS_METHOD_QUERY_GID_ENTRY (the RoCE GID) of port 1 and the GET_CONTEXT
// answer (descriptor sizes, bfregs, CQE version). The MAC is the node
// GUID's (a modified EUI-64 of it). No uverbs answer carries a device-wide
// inline limit (ibv_device_attr has none; the kernel checks
// max_inline_data at CREATE_QP): MaxInline is what one largest send WQE
// holds, max_sq_desc_sz less the control segment and the inline header.
// A QP's own limit is CREATE_QP's answer (CreateQPResp.MaxInline).
func (u *UverbsControl) QueryDevice() (mlx5.DeviceAttr, error) {
	if err := u.noTransport("QUERY_DEVICE"); err != nil {
		return mlx5.DeviceAttr{}, err
	}
	const cmd = "QUERY_DEVICE"
	if !u.haveCtx {
		return mlx5.DeviceAttr{}, u.local(cmd, syscall.EINVAL, "no user context: GET_CONTEXT first")
	}
	b, err := u.write(uverbs.CmdQueryDevice, &uverbs.QueryDevice{Response: nominalResponse}, nil, uverbs.QueryDeviceRespSize)
	if err != nil {
		return mlx5.DeviceAttr{}, err
	}
	var r uverbs.QueryDeviceResp
	if err := decodeResp(cmd, b, &r, uverbs.QueryDeviceRespSize); err != nil {
		return mlx5.DeviceAttr{}, err
	}
	p, err := u.QueryPort(1)
	if err != nil {
		return mlx5.DeviceAttr{}, err
	}
	g := r.NodeGUID
	uc := &u.ucResp
	a := mlx5.DeviceAttr{
		FWVersion: fmt.Sprintf("%d.%d.%04d", r.FWVer>>32, r.FWVer>>16&0xffff, r.FWVer&0xffff),
		VendorID:  r.VendorID, VendorPartID: r.VendorPartID, HWVer: r.HWVer,
		MaxCQ: int(r.MaxCQ), MaxQP: int(r.MaxQP), MaxQPWR: int(r.MaxQPWR), MaxSGE: int(r.MaxSGE), MaxSRQSGE: int(r.MaxSRQSGE), MaxCQE: int(r.MaxCQE),
		MaxMR: int(r.MaxMR), MaxPD: int(r.MaxPD), MaxMRSize: r.MaxMRSize,
		// The inline data a send WQE of every QP type holds: its fixed
		// part is at most a UD QP's (ctrl + datagram segment).
		MaxInline:   max(int(uc.MaxSQDescSz)-max(rcSQOverhead, udSQOverhead)-mlx5.InlineHdrSize, 0),
		MaxSQDescSz: int(uc.MaxSQDescSz), MaxQPRdAtomic: int(r.MaxQPRdAtom),
		BFRegSize: int(uc.BFRegSize), BFBufSize: int(uc.BFRegSize) / 2, NumUARs: int(ctxBFRegs(uc)) / 2,
		ActiveMTU: p.ActiveMTU, CQEVersion: int(uc.CQEVersion),
		MAC: [6]byte{byte(g>>56) ^ 2, byte(g >> 48), byte(g >> 40), byte(g >> 16), byte(g >> 8), byte(g)},
	}
	if len(p.GIDs) > 0 {
		a.GID = p.GIDs[0]
	}
	return a, nil
}

// QueryPort is QUERY_PORT and one UVERBS_METHOD_QUERY_GID_ENTRY per GID.
func (u *UverbsControl) QueryPort(port int) (mlx5.PortAttr, error) {
	const cmd = "QUERY_PORT"
	if port < 0 || port > 0xff {
		return mlx5.PortAttr{}, u.local(cmd, syscall.EINVAL, "port %d", port)
	}
	b, err := u.write(uverbs.CmdQueryPort, &uverbs.QueryPort{Response: nominalResponse, PortNum: uint8(port)}, nil, uverbs.QueryPortRespSize)
	if err != nil {
		return mlx5.PortAttr{}, err
	}
	var r uverbs.QueryPortResp
	if err := decodeResp(cmd, b, &r, uverbs.QueryPortRespSize); err != nil {
		return mlx5.PortAttr{}, err
	}
	a := mlx5.PortAttr{State: uint8(r.State), PhysState: r.PhysState, MaxMTU: r.MaxMTU, ActiveMTU: r.ActiveMTU,
		MaxMsgSize: uint64(r.MaxMsgSize)}
	for i := uint32(0); i < r.GIDTblLen && i < 256; i++ {
		gid, err := u.queryGID(uint32(port), i)
		if err != nil && !emptyGIDSlot(err) {
			return mlx5.PortAttr{}, err
		}
		a.GIDs = append(a.GIDs, gid) // an empty slot reads as zeros, as in sysfs
	}
	return a, nil
}

// emptyGIDSlot: a kernel answers QUERY_GID_ENTRY of an unused slot of its
// GID table with ENODATA (rdma_get_gid_attr); rxe's table has many slots
// of which a few are in use.
func emptyGIDSlot(err error) bool { return errors.Is(err, syscall.ENODATA) }

func (u *UverbsControl) queryGID(port, index uint32) ([16]byte, error) {
	const cmd = "UVERBS_METHOD_QUERY_GID_ENTRY"
	const hdr = uverbs.IoctlHdrSize + 4*uverbs.AttrSize
	if err := u.noTransport(cmd); err != nil {
		return [16]byte{}, err
	}
	io, err := uverbs.QueryGIDEntryIoctl(u.req[:], port, index, hdr, uverbs.DriverMLX5)
	if err != nil {
		return [16]byte{}, u.fail(cmd, err)
	}
	n, err := u.t.Do(io.Bytes(), u.resp[:hdr+uverbs.GIDEntrySize])
	if err != nil {
		return [16]byte{}, u.fail(cmd, err)
	}
	if n < hdr+uverbs.GIDEntrySize {
		return [16]byte{}, detail(ErrNotSupported, "uverbs %s: response of %d bytes", cmd, n)
	}
	var e uverbs.GIDEntry
	if err := e.Decode(u.resp[hdr:n]); err != nil {
		return [16]byte{}, u.fail(cmd, err)
	}
	return e.GID, nil
}

// ---------------------------------------------------------------- PD and MR

// AllocPD is ALLOC_PD; mlx5 returns the pdn after the handle.
func (u *UverbsControl) AllocPD() (mlx5.PDResp, error) {
	const cmd = "ALLOC_PD"
	b, err := u.write(uverbs.CmdAllocPD, &uverbs.AllocPD{Response: nominalResponse}, nil, uverbs.AllocPDRespSize+uverbs.MLX5AllocPDRespSize)
	if err != nil {
		return mlx5.PDResp{}, err
	}
	var r uverbs.AllocPDResp
	var d uverbs.MLX5AllocPDResp
	if err := decodeResp(cmd, b, &r, uverbs.AllocPDRespSize); err != nil {
		return mlx5.PDResp{}, err
	}
	if err := decodeResp(cmd, b[uverbs.AllocPDRespSize:], &d, uverbs.MLX5AllocPDRespSize); err != nil {
		return mlx5.PDResp{}, err
	}
	u.pds[d.PDN] = r.PDHandle
	return mlx5.PDResp{PDN: d.PDN}, nil
}

// DeallocPD is DEALLOC_PD.
func (u *UverbsControl) DeallocPD(pdn uint32) error {
	if err := u.noTransport("DEALLOC_PD"); err != nil {
		return err
	}
	return u.destroy(uverbs.CmdDeallocPD, u.pds, "PD", pdn, 0, func(h uverbs.Handle) uverbs.Struct {
		return &uverbs.DeallocPD{PDHandle: h}
	})
}

// RegMR is REG_MR.
func (u *UverbsControl) RegMR(c mlx5.RegMRCmd) (mlx5.RegMRResp, error) {
	if err := u.noTransport("REG_MR"); err != nil {
		return mlx5.RegMRResp{}, err
	}
	const cmd = "REG_MR"
	pd, err := u.handle(cmd, u.pds, "PD", c.PDN)
	if err != nil {
		return mlx5.RegMRResp{}, err
	}
	core := uverbs.RegMR{Response: nominalResponse, Start: c.Addr, Length: c.Length, HCAVA: c.HCAVA, PDHandle: pd, AccessFlags: uverbs.Access(c.Access)}
	b, err := u.write(uverbs.CmdRegMR, &core, nil, uverbs.RegMRRespSize)
	if err != nil {
		return mlx5.RegMRResp{}, err
	}
	var r uverbs.RegMRResp
	if err := decodeResp(cmd, b, &r, uverbs.RegMRRespSize); err != nil {
		return mlx5.RegMRResp{}, err
	}
	u.mrs[r.LKey] = r.MRHandle
	return mlx5.RegMRResp{LKey: r.LKey, RKey: r.RKey}, nil
}

// DeregMR is DEREG_MR.
func (u *UverbsControl) DeregMR(lkey uint32) error {
	if err := u.noTransport("DEREG_MR"); err != nil {
		return err
	}
	return u.destroy(uverbs.CmdDeregMR, u.mrs, "MR", lkey, 0, func(h uverbs.Handle) uverbs.Struct {
		return &uverbs.DeregMR{MRHandle: h}
	})
}

// ---------------------------------------------------------------- CQ

// CreateCQ is CREATE_CQ with mlx5_ib_create_cq: cqe is the ring size less
// one (the kernel rounds cqe+1 up to a power of two), the arm doorbell's
// UAR named by page index.
func (u *UverbsControl) CreateCQ(c mlx5.CreateCQCmd) (mlx5.CreateCQResp, error) {
	if err := u.noTransport("CREATE_CQ"); err != nil {
		return mlx5.CreateCQResp{}, err
	}
	const cmd = "CREATE_CQ"
	if c.UARIndex > 0xffff || c.CQESize < 0 || c.Entries < 0 {
		return mlx5.CreateCQResp{}, u.local(cmd, syscall.EINVAL, "UAR %d, cqe size %d, %d entries", c.UARIndex, c.CQESize, c.Entries)
	}
	uh := u.userHandle()
	core := uverbs.CreateCQ{Response: nominalResponse, UserHandle: uh, CQE: uint32(c.Entries - 1), CompChannel: u.cqChannel}
	u.cqChannel = uverbs.NoCompChannel // the channel names one CREATE_CQ only
	drv := uverbs.MLX5CreateCQ{BufAddr: c.BufAddr, DBAddr: c.DBAddr, CQESize: uint32(c.CQESize),
		Flags: uverbs.MLX5CreateCQFlagUARPageIndex, UARPageIndex: uint16(c.UARIndex)}
	b, err := u.write(uverbs.CmdCreateCQ, &core, &drv, uverbs.CreateCQRespSize+uverbs.MLX5CreateCQRespSize)
	if err != nil {
		return mlx5.CreateCQResp{}, err
	}
	var r uverbs.CreateCQResp
	var d uverbs.MLX5CreateCQResp
	if err := decodeResp(cmd, b, &r, uverbs.CreateCQRespSize); err != nil {
		return mlx5.CreateCQResp{}, err
	}
	if err := decodeResp(cmd, b[uverbs.CreateCQRespSize:], &d, 4); err != nil {
		return mlx5.CreateCQResp{}, err
	}
	u.cqs[d.CQN] = r.CQHandle
	u.created('c', d.CQN, uh)
	return mlx5.CreateCQResp{CQN: d.CQN}, nil
}

// DestroyCQ is DESTROY_CQ.
func (u *UverbsControl) DestroyCQ(cqn uint32) error {
	if err := u.noTransport("DESTROY_CQ"); err != nil {
		return err
	}
	err := u.destroy(uverbs.CmdDestroyCQ, u.cqs, "CQ", cqn, uverbs.DestroyCQRespSize, func(h uverbs.Handle) uverbs.Struct {
		return &uverbs.DestroyCQ{Response: nominalResponse, CQHandle: h}
	})
	if err == nil {
		u.forget('c', cqn)
	}
	return err
}

// ---------------------------------------------------------------- QP

// CreateQP is CREATE_QP with mlx5_ib_create_qp. The mlx5.Control command
// carries queue sizes, not ibv_qp_cap: the core caps go as what the device
// sizes from (max_recv_wr the RQ's WQEs, max_inline_data; the SGE counts
// 0), as the kernel takes the queues from the driver data. The response's
// bfreg_index gives the doorbell/BlueFlame register: two bfregs per UAR
// page from the context's first UAR, at UAR+0x800+n*bf_reg_size.
func (u *UverbsControl) CreateQP(c mlx5.CreateQPCmd) (mlx5.CreateQPResp, error) {
	if err := u.noTransport("CREATE_QP"); err != nil {
		return mlx5.CreateQPResp{}, err
	}
	const cmd = "CREATE_QP"
	typ, ok := uverbs.QPTypeFromMLX5(c.Type)
	if !ok {
		return mlx5.CreateQPResp{}, u.local(cmd, syscall.EINVAL, "QP type %d", c.Type)
	}
	pd, err := u.handle(cmd, u.pds, "PD", c.PDN)
	if err != nil {
		return mlx5.CreateQPResp{}, err
	}
	scq, err := u.handle(cmd, u.cqs, "CQ", c.SendCQN)
	if err != nil {
		return mlx5.CreateQPResp{}, err
	}
	rcq, err := u.handle(cmd, u.cqs, "CQ", c.RecvCQN)
	if err != nil {
		return mlx5.CreateQPResp{}, err
	}
	if c.SQWQECnt < 0 || c.RQWQECnt < 0 || c.RQWQEShift < 0 || c.MaxInline < 0 || c.SQWQECnt > 1<<30 || c.RQWQECnt > 1<<30 || c.RQWQEShift > 31 {
		return mlx5.CreateQPResp{}, u.local(cmd, syscall.EINVAL, "SQ %d WQEBBs, RQ %d x 2^%d, inline %d", c.SQWQECnt, c.RQWQECnt, c.RQWQEShift, c.MaxInline)
	}
	uh := u.userHandle()
	core := uverbs.CreateQP{Response: nominalResponse, UserHandle: uh, PDHandle: pd, SendCQHandle: scq, RecvCQHandle: rcq,
		MaxRecvWR: uint32(c.RQWQECnt), MaxInlineData: uint32(c.MaxInline), QPType: typ}
	if c.SigAll {
		core.SQSigAll = 1
	}
	if c.SRQN != 0 {
		if core.SRQHandle, err = u.handle(cmd, u.srqs, "SRQ", c.SRQN); err != nil {
			return mlx5.CreateQPResp{}, err
		}
		core.IsSRQ = 1
	}
	drv := uverbs.MLX5CreateQP{BufAddr: c.BufAddr, DBAddr: c.DBAddr, SQWQECount: uint32(c.SQWQECnt), RQWQECount: uint32(c.RQWQECnt),
		RQWQEShift: uint32(c.RQWQEShift)}
	switch {
	case u.dynUAR:
		drv.Flags |= uverbs.MLX5QPFlagUARPageIndex
		drv.BFRegIndex = u.uctx.UARIndex
	case c.BFRegIndex >= 0:
		drv.Flags |= uverbs.MLX5QPFlagBFRegIndex
		drv.BFRegIndex = uint32(c.BFRegIndex)
	}
	b, err := u.write(uverbs.CmdCreateQP, &core, &drv, uverbs.CreateQPRespSize+uverbs.MLX5CreateQPRespSize)
	if err != nil {
		return mlx5.CreateQPResp{}, err
	}
	var r uverbs.CreateQPResp
	var d uverbs.MLX5CreateQPResp
	if err := decodeResp(cmd, b, &r, uverbs.CreateQPRespSize); err != nil {
		return mlx5.CreateQPResp{}, err
	}
	if err := decodeResp(cmd, b[uverbs.CreateQPRespSize:], &d, 4); err != nil {
		return mlx5.CreateQPResp{}, err
	}
	u.qps[r.QPN] = r.QPHandle
	u.created('q', r.QPN, uh)
	bfs := uint64(u.uctx.BFRegSize)
	resp := mlx5.CreateQPResp{QPN: r.QPN, BFRegIndex: int(d.BFRegIndex),
		BFRegOffset: uint64(u.uctx.UARIndex+d.BFRegIndex/2)*mlx5.UARPageSize + mlx5.UARBFRegOffset + uint64(d.BFRegIndex%2)*bfs}
	if u.dynUAR {
		// The QP rings its doorbell (and BlueFlame) through the first
		// bfreg of the UAR it named (uverbs.md §4.4).
		resp.BFRegOffset = uint64(u.uctx.UARIndex)*mlx5.UARPageSize + mlx5.UARBFRegOffset
	}
	if bfs > 0 {
		resp.BFBufSize = int(bfs / 2)
	}
	resp.MaxInline, resp.HasMaxInline = int(min(r.MaxInlineData, 1<<30)), true
	return resp, nil
}

// ModifyQP is MODIFY_QP. Every field travels, as in the direct interface
// (the device reads those the mask names); the destination MAC does not
// (the kernel resolves it from the DGID), and a UDP source port of its own
// cannot be asked for (ErrNotSupported).
func (u *UverbsControl) ModifyQP(c mlx5.ModifyQPCmd) error {
	if err := u.noTransport("MODIFY_QP"); err != nil {
		return err
	}
	const cmd = "MODIFY_QP"
	h, err := u.handle(cmd, u.qps, "QP", c.QPN)
	if err != nil {
		return err
	}
	if c.AV.UDPSPort != 0 {
		return u.local(cmd, syscall.EOPNOTSUPP, "ib_uverbs_qp_dest has no UDP source port (asked %d)", c.AV.UDPSPort)
	}
	state, okS := uverbs.QPStateFromMLX5(c.State)
	cur, okC := uverbs.QPStateFromMLX5(c.CurState)
	if c.Mask&mlx5.AttrState != 0 && !okS || c.Mask&mlx5.AttrCurState != 0 && !okC {
		return u.local(cmd, syscall.EINVAL, "state %d / cur_state %d has no IB value", c.State, c.CurState)
	}
	m := uverbs.ModifyQP{
		Dest: uverbs.QPDest{DGID: c.AV.DGID, FlowLabel: c.AV.FlowLabel, SGIDIndex: c.AV.SGIDIndex, HopLimit: c.AV.HopLimit,
			TrafficClass: c.AV.TrafficClass, PortNum: c.Port},
		QPHandle: h, AttrMask: uverbs.QPAttrMask(c.Mask), QKey: c.QKey, RQPSN: c.RQPSN, SQPSN: c.SQPSN, DestQPNum: c.DestQPN,
		QPAccessFlags: uverbs.Access(c.AccessFlags), PKeyIndex: c.PKeyIndex, QPState: state, CurQPState: cur,
		PathMTU: c.PathMTU, MaxRdAtomic: c.MaxQPRdAtomic, MaxDestRdAtomic: c.MaxDestRdAtomic,
		MinRNRTimer: c.MinRNRTimer, PortNum: c.Port, Timeout: c.Timeout, RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry,
	}
	if c.Mask&mlx5.AttrAV != 0 {
		m.Dest.IsGlobal = 1
		if m.Dest.PortNum == 0 {
			// ah_attr.port_num must name a port (the kernel refuses 0
			// with EINVAL, rdma_is_port_valid); an RTR move carries no
			// PORT attribute, so name the device's one port, as
			// ibv_rc_pingpong does with ib_port.
			m.Dest.PortNum = 1
		}
	}
	_, err = u.write(uverbs.CmdModifyQP, &m, nil, 0)
	return err
}

// QueryQP is QUERY_QP.
func (u *UverbsControl) QueryQP(qpn uint32) (mlx5.QPAttr, error) {
	if err := u.noTransport("QUERY_QP"); err != nil {
		return mlx5.QPAttr{}, err
	}
	const cmd = "QUERY_QP"
	h, err := u.handle(cmd, u.qps, "QP", qpn)
	if err != nil {
		return mlx5.QPAttr{}, err
	}
	const all = uverbs.QPAttrState | uverbs.QPAttrPathMTU | uverbs.QPAttrDestQPN | uverbs.QPAttrSQPSN | uverbs.QPAttrRQPSN
	b, err := u.write(uverbs.CmdQueryQP, &uverbs.QueryQP{Response: nominalResponse, QPHandle: h, AttrMask: all}, nil, uverbs.QueryQPRespSize)
	if err != nil {
		return mlx5.QPAttr{}, err
	}
	var r uverbs.QueryQPResp
	if err := decodeResp(cmd, b, &r, uverbs.QueryQPRespSize); err != nil {
		return mlx5.QPAttr{}, err
	}
	st, ok := r.QPState.MLX5()
	if !ok {
		return mlx5.QPAttr{}, detail(ErrNotSupported, "uverbs %s: qp_state %d", cmd, r.QPState)
	}
	a := mlx5.QPAttr{State: st, PathMTU: r.PathMTU, DestQPN: r.DestQPNum, SQPSN: r.SQPSN, RQPSN: r.RQPSN,
		AccessFlags: uint32(r.QPAccessFlags), QKey: r.QKey, PKeyIndex: r.PKeyIndex, Port: r.PortNum,
		MaxRdAtomic: r.MaxRdAtomic, MaxDestRdAtomic: r.MaxDestRdAtomic, MinRNRTimer: r.MinRNRTimer,
		Timeout: r.Timeout, RetryCnt: r.RetryCnt, RNRRetry: r.RNRRetry, SigAll: r.SQSigAll != 0,
		MaxRecvWR: r.MaxRecvWR, MaxRecvSGE: r.MaxRecvSGE}
	if d := r.Dest; d.IsGlobal != 0 {
		a.AV, a.HasAV = mlx5.AV{DGID: d.DGID, SGIDIndex: d.SGIDIndex, HopLimit: d.HopLimit, TrafficClass: d.TrafficClass, FlowLabel: d.FlowLabel}, true
	}
	return a, nil
}

// DestroyQP is DESTROY_QP.
func (u *UverbsControl) DestroyQP(qpn uint32) error {
	if err := u.noTransport("DESTROY_QP"); err != nil {
		return err
	}
	err := u.destroy(uverbs.CmdDestroyQP, u.qps, "QP", qpn, uverbs.DestroyQPRespSize, func(h uverbs.Handle) uverbs.Struct {
		return &uverbs.DestroyQP{Response: nominalResponse, QPHandle: h}
	})
	if err == nil {
		u.forget('q', qpn)
	}
	return err
}

// ---------------------------------------------------------------- SRQ

// CreateSRQ is CREATE_SRQ with mlx5_ib_create_srq: max_wr is the ring less
// one and max_sge what the stride holds after the next segment (the
// kernel sizes the ring and the stride back from them).
func (u *UverbsControl) CreateSRQ(c mlx5.CreateSRQCmd) (mlx5.CreateSRQResp, error) {
	if err := u.noTransport("CREATE_SRQ"); err != nil {
		return mlx5.CreateSRQResp{}, err
	}
	const cmd = "CREATE_SRQ"
	pd, err := u.handle(cmd, u.pds, "PD", c.PDN)
	if err != nil {
		return mlx5.CreateSRQResp{}, err
	}
	if c.WQECnt <= 0 || c.WQECnt > 1<<30 || c.WQEShift < 4 || c.WQEShift > 20 {
		return mlx5.CreateSRQResp{}, u.local(cmd, syscall.EINVAL, "%d WQEs of 2^%d bytes", c.WQECnt, c.WQEShift)
	}
	uh := u.userHandle()
	core := uverbs.CreateSRQ{Response: nominalResponse, UserHandle: uh, PDHandle: pd, MaxWR: uint32(c.WQECnt - 1),
		MaxSGE: uint32(mlx5.SRQStrideSGEs(1 << c.WQEShift)), SRQLimit: c.Limit}
	drv := uverbs.MLX5CreateSRQ{BufAddr: c.BufAddr, DBAddr: c.DBAddr}
	b, err := u.write(uverbs.CmdCreateSRQ, &core, &drv, uverbs.CreateSRQRespSize+uverbs.MLX5CreateSRQRespSize)
	if err != nil {
		return mlx5.CreateSRQResp{}, err
	}
	var r uverbs.CreateSRQResp
	if err := decodeResp(cmd, b, &r, uverbs.CreateSRQRespSize); err != nil {
		return mlx5.CreateSRQResp{}, err
	}
	u.srqs[r.SRQN] = r.SRQHandle
	u.created('s', r.SRQN, uh)
	return mlx5.CreateSRQResp{SRQN: r.SRQN}, nil
}

// ModifySRQ is MODIFY_SRQ.
func (u *UverbsControl) ModifySRQ(c mlx5.ModifySRQCmd) error {
	if err := u.noTransport("MODIFY_SRQ"); err != nil {
		return err
	}
	h, err := u.handle("MODIFY_SRQ", u.srqs, "SRQ", c.SRQN)
	if err != nil {
		return err
	}
	if c.MaxWR < 0 {
		return u.local("MODIFY_SRQ", syscall.EINVAL, "max_wr %d", c.MaxWR)
	}
	_, err = u.write(uverbs.CmdModifySRQ, &uverbs.ModifySRQ{SRQHandle: h, AttrMask: uverbs.SRQAttrMask(c.Mask), MaxWR: uint32(c.MaxWR), SRQLimit: c.Limit}, nil, 0)
	return err
}

// QuerySRQ is QUERY_SRQ.
func (u *UverbsControl) QuerySRQ(srqn uint32) (mlx5.SRQAttr, error) {
	if err := u.noTransport("QUERY_SRQ"); err != nil {
		return mlx5.SRQAttr{}, err
	}
	const cmd = "QUERY_SRQ"
	h, err := u.handle(cmd, u.srqs, "SRQ", srqn)
	if err != nil {
		return mlx5.SRQAttr{}, err
	}
	b, err := u.write(uverbs.CmdQuerySRQ, &uverbs.QuerySRQ{Response: nominalResponse, SRQHandle: h}, nil, uverbs.QuerySRQRespSize)
	if err != nil {
		return mlx5.SRQAttr{}, err
	}
	var r uverbs.QuerySRQResp
	if err := decodeResp(cmd, b, &r, 12); err != nil {
		return mlx5.SRQAttr{}, err
	}
	return mlx5.SRQAttr{MaxWR: int(r.MaxWR), MaxSGE: int(r.MaxSGE), Limit: r.SRQLimit}, nil
}

// DestroySRQ is DESTROY_SRQ.
func (u *UverbsControl) DestroySRQ(srqn uint32) error {
	if err := u.noTransport("DESTROY_SRQ"); err != nil {
		return err
	}
	err := u.destroy(uverbs.CmdDestroySRQ, u.srqs, "SRQ", srqn, uverbs.DestroySRQRespSize, func(h uverbs.Handle) uverbs.Struct {
		return &uverbs.DestroySRQ{Response: nominalResponse, SRQHandle: h}
	})
	if err == nil {
		u.forget('s', srqn)
	}
	return err
}
