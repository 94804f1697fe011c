package device_test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

// evWorld is an RC connection whose responder's receive CQ reports to a
// completion channel of the responder's device, driven at the narrow
// waist: arms are raw doorbell stores (DBR[1], then UAR+0x20), events are
// read from the device's EventControl side.
type evWorld struct {
	t        *testing.T
	w        *testbed.World
	req, rsp *testbed.Endpoint
	dev      *device.Device
	ch       uint32
	cq       *provider.CQ
	reads    int // completion events read: the arm sequence number
}

func newEvWorld(t *testing.T, o testbed.ConnOpts) *evWorld {
	t.Helper()
	cfg := testbed.DefaultConfig()
	cfg.Trace = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(o)
	require.NoError(t, err)
	e := &evWorld{t: t, w: w, req: eps[0], rsp: eps[1], dev: eps[1].Host.Dev, cq: eps[1].RecvCQ}
	e.ch, err = e.dev.CreateCompChannel()
	require.NoError(t, err)
	require.NoError(t, e.dev.AttachCQ(e.cq.CQN(), e.ch))
	recvs := make([]provider.RecvWR, 16)
	for i := range recvs {
		recvs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{e.rsp.MR.SGE(uint64(i)*256, 256)}}
	}
	_, err = e.rsp.QP.PostRecv(recvs)
	require.NoError(t, err)
	return e
}

// armSN stores an arm doorbell with sequence number sn the way libmlx5
// does: the arm word into doorbell-record word 1, then the 64-bit store.
func (e *evWorld) armSN(sn uint8, solicited bool) {
	a := mlx5.CQArm{SN: sn, SolicitedOnly: solicited, CI: e.cq.ConsumerIndex() & 0xffffff, CQN: e.cq.CQN()}
	dbr, err := e.rsp.Host.Mem.Slice(e.cq.Info().DBRAddr, mlx5.DBRecSize)
	require.NoError(e.t, err)
	mlx5.DBRec(dbr).SetWord(mlx5.DBRArm, a.ArmWord())
	var db [8]byte
	binary.BigEndian.PutUint32(db[0:], a.ArmWord())
	binary.BigEndian.PutUint32(db[4:], a.CQN)
	m := e.rsp.Host.CPU
	m.Flush()
	m.Store64(uint64(e.dev.Spec().BAR.FirstUAR)*mlx5.UARPageSize+mlx5.UARCQArmOffset, binary.LittleEndian.Uint64(db[:]))
	m.Flush()
}

func (e *evWorld) arm(solicited bool) { e.armSN(uint8(e.reads&3), solicited) }

// send posts a small SEND from the requester, solicited or not.
func (e *evWorld) send(solicited bool) {
	fl := provider.SendSignaled
	if solicited {
		fl |= provider.SendSolicited
	}
	_, err := e.req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, Flags: fl, SGL: []provider.SGE{e.req.MR.SGE(0, 32)}}})
	require.NoError(e.t, err)
}

// events runs the world until it is idle and takes the channel's events.
func (e *evWorld) events() int {
	e.w.Settle(0)
	buf := make([]mlx5.CompEvent, 8)
	n, err := e.dev.ReadCompEvents(e.ch, buf)
	require.NoError(e.t, err)
	for _, ev := range buf[:n] {
		require.Equal(e.t, e.cq.CQN(), ev.CQN)
	}
	e.reads += n
	return n
}

// poll consumes every CQE of the receive CQ.
func (e *evWorld) poll() int {
	e.w.Settle(0)
	n, err := e.cq.Poll(make([]provider.WC, 32))
	require.NoError(e.t, err)
	return n
}

