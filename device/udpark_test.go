package device_test

import (
	"bytes"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

// udParkWorld is a traced UD connection (default 64 KiB buffers, 16 receives)
// whose receiver has nothing posted and whose read-ahead has stopped
// polling: the next datagram for eps[1] waits, parked (udpark.go), until
// the engine reaches its receive stage, and those after it queue behind.
func udParkWorld(t testing.TB, o testbed.ConnOpts) (*testbed.World, [2]*testbed.Endpoint) {
	t.Helper()
	o.Type = provider.QPTypeUD
	if o.BufSize == 0 {
		o.BufSize = 64 << 10
	}
	if o.RQDepth == 0 {
		o.RQDepth = 16
	}
	cfg := testbed.DefaultConfig()
	cfg.Trace = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(o)
	require.NoError(t, err)
	w.Settle(0)
	return w, eps
}

// udDatagram is a UD SEND (SEND with immediate imm if withImm) from
// srcQP on host 0 to dstQP on host 1.
func udDatagram(t testing.TB, srcQP, dstQP, qkey uint32, psn int, payload []byte, withImm bool, imm uint32) []byte {
	t.Helper()
	op := roce.OpUDSendOnly
	if withImm {
		op = roce.OpUDSendOnlyImm
	}
	fp := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1], TTL: 64, IPID: uint16(psn),
		BTH:  roce.BTHFields{Opcode: op, PKey: 0xffff, DestQP: dstQP, PSN: roce.PSN(psn)},
		DETH: roce.DETHFields{QKey: qkey, SrcQP: srcQP}, Imm: imm}
	buf := make([]byte, 64+len(payload)+64)
	k, err := roce.BuildFrame(buf, &fp, payload)
	require.NoError(t, err)
	return buf[:k]
}

// parkThree hands host 1 three datagrams for eps[1] 40 ns apart and
// checks that they wait: the first parked, two behind it.
func parkThree(t *testing.T, w *testbed.World, eps [2]*testbed.Endpoint) {
	t.Helper()
	start := w.Eng.Now()
	for i := range 3 {
		f := udDatagram(t, eps[0].QP.QPN(), eps[1].QP.QPN(), eps[1].QKey, i, []byte{byte('a' + i)}, false, 0)
		w.Hosts[1].Dev.ReceiveFrame(start.Add(sim.Duration(i)*40*sim.Nanosecond), f)
	}
	c := w.Hosts[1].Dev.Counters()
	require.Zero(t, c.Get("rx_ud_no_receive"), "parked, not dropped yet")
	require.Equal(t, start, w.Eng.Now())
}

// TestUDParkedFramesLeaveWithTheirQP: the datagrams parked behind a
// doorbell-record read are dropped, counted and warned of, the moment
// their QP stops receiving (destroyed, to ERR, to RESET, the device
// fatal), as a datagram arriving then would be; none reaches a receive
// WQE, of this incarnation or of the one after a RESET, and nothing of
// the parking fires later. Only RESET forgot them (silently); a
// destroyed QP's, an ERR QP's and a dead device's waited for their
// timer, which fired into the destroyed QP and counted them then.
func TestUDParkedFramesLeaveWithTheirQP(t *testing.T) {
	cases := []struct {
		name    string
		counter string
		leave   func(w *testbed.World, rsp *testbed.Endpoint) error
	}{
		{"destroyed", "rx_drop_no_qp", func(w *testbed.World, rsp *testbed.Endpoint) error { return rsp.QP.Destroy() }},
		{"to ERR", "rx_drop_qp_state", func(w *testbed.World, rsp *testbed.Endpoint) error {
			return rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState)
		}},
		{"to RESET", "rx_drop_qp_state", func(w *testbed.World, rsp *testbed.Endpoint) error {
			return rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState)
		}},
		{"device fatal", "rx_drop_device_dead", func(w *testbed.World, rsp *testbed.Endpoint) error {
			w.Hosts[1].Dev.EnterFatal(w.Eng.Now(), 1, "test")
			return nil
		}},
	}
	for _, c := range cases {
		for _, srq := range []bool{false, true} {
			name := c.name
			if srq {
				name += " on an SRQ"
			}
			t.Run(name, func(t *testing.T) { udParkedLeave(t, c.name, c.counter, c.leave, srq) })
		}
	}
}

