package host

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// access is one call on the fake port.
type access struct {
	read bool
	t    sim.Time
	off  uint64
	data string // bytes written
	qpn  uint32
	flow uint64
}

// fakePort records what leaves the CPU. Reads answer readVal, their
// completion readLat after they were issued.
type fakePort struct {
	got     []access
	readVal uint32
	readLat sim.Duration
}

func (p *fakePort) PostedWrite(t sim.Time, off uint64, b []byte) {
	p.got = append(p.got, access{t: t, off: off, data: string(b)})
}

func (p *fakePort) Read32(t sim.Time, off uint64) (uint32, sim.Time) {
	p.got = append(p.got, access{read: true, t: t, off: off})
	return p.readVal, t.Add(p.readLat)
}

// flowPort is a fakePort that takes the CPU's labels (pcie.FlowPort).
type flowPort struct{ fakePort }

func (p *flowPort) PostedWriteFlow(t sim.Time, off uint64, b []byte, qpn uint32, flow uint64) {
	p.got = append(p.got, access{t: t, off: off, data: string(b), qpn: qpn, flow: flow})
}

var _ pcie.FlowPort = (*flowPort)(nil)

const (
	uar0 = DefaultFirstUAR * mlx5.UARPageSize // BAR0 offset of the first UAR page
	bf0  = uar0 + mlx5.UARBFRegOffset         // bfreg 0, buffer 0
	ns   = sim.Nanosecond
)

// le is the memory image of v (what Store64(off, v) puts on the bus).
func le(v uint64) string { return string(binary.LittleEndian.AppendUint64(nil, v)) }

// ctrl is the first 8 bytes of a WQE's ctrl segment (wqe index idx, qpn,
// ds) as the provider stores them: their little-endian load.
func ctrl(qpn uint32, idx uint16, ds uint8) uint64 {
	var c [mlx5.CtrlSegSize]byte
	mlx5.CtrlSeg(c[:]).Encode(&mlx5.CtrlFields{WQEIndex: idx, Opcode: mlx5.OpRDMAWrite, QPN: qpn, DS: ds})
	return binary.LittleEndian.Uint64(c[:8])
}

type hostRig struct {
	eng  *sim.Engine
	rec  *trace.Recorder
	ctr  *trace.Counters
	port *flowPort
	cpu  *CPU
}

func newHostRig(t testing.TB, mut func(*Config)) *hostRig {
	t.Helper()
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	r := &hostRig{eng: sim.NewEngine(), rec: trace.NewRecorder(), ctr: &trace.Counters{}, port: &flowPort{fakePort{readVal: 0x1234, readLat: 500 * ns}}}
	r.cpu = New(r.eng, r.rec, r.ctr, 0, r.port, cfg)
	return r
}

