package dma

import (
	"bytes"
	"github.com/softnic/softnic/env"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

const memBase = 0x4000_0000

type rig struct {
	eng  *sim.Engine
	link *pcie.Link
	mem  *shm.Region
	rec  *trace.Recorder
	ctr  *trace.Counters
	dma  *Engine
}

func newRig(t testing.TB, cfg Config) *rig {
	mem, err := shm.New("dma-test", 1<<20, memBase)
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	r := &rig{eng: sim.NewEngine(), link: pcie.NewLink(pcie.Gen3x8()), mem: mem, rec: trace.NewRecorder(), ctr: &trace.Counters{}}
	r.dma = New(env.Env{Eng: r.eng, Rec: r.rec, Ctr: r.ctr}, r.link, mem, cfg)
	return r
}

func (r *rig) stages(name string) []trace.Event {
	var out []trace.Event
	for _, e := range r.rec.Events() {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func TestReadCalibration(t *testing.T) {
	r := newRig(t, Config{})
	buf := make([]byte, 64)
	done, s, err := r.dma.Read(0, memBase+0x1000, buf)
	require.NoError(t, err)
	require.InEpsilon(t, 546.0, done.NS(), 0.10) // timing.md §7 check 3
	require.Equal(t, 1, s.MRd)
	require.Equal(t, 1, s.CplD)
	require.Equal(t, uint64(1), r.ctr.Get("dma_reads"))
	require.Equal(t, uint64(64), r.ctr.Get("dma_read_bytes"))
	require.Equal(t, uint64(2), r.ctr.Get("pcie_dma_tlps"))
}

func TestReadLatencyMonotonic(t *testing.T) {
	var prev sim.Time
	for n := 64; n <= 4096; n += 64 {
		r := newRig(t, Config{})
		done, _, err := r.dma.Read(0, memBase+0x2000, make([]byte, n))
		require.NoError(t, err)
		require.Greater(t, done, prev, "size %d", n)
		prev = done
	}
}

// 33 concurrent 64 B reads with 32 tags: the 33rd starts when the first one
// finishes.
func TestTagLimit(t *testing.T) {
	r := newRig(t, Config{})
	require.Equal(t, 32, r.dma.Config().MaxReadTags)
	var dones []sim.Time
	buf := make([]byte, 64)
	for i := 0; i < 33; i++ {
		d, _, err := r.dma.Read(0, memBase+uint64(i)*64, buf)
		require.NoError(t, err)
		dones = append(dones, d)
	}
	reads := r.stages("dma_read")
	require.Len(t, reads, 33)
	for i := 0; i < 32; i++ {
		require.Equal(t, sim.Time(0), reads[i].Start)
	}
	require.Equal(t, dones[0], reads[32].Start)
	require.Greater(t, dones[32], dones[31])
	require.Equal(t, uint64(1), r.ctr.Get("dma_tag_stall"))
	waits := r.stages("dma_tag_wait")
	require.Len(t, waits, 1)
	require.Equal(t, dones[0], waits[0].End)
	require.Equal(t, 32, r.dma.InFlightReads(dones[0]-1))
	require.Equal(t, 0, r.dma.InFlightReads(dones[32]))

	// With more tags nothing waits.
	r = newRig(t, Config{MaxReadTags: 64})
	for i := 0; i < 33; i++ {
		r.dma.Read(0, memBase+uint64(i)*64, buf)
	}
	require.Zero(t, r.ctr.Get("dma_tag_stall"))
}

// A 2 KiB read needs four MRd (MRRS 512) and so four tags.
func TestTagsPerRequest(t *testing.T) {
	r := newRig(t, Config{MaxReadTags: 4})
	d1, _, _ := r.dma.Read(0, memBase, make([]byte, 2048))
	_, _, _ = r.dma.Read(0, memBase, make([]byte, 64))
	require.Equal(t, d1, r.stages("dma_read")[1].Start)
	require.Equal(t, 1, requests(0x100, 1, 512))
	require.Equal(t, 2, requests(0x1f0, 32, 512))
	require.Equal(t, 4, requests(0, 2048, 512))
	require.Equal(t, 0, requests(0, 0, 512))
}

func TestReadSamplesAtRequestTime(t *testing.T) {
	r := newRig(t, Config{})
	require.NoError(t, r.mem.Write(memBase, []byte("before")))
	buf := make([]byte, 6)
	done, _, err := r.dma.Read(0, memBase, buf)
	require.NoError(t, err)
	require.NoError(t, r.mem.Write(memBase, []byte("after!")))
	r.eng.RunUntil(done)
	require.Equal(t, "before", string(buf))
}

func TestRangeErrors(t *testing.T) {
	r := newRig(t, Config{})
	tests := []struct {
		name string
		op   func() (sim.Time, pcie.Stats, error)
	}{
		{"read below", func() (sim.Time, pcie.Stats, error) { return r.dma.Read(10, memBase-1, make([]byte, 2)) }},
		{"read past end", func() (sim.Time, pcie.Stats, error) { return r.dma.Read(10, memBase+1<<20-4, make([]byte, 8)) }},
		{"write past end", func() (sim.Time, pcie.Stats, error) { return r.dma.Write(10, memBase+1<<20, []byte{1}) }},
		{"write at 2^64-1", func() (sim.Time, pcie.Stats, error) { return r.dma.Write(10, ^uint64(0), []byte{1, 2}) }},
		{"visible write past end", func() (sim.Time, pcie.Stats, error) { return r.dma.WriteVisible(10, memBase+1<<20, []byte{1}) }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done, s, err := tc.op()
			require.ErrorIs(t, err, shm.ErrOutOfRange)
			require.Equal(t, sim.Time(10), done)
			require.Zero(t, s.TLPs())
			require.Equal(t, uint64(i+1), r.ctr.Get("dma_range_error"))
			require.Equal(t, mlx5.SyndLocalProt, Syndrome(err))
		})
	}
	require.Len(t, r.rec.Warnings(), len(tests))
	require.Zero(t, r.link.Totals().Up.TLPs())
}

func TestWriteAndWriteVisible(t *testing.T) {
	r := newRig(t, Config{})
	done, s, err := r.dma.Write(0, memBase+0x100, []byte("now"))
	require.NoError(t, err)
	require.Equal(t, 1, s.MWr)
	require.Positive(t, done)
	got := make([]byte, 3)
	require.NoError(t, r.mem.Read(memBase+0x100, got))
	require.Equal(t, "now", string(got))

	cqe := bytes.Repeat([]byte{0xAB}, 64)
	done, s, err = r.dma.WriteVisible(0, memBase+0x200, cqe)
	require.NoError(t, err)
	require.Equal(t, 1, s.MWr)
	cqe[0] = 0 // the engine copied it
	view, _ := r.mem.Slice(memBase+0x200, 64)
	require.Equal(t, make([]byte, 64), view, "not visible before done")
	r.eng.RunUntil(done - 1)
	require.Equal(t, byte(0), view[63])
	r.eng.RunUntil(done)
	require.Equal(t, bytes.Repeat([]byte{0xAB}, 64), view)
	require.Equal(t, uint64(2), r.ctr.Get("dma_writes"))
	require.Len(t, r.stages("dma_write"), 2)

	// Zero-length writes move nothing.
	done, s, err = r.dma.Write(5, memBase, nil)
	require.NoError(t, err)
	require.Equal(t, sim.Time(5), done)
	require.Zero(t, s.TLPs())
}

func TestFlowLabels(t *testing.T) {
	r := newRig(t, Config{})
	r.dma.SetFlow(0x42, 0x42<<16|7)
	r.dma.Read(0, memBase, make([]byte, 8))
	ev := r.stages("dma_read")[0]
	require.Equal(t, uint32(0x42), ev.QPN)
	require.Equal(t, uint64(0x42<<16|7), ev.Flow)
	require.Equal(t, "dma", ev.Component)
}

func gsKeys(t *testing.T) *Keys {
	k := NewKeys()
	require.NoError(t, k.Add(MR{Key: 0x100100, PDN: 3, Addr: memBase + 0x1000, Length: 0x1000, HCAVA: memBase + 0x1000, Access: mlx5.AccessLocalWrite}))
	require.NoError(t, k.Add(MR{Key: 0x200200, PDN: 3, Addr: memBase + 0x8000, Length: 0x1000, HCAVA: memBase + 0x8000}))
	require.NoError(t, k.Add(MR{Key: 0x300300, PDN: 3, Addr: 0x1_0000_0000, Length: 0x1000, HCAVA: 0x1_0000_0000}))
	return k
}

func TestGather(t *testing.T) {
	r := newRig(t, Config{})
	keys := gsKeys(t)
	require.NoError(t, r.mem.Write(memBase+0x1010, []byte("hello, ")))
	require.NoError(t, r.mem.Write(memBase+0x8ff0, []byte("world")))
	sges := []mlx5.DataFields{
		{ByteCount: 7, LKey: 0x100100, Addr: memBase + 0x1010},
		{ByteCount: 0, LKey: 0xdead, Addr: 0}, // skipped
		{ByteCount: 5, LKey: 0x200200, Addr: memBase + 0x8ff0},
	}
	dst := make([]byte, 12)
	n, done, s, err := r.dma.Gather(0, 3, sges, keys, dst)
	require.NoError(t, err)
	require.Equal(t, 12, n)
	require.Equal(t, "hello, world", string(dst))
	require.Equal(t, 2, s.MRd)
	require.Equal(t, 2, s.CplD)
	require.InEpsilon(t, 546.0, done.NS(), 0.10) // both reads issued together

	tests := []struct {
		name  string
		pdn   uint32
		sges  []mlx5.DataFields
		dst   int
		wantN int
		want  error
	}{
		{"bad lkey", 3, []mlx5.DataFields{{ByteCount: 4, LKey: 0x999, Addr: memBase + 0x1000}}, 16, 0, ErrBadKey},
		{"wrong PD", 4, []mlx5.DataFields{{ByteCount: 4, LKey: 0x100100, Addr: memBase + 0x1000}}, 16, 0, ErrPDMismatch},
		{"second SGE out of bounds", 3, []mlx5.DataFields{
			{ByteCount: 4, LKey: 0x100100, Addr: memBase + 0x1000},
			{ByteCount: 32, LKey: 0x200200, Addr: memBase + 0x8ff0}}, 64, 4, ErrBounds},
		{"more than dst", 3, []mlx5.DataFields{{ByteCount: 32, LKey: 0x100100, Addr: memBase + 0x1000}}, 16, 0, ErrLength},
		{"inline flag is not a length", 3, []mlx5.DataFields{{ByteCount: mlx5.InlineFlag | 4, LKey: 0x100100, Addr: memBase + 0x1000}}, 16, 0, ErrLength},
		{"MR outside host memory", 3, []mlx5.DataFields{{ByteCount: 4, LKey: 0x300300, Addr: 0x1_0000_0000}}, 16, 0, shm.ErrOutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, _, _, err := r.dma.Gather(0, tc.pdn, tc.sges, keys, make([]byte, tc.dst))
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, tc.wantN, n)
			require.NotZero(t, Syndrome(err))
		})
	}
	require.Equal(t, uint64(1), r.ctr.Get("dma_bad_key"))
	require.Equal(t, uint64(1), r.ctr.Get("dma_pd_mismatch"))
	require.Equal(t, uint64(1), r.ctr.Get("dma_bounds"))
	require.Equal(t, uint64(2), r.ctr.Get("dma_length_error"))
	require.Equal(t, uint64(1), r.ctr.Get("dma_range_error"))
}

