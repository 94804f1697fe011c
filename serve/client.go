package serve

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/mmioring"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/uverbs"
	"github.com/softnic/softnic/uverbsdev"
)

// Limits on what a client may hand the daemon.
const (
	maxMem      = 16 << 30 // host memory per client
	maxRingSize = mmioring.HeaderSize + mmioring.MaxSlots*mmioring.SlotSize
	// maxJump bounds how far one record's host time may move the engine
	// ahead: a client that stamps the far future would otherwise run every
	// timer of every device to it.
	maxJump = sim.Duration(10 * sim.Second)
	// horizon is the latest time a client may ask the engine to run to
	// (a record's time, a step's limit): 2^62 ps, some 53 days of
	// virtual time, half of what sim.Time holds, so that every timer the
	// devices arm from there (a retransmission timeout is at most
	// 2^31 x 4.096 us) still fits in an int64. Without it a client's step
	// limit, or enough records stamped maxJump ahead, ran the shared
	// engine to the end of time, where the timers of every other client
	// wrapped around and nothing completed any more.
	horizon = sim.Time(1 << 62)
	// ringWait is how long the ring goroutine sleeps in one Pop before it
	// looks whether its client is gone.
	ringWait = 200 * time.Millisecond
	// worldSlice is how many engine events one holder of the world may run
	// before it lets go of it (Daemon.slice): between two ring records, and
	// within a step call or a far-stamped record's run of the engine. A
	// step call runs up to attach.StepBudget events and a record
	// stamped far ahead runs the engine up to maxJump, so a batch of 64
	// such records would otherwise hold every other client off for all of
	// them, long enough for their calls to miss the dial timeout and take
	// the daemon for dead (TestBatchDoesNotStarveOthers).
	worldSlice = 1 << 12
	// detachLinger is the virtual time the engine runs for a departing
	// client's device before its objects are destroyed (teardown).
	detachLinger = sim.Duration(50 * sim.Microsecond)
	// leaveWait bounds how long an ATTACH waits for the teardown of a
	// device's owner that has gone (closed its socket, or sent DETACH)
	// before it is refused with EBUSY. A teardown takes a fraction of it;
	// it stays well below a client's attach deadline (provider.Dial's
	// default timeout is 1 s), so that the refusal arrives as EBUSY. An
	// owner still connected is refused at once.
	leaveWait = 500 * time.Millisecond
	// maxDead is how many departed clients' revoked memories a slot keeps
	// mapped (zero pages where the client's memfd was) for its device's
	// late accesses. Keeping every one until Close leaked the address
	// space of each client's memory, 16 GiB at most, at every detach: a
	// client attaching and detaching a few thousand times made the
	// daemon's next mmap fail, the Go heap's with it.
	maxDead = 4
	// maxBadLogs bounds the log lines of one client's malformed socket
	// messages and ring records; past it they are counted only
	// (BadMessages, BadRecords) and its detach line says how many. A
	// client writing bad records as fast as the ring takes them logged
	// half a million lines, 67 MB, a second (TestBadInputLogBounded).
	maxBadLogs = 16
	// maxNotified bounds the event notifications kept for one client
	// between two SimNotified (client.notify). A provider asks after
	// every step that reports events, a few at most by then.
	maxNotified = 4096
)

// client is one attached process.
type client struct {
	d    *Daemon
	conn *attach.Conn
	uc   netUnixConn // conn's socket (peerClosed)
	pid  int32
	s    *slot
	dev  *device.Device
	bar  pcie.BARPort
	fbar pcie.FlowPort // bar as a FlowPort, or nil
	mem  *shm.Region
	rmem *shm.Region
	ring *mmioring.Ring
	cons *mmioring.Consumer
	udev *uverbsdev.Device
	srv  *uverbsdev.Server

	notified notifyList   // channels notified since the last SimNotified (under d.mu)
	bad      atomic.Int64 // malformed messages and records (logBad)
	ringDone chan struct{}
	resp     []byte
	// leaving is set (under d.mu) once the client's requests are over and
	// its teardown is due; gone is closed when its slot is free.
	leaving bool
	gone    chan struct{}
}

