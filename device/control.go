package device

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/softnic/softnic/bar"
	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/uverbs"
	"github.com/softnic/softnic/wqefetch"
)

// The control plane: uverbs-shaped commands (mlx5.Control). Every bad
// argument is answered with a command status, like firmware, never a panic.

func cmdErr(cmd string, st mlx5.CmdStatus, format string, args ...any) error {
	return &mlx5.CmdError{Cmd: cmd, Status: st, Reason: fmt.Sprintf(format, args...)}
}

// QueryDevice reports the device's capabilities.
func (d *Device) QueryDevice() (mlx5.DeviceAttr, error) {
	if err := d.fatalCmd("QUERY_DEVICE"); err != nil {
		return mlx5.DeviceAttr{}, err
	}
	c := d.spec.Caps
	bfs := d.spec.BAR.BFRegSize
	return mlx5.DeviceAttr{
		FWVersion: fwString(d.bar.Config().FWRev), VendorID: c.VendorID, VendorPartID: c.VendorPartID, HWVer: c.HWVer, MaxCQ: c.MaxCQ,
		MaxQP: c.MaxQP, MaxQPWR: c.MaxQPWR, MaxSGE: c.MaxSGE, MaxCQE: c.MaxCQE, MaxMR: c.MaxMR, MaxPD: c.MaxPD,
		MaxSRQSGE: maxSRQSGE(c.MaxSGE), MaxMRSize: c.MaxMsgSize, MaxInline: c.MaxInline, MaxSQDescSz: mlx5.MaxWQEBBs * mlx5.WQEBBSize,
		MaxQPRdAtomic: c.MaxRdAtom, BFRegSize: bfs, BFBufSize: bfs / 2, NumUARs: d.spec.BAR.NumUARs,
		ActiveMTU: mlx5.MTUFromBytes(c.ActiveMTU), MAC: d.id.MAC, GID: d.GID(), CQEVersion: 1,
	}, nil
}

// maxSRQSGE is max_srq_sge as mlx5_ib reports it: max_rq_sg - 1, where
// max_rq_sg is max_wqe_sz_rq / 16. Assumed (unconfirmed for every
// profile): max_wqe_sz_rq equals max_wqe_sz_sq, the send WQE whose
// max_sge is (size - ctrl - raddr segments) / 16, so max_rq_sg is two
// more than max_sge (ConnectX-5: 512 B, 30 and 32, max_srq_sge 31). The
// SRQ's stride for it (16 + 31*16 = 512 B) is within the 1 KiB CREATE_SRQ
// takes.
func maxSRQSGE(maxSGE int) int { return maxSGE + 1 }

