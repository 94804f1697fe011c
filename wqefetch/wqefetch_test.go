package wqefetch

import (
	"encoding/binary"
	"errors"
	"github.com/softnic/softnic/env"
	"testing"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

type got struct {
	t   sim.Time
	w   WQE
	err error
}

type sink struct{ got []got }

func (s *sink) WQEReady(t sim.Time, q *Queue, w *WQE) {
	c := *w
	c.Bytes = append([]byte(nil), w.Bytes...)
	c.SGEs = append([]mlx5.DataFields(nil), w.SGEs...)
	c.Inline = append([]byte(nil), w.Inline...)
	s.got = append(s.got, got{t: t, w: c, err: w.Err})
}

type rig struct {
	eng  *sim.Engine
	mem  *shm.Region
	e    *Engine
	s    *sink
	q    *Queue
	ring []byte
	ctr  trace.Counters
	rec  *trace.Recorder
}

const qpn = 0x123

func newEnv(t *testing.T, size int) *rig {
	t.Helper()
	return newEnvCfg(t, size, dma.Config{})
}

// newEnvCfg is newEnv with a DMA configuration (e.g. fewer read tags).
func newEnvCfg(t *testing.T, size int, cfg dma.Config) *rig {
	t.Helper()
	mem, err := shm.New("wqefetch", 1<<20, 0x20000000)
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	base, err := mem.Alloc(size*64, 4096)
	require.NoError(t, err)
	ring, _ := mem.Slice(base, size*64)
	v := &rig{eng: sim.NewEngine(), mem: mem, s: &sink{}, ring: ring, rec: trace.NewRecorder()}
	d := dma.New(env.Env{Eng: v.eng, Rec: v.rec, Ctr: &v.ctr}, pcie.NewLink(pcie.Gen3x8()), mem, cfg)
	v.e = New(env.Env{Eng: v.eng, Rec: v.rec, Ctr: &v.ctr}, d, v.s)
	v.q = NewQueue(qpn, base, size, 0)
	return v
}

// put writes a WQE of the given opcode and DS at WQEBB counter idx (ring
// wrap included) and returns its first 8 bytes (the doorbell).
func (v *rig) put(idx uint16, op mlx5.Opcode, ds int, fill func(b []byte)) [8]byte {
	b := make([]byte, mlx5.WQEBBs(ds)*64)
	mlx5.CtrlSeg(b).Encode(&mlx5.CtrlFields{WQEIndex: idx, Opcode: op, QPN: qpn, DS: uint8(ds), FMCESE: mlx5.CECQUpdate})
	if fill != nil {
		fill(b)
	}
	for i := 0; i < len(b); i += 64 {
		slot := (int(idx) + i/64) & (v.q.Size - 1)
		copy(v.ring[slot*64:], b[i:i+64])
	}
	var db [8]byte
	copy(db[:], b)
	return db
}

func writeWQE(b []byte) {
	mlx5.RaddrSeg(b[16:]).Encode(&mlx5.RaddrFields{RAddr: 0x1000, RKey: 0x55})
	mlx5.DataSeg(b[32:]).Encode(&mlx5.DataFields{ByteCount: 64, LKey: 0x66, Addr: 0x2000})
}

func TestDoorbellFetchAndDecode(t *testing.T) {
	v := newEnv(t, 8)
	v.put(0, mlx5.OpRDMAWrite, 3, writeWQE)
	db := v.put(1, mlx5.OpSend, 4, func(b []byte) {
		for i := 0; i < 3; i++ {
			mlx5.DataSeg(b[16+16*i:]).Encode(&mlx5.DataFields{ByteCount: uint32(10 + i), LKey: 7, Addr: uint64(0x100 * i)})
		}
	})
	require.NoError(t, v.e.Doorbell(0, v.q, db))
	require.True(t, v.q.Pending())
	v.eng.Run(0)
	require.False(t, v.q.Pending())
	require.Len(t, v.s.got, 2)
	w := v.s.got[0].w
	require.Equal(t, StateValid, w.State)
	require.Equal(t, FromDMA, w.Source)
	require.True(t, w.HasRaddr)
	require.Equal(t, uint64(0x1000), w.Raddr.RAddr)
	require.Equal(t, []mlx5.DataFields{{ByteCount: 64, LKey: 0x66, Addr: 0x2000}}, w.SGEs)
	require.Equal(t, uint64(64), w.Length)
	w = v.s.got[1].w
	require.Equal(t, uint16(1), w.Index)
	require.Len(t, w.SGEs, 3)
	require.Equal(t, uint64(33), w.Length)
	require.Equal(t, uint16(2), v.q.Next())
	// One DMA read for both WQEs, timed like a 128-byte read.
	require.Equal(t, uint64(1), v.ctr.Value(CtrFetchReads))
	require.Equal(t, uint64(128), v.ctr.Value(CtrFetchBytes))
	require.Greater(t, v.s.got[0].t, sim.Time(500*sim.Nanosecond))
}

func TestFetchWrapsTheRing(t *testing.T) {
	v := newEnv(t, 4)
	v.q.Reset(3)
	// A 2-WQEBB inline WQE at slot 3 straddles the end of a 4-WQEBB ring.
	payload := []byte("0123456789abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ") // 56 bytes
	ds := 1 + mlx5.InlineSegSize(len(payload))/16
	db := v.put(3, mlx5.OpSend, ds, func(b []byte) {
		mlx5.InlineSeg(b[16:]).SetLen(uint32(len(payload)))
		copy(b[20:], payload)
	})
	require.NoError(t, v.e.Doorbell(0, v.q, db))
	v.eng.Run(0)
	require.Len(t, v.s.got, 1)
	w := v.s.got[0].w
	require.Equal(t, StateValid, w.State, "%v", w.Err)
	require.True(t, w.IsInline)
	require.Equal(t, payload, w.Inline)
	require.Equal(t, uint64(2), v.ctr.Value(CtrFetchReads), "a wrapped range takes two reads")
	require.Equal(t, uint16(5), v.q.Next())
}

func TestBlueFlame(t *testing.T) {
	v := newEnv(t, 8)
	db := v.put(0, mlx5.OpRDMAWrite, 3, writeWQE)
	bf := make([]byte, 64)
	copy(bf, v.ring[:64])
	require.True(t, v.e.BlueFlame(100, v.q, bf))
	require.Len(t, v.s.got, 1, "taken at once, no fetch")
	require.Equal(t, FromBlueFlame, v.s.got[0].w.Source)
	require.Equal(t, sim.Time(100), v.s.got[0].t)
	require.Zero(t, v.ctr.Value(CtrFetchReads))

	// Out of order (index 5 while the device expects 1): fall back.
	db5 := v.put(5, mlx5.OpRDMAWrite, 3, writeWQE)
	copy(bf, v.ring[5*64:6*64])
	require.False(t, v.e.BlueFlame(200, v.q, bf))
	_ = db5
	// Short BF buffer: fall back.
	require.False(t, v.e.BlueFlame(200, v.q, bf[:8]))
	// A fetch pending: fall back too.
	v.put(1, mlx5.OpRDMAWrite, 3, writeWQE)
	require.NoError(t, v.e.Doorbell(300, v.q, db))
	_ = db
}

func TestDoorbellChecks(t *testing.T) {
	v := newEnv(t, 8)
	db := v.put(0, mlx5.OpRDMAWrite, 3, writeWQE)
	bad := db
	bad[4] ^= 0x01 // QPN
	require.ErrorIs(t, v.e.Doorbell(0, v.q, bad), ErrBadQPN)
	lap := db
	binary.BigEndian.PutUint16(lap[1:3], 20) // far past the ring
	require.ErrorIs(t, v.e.Doorbell(0, v.q, lap), ErrBadDoorbell)
	require.Equal(t, uint64(1), v.ctr.Value(CtrDBBadCounter))
	require.NoError(t, v.e.Doorbell(0, v.q, db))
	v.eng.Run(0)
	require.NoError(t, v.e.Doorbell(0, v.q, db), "a repeated doorbell announces nothing new")
	require.Equal(t, uint64(1), v.ctr.Value(CtrDBNoNewWQE))
	require.Len(t, v.rec.Warnings(), 3)
}

func TestValidation(t *testing.T) {
	cases := []struct {
		name string
		op   mlx5.Opcode
		ds   int
		edit func(b []byte)
		want error
	}{
		{"bad opcode", 0x3f, 2, nil, ErrBadOpcode},
		{"write without raddr", mlx5.OpRDMAWrite, 1, nil, ErrBadDS},
		{"wrong QPN", mlx5.OpSend, 2, func(b []byte) { b[6] ^= 1 }, ErrBadQPN},
		{"wrong index", mlx5.OpSend, 2, func(b []byte) { b[2] = 9 }, ErrBadIndex},
		{"inline on a READ", mlx5.OpRDMARead, 3, func(b []byte) { mlx5.InlineSeg(b[32:]).SetLen(4) }, ErrBadSegment},
		{"inline length vs DS", mlx5.OpSend, 2, func(b []byte) { mlx5.InlineSeg(b[16:]).SetLen(40) }, ErrBadSegment},
		{"inline after data", mlx5.OpSend, 3, func(b []byte) {
			mlx5.DataSeg(b[16:]).Encode(&mlx5.DataFields{ByteCount: 4})
			mlx5.InlineSeg(b[32:]).SetLen(4)
		}, ErrBadSegment},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t, 8)
			db := v.put(0, c.op, c.ds, c.edit)
			binary.BigEndian.PutUint32(db[4:8], qpn<<8|uint32(c.ds)) // the doorbell itself is fine
			binary.BigEndian.PutUint16(db[1:3], 0)
			require.NoError(t, v.e.Doorbell(0, v.q, db))
			v.eng.Run(0)
			require.Len(t, v.s.got, 1)
			require.Equal(t, StateInvalid, v.s.got[0].w.State)
			require.True(t, errors.Is(v.s.got[0].err, c.want), "got %v", v.s.got[0].err)
			require.Equal(t, uint64(1), v.ctr.Value(CtrWQEInvalid))
		})
	}
	t.Run("DS 0 still makes progress", func(t *testing.T) {
		v := newEnv(t, 8)
		db := v.put(0, mlx5.OpSend, 2, func(b []byte) { b[7] = 0 })
		binary.BigEndian.PutUint32(db[4:8], qpn<<8|2)
		require.NoError(t, v.e.Doorbell(0, v.q, db))
		v.eng.Run(0)
		require.Equal(t, StateInvalid, v.s.got[0].w.State)
		require.Equal(t, uint16(1), v.q.Next())
	})
}

