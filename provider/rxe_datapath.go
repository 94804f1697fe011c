package provider

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/softnic/softnic/uverbs"
)

// The rxe WQE and CQE layouts (rdma_user_rxe.h, ib_user_verbs.h; sizes in
// uverbs.md §5.1): host-endian structs, the kernel's own. The sizes are
// package uverbs' (layouts.txt, checked against the uapi headers by
// test/uverbslayout); rxe_test.go decodes what the builders write with
// uverbs' RXESendWQE, RXESendWQEAtomic, RXESendWQEUD and RXERecvWQE.
const (
	rxeWROpcode    = 12
	rxeWRNumSGE    = 8 // "reserved" in 6.1's uapi; librxe still writes num_sge there
	rxeWRFlags     = 16
	rxeWRImm       = 20 // __be32
	rxeWRRemote    = 24 // rdma.remote_addr, atomic.remote_addr
	rxeWRRdmaRKey  = 32
	rxeWRCmpAdd    = 32
	rxeWRSwap      = 40
	rxeWRAtomRKey  = 48
	rxeWRUDQPN     = 24 // ud.remote_qpn
	rxeWRUDQKey    = 28 // ud.remote_qkey
	rxeWRUDAHNum   = 36 // ud.ah_num
	rxeSendIOVA    = 152
	rxeSendSSN     = 176
	rxeSendDMA     = 184
	rxeSendSGE     = uverbs.RXESendWQESize // SGEs or inline data
	rxeRecvDMA     = 16
	rxeRecvSGE     = uverbs.RXERecvWQESize
	rxeDMALength   = 0
	rxeDMAResid    = 4
	rxeDMACurSGE   = 8
	rxeDMANumSGE   = 12
	rxeDMASGEOff   = 16
	rxeSGESize     = uverbs.RXESGESize
	rxeWCSize      = uverbs.WCSize
	rxeMaxInline   = 512 // RXE_MAX_INLINE_DATA
	rxeMaxSGE      = 32  // RXE_MAX_SGE
	rxeSendWQEBase = rxeSendSGE
	rxeRecvWQEBase = rxeRecvSGE
)

// rxeCQ is the rxe side of a CQ: the kernel's ring of ib_uverbs_wc.
type rxeCQ struct {
	q  *rxeQueue
	uh uint64 // the user_handle the kernel's events name it by
}

// rxeQP is the rxe side of a QP: the two mapped rings and the doorbell.
type rxeQP struct {
	sq, rq *rxeQueue
	db     doorbell
	ssn    uint32
	uh     uint64 // the user_handle the kernel's events name it by
}

// doorbell is what rings a QP's send queue: kverbs.Doorbell's write().
type doorbell interface{ Ring() error }

// rxePostSend is post_send on rxe (librxe post_one_send): each WQE is
// written into the SQ slot at the producer index and published with an
// atomic store of the next index; the list ends with one doorbell, a
// write() of POST_SEND with no work requests, which wakes the kernel's
// requester.
func (qp *QP) rxePostSend(wrs []SendWR) (int, error) {
	const op = "post_send"
	if qp.dead {
		return 0, &OpError{Op: op, QPN: qp.qpn, Err: ErrClosed}
	}
	switch qp.state {
	case QPStateReset, QPStateInit, QPStateRTR:
		if len(wrs) == 0 {
			return 0, nil
		}
		return 0, &OpError{Op: op, QPN: qp.qpn, Err: detail(ErrBadState, "QP is %v", qp.state)}
	}
	r := qp.rx
	var nreq int
	var err error
	for nreq = 0; nreq < len(wrs); nreq++ {
		if e := qp.rxeBuildSend(&wrs[nreq]); e != nil {
			err = &OpError{Op: op, QPN: qp.qpn, Index: nreq, Err: e}
			break
		}
	}
	if nreq > 0 {
		if e := r.db.Ring(); e != nil {
			var ue *uverbs.Error
			if errors.As(e, &ue) {
				e = fmt.Errorf("%w: %w", ErrnoSentinel("POST_SEND", ue.Errno), ue)
			}
			return nreq, &OpError{Op: op, QPN: qp.qpn, Index: nreq - 1, Err: e}
		}
	}
	return nreq, err
}