func TestCQNotification(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, e *evWorld)
	}{
		{"next completion: two CQEs, one event", func(t *testing.T, e *evWorld) {
			e.arm(false)
			e.send(false)
			e.send(false)
			require.Equal(t, 1, e.events())
			require.Equal(t, 2, e.poll())
			require.Equal(t, 0, e.events(), "one arm, one event")
		}},
		{"re-arm: the next CQE fires again", func(t *testing.T, e *evWorld) {
			e.arm(false)
			e.send(false)
			require.Equal(t, 1, e.events())
			require.Equal(t, 1, e.poll())
			e.arm(false)
			require.Equal(t, 0, e.events(), "nothing beyond the consumer index")
			e.send(false)
			require.Equal(t, 1, e.events())
		}},
		{"disarmed: CQEs raise nothing", func(t *testing.T, e *evWorld) {
			e.send(false)
			e.send(true)
			require.Equal(t, 0, e.events())
			require.Equal(t, 2, e.poll())
		}},
		{"solicited only: a plain SEND does not fire, a solicited one does", func(t *testing.T, e *evWorld) {
			e.arm(true)
			e.send(false)
			require.Equal(t, 0, e.events())
			e.send(true)
			require.Equal(t, 1, e.events())
			require.Equal(t, 2, e.poll())
		}},
		{"arm with CQEs already pending fires at once", func(t *testing.T, e *evWorld) {
			e.send(false)
			require.Equal(t, 0, e.events())
			e.arm(false) // its consumer index is behind the CQE
			require.Equal(t, 1, e.events())
		}},
		{"arm after everything was polled waits for the next CQE", func(t *testing.T, e *evWorld) {
			e.send(false)
			require.Equal(t, 1, e.poll())
			e.arm(false)
			require.Equal(t, 0, e.events())
			e.send(false)
			require.Equal(t, 1, e.events())
		}},
		{"solicited arm with a solicited CQE pending fires at once", func(t *testing.T, e *evWorld) {
			e.send(false)
			e.send(true)
			require.Equal(t, 0, e.events())
			e.arm(true)
			require.Equal(t, 1, e.events())
		}},
		{"solicited arm with only plain CQEs pending waits", func(t *testing.T, e *evWorld) {
			e.send(false)
			require.Equal(t, 0, e.events())
			e.arm(true)
			require.Equal(t, 0, e.events())
			e.send(true)
			require.Equal(t, 1, e.events())
		}},
		{"an error CQE fires a solicited arm", func(t *testing.T, e *evWorld) {
			e.arm(true)
			require.NoError(t, e.rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
			require.Equal(t, 1, e.events(), "the flushed receives are error CQEs")
		}},
		{"a pending next-completion arm prevails over a solicited-only arm", func(t *testing.T, e *evWorld) {
			e.arm(false)
			e.arm(true)
			e.send(false)
			require.Equal(t, 1, e.events())
		}},
		{"an arm with a stale sequence number is counted and still taken", func(t *testing.T, e *evWorld) {
			e.armSN(2, false)
			e.w.Settle(0)
			require.Equal(t, uint64(1), e.dev.Counters().Value(device.CtrCQArmSN))
			e.send(false)
			require.Equal(t, 1, e.events())
		}},
		{"an arm whose doorbell record was not written is counted", func(t *testing.T, e *evWorld) {
			dbr, _ := e.rsp.Host.Mem.Slice(e.cq.Info().DBRAddr, mlx5.DBRecSize)
			mlx5.DBRec(dbr).SetWord(mlx5.DBRArm, 0x0badf00d)
			var db [8]byte
			binary.BigEndian.PutUint32(db[0:], mlx5.CQArm{CQN: e.cq.CQN()}.ArmWord())
			binary.BigEndian.PutUint32(db[4:], e.cq.CQN())
			e.rsp.Host.CPU.Store64(uint64(e.dev.Spec().BAR.FirstUAR)*mlx5.UARPageSize+mlx5.UARCQArmOffset, binary.LittleEndian.Uint64(db[:]))
			e.rsp.Host.CPU.Flush()
			e.w.Settle(0)
			require.Equal(t, uint64(1), e.dev.Counters().Value(device.CtrCQArmDBRMismatch))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEvWorld(t, testbed.ConnOpts{})
			c.run(t, e)
			ctr := e.dev.Counters()
			require.Equal(t, uint64(e.reads), ctr.Value(device.CtrCQEvents), "events raised = events read")
			require.Zero(t, ctr.Value(device.CtrCompEventsDropped))
			require.Zero(t, ctr.Value(device.CtrEQOverrun))
		})
	}
}