func TestScatter(t *testing.T) {
	r := newRig(t, Config{})
	keys := gsKeys(t)
	sges := []mlx5.DataFields{
		{ByteCount: 4, LKey: 0x100100, Addr: memBase + 0x1100},
		{ByteCount: 16, LKey: 0x100100, Addr: memBase + 0x1200},
		{ByteCount: 0, LKey: mlx5.InvalidKey}, // terminator
		{ByteCount: 100, LKey: 0x100100, Addr: memBase + 0x1300},
	}
	n, done, s, err := r.dma.Scatter(0, 3, sges, keys, []byte("0123456789"))
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Equal(t, 2, s.MWr)
	require.Positive(t, done)
	got := make([]byte, 6)
	require.NoError(t, r.mem.Read(memBase+0x1100, got[:4]))
	require.Equal(t, "0123", string(got[:4]))
	require.NoError(t, r.mem.Read(memBase+0x1200, got))
	require.Equal(t, "456789", string(got))

	// 21 bytes do not fit 20 (the terminator hides the third SGE).
	n, _, s, err = r.dma.Scatter(0, 3, sges, keys, make([]byte, 21))
	require.ErrorIs(t, err, ErrLength)
	require.Equal(t, mlx5.SyndLocalLength, Syndrome(err))
	require.Zero(t, n)
	require.Zero(t, s.TLPs())

	// Scatter needs local write: the read-only MR refuses.
	ro := []mlx5.DataFields{{ByteCount: 8, LKey: 0x200200, Addr: memBase + 0x8000}}
	_, _, _, err = r.dma.Scatter(0, 3, ro, keys, []byte("x"))
	require.ErrorIs(t, err, ErrAccess)
	require.Equal(t, mlx5.SyndLocalProt, Syndrome(err))

	// An empty message touches nothing.
	n, _, s, err = r.dma.Scatter(0, 3, nil, keys, nil)
	require.NoError(t, err)
	require.Zero(t, n+s.TLPs())
}

