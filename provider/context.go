package provider

import (
	"maps"
	"slices"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/shm"
)

// Device is what an application opens: a control channel, the MMIO window
// onto BAR0 and the host-memory region the device reaches by DMA.
type Device struct {
	Name    string       // the device's name (ibv_get_device_name), e.g. mlx5_0
	Control mlx5.Control // the control channel: uverbs-shaped commands
	MMIO    pcie.MMIO    // the MMIO window onto BAR0 (UAR doorbells, BlueFlame)
	Mem     *shm.Region  // the host memory the device reaches by DMA
}

// Context is an open device (struct ibv_context + struct mlx5_context).
type Context struct {
	name   string
	ctl    mlx5.Control
	mmio   pcie.MMIO
	line   pcie.LineStorer // mmio's one-call 64-byte store, when it has one
	mem    *shm.Region
	prog   mlx5.Progressor // nil for real hardware
	host   HostWorker      // nil unless the MMIO port accounts host CPU time
	ctrs   CounterSource   // nil unless the device exposes hardware counters
	link   deviceLink      // nil unless the device is reached through a connection (Dial)
	cqprog cqProgressor    // nil unless the device runs a poll's progress loop itself (Dial)

	maxMsg   uint64 // largest send message (maxMsgSize)
	sportSeq uint32 // AH UDP source ports when the flow label is 0 (nextUDPSPort)

	attr   mlx5.DeviceAttr
	uctx   mlx5.ContextResp
	closed bool

	qps  map[uint32]*QP // by QPN, for CQE → QP lookup
	cqs  map[uint32]*CQ
	pds  map[uint32]*PD
	mrs  map[uint32]*MR // by LKey
	srqs map[uint32]*SRQ
	ahs  map[*AH]struct{}
	bufs map[uint64]struct{} // the addresses of AllocBuffer's buffers not freed yet
	// bfHalves is each bfreg's current BlueFlame buffer (bfHalf), by
	// its BAR0 offset.
	bfHalves map[uint64]*uint64

	ev *ctxEvents // completion channels and async events (events.go), set up on first use

	kern *kernCtx    // nil unless the device is a kernel rxe one (kernel.go, OpenKernel)
	kev  *kernEvents // a kernel device's events (rxe or mlx5: kernel_events.go); nil otherwise
}

// Open issues GET_CONTEXT and QUERY_DEVICE and checks that the device's
// answers are usable.
func Open(dev Device) (*Context, error) {
	switch {
	case dev.Control == nil:
		return nil, opErr("open", 0, detail(ErrInvalidArg, "device %q has no control channel", dev.Name))
	case dev.MMIO == nil:
		return nil, opErr("open", 0, detail(ErrInvalidArg, "device %q has no MMIO port", dev.Name))
	case dev.Mem == nil:
		return nil, opErr("open", 0, detail(ErrInvalidArg, "device %q has no host memory region", dev.Name))
	}
	uctx, err := dev.Control.GetContext()
	if err != nil {
		return nil, opErr("get_context", 0, err)
	}
	attr, err := dev.Control.QueryDevice()
	if err != nil {
		return nil, opErr("query_device", 0, err)
	}
	if err := checkAttr(&attr, &uctx); err != nil {
		return nil, opErr("open", 0, err)
	}
	c := &Context{
		name: dev.Name, ctl: dev.Control, mmio: dev.MMIO, mem: dev.Mem, attr: attr, uctx: uctx,
		qps: map[uint32]*QP{}, cqs: map[uint32]*CQ{}, pds: map[uint32]*PD{}, mrs: map[uint32]*MR{},
		srqs: map[uint32]*SRQ{}, ahs: map[*AH]struct{}{},
	}
	c.line, _ = dev.MMIO.(pcie.LineStorer)
	c.prog, _ = dev.Control.(mlx5.Progressor)
	c.host, _ = dev.MMIO.(HostWorker)
	c.ctrs, _ = dev.Control.(CounterSource)
	c.link, _ = dev.Control.(deviceLink)
	c.cqprog, _ = dev.Control.(cqProgressor)
	c.maxMsg = maxMsgSize(&attr)
	return c, nil
}

// HostWorker is implemented by an MMIO port that models the host CPU (a
// host.CPU in front of an emulated device): Work charges the provider's own
// work — wqe_build (bytes of WQE), dbr_update, poll (one CQE), req_notify,
// get_cq_event — on the host's virtual clock and records it as a stage, so
// that a trace shows the whole walk of a post_send. Real hardware's port
// does not implement it.
type HostWorker interface {
	Work(stage string, qpn uint32, bytes int)
}