// GetContext hands out the UAR pages of the (single) user context.
func (d *Device) GetContext() (mlx5.ContextResp, error) {
	if err := d.fatalCmd("GET_CONTEXT"); err != nil {
		return mlx5.ContextResp{}, err
	}
	return mlx5.ContextResp{UARIndex: d.spec.BAR.FirstUAR, NumUARs: d.spec.BAR.NumUARs,
		TotBFRegs: 2 * d.spec.BAR.NumUARs, BFRegSize: d.spec.BAR.BFRegSize, CQEVersion: 1}, nil
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (mlx5.PDResp, error) {
	if err := d.fatalCmd("ALLOC_PD"); err != nil {
		return mlx5.PDResp{}, err
	}
	if len(d.pds) >= d.spec.Caps.MaxPD {
		return mlx5.PDResp{}, cmdErr("ALLOC_PD", mlx5.StatusNoResources, "%d PDs in use", len(d.pds))
	}
	pdn, ok := d.allocPDN()
	if !ok {
		return mlx5.PDResp{}, cmdErr("ALLOC_PD", mlx5.StatusNoResources, "no free PD number (%d PDs in use)", len(d.pds))
	}
	d.pds[pdn] = true
	return mlx5.PDResp{PDN: pdn}, nil
}

// allocPDN hands out the next free PD number. A ConnectX's are 24 bits
// (the QP and mkey contexts' pd fields); 0 is never one. They wrap past
// 0xffffff and skip the live ones, as CQ and QP numbers do: counting on
// in 32 bits gave numbers past the 24 bits, and after 2^32 PDs, 0 and
// then the numbers of PDs still in use.
func (d *Device) allocPDN() (uint32, bool) {
	return nextFree24(&d.nextPD, func(n uint32) bool { return n != 0 && !d.pds[n] })
}

// nextFree24 hands out the next 24-bit object number from *next that free
// accepts, wrapping past 0xffffff, and moves *next past it. It fails only
// when free accepts none of the 2^24 numbers.
func nextFree24(next *uint32, free func(uint32) bool) (uint32, bool) {
	for range 1 << 24 {
		n := *next & 0xffffff
		*next = (n + 1) & 0xffffff
		if free(n) {
			return n, true
		}
	}
	return 0, false
}

// DeallocPD frees a protection domain.
func (d *Device) DeallocPD(pdn uint32) error {
	if !d.pds[pdn] {
		return cmdErr("DEALLOC_PD", mlx5.StatusBadResource, "PD %d does not exist", pdn)
	}
	if q := d.firstQP(func(q *qp) bool { return q.pdn == pdn }); q != nil {
		return cmdErr("DEALLOC_PD", mlx5.StatusResourceBusy, "PD %d still has QP %#x", pdn, q.qpn)
	}
	if d.keys.UsesPD(pdn) {
		return cmdErr("DEALLOC_PD", mlx5.StatusResourceBusy, "PD %d still has memory regions", pdn)
	}
	delete(d.pds, pdn)
	return nil
}

// RegMR registers [Addr, Addr+Length) of host memory.
func (d *Device) RegMR(c mlx5.RegMRCmd) (mlx5.RegMRResp, error) {
	if err := d.fatalCmd("REG_MR"); err != nil {
		return mlx5.RegMRResp{}, err
	}
	const all = mlx5.AccessLocalWrite | mlx5.AccessRemoteWrite | mlx5.AccessRemoteRead | mlx5.AccessRemoteAtomic
	switch {
	case !d.pds[c.PDN]:
		return mlx5.RegMRResp{}, cmdErr("CREATE_MKEY", mlx5.StatusBadResource, "PD %d does not exist", c.PDN)
	case c.Length == 0 || c.Length > d.spec.Caps.MaxMsgSize:
		// MaxMsgSize is the max_mr_size QUERY_DEVICE reports.
		return mlx5.RegMRResp{}, cmdErr("CREATE_MKEY", mlx5.StatusBadParam, "length %d (max_mr_size %d)", c.Length, d.spec.Caps.MaxMsgSize)
	case c.Length > uint64(d.mem.Size()) || !d.mem.Contains(c.Addr, int(c.Length)):
		return mlx5.RegMRResp{}, cmdErr("CREATE_MKEY", mlx5.StatusBadParam, "[%#x,+%d) is not host memory the device can reach", c.Addr, c.Length)
	case c.Access&^all != 0:
		return mlx5.RegMRResp{}, cmdErr("CREATE_MKEY", mlx5.StatusBadParam, "unknown access bits %#x", c.Access&^all)
	case c.Access&(mlx5.AccessRemoteWrite|mlx5.AccessRemoteAtomic) != 0 && c.Access&mlx5.AccessLocalWrite == 0:
		// IB spec: remote write/atomic require local write.
		return mlx5.RegMRResp{}, cmdErr("CREATE_MKEY", mlx5.StatusBadParam, "remote write/atomic access without local write")
	case d.keys.Len() >= d.spec.Caps.MaxMR:
		return mlx5.RegMRResp{}, cmdErr("CREATE_MKEY", mlx5.StatusNoResources, "%d MRs in use", d.keys.Len())
	}
	key, ok := d.allocMRKey()
	if !ok {
		return mlx5.RegMRResp{}, cmdErr("CREATE_MKEY", mlx5.StatusNoResources, "every memory key is taken")
	}
	va := c.HCAVA
	if va == 0 {
		va = c.Addr
	}
	if err := d.keys.Add(dma.MR{Key: key, PDN: c.PDN, Addr: c.Addr, Length: c.Length, HCAVA: va, Access: c.Access}); err != nil {
		return mlx5.RegMRResp{}, cmdErr("CREATE_MKEY", mlx5.StatusBadParam, "%v", err)
	}
	return mlx5.RegMRResp{LKey: key, RKey: key}, nil
}

// allocMRKey takes the next free memory key: mkey = index<<8 | a variant
// byte software chooses (mlx5.md §8); a fixed pattern keeps runs
// deterministic. The index is 24 bits and wraps past 0; the variant moves
// on at each wrap, so that a wrapped index does not bring back the key
// its previous holder had (a peer may still hold that rkey), and a key a
// live MR holds is skipped. Without the wrap the 2^24th registration
// overflowed the index out of the key, and the next ones collided with
// live MRs' keys: RegMR failed with BAD_PARAM.
func (d *Device) allocMRKey() (uint32, bool) {
	for range 1 << 24 {
		n := d.nextMR
		d.nextMR++
		idx := n & 0xffffff
		if idx == 0 {
			continue
		}
		key := idx<<8 | (idx*0x25+0x11+(n>>24))&0xff
		if key == mlx5.InvalidKey {
			key++
		}
		if _, live := d.keys.Lookup(key); !live {
			return key, true
		}
	}
	return 0, false
}

// DeregMR destroys a memory key.
func (d *Device) DeregMR(lkey uint32) error {
	if err := d.keys.Remove(lkey); err != nil {
		return cmdErr("DESTROY_MKEY", mlx5.StatusBadResource, "%v", err)
	}
	// DESTROY_MKEY completes once the DMA writes already issued through
	// the key have drained: nothing lands in the buffer after it returns.
	d.dma.Drain()
	return nil
}

// CreateCQ creates a completion queue whose ring lives in host memory.
func (d *Device) CreateCQ(c mlx5.CreateCQCmd) (mlx5.CreateCQResp, error) {
	if err := d.fatalCmd("CREATE_CQ"); err != nil {
		return mlx5.CreateCQResp{}, err
	}
	switch {
	case c.Entries <= 0 || c.Entries&(c.Entries-1) != 0 || c.Entries > d.spec.Caps.CQRing():
		return mlx5.CreateCQResp{}, cmdErr("CREATE_CQ", mlx5.StatusBadParam, "%d entries (need a power of two <= %d)", c.Entries, d.spec.Caps.CQRing())
	case c.CQESize != mlx5.CQE64Size:
		return mlx5.CreateCQResp{}, cmdErr("CREATE_CQ", mlx5.StatusBadParam, "CQE size %d (only 64 is modelled)", c.CQESize)
	case !d.mem.Contains(c.BufAddr, c.Entries*mlx5.CQE64Size) || c.BufAddr%64 != 0:
		return mlx5.CreateCQResp{}, cmdErr("CREATE_CQ", mlx5.StatusBadParam, "buffer %#x not in host memory or not 64-byte aligned", c.BufAddr)
	case !d.mem.Contains(c.DBAddr, mlx5.DBRecSize) || c.DBAddr%8 != 0:
		return mlx5.CreateCQResp{}, cmdErr("CREATE_CQ", mlx5.StatusBadParam, "doorbell record %#x not in host memory or misaligned", c.DBAddr)
	case len(d.cqs) >= d.spec.Caps.MaxCQ:
		return mlx5.CreateCQResp{}, cmdErr("CREATE_CQ", mlx5.StatusNoResources, "%d CQs in use", len(d.cqs))
	}
	cqn, ok := d.allocCQN()
	if !ok {
		return mlx5.CreateCQResp{}, cmdErr("CREATE_CQ", mlx5.StatusNoResources, "every CQ number is taken")
	}
	d.cqs[cqn] = &cq{cqn: cqn, buf: c.BufAddr, dbr: c.DBAddr, nent: uint32(c.Entries), oi: c.OverrunIgnore}
	if d.chk != nil {
		d.chk.cqCreated(d.cqs[cqn], c)
	}
	return mlx5.CreateCQResp{CQN: cqn}, nil
}

// allocCQN takes the next free CQ number. CQ numbers are 24 bits, as the
// CQ arm doorbell and the EQE carry them (mlx5.ParseCQArm keeps 24), and
// wrap (0 is never one); a number a live CQ holds is skipped. Without the
// wrap the 2^24th CQ a client created got a number whose arm doorbell
// armed another CQ (or none): its completion events never came.
func (d *Device) allocCQN() (uint32, bool) {
	return nextFree24(&d.nextCQN, func(n uint32) bool { return n != 0 && d.cqs[n] == nil })
}

// DestroyCQ destroys an unused completion queue.
func (d *Device) DestroyCQ(cqn uint32) error {
	if d.cqs[cqn] == nil {
		return cmdErr("DESTROY_CQ", mlx5.StatusBadResource, "CQ %d does not exist", cqn)
	}
	if q := d.firstQP(func(q *qp) bool { return q.scq.cqn == cqn || q.rcq.cqn == cqn }); q != nil {
		return cmdErr("DESTROY_CQ", mlx5.StatusResourceBusy, "CQ %d is used by QP %#x", cqn, q.qpn)
	}
	d.dropCompEvents(d.cqs[cqn])
	d.dropAsyncEvents('c', cqn)
	delete(d.cqs, cqn)
	return nil
}

// CreateQP creates a queue pair in RESET. Its buffer holds the RQ at offset
// 0 and the SQ right after it (libmlx5's layout, mlx5.md §4.1).
func (d *Device) CreateQP(c mlx5.CreateQPCmd) (mlx5.CreateQPResp, error) {
	if err := d.fatalCmd("CREATE_QP"); err != nil {
		return mlx5.CreateQPResp{}, err
	}
	pow2 := func(n int) bool { return n > 0 && n&(n-1) == 0 }
	scq, rcq := d.cqs[c.SendCQN], d.cqs[c.RecvCQN]
	rqBytes := c.RQWQECnt << c.RQWQEShift
	switch {
	case c.Type != mlx5.QPTypeRC && c.Type != mlx5.QPTypeUC && c.Type != mlx5.QPTypeUD:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadParam, "QP type %d not supported (RC, UC, UD)", c.Type)
	case c.SRQN != 0 && d.srqs[c.SRQN] == nil:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadResource, "SRQ %d does not exist", c.SRQN)
	case c.SRQN != 0 && c.RQWQECnt != 0:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadParam, "a QP on SRQ %d has no RQ of its own (%d WQEs asked)", c.SRQN, c.RQWQECnt)
	case !d.pds[c.PDN]:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadResource, "PD %d does not exist", c.PDN)
	case scq == nil || rcq == nil:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadResource, "send CQ %d / recv CQ %d does not exist", c.SendCQN, c.RecvCQN)
	case c.SQWQECnt != 0 && (!pow2(c.SQWQECnt) || c.SQWQECnt > d.spec.Caps.MaxQPWR*mlx5.MaxWQEBBs):
		// 0 is a QP without a send queue (max_send_wr 0: libmlx5 sizes
		// none, mlx5_ib sets the QPC's no_sq), as 0 RQ WQEs is one
		// without a receive queue.
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadParam, "SQ of %d WQEBBs", c.SQWQECnt)
	case c.RQWQECnt != 0 && (!pow2(c.RQWQECnt) || c.RQWQECnt > d.spec.Caps.MaxQPWR || c.RQWQEShift < 4 || c.RQWQEShift > 10):
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadParam, "RQ of %d WQEs, stride 2^%d", c.RQWQECnt, c.RQWQEShift)
	case !d.mem.Contains(c.BufAddr, rqBytes+c.SQWQECnt*mlx5.WQEBBSize) || c.BufAddr%64 != 0:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadParam, "QP buffer %#x not in host memory or misaligned", c.BufAddr)
	case !d.mem.Contains(c.DBAddr, mlx5.DBRecSize) || c.DBAddr%8 != 0:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusBadParam, "doorbell record %#x not in host memory or misaligned", c.DBAddr)
	case len(d.qps) >= d.spec.Caps.MaxQP:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusNoResources, "%d QPs in use", len(d.qps))
	case d.sqBBs+c.SQWQECnt > maxSQWQEBBs:
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusNoResources, "SQ of %d WQEBBs: %d of the device's %d in use", c.SQWQECnt, d.sqBBs, maxSQWQEBBs)
	}
	qpn, ok := d.allocQPN()
	if !ok {
		return mlx5.CreateQPResp{}, cmdErr("CREATE_QP", mlx5.StatusNoResources, "no free QP number (%d QPs in use)", len(d.qps))
	}
	// bfregs 0 and 1 of each UAR are the "regular" ones user QPs get
	// (mlx5.md §2.2); hand them out round robin.
	n := d.nQPs
	d.nQPs++
	nu := d.spec.BAR.NumUARs
	if nu <= 0 {
		nu = 1
	}
	uar := d.spec.BAR.FirstUAR + uint32(n/2%nu)
	bfreg := n % 2
	q := &qp{d: d, qpn: qpn, typ: c.Type, pdn: c.PDN, scq: scq, rcq: rcq, state: mlx5.QPStateRST, sigAll: c.SigAll, dbr: c.DBAddr, uidx: c.UIdx & 0xffffff}
	if s := d.srqs[c.SRQN]; s != nil {
		q.srq, q.rq = s, s
		s.users++
	} else {
		q.rq = &rqRing{d: d, qpn: qpn, pdn: c.PDN, base: c.BufAddr, dbr: c.DBAddr, cnt: uint32(c.RQWQECnt), stride: 1 << c.RQWQEShift}
	}
	sq := wqefetch.NewQueue(qpn, c.BufAddr+uint64(rqBytes), c.SQWQECnt, d.node)
	sq.Datagram = c.Type == mlx5.QPTypeUD
	q.req.init(q, sq, c.SQWQECnt)
	q.resp.q = q
	q.resp.setMaxDestRd(0)
	q.req.reset()
	d.qps[qpn] = q
	d.sqBBs += c.SQWQECnt
	resp := mlx5.CreateQPResp{QPN: qpn, BFRegIndex: int(uar-d.spec.BAR.FirstUAR)*2 + bfreg,
		BFRegOffset: uint64(uar)*mlx5.UARPageSize + mlx5.UARBFRegOffset + uint64(bfreg*d.spec.BAR.BFRegSize)}
	if d.spec.BAR.BFRegSize > 0 && !(d.spec.Caps.BFReg0NoBlueFlame && resp.BFRegIndex == 0) {
		resp.BFBufSize = d.spec.BAR.BFRegSize / 2
	}
	d.qpCreated(q, c, uar, bfreg, resp)
	return resp, nil
}

