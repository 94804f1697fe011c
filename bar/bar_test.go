package bar

import (
	"encoding/binary"
	"github.com/softnic/softnic/env"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// call is one Handler call as recorded by recHandler.
type call struct {
	kind  string // "db", "bf", "arm", "cmd", "eq"
	t     sim.Time
	uar   uint32
	bfreg int
	data  []byte
	arm   bool
}

type recHandler struct{ calls []call }

func (h *recHandler) Doorbell(t sim.Time, uar uint32, bfreg int, ctrl [8]byte) {
	h.calls = append(h.calls, call{kind: "db", t: t, uar: uar, bfreg: bfreg, data: ctrl[:]})
}

func (h *recHandler) BlueFlame(t sim.Time, uar uint32, bfreg int, wqe []byte) {
	h.calls = append(h.calls, call{kind: "bf", t: t, uar: uar, bfreg: bfreg, data: append([]byte(nil), wqe...)})
}

func (h *recHandler) CQArm(t sim.Time, uar uint32, db [8]byte) {
	h.calls = append(h.calls, call{kind: "arm", t: t, uar: uar, data: db[:]})
}

func (h *recHandler) CmdDoorbell(t sim.Time, slots uint32) {
	h.calls = append(h.calls, call{kind: "cmd", t: t, data: binary.BigEndian.AppendUint32(nil, slots)})
}

func (h *recHandler) EQDoorbell(t sim.Time, uar uint32, arm bool, db [4]byte) {
	h.calls = append(h.calls, call{kind: "eq", t: t, uar: uar, arm: arm, data: db[:]})
}

type rig struct {
	eng  *sim.Engine
	link *pcie.Link
	h    *recHandler
	rec  *trace.Recorder
	ctr  *trace.Counters
	b    *BAR0
	m    *host.CPU // the CPU in front of b: the tests store through it
}

// hostFor is the default host CPU in front of a BAR0 configured cfg.
func hostFor(cfg Config) host.Config {
	hc := host.DefaultConfig()
	hc.FirstUAR, hc.NumUARs, hc.BFRegSize = cfg.FirstUAR, cfg.NumUARs, cfg.BFRegSize
	return hc
}

// newRig is BAR0 configured by mut behind a host CPU configured by hmut
// (nil: defaults), on one engine, recorder and counter set.
func newRig(t testing.TB, mut func(*Config), hmut ...func(*host.Config)) *rig {
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	r := &rig{eng: sim.NewEngine(), link: pcie.NewLink(pcie.Gen3x8()), h: &recHandler{}, rec: trace.NewRecorder(), ctr: &trace.Counters{}}
	r.b = New(env.Env{Eng: r.eng, Rec: r.rec, Ctr: r.ctr}, r.link, r.h, cfg)
	hc := hostFor(r.b.Config())
	for _, f := range hmut {
		f(&hc)
	}
	r.m = host.New(r.eng, r.rec, r.ctr, 0, r.b, hc)
	return r
}

// settle runs the device until every MMIO in flight has arrived (and any
// timers up to 5 µs have fired).
func (r *rig) settle() { r.eng.Advance(5 * sim.Microsecond) }

func (r *rig) mwrs() int { return r.link.Totals().HostMWr.MWr }

func (r *rig) stages(name string) []trace.Event {
	var out []trace.Event
	for _, e := range r.rec.Events() {
		if e.Name == name && e.Level == trace.Info {
			out = append(out, e)
		}
	}
	return out
}

// be32 reads a register: Load32 returns its little-endian memory image.
func (r *rig) be32(off uint64) uint32 { return bits.ReverseBytes32(r.m.Load32(off)) }

// be32Store writes a BE32 register value as a driver's iowrite32be does.
func (r *rig) be32Store(off uint64, v uint32) { r.m.Store32(off, bits.ReverseBytes32(v)) }

// wqe builds a send WQE of ds octowords, padded to whole 64-byte lines the
// way libmlx5's BlueFlame copy sends it.
func wqe(qpn uint32, idx uint16, ds int) []byte {
	n := (ds*16 + 63) &^ 63
	w := make([]byte, n)
	mlx5.CtrlSeg(w).Encode(&mlx5.CtrlFields{WQEIndex: idx, Opcode: mlx5.OpRDMAWrite, QPN: qpn, DS: uint8(ds), FMCESE: mlx5.CECQUpdate})
	for i := 16; i < n; i++ {
		w[i] = byte(i)
	}
	return w
}

// copyBF stores w with ascending 8-byte stores at off (libmlx5's BF copy).
func (r *rig) copyBF(off uint64, w []byte) {
	for i := 0; i < len(w); i += 8 {
		r.m.Store64(off+uint64(i), binary.LittleEndian.Uint64(w[i:]))
	}
}

func (r *rig) bfOff(uar uint32, k, buf int) uint64 {
	return r.b.BFRegOffset(uar, k) + uint64(buf*r.b.Config().BFRegSize/2)
}

func TestInitSegment(t *testing.T) {
	r := newRig(t, nil)
	cfg := r.b.Config()
	require.Equal(t, uint32(35)<<16|16, r.be32(mlx5.InitSegFWRev))
	cmdif := r.be32(mlx5.InitSegCmdifRevFW)
	require.Equal(t, uint32(mlx5.CmdifRev), cmdif>>16)
	require.Equal(t, uint32(1012), cmdif&0xffff)
	require.NotZero(t, r.be32(mlx5.InitSegInitializing)&mlx5.InitializingBit)

	// The bit clears InitDelay after reset, not before.
	r.eng.RunUntil(sim.Time(cfg.InitDelay) - 2*sim.Time(sim.Microsecond))
	require.NotZero(t, r.be32(mlx5.InitSegInitializing)&mlx5.InitializingBit)
	polls := 0
	for r.be32(mlx5.InitSegInitializing)&mlx5.InitializingBit != 0 {
		polls++
		require.Less(t, polls, 100)
	}
	require.GreaterOrEqual(t, r.eng.Now(), sim.Time(cfg.InitDelay))

	// Command-queue address: h then l, read back with the queue geometry.
	r.be32Store(mlx5.InitSegCmdqAddrH, 0x12)
	r.be32Store(mlx5.InitSegCmdqAddrLSz, 0x3456_7000)
	require.Equal(t, uint32(0x12), r.be32(mlx5.InitSegCmdqAddrH))
	require.Equal(t, uint32(0x3456_7000|logCmdqSize<<4|logCmdqStride), r.be32(mlx5.InitSegCmdqAddrLSz))
	// nic_interface write (state 1 = disabled) reads back in [10:8].
	r.be32Store(mlx5.InitSegCmdqAddrLSz, 1<<8)
	require.Equal(t, uint32(1), r.be32(mlx5.InitSegCmdqAddrLSz)>>8&7)

	// Health: fw_ver in the health buffer, zero syndrome, counter advancing.
	require.Equal(t, uint32(16)<<24|35<<16|1012, r.be32(mlx5.InitSegHealth+0x30))
	require.Zero(t, r.be32(mlx5.InitSegHealth+0x3c))
	h0 := r.be32(mlx5.InitSegHealthCount)
	r.eng.Advance(3 * cfg.HealthTick)
	require.Greater(t, r.be32(mlx5.InitSegHealthCount), h0)

	// The internal timer counts core-clock ticks (1 GHz: ns) of virtual
	// time; each read samples half a round trip after it is issued.
	l0, n0 := r.be32(mlx5.InitSegTimerL), r.eng.Now()
	r.eng.Advance(sim.Microsecond)
	l1, n1 := r.be32(mlx5.InitSegTimerL), r.eng.Now()
	require.InDelta(t, float64(n1-n0)/1000, float64(l1-l0), 1)
	require.Zero(t, r.be32(mlx5.InitSegTimerH))
	require.Equal(t, uint32(r.eng.Now()/sim.Time(sim.Second)), r.be32(0x1040))

	// A second reset sets the bit again.
	r.b.Reset()
	require.NotZero(t, r.be32(mlx5.InitSegInitializing)&mlx5.InitializingBit)
	r.eng.Advance(cfg.InitDelay)
	require.Zero(t, r.be32(mlx5.InitSegInitializing)&mlx5.InitializingBit)
	require.Empty(t, r.rec.Warnings())
}

func TestControlDoorbells(t *testing.T) {
	r := newRig(t, nil)
	r.be32Store(mlx5.InitSegCmdDbell, 1<<3)
	uar := r.b.UAROffset(r.b.Config().FirstUAR + 1)
	r.be32Store(uar+mlx5.UAREQArmOffset, 5<<24|7)
	r.be32Store(uar+mlx5.UAREQUpdateOffset, 5<<24|8)
	r.m.Flush()
	r.settle()
	require.Len(t, r.h.calls, 3)
	require.Equal(t, call{kind: "cmd", t: r.h.calls[0].t, data: []byte{0, 0, 0, 8}}, r.h.calls[0])
	require.Equal(t, "eq", r.h.calls[1].kind)
	require.True(t, r.h.calls[1].arm)
	require.Equal(t, []byte{5, 0, 0, 7}, r.h.calls[1].data)
	require.False(t, r.h.calls[2].arm)
	require.Equal(t, uint64(1), r.ctr.Get("bar_cmd_dbell"))
	require.Equal(t, uint64(2), r.ctr.Get("bar_eq_doorbell"))
}

func TestBadAccesses(t *testing.T) {
	first := uint64(DefaultFirstUAR) * mlx5.UARPageSize
	tests := []struct {
		name    string
		do      func(r *rig) uint32
		counter string
		want    uint32 // for reads
	}{
		{"read of a reserved init offset", func(r *rig) uint32 { return r.m.Load32(0x8) }, "bar_unknown_access", 0xFFFFFFFF},
		{"read between init segment and UARs", func(r *rig) uint32 { return r.m.Load32(0x2800) }, "bar_unknown_access", 0xFFFFFFFF},
		{"read past the last UAR", func(r *rig) uint32 { return r.m.Load32(first + 8*mlx5.UARPageSize) }, "bar_unknown_access", 0xFFFFFFFF},
		{"read of a reserved UAR offset", func(r *rig) uint32 { return r.m.Load32(first + 0x100) }, "bar_unknown_access", 0xFFFFFFFF},
		{"write to a reserved init offset", func(r *rig) uint32 { r.m.Store32(0x20, 1); return 0 }, "bar_unknown_access", 0},
		{"write far outside BAR0", func(r *rig) uint32 { r.m.Store64(1<<40, 1); return 0 }, "bar_unknown_access", 0},
		{"write to fw_rev", func(r *rig) uint32 { r.m.Store32(mlx5.InitSegFWRev, 1); return 0 }, "bar_ro_write", 0},
		{"write to the health buffer", func(r *rig) uint32 { r.m.Store32(mlx5.InitSegHealth+4, 1); return 0 }, "bar_ro_write", 0},
		{"read of cmd_dbell", func(r *rig) uint32 { return r.m.Load32(mlx5.InitSegCmdDbell) }, "bar_wo_read", 0},
		{"read of a BF buffer", func(r *rig) uint32 { return r.m.Load32(first + 0x800) }, "bar_wo_read", 0},
		{"read of the CQ arm doorbell", func(r *rig) uint32 { return r.m.Load32(first + 0x20) }, "bar_bad_width", 0xFFFFFFFF},
		{"8-byte store to a 4-byte register", func(r *rig) uint32 { r.m.Store64(mlx5.InitSegCmdqAddrH, 1); return 0 }, "bar_bad_width", 0},
		{"4-byte store to the CQ arm doorbell", func(r *rig) uint32 { r.m.Store32(first+0x20, 1); r.m.Flush(); return 0 }, "bar_bad_width", 0},
		{"8-byte store to an EQ doorbell", func(r *rig) uint32 { r.m.Store64(first+0x40, 1); r.m.Flush(); return 0 }, "bar_bad_width", 0},
		{"misaligned 8-byte store", func(r *rig) uint32 { r.m.Store64(first+0x804, 1); r.m.Flush(); return 0 }, "bar_misaligned_store", 0},
		{"misaligned 4-byte store", func(r *rig) uint32 { r.m.Store32(0x1FE, 1); return 0 }, "bar_misaligned_store", 0},
		{"misaligned load", func(r *rig) uint32 { return r.m.Load32(0x2) }, "bar_bad_width", 0xFFFFFFFF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.settle()
			r.rec.Reset()
			got := tc.do(r)
			r.settle()
			require.Equal(t, tc.want, got)
			require.Equal(t, uint64(1), r.ctr.Get(tc.counter))
			w := r.rec.Warnings()
			require.Len(t, w, 1)
			require.Equal(t, tc.counter, w[0].Name)
			require.Empty(t, r.h.calls)
		})
	}
}