// deviceLink is implemented by the control of a device reached through a
// connection (Dial): the device runs elsewhere, on its own clock.
type deviceLink interface {
	// Sync brings the device up to the host's clock, so that what the
	// provider reads of its own memory next is what the device had
	// written by then.
	Sync() error
	// Err is non-nil (wrapping ErrDeviceGone) once the device is gone.
	Err() error
}

// cqProgressor is a Progressor that runs a poll's whole progress loop in
// one call: until the CQE at addr is software's for consumer index ci in a
// ring of nent entries, or nothing is left to run.
type cqProgressor interface {
	ProgressCQ(addr uint64, ci, nent uint32) bool
}

// CounterSource is implemented by a device's control object (the value
// given as Device.Control) when it keeps hardware counters: the port and
// transport counters Linux shows under
// /sys/class/infiniband/<dev>/ports/<n>/hw_counters for mlx5 and rxe, by
// the same names (out_of_sequence, packet_seq_err, duplicate_request,
// local_ack_timeout_err, rnr_nak_retry_err, ...). HWCounters returns the
// current values; the caller must not modify the map.
type CounterSource interface {
	HWCounters() map[string]uint64
}

// Counters returns a snapshot of the device's hardware counters (a copy
// the caller owns). If the device's control object is not a CounterSource
// it fails with ErrNotSupported.
func (c *Context) Counters() (map[string]uint64, error) {
	const op = "counters"
	if c.gone() {
		return nil, opErr(op, 0, ErrClosed)
	}
	if c.ctrs == nil {
		return nil, opErr(op, 0, detail(ErrNotSupported, "device %q keeps no hardware counters", c.name))
	}
	if c.link != nil {
		if err := c.link.Err(); err != nil {
			return nil, opErr(op, 0, err) // a dead daemon has no counters to give
		}
	}
	m := c.ctrs.HWCounters()
	if c.link != nil {
		// HWCounters has no error of its own: a daemon that died under
		// this very request answers an empty set, which is no set.
		if err := c.link.Err(); err != nil {
			return nil, opErr(op, 0, err)
		}
	}
	out := make(map[string]uint64, len(m))
	maps.Copy(out, m)
	return out, nil
}

// checkAttr rejects device answers the datapath cannot work with.
func checkAttr(a *mlx5.DeviceAttr, u *mlx5.ContextResp) error {
	switch {
	case a.MaxQPWR <= 0 || a.MaxSGE <= 0 || a.MaxCQE <= 0:
		return detail(ErrNotSupported, "device reports no queue capacity (max_qp_wr %d, max_sge %d, max_cqe %d)",
			a.MaxQPWR, a.MaxSGE, a.MaxCQE)
	case a.MaxSQDescSz < mlx5.WQEBBSize || a.MaxSQDescSz > mlx5.MaxDS*mlx5.DSSize+mlx5.DSSize:
		// A send WQE must fit one WQEBB at least; the 6-bit DS field caps it at
		// 63 octowords (1008 B, reported as up to 1024 by the kernel).
		return detail(ErrNotSupported, "max_sq_desc_sz %d", a.MaxSQDescSz)
	case a.BFBufSize < 0 || a.BFBufSize%64 != 0 || (a.BFRegSize > 0 && a.BFBufSize*2 > a.BFRegSize):
		return detail(ErrNotSupported, "BlueFlame buffer size %d (bfreg %d)", a.BFBufSize, a.BFRegSize)
	case u.CQEVersion != 0 && u.CQEVersion != 1:
		return detail(ErrNotSupported, "CQE version %d", u.CQEVersion)
	}
	return nil
}

// Name is the device name given to Open.
func (c *Context) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// Attr is what QUERY_DEVICE reported.
func (c *Context) Attr() DeviceAttr {
	if c == nil {
		return DeviceAttr{}
	}
	return c.attr
}

// Mem is the host-memory region the device reaches.
func (c *Context) Mem() *shm.Region {
	if c == nil {
		return nil
	}
	return c.mem
}