// maxSQWQEBBs bounds the WQEBBs of all the send queues of one device.
// The model keeps, per WQEBB of a send queue it fetches from, a staging
// copy of the ring and an in-flight range (wqefetch, about 100 bytes,
// made at the queue's first doorbell), and a WQE slot for each WQE
// outstanding (requester, about 200 bytes more): Go heap of the daemon,
// not the client's memory. A QP may have 2^19 WQEBBs (max_qp_wr x 16) on
// a buffer other QPs share, so without a bound a client could make the
// daemon allocate 150 MiB a QP for as many QPs as max_qp. A ConnectX's QP
// table lives in the ICM it is given, finite too; the figure is an
// assumption: 65536 QPs of the testbed's default caps (512 WQEBBs each,
// issue 11's 64 K QPs), or 64 of the largest send queue. Filled to the
// last WQEBB, that is about 10 GiB of heap: the bound stops a runaway
// client, it does not make a small daemon safe from a large one.
const maxSQWQEBBs = 1 << 25

// multicastQPN is the destination QPN of a multicast packet (IBA 9.8.1,
// rxe's IB_MULTICAST_QPN: its receive path hands every packet to it to
// the multicast code), so no QP may have it.
const multicastQPN = 0xffffff

// allocQPN takes the next free QP number. QP numbers are 24 bits and
// wrap (0 and 1 are the special QPs, 0xffffff the multicast QPN a BTH
// names for a multicast group, never one QP: IBA 9.8.1, rxe's
// IB_MULTICAST_QPN); a number a live QP holds is skipped, as the
// firmware's allocator never hands one out twice (a client that keeps one
// QP and creates and destroys 2^24 others reaches it). It fails only with
// every number taken.
func (d *Device) allocQPN() (uint32, bool) {
	return nextFree24(&d.nextQPN, func(n uint32) bool { return n >= 2 && n != multicastQPN && d.qps[n] == nil })
}