// handle serves one connection from ATTACH to teardown.
func (d *Daemon) handle(uc netUnixConn) {
	conn := attach.NewConn(uc)
	pid := peerPID(uc)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(d.cfg.AttachTimeout))
	c, err := d.attach(conn, uc, pid)
	d.mu.Lock()
	d.pending--
	if err != nil && (d.closed || errors.Is(err, attach.ErrPeerGone)) {
		// Not a refusal: the daemon stopping closed the connection
		// before its ATTACH, or the peer closed without a word (another
		// daemon checking whether this one is alive, a port probe).
		d.ctr.Unattached++
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	if err != nil {
		d.mu.Lock()
		d.ctr.Refusals++
		d.mu.Unlock()
		d.logRefusal("refused pid %d: %v", pid, err)
		var em *attach.ErrorMsg
		if !errors.As(err, &em) {
			em = &attach.ErrorMsg{Errno: syscall.EPROTO, Reason: err.Error()}
		}
		conn.Send(attach.TError, 0, em.Encode(nil))
		return
	}
	conn.SetDeadline(time.Time{})
	go c.ringLoop()
	why, detach, seq := c.serve()
	d.mu.Lock()
	c.leaving = true
	d.mu.Unlock()
	c.teardown(why)
	if detach {
		// The slot is free: the client may now attach again, or another.
		conn.SetDeadline(time.Now().Add(d.cfg.AttachTimeout))
		conn.Send(attach.TDetached, seq, nil)
	}
}

// hasLeft reports whether c's requests are over: it sent DETACH or
// closed its socket, whether or not its socket goroutine has seen it yet
// (d.mu held).
func (c *client) hasLeft() bool { return c.leaving || peerClosed(c.uc) }

// awaitLeaving waits, for at most leaveWait, until the slot named name
// has no owner that is leaving: an ATTACH right after the owner's close
// (a Context.Close and Dial again; a process restarted) finds the slot
// free rather than EBUSY, however the owner's teardown is scheduled. An
// owner that is still connected is no reason to wait.
func (d *Daemon) awaitLeaving(name string) {
	timer := time.NewTimer(leaveWait)
	defer timer.Stop()
	for waited := false; ; waited = true {
		d.mu.Lock()
		s := d.slotByName(name)
		var gone chan struct{}
		if s != nil && s.owner != nil && s.owner.hasLeft() {
			gone = s.owner.gone
			if !waited {
				d.ctr.LeaveWaits++
			}
		}
		d.mu.Unlock()
		if gone == nil {
			return
		}
		select {
		case <-gone:
		case <-timer.C:
			return // attach refuses it with EBUSY
		}
	}
}

// refuse is an ATTACH refusal with its errno.
func refuse(errno syscall.Errno, format string, args ...any) error {
	return &attach.ErrorMsg{Errno: errno, Reason: fmt.Sprintf(format, args...)}
}

