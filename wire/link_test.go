package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// rx is one frame a test receiver saw.
type rx struct {
	t     sim.Time
	frame []byte
}

// rxLog records frames (copied: the frame is only valid during the call).
type rxLog struct{ got []rx }

func (r *rxLog) ReceiveFrame(t sim.Time, f []byte) { r.got = append(r.got, rx{t, bytes.Clone(f)}) }

func (r *rxLog) times() []sim.Time {
	var ts []sim.Time
	for _, g := range r.got {
		ts = append(ts, g.t)
	}
	return ts
}

// frame returns an n-byte Ethernet frame whose payload bytes carry tag, so
// tests can tell frames apart. It is not a RoCE frame (EtherType 0x88B5,
// the IEEE local experimental type).
func frame(n int, tag byte) []byte {
	f := make([]byte, n)
	binary.BigEndian.PutUint16(f[12:], 0x88B5)
	for i := EthHeaderLen; i < n; i++ {
		f[i] = tag
	}
	return f
}

// roceFrame builds a minimal IPv4 (or IPv6) / UDP 4791 / BTH frame with the
// given destination QP and payload length; enough for PeekQPN.
func roceFrame(v6 bool, qpn uint32, payload int) []byte {
	ipLen := 20
	et := uint16(0x0800)
	if v6 {
		ipLen, et = 40, 0x86DD
	}
	f := make([]byte, EthHeaderLen+ipLen+8+12+payload+4)
	binary.BigEndian.PutUint16(f[12:], et)
	ip := f[EthHeaderLen:]
	if v6 {
		ip[0] = 0x60
		ip[6] = 17
	} else {
		ip[0] = 0x45
		ip[9] = 17
	}
	udp := ip[ipLen:]
	binary.BigEndian.PutUint16(udp[0:], 0xC000)
	binary.BigEndian.PutUint16(udp[2:], 4791)
	bth := udp[8:]
	bth[0] = 0x0A // RDMA WRITE Only
	binary.BigEndian.PutUint32(bth[4:], qpn&0xFFFFFF)
	return f
}

type env struct {
	eng  *sim.Engine
	rec  *trace.Recorder
	ctr  *trace.Counters
	link *Link
	a, b rxLog
}

func newEnv(t testing.TB, spec Spec, rules ...fault.Rule) *env {
	t.Helper()
	e := &env{eng: sim.NewEngine(), rec: trace.NewRecorder(), ctr: &trace.Counters{}}
	var inj *fault.Injector
	if len(rules) > 0 {
		p := &fault.Plan{Seed: 1, Rules: rules}
		if err := p.Validate(); unsupportedOnly(rules) {
			require.ErrorIs(t, err, fault.ErrInvalidPlan) // the link must still refuse it at run time
		} else {
			require.NoError(t, err)
		}
		inj = fault.NewInjector(p)
	}
	e.link = NewLink(e.eng, spec, e.rec, e.ctr, inj)
	e.link.A().Attach(0, &e.a)
	e.link.B().Attach(1, &e.b)
	return e
}

func TestWireBytesAndFrameTime(t *testing.T) {
	tests := []struct {
		name  string
		rate  sim.BitRate
		n     int
		wire  int
		dur   sim.Duration
		notes string
	}{
		// 60 B + 4 B FCS = 64 B minimum frame; + 8 B preamble/SFD + 12 B
		// IFG = 84 B = 672 bits = 6.72 ns at 100 Gb/s.
		{"min frame 100G", 100 * sim.Gbps, 60, 84, 6720, ""},
		{"runt padded", 100 * sim.Gbps, 20, 84, 6720, "padded to 60 B"},
		// 64 B without FCS: 64 + 4 + 20 = 88 B = 704 bits = 7.04 ns.
		{"64B 100G", 100 * sim.Gbps, 64, 88, 7040, ""},
		// 1000 + 24 = 1024 B = 8192 bits = 81.92 ns.
		{"1000B 100G", 100 * sim.Gbps, 1000, 1024, 81920, ""},
		// 4214 + 24 = 4238 B = 33904 bits = 339.04 ns.
		{"max 100G", 100 * sim.Gbps, EthHeaderLen + DefaultMTU, 4238, 339040, ""},
		// 84 B at 25 Gb/s = 26.88 ns.
		{"min frame 25G", 25 * sim.Gbps, 60, 84, 26880, ""},
		// 84 B at 10 Gb/s = 67.2 ns (the classic 14.88 Mpps line rate).
		{"min frame 10G", 10 * sim.Gbps, 60, 84, 67200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.wire, WireBytes(tc.n))
			require.Equal(t, tc.dur, Spec{Rate: tc.rate}.FrameTime(tc.n))
		})
	}
}