// udParkedLeave parks three datagrams for a UD QP (on its own RQ or an
// SRQ), makes it stop receiving with leave (case name) and checks that
// they are dropped at once under counter and never complete.
func udParkedLeave(t *testing.T, name, counter string, leave func(w *testbed.World, rsp *testbed.Endpoint) error, srq bool) {
	w, eps := udParkWorld(t, testbed.ConnOpts{SRQ: srq})
	rsp := eps[1]
	dev := w.Hosts[1].Dev
	parkThree(t, w, eps)
	before := dev.Counters().Snapshot()
	nw := len(w.Rec.Warnings())
	require.NoError(t, leave(w, rsp))
	require.Equal(t, before[counter]+3, dev.Counters().Get(counter), "dropped at once")
	require.Greater(t, len(w.Rec.Warnings()), nw, "with a warning")
	back := name == "to RESET" || name == "to ERR"
	if back {
		// A new incarnation with a receive posted before the parked
		// frames' time gets none of them.
		if name == "to ERR" {
			require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
		}
		require.NoError(t, rsp.QP.Connect(provider.ConnectAttr{QKey: rsp.QKey}))
		wr := []provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 256)}}}
		var err error
		if srq {
			_, err = rsp.SRQ.PostRecv(wr)
		} else {
			_, err = rsp.QP.PostRecv(wr)
		}
		require.NoError(t, err)
	}
	after := dev.Counters().Snapshot()
	w.Settle(0)
	for _, k := range []string{"rx_drop_no_qp", "rx_drop_qp_state", "rx_drop_device_dead", "rx_ud_no_receive", "resp_cqe_error"} {
		require.Equal(t, after[k], dev.Counters().Get(k), "%s: nothing of the parking fires later", k)
	}
	if back {
		n, err := rsp.RecvCQ.Poll(make([]provider.WC, 4))
		require.NoError(t, err)
		require.Zero(t, n, "no parked datagram reaches the new incarnation")
	}
}

// TestUDParkedDeliveredIntact: datagrams parked behind a doorbell-record
// read, with receives posted while they wait, complete in arrival order
// on the WQEs in posting order, each with its own PSN-independent fields:
// byte count, immediate, source QP, GRH flag and network header type, the
// 40-byte GRH area (20 zero bytes, then the frame's IPv4 header) and the
// payload. One with a wrong Q_Key among them is dropped and takes no
// WQE. The frames handed to the device are overwritten as soon as it
// returns (the parked copies are the device's own).
func TestUDParkedDeliveredIntact(t *testing.T) {
	w, eps := udParkWorld(t, testbed.ConnOpts{})
	req, rsp := eps[0], eps[1]
	dev := w.Hosts[1].Dev
	start := w.Eng.Now()
	w.Eng.At(start.Add(100*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) {
		for i := range 2 {
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(10 + i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*1024, 1024)}}})
			require.NoError(t, err)
		}
	}))
	w.Eng.At(start.Add(150*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) {
		for i := 2; i < 4; i++ {
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(10 + i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*1024, 1024)}}})
			require.NoError(t, err)
		}
	}))
	type dg struct {
		n       int
		qkey    uint32
		withImm bool
	}
	dgs := []dg{{100, rsp.QKey, true}, {1, rsp.QKey, false}, {7, rsp.QKey ^ 1, true}, {0, rsp.QKey, true}, {900, rsp.QKey, false}}
	var ips [][]byte
	var pays [][]byte
	for i, g := range dgs {
		pay := make([]byte, g.n)
		for j := range pay {
			pay[j] = byte(i*31 + j)
		}
		f := udDatagram(t, req.QP.QPN()+uint32(i), rsp.QP.QPN(), g.qkey, 0x100+i, pay, g.withImm, 0xa0000000+uint32(i))
		if g.qkey == rsp.QKey {
			ips = append(ips, append([]byte(nil), f[14:34]...))
			pays = append(pays, pay)
		}
		dev.ReceiveFrame(start.Add(sim.Duration(i)*20*sim.Nanosecond), f)
		for j := range f {
			f[j] = 0xee // the wire's buffer, reused
		}
	}
	require.Zero(t, dev.Counters().Get("rx_drop_bad_qkey"), "parked behind the first")
	w.Settle(0)
	require.Equal(t, uint64(1), dev.Counters().Get("rx_drop_bad_qkey"))
	require.Zero(t, dev.Counters().Get("rx_ud_no_receive"))
	wcs := make([]provider.WC, 8)
	n, err := rsp.RecvCQ.Poll(wcs)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	k := 0
	for i, g := range dgs {
		if g.qkey != rsp.QKey {
			continue
		}
		wc := wcs[k]
		require.Equal(t, provider.WCSuccess, wc.Status)
		require.Equal(t, uint64(10+k), wc.WRID, "WQEs taken in order")
		require.Equal(t, uint32(40+g.n), wc.ByteLen)
		require.Equal(t, req.QP.QPN()+uint32(i), wc.SrcQP)
		require.NotZero(t, wc.Flags&provider.WCFlagGRH)
		require.Equal(t, provider.NetHdrIPv4, wc.NetworkHdr)
		if g.withImm {
			require.NotZero(t, wc.Flags&provider.WCFlagWithImm)
			require.Equal(t, 0xa0000000+uint32(i), wc.Imm)
		} else {
			require.Zero(t, wc.Flags&provider.WCFlagWithImm)
		}
		b := rsp.Buf.Bytes[k*1024:]
		require.Equal(t, make([]byte, 20), b[:20])
		require.Equal(t, ips[k], b[20:40], "datagram %d: its own IPv4 header", i)
		require.True(t, bytes.Equal(pays[k], b[40:40+g.n]), "datagram %d: its payload", i)
		k++
	}
	// Each went through the responder once, with its own PSN.
	var psns []int32
	for _, ev := range w.Rec.Events() {
		if ev.Node == 1 && ev.Name == "responder" && ev.QPN == rsp.QP.QPN() {
			psns = append(psns, ev.PSN)
		}
	}
	require.Equal(t, []int32{0x100, 0x101, 0x103, 0x104}, psns)
}