// attach reads the ATTACH message, maps the client's memory and ring and
// builds its device.
func (d *Daemon) attach(conn *attach.Conn, uc netUnixConn, pid int32) (*client, error) {
	h, p, fds, err := conn.Recv()
	closeAll := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("no ATTACH: %w", err)
	}
	if h.Type != attach.TAttach {
		closeAll()
		return nil, refuse(syscall.EPROTO, "first message is %v, not ATTACH", h.Type)
	}
	req, err := attach.DecodeAttachReq(p)
	if err != nil {
		closeAll()
		return nil, refuse(syscall.EPROTO, "%v", err)
	}
	if len(fds) != 2 {
		closeAll()
		return nil, refuse(syscall.EBADF, "ATTACH carries %d fds, want 2 (host memory, ring)", len(fds))
	}
	if req.Version != attach.Version {
		closeAll()
		return nil, refuse(syscall.EPROTONOSUPPORT, "protocol version %d, daemon speaks %d", req.Version, attach.Version)
	}
	if req.MemSize == 0 || req.MemSize > maxMem || req.RingSize < mmioring.HeaderSize || req.RingSize > maxRingSize {
		closeAll()
		return nil, refuse(syscall.EINVAL, "memory of %d bytes, ring of %d bytes", req.MemSize, req.RingSize)
	}
	mem, err := shm.Map(fds[0], int(req.MemSize), req.MemBase)
	if err != nil {
		syscall.Close(fds[1])
		return nil, refuse(syscall.EINVAL, "host memory: %v", err)
	}
	rsize := (int(req.RingSize) + 4095) &^ 4095
	rmem, err := shm.Map(fds[1], rsize, 1<<12)
	if err != nil {
		mem.Close()
		if rsize != int(req.RingSize) {
			// shm.Map names the rounded size as the claim: say so.
			return nil, refuse(syscall.EINVAL, "ring of %d bytes claimed, its memfd must hold it rounded up to pages (%d bytes): %v", req.RingSize, rsize, err)
		}
		return nil, refuse(syscall.EINVAL, "ring: %v", err)
	}
	ring, err := mmioring.Attach(rmem.Bytes()[:req.RingSize])
	if err != nil {
		mem.Close()
		rmem.Close()
		return nil, refuse(syscall.EINVAL, "ring: %v", err)
	}

	d.awaitLeaving(req.Device)
	d.lock()
	defer d.unlock()
	fail := func(err error) (*client, error) {
		mem.Close()
		rmem.Close()
		return nil, err
	}
	if d.closed {
		return fail(refuse(syscall.ESHUTDOWN, "daemon is shutting down"))
	}
	s := d.slotByName(req.Device)
	if s == nil {
		return fail(refuse(syscall.ENODEV, "no device %q (this daemon has %s)", req.Device, strings.Join(d.Names(), ", ")))
	}
	if s.owner != nil {
		return fail(refuse(syscall.EBUSY, "%s is attached by pid %d", s.name, s.owner.pid))
	}
	c := &client{d: d, conn: conn, uc: uc, gone: make(chan struct{}), pid: pid, s: s, mem: mem, rmem: rmem, ring: ring, cons: ring.Consumer(),
		ringDone: make(chan struct{}), resp: make([]byte, attach.MaxPayload)}
	c.dev = device.New(d.eng, d.spec, s.ident, mem, d.rec)
	c.dev.Connect(s.port)
	c.bar = c.dev.BARPort()
	c.fbar, _ = c.bar.(pcie.FlowPort)
	c.dev.SetEventNotify(c.notify)
	c.udev = uverbsdev.NewDevice(c.dev)
	c.udev.SetNeighbour(s.neighbour)
	c.srv = c.udev.NewServer()
	s.dev, s.owner = c.dev, c
	d.clients[c] = struct{}{}
	d.ctr.Attaches++
	bar := d.spec.BAR
	resp := attach.AttachResp{Node: uint32(s.idx), Now: int64(d.eng.Now()), MAC: s.ident.MAC, GID: s.ident.IP.As16(),
		Profile: d.cfg.Profile.Name, FirstUAR: bar.FirstUAR, NumUARs: uint32(bar.NumUARs), BFRegSize: uint32(bar.BFRegSize),
		UARNonCached: d.cfg.Profile.Host().UARNonCached}
	if err := conn.Send(attach.TAttached, h.Seq, resp.Encode(nil)); err != nil {
		d.detachLocked(c)
		return nil, fmt.Errorf("ATTACHED: %w", err)
	}
	d.logf("attach %s: pid %d, %d MiB of host memory at %#x, ring of %d slots", s.name, pid, req.MemSize>>20, req.MemBase, ring.Slots())
	return c, nil
}

// notify records that the device queued an event for channel ch (0: the
// async queue), for the client's next SimNotified (d.mu held). The list
// is bounded: a client that reads its events (SimReadCompEvents) but
// never asks which channels were notified would grow it by an entry per
// event for ever. Past maxNotified entries a notification is kept only
// for a channel the list does not name yet, so that every channel with
// events still gets one (the provider then reads all its channel holds);
// the others are counted as dropped. O(1) per event (notifyList counts
// each channel's entries).
func (c *client) notify(ch uint32) {
	if c.notified.len() >= maxNotified && c.notified.has(ch) {
		c.d.ctr.NotifiesDropped++
		return
	}
	c.notified.push(ch)
}

