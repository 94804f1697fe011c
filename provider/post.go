package provider

import (
	"encoding/binary"
	"math/bits"
	"strconv"

	"github.com/softnic/softnic/mlx5"
)

// PostSend posts a list of send work requests (ibv_post_send) and returns
// the index of the first WR not posted: len(wrs) on success. As in
// libmlx5, every WR before a rejected one is posted and rung, and the
// error (an *OpError carrying that index) says why the rest was not.
//
// Each WR becomes an mlx5 WQE built in place in the SQ ring (mlx5.md
// §4.2-§4.7); then, once per call, the doorbell record, and a BlueFlame
// copy or an 8-byte doorbell (§4.8). It does not allocate.
//
// Posting is refused while the QP is (as far as the provider last set it)
// in RESET, INIT or RTR. In RTS, SQD, SQE and ERR WRs are posted; in ERR the
// device completes each with WR_FLUSH_ERR. (libmlx5's gate is "moved to
// RTS since the last RESET", so a QP taken INIT→ERR refuses sends there;
// here ERR always accepts them.)
//
// Opcodes per QP type: RC takes all of them; UC takes SEND, SEND_WITH_IMM,
// RDMA_WRITE and RDMA_WRITE_WITH_IMM; UD takes SEND and SEND_WITH_IMM. Any
// other is refused with ErrInvalidArg. (libmlx5 does not check: it would
// build, say, a UC READ WQE, which the device then fails; ibv_post_send(3)
// allows READ and atomics on RC only, RDMA WRITE on RC and UC.)
//
// A UD WQE is ctrl, the 48-byte datagram segment, then data segments or
// one inline segment (mlx5.md §4.5, §4.6): the AH's address vector with
// dqp_dct = RemoteQPN | MLX5_EXTENDED_UD_AV and the Q_Key in its first
// dword (set_datagram_seg). The AH must be live and of the QP's PD, and
// RemoteQPN must fit in 24 bits (ErrInvalidArg; libmlx5 checks neither).
// Q_Key: a RemoteQKey with bit 31 set selects the QP's own Q_Key (IB spec
// C10-15), and the provider writes that effective Q_Key into the segment.
// libmlx5 writes remote_qkey as given and a ConnectX applies C10-15 from
// its QP context, so for such Q_Keys the bytes differ from libmlx5's
// (the device should apply the rule too, for WQEs built by libmlx5).
// A UD message longer than the port MTU is posted: libmlx5 does not check
// and neither does the provider; the device fails it (a ConnectX with an
// error completion, rxe by completing it successfully without sending).
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	// The common case first, in PostSend's own small frame: one simple WR
	// on a live QP of this process in a posting state (postSimple).
	if qp == nil || len(wrs) != 1 || !qp.fast { // postSend refuses a nil QP
		return qp.postSend(wrs)
	}
	wr := &wrs[0]

	sq := &qp.sq
	if int(wr.Opcode) >= len(simpleOps) || simpleOps[wr.Opcode] == 0 {
		return qp.postSend(wrs)
	}
	mop := simpleOps[wr.Opcode]
	if mop == mlx5.OpRDMARead && qp.typ != QPTypeRC ||
		wr.Flags&^(SendFence|SendSignaled|SendSolicited) != 0 ||
		sq.head-sq.tail >= sq.maxPost || len(wr.SGL) > 1 || len(wr.SGL) > sq.maxGS {
		return qp.postSend(wrs)
	}
	off := int(sq.curPost&(sq.cnt-1)) * mlx5.WQEBBSize
	if off+mlx5.WQEBBSize > len(sq.buf) {
		return qp.postSend(wrs) // cannot happen: the ring is whole WQEBBs
	}
	w := (*[mlx5.WQEBBSize]byte)(sq.buf[off:])
	ds := 1
	pos := mlx5.CtrlSegSize
	if len(wr.SGL) == 1 {
		sge := &wr.SGL[0]
		if sge.Length&mlx5.InlineFlag != 0 || qp.fastMsg > 0 && uint64(sge.Length) > qp.fastMsg {
			return qp.postSend(wrs)
		}
	}
	if mop != mlx5.OpSend && mop != mlx5.OpSendImm {
		binary.BigEndian.PutUint64(w[16:24], wr.RemoteAddr)
		putBE64(w[24:32], uint64(wr.RKey)<<32)
		pos += mlx5.RaddrSegSize
		ds++
	}
	if len(wr.SGL) == 1 && wr.SGL[0].Length != 0 { // libmlx5 skips zero-length SGEs
		sge := &wr.SGL[0]
		d := (*[mlx5.DataSegSize]byte)(w[pos : pos+mlx5.DataSegSize])
		binary.BigEndian.PutUint64(d[0:8], uint64(sge.Length)<<32|uint64(sge.LKey))
		binary.BigEndian.PutUint64(d[8:16], sge.Addr)
		ds++
	}
	// ctrlFlags by table (the flags were checked above): fence, CQ update
	// (signaled or sq_sig_all), solicited; the immediate of WITH_IMM.
	fmcese := simpleFMCESE[wr.Flags&7]
	if qp.sigAll {
		fmcese |= mlx5.CECQUpdate
	}
	var imm uint32
	if mop == mlx5.OpSendImm || mop == mlx5.OpRDMAWriteImm {
		imm = wr.Imm
	}
	// ctrl: opmod_idx_opcode, qpn_ds, signature|0|0|fm_ce_se, imm.
	putBE64(w[0:8], uint64(uint32(sq.curPost&0xffff)<<8|uint32(mop))<<32|uint64(qp.qpn<<8|uint32(ds)))
	putBE64(w[8:16], uint64(fmcese)<<32|uint64(imm))

	h := sq.head & uint32(len(sq.ctr)-1)
	sq.wrid[h], sq.ctr[h] = wr.WRID, uint16(sq.curPost)
	sq.curPost++
	host := qp.ctx.host
	if host != nil {
		host.Work("wqe_build", qp.qpn, ds*mlx5.DSSize)
	}

	// ringSend(1, off, ds): the doorbell record, then BlueFlame (the WQE
	// is at most 64 bytes, one line that ends inside the ring) or the
	// 8-byte doorbell.
	sq.head++
	if len(qp.dbr) >= 4*mlx5.DBRSend+4 { // always: DBRecSize
		binary.LittleEndian.PutUint32(qp.dbr[4*mlx5.DBRSend:], bits.ReverseBytes32(sq.curPost&0xffff)) // DBRec.SetWord, one store
	} else {
		qp.dbr.SetWord(mlx5.DBRSend, sq.curPost&0xffff)
	}
	if host != nil {
		host.Work("dbr_update", qp.qpn, 4)
	}
	reg := qp.bfReg + *qp.bfOff
	if ds > 1 && uint64(ds*mlx5.DSSize) <= qp.fastBF {
		if line := qp.ctx.line; line != nil {
			line.StoreLines(reg, w[:], sq.buf[:0]) // mmio_wc_start, the copy, mmio_flush_writes
		} else {
			mmio := qp.ctx.mmio
			mmio.Flush() // mmio_wc_start()
			for i := 0; i < len(w); i += 8 {
				mmio.Store64(reg+uint64(i), binary.LittleEndian.Uint64(w[i:]))
			}
			mmio.Flush() // mmio_flush_writes()
		}
	} else {
		mmio := qp.ctx.mmio
		mmio.Flush() // mmio_wc_start()
		mmio.Store64(reg, binary.LittleEndian.Uint64(w[0:8]))
		mmio.Flush() // mmio_flush_writes()
	}
	*qp.bfOff ^= qp.bfBufSize
	return 1, nil
}