func TestStateStrings(t *testing.T) {
	for s := StateAnnounced; s <= StateDone; s++ {
		require.NotContains(t, s.String(), "state(")
	}
	require.Equal(t, "state(9)", State(9).String())
	require.Equal(t, "blueflame", FromBlueFlame.String())
}

// FuzzDecode feeds arbitrary ring contents and doorbells to the fetch
// engine: it must never panic, always make progress, and only hand valid
// WQEs with consistent lengths to the sink.
func FuzzDecode(f *testing.F) {
	f.Add(make([]byte, 256), uint16(0), uint8(3))
	seed := make([]byte, 256)
	mlx5.CtrlSeg(seed).Encode(&mlx5.CtrlFields{Opcode: mlx5.OpRDMAWrite, QPN: qpn, DS: 3})
	f.Add(seed, uint16(0), uint8(3))
	f.Fuzz(func(t *testing.T, ring []byte, idx uint16, ds uint8) {
		mem, err := shm.New("fz", 4096, 0x30000000)
		if err != nil {
			t.Skip(err)
		}
		defer mem.Close()
		eng := sim.NewEngine()
		var ctr trace.Counters
		d := dma.New(env.Env{Eng: eng, Ctr: &ctr}, pcie.NewLink(pcie.Gen3x8()), mem, dma.Config{})
		s := &sink{}
		e := New(env.Env{Eng: eng, Ctr: &ctr}, d, s)
		q := NewQueue(qpn, 0x30000000, 4, 0)
		copy(mem.Bytes(), ring)
		var db [8]byte
		binary.BigEndian.PutUint16(db[1:3], idx)
		binary.BigEndian.PutUint32(db[4:8], qpn<<8|uint32(ds&0x3f))
		q.Reset(idx)
		_ = e.Doorbell(0, q, db)
		eng.Run(10000)
		bf := make([]byte, len(ring))
		copy(bf, ring)
		_ = e.BlueFlame(eng.Now(), q, bf)
		for i, g := range s.got {
			if g.w.BBs < 1 || len(g.w.Bytes) > g.w.BBs*mlx5.WQEBBSize {
				t.Fatalf("WQE %d: %d BBs, %d bytes", g.w.Index, g.w.BBs, len(g.w.Bytes))
			}
			if i > 0 && g.w.Index != s.got[i-1].w.Index+uint16(s.got[i-1].w.BBs) {
				t.Fatalf("WQE %d delivered after WQE %d (%d BBs): not in ring order", g.w.Index, s.got[i-1].w.Index, s.got[i-1].w.BBs)
			}
			if g.w.State == StateValid && g.w.IsInline && uint64(len(g.w.Inline)) != g.w.Length {
				t.Fatalf("inline length %d != %d bytes", g.w.Length, len(g.w.Inline))
			}
			if g.w.State == StateValid && (g.w.Ctrl.Opcode == mlx5.OpAtomicCS || g.w.Ctrl.Opcode == mlx5.OpAtomicFA) {
				if !g.w.HasAtomic || !g.w.HasRaddr || g.w.IsInline || len(g.w.SGEs) != 1 {
					t.Fatalf("valid atomic without its segments: %+v", g.w)
				}
				if g.w.Ctrl.Opcode == mlx5.OpAtomicFA && g.w.Atomic.Compare != 0 {
					t.Fatalf("FETCH_ADD with a compare value %#x", g.w.Atomic.Compare)
				}
			}
			if g.w.State == StateValid && g.w.Ctrl.Opcode != mlx5.OpNOP && !g.w.IsInline {
				var n uint64
				for _, sg := range g.w.SGEs {
					n += uint64(sg.ByteCount)
				}
				if n != g.w.Length {
					t.Fatalf("length %d != sum of SGEs %d", g.w.Length, n)
				}
			}
		}
	})
}