// stagesOfFlow returns the trace events of one flow, by name.
func stagesOfFlow(evs []trace.Event, node int, flow uint64) map[string]trace.Event {
	out := map[string]trace.Event{}
	for _, ev := range evs {
		if ev.Node == node && ev.Flow == flow && ev.Level != trace.Warn {
			out[ev.Name] = ev
		}
	}
	return out
}

// TestNotificationTrace: a trace shows arm → EQE → MSI-X → event under
// one flow, in that order; it measures the arm → event latency.
func TestNotificationTrace(t *testing.T) {
	for _, c := range []struct {
		name    string
		pending bool // CQE written before the arm
	}{{"arm with a CQE pending", true}, {"arm, then a CQE", false}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEvWorld(t, testbed.ConnOpts{})
			if c.pending {
				e.send(false)
				e.w.Settle(0)
			}
			e.w.Rec.Reset()
			e.arm(false)
			if !c.pending {
				e.send(false)
			}
			require.Equal(t, 1, e.events())
			var flow uint64
			var cqe trace.Event
			for _, ev := range e.w.Rec.Events() {
				if ev.Node == 1 && ev.Name == "cq_arm" {
					flow = ev.Flow
				}
				if ev.Node == 1 && ev.Name == "cqe_write" {
					cqe = ev
				}
			}
			require.NotZero(t, flow)
			st := stagesOfFlow(e.w.Rec.Events(), 1, flow)
			for _, n := range []string{"cq_arm", "eqe_write", "msix", "event"} {
				require.Contains(t, st, n)
			}
			arm, eqe, msix, ev := st["cq_arm"], st["eqe_write"], st["msix"], st["event"]
			require.LessOrEqual(t, arm.Start, eqe.Start)
			require.LessOrEqual(t, eqe.End, msix.Start, "the interrupt follows the EQE's landing")
			require.Less(t, msix.End, ev.Start)
			require.Equal(t, "kernel", ev.Component)
			lat := ev.End.Sub(arm.Start)
			if c.pending {
				t.Logf("arm → event: %v (EQE write %v, MSI-X %v, handler %v)", lat,
					eqe.End.Sub(eqe.Start), msix.End.Sub(msix.Start), ev.End.Sub(msix.End))
				require.Less(t, lat, 3*sim.Microsecond)
			} else {
				require.NotZero(t, cqe.End)
				t.Logf("arm → event: %v; CQE landed → event: %v", lat, ev.End.Sub(cqe.End))
				require.Less(t, ev.End.Sub(cqe.End), 3*sim.Microsecond)
			}
			require.Greater(t, lat, device.DefaultEventSpec().IRQLatency)
		})
	}
}

// asyncEvents runs the world until idle and takes host n's async events.
func asyncEvents(w *testbed.World, n int) []mlx5.AsyncEvent {
	w.Settle(0)
	buf := make([]mlx5.AsyncEvent, 64)
	k := w.Hosts[n].Dev.ReadAsyncEvents(buf)
	return buf[:k]
}