// postSend is PostSend's general path.
func (qp *QP) postSend(wrs []SendWR) (int, error) {
	if qp == nil || qp.ctx == nil {
		return 0, &OpError{Op: "post_send", Index: 0, Err: ErrClosed}
	}
	if qp.rx != nil {
		return qp.rxePostSend(wrs) // a kernel rxe QP (rxe_datapath.go)
	}
	const op = "post_send"
	if qp.dead {
		return 0, &OpError{Op: op, QPN: qp.qpn, Index: 0, Err: ErrClosed}
	}
	if l := qp.ctx.link; l != nil {
		if err := l.Err(); err != nil {
			return 0, &OpError{Op: op, QPN: qp.qpn, Index: 0, Err: err}
		}
	}
	switch qp.state {
	case QPStateReset, QPStateInit, QPStateRTR:
		if len(wrs) == 0 {
			return 0, nil
		}
		return 0, &OpError{Op: op, QPN: qp.qpn, Index: 0, Err: detail(ErrBadState, "QP is %v", qp.state)}
	}
	if len(wrs) == 1 {
		// One common WR (the BlueFlame case): no list bookkeeping.
		if off, ds, ok := qp.buildSimple(&wrs[0], 0); ok {
			qp.ringSend(1, off, ds)
			return 1, nil
		}
	}
	var (
		nreq    int
		err     error
		lastOff int // ring offset of the last WQE built
		lastDS  int
	)
	for nreq = 0; nreq < len(wrs); nreq++ {
		off, ds, e := qp.buildSend(&wrs[nreq], nreq)
		if e != nil {
			err = &OpError{Op: op, QPN: qp.qpn, Index: nreq, Err: e}
			break
		}
		lastOff, lastDS = off, ds
	}
	if nreq > 0 {
		qp.ringSend(nreq, lastOff, lastDS)
	}
	return nreq, err
}

