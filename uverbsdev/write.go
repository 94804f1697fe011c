package uverbsdev

import (
	"fmt"
	"math/bits"
	"net/netip"
	"syscall"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// maxDriver bounds the driver data a command may carry (the largest mlx5
// request struct is 56 bytes; the kernel accepts longer input whose extra
// bytes are zero).
const maxDriver = 256

// writeFunc serves one parsed write() command. name is the command's name
// for errors; out is the response buffer: out_words' worth for a legacy
// command, the core response then the driver response for an extended one.
type writeFunc func(s *Server, name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error)

// noResp is a writeFunc for a command that writes no response.
func noResp(f func(*Server, string, *uverbs.WriteMsg) (int, *uverbs.Error)) writeFunc {
	return func(s *Server, name string, m *uverbs.WriteMsg, _ []byte) (int, *uverbs.Error) { return f(s, name, m) }
}

// writeCmds are the legacy commands write serves and writeExCmds the
// extended ones, each with its handler: the one list both notServed and
// write dispatch on. Every other command is answered EOPNOTSUPP:
// REQ_NOTIFY_CQ, POLL_CQ and POST_* mlx5 does in user space (CQ arm
// doorbell, CQ ring, send/receive doorbells), RESIZE_CQ is not served, and
// the other extended commands the kernel has methods for (CREATE_FLOW ..
// MODIFY_CQ) keep the extended framing checks (notServed).
var (
	writeCmds = map[uverbs.Command]writeFunc{
		uverbs.CmdGetContext:        (*Server).getContext,
		uverbs.CmdQueryDevice:       (*Server).queryDevice,
		uverbs.CmdQueryPort:         (*Server).queryPort,
		uverbs.CmdAllocPD:           (*Server).allocPD,
		uverbs.CmdDeallocPD:         noResp((*Server).deallocPD),
		uverbs.CmdRegMR:             (*Server).regMR,
		uverbs.CmdDeregMR:           noResp((*Server).deregMR),
		uverbs.CmdCreateCompChannel: (*Server).createCompChannel,
		uverbs.CmdCreateCQ:          (*Server).createCQ,
		uverbs.CmdDestroyCQ:         (*Server).destroyCQ,
		uverbs.CmdCreateQP:          (*Server).createQP,
		uverbs.CmdModifyQP:          noResp((*Server).modifyQP),
		uverbs.CmdQueryQP:           (*Server).queryQP,
		uverbs.CmdDestroyQP:         (*Server).destroyQP,
		uverbs.CmdCreateSRQ:         (*Server).createSRQ,
		uverbs.CmdModifySRQ:         noResp((*Server).modifySRQ),
		uverbs.CmdQuerySRQ:          (*Server).querySRQ,
		uverbs.CmdDestroySRQ:        (*Server).destroySRQ,
		uverbs.CmdCreateAH:          (*Server).createAH,
		uverbs.CmdDestroyAH:         noResp((*Server).destroyAH),
	}
	writeExCmds = map[uverbs.Command]writeFunc{
		uverbs.ExCmdQueryDevice: (*Server).exQueryDevice,
		uverbs.ExCmdCreateCQ:    (*Server).exCreateCQ,
		uverbs.ExCmdCreateQP:    (*Server).exCreateQP,
		uverbs.ExCmdModifyQP:    (*Server).exModifyQP,
	}
)

// notServed answers a command the device does not serve as the kernel's
// "not supported" write method does (mlx5 disables REQ_NOTIFY_CQ,
// POLL_CQ and the POST commands; other numbers have no method): EOPNOTSUPP
// whatever the context and the core request, after only the legacy
// in_words check for a number inside the kernel's tables. It returns nil
// for a served command, and for what ParseWrite refuses first.
func notServed(req []byte) *uverbs.Error {
	if len(req) < uverbs.CmdHdrSize {
		return nil
	}
	h := uverbs.CmdHdr(req)
	c, ex, limit := h.Cmd(), h.Extended(), uverbs.NumWriteCmds
	name := cmdName(c, ex)
	if ex {
		if writeExCmds[c] != nil || c >= uverbs.ExCmdThreshold && int(c) < uverbs.NumWriteExCmds {
			return nil
		}
		limit = uverbs.NumWriteExCmds
	}
	switch {
	case h.Command()&^(uverbs.CmdFlagExtended|uverbs.CmdCommandMask) != 0, !ex && writeCmds[c] != nil:
		return nil
	case int(c) < limit && int(h.InWords())*4 != len(req):
		return fail(name, syscall.EINVAL, fmt.Sprintf("in_words %d for a %d-byte write", h.InWords(), len(req)))
	}
	return fail(name, syscall.EOPNOTSUPP, "command not served by this device")
}

// cmdName names a write() command as the errors do: EX_ for the extended
// framing.
func cmdName(c uverbs.Command, ex bool) string {
	if ex {
		return "EX_" + c.String()
	}
	return c.String()
}

// write serves one write() command.
func (s *Server) write(req, resp []byte) (int, *uverbs.Error) {
	if e := notServed(req); e != nil {
		return 0, e
	}
	m, err := uverbs.ParseWrite(req)
	name := cmdName(m.Cmd, m.Extended)
	switch {
	case err != nil:
		return 0, refusal(name, err)
	case !m.Extended && !uverbs.TakesUData(m.Cmd) && !uverbs.IsZero(m.Driver):
		// uverbs_request: a core request longer than the struct must be
		// zero beyond it.
		return 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("%d bytes after the core request, not all zero (%s takes no driver data)", len(m.Driver), name))
	case s.closed:
		return 0, fail(name, syscall.EIO, "context closed")
	case !s.open && (m.Extended || m.Cmd != uverbs.CmdGetContext):
		return 0, fail(name, syscall.EINVAL, "no user context: GET_CONTEXT first")
	}
	if m.Extended {
		if len(resp) < m.OutLen+m.DriverOutLen {
			return 0, fail(name, syscall.EFAULT, fmt.Sprintf("response buffer of %d bytes, out words say %d", len(resp), m.OutLen+m.DriverOutLen))
		}
		if f := writeExCmds[m.Cmd]; f != nil {
			return f(s, name, &m, resp[:m.OutLen+m.DriverOutLen])
		}
		return 0, fail(name, syscall.EOPNOTSUPP, "extended command not served by this device")
	}
	if len(resp) < m.OutLen {
		return 0, fail(name, syscall.EFAULT, fmt.Sprintf("response buffer of %d bytes, out_words say %d", len(resp), m.OutLen))
	}
	if f := writeCmds[m.Cmd]; f != nil {
		return f(s, name, &m, resp[:m.OutLen])
	}
	return 0, fail(name, syscall.EOPNOTSUPP, "command not served by this device")
}