func (r *hostRig) stages(name string) []trace.Event {
	var out []trace.Event
	for _, e := range r.rec.Events() {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// TestPostedWrites checks the posted writes (and reads) that leave the CPU
// — offsets, bytes, times, labels — for each rule of the WC buffer.
func TestPostedWrites(t *testing.T) {
	line := make([]byte, 64)
	binary.LittleEndian.PutUint64(line, ctrl(0x15, 3, 4))
	for i := 8; i < 64; i++ {
		line[i] = byte(i)
	}
	const flow15 = 0x15<<16 | 3
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		ops  func(r *hostRig)
		want []access
		ctr  map[string]uint64
		now  sim.Time // the host clock afterwards
	}{
		{
			name: "a full line leaves at its last store, without a fence",
			ops: func(r *hostRig) {
				for i := 0; i < 64; i += 8 {
					r.cpu.Store64(bf0+uint64(i), binary.LittleEndian.Uint64(line[i:]))
				}
			},
			want: []access{{t: 7 * sim.Time(ns), off: bf0, data: string(line), qpn: 0x15, flow: flow15}},
			now:  8 * sim.Time(ns),
		},
		{
			name: "a fence sends partial lines, one MWr per contiguous run",
			ops: func(r *hostRig) {
				off := uint64(bf0 + 256 + 64) // bfreg 0 buffer 1, second line
				r.cpu.Store64(off+0, 1)
				r.cpu.Store64(off+8, 2)
				r.cpu.Store32(off+20, 3)
				r.cpu.Store64(off+56, 4)
				r.cpu.Flush()
			},
			want: []access{
				{t: 4 * sim.Time(ns), off: bf0 + 320, data: le(1) + le(2)},
				{t: 4 * sim.Time(ns), off: bf0 + 340, data: "\x03\x00\x00\x00"},
				{t: 4 * sim.Time(ns), off: bf0 + 376, data: le(4)},
			},
			now: 4 * sim.Time(ns),
		},
		{
			name: "a new line when all lines are busy evicts the oldest",
			mut:  func(c *Config) { c.WCLines = 2 },
			ops: func(r *hostRig) {
				r.cpu.Store64(uar0+mlx5.UARCQArmOffset, 1)
				r.cpu.Store64(bf0+0x48, 2)
				r.cpu.Store64(bf0+512+0x50, 3) // bfreg 1: a third line
				r.cpu.Store64(bf0+512+0x58, 4) // merges: no eviction
				r.cpu.Flush()
			},
			want: []access{
				{t: 2 * sim.Time(ns), off: uar0 + mlx5.UARCQArmOffset, data: le(1)},
				{t: 4 * sim.Time(ns), off: bf0 + 0x48, data: le(2)},
				{t: 4 * sim.Time(ns), off: bf0 + 512 + 0x50, data: le(3) + le(4)},
			},
			ctr: map[string]uint64{"wc_evict": 1},
			now: 4 * sim.Time(ns),
		},
		{
			name: "an unfenced line drains by itself WCDrain after its first store",
			ops: func(r *hostRig) {
				r.cpu.Store64(bf0+512, ctrl(9, 1, 2)) // a doorbell on bfreg 1, no fence
				r.eng.Advance(2 * sim.Microsecond)
			},
			want: []access{{t: sim.Time(sim.Microsecond), off: bf0 + 512, data: le(ctrl(9, 1, 2)), qpn: 9, flow: 9<<16 | 1}},
			ctr:  map[string]uint64{"wc_late_drain": 1},
			now:  sim.Time(ns + 2*sim.Microsecond),
		},
		{
			name: "an uncached store drains the WC buffer first",
			ops: func(r *hostRig) {
				r.cpu.Store64(uar0+mlx5.UARCQArmOffset, 1)
				r.cpu.Store32(mlx5.InitSegCmdDbell, 5)
			},
			want: []access{
				{t: sim.Time(ns), off: uar0 + mlx5.UARCQArmOffset, data: le(1)},
				{t: sim.Time(ns), off: mlx5.InitSegCmdDbell, data: "\x05\x00\x00\x00"},
			},
			now: sim.Time(ns + DefaultUCCost),
		},
		{
			name: "a load drains the WC buffer, then waits for its completion",
			ops: func(r *hostRig) {
				r.cpu.Store64(bf0, ctrl(7, 2, 2))
				require.Equal(t, uint32(0x1234), r.cpu.Load32(mlx5.InitSegFWRev))
			},
			want: []access{
				{t: sim.Time(ns), off: bf0, data: le(ctrl(7, 2, 2)), qpn: 7, flow: 7<<16 | 2},
				{read: true, t: sim.Time(ns), off: mlx5.InitSegFWRev},
			},
			now: sim.Time(ns + 500*ns),
		},
		{
			name: "uncached UAR pages: every store is its own write",
			mut:  func(c *Config) { c.UARNonCached = true },
			ops: func(r *hostRig) {
				r.cpu.Store64(bf0, ctrl(3, 0, 1))
				r.cpu.Store64(bf0+8, 6)
			},
			want: []access{
				{t: 0, off: bf0, data: le(ctrl(3, 0, 1)), qpn: 3, flow: 3 << 16},
				// The first store's post closed when it was issued: the
				// second starts a post of its own, not yet labelled.
				{t: sim.Time(DefaultUCCost), off: bf0 + 8, data: le(6)},
			},
			now: sim.Time(2 * DefaultUCCost),
		},
		{
			name: "a misaligned store is dropped",
			ops: func(r *hostRig) {
				r.cpu.Store64(bf0+4, 1)
				r.cpu.Flush()
			},
			ctr: map[string]uint64{"bar_misaligned_store": 1},
			now: sim.Time(ns),
		},
		{
			name: "StoreLines is Flush, the stores, Flush",
			ops: func(r *hostRig) {
				r.cpu.Store64(uar0+mlx5.UARCQArmOffset, 1) // pending: the first Flush sends it
				r.cpu.StoreLines(bf0, line, nil)
			},
			want: []access{
				{t: sim.Time(ns), off: uar0 + mlx5.UARCQArmOffset, data: le(1)},
				{t: 8 * sim.Time(ns), off: bf0, data: string(line), qpn: 0x15, flow: flow15},
			},
			now: 9 * sim.Time(ns),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newHostRig(t, tc.mut)
			tc.ops(r)
			require.Equal(t, tc.want, r.port.got)
			for name, v := range tc.ctr {
				require.Equal(t, v, r.ctr.Get(name), name)
			}
			require.Equal(t, tc.now, r.eng.Now())
		})
	}
}

// A port that is not a FlowPort gets plain PostedWrites.
func TestPlainPort(t *testing.T) {
	eng := sim.NewEngine()
	p := &fakePort{}
	c := New(eng, nil, nil, 0, p, DefaultConfig())
	c.Store64(bf0, ctrl(7, 2, 2))
	c.Flush()
	require.Equal(t, []access{{t: sim.Time(ns), off: bf0, data: le(ctrl(7, 2, 2))}}, p.got)
}