// opcodeAllowed reports whether a QP of type t may post WQE opcode op.
func opcodeAllowed(t QPType, op mlx5.Opcode) bool {
	switch t {
	case QPTypeRC:
		return true
	case QPTypeUC: // SEND_WITH_INV is RC and XRC only (IB spec 9.4.1.3)
		return op == mlx5.OpSend || op == mlx5.OpSendImm || op == mlx5.OpRDMAWrite || op == mlx5.OpRDMAWriteImm
	case QPTypeUD:
		return op == mlx5.OpSend || op == mlx5.OpSendImm
	}
	return false
}

// qpTypeName names a QP type for messages.
func qpTypeName(t QPType) string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	}
	return "QP type " + strconv.Itoa(int(t))
}

// atomicSize is the operand and result size of the 8-byte atomics
// (libmlx5 MLX5_ATOMIC_SIZE): the byte_count of their data segments.
const atomicSize = 8

// ibMaxMsgSize is the largest message the IB spec allows, 2^31 bytes.
const ibMaxMsgSize = 1 << 31

// maxMsgSize is the largest send message the device takes. DeviceAttr has
// no max_msg_sz field; softnic's device reports its max message size as
// max_mr_size, so that is the bound, capped at the IB spec's 2^31.
func maxMsgSize(a *mlx5.DeviceAttr) uint64 {
	if a.MaxMRSize != 0 && a.MaxMRSize < ibMaxMsgSize {
		return a.MaxMRSize
	}
	return ibMaxMsgSize
}

// checkLengths refuses SGEs the device would misread or could only fail:
// a length of 2^31 or more, whose data segment byte_count has bit 31 set
// and so reads as an inline segment header (MLX5_INLINE_SEG), and, when
// maxMsg > 0, a list longer in total than the largest message. libmlx5
// checks neither (the SGEs go to the device as given); ibv_sge.length is a
// uint32 and the IB spec caps a message at 2^31 bytes, so no valid post is
// refused.
func checkLengths(sgl []SGE, maxMsg uint64) error {
	total := uint64(0)
	for i := range sgl {
		l := sgl[i].Length
		if l&mlx5.InlineFlag != 0 {
			return detailBoth(ErrInvalidArg, ErrLocalLength, "SGE %d length %#x >= 2^31 (bit 31 of byte_count marks inline data)", i, l)
		}
		total += uint64(l)
	}
	if maxMsg > 0 && total > maxMsg {
		return detailBoth(ErrInvalidArg, ErrLocalLength, "%d bytes in the SGEs > max message size %d", total, maxMsg)
	}
	return nil
}