// W1C and masked RW semantics of the dispatch, on a synthetic register.
func TestRegisterSemantics(t *testing.T) {
	saved := initRegs
	defer func() { initRegs = saved }()
	initRegs = append(append([]Reg(nil), saved...),
		Reg{Name: "test_w1c", Offset: 0x2000 - 8, Size: 4, Width: 4, Access: W1C, Reset: 0xF0F0},
		Reg{Name: "test_rw_masked", Offset: 0x2000 - 4, Size: 4, Width: 4, Access: RW, WMask: 0xFF, Reset: 0xAB00})
	r := newRig(t, nil)
	r.be32Store(0x2000-8, 0x3030)
	require.Equal(t, uint32(0xC0C0), r.be32(0x2000-8))
	r.be32Store(0x2000-4, 0x1234)
	require.Equal(t, uint32(0xAB34), r.be32(0x2000-4))
}

func TestWCFullLineEmitsWithoutFence(t *testing.T) {
	r := newRig(t, nil)
	off := r.bfOff(DefaultFirstUAR, 0, 0)
	w := wqe(0x15, 3, 4) // 64 B
	r.copyBF(off, w)
	r.settle() // no Flush
	require.Equal(t, 1, r.mwrs())
	require.Len(t, r.h.calls, 1)
	require.Equal(t, "bf", r.h.calls[0].kind)
	require.Equal(t, w, r.h.calls[0].data)
	require.Zero(t, r.ctr.Get("wc_late_drain"))
}

