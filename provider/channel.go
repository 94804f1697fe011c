package provider

import (
	"encoding/binary"
	"github.com/softnic/softnic/internal/kverbs"
	"time"

	"github.com/softnic/softnic/mlx5"
)

// CompChannel is a completion event channel (struct ibv_comp_channel):
// CQs created on it report their completion events there, one per
// ReqNotify.
type CompChannel struct {
	ctx  *Context
	id   uint32
	pipe *evPipe
	dead bool
	kfd  *kverbs.EventFD // a kernel device's channel fd (kernel_events.go)
}

// CreateCompChannel creates a completion channel
// (ibv_create_comp_channel). It fails with ErrNotSupported when the
// device delivers no events.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	const op = "create_comp_channel"
	if c != nil && c.kev != nil && !c.closed {
		return c.kernCreateCompChannel()
	}
	ev, err := c.events(op)
	if err != nil {
		return nil, err
	}
	id, err := ev.ec.CreateCompChannel()
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	p, err := newEvPipe(ev.ec.PendingEvents(id))
	if err != nil {
		_ = ev.ec.DestroyCompChannel(id)
		return nil, opErr(op, 0, err)
	}
	ch := &CompChannel{ctx: c, id: id, pipe: p}
	ev.chans[id] = ch
	return ch, nil
}

// Fd is a file descriptor that is readable while completion events are
// pending on the channel (ibv_comp_channel.fd): for poll/epoll only; take
// the events with GetCQEvent (reading the fd takes no event). It stays
// the channel's: valid until Destroy, non-blocking, not to be closed.
func (ch *CompChannel) Fd() int {
	if ch.gone() {
		return -1
	}
	if ch.kfd != nil {
		return ch.kfd.Fd()
	}
	return ch.pipe.fd()
}

// Destroy destroys the channel (ibv_destroy_comp_channel); it fails with
// ErrBusy while a CQ uses it.
func (ch *CompChannel) Destroy() error {
	const op = "destroy_comp_channel"
	if ch.gone() {
		return opErr(op, 0, ErrClosed)
	}
	if ch.kfd != nil {
		return ch.kernDestroy()
	}
	c := ch.ctx
	for _, cqn := range sortedKeys(c.cqs) {
		if cq := c.cqs[cqn]; !cq.dead && cq.channel == ch {
			return opErr(op, 0, detail(ErrBusy, "channel is used by cq %#x", cqn))
		}
	}
	if err := c.ev.ec.DestroyCompChannel(ch.id); err != nil {
		return opErr(op, 0, err)
	}
	ch.dead = true
	delete(c.ev.chans, ch.id)
	ch.pipe.close()
	return nil
}

// CQInitAttr describes a CQ to create with CreateCQEx
// (struct ibv_cq_init_attr_ex, the fields softnic models).
type CQInitAttr struct {
	Entries    int          // completions the CQ holds at least
	Channel    *CompChannel // completion events go here (nil: none)
	CompVector int          // completion vector (EQ); the device has one, 0
}

// CreateCQEx creates a CQ (ibv_create_cq_ex) that may report completion
// events on a channel. CreateCQ(n) is CreateCQEx(CQInitAttr{Entries: n}).
func (c *Context) CreateCQEx(a CQInitAttr) (*CQ, error) {
	const op = "create_cq"
	if c.gone() {
		return nil, opErr(op, 0, ErrClosed)
	}
	if a.CompVector != 0 {
		return nil, opErr(op, 0, detail(ErrInvalidArg, "completion vector %d (the device has 1)", a.CompVector))
	}
	if a.Channel != nil && (a.Channel.dead || a.Channel.ctx != c) {
		return nil, opErr(op, 0, detail(ErrInvalidArg, "completion channel closed or of another context"))
	}
	if c.kern != nil {
		return c.kernCreateCQ(a.Entries, a.Channel)
	}
	if c.kev != nil {
		return c.kevCreateCQ(a)
	}
	cq, err := c.CreateCQ(a.Entries)
	if err != nil || a.Channel == nil {
		return cq, err
	}
	if err := c.ev.ec.AttachCQ(cq.cqn, a.Channel.id); err != nil {
		_ = cq.Destroy()
		return nil, opErr(op, 0, err)
	}
	cq.channel = a.Channel
	return cq, nil
}

// Channel is the completion channel the CQ reports to (nil: none).
func (cq *CQ) Channel() *CompChannel {
	if cq == nil {
		return nil
	}
	return cq.channel
}