// exModifyQP serves EX_MODIFY_QP.
func (s *Server) exModifyQP(name string, m *uverbs.WriteMsg, resp []byte) (int, *uverbs.Error) {
	var c uverbs.ExModifyQP
	if err := decodeCore(&c, m.Core); err != nil {
		return 0, refusal(name, err)
	}
	if c.RateLimit != 0 {
		return 0, fail(name, syscall.EOPNOTSUPP, "rate limit not modelled")
	}
	var drv uverbs.MLX5ModifyQP
	if e := s.driverIn(name, m.Driver, &drv, 0); e != nil {
		return 0, e
	}
	if drv.CompMask != 0 || drv.ECEOptions != 0 {
		return 0, fail(name, syscall.EOPNOTSUPP, "mlx5 modify_qp comp_mask/ECE not supported")
	}
	if _, e := s.doModifyQP(name, &c.Base); e != nil {
		return 0, e
	}
	n := 0
	if m.OutLen >= uverbs.ExModifyQPRespSize {
		r := uverbs.ExModifyQPResp{ResponseLength: uverbs.ExModifyQPRespSize}
		n, _ = r.Encode(resp)
	}
	return n, nil
}

// exCreateCQ serves EX_CREATE_CQ.
func (s *Server) exCreateCQ(name string, m *uverbs.WriteMsg, resp []byte) (int, *uverbs.Error) {
	var c uverbs.ExCreateCQ
	if err := decodeCore(&c, m.Core); err != nil {
		return 0, refusal(name, err)
	}
	switch {
	case c.CompMask != 0: // ib_uverbs_ex_create_cq: no comp_mask bit is defined
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("comp_mask %#x", c.CompMask))
	case c.Flags != 0:
		return 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("flags %#x (timestamps, ignore-overrun not modelled)", c.Flags))
	}
	if m.OutLen < uverbs.CreateCQRespSize {
		return 0, fail(name, syscall.ENOSPC, "response shorter than ib_uverbs_create_cq_resp")
	}
	base := uverbs.CreateCQ{UserHandle: c.UserHandle, CQE: c.CQE, CompVector: c.CompVector, CompChannel: c.CompChannel}
	r, cqn, e := s.doCreateCQ(name, &base, m.Driver)
	if e != nil {
		return 0, e
	}
	x := uverbs.ExCreateCQResp{Base: r, ResponseLength: uint32(min(m.OutLen, uverbs.ExCreateCQRespSize))}
	n := putResp(resp[:m.OutLen], &x)
	d := uverbs.MLX5CreateCQResp{CQN: cqn}
	n2 := putResp(resp[m.OutLen:m.OutLen+m.DriverOutLen], &d)
	if n2 == 0 {
		return n, nil
	}
	return m.OutLen + n2, nil
}

// exCreateQP serves EX_CREATE_QP.
func (s *Server) exCreateQP(name string, m *uverbs.WriteMsg, resp []byte) (int, *uverbs.Error) {
	var c uverbs.ExCreateQP
	if err := decodeCore(&c, m.Core); err != nil {
		return 0, refusal(name, err)
	}
	switch {
	case c.CompMask&^uverbs.ExCreateQPMaskIndTable != 0:
		// ib_uverbs_ex_create_qp: bits beyond
		// IB_UVERBS_CREATE_QP_SUP_COMP_MASK are EINVAL.
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("comp_mask %#x", c.CompMask))
	case c.CompMask != 0 || c.RwqIndTblHandle != 0:
		return 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("comp_mask %#x (indirection tables are not modelled)", c.CompMask))
	case c.CreateFlags != 0 || c.SourceQPN != 0:
		return 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("create_flags %#x, source_qpn %#x", c.CreateFlags, c.SourceQPN))
	case m.OutLen < uverbs.CreateQPRespSize:
		return 0, fail(name, syscall.ENOSPC, "response shorter than ib_uverbs_create_qp_resp")
	}
	base := uverbs.CreateQP{UserHandle: c.UserHandle, PDHandle: c.PDHandle, SendCQHandle: c.SendCQHandle, RecvCQHandle: c.RecvCQHandle,
		SRQHandle: c.SRQHandle, MaxSendWR: c.MaxSendWR, MaxRecvWR: c.MaxRecvWR, MaxSendSGE: c.MaxSendSGE, MaxRecvSGE: c.MaxRecvSGE,
		MaxInlineData: c.MaxInlineData, SQSigAll: c.SQSigAll, QPType: c.QPType, IsSRQ: c.IsSRQ}
	r, d, e := s.doCreateQP(name, &base, m.Driver)
	if e != nil {
		return 0, e
	}
	x := uverbs.ExCreateQPResp{Base: r, ResponseLength: uint32(min(m.OutLen, uverbs.ExCreateQPRespSize))}
	n := putResp(resp[:m.OutLen], &x)
	if n2 := putResp(resp[m.OutLen:m.OutLen+m.DriverOutLen], &d); n2 > 0 {
		n = m.OutLen + n2
	}
	return n, nil
}

// exQueryDevice serves EX_QUERY_DEVICE.
func (s *Server) exQueryDevice(name string, m *uverbs.WriteMsg, resp []byte) (int, *uverbs.Error) {
	var c uverbs.ExQueryDevice
	if err := decodeCore(&c, m.Core); err != nil {
		return 0, refusal(name, err)
	}
	if c.CompMask != 0 {
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("comp_mask %#x", c.CompMask))
	}
	base, e := s.deviceResp(name)
	if e != nil {
		return 0, e
	}
	x := uverbs.ExQueryDeviceResp{Base: base, ResponseLength: uint32(min(m.OutLen, uverbs.ExQueryDeviceRespSize))}
	if m.OutLen < uverbs.QueryDeviceRespSize {
		return 0, fail(name, syscall.ENOSPC, "response shorter than ib_uverbs_query_device_resp")
	}
	// The mlx5 driver response (mlx5_ib_query_device_resp) is left
	// zero: no TSO, RSS, CQE compression or packet pacing.
	clear(resp[m.OutLen : m.OutLen+m.DriverOutLen])
	n := putResp(resp[:m.OutLen], &x)
	if m.DriverOutLen > 0 {
		n = m.OutLen + m.DriverOutLen
	}
	return n, nil
}