func TestZeroAllocs(t *testing.T) {
	r := newRig(t, Config{})
	r.rec = nil
	r.dma = New(env.Env{Eng: r.eng, Ctr: r.ctr}, r.link, r.mem, Config{})
	keys := gsKeys(t)
	sges := []mlx5.DataFields{{ByteCount: 64, LKey: 0x100100, Addr: memBase + 0x1000}, {ByteCount: 64, LKey: 0x100100, Addr: memBase + 0x1800}}
	buf := make([]byte, 128)
	var now sim.Time
	step := func() {
		now += 10 * sim.Time(sim.Microsecond)
		r.dma.Read(now, memBase, buf[:64])
		r.dma.Write(now, memBase+0x4000, buf[:64])
		r.dma.WriteVisible(now, memBase+0x5000, buf[:64])
		r.dma.Gather(now, 3, sges, keys, buf)
		r.dma.Scatter(now, 3, sges, keys, buf)
		r.eng.RunUntil(now + 5*sim.Time(sim.Microsecond))
	}
	step() // warm the counters' map and the landing pool
	require.Zero(t, testing.AllocsPerRun(200, step))
}

func BenchmarkRead64(b *testing.B) {
	r := newRig(b, Config{})
	e := New(env.Env{Eng: r.eng, Ctr: r.ctr}, r.link, r.mem, Config{})
	buf := make([]byte, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.Read(sim.Time(i)*20_000, memBase, buf)
	}
}