func TestSpec(t *testing.T) {
	d := NewLink(sim.NewEngine(), Spec{}, nil, nil, nil).Spec()
	require.Equal(t, DefaultSpec(), d)
	require.Equal(t, 10*sim.Nanosecond, d.Propagation)

	tests := []struct {
		name string
		spec Spec
		bad  bool
	}{
		{"zero", Spec{}, false},
		{"default", DefaultSpec(), false},
		{"negative rate", Spec{Rate: -1}, true},
		{"negative propagation", Spec{Propagation: -1}, true},
		{"negative mtu", Spec{MTU: -1}, true},
		{"negative reorder window", Spec{ReorderWindow: -1}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if tc.bad {
				require.ErrorIs(t, err, ErrBadSpec)
			} else {
				require.NoError(t, err)
			}
		})
	}

	var s Spec
	require.NoError(t, json.Unmarshal([]byte(`{"rate_bps": 25e9, "propagation_ps": 50000, "mtu": 1500}`), &s))
	require.Equal(t, Spec{Rate: 25 * sim.Gbps, Propagation: 50 * sim.Nanosecond, MTU: 1500}, s)
}

func TestTiming(t *testing.T) {
	e := newEnv(t, Spec{})
	done := e.link.A().Send(1000, frame(60, 1))
	require.Equal(t, sim.Time(1000+6720), done)
	e.eng.Run(0)
	require.Len(t, e.b.got, 1)
	require.Equal(t, sim.Time(1000+6720+10000), e.b.got[0].t)
	require.Equal(t, frame(60, 1), e.b.got[0].frame)
	require.Empty(t, e.a.got)

	// Propagation is the spec's: a 100 m fibre is 500 ns.
	e = newEnv(t, Spec{Propagation: 100 * PropagationPerMeter})
	e.link.B().Send(0, frame(1000, 2))
	e.eng.Run(0)
	require.Equal(t, []sim.Time{81920 + 500000}, e.a.times())
}

func TestQueueing(t *testing.T) {
	e := newEnv(t, Spec{})
	a := e.link.A()
	// Two back-to-back frames at t=0 queue behind each other.
	require.Equal(t, sim.Time(81920), a.Send(0, frame(1000, 1)))
	require.Equal(t, sim.Time(2*81920), a.Send(0, frame(1000, 2)))
	// The other direction is independent (full duplex).
	require.Equal(t, sim.Time(81920), e.link.B().Send(0, frame(1000, 3)))
	// After the queue drains, a frame starts when it is sent.
	require.Equal(t, sim.Time(1_000_000+6720), a.Send(1_000_000, frame(60, 4)))
	e.eng.Run(0)
	require.Equal(t, []sim.Time{81920 + 10000, 2*81920 + 10000, 1_000_000 + 6720 + 10000}, e.b.times())
	require.Equal(t, []sim.Time{81920 + 10000}, e.a.times())

	// A send stamped before the engine's now starts at now.
	e.eng.RunUntil(5_000_000)
	require.Equal(t, sim.Time(5_000_000+6720), a.Send(10, frame(60, 5)))
}

func TestOrdering(t *testing.T) {
	e := newEnv(t, Spec{})
	var sent [][]byte
	for i := range 100 {
		f := frame(60+(i*37)%1400, byte(i))
		sent = append(sent, f)
		e.link.A().Send(sim.Time(i*1000), f)
	}
	e.eng.Run(0)
	require.Len(t, e.b.got, 100)
	for i, g := range e.b.got {
		require.Equal(t, sent[i], g.frame, "frame %d", i)
		if i > 0 {
			require.Greater(t, g.t, e.b.got[i-1].t)
		}
	}
	require.Equal(t, uint64(100), e.ctr.Value(CtrTxFrames))
	require.Equal(t, uint64(100), e.ctr.Value(CtrRxFrames))
	var total uint64
	for _, f := range sent {
		total += uint64(len(f))
	}
	require.Equal(t, total, e.ctr.Value(CtrTxBytes))
	require.Equal(t, total, e.ctr.Value(CtrRxBytes))
}

func TestCallerBufferReuse(t *testing.T) {
	e := newEnv(t, Spec{})
	buf := frame(100, 7)
	e.link.A().Send(0, buf)
	for i := range buf {
		buf[i] = 0xEE // the link copied the frame
	}
	e.eng.Run(0)
	require.Equal(t, frame(100, 7), e.b.got[0].frame)
}