// DestroyQP destroys a queue pair. When it returns the QP is quiesced:
// its timers are stopped, its queued frames will not be sent, and the CQEs
// it had in flight have landed, so that the provider can clean them out of
// its CQs before anything else reads them.
func (d *Device) DestroyQP(qpn uint32) error {
	d.bar.LandPosted()
	q := d.qps[qpn]
	if q == nil {
		return cmdErr("DESTROY_QP", mlx5.StatusBadResource, "QP %#x does not exist", qpn)
	}
	q.destroy(d.eng.Now())
	if q.srq != nil {
		q.srq.users--
	}
	d.dropAsyncEvents('q', qpn)
	delete(d.qps, qpn)
	d.sqBBs -= q.req.sq.Size
	d.qpCache = [4]qpEnt{}
	delete(d.fx.lastDB, qpn)
	if d.chk != nil {
		d.chk.qpDestroyed(qpn)
	}
	return nil
}

// QueryQP reports a QP's state and main attributes.
func (d *Device) QueryQP(qpn uint32) (mlx5.QPAttr, error) {
	if err := d.fatalCmd("QUERY_QP"); err != nil {
		return mlx5.QPAttr{}, err
	}
	q := d.qps[qpn]
	if q == nil {
		return mlx5.QPAttr{}, cmdErr("QUERY_QP", mlx5.StatusBadResource, "QP %#x does not exist", qpn)
	}
	a := mlx5.QPAttr{State: q.state, PathMTU: mlx5.MTUFromBytes(q.mtu), DestQPN: q.destQPN,
		SQPSN: uint32(q.req.psn), RQPSN: uint32(q.resp.ePSN),
		AccessFlags: q.access & (mlx5.AccessRemoteWrite | mlx5.AccessRemoteRead | mlx5.AccessRemoteAtomic),
		QKey:        q.qkey, Port: 1, MaxRdAtomic: q.maxRd, MaxDestRdAtomic: q.maxDestRd,
		MinRNRTimer: q.minRNR, Timeout: q.timeout, RetryCnt: q.retryCnt, RNRRetry: q.rnrRetry, SigAll: q.sigAll}
	// The primary path is the AV of RTR (RC and UC; a UD QP has none).
	// A ConnectX keeps max_rd_atomic and max_dest_rd_atomic as a log2
	// and answers the power of two at or above what was asked; this
	// model keeps and enforces the number asked, so it answers that
	// (an assumption that differs from silicon for a non-power of two).
	if q.dstIP.IsValid() && q.typ != mlx5.QPTypeUD {
		a.AV, a.HasAV = q.av, true
	}
	if r, ok := q.rq.(*rqRing); ok && q.srq == nil {
		a.MaxRecvWR, a.MaxRecvSGE = r.cnt, uint32(r.stride/mlx5.DataSegSize)
	}
	return a, nil
}