func TestWCPartialWaitsForFlush(t *testing.T) {
	r := newRig(t, nil)
	uar := r.b.UAROffset(DefaultFirstUAR)
	arm := mlx5.CQArm{SN: 1, CI: 0x42, CQN: 0x77}
	var db [8]byte
	binary.BigEndian.PutUint32(db[0:], arm.ArmWord())
	binary.BigEndian.PutUint32(db[4:], arm.CQN)
	r.m.Store64(uar+mlx5.UARCQArmOffset, binary.LittleEndian.Uint64(db[:]))
	r.eng.Advance(500 * sim.Nanosecond)
	require.Zero(t, r.mwrs())
	require.Empty(t, r.h.calls)
	flushAt := r.eng.Now()
	r.m.Flush()
	require.Equal(t, 1, r.mwrs())
	r.settle()
	require.Len(t, r.h.calls, 1)
	c := r.h.calls[0]
	require.Equal(t, "arm", c.kind)
	require.Equal(t, uint32(DefaultFirstUAR), c.uar)
	require.Equal(t, arm, mlx5.ParseCQArm(c.data))
	require.Less(t, c.t, flushAt.Add(r.link.Spec().FlightLatency+10*sim.Nanosecond))
	require.Greater(t, c.t, flushAt.Add(r.link.Spec().FlightLatency))
	require.Equal(t, uint64(1), r.ctr.Get("bar_cq_arm"))
	fl := r.stages("wc_flush")
	require.Len(t, fl, 1)
	require.Equal(t, "fence", fl[0].Detail)
	require.Equal(t, flushAt, fl[0].End)
}