// decodeCore decodes an extended core request as uverbs_request does: one
// longer than the struct (newer user space) has the extra bytes zero
// (EOPNOTSUPP otherwise); a shorter one (older user space, down to the
// minimum uverbs.ParseWrite checked) is zero-filled.
func decodeCore(st uverbs.Struct, b []byte) error {
	n := st.Size()
	if len(b) < n {
		b = append(make([]byte, 0, n), b...)[:n]
	}
	if len(b) > n {
		if !uverbs.IsZero(b[n:]) {
			return &uverbs.FormatError{Struct: "core request", Offset: n, Err: uverbs.ErrReserved, Errno: syscall.EOPNOTSUPP}
		}
		b = b[:n]
	}
	return st.Decode(b)
}

// driverIn decodes the mlx5 driver data into st: at least need bytes;
// shorter than the struct is zero-filled (older user space), longer must
// be zero beyond it (the kernel's ib_is_udata_cleared: EOPNOTSUPP).
func (s *Server) driverIn(name string, b []byte, st uverbs.Struct, need int) *uverbs.Error {
	n := st.Size()
	if len(b) < need {
		return fail(name, syscall.EINVAL, fmt.Sprintf("mlx5 driver data of %d bytes, need %d", len(b), need))
	}
	if len(b) > maxDriver {
		return fail(name, syscall.EINVAL, fmt.Sprintf("mlx5 driver data of %d bytes", len(b)))
	}
	if len(b) > n {
		if !uverbs.IsZero(b[n:]) {
			return fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("mlx5 driver data: %d unknown non-zero bytes after %d", len(b)-n, n))
		}
		b = b[:n]
	}
	if len(b) < n {
		b = append(make([]byte, 0, n), b...)[:n] // older user space: zero-filled
	}
	if err := st.Decode(b); err != nil {
		return refusal(name, err)
	}
	return nil
}

// putResp encodes st into out, truncated to out's length as copy_to_user
// of min(outlen, sizeof) does; it returns the bytes written.
func putResp(out []byte, st uverbs.Struct) int {
	if len(out) >= st.Size() {
		n, _ := st.Encode(out)
		return n
	}
	tmp := make([]byte, st.Size()) // the rare short response buffer
	n, _ := st.Encode(tmp)
	return copy(out, tmp[:n])
}

// reply writes the core response, then the driver response after it (if
// any room is left: the kernel copies min(outlen, sizeof)).
func reply(out []byte, core, drv uverbs.Struct) (int, *uverbs.Error) {
	n := putResp(out, core)
	if drv != nil && n < len(out) {
		n += putResp(out[n:], drv)
	}
	return n, nil
}

func pow2(n uint64) bool { return n != 0 && n&(n-1) == 0 }

func roundupPow2(n uint64) uint64 {
	if n <= 1 {
		return 1
	}
	return 1 << (64 - bits.LeadingZeros64(n-1))
}

// inMem reports whether [addr, addr+n) is client memory the device reaches
// (the kernel pins it with ib_umem_get, which fails with EFAULT).
func (s *Server) inMem(addr, n uint64) bool {
	mem := s.dev.Mem()
	return n <= uint64(mem.Size()) && mem.Contains(addr, int(n))
}

// ---------------------------------------------------------------- device and port

func (s *Server) getContext(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	if s.open {
		return 0, fail(name, syscall.EINVAL, "the file already has a user context")
	}
	var drv uverbs.MLX5AllocUcontextReqV2
	if e := s.driverIn(name, m.Driver, &drv, uverbs.MLX5AllocUcontextReqSize); e != nil {
		return 0, e
	}
	uctx, err := s.dev.GetContext()
	if err != nil {
		return 0, refusal(name, err)
	}
	attr, err := s.dev.QueryDevice()
	if err != nil {
		return 0, refusal(name, err)
	}
	dyn := drv.LibCaps&uverbs.MLX5LibCapDynUAR != 0
	switch {
	case drv.Flags&uverbs.MLX5AllocUctxDevX != 0:
		return 0, fail(name, syscall.EPERM, "DEVX needs CAP_NET_RAW and is not modelled")
	case drv.Flags != 0:
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("unknown flags %#x", drv.Flags))
	case drv.CompMask != 0:
		return 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("comp_mask %#x", drv.CompMask))
	case drv.LibCaps&^uint64(uverbs.MLX5LibCap4KUAR|uverbs.MLX5LibCapDynUAR) != 0:
		return 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("lib_caps %#x", drv.LibCaps))
	// With DYN_UAR the kernel skips calc_total_bfregs: the bfreg counts
	// asked for are not looked at (libmlx5 sends 16 anyway).
	case dyn:
	case int(drv.TotalNumBFRegs) > uctx.TotBFRegs:
		return 0, fail(name, syscall.ENOMEM, fmt.Sprintf("%d bfregs asked, the context has %d", drv.TotalNumBFRegs, uctx.TotBFRegs))
	case drv.TotalNumBFRegs > 0 && drv.NumLowLatencyBFRegs >= drv.TotalNumBFRegs:
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("%d low-latency bfregs of %d", drv.NumLowLatencyBFRegs, drv.TotalNumBFRegs))
	}
	s.open, s.uctx, s.attr = true, uctx, attr
	s.uars = make([]bool, max(uctx.NumUARs, 0))
	cqeVer := min(int(drv.MaxCQEVersion), uctx.CQEVersion)
	s.uctx.CQEVersion = cqeVer
	core := uverbs.GetContextResp{AsyncFD: ^uint32(0), NumCompVectors: 1}
	r := uverbs.MLX5AllocUcontextResp{
		QPTabSize: uint32(roundupPow2(uint64(max(attr.MaxQP, 1)))), BFRegSize: uint32(uctx.BFRegSize),
		TotBFRegs: uint32(uctx.TotBFRegs), CacheLineSize: 64, MaxSQDescSz: uint16(attr.MaxSQDescSz),
		MaxRQDescSz: uint16(mlx5.DataSegSize * attr.MaxSGE), MaxSendWQEBB: uint32(attr.MaxQPWR * mlx5.MaxWQEBBs),
		MaxRecvWR: uint32(attr.MaxQPWR), MaxSRQRecvWR: uint32(attr.MaxQPWR), NumPorts: 1,
		ResponseLength: uint32(min(len(out)-uverbs.GetContextRespSize, uverbs.MLX5AllocUcontextRespSize)),
		CQEVersion:     uint8(cqeVer), LogUARSize: 12, NumUarsPerPage: 1,
	}
	if dyn {
		// mlx5_ib set_ucontext_resp: tot_bfregs is 0 for a context with
		// dynamic UARs (uverbs.md §4.1; Firedancer checks it), which
		// allocates its UARs as objects. num_dyn_bfregs stays what the
		// context may allocate: the kernel's value here is
		// [unconfirmed], and the provider reads nothing from it.
		r.TotBFRegs = 0
		r.NumDynBFRegs = uint32(uctx.TotBFRegs)
	}
	return reply(out, &core, &r)
}