func TestLoopback(t *testing.T) {
	eng := sim.NewEngine()
	ctr := &trace.Counters{}
	l := NewLoopback(eng, Spec{}, nil, ctr, nil)
	require.Same(t, l.A(), l.B())
	var got rxLog
	l.A().Attach(3, &got)
	require.Equal(t, 3, l.A().Node())
	require.Same(t, l, l.A().Link())
	l.A().Send(0, frame(60, 1))
	l.A().Send(0, frame(60, 2))
	eng.Run(0)
	require.Equal(t, []sim.Time{16720, 16720 + 6720}, got.times())
	require.Equal(t, frame(60, 2), got.got[1].frame)
}

// echo sends every frame it receives back out of its port, up to n times:
// a receiver that transmits from inside ReceiveFrame.
type echo struct {
	port *Port
	n    int
	seen int
}

func (e *echo) ReceiveFrame(t sim.Time, f []byte) {
	e.seen++
	if e.seen < e.n {
		f2 := append([]byte(nil), f...)
		f2[EthHeaderLen]++
		e.port.Send(t, f2)
	}
}

func TestReentrantSend(t *testing.T) {
	eng := sim.NewEngine()
	l := NewLink(eng, Spec{}, nil, nil, nil)
	ea, eb := &echo{port: l.A(), n: 50}, &echo{port: l.B(), n: 50}
	l.A().Attach(0, ea)
	l.B().Attach(1, eb)
	l.A().Send(0, frame(60, 0))
	eng.Run(0)
	// B answers its first 49 frames, A answers all 49 it gets: 99 hops of
	// 16.72 ns each, every one sent from inside ReceiveFrame but the first.
	require.Equal(t, 49, ea.seen)
	require.Equal(t, 50, eb.seen)
	require.Equal(t, sim.Time(99*16720), eng.Now())
	require.Equal(t, uint64(99), l.Counters().Value(CtrRxFrames))
}

func TestBadFrames(t *testing.T) {
	tests := []struct {
		name string
		n    int
		ctr  string
	}{
		{"runt", EthHeaderLen - 1, CtrDropRunt.String()},
		{"empty", 0, CtrDropRunt.String()},
		{"oversize", EthHeaderLen + DefaultMTU + 1, CtrDropOversize.String()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Spec{})
			tapped := 0
			e.link.AddTap(func(sim.Time, []byte) { tapped++ })
			require.Equal(t, sim.Time(500), e.link.A().Send(500, make([]byte, tc.n)))
			e.eng.Run(0)
			require.Empty(t, e.b.got)
			require.Zero(t, tapped)
			require.Equal(t, uint64(1), e.ctr.Get(tc.ctr))
			require.Zero(t, e.ctr.Value(CtrTxFrames))
			w := e.rec.Warnings()
			require.Len(t, w, 1)
			require.Equal(t, tc.ctr, w[0].Name)
			// The link is still idle: the next frame is not delayed.
			require.Equal(t, sim.Time(1000+6720), e.link.A().Send(1000, frame(60, 1)))
		})
	}
	// The exact MTU passes.
	e := newEnv(t, Spec{MTU: 1500})
	e.link.A().Send(0, frame(EthHeaderLen+1500, 1))
	e.link.A().Send(0, frame(EthHeaderLen+1501, 1))
	e.eng.Run(0)
	require.Len(t, e.b.got, 1)
	require.Equal(t, uint64(1), e.ctr.Value(CtrDropOversize))
}

func TestNoReceiver(t *testing.T) {
	eng := sim.NewEngine()
	ctr := &trace.Counters{}
	rec := trace.NewRecorder()
	l := NewLink(eng, Spec{}, rec, ctr, nil)
	l.A().Send(0, frame(60, 1))
	eng.Run(0)
	require.Equal(t, uint64(1), ctr.Value(CtrDropNoReceiver))
	require.Zero(t, ctr.Value(CtrRxFrames))
	require.Len(t, rec.Warnings(), 1)
}