// TestUDParkedOnSRQ: datagrams of two UD QPs on one SRQ park while the
// SRQ is empty; receives posted to the SRQ while they wait catch every
// one, each QP's in its arrival order.
func TestUDParkedOnSRQ(t *testing.T) {
	w, eps := udParkWorld(t, testbed.ConnOpts{SRQ: true})
	o := testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 64 << 10, RQDepth: 16, UseSRQ: [2]*provider.SRQ{nil, eps[1].SRQ}}
	eps2, err := w.ConnectRC(o)
	require.NoError(t, err)
	w.Settle(0)
	dev := w.Hosts[1].Dev
	start := w.Eng.Now()
	w.Eng.At(start.Add(100*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) {
		for i := range 6 {
			_, err := eps[1].SRQ.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{eps[1].MR.SGE(uint64(i)*256, 256)}}})
			require.NoError(t, err)
		}
	}))
	for i := range 3 {
		for j, e := range [][2]*testbed.Endpoint{eps, eps2} {
			f := udDatagram(t, e[0].QP.QPN(), e[1].QP.QPN(), e[1].QKey, i, []byte{byte(j), byte(i)}, false, 0)
			dev.ReceiveFrame(start.Add(sim.Duration(2*i+j)*20*sim.Nanosecond), f)
		}
	}
	w.Settle(0)
	require.Zero(t, dev.Counters().Get("rx_ud_no_receive"))
	seen := map[uint32]int{}
	for _, cq := range []*provider.CQ{eps[1].RecvCQ, eps2[1].RecvCQ} {
		wcs := make([]provider.WC, 8)
		n, err := cq.Poll(wcs)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		for _, wc := range wcs[:n] {
			require.Equal(t, provider.WCSuccess, wc.Status)
			j := 0
			if wc.QPNum == eps2[1].QP.QPN() {
				j = 1
			}
			b := eps[1].Buf.Bytes[wc.WRID*256+40:]
			require.Equal(t, []byte{byte(j), byte(seen[wc.QPNum])}, b[:2], "QP %#x in order", wc.QPNum)
			seen[wc.QPNum]++
		}
	}
}