// fwVer packs "major.minor.sub" as mlx5_ib reports fw_ver.
func fwVer(s string) uint64 {
	var a, b, c uint64
	_, _ = fmt.Sscanf(s, "%d.%d.%d", &a, &b, &c)
	return a<<32 | (b&0xffff)<<16 | c&0xffff
}

// NodeGUID is the node GUID softnic reports: the port MAC as a modified
// EUI-64 (U/L bit flipped, ff:fe in the middle), as NICs commonly derive it.
func NodeGUID(mac [6]byte) uint64 {
	return uint64(mac[0]^2)<<56 | uint64(mac[1])<<48 | uint64(mac[2])<<40 | 0xfffe<<24 |
		uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
}

func (s *Server) queryDevice(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.QueryDevice
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	r, e := s.deviceResp(name)
	if e != nil {
		return 0, e
	}
	return reply(out, &r, nil)
}

// deviceResp is ib_uverbs_query_device_resp for the device.
func (s *Server) deviceResp(name string) (uverbs.QueryDeviceResp, *uverbs.Error) {
	a, err := s.dev.QueryDevice()
	if err != nil {
		return uverbs.QueryDeviceResp{}, refusal(name, err)
	}
	g := NodeGUID(a.MAC)
	r := uverbs.QueryDeviceResp{
		FWVer: fwVer(a.FWVersion), NodeGUID: g, SysImageGUID: g, MaxMRSize: a.MaxMRSize, PageSizeCap: ^uint64(mlx5.UARPageSize - 1),
		VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer, MaxQP: uint32(a.MaxQP), MaxQPWR: uint32(a.MaxQPWR),
		MaxSGE: uint32(a.MaxSGE), MaxSGERd: uint32(a.MaxSGE), MaxCQ: uint32(a.MaxCQ), MaxCQE: uint32(a.MaxCQE),
		MaxMR: uint32(a.MaxMR), MaxPD: uint32(a.MaxPD), MaxQPRdAtom: uint32(a.MaxQPRdAtomic), MaxQPInitRdAtom: uint32(a.MaxQPRdAtomic),
		MaxResRdAtom: uint32(a.MaxQPRdAtomic * a.MaxQP), AtomicCap: 1, MaxAH: uint32(a.MaxQP), MaxSRQ: uint32(a.MaxQP),
		MaxSRQWR: uint32(max(a.MaxQPWR-1, 0)), MaxSRQSGE: uint32(srqMaxSGE(&a)), MaxPkeys: 1, LocalCAAckDelay: 16, PhysPortCnt: 1,
	}
	return r, nil
}

func (s *Server) queryPort(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.QueryPort
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	a, err := s.dev.QueryPort(int(c.PortNum))
	if err != nil {
		return 0, refusal(name, err)
	}
	r := uverbs.QueryPortResp{
		MaxMsgSize: uint32(min(a.MaxMsgSize, 1<<32-1)), GIDTblLen: uint32(len(a.GIDs)), PKeyTblLen: 1,
		State: uverbs.PortState(a.State), MaxMTU: a.MaxMTU, ActiveMTU: a.ActiveMTU,
		MaxVLNum: 1, ActiveWidth: 1, PhysState: a.PhysState, LinkLayer: linkLayerEthernet,
	}
	return reply(out, &r, nil)
}

// linkLayerEthernet is IB_LINK_LAYER_ETHERNET.
const linkLayerEthernet = 2

// ---------------------------------------------------------------- PD, MR, channel

func (s *Server) allocPD(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.AllocPD
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	r, err := s.dev.AllocPD()
	if err != nil {
		return 0, refusal(name, err)
	}
	h := s.add(&object{kind: kindPD, num: r.PDN})
	return reply(out, &uverbs.AllocPDResp{PDHandle: h}, &uverbs.MLX5AllocPDResp{PDN: r.PDN})
}

func (s *Server) deallocPD(name string, m *uverbs.WriteMsg) (int, *uverbs.Error) {
	var c uverbs.DeallocPD
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	return 0, s.destroyObj(name, c.PDHandle, kindPD)
}

// accessKnown are the access bits the device implements; the other
// ib_uverbs_access_flags are refused as unsupported.
const accessKnown = uverbs.AccessLocalWrite | uverbs.AccessRemoteWrite | uverbs.AccessRemoteRead | uverbs.AccessRemoteAtomic

func (s *Server) regMR(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.RegMR
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	pd, e := s.lookup(m.Cmd, c.PDHandle, kindPD)
	if e != nil {
		return 0, e
	}
	const allAccess = uverbs.AccessRelaxedOrdering<<1 - 1
	switch {
	case c.Length == 0:
		return 0, fail(name, syscall.EINVAL, "zero length")
	case c.AccessFlags&^(allAccess|uverbs.AccessRelaxedOrdering) != 0:
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("unknown access bits %#x", uint32(c.AccessFlags)))
	case c.AccessFlags&(uverbs.AccessRemoteWrite|uverbs.AccessRemoteAtomic) != 0 && c.AccessFlags&uverbs.AccessLocalWrite == 0:
		return 0, fail(name, syscall.EINVAL, "remote write/atomic access without local write")
	case c.AccessFlags&^(accessKnown|uverbs.AccessRelaxedOrdering) != 0:
		return 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("access bits %#x not modelled (MW bind, zero-based, ODP, huge TLB)", uint32(c.AccessFlags&^accessKnown)))
	case !s.inMem(c.Start, c.Length):
		return 0, fail(name, syscall.EFAULT, fmt.Sprintf("[%#x,+%d) is not the client's memory", c.Start, c.Length))
	}
	r, err := s.dev.RegMR(mlx5.RegMRCmd{PDN: pd.num, Addr: c.Start, Length: c.Length, HCAVA: c.HCAVA, Access: uint32(c.AccessFlags & accessKnown)})
	if err != nil {
		return 0, refusal(name, err)
	}
	pd.users++
	h := s.add(&object{kind: kindMR, num: r.LKey, rkey: r.RKey, pd: pd})
	return reply(out, &uverbs.RegMRResp{MRHandle: h, LKey: r.LKey, RKey: r.RKey}, nil)
}