// checkTransition checks a MODIFY_QP's attributes against the IB table the
// kernel enforces before a command reaches firmware (uverbs.CheckTransition),
// for the transitions this device has a command for: none into or out of
// SQD (mlx5_ib has no RTS2SQD, so no QP gets there), and SQE→RTS only for
// UD and UC, the types the device moves to SQE.
// attrs excludes STATE and CUR_STATE (checked against the QP's state
// already); mask is the whole mask, for the message.
func checkTransition(q *qp, to mlx5.QPState, attrs, mask uint32) error {
	t, okT := uverbs.QPTypeFromMLX5(q.typ)
	cur, okC := uverbs.QPStateFromMLX5(q.state)
	next, okN := uverbs.QPStateFromMLX5(to)
	var te *uverbs.TransitionError
	if okT && okC && okN && next != uverbs.QPStateSQD && cur != uverbs.QPStateSQD && (cur != uverbs.QPStateSQE || t == uverbs.QPTypeUD || t == uverbs.QPTypeUC) &&
		!errors.As(uverbs.CheckTransition(t, cur, next, uverbs.QPAttrMask(attrs)), &te) {
		return nil
	}
	return transitionErr(q, to, te, mask)
}

// transitionErr is the command status of a refused move: BAD_PARAM for
// attributes the kernel's table wants or refuses (te), BAD_QP_STATE for a
// move it does not have.
func transitionErr(q *qp, to mlx5.QPState, te *uverbs.TransitionError, mask uint32) error {
	switch {
	case te != nil && te.Missing != 0:
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "%v→%v needs attributes %#x (mask %#x)", q.state, to, uint32(te.Missing), mask)
	case te != nil && te.Extra != 0:
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "%v→%v does not take attributes %#x", q.state, to, uint32(te.Extra))
	}
	return cmdErr("MODIFY_QP", mlx5.StatusBadQPState, "QP %#x cannot go from %v to %v", q.qpn, q.state, to)
}