func TestTraceAndTap(t *testing.T) {
	e := newEnv(t, Spec{})
	type tap struct {
		t sim.Time
		f []byte
	}
	var taps []tap
	e.link.AddTap(func(t sim.Time, f []byte) { taps = append(taps, tap{t, bytes.Clone(f)}) })
	f1 := roceFrame(false, 0x123456, 64)
	e.link.A().SendFlow(0, f1, 77)
	e.link.A().Send(0, frame(60, 2))
	e.link.B().Send(5, frame(60, 3))
	e.eng.Run(0)
	n1 := len(f1)
	d1 := Spec{}.FrameTime(n1)
	require.Equal(t, []tap{{0, f1}, {sim.Time(d1), frame(60, 2)}, {5, frame(60, 3)}}, taps)
	require.Equal(t, []trace.Event{
		{Name: "wire", Component: "wire", Node: 0, Start: 0, End: sim.Time(d1 + DefaultPropagation), Bytes: n1, QPN: 0x123456, Flow: 77, PSN: 0}, // the BTH's PSN
		{Name: "wire", Component: "wire", Node: 0, Start: sim.Time(d1), End: sim.Time(d1 + 6720 + DefaultPropagation), Bytes: 60, PSN: trace.NoPSN},
		{Name: "wire", Component: "wire", Node: 1, Start: 5, End: 5 + 6720 + sim.Time(DefaultPropagation), Bytes: 60, PSN: trace.NoPSN},
	}, e.rec.Events())
}

func TestPeekQPN(t *testing.T) {
	v4 := roceFrame(false, 0xABCDEF, 0)
	v6 := roceFrame(true, 0x000011, 8)
	otherPort := roceFrame(false, 5, 0)
	binary.BigEndian.PutUint16(otherPort[EthHeaderLen+20+2:], 4790)
	tcp := roceFrame(false, 5, 0)
	tcp[EthHeaderLen+9] = 6
	badIHL := roceFrame(false, 5, 0)
	badIHL[EthHeaderLen] = 0x44
	withOpts := append(roceFrame(false, 0, 0), 0, 0, 0, 0)
	withOpts[EthHeaderLen] = 0x46 // 24-byte IPv4 header
	copy(withOpts[EthHeaderLen+24:], roceFrame(false, 0x42, 0)[EthHeaderLen+20:])
	tests := []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"ipv4", v4, 0xABCDEF},
		{"ipv6", v6, 0x11},
		{"ipv4 options", withOpts, 0x42},
		{"not udp 4791", otherPort, 0},
		{"tcp", tcp, 0},
		{"bad ihl", badIHL, 0},
		{"other ethertype", frame(100, 0), 0},
		{"truncated bth", v4[:EthHeaderLen+20+8+11], 0},
		{"truncated ip", v6[:EthHeaderLen+39], 0},
		{"runt", v4[:10], 0},
		{"nil", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, PeekQPN(tc.frame))
		})
	}
}

func BenchmarkSendDeliver(b *testing.B) {
	eng := sim.NewEngine()
	l := NewLink(eng, Spec{}, nil, &trace.Counters{}, nil)
	var sink discard
	l.B().Attach(1, &sink)
	f := roceFrame(false, 7, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		l.A().Send(eng.Now(), f)
		eng.Step()
	}
	if sink.n == 0 {
		b.Fatal("nothing delivered")
	}
}

type discard struct{ n int }

func (d *discard) ReceiveFrame(sim.Time, []byte) { d.n++ }

func TestSendDeliverAllocs(t *testing.T) {
	eng := sim.NewEngine()
	inj := fault.NewInjector(&fault.Plan{Rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Nth: 1 << 40}}})
	l := NewLink(eng, Spec{}, nil, &trace.Counters{}, inj)
	var sink discard
	l.B().Attach(1, &sink)
	f := roceFrame(false, 7, 256)
	step := func() {
		l.A().Send(eng.Now(), f)
		l.A().Send(eng.Now(), f) // two in flight: the pool holds more than one
		eng.Run(0)
	}
	step() // warm the pool and the counter map
	require.Zero(t, testing.AllocsPerRun(200, step))
	require.Equal(t, 2*(1+1+200), sink.n) // warm-up, AllocsPerRun's own warm-up, 200 runs
}

type failingWriter struct{ calls int }

func (w *failingWriter) WriteFrame(sim.Time, []byte) error {
	w.calls++
	return errors.New("disk full")
}

func TestAddWriterErrors(t *testing.T) {
	e := newEnv(t, Spec{})
	var w failingWriter
	e.link.AddWriter(&w)
	sendN(e, 3)
	require.Equal(t, 3, w.calls)
	require.Len(t, e.b.got, 3, "capture errors do not stop the link")
	require.Equal(t, uint64(3), e.ctr.Value(CtrTapErrors))
	require.Equal(t, []string{CtrTapErrors.String()}, warnNames(e.rec))
}