func (s *Server) deregMR(name string, m *uverbs.WriteMsg) (int, *uverbs.Error) {
	var c uverbs.DeregMR
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	return 0, s.destroyObj(name, c.MRHandle, kindMR)
}

func (s *Server) createCompChannel(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.CreateCompChannel
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	id, err := s.dev.CreateCompChannel()
	if err != nil {
		return 0, refusal(name, err)
	}
	// The kernel returns a file descriptor; softnic returns the channel's
	// handle, which CREATE_CQ's comp_channel then names.
	h := s.add(&object{kind: kindChannel, num: id})
	return reply(out, &uverbs.CreateCompChannelResp{FD: h}, nil)
}

// ---------------------------------------------------------------- CQ

func (s *Server) createCQ(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.CreateCQ
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	r, cqn, e := s.doCreateCQ(name, &c, m.Driver)
	if e != nil {
		return 0, e
	}
	return reply(out, &r, &uverbs.MLX5CreateCQResp{CQN: cqn})
}

func (s *Server) doCreateCQ(name string, c *uverbs.CreateCQ, driver []byte) (uverbs.CreateCQResp, uint32, *uverbs.Error) {
	var drv uverbs.MLX5CreateCQ
	if e := s.driverIn(name, driver, &drv, 20); e != nil {
		return uverbs.CreateCQResp{}, 0, e
	}
	// mlx5_ib_create_cq: entries = roundup_pow_of_two(cqe + 1), at most
	// 1 << log_max_cq_sz; cqe 0 is a ring of one CQE (resp.cqe 0), which
	// libmlx5 asks for too. [unconfirmed: from mlx5_ib_create_cq as
	// recalled; the reference does not cover it.]
	entries := roundupPow2(uint64(c.CQE) + 1)
	uar := s.uctx.UARIndex
	switch {
	case entries > roundupPow2(uint64(s.attr.MaxCQE)+1):
		// max_cqe is 2^log_max_cq_sz - 1: the largest ring is one more.
		return uverbs.CreateCQResp{}, 0, fail(name, syscall.EINVAL, fmt.Sprintf("cqe %d (ring of %d, device max_cqe %d)", c.CQE, entries, s.attr.MaxCQE))
	case c.CompVector != 0:
		return uverbs.CreateCQResp{}, 0, fail(name, syscall.EINVAL, fmt.Sprintf("comp_vector %d (the context has 1)", c.CompVector))
	case drv.CQESize != 64 && drv.CQESize != 128:
		return uverbs.CreateCQResp{}, 0, fail(name, syscall.EINVAL, fmt.Sprintf("cqe_size %d", drv.CQESize))
	case drv.CQECompEn != 0:
		return uverbs.CreateCQResp{}, 0, fail(name, syscall.EOPNOTSUPP, "CQE compression not modelled")
	case drv.Flags&^uverbs.MLX5CreateCQFlagUARPageIndex != 0:
		return uverbs.CreateCQResp{}, 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("flags %#x", drv.Flags))
	case !s.inMem(drv.BufAddr, entries*uint64(drv.CQESize)):
		return uverbs.CreateCQResp{}, 0, fail(name, syscall.EFAULT, fmt.Sprintf("CQ buffer %#x is not the client's memory", drv.BufAddr))
	case !s.inMem(drv.DBAddr, mlx5.DBRecSize):
		return uverbs.CreateCQResp{}, 0, fail(name, syscall.EFAULT, fmt.Sprintf("doorbell record %#x is not the client's memory", drv.DBAddr))
	}
	if drv.Flags&uverbs.MLX5CreateCQFlagUARPageIndex != 0 {
		if !s.ownsUAR(uint32(drv.UARPageIndex)) {
			return uverbs.CreateCQResp{}, 0, fail(name, syscall.EINVAL, fmt.Sprintf("UAR page %d is not one of the context's", drv.UARPageIndex))
		}
		uar = uint32(drv.UARPageIndex)
	}
	var ch *object
	if c.CompChannel != uverbs.NoCompChannel {
		var e *uverbs.Error
		if c.CompChannel < 0 {
			return uverbs.CreateCQResp{}, 0, fail(name, syscall.EBADF, fmt.Sprintf("comp_channel %d", c.CompChannel))
		}
		if ch, e = s.lookupName(name, uverbs.Handle(c.CompChannel), kindChannel); e != nil {
			return uverbs.CreateCQResp{}, 0, e
		}
	}
	r, err := s.dev.CreateCQ(mlx5.CreateCQCmd{Entries: int(entries), CQESize: int(drv.CQESize), BufAddr: drv.BufAddr, DBAddr: drv.DBAddr, UARIndex: uar})
	if err != nil {
		return uverbs.CreateCQResp{}, 0, refusal(name, err)
	}
	o := &object{kind: kindCQ, num: r.CQN}
	if ch != nil {
		if err := s.dev.AttachCQ(r.CQN, ch.num); err != nil {
			_ = s.dev.DestroyCQ(r.CQN)
			return uverbs.CreateCQResp{}, 0, refusal(name, err)
		}
		o.channel = ch
		ch.users++
	}
	h := s.add(o)
	return uverbs.CreateCQResp{CQHandle: h, CQE: uint32(entries - 1)}, r.CQN, nil
}

func (s *Server) destroyCQ(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.DestroyCQ
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	if e := s.destroyObj(name, c.CQHandle, kindCQ); e != nil {
		return 0, e
	}
	return reply(out, &uverbs.DestroyCQResp{}, nil)
}

// ---------------------------------------------------------------- QP

func (s *Server) createQP(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.CreateQP
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	core, drv, e := s.doCreateQP(name, &c, m.Driver)
	if e != nil {
		return 0, e
	}
	return reply(out, &core, &drv)
}

func (s *Server) doCreateQP(name string, c *uverbs.CreateQP, driver []byte) (uverbs.CreateQPResp, uverbs.MLX5CreateQPResp, *uverbs.Error) {
	core, bfreg, e := s.createQPObj(name, c, driver)
	return core, uverbs.MLX5CreateQPResp{BFRegIndex: bfreg}, e
}