// udParkMany runs datagrams for four UD QPs, each parked, with receives
// posted while they wait, and returns the trace.
func udParkMany(t *testing.T) []byte {
	w, eps := udParkWorld(t, testbed.ConnOpts{})
	all := [][2]*testbed.Endpoint{eps}
	for range 3 {
		e, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 64 << 10, RQDepth: 16})
		require.NoError(t, err)
		all = append(all, e)
	}
	w.Settle(0)
	dev := w.Hosts[1].Dev
	start := w.Eng.Now()
	w.Eng.At(start.Add(120*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) {
		for _, e := range all {
			for i := range 4 {
				_, err := e[1].QP.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{e[1].MR.SGE(uint64(i)*512, 512)}}})
				require.NoError(t, err)
			}
		}
	}))
	for i := range 4 {
		for j, e := range all {
			f := udDatagram(t, e[0].QP.QPN(), e[1].QP.QPN(), e[1].QKey, i, make([]byte, 64*(i+1)), i%2 == 1, uint32(i))
			dev.ReceiveFrame(start.Add(sim.Duration(4*i+j)*10*sim.Nanosecond), f)
		}
	}
	w.Settle(0)
	require.Zero(t, dev.Counters().Get("rx_ud_no_receive"))
	for _, e := range all {
		wcs, err := testbed.Wait(e[1].RecvCQ, 4)
		require.NoError(t, err)
		for i, wc := range wcs {
			require.Equal(t, provider.WCSuccess, wc.Status)
			require.Equal(t, uint64(i), wc.WRID)
			require.Equal(t, uint32(40+64*(i+1)), wc.ByteLen)
		}
	}
	// The receive pipeline never goes back in time: each QP's datagrams
	// are through the responder in PSN order, each done no earlier than
	// the one before.
	last := map[uint32]trace.Event{}
	for _, ev := range w.Rec.Events() {
		if ev.Node != 1 || ev.Name != "responder" {
			continue
		}
		if p, ok := last[ev.QPN]; ok {
			require.Greater(t, ev.PSN, p.PSN, "QP %#x", ev.QPN)
			require.GreaterOrEqual(t, ev.End, p.End, "QP %#x PSN %d", ev.QPN, ev.PSN)
		}
		last[ev.QPN] = ev
	}
	require.Len(t, last, 4)
	var b bytes.Buffer
	require.NoError(t, trace.WriteChrome(&b, w.Rec.Events()))
	return b.Bytes()
}

// TestUDParkManyDeterministic: four UD QPs parked at once all complete,
// in order; two runs give byte-identical traces.
func TestUDParkManyDeterministic(t *testing.T) {
	a := udParkMany(t)
	b := udParkMany(t)
	require.True(t, bytes.Equal(a, b), "two runs, two traces")
}

// TestUDParkedCQOverflow: the receive CQ overflows while parked
// datagrams drain: the device neither panics nor hangs, and every
// datagram is accounted for.
func TestUDParkedCQOverflow(t *testing.T) {
	w, eps := udParkWorld(t, testbed.ConnOpts{CQDepth: 1})
	rsp := eps[1]
	dev := w.Hosts[1].Dev
	start := w.Eng.Now()
	const n = 12
	w.Eng.At(start.Add(100*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) {
		for i := range n {
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*256, 256)}}})
			require.NoError(t, err)
		}
	}))
	for i := range n {
		f := udDatagram(t, eps[0].QP.QPN(), rsp.QP.QPN(), rsp.QKey, i, []byte{byte(i)}, false, 0)
		dev.ReceiveFrame(start.Add(sim.Duration(i)*20*sim.Nanosecond), f)
	}
	w.Settle(0)
	require.Zero(t, w.Eng.Pending())
	c := dev.Counters()
	require.Equal(t, uint64(1), c.Get("cq_overrun"))
	require.Equal(t, uint64(n), c.Get("cqes")+c.Get("cqe_dropped_overrun")+c.Get("cq_overrun"), "every datagram has its CQE, written or lost: %v", c.Snapshot())
}