// ReqNotify asks for one completion event (ibv_req_notify_cq, libmlx5
// mlx5_arm_cq): on the next CQE, or with solicitedOnly on the next CQE
// with the solicited bit or an error. Like libmlx5 it writes the arm word
// sn<<28 | cmd | ci into doorbell-record word 1, then stores it with the
// CQN as one 64-bit write to the CQ arm doorbell (UAR+0x20), fenced on
// both sides (mmio_wc_start / mmio_flush_writes). An event for CQEs
// already beyond the consumer index comes at once.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.gone() {
		return opErr("req_notify_cq", 0, ErrClosed)
	}
	if cq.rx != nil {
		return cq.kernReqNotify(solicitedOnly)
	}
	c := cq.ctx
	a := mlx5.CQArm{SN: uint8(cq.armSN & 3), SolicitedOnly: solicitedOnly, CI: cq.ci & 0xffffff, CQN: cq.cqn}
	if cq.bugs&BugArmBadSN != 0 {
		a.SN = (a.SN + 1) & 3
	}
	w := a.ArmWord()
	if cq.bugs&BugArmNoRecord == 0 {
		cq.dbr.SetWord(mlx5.DBRArm, w)
	}
	if c.host != nil {
		c.host.Work("req_notify", 0, mlx5.DBRecSize)
	}
	var db [8]byte
	binary.BigEndian.PutUint32(db[0:], w)
	binary.BigEndian.PutUint32(db[4:], cq.cqn)
	c.mmio.Flush() // mmio_wc_start()
	c.mmio.Store64(uint64(c.uctx.UARIndex)*mlx5.UARPageSize+mlx5.UARCQArmOffset, binary.LittleEndian.Uint64(db[:]))
	c.mmio.Flush() // mmio_flush_writes()
	return nil
}

// GetCQEvent returns the CQ of the next completion event on the channel
// (ibv_get_cq_event), waiting for at most timeout (see "Waiting" in
// events.go). As libmlx5's mlx5_cq_event it advances the CQ's arm
// sequence number. Events of CQs destroyed meanwhile are skipped. Each
// event must be acknowledged (AckEvents).
func (ch *CompChannel) GetCQEvent(timeout time.Duration) (*CQ, error) {
	const op = "get_cq_event"
	if ch.gone() {
		return nil, opErr(op, 0, ErrClosed)
	}
	c := ch.ctx
	if c.gone() {
		return nil, opErr(op, 0, ErrClosed)
	}
	if ch.kfd != nil {
		return ch.kernGetCQEvent(timeout)
	}
	var out *CQ
	try := func() (bool, error) {
		for skipped := 0; skipped < maxSkippedEvents; skipped++ {
			var buf [1]mlx5.CompEvent
			n, err := c.ev.ec.ReadCompEvents(ch.id, buf[:])
			if err != nil {
				return false, opErr(op, 0, err)
			}
			if n == 0 {
				return false, nil
			}
			ch.pipe.take()
			ch.pipe.refill(func() int { return c.ev.ec.PendingEvents(ch.id) })
			cq := c.cqs[buf[0].CQN]
			if cq.gone() || cq.channel != ch {
				continue
			}
			cq.armSN++
			cq.evReported++
			out = cq
			return true, nil
		}
		return false, nil // only events of no CQ of ours so far: the wait's timers decide
	}
	err := c.wait(op, timeout, ch.pipe, try, func() string { return "completion event" })
	if err == nil && c.host != nil {
		c.host.Work("get_cq_event", 0, 0)
	}
	return out, err
}

// AckEvents acknowledges n completion events of the CQ
// (ibv_ack_cq_events).
func (cq *CQ) AckEvents(n int) {
	if cq == nil || n <= 0 {
		return
	}
	// In int, then saturated at the unacknowledged count: n truncated to
	// uint32 first would wrap evAcked backwards for a large n.
	cq.evAcked += uint32(min(n, int(cq.evReported-cq.evAcked)))
}

// UnackedEvents is the number of completion events GetCQEvent returned
// for the CQ and AckEvents has not acknowledged.
func (cq *CQ) UnackedEvents() int {
	if cq == nil {
		return 0
	}
	return int(cq.evReported - cq.evAcked)
}