// buildSend writes one WQE at cur_post and advances cur_post. It returns
// the WQE's ring offset and DS. Nothing is advanced on error.
//
// The checks are libmlx5's (_mlx5_post_send: opcode, ring overflow, SGE
// count; set_data_inl_seg: max_inline_data) plus checkLengths and the
// refusal of IBV_SEND_INLINE on RDMA READ and atomics, which libmlx5 would
// copy inline into a WQE the device must reject (ibv_post_send(3): inline
// is valid only for SEND and RDMA WRITE). libmlx5 also refuses atomics
// when the device's atomic_cap is IBV_ATOMIC_NONE; DeviceAttr carries no
// atomic capability, so atomics are always built here.
func (qp *QP) buildSend(wr *SendWR, nreq int) (int, int, error) {
	if off, ds, ok := qp.buildSimple(wr, nreq); ok {
		return off, ds, nil
	}
	sq := &qp.sq
	mop, ok := wr.Opcode.mlx5Opcode()
	switch {
	case !ok || !opcodeAllowed(qp.typ, mop):
		return 0, 0, detail(ErrInvalidArg, "opcode %v not supported on %s", wr.Opcode, qpTypeName(qp.typ))
	case qp.typ == QPTypeUD && wr.AH.gone():
		return 0, 0, detail(ErrInvalidArg, "UD send without a live address handle")
	case qp.typ == QPTypeUD && wr.AH.pd != qp.pd:
		return 0, 0, ahPDMismatch(wr.AH, qp)
	case qp.typ == QPTypeUD && wr.RemoteQPN > 0xffffff:
		return 0, 0, detail(ErrInvalidArg, "remote QPN %#x wider than 24 bits", wr.RemoteQPN)
	case wr.Flags&^sendFlagsKnown != 0:
		return 0, 0, detail(ErrInvalidArg, "unknown send flags %#x", uint32(wr.Flags&^sendFlagsKnown))
	case sq.head-sq.tail+uint32(nreq) >= sq.maxPost && qp.bug.set&(BugSQOverrun|BugNeverSignal) == 0: // mlx5_wq_overflow
		return 0, 0, detail(ErrQueueFull, "%d WRs outstanding, max %d", sq.head-sq.tail+uint32(nreq), sq.maxPost)
	case len(wr.SGL) > sq.maxGS:
		return 0, 0, detail(ErrTooManySGE, "%d SGEs, max %d", len(wr.SGL), sq.maxGS)
	}
	if err := checkLengths(wr.SGL, qp.ctx.maxMsg); err != nil {
		return 0, 0, err
	}
	atomic := mop == mlx5.OpAtomicCS || mop == mlx5.OpAtomicFA
	inline := wr.Flags&SendInline != 0
	if inline && (mop == mlx5.OpRDMARead || atomic) {
		return 0, 0, detail(ErrInvalidArg, "inline %v (only SEND and RDMA WRITE carry inline data)", wr.Opcode)
	}

	qend := len(sq.buf)
	off := int(sq.curPost&(sq.cnt-1)) * mlx5.WQEBBSize
	pos := off + mlx5.CtrlSegSize // ctrl, raddr and atomic (48 B) never leave the first WQEBB
	ds := 1
	if qp.typ == QPTypeUD {
		// set_datagram_seg: the AH's address vector, then the destination
		// QPN with the extended-AV flag and the Q_Key. ctrl + datagram fill
		// the first WQEBB exactly; what follows may start at the ring start.
		d := sq.buf[pos : pos+mlx5.DatagramSegSize]
		copy(d, wr.AH.av[:])
		qkey := wr.RemoteQKey
		if qkey&qkeyUseQP != 0 {
			qkey = qp.qkey
		}
		binary.BigEndian.PutUint32(d[0:4], qkey)
		binary.BigEndian.PutUint32(d[8:12], wr.RemoteQPN|mlx5.ExtendedAVFlag)
		pos += mlx5.DatagramSegSize
		ds += mlx5.DatagramSegSize / mlx5.DSSize
		if pos == qend {
			pos = 0
		}
	}
	switch mop {
	case mlx5.OpRDMAWrite, mlx5.OpRDMAWriteImm, mlx5.OpRDMARead:
		r := mlx5.RaddrSeg(sq.buf[pos : pos+mlx5.RaddrSegSize])
		r.Encode(&mlx5.RaddrFields{RAddr: wr.RemoteAddr, RKey: wr.RKey})
		pos += mlx5.RaddrSegSize
		ds++
	case mlx5.OpAtomicCS, mlx5.OpAtomicFA:
		r := mlx5.RaddrSeg(sq.buf[pos : pos+mlx5.RaddrSegSize])
		r.Encode(&mlx5.RaddrFields{RAddr: wr.RemoteAddr, RKey: wr.RKey})
		pos += mlx5.RaddrSegSize
		// set_atomic_seg: CS carries swap and compare, FA the add value in
		// swap_add. libmlx5 leaves FA's compare as the ring had it; it is
		// zeroed here so that the WQE bytes do not depend on ring history
		// (the device ignores it).
		a := mlx5.AtomicSeg(sq.buf[pos : pos+mlx5.AtomicSegSize])
		if mop == mlx5.OpAtomicCS {
			a.Encode(wr.Swap, wr.CompareAdd)
		} else {
			a.Encode(wr.CompareAdd, 0)
		}
		pos += mlx5.AtomicSegSize
		ds += 2
	}
	if inline && len(wr.SGL) > 0 {
		n, err := qp.writeInline(wr.SGL, pos)
		if err != nil {
			return 0, 0, err
		}
		ds += n
	} else {
		for i := range wr.SGL {
			if pos == qend {
				pos = 0
			}
			sge := &wr.SGL[i]
			if sge.Length == 0 { // libmlx5 skips zero-length SGEs
				continue
			}
			n := sge.Length
			if atomic { // set_data_ptr_seg_atomic: always MLX5_ATOMIC_SIZE
				n = atomicSize
			}
			d := mlx5.DataSeg(sq.buf[pos : pos+mlx5.DataSegSize])
			d.Encode(&mlx5.DataFields{ByteCount: n, LKey: sge.LKey, Addr: sge.Addr})
			pos += mlx5.DataSegSize
			ds++
		}
	}
	if ds > mlx5.MaxDS { // cannot happen with the SQ sizing; never build a bad DS
		return 0, 0, detail(ErrInvalidArg, "WQE of %d octowords", ds)
	}

	fmcese, imm := qp.ctrlFlags(wr, mop)
	ctrl := mlx5.CtrlSeg(sq.buf[off : off+mlx5.CtrlSegSize])
	ctrl.Encode(&mlx5.CtrlFields{WQEIndex: uint16(sq.curPost), Opcode: mop, QPN: qp.qpn, DS: uint8(ds), FMCESE: fmcese, Imm: imm})
	if qp.bug.set != 0 {
		qp.bugWQE(ctrl, nreq, off)
	}

	h := (sq.head + uint32(nreq)) & uint32(len(sq.ctr)-1)
	sq.wrid[h], sq.ctr[h] = wr.WRID, uint16(sq.curPost)
	sq.curPost += uint32(mlx5.WQEBBs(ds))
	if qp.ctx.host != nil {
		qp.ctx.host.Work("wqe_build", qp.qpn, ds*mlx5.DSSize)
	}
	return off, ds, nil
}