// TestUDParkedSurviveLinkDown: datagrams parked behind a doorbell-record
// read are in the device already: a link that goes down while they wait
// does not lose them (they complete on receives posted meanwhile), while
// one arriving during the outage is dropped at the port and parks behind
// nothing. The port's buffers are handed back as the device returns
// (ReceiveKeptFrame) and reused at once: the parked copies are the
// device's own.
func TestUDParkedSurviveLinkDown(t *testing.T) {
	w, eps := udParkWorld(t, testbed.ConnOpts{})
	req, rsp := eps[0], eps[1]
	dev := w.Hosts[1].Dev
	start := w.Eng.Now()
	w.Eng.At(start.Add(100*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) {
		for i := range 4 {
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*256, 256)}}})
			require.NoError(t, err)
		}
	}))
	for i := range 3 {
		f := udDatagram(t, req.QP.QPN(), rsp.QP.QPN(), rsp.QKey, i, []byte{byte('a' + i), byte('a' + i)}, false, 0)
		spare := dev.ReceiveKeptFrame(start.Add(sim.Duration(i)*40*sim.Nanosecond), f)
		for j := range spare {
			spare[j] = 0xee
		}
	}
	w.SetLink(false)
	dev.ReceiveFrame(start.Add(130*sim.Nanosecond), udDatagram(t, req.QP.QPN(), rsp.QP.QPN(), rsp.QKey, 3, []byte{'z', 'z'}, false, 0))
	require.Equal(t, uint64(1), dev.Counters().Get("rx_drop_link_down"))
	w.Settle(0)
	wcs := make([]provider.WC, 8)
	n, err := rsp.RecvCQ.Poll(wcs)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for i, wc := range wcs[:n] {
		require.Equal(t, provider.WCSuccess, wc.Status)
		require.Equal(t, uint64(i), wc.WRID)
		off := uint64(i)*256 + 40
		require.Equal(t, []byte{byte('a' + i), byte('a' + i)}, rsp.Buf.Bytes[off:off+2])
	}
}

// TestUDParkChurn drives a UD QP whose datagrams park with random
// interleavings of datagram bursts (some with a wrong Q_Key), receives
// posted, the QP to ERR and later back through RESET to RTS (or from
// RTS straight to RESET and back), the link
// down and up, and in some runs the QP destroyed or the device fatal.
// The device must not panic or hang; a datagram completes only on a
// receive of the incarnation it arrived for, and each incarnation's
// receives complete in order with the datagrams in arrival order, each
// with its own payload; the same seed gives the same trace.
func TestUDParkChurn(t *testing.T) {
	for seed := range 40 {
		a := udParkChurn(t, uint64(seed))
		if seed < 3 {
			require.True(t, bytes.Equal(a, udParkChurn(t, uint64(seed))), "seed %d: two runs, two traces", seed)
		}
	}
}