// checkLeave checks a move to RESET or ERR against the kernel's table
// for the QP's state (mask without the state bit), as checkTransition
// does for the others; a QPC-only state goes to RESET or ERR as before.
func checkLeave(q *qp, to mlx5.QPState, mask uint32) error {
	t, okT := uverbs.QPTypeFromMLX5(q.typ)
	cur, okC := uverbs.QPStateFromMLX5(q.state)
	next, _ := uverbs.QPStateFromMLX5(to)
	if !okT || !okC {
		return nil
	}
	if cur == uverbs.QPStateReset && next == uverbs.QPStateErr {
		cur = uverbs.QPStateErr // the same (empty) attribute set as ERR→ERR
	}
	var te *uverbs.TransitionError
	if !errors.As(uverbs.CheckTransition(t, cur, next, uverbs.QPAttrMask(mask)), &te) {
		return nil
	}
	return transitionErr(q, to, te, mask)
}

// ModifyQP moves a QP through RESET → INIT → RTR → RTS (and ERR / RESET
// from anywhere), checking the attributes each transition needs.
func (d *Device) ModifyQP(c mlx5.ModifyQPCmd) error {
	if err := d.fatalCmd("MODIFY_QP"); err != nil {
		return err
	}
	// The doorbells rung before the command land first (bar.LandPosted).
	d.bar.LandPosted()
	q := d.qps[c.QPN]
	if q == nil {
		return cmdErr("MODIFY_QP", mlx5.StatusBadResource, "QP %#x does not exist", c.QPN)
	}
	to := q.state
	if c.Mask&mlx5.AttrState != 0 {
		to = c.State
	}
	if c.Mask&mlx5.AttrCurState != 0 && c.CurState != q.state {
		return cmdErr("MODIFY_QP", mlx5.StatusBadQPState, "cur_state %v but QP %#x is %v", c.CurState, q.qpn, q.state)
	}
	now := d.eng.Now()
	attrs := c.Mask &^ (mlx5.AttrState | mlx5.AttrCurState)
	if to == mlx5.QPStateRST || to == mlx5.QPStateERR {
		// From any state, but only with the state (ib_modify_qp_is_ok
		// takes no attribute, CUR_STATE included, for a move to RESET or
		// ERR). RESET→ERR is accepted, as the provider does (mlx5_ib's
		// optab has 2ERR though the IB table does not list it).
		if err := checkLeave(q, to, c.Mask&^mlx5.AttrState); err != nil {
			return err
		}
	}
	switch to {
	case mlx5.QPStateRST:
		if q.state != mlx5.QPStateRST {
			// Nothing of the old incarnation lands later, whatever state
			// it leaves (the provider then cleans the QP's CQEs out). Only
			// ERR→RESET landed them: a UD datagram received just before
			// RTS→RESET completed after it, and the provider took its CQE
			// for the new incarnation's first receive (its WR ID, a buffer
			// the data never reached).
			d.landAll(q.scq)
			if q.rcq != q.scq {
				d.landAll(q.rcq)
			}
			if d.chk != nil {
				d.chk.qpReset(q.qpn)
			}
		}
		q.reset()
		return nil
	case mlx5.QPStateERR:
		q.toError(now)
		return nil
	}
	// CUR_STATE is an attribute of the table too: only RTR→RTS and the
	// moves to RTS from RTS, SQD and SQE take it (ib_modify_qp_is_ok).
	if err := checkTransition(q, to, c.Mask&^mlx5.AttrState, c.Mask); err != nil {
		return err
	}
	// Validate everything before changing anything.
	if attrs&mlx5.AttrPort != 0 && c.Port != 1 {
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "port %d (the device has port 1)", c.Port)
	}
	if attrs&mlx5.AttrPKeyIndex != 0 && c.PKeyIndex != 0 {
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "pkey index %d (table has 1 entry)", c.PKeyIndex)
	}
	if attrs&mlx5.AttrPathMTU != 0 {
		if b := c.PathMTU.Bytes(); b == 0 || b > d.spec.Caps.ActiveMTU {
			return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "path MTU %d exceeds the port's active MTU %d or is invalid", b, d.spec.Caps.ActiveMTU)
		}
	}
	var dst netip.Addr
	if attrs&mlx5.AttrAV != 0 {
		dst = netip.AddrFrom16(c.AV.DGID).Unmap()
		if !dst.Is4() || dst.IsUnspecified() {
			return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "AV DGID %v is not an IPv4-mapped RoCEv2 GID", netip.AddrFrom16(c.AV.DGID))
		}
		if c.AV.SGIDIndex != 0 && c.AV.SGIDIndex != 1 {
			return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "sgid index %d", c.AV.SGIDIndex)
		}
	}
	if attrs&mlx5.AttrDestQPN != 0 && (c.DestQPN == 0 || c.DestQPN > 0xffffff) {
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "dest QPN %#x", c.DestQPN)
	}
	if attrs&mlx5.AttrMaxQPRdAtomic != 0 && int(c.MaxQPRdAtomic) > d.spec.Caps.MaxRdAtom {
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "max_rd_atomic %d > %d", c.MaxQPRdAtomic, d.spec.Caps.MaxRdAtom)
	}
	if attrs&mlx5.AttrMaxDestRdAtomic != 0 && int(c.MaxDestRdAtomic) > d.spec.Caps.MaxRdAtom {
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "max_dest_rd_atomic %d > %d", c.MaxDestRdAtomic, d.spec.Caps.MaxRdAtom)
	}
	if attrs&mlx5.AttrRetryCnt != 0 && c.RetryCnt > 7 || attrs&mlx5.AttrRNRRetry != 0 && c.RNRRetry > 7 {
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "retry_cnt %d / rnr_retry %d (max 7)", c.RetryCnt, c.RNRRetry)
	}
	if attrs&mlx5.AttrTimeout != 0 && c.Timeout > 31 || attrs&mlx5.AttrMinRNRTimer != 0 && c.MinRNRTimer > 31 {
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "timeout %d / min_rnr_timer %d (max 31)", c.Timeout, c.MinRNRTimer)
	}
	// Each PSN only when its own bit is set: the other field is whatever
	// the caller left there.
	if attrs&mlx5.AttrSQPSN != 0 && c.SQPSN > 0xffffff || attrs&mlx5.AttrRQPSN != 0 && c.RQPSN > 0xffffff {
		return cmdErr("MODIFY_QP", mlx5.StatusBadParam, "PSN over 24 bits")
	}
	// Apply.
	if attrs&mlx5.AttrAccessFlags != 0 {
		q.access = c.AccessFlags
	}
	if attrs&mlx5.AttrQKey != 0 {
		q.qkey = c.QKey
	}
	if attrs&mlx5.AttrAV != 0 {
		q.av = c.AV
		q.dstIP = dst
	}
	if attrs&mlx5.AttrPathMTU != 0 {
		q.mtu = c.PathMTU.Bytes()
	}
	if attrs&mlx5.AttrDestQPN != 0 {
		q.destQPN = c.DestQPN
	}
	if attrs&mlx5.AttrRQPSN != 0 {
		q.resp.ePSN = roce.PSN(c.RQPSN)
	}
	// mlx5_ib writes log_rra_max and log_sra_max only for a non-zero
	// max_dest_rd_atomic / max_rd_atomic: 0 leaves the context's 0, that
	// is 2^0, one READ/atomic each way (and QUERY_QP reports 1).
	if attrs&mlx5.AttrMaxDestRdAtomic != 0 {
		q.maxDestRd = max(c.MaxDestRdAtomic, 1)
		q.resp.setMaxDestRd(q.maxDestRd)
	}
	if attrs&mlx5.AttrMinRNRTimer != 0 {
		q.minRNR = c.MinRNRTimer
	}
	if attrs&mlx5.AttrTimeout != 0 {
		q.timeout = c.Timeout
	}
	if attrs&mlx5.AttrRetryCnt != 0 {
		q.retryCnt = c.RetryCnt
		q.req.retryLeft = int(c.RetryCnt)
	}
	if attrs&mlx5.AttrRNRRetry != 0 {
		q.rnrRetry = c.RNRRetry
		q.req.rnrLeft = int(c.RNRRetry)
	}
	if attrs&mlx5.AttrSQPSN != 0 {
		q.req.setSQPSN(roce.PSN(c.SQPSN))
	}
	if attrs&mlx5.AttrMaxQPRdAtomic != 0 {
		q.maxRd = max(c.MaxQPRdAtomic, 1) // see max_dest_rd_atomic above
	}
	if to == mlx5.QPStateRTR && q.typ == mlx5.QPTypeUD {
		q.sport = roce.QPSourcePort(q.qpn)
	} else if to == mlx5.QPStateRTR {
		sp := c.AV.UDPSPort
		if sp == 0 {
			sp = roce.UDPSourcePort(c.AV.FlowLabel, q.qpn, q.destQPN)
		}
		q.sport = sp
	}
	q.setState(now, to)
	if to == mlx5.QPStateRTR && q.srq == nil && q.rq.size() > 0 {
		q.rq.prime(now)
	}
	return nil
}