// serve answers the client's requests until its socket closes or it
// sends DETACH; it returns why, and for DETACH the request's sequence
// number, to be answered after the teardown.
func (c *client) serve() (why string, detach bool, seq uint32) {
	d := c.d
	for {
		h, p, fds, err := c.conn.Recv()
		for _, fd := range fds {
			syscall.Close(fd) // no request after ATTACH carries fds
		}
		if err != nil {
			if errors.Is(err, attach.ErrProtocol) {
				d.mu.Lock()
				d.ctr.BadMessages++
				d.mu.Unlock()
				c.logBad("bad message: %v", err)
				em := attach.ErrorMsg{Errno: syscall.EPROTO, Reason: err.Error()}
				if c.conn.Send(attach.TError, h.Seq, em.Encode(nil)) != nil {
					return "socket error", false, 0
				}
				continue
			}
			if errors.Is(err, attach.ErrPeerGone) {
				return "closed", false, 0
			}
			if d.isClosed() {
				return "daemon stopping", false, 0 // Close closed the socket under the read
			}
			return fmt.Sprintf("socket: %v", err), false, 0
		}
		var t attach.Type
		var out []byte
		var em *attach.ErrorMsg
		switch h.Type {
		case attach.TUverbs:
			t = attach.TUverbsResp
			out, em = c.uverbs(p)
		case attach.TSim:
			t = attach.TSimResp
			out, em = c.sim(p)
		case attach.TDetach:
			if len(p) == 0 {
				return "detached", true, h.Seq
			}
			d.mu.Lock()
			d.ctr.BadMessages++
			d.mu.Unlock()
			em = &attach.ErrorMsg{Errno: syscall.EPROTO, Reason: fmt.Sprintf("DETACH with %d bytes", len(p))}
		default:
			d.mu.Lock()
			d.ctr.BadMessages++
			d.mu.Unlock()
			em = &attach.ErrorMsg{Errno: syscall.EPROTO, Reason: fmt.Sprintf("%v is not a request", h.Type)}
		}
		if em != nil {
			out, t = em.Encode(out[:0]), attach.TError
		}
		if err := c.conn.Send(t, h.Seq, out); err != nil {
			return fmt.Sprintf("socket: %v", err), false, 0
		}
	}
}

// uverbs runs one uverbs command.
func (c *client) uverbs(req []byte) ([]byte, *attach.ErrorMsg) {
	d := c.d
	d.lock()
	defer d.unlock()
	if destroysQP(req) {
		d.linger()
	}
	n, err := c.srv.Handle(req, c.resp[:1024])
	if err != nil {
		d.ctr.UverbsErrors++
		var ue *uverbs.Error
		if errors.As(err, &ue) {
			// The reason only: the client's UverbsControl names the
			// command and the errno itself.
			return c.resp[:0], &attach.ErrorMsg{Errno: ue.Errno, Reason: ue.Reason}
		}
		return c.resp[:0], &attach.ErrorMsg{Errno: syscall.EIO, Reason: err.Error()}
	}
	return c.resp[:n], nil
}

// linger runs the engine detachLinger further before QPs go (DESTROY_QP,
// a client's teardown; d.mu held). A NIC does not stop mid-frame when its
// process exits: what the device already started (the ACK of the last
// message received, a response in flight) leaves, as it would from
// hardware in the microseconds a process takes to die. Without it the
// peer of a finished rc_pingpong saw its last SEND time out (retry
// exceeded): the client saw its CQE before the engine had sent the ACK,
// and nobody ran the engine between.
//
// With ClockWall the engine may not run past the wall clock's lead (the
// pacer's contract), so the linger stops there: running detachLinger
// further at every DESTROY_QP, a bogus one too, let a client sending them
// by the thousand run the shared clock far ahead of the wall clock, and
// every device's timers and every other client's polls stood still until
// the wall clock caught up (TestWallClockDestroySpam). What the device
// started is due within the lead (its latencies fit in it).
func (d *Daemon) linger() {
	until := d.eng.Now().Add(detachLinger)
	if d.pacer != nil {
		until = min(until, d.pacer.Wall().Add(d.pacer.Lead()))
	}
	d.eng.RunUntil(until)
}

// destroysQP reports whether a uverbs request is DESTROY_QP, in the write
// or the ioctl form.
func destroysQP(req []byte) bool {
	if uverbsdev.IsIoctl(req) {
		h, err := uverbs.ParseIoctl(req)
		return err == nil && h.ObjectID() == uverbs.ObjectQP && h.MethodID() == uverbs.MethodQPDestroy
	}
	return len(req) >= uverbs.CmdHdrSize && uverbs.CmdHdr(req).Cmd() == uverbs.CmdDestroyQP
}