func udParkChurn(t *testing.T, seed uint64) []byte {
	w, eps := udParkWorld(t, testbed.ConnOpts{CQDepth: 256})
	req, rsp := eps[0], eps[1]
	dev := w.Hosts[1].Dev
	rng := seed*0x9e3779b97f4a7c15 + 1
	rnd := func(n int) int {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	inc, seq, posted, dead, inERR := 0, 0, 0, false, false
	start := w.Eng.Now()
	for range 30 {
		at := start.Add(sim.Duration(rnd(4000)) * sim.Nanosecond)
		kind := rnd(20)
		w.Eng.At(at, sim.HandlerFunc(func(now sim.Time) {
			if dead {
				return
			}
			switch {
			case kind < 9: // a burst of datagrams
				if inERR {
					break
				}
				for i := range 1 + rnd(6) {
					qk := rsp.QKey
					if rnd(8) == 0 {
						qk ^= 0x10
					}
					f := udDatagram(t, req.QP.QPN(), rsp.QP.QPN(), qk, seq, []byte{byte(inc), byte(seq), byte(seq >> 8), 0x5a}, rnd(2) == 0, uint32(seq))
					seq++
					dev.ReceiveFrame(now.Add(sim.Duration(i*(10+rnd(40)))*sim.Nanosecond), f)
				}
			case kind < 14: // receives
				if inERR {
					break
				}
				for range 1 + rnd(4) {
					if posted >= 60 {
						break
					}
					wr := provider.RecvWR{WRID: uint64(inc)<<32 | uint64(posted), SGL: []provider.SGE{rsp.MR.SGE(uint64(posted)*1024, 1024)}}
					if _, err := rsp.QP.PostRecv([]provider.RecvWR{wr}); err != nil {
						break
					}
					posted++
				}
			case kind < 16: // to ERR, or back from it
				if !inERR && rnd(2) == 0 {
					require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
					inERR = true
					break
				}
				// Back from ERR, or straight from RTS to RESET.
				require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
				require.NoError(t, rsp.QP.Connect(provider.ConnectAttr{QKey: rsp.QKey}))
				inERR = false
				inc++
			case kind < 18:
				dev.SetLinkState(!dev.LinkUp())
			case kind == 18 && seed%4 == 1:
				require.NoError(t, rsp.QP.Destroy())
				dead = true
			case kind == 19 && seed%4 == 2:
				dev.EnterFatal(now, 1, "test")
				dead = true
			}
		}))
	}
	require.Less(t, w.Settle(2_000_000), 2_000_000, "seed %d: the device went quiet", seed)
	if !dead {
		next := map[int]uint64{} // the next WRID of each incarnation
		lastSeq := map[int]int{} // the last datagram of each
		for {
			wcs := make([]provider.WC, 64)
			n, err := rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			if n == 0 {
				break
			}
			for _, wc := range wcs[:n] {
				if wc.Status != provider.WCSuccess {
					require.Equal(t, provider.WCWRFlushErr, wc.Status, "seed %d", seed)
					continue
				}
				wi := int(wc.WRID >> 32)
				slot := wc.WRID & 0xffffffff
				require.GreaterOrEqual(t, slot, next[wi], "seed %d: incarnation %d's receives in order", seed, wi)
				next[wi] = slot + 1
				b := rsp.Buf.Bytes[slot*1024+40:]
				require.Equal(t, byte(0x5a), b[3], "seed %d: a datagram's payload", seed)
				require.Equal(t, wi, int(b[0]), "seed %d: WRID %#x (incarnation %d) got a datagram of incarnation %d", seed, wc.WRID, wi, b[0])
				s := int(b[1]) | int(b[2])<<8
				if l, ok := lastSeq[wi]; ok {
					require.Greater(t, s, l, "seed %d: datagrams in arrival order", seed)
				}
				lastSeq[wi] = s
				require.Equal(t, uint32(40+4), wc.ByteLen)
				if wc.Flags&provider.WCFlagWithImm != 0 {
					require.Equal(t, uint32(s), wc.Imm)
				}
			}
		}
	}
	var b bytes.Buffer
	require.NoError(t, trace.WriteChrome(&b, w.Rec.Events()))
	return b.Bytes()
}

// TestUDParkFloodIsLinear: 1 MiB of 66-byte datagrams (no payload) parked
// at a QP with no receive, four floods over: every one is accounted for,
// over and over. drain shifted the whole queue down at each frame that
// went on (16 k frames parked: 0.7 s of copying a flood); the cost is
// shown by BenchmarkUDParkFlood, not asserted here.
func TestUDParkFloodIsLinear(t *testing.T) {
	w, eps := udParkWorld(t, testbed.ConnOpts{})
	dev := w.Hosts[1].Dev
	f := udDatagram(t, eps[0].QP.QPN(), eps[1].QP.QPN(), eps[1].QKey, 0, nil, false, 0)
	const n = 20000
	for range 4 {
		udFlood(w, dev, f, n)
	}
	c := dev.Counters()
	full, none := c.Get("rx_ud_park_full"), c.Get("rx_ud_no_receive")
	require.Equal(t, uint64(4*n), full+none)
	require.Equal(t, uint64(4*(1<<20/len(f))), none, "1 MiB of frames parked each flood, the waiting one included")
}

// udFlood delivers n copies of frame 1 ns apart and runs the world idle.
func udFlood(w *testbed.World, dev *device.Device, frame []byte, n int) {
	start := w.Eng.Now()
	for i := range n {
		dev.ReceiveFrame(start.Add(sim.Duration(i)*sim.Nanosecond), frame)
	}
	w.Settle(0)
}

// BenchmarkUDParkFlood: one flood of 20000 64-byte datagrams at a UD QP
// with no receive (1 MiB of them parked, then dropped). Draining used to
// shift the whole queue at every frame: 0.65 s a flood, where it now
// takes about 20 ms (ratios in one run: compare with the commit before
// 0778882's parent).
func BenchmarkUDParkFlood(b *testing.B) {
	w, eps := udParkWorld(b, testbed.ConnOpts{})
	dev := w.Hosts[1].Dev
	f := udDatagram(b, eps[0].QP.QPN(), eps[1].QP.QPN(), eps[1].QKey, 0, nil, false, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		udFlood(w, dev, f, 20000)
	}
}
