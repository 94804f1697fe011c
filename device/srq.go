package device

import (
	"encoding/binary"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// srq is a shared receive queue: one ring of receive WQEs that several
// QPs (RC, UC, UD) take their buffers from. It implements recvQueue.
//
// The ring is a free list (mlx5.md §5): each WQE starts with a 16-byte next
// segment whose next_wqe_index names the WQE after it; the provider posts
// at its head and frees completed WQEs at its tail, and word 0 of the
// doorbell record counts the WQEs posted. The device keeps the index of
// the next WQE to consume and follows next_wqe_index from there.
type srq struct {
	d      *Device
	srqn   uint32
	pdn    uint32
	base   uint64
	dbr    uint64
	cnt    uint32
	stride int
	posted uint32 // WQEs posted, as last read from the doorbell record (16-bit counter extended)
	taken  uint32 // WQEs consumed
	cur    uint16 // index of the next WQE to consume
	limit  uint32 // srq_limit; 0: the limit event is not armed
	users  int    // QPs attached
}

func (s *srq) size() int { return int(s.cnt) }

func (s *srq) noneKnown() bool { return s.taken == s.posted }

func (s *srq) pd() uint32 { return s.pdn }

// reset is a no-op: an SRQ outlives the QPs attached to it.
func (s *srq) reset() {}

// prime and quiesce are no-ops: an SRQ's WQEs are fetched when a message
// needs one (no read-ahead modelled for shared queues yet).
func (s *srq) prime(sim.Time) {}
func (s *srq) quiesce()       {}
func (s *srq) kick(sim.Time)  {}

// flushOne flushes nothing: the WQEs of an SRQ belong to it, not to a QP
// that goes to ERR (that QP gets "last WQE reached" instead).
func (s *srq) flushOne() (uint16, bool) { return 0, false }

func (s *srq) refresh(t sim.Time) sim.Time {
	done, posted, ok := s.d.readProducer(t, s.dbr, s.taken, s.cnt, "SRQ", s.srqn, CtrSRQDBRReadError, CtrSRQDBRBad)
	if ok {
		s.posted = posted
	}
	return done
}

func (s *srq) take(t sim.Time, w *recvWQE, psn int32) (sim.Time, bool, error) {
	d := s.d
	if s.taken == s.posted {
		t = s.refresh(t)
		if s.taken == s.posted {
			return t, false, nil
		}
	}
	slot := uint32(s.cur) & (s.cnt - 1)
	addr := s.base + uint64(slot)*uint64(s.stride)
	buf := d.rqbuf[:s.stride]
	done, st, err := d.dma.Read(t, addr, buf)
	if err != nil {
		d.warn(t, CtrRQReadError, "SRQ %#x WQE %d: %v", s.srqn, slot, err)
		w.index, w.nsge = uint16(slot), 0
		return t, false, err
	}
	d.rec.StagePSN(d.node, "dma", "srq_wqe_fetch", t, done, len(buf), st.TLPs(), 0, 0, psn)
	if d.chk != nil {
		d.chk.recvWQE(done, "SRQ", s.srqn, slot, buf, mlx5.SRQNextSegSize)
	}
	w.parse(uint16(slot), buf, mlx5.SRQNextSegSize)
	s.cur = binary.BigEndian.Uint16(buf[mlx5.SRQOffNextWQEIndex:])
	s.taken++
	// The limit event fires once when fewer than srq_limit WQEs are left,
	// and disarms (the limit reads 0 afterwards, as in verbs). posted is
	// the count at the last doorbell-record read, taken only when the
	// device ran out of known WQEs: the provider may have posted more
	// since, so the record is re-read before the event is raised
	// (assumed, unconfirmed: the hardware judges the limit against the
	// WQEs really posted, not a stale copy of the counter). The message
	// does not wait for that read, only the event does.
	ev := done
	if s.limit > 0 && s.posted-s.taken < s.limit {
		ev = s.refresh(done)
	}
	if s.limit > 0 && s.posted-s.taken < s.limit {
		d.rec.Warnf(d.node, ev, "device", CtrSRQLimit.String(), "SRQ %#x: %d WQEs left, below srq_limit %d", s.srqn, s.posted-s.taken, s.limit)
		d.inc(CtrSRQLimit)
		s.limit = 0
		d.asyncEvent(ev, mlx5.EventSRQLimitReached, s.srqn)
	}
	return done, true, nil
}

// CreateSRQ creates a shared receive queue whose ring lives in host memory.
func (d *Device) CreateSRQ(c mlx5.CreateSRQCmd) (mlx5.CreateSRQResp, error) {
	if err := d.fatalCmd("CREATE_SRQ"); err != nil {
		return mlx5.CreateSRQResp{}, err
	}
	pow2 := c.WQECnt > 0 && c.WQECnt&(c.WQECnt-1) == 0
	switch {
	case !d.pds[c.PDN]:
		return mlx5.CreateSRQResp{}, cmdErr("CREATE_SRQ", mlx5.StatusBadResource, "PD %d does not exist", c.PDN)
	case !pow2 || c.WQECnt > d.spec.Caps.MaxQPWR:
		return mlx5.CreateSRQResp{}, cmdErr("CREATE_SRQ", mlx5.StatusBadParam, "%d WQEs (need a power of two <= %d)", c.WQECnt, d.spec.Caps.MaxQPWR)
	case c.WQEShift < 5 || c.WQEShift > 10:
		return mlx5.CreateSRQResp{}, cmdErr("CREATE_SRQ", mlx5.StatusBadParam, "WQE stride 2^%d (next segment + at least one data segment, at most 1 KiB)", c.WQEShift)
	case !d.mem.Contains(c.BufAddr, c.WQECnt<<c.WQEShift) || c.BufAddr%64 != 0:
		return mlx5.CreateSRQResp{}, cmdErr("CREATE_SRQ", mlx5.StatusBadParam, "SRQ buffer %#x not in host memory or misaligned", c.BufAddr)
	case !d.mem.Contains(c.DBAddr, mlx5.DBRecSize) || c.DBAddr%8 != 0:
		return mlx5.CreateSRQResp{}, cmdErr("CREATE_SRQ", mlx5.StatusBadParam, "doorbell record %#x not in host memory or misaligned", c.DBAddr)
	case c.Limit >= uint32(c.WQECnt):
		return mlx5.CreateSRQResp{}, cmdErr("CREATE_SRQ", mlx5.StatusBadParam, "srq_limit %d >= %d WQEs", c.Limit, c.WQECnt)
	case len(d.srqs) >= d.spec.Caps.MaxQP:
		// The SRQ table is as large as the QP table: QUERY_DEVICE
		// reports max_srq = max_qp (uverbsdev), and a ConnectX's
		// log_max_srq is no larger than its log_max_qp (an assumption:
		// the two are separate HCA caps; the device keeps one). Without
		// a bound a client could grow the daemon without end with SRQs
		// that all share one buffer.
		return mlx5.CreateSRQResp{}, cmdErr("CREATE_SRQ", mlx5.StatusNoResources, "%d SRQs in use", len(d.srqs))
	}
	if d.srqs == nil {
		d.srqs = map[uint32]*srq{}
	}
	n, ok := d.allocSRQN()
	if !ok {
		return mlx5.CreateSRQResp{}, cmdErr("CREATE_SRQ", mlx5.StatusNoResources, "every SRQ number is taken")
	}
	d.srqs[n] = &srq{d: d, srqn: n, pdn: c.PDN, base: c.BufAddr, dbr: c.DBAddr, cnt: uint32(c.WQECnt), stride: 1 << c.WQEShift, limit: c.Limit}
	return mlx5.CreateSRQResp{SRQN: n}, nil
}

// allocSRQN takes the next free SRQ number. SRQ numbers are 24 bits, as
// the EQE of an SRQ event carries them (mlx5.EQE.QPSRQNum keeps 24), and
// wrap (0 is never one: it is "no SRQ" in CREATE_QP); a number a live SRQ
// holds is skipped. Without the wrap the 2^24th SRQ a client created got
// 0x1000000, whose SRQ_LIMIT_REACHED event named SRQ 0 (none), and the
// next ones named the live SRQs 1, 2, ...; at 2^32 the number came back
// to 0 and a live SRQ's.
func (d *Device) allocSRQN() (uint32, bool) {
	return nextFree24(&d.nextSRQN, func(n uint32) bool { return n != 0 && d.srqs[n] == nil })
}

// ModifySRQ arms the limit event. Resizing is refused, as mlx5 refuses it.
func (d *Device) ModifySRQ(c mlx5.ModifySRQCmd) error {
	if err := d.fatalCmd("MODIFY_SRQ"); err != nil {
		return err
	}
	s := d.srqs[c.SRQN]
	switch {
	case s == nil:
		return cmdErr("MODIFY_SRQ", mlx5.StatusBadResource, "SRQ %d does not exist", c.SRQN)
	case c.Mask&mlx5.SRQAttrMaxWR != 0:
		return cmdErr("MODIFY_SRQ", mlx5.StatusBadParam, "SRQ %d: resizing (max_wr) is not supported", c.SRQN)
	case c.Mask&^mlx5.SRQAttrLimit != 0:
		return cmdErr("MODIFY_SRQ", mlx5.StatusBadParam, "SRQ %d: unknown attribute mask %#x", c.SRQN, c.Mask)
	case c.Mask&mlx5.SRQAttrLimit != 0 && c.Limit >= s.cnt:
		return cmdErr("MODIFY_SRQ", mlx5.StatusBadParam, "SRQ %d: srq_limit %d >= %d WQEs", c.SRQN, c.Limit, s.cnt)
	}
	if c.Mask&mlx5.SRQAttrLimit != 0 {
		s.limit = c.Limit
	}
	return nil
}

// QuerySRQ reports an SRQ's size and limit.
func (d *Device) QuerySRQ(srqn uint32) (mlx5.SRQAttr, error) {
	if err := d.fatalCmd("QUERY_SRQ"); err != nil {
		return mlx5.SRQAttr{}, err
	}
	s := d.srqs[srqn]
	if s == nil {
		return mlx5.SRQAttr{}, cmdErr("QUERY_SRQ", mlx5.StatusBadResource, "SRQ %d does not exist", srqn)
	}
	// max_wr is one less than the ring: libmlx5 keeps one WQE spare to
	// tell a full free list from an empty one (mlx5_ib_query_srq reports
	// it the same way).
	return mlx5.SRQAttr{MaxWR: int(s.cnt) - 1, MaxSGE: (s.stride - mlx5.SRQNextSegSize) / mlx5.DataSegSize, Limit: s.limit}, nil
}

// DestroySRQ destroys an SRQ no QP uses.
func (d *Device) DestroySRQ(srqn uint32) error {
	s := d.srqs[srqn]
	switch {
	case s == nil:
		return cmdErr("DESTROY_SRQ", mlx5.StatusBadResource, "SRQ %d does not exist", srqn)
	case s.users > 0:
		return cmdErr("DESTROY_SRQ", mlx5.StatusResourceBusy, "SRQ %d is used by %d QPs", srqn, s.users)
	}
	d.dropAsyncEvents('s', srqn)
	delete(d.srqs, srqn)
	return nil
}
