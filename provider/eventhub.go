package provider

import (
	"reflect"
	"slices"
	"sync"

	"github.com/softnic/softnic/mlx5"
)

// Several contexts on one device. The device (mlx5.EventControl) has one
// asynchronous event queue and one notify function, as a device has one
// async EQ; the kernel gives every open context its own async event file
// and delivers an event to the context that owns its QP, CQ or SRQ, and
// port and device events to all of them (ib_uverbs_event_handler). An
// eventHub does the kernel's part for the contexts this process opens on
// one in-process device: without it the second Open's notify replaced the
// first's, either context's GetAsyncEvent took (and threw away) the
// other's events, and closing one silenced the other.
//
// With a single context the view passes straight through, so its events,
// their order and its fd bytes are what they were. From the moment a
// second context opens, the hub moves each event out of the device's
// queue as the device queues it, into the queue of every context it is
// for, and signals those contexts only.
type eventHub struct {
	ec     mlx5.EventControl
	views  []*eventView
	chans  map[uint32]*eventView // completion channels, by number: the context that made each
	shared bool                  // a second context has opened: events are routed
	keyed  bool                  // in hubs.m (ec's type is comparable)
}

// eventView is one context's share of a hub (an mlx5.EventControl).
type eventView struct {
	hub    *eventHub
	owns   func(mlx5.AsyncEvent) bool // the context's objects (shared mode)
	notify func(ch uint32)
	q      []mlx5.AsyncEvent // routed to this context, not read yet
	gone   bool
}

// viewQueueMax bounds a context's routed events, like the device's own
// queue (uverbs drops what its bounded queue cannot hold too).
const viewQueueMax = 4096

var hubs = struct {
	sync.Mutex
	m map[mlx5.EventControl]*eventHub
}{m: map[mlx5.EventControl]*eventHub{}}

// joinHub returns context's view of ec's hub, making the hub on first use.
// An ec that cannot be a map key (a struct with a slice in it, or with an
// interface field that holds one) gets a hub of its own.
func joinHub(ec mlx5.EventControl, owns func(mlx5.AsyncEvent) bool) *eventView {
	if v := reflect.ValueOf(ec); !v.IsValid() || !v.Comparable() { // Comparable looks into interface fields too
		h := &eventHub{ec: ec, chans: map[uint32]*eventView{}}
		v := &eventView{hub: h, owns: owns}
		h.views = []*eventView{v}
		ec.SetEventNotify(h.notifyFrom)
		return v
	}
	hubs.Lock()
	defer hubs.Unlock()
	h := hubs.m[ec]
	if h == nil {
		h = &eventHub{ec: ec, chans: map[uint32]*eventView{}, keyed: true}
		hubs.m[ec] = h
		ec.SetEventNotify(h.notifyFrom)
	}
	v := &eventView{hub: h, owns: owns}
	if len(h.views) == 1 && !h.shared {
		// The first context's events still in the device's queue are
		// its own (it alone could own their objects), and its fd has
		// their bytes already.
		first := h.views[0]
		var buf [64]mlx5.AsyncEvent
		for n := ec.ReadAsyncEvents(buf[:]); n > 0; n = ec.ReadAsyncEvents(buf[:]) {
			first.q = append(first.q, buf[:n]...)
		}
		h.shared = true
	}
	h.views = append(h.views, v)
	return v
}

// leave takes v out of its hub; the last one out removes the hub.
func (v *eventView) leave() {
	if v.gone {
		return
	}
	v.gone = true
	h := v.hub
	hubs.Lock()
	defer hubs.Unlock()
	h.views = slices.DeleteFunc(h.views, func(w *eventView) bool { return w == v })
	for ch, w := range h.chans {
		if w == v {
			delete(h.chans, ch)
		}
	}
	if len(h.views) == 0 {
		h.ec.SetEventNotify(nil)
		if h.keyed && hubs.m[h.ec] == h {
			delete(hubs.m, h.ec)
		}
	}
}

// notifyFrom is the device's notify function.
func (h *eventHub) notifyFrom(ch uint32) {
	if ch != 0 {
		if v := h.chans[ch]; v != nil && v.notify != nil {
			v.notify(ch)
		} else if !h.shared && len(h.views) == 1 && h.views[0].notify != nil {
			h.views[0].notify(ch) // a channel made before the hub knew it
		}
		return
	}
	if !h.shared {
		if len(h.views) == 1 && h.views[0].notify != nil {
			h.views[0].notify(0)
		}
		return
	}
	h.route()
}

// route moves the device's queued async events to the contexts they are
// for, signalling each once per event it gets. An event of an object no
// context owns (destroyed meanwhile) is dropped, as uverbs drops it.
func (h *eventHub) route() {
	var buf [64]mlx5.AsyncEvent
	for n := h.ec.ReadAsyncEvents(buf[:]); n > 0; n = h.ec.ReadAsyncEvents(buf[:]) {
		for _, e := range buf[:n] {
			for _, v := range h.views {
				if len(v.q) >= viewQueueMax || !v.owns(e) {
					continue
				}
				v.q = append(v.q, e)
				if v.notify != nil {
					v.notify(0)
				}
			}
		}
	}
}

// drop removes v's unread events of object num of kind ("qp", "cq",
// "srq"), as the device drops a destroyed object's events from its queue.
func (v *eventView) drop(kind string, num uint32) {
	if !v.hub.shared {
		return
	}
	v.hub.route()
	v.q = slices.DeleteFunc(v.q, func(e mlx5.AsyncEvent) bool { return eventObject(e.Type) == kind && e.Num == num })
}

// The mlx5.EventControl of one context.

func (v *eventView) CreateCompChannel() (uint32, error) {
	ch, err := v.hub.ec.CreateCompChannel()
	if err == nil {
		v.hub.chans[ch] = v
	}
	return ch, err
}

func (v *eventView) DestroyCompChannel(ch uint32) error {
	err := v.hub.ec.DestroyCompChannel(ch)
	if err == nil && v.hub.chans[ch] == v {
		delete(v.hub.chans, ch)
	}
	return err
}

func (v *eventView) AttachCQ(cqn, ch uint32) error { return v.hub.ec.AttachCQ(cqn, ch) }

func (v *eventView) ReadCompEvents(ch uint32, out []mlx5.CompEvent) (int, error) {
	return v.hub.ec.ReadCompEvents(ch, out)
}

func (v *eventView) ReadAsyncEvents(out []mlx5.AsyncEvent) int {
	if !v.hub.shared {
		return v.hub.ec.ReadAsyncEvents(out)
	}
	v.hub.route()
	n := copy(out, v.q)
	v.q = v.q[:copy(v.q, v.q[n:])]
	return n
}

func (v *eventView) PendingEvents(ch uint32) int {
	if ch != 0 || !v.hub.shared {
		return v.hub.ec.PendingEvents(ch)
	}
	v.hub.route()
	return len(v.q)
}

// SetEventNotify installs the context's notify; nil (the context's
// Close) takes the context out of the hub.
func (v *eventView) SetEventNotify(f func(ch uint32)) {
	v.notify = f
	if f == nil {
		v.leave()
	}
}