// ctrlFlags is the ctrl segment's fm_ce_se byte and immediate for wr
// (mlx5_post_send: fence, CQ update on signaled or sq_sig_all, solicited;
// the immediate for the WITH_IMM opcodes, the R_Key to invalidate for
// SEND_WITH_INV).
func (qp *QP) ctrlFlags(wr *SendWR, mop mlx5.Opcode) (fmcese uint8, imm uint32) {
	if wr.Flags&SendFence != 0 {
		fmcese |= mlx5.FenceSmallAndFen
	}
	if wr.Flags&SendSignaled != 0 || qp.sigAll {
		fmcese |= mlx5.CECQUpdate
	}
	if wr.Flags&SendSolicited != 0 {
		fmcese |= mlx5.SolicitedEvent
	}
	switch mop {
	case mlx5.OpSendImm, mlx5.OpRDMAWriteImm:
		imm = wr.Imm
	case mlx5.OpSendInval:
		imm = wr.InvalidateRKey // libmlx5 send_ieth
	}
	return fmcese, imm
}

// buildSimple is buildSend for the common WR: an RC or UC SEND, SEND with
// immediate, RDMA WRITE (with immediate) or READ with at most one SGE and
// no inline data, which passes every check of buildSend. Its WQE (ctrl,
// then the remote-address segment for RDMA, then the data segment) fits
// in its first WQEBB, so it is written through one array view of that
// basic block, word by word, with no bounds checks per field. The bytes
// are exactly those buildSend writes. ok is false for any other WR: the
// caller takes the general path, which also reports the errors.
func (qp *QP) buildSimple(wr *SendWR, nreq int) (off, ds int, ok bool) {
	if qp.bug.set != 0 {
		return 0, 0, false // a QP with Bugs takes the general path (bugs.go)
	}
	sq := &qp.sq
	var mop mlx5.Opcode
	switch wr.Opcode {
	case WRRDMAWrite:
		mop = mlx5.OpRDMAWrite
	case WRRDMAWriteImm:
		mop = mlx5.OpRDMAWriteImm
	case WRSend:
		mop = mlx5.OpSend
	case WRSendImm:
		mop = mlx5.OpSendImm
	case WRRDMARead:
		mop = mlx5.OpRDMARead
	default:
		return 0, 0, false
	}
	if qp.typ != QPTypeRC && (qp.typ != QPTypeUC || mop == mlx5.OpRDMARead) ||
		wr.Flags&^(SendFence|SendSignaled|SendSolicited) != 0 ||
		sq.head-sq.tail+uint32(nreq) >= sq.maxPost || len(wr.SGL) > 1 || len(wr.SGL) > sq.maxGS {
		return 0, 0, false
	}
	var sge *SGE
	if len(wr.SGL) == 1 {
		sge = &wr.SGL[0]
		if sge.Length&mlx5.InlineFlag != 0 || qp.ctx.maxMsg > 0 && uint64(sge.Length) > qp.ctx.maxMsg {
			return 0, 0, false
		}
	}
	off = int(sq.curPost&(sq.cnt-1)) * mlx5.WQEBBSize
	w := (*[mlx5.WQEBBSize]byte)(sq.buf[off : off+mlx5.WQEBBSize])
	ds = 1
	pos := mlx5.CtrlSegSize
	if mop != mlx5.OpSend && mop != mlx5.OpSendImm {
		binary.BigEndian.PutUint64(w[16:24], wr.RemoteAddr)
		putBE64(w[24:32], uint64(wr.RKey)<<32)
		pos += mlx5.RaddrSegSize
		ds++
	}
	if sge != nil && sge.Length != 0 { // libmlx5 skips zero-length SGEs
		d := (*[mlx5.DataSegSize]byte)(w[pos : pos+mlx5.DataSegSize])
		binary.BigEndian.PutUint64(d[0:8], uint64(sge.Length)<<32|uint64(sge.LKey))
		binary.BigEndian.PutUint64(d[8:16], sge.Addr)
		ds++
	}
	fmcese, imm := qp.ctrlFlags(wr, mop)
	// ctrl: opmod_idx_opcode, qpn_ds, signature|0|0|fm_ce_se, imm.
	putBE64(w[0:8], uint64(uint32(sq.curPost&0xffff)<<8|uint32(mop))<<32|uint64(qp.qpn<<8|uint32(ds)))
	putBE64(w[8:16], uint64(fmcese)<<32|uint64(imm))

	h := (sq.head + uint32(nreq)) & uint32(len(sq.ctr)-1)
	sq.wrid[h], sq.ctr[h] = wr.WRID, uint16(sq.curPost)
	sq.curPost++
	if qp.ctx.host != nil {
		qp.ctx.host.Work("wqe_build", qp.qpn, ds*mlx5.DSSize)
	}
	return off, ds, true
}