func TestWCLateDrain(t *testing.T) {
	r := newRig(t, nil)
	off := r.bfOff(DefaultFirstUAR, 1, 0)
	storeAt := r.eng.Now()
	r.m.Store64(off, binary.LittleEndian.Uint64(wqe(9, 1, 2)[:8])) // a doorbell, no fence
	r.settle()
	require.Len(t, r.h.calls, 1)
	c := r.h.calls[0]
	require.Equal(t, "db", c.kind)
	require.Equal(t, 1, c.bfreg)
	drain := r.m.Config().WCDrain
	require.GreaterOrEqual(t, c.t, storeAt.Add(drain))
	require.Less(t, c.t, storeAt.Add(drain+200*sim.Nanosecond))
	require.Equal(t, uint64(1), r.ctr.Get("wc_late_drain"))
	w := r.rec.Warnings()
	require.Len(t, w, 1)
	require.Equal(t, "wc_late_drain", w[0].Name)
	require.Equal(t, "drain", r.stages("wc_flush")[0].Detail)
}

func TestDoorbellDecode(t *testing.T) {
	for _, k := range []int{0, 1, 2, 3} {
		for _, buf := range []int{0, 1} {
			r := newRig(t, nil)
			w := wqe(0x1234, uint16(100+k), 3)
			uar := uint32(DefaultFirstUAR + 5)
			r.m.Store64(r.bfOff(uar, k, buf), binary.LittleEndian.Uint64(w[:8]))
			r.m.Flush()
			r.settle()
			require.Len(t, r.h.calls, 1)
			require.Equal(t, call{kind: "db", t: r.h.calls[0].t, uar: uar, bfreg: k, data: w[:8]}, r.h.calls[0])
			require.Equal(t, pcie.Stats{MWr: 1, WireBytes: 32, PayloadBytes: 8}, r.link.Totals().HostMWr, "a doorbell is one 8 B MWr")
			st := r.stages("doorbell_mmio")
			require.Len(t, st, 1)
			require.Equal(t, uint64(0x1234)<<16|uint64(100+k), st[0].Flow)
			require.Equal(t, uint32(0x1234), st[0].QPN)
		}
	}
}