// sim runs one Sim op.
func (c *client) sim(p []byte) ([]byte, *attach.ErrorMsg) {
	op, a, err := attach.DecodeSim(p)
	if err != nil {
		c.d.mu.Lock()
		c.d.ctr.BadMessages++
		c.d.mu.Unlock()
		return nil, &attach.ErrorMsg{Errno: syscall.EPROTO, Reason: err.Error()}
	}
	d := c.d
	d.lock()
	defer d.unlock()
	out := c.resp[:0]
	le := binary.LittleEndian
	u32 := func(v uint32) { out = le.AppendUint32(out, v) }
	fail := func(err error) ([]byte, *attach.ErrorMsg) {
		ue := uverbsdev.Refusal(op.String(), err)
		return nil, &attach.ErrorMsg{Errno: ue.Errno, Reason: ue.Error()}
	}
	dev := c.dev
	switch op {
	case attach.SimCreateCompChannel:
		ch, err := dev.CreateCompChannel()
		if err != nil {
			return fail(err)
		}
		u32(ch)
	case attach.SimDestroyCompChannel:
		if err := dev.DestroyCompChannel(a[0]); err != nil {
			return fail(err)
		}
	case attach.SimAttachCQ:
		if err := dev.AttachCQ(a[0], a[1]); err != nil {
			return fail(err)
		}
	case attach.SimReadCompEvents:
		var evs [attach.MaxEvents]mlx5.CompEvent
		n, err := dev.ReadCompEvents(a[0], evs[:min(int(a[1]), attach.MaxEvents)])
		if err != nil {
			return fail(err)
		}
		u32(uint32(n))
		for _, e := range evs[:n] {
			u32(e.CQN)
		}
	case attach.SimReadAsyncEvents:
		var evs [attach.MaxEvents]mlx5.AsyncEvent
		n := dev.ReadAsyncEvents(evs[:min(int(a[0]), attach.MaxEvents)])
		u32(uint32(n))
		for _, e := range evs[:n] {
			u32(uint32(e.Type))
			u32(e.Num)
		}
	case attach.SimPendingEvents:
		u32(uint32(dev.PendingEvents(a[0])))
	case attach.SimModifyCQ:
		if a[1] > 0xffff || a[2] > 0xffff {
			return fail(fmt.Errorf("%w: count %d period %d", syscall.EINVAL, a[1], a[2]))
		}
		if err := dev.ModifyCQ(mlx5.ModifyCQCmd{CQN: a[0], Count: uint16(a[1]), Period: uint16(a[2])}); err != nil {
			return fail(err)
		}
	case attach.SimResizeCQ:
		cmd := mlx5.ResizeCQCmd{CQN: a[0], Entries: int(a[1]), CQESize: int(a[2]), BufAddr: uint64(a[3]) | uint64(a[4])<<32}
		if !c.mem.Contains(cmd.BufAddr, 1) {
			return fail(fmt.Errorf("%w: CQ buffer %#x outside the client's memory", syscall.EFAULT, cmd.BufAddr))
		}
		if err := dev.ResizeCQ(cmd); err != nil {
			return fail(err)
		}
	case attach.SimCounters:
		m := dev.HWCounters()
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = fmt.Appendf(out, "%s %d\n", k, m[k])
		}
	case attach.SimNotified:
		n := min(c.notified.len(), attach.MaxEvents)
		u32(uint32(n))
		for _, ch := range c.notified.entries()[:n] {
			u32(ch)
		}
		c.notified.pop(n)
	}
	return out, nil
}

// ringLoop applies the client's MMIO records until the ring closes or
// breaks, or the client is torn down.
func (c *client) ringLoop() {
	defer close(c.ringDone)
	d := c.d
	var recs [64]mmioring.Record
	for {
		n, err := c.cons.PopN(recs[:], time.Now().Add(ringWait))
		if n > 0 {
			d.lock()
			for i := range recs[:n] {
				if i > 0 {
					d.slice() // others waiting for the world go first
				}
				c.apply(&recs[i])
			}
			d.unlock()
		}
		switch {
		case err == nil, errors.Is(err, mmioring.ErrTimeout), errors.Is(err, mmioring.ErrEmpty):
		case errors.Is(err, mmioring.ErrBadRecord):
			d.mu.Lock()
			d.ctr.BadRecords++
			d.mu.Unlock()
			c.logBad("bad MMIO record skipped: %v", err)
		case errors.Is(err, mmioring.ErrClosed):
			return
		default: // a broken ring: nothing after it can be trusted
			d.mu.Lock()
			d.ctr.RingFailures++
			d.mu.Unlock()
			d.logf("%s: pid %d: MMIO ring failed: %v; detaching", c.s.name, c.pid, err)
			c.conn.Close()
			return
		}
	}
}