// putBE64 is binary.BigEndian.PutUint64 as one 8-byte store: the compiler
// splits PutUint64 into byte stores when it can prove some bytes constant
// (a masked or shifted value), which the byte swap hides from it.
func putBE64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, bits.ReverseBytes64(v)) }

// simpleFMCESE is ctrlFlags' fm_ce_se byte for the low three send flags
// (SendFence, SendSignaled, SendSolicited), without sq_sig_all.
var simpleFMCESE = func() (t [8]uint8) {
	for f := range t {
		t[f], _ = (&QP{}).ctrlFlags(&SendWR{Flags: SendFlags(f)}, mlx5.OpRDMAWrite)
	}
	return t
}()

// simpleOps are the WQE opcodes of the WR opcodes PostSend's single-WR
// path builds (0: not one of them; buildSimple's switch).
var simpleOps = [...]mlx5.Opcode{WRRDMAWrite: mlx5.OpRDMAWrite, WRRDMAWriteImm: mlx5.OpRDMAWriteImm,
	WRSend: mlx5.OpSend, WRSendImm: mlx5.OpSendImm, WRRDMARead: mlx5.OpRDMARead}

// writeInline concatenates the SGEs' bytes into one inline segment at pos
// (set_data_inl_seg), wrapping the data at the ring end, and returns its
// size in octowords (0 when the SGEs hold no bytes: no segment at all).
// The padding up to the next 16-byte boundary is zeroed.
func (qp *QP) writeInline(sgl []SGE, pos int) (int, error) {
	sq := &qp.sq
	total := uint64(0)
	for i := range sgl {
		total += uint64(sgl[i].Length)
	}
	if total > uint64(sq.maxInl) && qp.bug.set&BugInlineOverLimit == 0 {
		return 0, detail(ErrInlineTooBig, "%d bytes, max_inline_data %d", total, sq.maxInl)
	}
	if total == 0 {
		return 0, nil
	}
	mem := qp.ctx.mem
	w := pos + mlx5.InlineHdrSize
	for i := range sgl {
		if sgl[i].Length == 0 {
			continue
		}
		src, err := mem.Slice(sgl[i].Addr, int(sgl[i].Length))
		if err != nil {
			return 0, detailBoth(ErrInvalidArg, ErrOutOfRange, "inline SGE %d [%#x, +%d) outside host memory", i, sgl[i].Addr, sgl[i].Length)
		}
		w = ringWrite(sq.buf, w, src)
	}
	size := mlx5.InlineSegSize(int(total))
	ringZero(sq.buf, w, size-mlx5.InlineHdrSize-int(total))
	mlx5.InlineSeg(sq.buf[pos : pos+mlx5.InlineHdrSize]).SetLen(uint32(total))
	return size / mlx5.DSSize, nil
}

