package uverbsdev

import (
	"fmt"
	"slices"
	"syscall"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// Device is one emulated NIC as its uverbs clients share it: the handle
// space (unique across clients, see the package doc) and the counters of
// every client. Its methods, like the device's, are not safe for concurrent
// use: the daemon serialises commands per device.
type Device struct {
	dev    *device.Device
	next   uverbs.Handle
	owner  map[uverbs.Handle]*Server
	ctrs   counters
	neigh  func(gid [16]byte) ([6]byte, bool)
	closed int // clients closed
	ahs    int // address handles of every client (they have no device object to count)
}

// NewDevice wraps dev for uverbs clients.
func NewDevice(dev *device.Device) *Device {
	return &Device{dev: dev, owner: map[uverbs.Handle]*Server{}}
}

// SetNeighbour installs the neighbour table the device resolves a RoCE
// destination GID to a MAC with (MODIFY_QP with an address vector and
// CREATE_AH: the kernel resolves the destination MAC itself,
// ib_resolve_eth_dmac). Without one, or for a GID it does not know, the
// destination MAC is zero.
func (d *Device) SetNeighbour(f func(gid [16]byte) ([6]byte, bool)) { d.neigh = f }

// Counters are the commands served and refused by all clients of the device
// (names as Server.Counters), and "clients_closed".
func (d *Device) Counters() map[string]uint64 {
	m := d.ctrs.snapshot()
	m["clients_closed"] = uint64(d.closed)
	return m
}

// NewServer opens a client context on the device.
func (d *Device) NewServer() *Server {
	return &Server{d: d, dev: d.dev, objs: map[uverbs.Handle]*object{}}
}

// NewServer is NewDevice(dev).NewServer(): a device with one client.
func NewServer(dev *device.Device) *Server { return NewDevice(dev).NewServer() }

// kind is the type of a uverbs object.
type kind uint8

const (
	kindPD kind = iota + 1
	kindMR
	kindCQ
	kindQP
	kindSRQ
	kindAH
	kindChannel
	kindUAR
)

var kindNames = [...]string{kindPD: "PD", kindMR: "MR", kindCQ: "CQ", kindQP: "QP", kindSRQ: "SRQ",
	kindAH: "AH", kindChannel: "completion channel", kindUAR: "UAR"}

func (k kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "object"
}

// object is one entry of a client's object table.
type object struct {
	kind  kind
	h     uverbs.Handle
	num   uint32 // pdn, lkey, cqn, qpn, srqn, channel id, UAR page
	rkey  uint32 // MR
	users int    // PD: MRs, QPs, SRQs, AHs; CQ and SRQ: QPs; channel: CQs

	pd, scq, rcq, srq, channel *object // the objects it holds a reference on
	qpType                     uverbs.QPType
	ah                         uverbs.AHAttr
	dmac                       [6]byte
}

// Server is one client context of a Device: an open of the uverbs file.
type Server struct {
	d    *Device
	dev  *device.Device
	objs map[uverbs.Handle]*object
	ctrs counters

	open   bool // GET_CONTEXT done
	closed bool
	uctx   mlx5.ContextResp
	attr   mlx5.DeviceAttr
	uars   []bool // dynamic UARs in use, by page - uctx.UARIndex
}

// Do is Handle under the name of the provider's Transport interface, so
// that a Server is the in-process (loopback) transport.
func (s *Server) Do(req, resp []byte) (int, error) { return s.Handle(req, resp) }

// Counters are the commands this client sent and those refused:
// "commands", "refused", "refused_errno_<E>" and "refused_cmd_<CMD>"
// (at most 256 of those; the refusals of commands past them are counted
// as refused_cmd_OTHER).
func (s *Server) Counters() map[string]uint64 { return s.ctrs.snapshot() }

// IsIoctl reports whether b is an ioctl request rather than a write()
// command (uverbs.IsIoctl): a write that could pass for one is no valid
// command, so Handle refuses it either way. Transports that know the form
// call HandleWrite or HandleIoctl.
func IsIoctl(b []byte) bool { return uverbs.IsIoctl(b) }

// Handle serves one command: req in the write() or ioctl form (IsIoctl
// tells which), the response written into resp. It returns the response
// length, or a *uverbs.Error (nothing useful in resp). It never panics.
func (s *Server) Handle(req, resp []byte) (int, error) {
	if IsIoctl(req) {
		return s.HandleIoctl(req, resp)
	}
	return s.HandleWrite(req, resp)
}

// HandleWrite serves a command known to be in the write() form.
func (s *Server) HandleWrite(req, resp []byte) (int, error) { return s.done(s.write(req, resp)) }

// HandleIoctl serves a command known to be in the ioctl form.
func (s *Server) HandleIoctl(req, resp []byte) (int, error) { return s.done(s.ioctl(req, resp)) }

// done counts a served command in the client's and the device's counters.
func (s *Server) done(n int, ue *uverbs.Error) (int, error) {
	s.ctrs.count(ue)
	s.d.ctrs.count(ue)
	if ue != nil {
		return 0, ue
	}
	return n, nil
}

// ---------------------------------------------------------------- object table

func (s *Server) add(o *object) uverbs.Handle {
	for {
		s.d.next++
		if s.d.next == 0 {
			s.d.next = 1
		}
		if _, used := s.d.owner[s.d.next]; !used {
			break
		}
	}
	o.h = s.d.next
	s.objs[o.h] = o
	s.d.owner[o.h] = s
	return o.h
}

func (s *Server) remove(o *object) {
	delete(s.objs, o.h)
	delete(s.d.owner, o.h)
}

// lookup resolves a handle of kind k: ENOENT if no client has it, EBADF if
// another client has it, EINVAL if it names an object of another type.
func (s *Server) lookup(cmd uverbs.Command, h uverbs.Handle, k kind) (*object, *uverbs.Error) {
	return s.lookupName(cmd.String(), h, k)
}

func (s *Server) lookupName(cmd string, h uverbs.Handle, k kind) (*object, *uverbs.Error) {
	o := s.objs[h]
	switch {
	case o != nil && o.kind == k:
		return o, nil
	case o != nil:
		return nil, fail(cmd, syscall.EINVAL, fmt.Sprintf("handle %d is a %v, not a %v", h, o.kind, k))
	case s.d.owner[h] != nil:
		return nil, fail(cmd, syscall.EBADF, fmt.Sprintf("%v handle %d belongs to another context", k, h))
	}
	return nil, fail(cmd, syscall.ENOENT, fmt.Sprintf("no %v with handle %d", k, h))
}

// sorted lists the client's objects of kind k, newest first (teardown
// order: the kernel destroys a file's objects in reverse creation order).
func (s *Server) sorted(k kind) []*object {
	var out []*object
	for _, o := range s.objs {
		if o.kind == k {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b *object) int { return int(int64(b.h) - int64(a.h)) })
	return out
}

// Close destroys everything the client created, as the kernel does when
// the uverbs file of a dead process is released: QPs are moved to ERR
// (their outstanding work flushed) and destroyed, then SRQs, AHs, CQs,
// completion channels and MRs (revoked: no DMA reaches the client's memory
// through them any more), PDs and dynamic UARs. Later commands fail with
// EIO. It returns the first device error met, and keeps going.
func (s *Server) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.d.closed++
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, o := range s.sorted(kindQP) {
		if q, err := s.dev.QueryQP(o.num); err == nil && q.State != mlx5.QPStateRST && q.State != mlx5.QPStateERR {
			keep(s.dev.ModifyQP(mlx5.ModifyQPCmd{QPN: o.num, Mask: mlx5.AttrState, State: mlx5.QPStateERR}))
		}
		keep(s.dev.DestroyQP(o.num))
		s.release(o)
	}
	for _, k := range [...]kind{kindSRQ, kindAH, kindCQ, kindChannel, kindMR, kindPD, kindUAR} {
		for _, o := range s.sorted(k) {
			keep(s.devDestroy(k, o.num))
			s.release(o)
		}
	}
	s.uars = nil
	return first
}