func TestBlueFlameAssembly(t *testing.T) {
	tests := []struct {
		name  string
		ds    int
		lines int
	}{
		{"1 line (ds 2)", 2, 1},
		{"1 line (ds 4)", 4, 1},
		{"2 lines (ds 5)", 5, 2},
		{"2 lines (ds 8)", 8, 2},
		{"4 lines (ds 16)", 16, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			uar := uint32(DefaultFirstUAR + 2)
			// Two posts alternate between the bfreg's buffers, as libmlx5 does.
			for post := 0; post < 4; post++ {
				w := wqe(0x99, uint16(post*tc.lines), tc.ds)
				r.copyBF(r.bfOff(uar, 1, post%2), w)
				r.m.Flush()
				r.settle()
				require.Len(t, r.h.calls, post+1)
				c := r.h.calls[post]
				require.Equal(t, "bf", c.kind)
				require.Equal(t, uar, c.uar)
				require.Equal(t, 1, c.bfreg)
				require.Equal(t, w, c.data)
			}
			require.Equal(t, 4*tc.lines, r.mwrs(), "one MWr per 64 B line")
			require.Equal(t, 4*tc.lines*(64+24), r.link.Totals().HostMWr.WireBytes)
			require.Equal(t, uint64(4), r.ctr.Get("bar_blueflame"))
			require.Empty(t, r.rec.Warnings())
			st := r.stages("bf_mmio")
			require.Len(t, st, 4)
			require.Equal(t, uint64(0x99)<<16|uint64(tc.lines), st[1].Flow)
			require.Equal(t, tc.lines*64, st[1].Bytes)
			tl := r.stages("pcie_tlp")
			require.Equal(t, uint64(0x99)<<16, tl[0].Flow)
			require.Equal(t, 88, tl[0].Bytes)
		})
	}
}