// ringWrite copies src into ring at pos, wrapping at the end, and returns
// the position after it.
func ringWrite(ring []byte, pos int, src []byte) int {
	for len(src) > 0 {
		if pos == len(ring) {
			pos = 0
		}
		n := copy(ring[pos:], src)
		pos += n
		src = src[n:]
	}
	return pos
}

// ringZero zeroes n bytes of ring from pos, wrapping at the end.
func ringZero(ring []byte, pos, n int) {
	for n > 0 {
		if pos == len(ring) {
			pos = 0
		}
		k := min(n, len(ring)-pos)
		clear(ring[pos : pos+k])
		pos += k
		n -= k
	}
}

// ringSend is post_send_db (mlx5.md §4.8) for a batch of nreq WQEs whose
// last one starts at ring offset lastOff and has lastDS octowords.
func (qp *QP) ringSend(nreq, lastOff, lastDS int) {
	if qp.bug.set != 0 {
		qp.ringSendBuggy(nreq, lastOff, lastDS) // tests only (bugs.go)
		return
	}
	sq := &qp.sq
	sq.head += uint32(nreq)
	// udma_to_device_barrier(): the WQE stores above must be visible before
	// the doorbell record says they exist. Go keeps program order for this
	// goroutine; the device only reads the ring when it next runs.
	qp.dbr.SetWord(mlx5.DBRSend, sq.curPost&0xffff)
	if qp.ctx.host != nil {
		qp.ctx.host.Work("dbr_update", qp.qpn, 4)
	}
	mmio := qp.ctx.mmio
	reg := qp.bfReg + *qp.bfOff
	if qp.bfOn && nreq == 1 && qp.bfBufSize > 0 && lastDS > 1 && uint64(lastDS*mlx5.DSSize) <= qp.bfBufSize {
		// BlueFlame: the whole WQE, padded to 64-byte lines, as strictly
		// ascending 8-byte stores into the current BF buffer; the source
		// wraps at the ring end (mlx5_bf_copy). WQEs start on a WQEBB and
		// the ring is whole WQEBBs, so a line never straddles the wrap.
		n := (lastDS*mlx5.DSSize + 63) &^ 63
		a, b := sq.buf[lastOff:min(lastOff+n, len(sq.buf))], sq.buf[:max(0, lastOff+n-len(sq.buf))]
		if line := qp.ctx.line; line != nil {
			line.StoreLines(reg, a, b) // mmio_wc_start, the copy, mmio_flush_writes
		} else {
			mmio.Flush() // mmio_wc_start()
			off := reg
			for _, p := range [2][]byte{a, b} {
				for i := 0; i+8 <= len(p); i += 8 {
					mmio.Store64(off, binary.LittleEndian.Uint64(p[i:]))
					off += 8
				}
			}
			mmio.Flush() // mmio_flush_writes()
		}
	} else {
		// Doorbell: the first 8 bytes of the last WQE's ctrl segment
		// (opmod_idx_opcode, qpn_ds).
		mmio.Flush() // mmio_wc_start()
		mmio.Store64(reg, binary.LittleEndian.Uint64(sq.buf[lastOff:lastOff+8]))
		mmio.Flush() // mmio_flush_writes()
	}
	*qp.bfOff ^= qp.bfBufSize
}