func (s *Server) createQPObj(name string, c *uverbs.CreateQP, driver []byte) (uverbs.CreateQPResp, uint32, *uverbs.Error) {
	var z uverbs.CreateQPResp
	var drv uverbs.MLX5CreateQP
	if e := s.driverIn(name, driver, &drv, 32); e != nil {
		return z, 0, e
	}
	typ, ok := c.QPType.MLX5()
	if !ok {
		return z, 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("QP type %v (RC, UC, UD are modelled)", c.QPType))
	}
	pd, e := s.lookupName(name, c.PDHandle, kindPD)
	if e != nil {
		return z, 0, e
	}
	scq, e := s.lookupName(name, c.SendCQHandle, kindCQ)
	if e != nil {
		return z, 0, e
	}
	rcq, e := s.lookupName(name, c.RecvCQHandle, kindCQ)
	if e != nil {
		return z, 0, e
	}
	var srq *object
	if c.IsSRQ != 0 {
		if srq, e = s.lookupName(name, c.SRQHandle, kindSRQ); e != nil {
			return z, 0, e
		}
	}
	a := &s.attr
	const knownFlags = uverbs.MLX5QPFlagSignature | uverbs.MLX5QPFlagScatterCQE | uverbs.MLX5QPFlagBFRegIndex | uverbs.MLX5QPFlagUARPageIndex
	switch {
	case c.MaxSendWR > uint32(a.MaxQPWR) || c.MaxRecvWR > uint32(a.MaxQPWR):
		return z, 0, fail(name, syscall.EINVAL, fmt.Sprintf("max_send_wr %d / max_recv_wr %d (device max %d)", c.MaxSendWR, c.MaxRecvWR, a.MaxQPWR))
	case c.MaxSendSGE > uint32(a.MaxSGE) || c.MaxRecvSGE > uint32(a.MaxSGE):
		return z, 0, fail(name, syscall.EINVAL, fmt.Sprintf("max_send_sge %d / max_recv_sge %d (device max %d)", c.MaxSendSGE, c.MaxRecvSGE, a.MaxSGE))
	case drv.Flags&^knownFlags != 0:
		return z, 0, fail(name, syscall.EINVAL, fmt.Sprintf("unknown mlx5 QP flags %#x", drv.Flags&^knownFlags))
	case drv.Flags&uverbs.MLX5QPFlagBFRegIndex != 0 && drv.Flags&uverbs.MLX5QPFlagUARPageIndex != 0:
		return z, 0, fail(name, syscall.EINVAL, "both BFREG_INDEX and UAR_PAGE_INDEX")
	case drv.SQWQECount > 1<<24 || drv.RQWQECount > 1<<24 || drv.RQWQEShift > 16:
		// sq_wqe_count 0 is a QP without a send queue (max_send_wr 0):
		// mlx5_ib set_user_buf_size checks only that a non-zero count is
		// a power of two.
		return z, 0, fail(name, syscall.EINVAL, fmt.Sprintf("sq_wqe_count %d, rq_wqe_count %d, rq_wqe_shift %d", drv.SQWQECount, drv.RQWQECount, drv.RQWQEShift))
	case c.IsSRQ != 0 && drv.RQWQECount != 0:
		return z, 0, fail(name, syscall.EINVAL, fmt.Sprintf("a QP on an SRQ with an RQ of %d WQEs", drv.RQWQECount))
	case drv.ECEOptions != 0 || drv.DCILogNumConcurrent != 0 || drv.DCILogNumErrored != 0:
		return z, 0, fail(name, syscall.EOPNOTSUPP, "ECE and DCI streams are not modelled")
	}
	rqBytes := uint64(drv.RQWQECount) << drv.RQWQEShift
	sqBytes := uint64(drv.SQWQECount) * mlx5.WQEBBSize
	switch {
	case drv.SQBufAddr != 0 && drv.SQBufAddr != drv.BufAddr+rqBytes:
		return z, 0, fail(name, syscall.EINVAL, fmt.Sprintf("sq_buf_addr %#x: the SQ must follow the RQ at %#x", drv.SQBufAddr, drv.BufAddr+rqBytes))
	case !s.inMem(drv.BufAddr, rqBytes+sqBytes):
		return z, 0, fail(name, syscall.EFAULT, fmt.Sprintf("QP buffer [%#x,+%d) is not the client's memory", drv.BufAddr, rqBytes+sqBytes))
	case !s.inMem(drv.DBAddr, mlx5.DBRecSize):
		return z, 0, fail(name, syscall.EFAULT, fmt.Sprintf("doorbell record %#x is not the client's memory", drv.DBAddr))
	}
	cmd := mlx5.CreateQPCmd{Type: typ, PDN: pd.num, SendCQN: scq.num, RecvCQN: rcq.num, BufAddr: drv.BufAddr, DBAddr: drv.DBAddr,
		SQWQECnt: int(drv.SQWQECount), RQWQECnt: int(drv.RQWQECount), RQWQEShift: int(drv.RQWQEShift),
		MaxInline: int(c.MaxInlineData), SigAll: c.SQSigAll != 0, BFRegIndex: -1, UARIndexHint: s.uctx.UARIndex}
	if srq != nil {
		cmd.SRQN = srq.num
	}
	if s.uctx.CQEVersion == 1 {
		// libmlx5 sends the index it will look the QP up by in every
		// CQE (mlx5_store_uidx); mlx5_ib passes it to the QPC's
		// user_index only with CQE version 1.
		cmd.UIdx = drv.UIdx & 0xffffff
	}
	switch {
	case drv.Flags&uverbs.MLX5QPFlagBFRegIndex != 0:
		if int(drv.BFRegIndex) >= s.uctx.TotBFRegs {
			return z, 0, fail(name, syscall.EINVAL, fmt.Sprintf("bfreg %d (the context has %d)", drv.BFRegIndex, s.uctx.TotBFRegs))
		}
		cmd.BFRegIndex = int(drv.BFRegIndex)
	case drv.Flags&uverbs.MLX5QPFlagUARPageIndex != 0:
		if !s.ownsUAR(drv.BFRegIndex) {
			return z, 0, fail(name, syscall.EINVAL, fmt.Sprintf("UAR page %d is not one of the context's", drv.BFRegIndex))
		}
		cmd.UARIndexHint = drv.BFRegIndex
	}
	r, err := s.dev.CreateQP(cmd)
	if err != nil {
		return z, 0, refusal(name, err)
	}
	o := &object{kind: kindQP, num: r.QPN, pd: pd, scq: scq, rcq: rcq, srq: srq, qpType: c.QPType}
	for _, ref := range [...]*object{pd, scq, rcq, srq} {
		if ref != nil {
			ref.users++
		}
	}
	h := s.add(o)
	inl := min(c.MaxInlineData, uint32(max(s.dev.Spec().Caps.MaxInline, 0)))
	core := uverbs.CreateQPResp{QPHandle: h, QPN: r.QPN, MaxSendWR: c.MaxSendWR, MaxRecvWR: c.MaxRecvWR,
		MaxSendSGE: c.MaxSendSGE, MaxRecvSGE: c.MaxRecvSGE, MaxInlineData: inl}
	return core, uint32(r.BFRegIndex), nil
}