// CQModeration is CQ moderation (ibv_modify_cq with IBV_CQ_MODERATE): an
// event waits until Count completions are pending or Period µs have passed
// since the first of them. Zero values switch that limit off.
type CQModeration struct {
	Count  uint16
	Period uint16 // µs, at most mlx5.MaxCQPeriod
}

// Modify sets the CQ's moderation (ibv_modify_cq).
func (cq *CQ) Modify(m CQModeration) error {
	const op = "modify_cq"
	if cq.gone() {
		return opErr(op, 0, ErrClosed)
	}
	cc, ok := cq.ctx.ctl.(mlx5.CQControl)
	if !ok {
		return opErr(op, 0, detail(ErrNotSupported, "device %q cannot modify CQs", cq.ctx.name))
	}
	if m.Period > mlx5.MaxCQPeriod {
		return opErr(op, 0, detail(ErrInvalidArg, "cq_period %d µs (at most %d)", m.Period, mlx5.MaxCQPeriod))
	}
	if err := cc.ModifyCQ(mlx5.ModifyCQCmd{CQN: cq.cqn, Count: m.Count, Period: m.Period}); err != nil {
		return opErr(op, 0, err)
	}
	return nil
}

// Resize gives the CQ room for at least entries completions
// (ibv_resize_cq, libmlx5 mlx5_resize_cq): a new ring of
// roundup_pow2(entries+1) CQEs (nothing happens when that is the current
// size); after RESIZE_CQ the CQEs not polled yet are copied from the old
// ring up to the device's RESIZE_CQ CQE, each to the next index of the new
// ring with the new ring's owner bit, and the resize CQE is consumed
// (mlx5_cq_resize_copy_cqes). It fails (with the command status) if
// entries cannot hold the CQEs not polled.
func (cq *CQ) Resize(entries int) error {
	const op = "resize_cq"
	if cq.gone() {
		return opErr(op, 0, ErrClosed)
	}
	c := cq.ctx
	cc, ok := c.ctl.(mlx5.CQControl)
	if !ok {
		return opErr(op, 0, detail(ErrNotSupported, "device %q cannot resize CQs", c.name))
	}
	if entries <= 0 || entries > c.attr.MaxCQE {
		return opErr(op, 0, detail(ErrInvalidArg, "%d entries (device max %d)", entries, c.attr.MaxCQE))
	}
	nent := roundupPow2(entries + 1)
	if nent == int(cq.nent) {
		return nil
	}
	addr, ring, err := c.allocQueueMem("cq ring", nent*mlx5.CQE64Size, 4096)
	if err != nil {
		return opErr(op, 0, err)
	}
	for i := 0; i < nent; i++ {
		ring[i*mlx5.CQE64Size+mlx5.CQEOffOpOwn] = mlx5.CQInitOpOwn
	}
	if err := cc.ResizeCQ(mlx5.ResizeCQCmd{CQN: cq.cqn, Entries: nent, CQESize: mlx5.CQE64Size, BufAddr: addr}); err != nil {
		_ = c.mem.Free(addr)
		return opErr(op, 0, err)
	}
	// mlx5_cq_resize_copy_cqes.
	nn := uint32(nent)
	var copyErr error
	i := cq.ci
	for {
		src := cq.entry(i)
		if !mlx5.CQEOwnedBySW(src, i, cq.nent) {
			copyErr = detail(ErrBadCQE, "cq %#x resize: CQE %d still owned by hardware, no resize CQE found", cq.cqn, i)
			break
		}
		if src.Opcode() == mlx5.CQEResizeCQ {
			break
		}
		off := ((i + 1) & (nn - 1)) * mlx5.CQE64Size
		dst := ring[off : off+mlx5.CQE64Size]
		copy(dst, src)
		own := uint8(0)
		if mlx5.CQEOwnerBit(i+1, nn) {
			own = 1
		}
		dst[mlx5.CQEOffOpOwn] = dst[mlx5.CQEOffOpOwn]&^1 | own
		i++
		if i-cq.ci > cq.nent {
			copyErr = detail(ErrBadCQE, "cq %#x resize: no resize CQE in the old ring", cq.cqn)
			break
		}
	}
	if copyErr == nil {
		// The CQE at old index k is now at k+1: the resize CQE took one
		// index, so the consumer index moves on by one.
		cq.ci++
	}
	_ = c.mem.Free(cq.ringAddr)
	cq.ring, cq.ringAddr, cq.nent = ring, addr, nn
	if copyErr != nil {
		return opErr(op, 0, copyErr)
	}
	return nil
}