func TestAsyncEventSources(t *testing.T) {
	cases := []struct {
		name string
		opts testbed.ConnOpts
		// run provokes the event and returns what each host must see.
		run func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) [2][]mlx5.AsyncEvent
	}{
		{"CQ overrun: CQ_ERR, then QP_FATAL for the QP on it", testbed.ConnOpts{CQDepth: 1}, func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) [2][]mlx5.AsyncEvent {
			recvs := make([]provider.RecvWR, 4)
			for i := range recvs {
				recvs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*64, 64)}}
			}
			_, err := rsp.QP.PostRecv(recvs)
			require.NoError(t, err)
			for i := 0; i < 3; i++ { // a ring of 2 entries: the third CQE overruns
				_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 8)}}})
				require.NoError(t, err)
				w.Settle(0)
			}
			return [2][]mlx5.AsyncEvent{nil, {{Type: mlx5.EventCQErr, Num: rsp.RecvCQ.CQN()}, {Type: mlx5.EventQPFatal, Num: rsp.QP.QPN()}}}
		}},
		{"bad rkey WRITE: QP_ACCESS_ERR at the responder, the requester's error is in its CQE", testbed.ConnOpts{}, func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) [2][]mlx5.AsyncEvent {
			_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey ^ 0x5500}})
			require.NoError(t, err)
			return [2][]mlx5.AsyncEvent{nil, {{Type: mlx5.EventQPAccessErr, Num: rsp.QP.QPN()}}}
		}},
		{"READ without remote-read access: QP_REQ_ERR at the responder", testbed.ConnOpts{Access: provider.AccessLocalWrite | provider.AccessRemoteWrite}, func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) [2][]mlx5.AsyncEvent {
			_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			return [2][]mlx5.AsyncEvent{nil, {{Type: mlx5.EventQPReqErr, Num: rsp.QP.QPN()}}}
		}},
		{"receive buffer outside its MR: the responder's error is in its CQE, no event", testbed.ConnOpts{}, func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) [2][]mlx5.AsyncEvent {
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{SGL: []provider.SGE{{Addr: rsp.MR.Addr + rsp.MR.Length - 8, Length: 64, LKey: rsp.MR.LKey}}}})
			require.NoError(t, err)
			_, err = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
			require.NoError(t, err)
			return [2][]mlx5.AsyncEvent{}
		}},
		{"link down and up: PORT_ERR then PORT_ACTIVE on both ports", testbed.ConnOpts{}, func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) [2][]mlx5.AsyncEvent {
			w.SetLink(false)
			w.Settle(0)
			w.SetLink(true)
			p := []mlx5.AsyncEvent{{Type: mlx5.EventPortErr, Num: 1}, {Type: mlx5.EventPortActive, Num: 1}}
			return [2][]mlx5.AsyncEvent{p, p}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			defer w.Close()
			eps, err := w.ConnectRC(c.opts)
			require.NoError(t, err)
			want := c.run(t, w, eps[0], eps[1])
			for n := 0; n < 2; n++ {
				got := asyncEvents(w, n)
				if len(want[n]) == 0 {
					require.Empty(t, got, "host %d", n)
					continue
				}
				require.Equal(t, want[n], got, "host %d", n)
			}
		})
	}
}

// TestCommEst: a QP in RTR that receives its first packet reports
// COMM_EST once; after it goes to RTS nothing more.
func TestCommEst(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	// Take the responder back to RTR (RESET → INIT → RTR) and connect it
	// again; the requester stays in RTS and sends.
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
	pid := req.Host.Dev.Identity()
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateInit, Port: 1, AccessFlags: provider.AccessLocalWrite | provider.AccessRemoteWrite},
		mlx5.AttrState|mlx5.AttrPKeyIndex|mlx5.AttrPort|mlx5.AttrAccessFlags))
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateRTR, PathMTU: mlx5.MTU1024, DestQPN: req.QP.QPN(), RQPSN: 0x1000,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: provider.AV{DMAC: pid.MAC, DGID: pid.IP.As16(), HopLimit: 64, SGIDIndex: 1}},
		mlx5.AttrState|mlx5.AttrAV|mlx5.AttrPathMTU|mlx5.AttrDestQPN|mlx5.AttrRQPSN|mlx5.AttrMaxDestRdAtomic|mlx5.AttrMinRNRTimer))
	for i := 0; i < 2; i++ {
		_, err = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
		require.NoError(t, err)
		_, err = testbed.Wait(req.SendCQ, 1)
		require.NoError(t, err, "a QP in RTR answers")
	}
	require.Equal(t, []mlx5.AsyncEvent{{Type: mlx5.EventCommEst, Num: rsp.QP.QPN()}}, asyncEvents(w, 1), "once, for the first packet")
	require.Empty(t, asyncEvents(w, 0))
}

// TestLinkDownDrops: while the link is down nothing is sent or received;
// the requester's retries run out.
func TestLinkDownDrops(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{Timeout: 4, RetryCnt: 2})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	w.SetLink(false)
	require.False(t, req.Host.Dev.LinkUp())
	_, err = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 1)
	require.NoError(t, err)
	require.Equal(t, provider.WCRetryExcErr, wcs[0].Status)
	require.Equal(t, uint64(3), req.Host.Dev.Counters().Value(device.CtrTxDropLinkDown), "the first send and two retries")
	require.Zero(t, rsp.Host.Dev.Counters().Value(device.CtrRcvdPkts))
	w.SetLink(true)
	w.SetLink(true) // no change: no event
	require.Equal(t, []mlx5.AsyncEvent{{Type: mlx5.EventPortErr, Num: 1}, {Type: mlx5.EventPortActive, Num: 1}}, asyncEvents(w, 0))
}