// TestStaleDoorbellIsNotALap: a doorbell whose counter lies behind the
// last one announced (an older doorbell arriving after a newer one: a
// torn BlueFlame on the other half falling back late, a reordered
// store) announces nothing new and is ignored as such (faults.md §2.2,
// db_no_new_wqe). Before the fix only the very last counter counted as
// stale; one further back was refused as a counter lapping the ring
// (db_bad_counter, ErrBadDoorbell), as if the driver had jumped ahead.
func TestStaleDoorbellIsNotALap(t *testing.T) {
	cases := []struct {
		name   string
		idx    uint16 // the late doorbell's wqe_index (its WQE is 1 WQEBB)
		err    error
		noNew  uint64
		badCtr uint64
	}{
		{"the last counter again", 2, nil, 1, 0},
		{"two doorbells back", 1, nil, 1, 0},
		{"three doorbells back", 0, nil, 1, 0},
		{"far ahead", 20, ErrBadDoorbell, 0, 1},
		{"half the counter space away", 0x8003, ErrBadDoorbell, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, 8)
			var dbs [3][8]byte
			for i := range dbs {
				dbs[i] = v.put(uint16(i), mlx5.OpRDMAWrite, 3, writeWQE)
			}
			require.NoError(t, v.e.Doorbell(0, v.q, dbs[2]))
			v.eng.Run(0)
			late := dbs[0]
			binary.BigEndian.PutUint16(late[1:3], tc.idx)
			err := v.e.Doorbell(10, v.q, late)
			if tc.err == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.err)
			}
			require.Equal(t, tc.noNew, v.ctr.Value(CtrDBNoNewWQE))
			require.Equal(t, tc.badCtr, v.ctr.Value(CtrDBBadCounter))
		})
	}
}