// at runs the engine up to a record's host time and returns the time the
// record takes effect: its own, or the engine's clock if that is later
// (another client moved it), bounded by maxJump. It is called with the
// world held and lets go of it every worldSlice events.
//
// With ClockWall a record takes effect at the wall clock's time (lock ran
// the engine to it): the client's stamp only orders it.
func (c *client) at(t int64) sim.Time {
	eng := c.d.eng
	now := eng.Now()
	if c.d.pacer != nil {
		return now
	}
	at := sim.Time(t)
	switch {
	case at < now:
		c.d.ctr.ClampedTimes++
		return now
	case at > min(now.Add(maxJump), horizon):
		c.d.ctr.ClampedTimes++
		at = max(min(now.Add(maxJump), horizon), now)
	}
	// RunUntil(at), letting go of the world every worldSlice events: a
	// record stamped far ahead may have 10 s of a busy engine to run.
	for eng.Next() <= at {
		eng.Step()
		c.d.slice()
	}
	eng.RunUntil(at)
	return max(at, eng.Now()) // another client may have run it further meanwhile
}

// apply performs one record (under d.mu).
func (c *client) apply(r *mmioring.Record) {
	t := c.at(r.Time)
	switch {
	case r.Flags == mmioring.FlagCall:
		c.call(t, r)
	case r.Width == 4 || r.Width == 8:
		c.write(t, r.Off, r.Data[:r.Width], r)
	case r.Width == 64:
		// One MWr per contiguous run of enabled bytes, as the host's WC
		// buffer emitted them.
		m := r.Mask
		for i := 0; i < 64; {
			if m&(1<<uint(i)) == 0 {
				i++
				continue
			}
			j := i
			for j < 64 && m&(1<<uint(j)) != 0 {
				j++
			}
			c.write(t, r.Off+uint64(i), r.Data[i:j], r)
			i = j
		}
	}
}

// write is one posted write with the record's labels.
func (c *client) write(t sim.Time, off uint64, p []byte, r *mmioring.Record) {
	if c.fbar != nil {
		c.fbar.PostedWriteFlow(t, off, p, r.QPN, r.Flow)
		return
	}
	c.bar.PostedWrite(t, off, p)
}

// call answers a ring call (attach.OpSync, OpStep, OpRead32).
func (c *client) call(t sim.Time, r *mmioring.Record) {
	eng := c.d.eng
	op := binary.LittleEndian.Uint64(r.Data[:8])
	var rep mmioring.Reply
	switch op & 0xffffffff {
	case attach.OpSync:
	case attach.OpStep:
		rep.Value = c.step(sim.Time(r.Off), 1, nil)
	case attach.OpStepCQ:
		shift := op >> 32
		if shift > 24 || !c.mem.Contains(r.Off, 64) {
			rep.Status = uint32(syscall.EINVAL)
			break
		}
		addr, ci, nent := r.Off, r.QPN, uint32(1)<<shift
		rep.Value = c.step(sim.Time(r.Flow), attach.StepBudget, func() bool {
			var oo [1]byte // op_own, the CQE's last byte: mlx5.CQEOwnedBySW
			return c.mem.Read(addr+63, oo[:]) == nil && oo[0]>>4 != uint8(mlx5.CQEInvalid) && (oo[0]&1 != 0) == (ci&nent != 0)
		})
	case attach.OpRead32:
		if r.Off%4 != 0 {
			rep.Status = uint32(syscall.EINVAL)
			break
		}
		v, done := c.bar.Read32(t, r.Off)
		rep.Value, rep.Time = uint64(v), int64(done)
	default:
		c.d.ctr.BadRecords++
		rep.Status = uint32(syscall.EINVAL)
	}
	if rep.Time == 0 {
		rep.Time = int64(eng.Now())
	}
	c.cons.Reply(rep)
}