// qpAttrKnown are the ib_qp_attr_mask bits a MODIFY_QP may carry
// (IB_QP_ATTR_STANDARD_BITS and RATE_LIMIT).
const qpAttrKnown = uverbs.QPAttrMask(1<<21-1) | uverbs.QPAttrRateLimit

func (s *Server) modifyQP(name string, m *uverbs.WriteMsg) (int, *uverbs.Error) {
	var c uverbs.ModifyQP
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	return s.doModifyQP(name, &c)
}

func (s *Server) doModifyQP(name string, c *uverbs.ModifyQP) (int, *uverbs.Error) {
	o, e := s.lookupName(name, c.QPHandle, kindQP)
	if e != nil {
		return 0, e
	}
	mask := c.AttrMask
	if mask&^qpAttrKnown != 0 {
		return 0, fail(name, syscall.EOPNOTSUPP, fmt.Sprintf("attr_mask bits %#x", uint32(mask&^qpAttrKnown)))
	}
	if mask&uverbs.QPAttrRateLimit != 0 {
		return 0, fail(name, syscall.EOPNOTSUPP, "rate limit not modelled")
	}
	state, okS := c.QPState.MLX5()
	cur, okC := c.CurQPState.MLX5()
	if mask&uverbs.QPAttrState != 0 && !okS || mask&uverbs.QPAttrCurState != 0 && !okC {
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("qp_state %d / cur_qp_state %d", c.QPState, c.CurQPState))
	}
	d := &c.Dest
	cmd := mlx5.ModifyQPCmd{
		QPN: o.num, Mask: uint32(mask), State: state, CurState: cur, AccessFlags: uint32(c.QPAccessFlags),
		PKeyIndex: c.PKeyIndex, Port: c.PortNum, QKey: c.QKey, PathMTU: c.PathMTU,
		AV:      mlx5.AV{DGID: d.DGID, SGIDIndex: d.SGIDIndex, HopLimit: d.HopLimit, TrafficClass: d.TrafficClass, FlowLabel: d.FlowLabel},
		Timeout: c.Timeout, RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry, RQPSN: c.RQPSN, SQPSN: c.SQPSN,
		MaxQPRdAtomic: c.MaxRdAtomic, MaxDestRdAtomic: c.MaxDestRdAtomic, MinRNRTimer: c.MinRNRTimer, DestQPN: c.DestQPNum,
	}
	if mask&uverbs.QPAttrAV != 0 {
		switch {
		case d.PortNum != 1:
			// modify_qp: rdma_is_port_valid(dest.port_num), EINVAL (met
			// on rxe0 by the conformance suite, commit 24b0f9d).
			return 0, fail(name, syscall.EINVAL, fmt.Sprintf("address vector on port %d (the device has port 1)", d.PortNum))
		case d.IsGlobal == 0:
			return 0, fail(name, syscall.EINVAL, "a RoCE address vector needs a GRH (is_global)")
		}
		var ok bool
		if cmd.AV.DMAC, ok = s.resolve(d.DGID); !ok {
			return 0, fail(name, syscall.EHOSTUNREACH, fmt.Sprintf("no neighbour for destination GID %v", netip.AddrFrom16(d.DGID)))
		}
	}
	if err := s.dev.ModifyQP(cmd); err != nil {
		return 0, refusal(name, err)
	}
	return 0, nil
}

// resolve is the kernel's ib_resolve_eth_dmac: the neighbour table's MAC
// for a destination GID. Without a table it is zero (and ok); a table that
// does not know the GID is a failure, which the kernel reports as an
// address-resolution error (we assume EHOSTUNREACH, what
// rdma_addr_find_l2_eth_by_grh gives for an unreachable neighbour; its
// exact errno depends on the route and is unconfirmed).
func (s *Server) resolve(gid [16]byte) ([6]byte, bool) {
	if s.d.neigh != nil {
		return s.d.neigh(gid)
	}
	return [6]byte{}, true
}

func (s *Server) queryQP(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.QueryQP
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	o, e := s.lookup(m.Cmd, c.QPHandle, kindQP)
	if e != nil {
		return 0, e
	}
	a, err := s.dev.QueryQP(o.num)
	if err != nil {
		return 0, refusal(name, err)
	}
	st, ok := uverbs.QPStateFromMLX5(a.State)
	if !ok {
		st = uverbs.QPStateErr
	}
	// ib_uverbs_query_qp answers from ib_query_qp whatever attr_mask
	// asks (mlx5_ib fills everything), so every field the device knows
	// is here. What stays zero is what mlx5_ib answers zero or the model
	// has no notion of: max_send_wr and max_send_sge (0 for a user QP;
	// libmlx5 puts its own back), max_inline_data (the provider's, which
	// libmlx5 puts back too; assumed 0 here), the alternate path (no APM),
	// path_mig_state (IB_MIG_MIGRATED, 0), sq_draining (no SQD) and, on
	// RoCE, the DLID, SL and static rate.
	r := uverbs.QueryQPResp{QPState: st, CurQPState: st, PathMTU: a.PathMTU, DestQPNum: a.DestQPN,
		SQPSN: a.SQPSN, RQPSN: a.RQPSN, PortNum: a.Port, QKey: a.QKey, QPAccessFlags: uverbs.Access(a.AccessFlags),
		PKeyIndex: a.PKeyIndex, MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer,
		Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, MaxRecvWR: a.MaxRecvWR, MaxRecvSGE: a.MaxRecvSGE}
	if a.SigAll {
		r.SQSigAll = 1
	}
	if a.HasAV {
		r.Dest = uverbs.QPDest{DGID: a.AV.DGID, FlowLabel: a.AV.FlowLabel, SGIDIndex: a.AV.SGIDIndex, HopLimit: a.AV.HopLimit,
			TrafficClass: a.AV.TrafficClass, IsGlobal: 1, PortNum: a.Port}
	}
	return reply(out, &r, nil)
}

func (s *Server) destroyQP(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.DestroyQP
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	if e := s.destroyObj(name, c.QPHandle, kindQP); e != nil {
		return 0, e
	}
	return reply(out, &uverbs.DestroyQPResp{}, nil)
}

// ---------------------------------------------------------------- SRQ

// srqSGECap is the scatter entries libmlx5 asks CREATE_SRQ for when an
// application asks maxSGE: those its WQE stride holds (mlx5.SRQStride).
// srqMaxSGE is the device's max_srq_sge (its max_sge if it reports none).
func srqMaxSGE(a *mlx5.DeviceAttr) int {
	if a.MaxSRQSGE > 0 {
		return a.MaxSRQSGE
	}
	return a.MaxSGE
}