func TestPostStages(t *testing.T) {
	r := newHostRig(t, nil)
	r.cpu.Store64(bf0, ctrl(7, 2, 2)) // a doorbell
	r.cpu.Flush()
	for i := 0; i < 64; i += 8 { // a BlueFlame line on buffer 1
		r.cpu.Store64(bf0+256+uint64(i), ctrl(7, 3, 4))
	}
	r.cpu.Flush()
	db := r.stages("doorbell_mmio")
	require.Len(t, db, 1)
	require.Equal(t, trace.Event{Name: "doorbell_mmio", Component: "bar", Start: 0, End: sim.Time(ns), Bytes: 8, QPN: 7, Flow: 7<<16 | 2, PSN: trace.NoPSN}, db[0])
	bf := r.stages("bf_mmio")
	require.Len(t, bf, 1)
	require.Equal(t, 64, bf[0].Bytes)
	require.Equal(t, sim.Time(ns), bf[0].Start)
	require.Equal(t, sim.Time(9*ns), bf[0].End)
	fl := r.stages("wc_flush")
	require.Len(t, fl, 2)
	require.Equal(t, "fence", fl[0].Detail)
	require.Equal(t, "full", fl[1].Detail)
}

func TestWork(t *testing.T) {
	for _, tc := range []struct {
		stage string
		bytes int
		cost  sim.Duration
	}{
		{"wqe_build", 48, 15*ns + 3*ns},
		{"wqe_build", 65, 15*ns + 2*3*ns},
		{"dbr_update", 4, 2 * ns},
		{"poll", 64, 10 * ns},
		{"req_notify", 8, 0},
		{"get_cq_event", 0, 0},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			r := newHostRig(t, nil)
			r.eng.Advance(100 * ns)
			r.cpu.Work(tc.stage, 0x42, tc.bytes)
			require.Equal(t, sim.Time(100*ns+tc.cost), r.eng.Now())
			ev := r.stages(tc.stage)
			require.Len(t, ev, 1)
			require.Equal(t, "provider", ev[0].Component)
			require.Equal(t, sim.Time(100*ns), ev[0].Start)
			require.Equal(t, uint32(0x42), ev[0].QPN)
			require.Equal(t, tc.bytes, ev[0].Bytes)
		})
	}
}