// step runs up to budget events of the engine, the provider's progress
// loop: it stops early when done reports true (checked before each
// event; nil: never), when nothing is left to run, or at the client's
// own timer limit (0: none), to which it runs the clock. It returns the
// step reply bits.
//
// With ClockWall the pacer moves the engine: a step only runs it up to the
// wall clock, and a poll that finds nothing returns at once.
//
// It is called with the world held and lets go of it every worldSlice
// events, so that one poll of an empty CQ while the engine is busy does
// not hold every other client off for StepBudget events.
func (c *client) step(limit sim.Time, budget int, done func() bool) uint64 {
	eng := c.d.eng
	var v uint64
	// The limit is the client's word, as a record's time is: bounded as
	// at bounds that, maxJump ahead and not past the horizon. At the
	// horizon there is no room left to run the clock to: the step runs
	// the next event whenever it is (the devices' own timers fit), as if
	// the client had no timer of its own.
	if hi := min(eng.Now().Add(maxJump), horizon); limit > hi {
		c.d.ctr.ClampedTimes++
		limit = hi
		if limit <= eng.Now() {
			limit = 0
		}
	}
	if c.d.pacer != nil {
		budget = 0
		if c.d.pacer.SyncAtMost(worldSlice) {
			v = attach.StepRan
		}
	}
	for i := 0; i < budget; i++ {
		if i > 0 {
			c.d.slice() // a long step lets others in now and then
		}
		if done != nil && done() {
			break
		}
		if limit != 0 && eng.Next() > limit {
			eng.RunUntil(limit)
			v = attach.StepRan
			break
		}
		if !c.dev.Progress() {
			break
		}
		v = attach.StepRan
	}
	if c.notified.len() > 0 {
		v |= attach.StepEvents
	}
	return v
}

// teardown detaches a client whose socket is gone (closed, killed, or
// closed by the daemon): its ring goroutine stops, its objects are
// destroyed in the device (QPs flushed, MRs revoked), its memory is
// revoked and its slot freed.
func (c *client) teardown(why string) {
	c.cons.Close()
	<-c.ringDone
	d := c.d
	d.lock()
	start := time.Now()
	d.linger()
	objs := c.srv.Objects()
	// Every completion channel is the device's, whether the event
	// control (SIM) or uverbs CREATE_COMP_CHANNEL made it.
	objs["completion channel"] = c.dev.CompChannels()
	d.detachLocked(c)
	held := time.Since(start) // what the others waited for the world
	d.unlock()
	var parts []string
	for _, k := range []string{"QP", "SRQ", "CQ", "AH", "MR", "PD", "completion channel"} {
		if n := objs[k]; n > 0 {
			s := ""
			if n > 1 && k == "completion channel" {
				s = "s"
			}
			parts = append(parts, fmt.Sprintf("%d %s%s", n, k, s))
		}
	}
	left := "nothing left open"
	if len(parts) > 0 {
		left = "destroyed " + strings.Join(parts, ", ")
	}
	if n := c.bad.Load(); n > maxBadLogs {
		left += fmt.Sprintf("; %d bad records and messages", n)
	}
	d.logf("detach %s: pid %d: %s; %s (the world held %v)", c.s.name, c.pid, why, left, held.Round(time.Microsecond))
}

// logBad logs one of the client's malformed messages or records, the
// first maxBadLogs of them; the rest are counted only.
func (c *client) logBad(format string, args ...any) {
	switch n := c.bad.Add(1); {
	case n <= maxBadLogs:
		c.d.logf("%s: pid %d: "+format, append([]any{c.s.name, c.pid}, args...)...)
	case n == maxBadLogs+1:
		c.d.logf("%s: pid %d: more bad messages and records: counted, no longer logged", c.s.name, c.pid)
	}
}

// detachLocked destroys the client's objects and frees its slot (d.mu held).
func (d *Daemon) detachLocked(c *client) {
	c.srv.Close()
	c.dev.SetEventNotify(nil)
	s := c.s
	s.dev, s.owner = nil, nil
	if err := c.mem.Revoke(); err != nil {
		d.logf("%s: revoke: %v", s.name, err)
	}
	s.dead = append(s.dead, c.mem)
	if len(s.dead) > maxDead {
		// The oldest has been revoked for maxDead teardowns of this
		// slot, each lingering detachLinger: whatever its device still
		// had in flight has long landed. Closing it makes any later
		// access of that device fail its bounds check (the device keeps
		// no slice of host memory), and gives its address space back.
		s.dead[0].Close()
		s.dead = append(s.dead[:0], s.dead[1:]...)
	}
	c.rmem.Close()
	delete(d.clients, c)
	d.ctr.Detaches++
	close(c.gone)
}
