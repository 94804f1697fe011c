package device

import (
	"slices"
	"time"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Completion and asynchronous events: the device side (EQEs, eq.go), the
// kernel side that dispatches them (completion channels and the async
// queue of the user context, mlx5.EventControl), and the sources of the
// asynchronous events. docs/events.md has the mapping of device
// conditions to events and where each comes from.

// Event counters (the catalogue's style: names are what they count).
var (
	CtrCQArmsSolicited     = trace.NewCounter("cq_arms_solicited")      // arms for solicited completions only
	CtrCQArmSN             = trace.NewCounter("cq_arm_sn_unexpected")   // arm sequence number ≠ completion events raised mod 4 (mlx5.md §6.7)
	CtrCQArmBadCI          = trace.NewCounter("cq_arm_bad_ci")          // arm consumer index not within the ring behind the producer
	CtrCQArmDBRMismatch    = trace.NewCounter("cq_arm_dbr_mismatch")    // doorbell record word 1 ≠ the arm doorbell (written after it, or not at all)
	CtrCQArmInError        = trace.NewCounter("cq_arm_cq_in_error")     // arm of a CQ in error: no event will come
	CtrCQArmImmediate      = trace.NewCounter("cq_arm_fired_at_once")   // arms that found qualifying CQEs beyond their consumer index
	CtrCQEvents            = trace.NewCounter("cq_events")              // completion EQEs raised (one per arm)
	CtrCQModerationTimer   = trace.NewCounter("cq_moderation_timeouts") // events raised by the cq_period timer
	CtrCQResizes           = trace.NewCounter("cq_resizes")
	CtrEQEs                = trace.NewCounter("eqes")                     // EQEs written
	CtrEQOverrun           = trace.NewCounter("eq_overrun")               // EQEs dropped: the EQ's consumer was a ring behind
	CtrEQEWriteError       = trace.NewCounter("eqe_write_error")          // an EQE outside host memory
	CtrEQNoMemory          = trace.NewCounter("eq_no_memory")             // no host memory for an EQ ring: its events skip the ring
	CtrInterrupts          = trace.NewCounter("msix_interrupts")          // MSI-X messages sent
	CtrEQDoorbells         = trace.NewCounter("eq_doorbells")             // EQ doorbells accepted
	CtrEQDoorbellUnknownEQ = trace.NewCounter("eq_doorbell_unknown_eq")   // EQ doorbell naming no EQ
	CtrEQDoorbellWrongUAR  = trace.NewCounter("eq_doorbell_wrong_uar")    // EQ doorbell on a UAR page other than the EQ's
	CtrEQDoorbellBadCI     = trace.NewCounter("eq_doorbell_bad_ci")       // EQ doorbell CI beyond the EQEs written
	CtrCmdDoorbellIgnored  = trace.NewCounter("cmd_doorbell_ignored")     // command-interface doorbell (mailboxes not modelled)
	CtrCompEvents          = trace.NewCounter("comp_events")              // completion events queued on a channel
	CtrCompEventsDropped   = trace.NewCounter("comp_events_dropped")      // channel queue full: event dropped
	CtrCompEventNoChannel  = trace.NewCounter("comp_events_no_channel")   // event of a CQ without a channel (uverbs drops it)
	CtrCompEventStaleCQ    = trace.NewCounter("comp_events_destroyed_cq") // event of a CQ destroyed meanwhile
	CtrAsyncEvents         = trace.NewCounter("async_events")             // asynchronous events queued
	CtrAsyncEventsDropped  = trace.NewCounter("async_events_dropped")     // async queue full: event dropped
	CtrAsyncEventUnmapped  = trace.NewCounter("async_event_unmapped")     // an event type with no EQE
	CtrAsyncEventStale     = trace.NewCounter("async_events_destroyed")   // event of a QP, CQ or SRQ destroyed while its EQE was in flight
	CtrEQEUnknown          = trace.NewCounter("eqe_not_an_event")         // an EQE the dispatcher does not deliver
	CtrLinkDown            = trace.NewCounter("link_down")                // port went down
	CtrLinkUp              = trace.NewCounter("link_up")                  // port came (back) up
	CtrTxDropLinkDown      = trace.NewCounter("tx_drop_link_down")        // frames not sent: the port is down
	CtrRxDropLinkDown      = trace.NewCounter("rx_drop_link_down")        // frames not received: the port is down
)

const ctrAsyncEventPrefix = "async_event_" // + event name, e.g. async_event_CQ_ERR

// eventState is the device's event machinery.
type eventState struct {
	spec      EventSpec
	kernelUAR uint32
	async     eq
	comp      eq
	eqeFree   []*eqeLanding
	// deliveryFree pools the landings of dispatched events (deliverAt).
	deliveryFree []*deliveryLanding

	chans  map[uint32]*compChannel
	nextCh uint32
	asyncQ fifo[mlx5.AsyncEvent]
	notify func(ch uint32)

	asyncRaised, asyncDispatched uint32 // sequence numbers (trace flows)

	linkDown bool
}

// compChannel is a completion channel: a bounded queue of CQ numbers.
type compChannel struct {
	id uint32
	q  fifo[mlx5.CompEvent]
}

// fifo is a small queue.
type fifo[T any] struct{ s []T }

func (f *fifo[T]) len() int { return len(f.s) }
func (f *fifo[T]) push(v T) { f.s = append(f.s, v) }

// remove drops the queued entries del reports, keeping the others' order.
func (f *fifo[T]) remove(del func(T) bool) { f.s = slices.DeleteFunc(f.s, del) }
func (f *fifo[T]) pop(out []T) int {
	n := copy(out, f.s)
	f.s = f.s[:copy(f.s, f.s[n:])]
	return n
}

var asyncEventNames = func() (m [256]trace.Counter) {
	for i := range m {
		m[i] = trace.NewCounter(ctrAsyncEventPrefix + mlx5.EventType(i).String())
	}
	return m
}()

// Trace flows of events: 0xEE in the top byte, then the kind, the object
// and a sequence number, so that cq_arm, eqe_write, msix and event of one
// notification share a flow.
func eventFlow(kind uint8, num, seq uint32) uint64 {
	return 0xEE<<56 | uint64(kind)<<48 | uint64(num&0xffffff)<<24 | uint64(seq&0xffffff)
}

const (
	flowComp  = 1
	flowAsync = 2
)

// asyncEvent raises an asynchronous event of type typ for object num (a
// QPN, CQN, SRQN or port): an EQE on the async EQ, which the kernel side
// delivers to the user context's async queue.
func (d *Device) asyncEvent(t sim.Time, typ mlx5.EventType, num uint32) {
	d.inc(asyncEventNames[typ])
	et, sub, ok := mlx5.EQEForEvent(typ)
	if !ok {
		d.warn(t, CtrAsyncEventUnmapped, "asynchronous event %v for %#x has no EQE type", typ, num)
		return
	}
	f := mlx5.EQEFields{Type: et, SubType: sub}
	var qpn uint32
	switch et.Kind() {
	case mlx5.EQEKindCQErr:
		f.CQN, f.Syndrome = num, d.cqErrSyndrome(num)
	case mlx5.EQEKindQPSRQ:
		f.QueueType, f.Num = mlx5.EventQueueQP, num
		if et != mlx5.EQESRQRQLimit && et != mlx5.EQESRQCatasError {
			qpn = num
		}
	case mlx5.EQEKindPort:
		f.Port = uint8(num)
	}
	d.ev.asyncRaised++
	d.writeEQE(t, &d.ev.async, &f, qpn, eventFlow(flowAsync, 0, d.ev.asyncRaised), 0)
}

// dispatchFlow is the flow of the EQE the handler is about to dispatch:
// events of one queue are dispatched in the order they were raised.
func (d *Device) dispatchFlow(f *mlx5.EQEFields) uint64 {
	if f.Type == mlx5.EQEComp {
		if c := d.cqs[f.CQN]; c != nil {
			return eventFlow(flowComp, c.cqn, c.dispatched+1)
		}
		return 0
	}
	return eventFlow(flowAsync, 0, d.ev.asyncDispatched+1)
}

// dispatch is the kernel's handling of one EQE, from start to end of the
// handler's work on it: a completion goes to the CQ's channel (mlx5_ib's
// CQ completion handler → uverbs' ib_uverbs_comp_handler), an async event
// to the async queue (mlx5_ib_qp_event / mlx5_ib_cq_event / ... →
// ib_uverbs_async_handler).
func (d *Device) dispatch(start, end sim.Time, f *mlx5.EQEFields, flow uint64) {
	if f.Type == mlx5.EQEComp {
		c := d.cqs[f.CQN]
		if c == nil {
			d.inc(CtrCompEventStaleCQ)
			return
		}
		c.dispatched++
		ch := d.ev.chans[c.channel]
		if ch == nil {
			d.inc(CtrCompEventNoChannel)
			return
		}
		// uverbs queues every event (ib_uverbs_comp_handler has no
		// limit); the bound only drops a CQ's event while an earlier one of
		// the same CQ is still unread. Dropping a CQ's only event would
		// leave it disarmed with nothing to tell its reader: a lost wakeup
		// on a channel shared by more than QueueDepth CQs. The queue so
		// holds at most QueueDepth events plus one per CQ.
		if ch.q.len() >= d.ev.spec.QueueDepth && c.queued > 0 {
			d.warn(end, CtrCompEventsDropped, "completion channel %d holds %d events; event of CQ %d dropped", ch.id, ch.q.len(), c.cqn)
			return
		}
		c.queued++
		d.inc(CtrCompEvents)
		d.rec.Stage(d.node, "kernel", "event", start, end, 0, 0, 0, flow)
		d.deliverAt(end, eventDelivery{ch: ch, comp: mlx5.CompEvent{CQN: c.cqn}})
		return
	}
	typ, ok := mlx5.EventForEQE(f.Type, f.SubType)
	if !ok {
		d.warn(end, CtrEQEUnknown, "EQE type %v sub-type %d is not a verbs event", f.Type, f.SubType)
		return
	}
	d.ev.asyncDispatched++
	var num uint32
	switch f.Type.Kind() {
	case mlx5.EQEKindCQErr:
		num = f.CQN
	case mlx5.EQEKindQPSRQ:
		num = f.Num
	case mlx5.EQEKindPort:
		num = uint32(f.Port)
	}
	if d.asyncObjectGone(typ, num) {
		// Destroyed while its EQE was on the way: dropAsyncEvents could
		// not see it, and uverbs delivers nothing for a destroyed object.
		d.inc(CtrAsyncEventStale)
		return
	}
	if d.ev.asyncQ.len() >= d.ev.spec.QueueDepth {
		d.warn(end, CtrAsyncEventsDropped, "async queue holds %d events; %v for %#x dropped", d.ev.asyncQ.len(), typ, num)
		return
	}
	d.inc(CtrAsyncEvents)
	qpn := uint32(0)
	if f.Type.Kind() == mlx5.EQEKindQPSRQ {
		qpn = num
	}
	d.rec.Stage(d.node, "kernel", "event", start, end, 0, 0, qpn, flow)
	d.deliverAt(end, eventDelivery{async: mlx5.AsyncEvent{Type: typ, Num: num}})
}

// eventDelivery is one dispatched event on its way to its queue: a
// completion event to channel ch, or an async event.
type eventDelivery struct {
	ch    *compChannel // nil: async
	comp  mlx5.CompEvent
	async mlx5.AsyncEvent
}

// deliveryLanding fires an eventDelivery on the engine (pooled in
// d.ev.deliveryFree).
type deliveryLanding struct {
	d *Device
	e eventDelivery
}

func (l *deliveryLanding) Fire(sim.Time) {
	d, e := l.d, l.e
	l.e = eventDelivery{}
	d.ev.deliveryFree = append(d.ev.deliveryFree, l)
	d.deliver(e)
}

// deliverAt queues a dispatched event and wakes its reader when the
// handler's work on it ends (the end of its event stage): at once when
// that is now, else on the engine at end. It was queued, and readable, at
// the handler's start: an application took it before its stage ended.
func (d *Device) deliverAt(end sim.Time, e eventDelivery) {
	if end <= d.eng.Now() {
		d.deliver(e)
		return
	}
	var l *deliveryLanding
	if k := len(d.ev.deliveryFree); k > 0 {
		l = d.ev.deliveryFree[k-1]
		d.ev.deliveryFree = d.ev.deliveryFree[:k-1]
	} else {
		l = &deliveryLanding{d: d}
	}
	l.e = e
	d.eng.At(end, l)
}

func (d *Device) deliver(e eventDelivery) {
	if e.ch == nil {
		d.ev.asyncQ.push(e.async)
		if d.ev.notify != nil {
			d.ev.notify(0)
		}
		return
	}
	e.ch.q.push(e.comp)
	if d.ev.notify != nil {
		d.ev.notify(e.ch.id)
	}
}

// The EventControl side of the control plane (mlx5.EventControl).

// CreateCompChannel creates a completion channel.
func (d *Device) CreateCompChannel() (uint32, error) {
	if err := d.fatalCmd("CREATE_COMP_CHANNEL"); err != nil {
		return 0, err
	}
	if d.ev.chans == nil {
		d.ev.chans = map[uint32]*compChannel{}
	}
	if len(d.ev.chans) >= d.spec.Caps.MaxCQ {
		return 0, cmdErr("CREATE_COMP_CHANNEL", mlx5.StatusNoResources, "%d channels in use", len(d.ev.chans))
	}
	// Numbers start at 1 (0 is the async queue's) and, once they wrap
	// after 2^32 creations, skip the ones still open; a number never
	// names two channels.
	d.ev.nextCh++
	for d.ev.nextCh == 0 || d.ev.chans[d.ev.nextCh] != nil {
		d.ev.nextCh++
	}
	ch := &compChannel{id: d.ev.nextCh}
	d.ev.chans[ch.id] = ch
	return ch.id, nil
}

// CompChannels is the number of completion channels open.
func (d *Device) CompChannels() int { return len(d.ev.chans) }

// DestroyCompChannel destroys a channel no CQ uses; its queued events go.
func (d *Device) DestroyCompChannel(id uint32) error {
	if d.ev.chans[id] == nil {
		return cmdErr("DESTROY_COMP_CHANNEL", mlx5.StatusBadResource, "channel %d does not exist", id)
	}
	for _, c := range d.cqs {
		if c.channel == id {
			return cmdErr("DESTROY_COMP_CHANNEL", mlx5.StatusResourceBusy, "channel %d is used by a CQ", id)
		}
	}
	delete(d.ev.chans, id)
	return nil
}

// AttachCQ routes CQ cqn's completion events to channel ch (0: none).
func (d *Device) AttachCQ(cqn, ch uint32) error {
	c := d.cqs[cqn]
	switch {
	case c == nil:
		return cmdErr("CREATE_CQ", mlx5.StatusBadResource, "CQ %d does not exist", cqn)
	case ch != 0 && d.ev.chans[ch] == nil:
		return cmdErr("CREATE_CQ", mlx5.StatusBadResource, "completion channel %d does not exist", ch)
	}
	c.channel = ch
	return nil
}

// ReadCompEvents moves queued events of channel ch into out.
func (d *Device) ReadCompEvents(ch uint32, out []mlx5.CompEvent) (int, error) {
	c := d.ev.chans[ch]
	if c == nil {
		return 0, cmdErr("READ_COMP_EVENT", mlx5.StatusBadResource, "channel %d does not exist", ch)
	}
	n := c.q.pop(out)
	for _, e := range out[:n] {
		if q := d.cqs[e.CQN]; q != nil {
			q.evRead++ // libmlx5's mlx5_cq_event: arm_sn advances per event read
			if q.queued > 0 {
				q.queued--
			}
		}
	}
	return n, nil
}

// dropCompEvents removes the unread events of CQ c from its channel's
// queue, as uverbs' ib_uverbs_release_ucq does when the CQ is destroyed.
func (d *Device) dropCompEvents(c *cq) {
	ch := d.ev.chans[c.channel]
	if ch == nil || c.queued == 0 {
		return
	}
	ch.q.remove(func(e mlx5.CompEvent) bool { return e.CQN == c.cqn })
	c.queued = 0
}

// asyncObject is the kind of object an asynchronous event's number names:
// 'c' (CQ), 'q' (QP), 's' (SRQ), or 0 (a port, the device).
func asyncObject(t mlx5.EventType) byte {
	switch t {
	case mlx5.EventCQErr:
		return 'c'
	case mlx5.EventSRQErr, mlx5.EventSRQLimitReached:
		return 's'
	case mlx5.EventQPFatal, mlx5.EventQPReqErr, mlx5.EventQPAccessErr, mlx5.EventCommEst,
		mlx5.EventSQDrained, mlx5.EventPathMig, mlx5.EventPathMigErr, mlx5.EventQPLastWQEReached:
		return 'q'
	}
	return 0
}

// asyncObjectGone reports whether the object an event names no longer
// exists.
func (d *Device) asyncObjectGone(typ mlx5.EventType, num uint32) bool {
	switch asyncObject(typ) {
	case 'c':
		return d.cqs[num] == nil
	case 'q':
		return d.qps[num] == nil
	case 's':
		return d.srqs[num] == nil
	}
	return false
}

// dropAsyncEvents removes the unread asynchronous events of a destroyed
// object from the async queue, as uverbs' ib_uverbs_release_uevent does:
// they would only hold places of the bounded queue.
func (d *Device) dropAsyncEvents(kind byte, num uint32) {
	d.ev.asyncQ.remove(func(e mlx5.AsyncEvent) bool { return asyncObject(e.Type) == kind && e.Num == num })
}

// ReadAsyncEvents moves queued asynchronous events into out.
func (d *Device) ReadAsyncEvents(out []mlx5.AsyncEvent) int { return d.ev.asyncQ.pop(out) }

// PendingEvents is the number of events queued on channel ch (0: async).
func (d *Device) PendingEvents(ch uint32) int {
	if ch == 0 {
		return d.ev.asyncQ.len()
	}
	if c := d.ev.chans[ch]; c != nil {
		return c.q.len()
	}
	return 0
}

// SetEventNotify installs the function called for every queued event.
func (d *Device) SetEventNotify(f func(ch uint32)) { d.ev.notify = f }

// VirtualNow is the simulation's clock (mlx5.VirtualClock).
func (d *Device) VirtualNow() time.Duration {
	return time.Duration(d.eng.Now() / sim.Time(sim.Nanosecond))
}

// Sources of asynchronous events --------------------------------------------

// SetLinkState tells the device whether its port has a link (the wire, a
// runtime or a test calls it when a cable is pulled or comes back). A
// change raises PORT_ERR or PORT_ACTIVE for port 1; while the link is down
// the port sends and receives nothing (counted drops), so connected QPs
// run into their retry limits as on a real fabric.
func (d *Device) SetLinkState(up bool) {
	if up == !d.ev.linkDown {
		return
	}
	now := d.eng.Now()
	d.ev.linkDown = !up
	if up {
		d.rec.Warnf(d.node, now, "device", CtrLinkUp.String(), "port 1: link up")
		d.inc(CtrLinkUp)
		d.asyncEvent(now, mlx5.EventPortActive, 1)
		return
	}
	d.rec.Warnf(d.node, now, "device", CtrLinkDown.String(), "port 1: link down")
	d.inc(CtrLinkDown)
	d.asyncEvent(now, mlx5.EventPortErr, 1)
}

// LinkUp reports the port's link state.
func (d *Device) LinkUp() bool { return !d.ev.linkDown }

// commEst raises COMMUNICATION_ESTABLISHED for the first packet a
// connected QP accepts while in RTR (IB spec: the responder learns the
// connection works before the QP is moved to RTS). Once per incarnation
// of the QP: a RESET bumps txGen.
func (d *Device) commEst(t sim.Time, q *qp) {
	if q.state != mlx5.QPStateRTR || q.typ == mlx5.QPTypeUD || q.commEst == q.txGen+1 {
		return
	}
	q.commEst = q.txGen + 1
	d.asyncEvent(t, mlx5.EventCommEst, q.qpn)
}

// responderError raises the affiliated event of a responder-detected error
// (IB spec "invalid request / local access violation work queue error";
// mlx5 WQ_INVAL_REQ_ERROR / WQ_ACCESS_ERROR → mlx5_ib QP_REQ_ERR /
// QP_ACCESS_ERR). An error that a CQE on the responder reports (a SEND or
// WRITE with immediate that had taken a receive WQE) raises none: the
// error is in the CQE, as for requester errors. code is the NAK sent.
func (d *Device) responderError(t sim.Time, q *qp, code uint8, inCQE bool) {
	if inCQE {
		return
	}
	switch code {
	case nakInvalidReq:
		d.asyncEvent(t, mlx5.EventQPReqErr, q.qpn)
	case nakRemoteAcc:
		d.asyncEvent(t, mlx5.EventQPAccessErr, q.qpn)
	default: // remote operational error: the responder could not work its queue
		d.asyncEvent(t, mlx5.EventQPFatal, q.qpn)
	}
}