func TestBlueFlameTorn(t *testing.T) {
	t.Run("missing second line times out", func(t *testing.T) {
		r := newRig(t, nil)
		w := wqe(7, 11, 6) // 2 lines
		off := r.bfOff(DefaultFirstUAR, 0, 0)
		r.copyBF(off, w[:64])
		r.m.Flush()
		r.settle()
		require.Len(t, r.h.calls, 1)
		require.Equal(t, "db", r.h.calls[0].kind)
		require.Equal(t, w[:8], r.h.calls[0].data)
		require.Equal(t, uint64(1), r.ctr.Get("bf_torn"))
		require.Equal(t, "bf_torn", r.rec.Warnings()[0].Name)
	})
	t.Run("a new first line arrives", func(t *testing.T) {
		r := newRig(t, nil)
		off := r.bfOff(DefaultFirstUAR, 0, 0)
		w1, w2 := wqe(7, 1, 8), wqe(7, 3, 3)
		r.copyBF(off, w1[:64])
		r.copyBF(off, w2)
		r.m.Flush()
		r.eng.Advance(300 * sim.Nanosecond)
		require.Len(t, r.h.calls, 2)
		require.Equal(t, call{kind: "db", t: r.h.calls[0].t, uar: DefaultFirstUAR, data: w1[:8]}, r.h.calls[0])
		require.Equal(t, "bf", r.h.calls[1].kind)
		require.Equal(t, w2, r.h.calls[1].data)
		require.Equal(t, uint64(1), r.ctr.Get("bf_torn"))
	})
	t.Run("a doorbell arrives", func(t *testing.T) {
		r := newRig(t, nil)
		off := r.bfOff(DefaultFirstUAR, 0, 0)
		w := wqe(7, 1, 8)
		r.copyBF(off, w[:64])
		r.m.Store64(off, binary.LittleEndian.Uint64(w[:8]))
		r.m.Flush()
		r.settle()
		require.Len(t, r.h.calls, 2)
		require.Equal(t, "db", r.h.calls[0].kind)
		require.Equal(t, "db", r.h.calls[1].kind)
		require.Equal(t, uint64(1), r.ctr.Get("bf_torn"))
	})
	t.Run("lines without the ctrl segment are dropped", func(t *testing.T) {
		r := newRig(t, nil)
		w := wqe(7, 1, 8)
		r.copyBF(r.bfOff(DefaultFirstUAR, 0, 0)+64, w[64:])
		r.m.Flush()
		r.settle()
		require.Empty(t, r.h.calls)
		require.Equal(t, uint64(1), r.ctr.Get("bf_torn"))
	})
	t.Run("ds 0 rings a doorbell", func(t *testing.T) {
		r := newRig(t, nil)
		w := wqe(7, 1, 4)
		w[7] = 0
		r.copyBF(r.bfOff(DefaultFirstUAR, 0, 0), w)
		r.settle()
		require.Len(t, r.h.calls, 1)
		require.Equal(t, "db", r.h.calls[0].kind)
		require.Equal(t, uint64(1), r.ctr.Get("bf_bad_ds"))
	})
	t.Run("ds larger than the buffer rings a doorbell", func(t *testing.T) {
		r := newRig(t, nil)
		w := wqe(7, 1, 20) // 320 B > 256 B buffer: send its first line only
		r.copyBF(r.bfOff(DefaultFirstUAR, 0, 0), w[:64])
		r.settle()
		require.Len(t, r.h.calls, 1)
		require.Equal(t, "db", r.h.calls[0].kind)
		require.Equal(t, uint64(1), r.ctr.Get("bf_bad_ds"))
	})
}

func TestNonCachedUAR(t *testing.T) {
	r := newRig(t, nil, func(c *host.Config) { c.UARNonCached = true })
	w := wqe(3, 2, 2)
	storeAt := r.eng.Now()
	r.m.Store64(r.bfOff(DefaultFirstUAR, 0, 0), binary.LittleEndian.Uint64(w[:8]))
	require.Equal(t, 1, r.mwrs(), "no fence needed")
	require.Equal(t, storeAt.Add(r.m.Config().UCStoreCost), r.eng.Now())
	r.settle()
	require.Len(t, r.h.calls, 1)
	require.Equal(t, "db", r.h.calls[0].kind)
	require.Len(t, r.stages("doorbell_mmio"), 1)
}