// TestEventQueueBound: events nobody reads are queued up to the bound,
// then dropped and counted.
func TestEventQueueBound(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Device.Events.QueueDepth = 4
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	for i := 0; i < 5; i++ {
		w.SetLink(false)
		w.Settle(0)
		w.SetLink(true)
		w.Settle(0)
	}
	d := w.Hosts[0].Dev
	require.Equal(t, 4, d.PendingEvents(0))
	require.Equal(t, uint64(4), d.Counters().Value(device.CtrAsyncEvents))
	require.Equal(t, uint64(6), d.Counters().Value(device.CtrAsyncEventsDropped))
	require.Len(t, asyncEvents(w, 0), 4)
}

// TestEQDoorbellFromUser: a user store to an EQ doorbell of its own UAR
// names a kernel EQ on the wrong page: ignored and counted.
func TestEQDoorbellFromUser(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	d := w.Hosts[0].Dev
	uar := uint64(d.Spec().BAR.FirstUAR) * mlx5.UARPageSize
	for _, eqn := range []uint8{1, 3, 200} {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], mlx5.EQDoorbell(eqn, 0))
		w.Hosts[0].CPU.Store32(uar+mlx5.UAREQArmOffset, binary.LittleEndian.Uint32(b[:]))
		w.Hosts[0].CPU.Flush() // one write-combined line per store
	}
	w.Settle(0)
	require.Equal(t, uint64(2), d.Counters().Value(device.CtrEQDoorbellWrongUAR))
	require.Equal(t, uint64(1), d.Counters().Value(device.CtrEQDoorbellUnknownEQ))
	require.Zero(t, d.Counters().Value(device.CtrInterrupts))
}

// FuzzEventDoorbells: arbitrary CQ arm and EQ doorbell stores (any CQN,
// sn, ci, command bits, EQN) never panic the device, and afterwards a
// well-formed arm still gives an event. Each 9-byte record is one store:
// a kind byte, then the 8 bytes stored.
func FuzzEventDoorbells(f *testing.F) {
	f.Add([]byte{0, 0x30, 0xff, 0xff, 0xff, 0, 0, 0, 1})                            // arm, sn 3, ci 0xffffff, CQ 1
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x03, 0, 0, 0x10, 0, 0, 0, 0})       // arm the real CQ; EQ 3 doorbell
	f.Add([]byte{2, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 5, 1, 2, 3, 4}) // EQ update; a short record
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 9*64 {
			return
		}
		e := newEvWorld(t, testbed.ConnOpts{})
		m := e.rsp.Host.CPU
		uar := uint64(e.dev.Spec().BAR.FirstUAR) * mlx5.UARPageSize
		sent := 0
		for ; len(data) >= 9; data = data[9:] {
			v := binary.LittleEndian.Uint64(data[1:9])
			switch data[0] % 4 {
			case 0:
				m.Store64(uar+mlx5.UARCQArmOffset, v)
			case 1:
				m.Store32(uar+mlx5.UAREQArmOffset, uint32(v))
			case 2:
				m.Store32(uar+mlx5.UAREQUpdateOffset, uint32(v))
			case 3: // an arm of the real CQ with fuzzed sn, command and ci
				var db [8]byte
				binary.LittleEndian.PutUint64(db[:], v)
				binary.BigEndian.PutUint32(db[4:], e.cq.CQN())
				m.Store64(uar+mlx5.UARCQArmOffset, binary.LittleEndian.Uint64(db[:]))
			}
			m.Flush()
			if data[0]&0x80 != 0 && sent < 8 { // 16 receives are posted: no RNR
				e.send(data[0]&0x40 != 0)
				sent++
			}
		}
		e.events()
		e.poll()
		e.arm(false)
		e.send(false)
		if e.events() == 0 {
			t.Fatal("no completion event after a well-formed arm")
		}
	})
}