func (qp *QP) rxeBuildSend(wr *SendWR) error {
	r := qp.rx
	// The same classes as the mlx5 build (buildSend): ErrInvalidArg.
	mop, ok := wr.Opcode.mlx5Opcode()
	switch {
	case !ok || !opcodeAllowed(qp.typ, mop):
		return detail(ErrInvalidArg, "opcode %v not supported on %s", wr.Opcode, qpTypeName(qp.typ))
	case qp.typ == QPTypeUD && (wr.AH.gone() || wr.AH.kern == nil):
		return detail(ErrInvalidArg, "UD send without a live address handle of this device")
	case qp.typ == QPTypeUD && wr.AH.pd != qp.pd:
		return ahPDMismatch(wr.AH, qp)
	case qp.typ == QPTypeUD && wr.RemoteQPN > 0xffffff:
		return detail(ErrInvalidArg, "remote QPN %#x wider than 24 bits", wr.RemoteQPN)
	case wr.Flags&^sendFlagsKnown != 0:
		return detail(ErrInvalidArg, "unknown send flags %#x", uint32(wr.Flags&^sendFlagsKnown))
	case wr.Flags&SendInline != 0 && (wr.Opcode == WRRDMARead || wr.Opcode == WRAtomicCmpSwp || wr.Opcode == WRAtomicFetchAdd):
		return detail(ErrInvalidArg, "inline %v (only SEND and RDMA WRITE carry inline data)", wr.Opcode)
	}
	inline := wr.Flags&SendInline != 0
	var total uint64
	for _, s := range wr.SGL {
		total += uint64(s.Length)
	}
	if inline {
		if total > uint64(qp.cap.MaxInline) {
			return detail(ErrInlineTooBig, "%d bytes inline, max_inline_data %d", total, qp.cap.MaxInline)
		}
	} else if len(wr.SGL) > qp.cap.MaxSendSGE {
		return detail(ErrTooManySGE, "%d SGEs, max_send_sge %d", len(wr.SGL), qp.cap.MaxSendSGE)
	}
	if err := checkLengths(wr.SGL, qp.ctx.maxMsg); err != nil { // as buildSend
		return err
	}
	if r.sq.full() {
		return detail(ErrQueueFull, "SQ full (%d WQEs)", r.sq.capacity())
	}
	prod := r.sq.producer()
	w := r.sq.slot(prod)
	clear(w[:rxeSendWQEBase])
	put32, put64 := binary.NativeEndian.PutUint32, binary.NativeEndian.PutUint64
	put64(w[0:], wr.WRID)
	put32(w[rxeWRNumSGE:], uint32(len(wr.SGL)))
	put32(w[rxeWROpcode:], uint32(wr.Opcode))
	flags := wr.Flags
	if qp.sigAll {
		flags |= SendSignaled
	}
	put32(w[rxeWRFlags:], uint32(flags))
	switch wr.Opcode {
	case WRSendImm, WRRDMAWriteImm:
		binary.BigEndian.PutUint32(w[rxeWRImm:], wr.Imm)
	case WRSendWithInv:
		put32(w[rxeWRImm:], wr.InvalidateRKey) // ex.invalidate_rkey, host order
	}
	if qp.typ == QPTypeUD {
		// wr.ud: the destination QPN and Q_Key and the kernel's AH number
		// (CREATE_AH's rxe response); the kernel fills the address.
		qkey := wr.RemoteQKey
		if qkey&qkeyUseQP != 0 {
			qkey = qp.qkey
		}
		put32(w[rxeWRUDQPN:], wr.RemoteQPN)
		put32(w[rxeWRUDQKey:], qkey)
		put32(w[rxeWRUDAHNum:], wr.AH.kern.num)
	}
	switch wr.Opcode {
	case WRRDMAWrite, WRRDMAWriteImm, WRRDMARead:
		put64(w[rxeWRRemote:], wr.RemoteAddr)
		put32(w[rxeWRRdmaRKey:], wr.RKey)
		put64(w[rxeSendIOVA:], wr.RemoteAddr)
	case WRAtomicCmpSwp, WRAtomicFetchAdd:
		put64(w[rxeWRRemote:], wr.RemoteAddr)
		put64(w[rxeWRCmpAdd:], wr.CompareAdd)
		put64(w[rxeWRSwap:], wr.Swap)
		put32(w[rxeWRAtomRKey:], wr.RKey)
		put64(w[rxeSendIOVA:], wr.RemoteAddr)
	}
	d := w[rxeSendDMA:]
	if inline {
		pos := rxeSendSGE
		for _, s := range wr.SGL {
			src, err := qp.ctx.mem.Slice(s.Addr, int(s.Length))
			if err != nil {
				return detail(ErrOutOfRange, "inline SGE [%#x, +%d) outside host memory", s.Addr, s.Length)
			}
			pos += copy(w[pos:], src)
		}
		put32(d[rxeDMANumSGE:], 0)
	} else {
		for i, s := range wr.SGL {
			e := w[rxeSendSGE+i*rxeSGESize:]
			put64(e[0:], s.Addr)
			put32(e[8:], s.Length)
			put32(e[12:], s.LKey)
		}
		put32(d[rxeDMANumSGE:], uint32(len(wr.SGL)))
	}
	put32(d[rxeDMALength:], uint32(total))
	put32(d[rxeDMAResid:], uint32(total))
	put32(w[rxeSendSSN:], r.ssn)
	r.ssn++
	atomic.StoreUint32(r.sq.prod, (prod+1)&r.sq.mask)
	return nil
}