func BenchmarkGather2x256(b *testing.B) {
	r := newRig(b, Config{})
	e := New(env.Env{Eng: r.eng, Ctr: r.ctr}, r.link, r.mem, Config{})
	keys := NewKeys()
	keys.Add(MR{Key: 0x100100, PDN: 3, Addr: memBase, Length: 0x10000, HCAVA: memBase})
	sges := []mlx5.DataFields{{ByteCount: 256, LKey: 0x100100, Addr: memBase}, {ByteCount: 256, LKey: 0x100100, Addr: memBase + 0x1000}}
	buf := make([]byte, 512)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.Gather(sim.Time(i)*40_000, 3, sges, keys, buf)
	}
}

func BenchmarkWriteVisible64(b *testing.B) {
	r := newRig(b, Config{})
	e := New(env.Env{Eng: r.eng, Ctr: r.ctr}, r.link, r.mem, Config{})
	buf := make([]byte, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now := sim.Time(i) * 20_000
		e.WriteVisible(now, memBase, buf)
		r.eng.RunUntil(now + 10_000)
	}
}

// A device read of bytes a deferred write has not landed yet sees them:
// PCIe keeps a read behind the posted writes issued before it. Bytes it
// does not touch land on time; Drain lands everything at once.
func TestReadSeesEarlierWrites(t *testing.T) {
	r := newRig(t, Config{})
	done, _, err := r.dma.WriteVisible(0, memBase+0x300, []byte("abcd"))
	require.NoError(t, err)
	_, _, err = r.dma.WriteVisible(0, memBase+0x400, []byte("wxyz"))
	require.NoError(t, err)
	view, _ := r.mem.Slice(memBase+0x400, 4)
	got := make([]byte, 2)
	_, _, err = r.dma.Read(1, memBase+0x302, got)
	require.NoError(t, err)
	require.Equal(t, "cd", string(got), "the read sees the write issued before it")
	require.Equal(t, make([]byte, 4), view, "a write the read does not touch still lands at its time")
	r.dma.Drain()
	require.Equal(t, "wxyz", string(view))
	r.eng.RunUntil(done + sim.Time(sim.Microsecond))
	require.Equal(t, "wxyz", string(view), "a drained write does not land twice (nor stale)")
	require.Zero(t, r.eng.Pending())
}