func TestNoBlueFlame(t *testing.T) {
	r := newRig(t, func(c *Config) { c.BFRegSize = 0 })
	uar := uint32(DefaultFirstUAR)
	for k := 0; k < 8; k++ {
		off := r.b.BFRegOffset(uar, k)
		require.Equal(t, r.b.UAROffset(uar)+0x800+uint64(k)*0x100, off)
		r.m.Store64(off, binary.LittleEndian.Uint64(wqe(5, uint16(k), 2)[:8]))
	}
	r.m.Flush()
	r.settle()
	require.Len(t, r.h.calls, 8)
	for k, c := range r.h.calls {
		require.Equal(t, "db", c.kind)
		require.Equal(t, k, c.bfreg)
	}
	// A BlueFlame copy is not accepted.
	r.copyBF(r.b.BFRegOffset(uar, 0), wqe(5, 9, 4))
	r.settle()
	require.Len(t, r.h.calls, 8)
	require.Equal(t, uint64(1), r.ctr.Get("bar_bad_width"))
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	require.NoError(t, Config{}.Validate(), "zero values get defaults")
	tests := []struct {
		name string
		mut  func(*Config)
	}{
		{"first UAR in the init segment", func(c *Config) { c.FirstUAR = 2 }},
		{"bf_reg_size 1024", func(c *Config) { c.BFRegSize = 1024 }},
		{"bf_reg_size 100", func(c *Config) { c.BFRegSize = 100 }},
		{"negative UARs", func(c *Config) { c.NumUARs = -1 }},
		{"negative drain", func(c *Config) { c.WCDrain = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mut(&c)
			require.ErrorIs(t, c.Validate(), ErrConfig)
			require.Panics(t, func() { New(env.Env{Eng: sim.NewEngine()}, pcie.NewLink(pcie.Gen3x8()), nil, c) })
		})
	}
}

// A nil handler, recorder and counter set still work.
func TestNilCollaborators(t *testing.T) {
	eng := sim.NewEngine()
	b := New(env.Env{Eng: eng}, pcie.NewLink(pcie.Gen3x8()), nil, DefaultConfig())
	m := host.New(eng, nil, nil, 0, b, hostFor(b.Config()))
	m.Store64(b.BFRegOffset(DefaultFirstUAR, 0), 1)
	m.Flush()
	m.Load32(0x8)
	eng.Advance(5 * sim.Microsecond)
	require.Equal(t, uint64(1), b.Counters().Get("bar_doorbell"))
	require.Equal(t, uint64(1), b.Counters().Get("bar_unknown_access"))
}

func TestZeroAllocs(t *testing.T) {
	r := newRig(t, nil)
	r.b = New(env.Env{Eng: r.eng, Ctr: r.ctr}, r.link, nopHandler{}, DefaultConfig())
	r.m = host.New(r.eng, nil, r.ctr, 0, r.b, hostFor(r.b.Config()))
	r.eng.Advance(20 * sim.Microsecond)
	w := wqe(0x42, 0, 4)
	off := r.bfOff(DefaultFirstUAR, 0, 0)
	post := func() {
		for i := 0; i < 64; i += 8 {
			r.m.Store64(off+uint64(i), binary.LittleEndian.Uint64(w[i:]))
		}
		r.m.Flush()
		r.m.Store64(off+256, binary.LittleEndian.Uint64(w[:8])) // doorbell on the other buffer
		r.m.Flush()
		r.eng.Advance(2 * sim.Microsecond)
	}
	post()
	require.Zero(t, testing.AllocsPerRun(200, post))
}

// BenchmarkBlueFlamePost64 is one 64 B BlueFlame post: 8 Store64, Flush,
// and the engine run that delivers it.
func BenchmarkBlueFlamePost64(b *testing.B) {
	eng := sim.NewEngine()
	bar := New(env.Env{Eng: eng}, pcie.NewLink(pcie.Gen3x8()), nopHandler{}, DefaultConfig())
	cpu := host.New(eng, nil, nil, 0, bar, hostFor(bar.Config()))
	w := wqe(0x42, 0, 4)
	off := bar.BFRegOffset(DefaultFirstUAR, 0)
	var words [8]uint64
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(w[8*i:])
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		for j, v := range words {
			cpu.Store64(off+uint64(8*j), v)
		}
		cpu.Flush()
		eng.Advance(400 * sim.Nanosecond)
	}
}