// A wc.buffer rule acts on the line before its bytes leave.
func TestWCFaults(t *testing.T) {
	for _, tc := range []struct {
		a    fault.Action
		want int // posted writes of the doorbell's line
	}{
		{fault.Drop, 0},
		{fault.Tear, 1},
		{fault.Duplicate, 2},
		{fault.Corrupt, 1},
	} {
		t.Run(tc.a.String(), func(t *testing.T) {
			r := newHostRig(t, nil)
			p := &fault.Plan{Seed: 1, Rules: []fault.Rule{{Point: fault.WCBuffer, Action: tc.a, Nth: 1}}}
			require.NoError(t, p.Validate())
			r.cpu.SetFaults(fault.NewInjector(p))
			r.cpu.Store64(bf0, ctrl(7, 2, 2))
			r.cpu.Flush()
			require.Len(t, r.port.got, tc.want)
			require.Equal(t, uint64(1), r.ctr.Value(CtrFaultWCLine))
			if tc.a == fault.Tear {
				require.Len(t, r.port.got[0].data, 7, "the line loses at least a byte")
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	require.NoError(t, Config{}.Validate(), "zero values get defaults")
	for _, tc := range []struct {
		name string
		mut  func(*Config)
	}{
		{"too many WC lines", func(c *Config) { c.WCLines = 65 }},
		{"bf_reg_size 100", func(c *Config) { c.BFRegSize = 100 }},
		{"negative UARs", func(c *Config) { c.NumUARs = -1 }},
		{"negative store cost", func(c *Config) { c.StoreCost = -1 }},
		{"negative work cost", func(c *Config) { c.PollCQE = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mut(&c)
			require.ErrorIs(t, c.Validate(), ErrConfig)
			require.Panics(t, func() { New(sim.NewEngine(), nil, nil, 0, &fakePort{}, c) })
		})
	}
}

type nopPort struct{}

func (nopPort) PostedWrite(sim.Time, uint64, []byte)           {}
func (nopPort) Read32(t sim.Time, _ uint64) (uint32, sim.Time) { return 0, t }

func TestZeroAllocs(t *testing.T) {
	eng := sim.NewEngine()
	c := New(eng, nil, nil, 0, nopPort{}, DefaultConfig())
	line := make([]byte, 64)
	post := func() {
		c.StoreLines(bf0, line, nil)
		c.Store64(bf0+256, 1)
		c.Flush()
		c.Work("wqe_build", 1, 48)
		eng.Advance(2 * sim.Microsecond)
	}
	post()
	require.Zero(t, testing.AllocsPerRun(200, post))
}

// TestStoreLinesMatchesStores checks StoreLines' one-pass line store
// against Flush, eight Store64s and Flush, event for event: the posted
// writes, the trace, the counters, the clock, with device events falling
// between the stores and after, on every BF buffer and with the configs
// that take the store-by-store path (tiny WC drain, uncached UARs).
func TestStoreLinesMatchesStores(t *testing.T) {
	muts := map[string]func(*Config){
		"default":   nil,
		"drain 5ns": func(c *Config) { c.WCDrain = 5 * ns },
		"uncached":  func(c *Config) { c.UARNonCached = true },
		"slow":      func(c *Config) { c.StoreCost = 3 * ns },
	}
	for name, mut := range muts {
		t.Run(name, func(t *testing.T) {
			var rigs [2]*hostRig
			for k := range rigs {
				r := newHostRig(t, mut)
				rigs[k] = r
				for b := uint64(0); b < 8; b++ {
					off := bf0 + b*256
					if b >= 4 {
						off = bf0 + b*256 + 8 // not line-aligned: the general path
					}
					var l [64]byte
					for i := range l {
						l[i] = byte(int(b)*64 + i)
					}
					binary.BigEndian.PutUint32(l[4:8], uint32(0x20+b)<<8|4)
					// a device event between the stores, one at the last store
					r.eng.At(r.eng.Now().Add(3*ns), sim.HandlerFunc(func(now sim.Time) {
						r.rec.Stage(1, "dev", "tick", now, now, 0, 0, 0, 0)
					}))
					r.eng.At(r.eng.Now().Add(8*ns), sim.HandlerFunc(func(now sim.Time) {
						r.rec.Stage(1, "dev", "tock", now, now, 0, 0, 0, 0)
					}))
					if k == 0 {
						r.cpu.StoreLines(off, l[:], nil)
					} else {
						r.cpu.Flush()
						for i := 0; i < 64; i += 8 {
							r.cpu.Store64(off+uint64(i), binary.LittleEndian.Uint64(l[i:]))
						}
						r.cpu.Flush()
					}
					r.eng.Advance(sim.Duration(b) * ns)
				}
				r.eng.Advance(2 * sim.Microsecond)
			}
			require.NotEmpty(t, rigs[0].port.got)
			require.Equal(t, rigs[1].port.got, rigs[0].port.got)
			require.Equal(t, rigs[1].rec.Events(), rigs[0].rec.Events())
			require.Equal(t, rigs[1].ctr.Snapshot(), rigs[0].ctr.Snapshot())
			require.Equal(t, rigs[1].eng.Now(), rigs[0].eng.Now())
		})
	}
}

// TestActiveLineCount: the count of active WC lines the fast paths read
// (CPU.nwc) is the number of active lines after every store, line store,
// flush and drain, with and without WC-buffer faults, under eviction
// pressure (more lines in flight than the buffer has).
func TestActiveLineCount(t *testing.T) {
	count := func(c *CPU) int {
		n := 0
		for i := range c.wc {
			if c.wc[i].active {
				n++
			}
		}
		return n
	}
	for _, a := range []fault.Action{fault.None, fault.Drop, fault.Tear, fault.Duplicate, fault.Delay, fault.Reorder} {
		t.Run(a.String(), func(t *testing.T) {
			r := newHostRig(t, func(c *Config) { c.WCDrain = 40 * ns })
			if a != fault.None {
				rule := fault.Rule{Point: fault.WCBuffer, Action: a, Prob: 0.3}
				if a == fault.Delay {
					rule.Delay = 20 * ns
				}
				p := &fault.Plan{Seed: 3, Rules: []fault.Rule{rule}}
				require.NoError(t, p.Validate())
				r.cpu.SetFaults(fault.NewInjector(p))
			}
			rnd := rand.New(rand.NewPCG(uint64(a), 9))
			var line [64]byte
			for i := 0; i < 3000; i++ {
				off := bf0 + uint64(rnd.IntN(64))*64 + uint64(rnd.IntN(8))*8
				switch rnd.IntN(5) {
				case 0:
					r.cpu.Store64(off, rnd.Uint64())
				case 1:
					r.cpu.Store32(off, rnd.Uint32())
				case 2:
					r.cpu.StoreLines(off&^63, line[:], nil)
				case 3:
					r.cpu.Flush()
				default:
					r.eng.Advance(sim.Duration(rnd.IntN(60)) * ns)
				}
				if got, want := r.cpu.nwc, count(r.cpu); got != want {
					t.Fatalf("op %d: nwc %d, %d lines active", i, got, want)
				}
			}
		})
	}
}