// devDestroy frees the device object behind an object of kind k (AHs and
// UARs have none).
func (s *Server) devDestroy(k kind, num uint32) error {
	switch k {
	case kindQP:
		return s.dev.DestroyQP(num)
	case kindSRQ:
		return s.dev.DestroySRQ(num)
	case kindCQ:
		return s.dev.DestroyCQ(num)
	case kindChannel:
		return s.dev.DestroyCompChannel(num)
	case kindMR:
		return s.dev.DeregMR(num)
	case kindPD:
		return s.dev.DeallocPD(num)
	}
	return nil
}

// busyReason says, with the count, what still holds an object of a kind
// that others reference.
var busyReason = [...]string{kindPD: "still has %d MRs/QPs/SRQs/AHs", kindCQ: "is used by %d QPs",
	kindSRQ: "is used by %d QPs", kindChannel: "is used by %d CQs"}

// destroyObj is a client's DEALLOC/DEREG/DESTROY of its object h of kind
// k: EBUSY while other objects hold it; else the device frees it and the
// table forgets it.
func (s *Server) destroyObj(name string, h uverbs.Handle, k kind) *uverbs.Error {
	o, e := s.lookupName(name, h, k)
	if e != nil {
		return e
	}
	if o.users > 0 {
		return fail(name, syscall.EBUSY, fmt.Sprintf("%v %d "+busyReason[k], k, h, o.users))
	}
	if err := s.devDestroy(k, o.num); err != nil {
		return refusal(name, err)
	}
	s.release(o)
	return nil
}

// release drops an object from the table and its references on others.
func (s *Server) release(o *object) {
	for _, r := range [...]*object{o.pd, o.scq, o.rcq, o.srq, o.channel} {
		if r != nil {
			r.users--
		}
	}
	if o.kind == kindAH {
		s.d.ahs--
	}
	if o.kind == kindUAR {
		if i := int(o.num - s.uctx.UARIndex); i >= 0 && i < len(s.uars) {
			s.uars[i] = false
		}
	}
	s.remove(o)
}

// Objects reports how many objects of each type the client holds (for the
// daemon's log and for tests): keys "PD", "MR", "CQ", "QP", "SRQ", "AH",
// "completion channel", "UAR".
func (s *Server) Objects() map[string]int {
	m := map[string]int{}
	for _, o := range s.objs {
		m[o.kind.String()]++
	}
	return m
}