// Close destroys every object still open on the context (QPs, SRQs, CQs,
// AHs, MRs, PDs, in that order) and closes it; later calls return
// ErrClosed. It returns the first error met but keeps going.
func (c *Context) Close() error {
	if c.gone() {
		return opErr("close", 0, ErrClosed)
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	// Closing the device releases everything, as a process exit does:
	// unacknowledged events do not keep a QP, SRQ or CQ (their Destroy
	// refuses).
	for _, qpn := range sortedKeys(c.qps) {
		qp := c.qps[qpn]
		qp.asyncUnacked = 0
		keep(qp.Destroy())
	}
	for _, srqn := range sortedKeys(c.srqs) {
		s := c.srqs[srqn]
		s.asyncUnacked = 0
		keep(s.Destroy())
	}
	for _, cqn := range sortedKeys(c.cqs) {
		cq := c.cqs[cqn]
		cq.evAcked, cq.asyncUnacked = cq.evReported, 0
		keep(cq.Destroy())
	}
	c.closeEvents(keep)
	for ah := range c.ahs { // no commands: the order does not matter
		keep(ah.Destroy())
	}
	for _, k := range sortedKeys(c.mrs) {
		keep(c.mrs[k].Dereg())
	}
	for _, pdn := range sortedKeys(c.pds) {
		keep(c.pds[pdn].Dealloc())
	}
	if cl, ok := c.ctl.(interface{ Close() error }); ok {
		if err := cl.Close(); err != nil { // a dialled device: detach, after every object is gone
			keep(opErr("close", 0, err))
		}
	}
	// A QP whose destroy failed stays in c.qps; it must not post once the
	// device is closed (on rxe its doorbell is a write() to an fd number
	// that may by now be another file's). Nor may it, an SRQ or a CQ whose
	// destroy failed (a dead daemon refuses every command) touch its rings
	// and doorbell records: a dialled context's memory is unmapped by now,
	// and a Poll, Ready, ReqNotify or PostRecv would fault on it. They are
	// dead, refused with ErrClosed like every object of a closed context.
	for _, qp := range c.qps {
		qp.markDead()
		qp.sq.buf, qp.rq.buf, qp.dbr = nil, nil, nil
	}
	for _, s := range c.srqs {
		s.dead = true
		s.buf, s.dbr = nil, nil
	}
	for _, cq := range c.cqs {
		cq.dead = true
		cq.ring, cq.dbr = nil, nil
	}
	// A channel whose destroy failed (a CQ above still used it, or the
	// daemon was gone) would keep its pipe's two descriptors open for
	// ever: nothing can destroy it once the context is closed.
	if c.ev != nil {
		for id, ch := range c.ev.chans {
			ch.dead = true
			ch.pipe.close()
			delete(c.ev.chans, id)
		}
	}
	c.closed = true
	return first
}

// sortedKeys returns a map's keys in ascending order, so that teardown
// issues commands in a deterministic order.
func sortedKeys[V any](m map[uint32]V) []uint32 {
	ks := make([]uint32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Buffer is application memory inside the device-visible region: Addr is
// its IOVA (what SGEs and RegMR take), Bytes aliases it.
type Buffer struct {
	Addr  uint64
	Bytes []byte
}

// AllocBuffer reserves n zeroed bytes aligned to align (a power of two) in
// the shared region.
func (c *Context) AllocBuffer(n, align int) (Buffer, error) {
	if c.gone() {
		return Buffer{}, opErr("alloc_buffer", 0, ErrClosed)
	}
	if n <= 0 || align <= 0 || align&(align-1) != 0 {
		return Buffer{}, opErr("alloc_buffer", 0, detail(ErrInvalidArg, "size %d align %d", n, align))
	}
	addr, err := c.mem.Alloc(n, align)
	if err != nil {
		return Buffer{}, opErr("alloc_buffer", 0, detail(ErrNoMemory, "%v", err))
	}
	b, err := c.mem.Slice(addr, n)
	if err != nil { // cannot happen: Alloc returned the range
		_ = c.mem.Free(addr)
		return Buffer{}, opErr("alloc_buffer", 0, detail(ErrNoMemory, "%v", err))
	}
	if c.bufs == nil {
		c.bufs = map[uint64]struct{}{}
	}
	c.bufs[addr] = struct{}{}
	return Buffer{Addr: addr, Bytes: b}, nil
}

// FreeBuffer returns a buffer from AllocBuffer. Any other address, a
// buffer freed already among them, is refused with ErrInvalidArg: the
// region's allocator also holds the rings and doorbell records of the
// context's queues, which a double free would otherwise release to the
// next AllocBuffer while the device still writes them.
func (c *Context) FreeBuffer(b Buffer) error {
	if c.gone() {
		return opErr("free_buffer", 0, ErrClosed)
	}
	if _, ok := c.bufs[b.Addr]; !ok {
		return opErr("free_buffer", 0, detail(ErrInvalidArg, "%#x is no buffer of AllocBuffer (freed already?)", b.Addr))
	}
	if err := c.mem.Free(b.Addr); err != nil {
		return opErr("free_buffer", 0, detail(ErrInvalidArg, "%v", err))
	}
	delete(c.bufs, b.Addr)
	return nil
}

// allocQueueMem allocates zeroed memory for rings and doorbell records.
func (c *Context) allocQueueMem(op string, n, align int) (uint64, []byte, error) {
	addr, err := c.mem.Alloc(n, align)
	if err != nil {
		return 0, nil, detail(ErrNoMemory, "%s: %v", op, err)
	}
	b, err := c.mem.Slice(addr, n)
	if err != nil {
		_ = c.mem.Free(addr)
		return 0, nil, detail(ErrNoMemory, "%s: %v", op, err)
	}
	return addr, b, nil
}

// PD is a protection domain.
type PD struct {
	ctx  *Context
	pdn  uint32
	refs int // MRs, QPs, SRQs and AHs created on it
	dead bool
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	if c.gone() {
		return nil, opErr("alloc_pd", 0, ErrClosed)
	}
	r, err := c.ctl.AllocPD()
	if err != nil {
		return nil, opErr("alloc_pd", 0, err)
	}
	pd := &PD{ctx: c, pdn: r.PDN}
	c.pds[r.PDN] = pd
	return pd, nil
}

// PDN is the protection-domain number.
func (pd *PD) PDN() uint32 {
	if pd == nil {
		return 0
	}
	return pd.pdn
}

// Dealloc frees the PD; it fails with ErrBusy while MRs, QPs, SRQs or AHs
// use it.
func (pd *PD) Dealloc() error {
	if pd.gone() {
		return opErr("dealloc_pd", 0, ErrClosed)
	}
	if pd.refs > 0 {
		return opErr("dealloc_pd", 0, detail(ErrBusy, "pd %d has %d MRs/QPs/SRQs/AHs", pd.pdn, pd.refs))
	}
	if err := pd.ctx.ctl.DeallocPD(pd.pdn); err != nil {
		return opErr("dealloc_pd", 0, err)
	}
	pd.dead = true
	delete(pd.ctx.pds, pd.pdn)
	return nil
}

// MR is a registered memory region.
type MR struct {
	pd     *PD
	LKey   uint32
	RKey   uint32
	Addr   uint64
	Length uint64
	Access Access
	dead   bool
}

// RegMR registers [addr, addr+length) of the shared region. As in the IB
// spec, remote write or atomic access requires local write.
func (pd *PD) RegMR(addr, length uint64, access Access) (*MR, error) {
	if pd.gone() || pd.ctx.closed {
		return nil, opErr("reg_mr", 0, ErrClosed)
	}
	c := pd.ctx
	switch {
	case length == 0:
		return nil, opErr("reg_mr", 0, detail(ErrInvalidArg, "zero length"))
	case length > uint64(c.mem.Size()) || !c.mem.Contains(addr, int(length)):
		return nil, opErr("reg_mr", 0, detail(ErrOutOfRange, "[%#x, +%d) not inside host memory [%#x, +%d)",
			addr, length, c.mem.Base(), c.mem.Size()))
	case c.attr.MaxMRSize != 0 && length > c.attr.MaxMRSize:
		return nil, opErr("reg_mr", 0, detail(ErrInvalidArg, "length %d > max_mr_size %d", length, c.attr.MaxMRSize))
	case access&^accessKnown != 0:
		return nil, opErr("reg_mr", 0, detail(ErrInvalidArg, "unknown access bits %#x", uint32(access&^accessKnown)))
	case access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0:
		return nil, opErr("reg_mr", 0, detail(ErrInvalidArg, "remote write/atomic access without local write"))
	}
	r, err := c.ctl.RegMR(mlx5.RegMRCmd{PDN: pd.pdn, Addr: addr, Length: length, HCAVA: addr, Access: uint32(access)})
	if err != nil {
		return nil, opErr("reg_mr", 0, err)
	}
	mr := &MR{pd: pd, LKey: r.LKey, RKey: r.RKey, Addr: addr, Length: length, Access: access}
	pd.refs++
	c.mrs[r.LKey] = mr
	return mr, nil
}

// Dereg deregisters the MR.
func (mr *MR) Dereg() error {
	if mr.gone() {
		return opErr("dereg_mr", 0, ErrClosed)
	}
	if err := mr.pd.ctx.ctl.DeregMR(mr.LKey); err != nil {
		return opErr("dereg_mr", 0, err)
	}
	mr.dead = true
	mr.pd.refs--
	delete(mr.pd.ctx.mrs, mr.LKey)
	return nil
}

// SGE is the scatter/gather entry covering [off, off+n) of the MR.
func (mr *MR) SGE(off uint64, n uint32) SGE {
	if mr == nil {
		return SGE{}
	}
	return SGE{Addr: mr.Addr + off, Length: n, LKey: mr.LKey}
}