// PostRecv posts receive work requests (ibv_post_recv) and returns the
// index of the first WR not posted (len(wrs) on success). Receives need no
// MMIO: only the doorbell record's receive counter is updated. Posting is
// refused only in RESET (libmlx5: allowed from INIT on); in ERR the device
// flushes the receives with WR_FLUSH_ERR. A QP attached to an SRQ has no
// receive queue: posting to it is refused with ErrInvalidArg (post to the
// SRQ; libmlx5 would fail it with ENOMEM on its empty RQ).
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if qp == nil || qp.ctx == nil {
		return 0, &OpError{Op: "post_recv", Index: 0, Err: ErrClosed}
	}
	if qp.rx != nil {
		return qp.rxePostRecv(wrs)
	}
	const op = "post_recv"
	if qp.dead {
		return 0, &OpError{Op: op, QPN: qp.qpn, Index: 0, Err: ErrClosed}
	}
	if l := qp.ctx.link; l != nil {
		if err := l.Err(); err != nil {
			return 0, &OpError{Op: op, QPN: qp.qpn, Index: 0, Err: err}
		}
	}
	if qp.srq != nil && len(wrs) > 0 {
		return 0, &OpError{Op: op, QPN: qp.qpn, Index: 0, Err: detail(ErrInvalidArg,
			"QP receives from SRQ %#x: post to the SRQ", qp.srq.srqn)}
	}
	if qp.state == QPStateReset && len(wrs) > 0 {
		return 0, &OpError{Op: op, QPN: qp.qpn, Index: 0, Err: detail(ErrBadState, "QP is %v", qp.state)}
	}
	rq := &qp.rq
	var (
		nreq int
		err  error
	)
	for nreq = 0; nreq < len(wrs); nreq++ {
		wr := &wrs[nreq]
		if rq.head-rq.tail+uint32(nreq) >= rq.cnt {
			err = &OpError{Op: op, QPN: qp.qpn, Index: nreq, Err: detail(ErrQueueFull, "%d receives outstanding, max %d",
				rq.head-rq.tail+uint32(nreq), rq.cnt)}
			break
		}
		if len(wr.SGL) > rq.maxGS {
			err = &OpError{Op: op, QPN: qp.qpn, Index: nreq, Err: detail(ErrTooManySGE, "%d SGEs, max %d", len(wr.SGL), rq.maxGS)}
			break
		}
		// Only the 2^31 rule: a receive may offer more room than any
		// message fills.
		if e := checkLengths(wr.SGL, 0); e != nil {
			err = &OpError{Op: op, QPN: qp.qpn, Index: nreq, Err: e}
			break
		}
		idx := (rq.head + uint32(nreq)) & (rq.cnt - 1)
		slot := rq.buf[int(idx)*rq.stride : int(idx+1)*rq.stride]
		j := 0
		for i := range wr.SGL {
			sge := &wr.SGL[i]
			if sge.Length == 0 {
				continue
			}
			mlx5.DataSeg(slot[j*mlx5.DataSegSize:]).Encode(&mlx5.DataFields{ByteCount: sge.Length, LKey: sge.LKey, Addr: sge.Addr})
			j++
		}
		if j < rq.maxGS && qp.bug.set&BugRecvNoTerminator == 0 {
			mlx5.DataSeg(slot[j*mlx5.DataSegSize:]).Encode(&mlx5.DataFields{LKey: mlx5.InvalidKey})
		}
		rq.wrid[idx] = wr.WRID
	}
	if nreq > 0 {
		rq.head += uint32(nreq)
		// udma_to_device_barrier(), then the receive counter.
		qp.dbr.SetWord(mlx5.DBRRecv, rq.head&0xffff)
	}
	return nreq, err
}

// ahPDMismatch is the error for a UD send whose address handle is of
// another PD than the QP's, naming the contexts when they differ (PD
// numbers are per context, so two contexts' first PDs are both PD 1).
func ahPDMismatch(ah *AH, qp *QP) error {
	if ah.pd.ctx != qp.pd.ctx {
		return detail(ErrInvalidArg, "address handle of another context (PD %d of %s) on a QP of PD %d of %s",
			ah.pd.pdn, ah.pd.ctx.name, qp.pd.pdn, qp.pd.ctx.name)
	}
	return detail(ErrInvalidArg, "address handle of PD %d on a QP of PD %d", ah.pd.pdn, qp.pd.pdn)
}