// rxePostRecv is post_recv on rxe: no system call; the kernel's responder
// takes the WQEs as packets arrive.
func (qp *QP) rxePostRecv(wrs []RecvWR) (int, error) {
	const op = "post_recv"
	if qp.dead {
		return 0, &OpError{Op: op, QPN: qp.qpn, Err: ErrClosed}
	}
	if len(wrs) == 0 {
		return 0, nil
	}
	if qp.state == QPStateReset {
		return 0, &OpError{Op: op, QPN: qp.qpn, Err: detail(ErrBadState, "QP is RESET")}
	}
	rq := qp.rx.rq
	if rq == nil || qp.srq != nil {
		return 0, &OpError{Op: op, QPN: qp.qpn, Err: detail(ErrInvalidArg, "the QP has no receive queue (its receives come from an SRQ)")}
	}
	return rxePostRecvQueue(op, qp.qpn, rq, qp.cap.MaxRecvSGE, wrs)
}

// rxePostRecvQueue writes receive WQEs into an RQ or SRQ ring
// (rxe_recv_wqe), publishing the producer after each.
func rxePostRecvQueue(op string, qpn uint32, rq *rxeQueue, maxSGE int, wrs []RecvWR) (int, error) {
	for n := range wrs {
		wr := &wrs[n]
		if len(wr.SGL) > maxSGE {
			return n, &OpError{Op: op, QPN: qpn, Index: n, Err: detail(ErrTooManySGE, "%d SGEs, max %d", len(wr.SGL), maxSGE)}
		}
		if rq.full() {
			return n, &OpError{Op: op, QPN: qpn, Index: n, Err: detail(ErrQueueFull, "receive queue full (%d WQEs)", rq.capacity())}
		}
		prod := rq.producer()
		w := rq.slot(prod)
		clear(w[:rxeRecvWQEBase])
		binary.NativeEndian.PutUint64(w[0:], wr.WRID)
		var total uint32
		for i, s := range wr.SGL {
			e := w[rxeRecvSGE+i*rxeSGESize:]
			binary.NativeEndian.PutUint64(e[0:], s.Addr)
			binary.NativeEndian.PutUint32(e[8:], s.Length)
			binary.NativeEndian.PutUint32(e[12:], s.LKey)
			total += s.Length
		}
		d := w[rxeRecvDMA:]
		binary.NativeEndian.PutUint32(d[rxeDMALength:], total)
		binary.NativeEndian.PutUint32(d[rxeDMAResid:], total)
		binary.NativeEndian.PutUint32(d[rxeDMANumSGE:], uint32(len(wr.SGL)))
		atomic.StoreUint32(rq.prod, (prod+1)&rq.mask)
	}
	return len(wrs), nil
}

// rxePoll is poll_cq on rxe: the kernel's ib_uverbs_wc records, copied
// out between an atomic load of the producer and an atomic store of the
// consumer. It never blocks.
func (cq *CQ) rxePoll(wcs []WC) (int, error) {
	if cq.dead {
		return 0, opErr("poll_cq", 0, ErrClosed)
	}
	q := cq.rx.q
	n := 0
	prod := q.producer()
	cons := q.consumer()
	for n < len(wcs) && cons != prod {
		decodeRXEWC(q.slot(cons), &wcs[n])
		n++
		cons = (cons + 1) & q.mask
	}
	if n > 0 {
		atomic.StoreUint32(q.cons, cons)
	}
	return n, nil
}

// decodeRXEWC fills wc from one ib_uverbs_wc (48 bytes, checked by the
// caller's slot size).
func decodeRXEWC(b []byte, wc *WC) {
	le32 := binary.NativeEndian.Uint32
	*wc = WC{
		WRID:      binary.NativeEndian.Uint64(b[0:]),
		Status:    WCStatus(le32(b[8:])),
		Opcode:    WCOpcode(le32(b[12:])),
		VendorErr: le32(b[16:]),
		ByteLen:   le32(b[20:]),
		QPNum:     le32(b[28:]),
		SrcQP:     le32(b[32:]),
		Flags:     WCFlags(le32(b[36:])),
		SL:        b[44],
	}
	if wc.Flags&WCFlagWithImm != 0 {
		wc.Imm = binary.BigEndian.Uint32(b[24:])
	} else if wc.Flags&WCFlagWithInv != 0 {
		wc.Imm = le32(b[24:])
	}
}