// A device write of bytes an earlier deferred write has not landed yet
// wins: posted writes stay in order, so the earlier one must not land
// over it afterwards (a WRITE's payload, then a SEND scattered over the
// same buffer).
func TestWriteAfterDeferredWrite(t *testing.T) {
	r := newRig(t, Config{})
	done, _, err := r.dma.WriteVisible(0, memBase+0x300, []byte("abcd"))
	require.NoError(t, err)
	_, _, err = r.dma.Write(1, memBase+0x302, []byte("XY"))
	require.NoError(t, err)
	view, _ := r.mem.Slice(memBase+0x300, 4)
	require.Equal(t, "abXY", string(view), "the earlier write is stored before the later one")
	r.eng.RunUntil(done + sim.Time(sim.Microsecond))
	require.Equal(t, "abXY", string(view), "the earlier write does not land over the later one")
	require.Zero(t, r.eng.Pending())
}

// A device access that touches a deferred write stores it early; an
// earlier deferred write that overlaps that one (but not the access) is
// stored before it, or it would land over the later bytes at its own time.
// Two WRITEs of one QP to overlapping ranges, the later one's bytes then
// read by a READ (or overwritten by a SEND) before the earlier lands.
func TestSettleKeepsOverlappingWritesInOrder(t *testing.T) {
	cases := []struct {
		name   string
		access func(r *rig) error
		want   string
	}{
		{"read", func(r *rig) error {
			_, _, err := r.dma.Read(1, memBase+0x308, make([]byte, 4))
			return err
		}, "aaaabbbbbbbb"},
		{"write", func(r *rig) error {
			_, _, err := r.dma.Write(1, memBase+0x30a, []byte("XY"))
			return err
		}, "aaaabbbbbbXY"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{})
			_, _, err := r.dma.WriteVisible(0, memBase+0x300, []byte("aaaaaaaa"))
			require.NoError(t, err)
			done, _, err := r.dma.WriteVisible(0, memBase+0x304, []byte("bbbbbbbb"))
			require.NoError(t, err)
			require.NoError(t, tc.access(r))
			view, _ := r.mem.Slice(memBase+0x300, 12)
			r.eng.RunUntil(done + sim.Time(sim.Microsecond))
			require.Equal(t, tc.want, string(view), "the earlier write does not land over the later one")
			require.Zero(t, r.eng.Pending())
		})
	}
}