// sortedQPs lists the live QPs by number, so that work over all of them
// does not depend on map iteration order.
func (d *Device) sortedQPs() []*qp {
	qs := make([]*qp, 0, len(d.qps))
	for _, q := range d.qps {
		qs = append(qs, q)
	}
	slices.SortFunc(qs, func(a, b *qp) int { return cmp.Compare(a.qpn, b.qpn) })
	return qs
}

// firstQP returns the lowest-numbered QP matching f, so that messages do
// not depend on map iteration order.
func (d *Device) firstQP(f func(*qp) bool) *qp {
	var best *qp
	for _, q := range d.qps {
		if f(q) && (best == nil || q.qpn < best.qpn) {
			best = q
		}
	}
	return best
}

func fwString(r bar.FWRev) string { return fmt.Sprintf("%d.%d.%04d", r.Major, r.Minor, r.Sub) }

// QueryPort reports port 1: its state, MTUs and GID table (one RoCE v2
// GID, ::ffff:IP).
func (d *Device) QueryPort(port int) (mlx5.PortAttr, error) {
	if port != 1 {
		return mlx5.PortAttr{}, cmdErr("QUERY_PORT", mlx5.StatusBadParam, "port %d (the device has port 1)", port)
	}
	const physDisabled, physLinkUp = 3, 5 // ib_port_phys_state
	mtu := mlx5.MTUFromBytes(d.spec.Caps.ActiveMTU)
	a := mlx5.PortAttr{State: uint8(uverbs.PortActive), PhysState: physLinkUp, MaxMTU: mtu,
		ActiveMTU: mtu, MaxMsgSize: d.spec.Caps.MaxMsgSize, GIDs: [][16]byte{d.GID(), d.GID()}}
	// Both GID indexes the device takes in an AV (MODIFY_QP: sgid index
	// 0 or 1) hold the port's IPv4-mapped RoCEv2 GID, so the table a
	// driver reads says what modify_qp accepts (docs/perf.md: -x 0 and 1).
	// Assumption: a ConnectX lists each IP twice, as RoCE v1 and v2; this
	// model speaks only v2 and lists it under both indexes.
	if !d.LinkUp() {
		a.State, a.PhysState = uint8(uverbs.PortDown), physDisabled
	}
	return a, nil
}