func srqSGECap(maxSGE int) uint32 { return uint32(mlx5.SRQStrideSGEs(mlx5.SRQStride(maxSGE))) }

func (s *Server) createSRQ(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.CreateSRQ
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	var drv uverbs.MLX5CreateSRQ
	if e := s.driverIn(name, m.Driver, &drv, 16); e != nil {
		return 0, e
	}
	pd, e := s.lookup(m.Cmd, c.PDHandle, kindPD)
	if e != nil {
		return 0, e
	}
	a := &s.attr
	switch {
	case c.MaxWR == 0 || c.MaxWR >= uint32(a.MaxQPWR):
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("max_wr %d (device max %d)", c.MaxWR, a.MaxQPWR-1))
	case c.MaxSGE == 0 || c.MaxSGE > srqSGECap(srqMaxSGE(a)):
		// libmlx5 sends the SGEs its WQE stride holds (max_gs after
		// mlx5_alloc_srq_buf rounds the stride up to a power of two):
		// 31 for an SRQ of max_srq_sge 30.
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("max_sge %d (device max %d, %d in its WQE stride)", c.MaxSGE, srqMaxSGE(a), srqSGECap(srqMaxSGE(a))))
	case drv.Flags&^uverbs.MLX5SRQFlagSignature != 0:
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("mlx5 SRQ flags %#x", drv.Flags))
	}
	cnt := roundupPow2(uint64(c.MaxWR) + 1)
	stride := uint64(mlx5.SRQStride(int(c.MaxSGE)))
	shift := bits.TrailingZeros64(stride)
	if !s.inMem(drv.BufAddr, cnt*stride) {
		return 0, fail(name, syscall.EFAULT, fmt.Sprintf("SRQ buffer [%#x,+%d) is not the client's memory", drv.BufAddr, cnt*stride))
	}
	if !s.inMem(drv.DBAddr, mlx5.DBRecSize) {
		return 0, fail(name, syscall.EFAULT, fmt.Sprintf("doorbell record %#x is not the client's memory", drv.DBAddr))
	}
	r, err := s.dev.CreateSRQ(mlx5.CreateSRQCmd{PDN: pd.num, BufAddr: drv.BufAddr, DBAddr: drv.DBAddr, WQECnt: int(cnt), WQEShift: shift, Limit: c.SRQLimit})
	if err != nil {
		return 0, refusal(name, err)
	}
	pd.users++
	h := s.add(&object{kind: kindSRQ, num: r.SRQN, pd: pd})
	core := uverbs.CreateSRQResp{SRQHandle: h, MaxWR: uint32(cnt - 1), MaxSGE: uint32(mlx5.SRQStrideSGEs(int(stride))), SRQN: r.SRQN}
	return reply(out, &core, &uverbs.MLX5CreateSRQResp{SRQN: r.SRQN})
}

func (s *Server) modifySRQ(name string, m *uverbs.WriteMsg) (int, *uverbs.Error) {
	var c uverbs.ModifySRQ
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	o, e := s.lookup(m.Cmd, c.SRQHandle, kindSRQ)
	if e != nil {
		return 0, e
	}
	if err := s.dev.ModifySRQ(mlx5.ModifySRQCmd{SRQN: o.num, Mask: uint32(c.AttrMask), MaxWR: int(c.MaxWR), Limit: c.SRQLimit}); err != nil {
		return 0, refusal(name, err)
	}
	return 0, nil
}

func (s *Server) querySRQ(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.QuerySRQ
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	o, e := s.lookup(m.Cmd, c.SRQHandle, kindSRQ)
	if e != nil {
		return 0, e
	}
	a, err := s.dev.QuerySRQ(o.num)
	if err != nil {
		return 0, refusal(name, err)
	}
	return reply(out, &uverbs.QuerySRQResp{MaxWR: uint32(a.MaxWR), MaxSGE: uint32(a.MaxSGE), SRQLimit: a.Limit}, nil)
}

func (s *Server) destroySRQ(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.DestroySRQ
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	if e := s.destroyObj(name, c.SRQHandle, kindSRQ); e != nil {
		return 0, e
	}
	return reply(out, &uverbs.DestroySRQResp{}, nil)
}

// ---------------------------------------------------------------- AH

func (s *Server) createAH(name string, m *uverbs.WriteMsg, out []byte) (int, *uverbs.Error) {
	var c uverbs.CreateAH
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	pd, e := s.lookup(m.Cmd, c.PDHandle, kindPD)
	if e != nil {
		return 0, e
	}
	switch {
	case c.Attr.IsGlobal == 0:
		return 0, fail(name, syscall.EINVAL, "a RoCE address handle needs a GRH (is_global)")
	case c.Attr.PortNum != 1:
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("port %d (the device has port 1)", c.Attr.PortNum))
	case c.Attr.Grh.SGIDIndex > 1:
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("sgid index %d", c.Attr.Grh.SGIDIndex))
	case s.d.ahs >= int(s.attr.MaxQP):
		// mlx5_ib keeps no AH table (an AH is an address vector the
		// provider builds in its own memory) and fails CREATE_AH only
		// when its allocation does; softnic holds each AH in the
		// daemon's memory, so it bounds them at the max_ah that
		// QUERY_DEVICE reports (max_qp), as the table full: ENOMEM.
		return 0, fail(name, syscall.ENOMEM, fmt.Sprintf("%d address handles in use (max_ah %d)", s.d.ahs, s.attr.MaxQP))
	}
	dmac, ok := s.resolve(c.Attr.Grh.DGID)
	if !ok {
		return 0, fail(name, syscall.EHOSTUNREACH, fmt.Sprintf("no neighbour for destination GID %v", netip.AddrFrom16(c.Attr.Grh.DGID)))
	}
	o := &object{kind: kindAH, pd: pd, ah: c.Attr, dmac: dmac}
	pd.users++
	s.d.ahs++
	h := s.add(o)
	return reply(out, &uverbs.CreateAHResp{AHHandle: h}, &uverbs.MLX5CreateAHResp{ResponseLength: uverbs.MLX5CreateAHRespSize, DMAC: o.dmac})
}

func (s *Server) destroyAH(name string, m *uverbs.WriteMsg) (int, *uverbs.Error) {
	var c uverbs.DestroyAH
	if err := c.Decode(m.Core); err != nil {
		return 0, refusal(name, err)
	}
	return 0, s.destroyObj(name, c.AHHandle, kindAH)
}
