package bar

import (
	"encoding/binary"
	"flag"
	"fmt"
	"github.com/softnic/softnic/env"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Fuzz input encoding. Byte 0 picks the configuration; then a sequence of
// ops, each an opcode byte (mod 5) and its operands:
//
//	0 Store64  off:u16 val:u64 (little-endian operands)
//	1 Store32  off:u16 val:u32
//	2 Load32   off:u16
//	3 Flush
//	4 Advance  n:u8 (n × 20 ns)
//
// An offset with bit 15 set addresses UAR page FirstUAR+bits[14:12] (pages
// 4..7 are past NumUARs) at bits[11:0]; otherwise BAR0 bits[13:0] (init
// segment and the unknown space after it). Alignment is not forced.
const (
	fzStore64 = iota
	fzStore32
	fzLoad32
	fzFlush
	fzAdvance
	fzOps
)

// fuzzConfig is BAR0's configuration and that of the host CPU in front
// of it, chosen by sel.
func fuzzConfig(sel byte) (Config, host.Config) {
	c := DefaultConfig()
	c.NumUARs = 4
	c.BFRegSize = [...]int{512, 256, 0, 512}[sel&3]
	c.InitDelay = sim.Microsecond
	hc := hostFor(c)
	hc.WCLines = 1 + int(sel>>2&7)
	hc.UARNonCached = sel&0x20 != 0
	return c, hc
}

func fuzzOff(c *Config, o uint16) uint64 {
	if o&0x8000 != 0 {
		return (uint64(c.FirstUAR)+uint64(o>>12&7))*mlx5.UARPageSize + uint64(o&0xfff)
	}
	return uint64(o & 0x3fff)
}

// checkingHandler fails the test on any call a well-behaved device must
// never make.
type checkingHandler struct {
	t     *testing.T
	cfg   Config
	calls int
}

func (h *checkingHandler) uarOK(uar uint32) {
	if uar < h.cfg.FirstUAR || uar >= h.cfg.FirstUAR+uint32(h.cfg.NumUARs) {
		h.t.Fatalf("call for UAR %d outside [%d, +%d)", uar, h.cfg.FirstUAR, h.cfg.NumUARs)
	}
}

func (h *checkingHandler) Doorbell(_ sim.Time, uar uint32, bfreg int, _ [8]byte) {
	h.calls++
	h.uarOK(uar)
	maxRegs := 4
	if h.cfg.BFRegSize == 0 {
		maxRegs = 8
	}
	if bfreg < 0 || bfreg >= maxRegs {
		h.t.Fatalf("doorbell for bfreg %d", bfreg)
	}
}

func (h *checkingHandler) BlueFlame(_ sim.Time, uar uint32, bfreg int, wqe []byte) {
	h.calls++
	h.uarOK(uar)
	if h.cfg.BFRegSize == 0 || bfreg < 0 || bfreg > 3 {
		h.t.Fatalf("BlueFlame for bfreg %d with bf_reg_size %d", bfreg, h.cfg.BFRegSize)
	}
	if len(wqe) == 0 || len(wqe)%64 != 0 || len(wqe) > h.cfg.BFRegSize/2 {
		h.t.Fatalf("BlueFlame WQE of %d bytes", len(wqe))
	}
	ds := int(wqe[7] & 0x3f)
	if ds == 0 || (ds*16+63)&^63 != len(wqe) {
		h.t.Fatalf("BlueFlame WQE of %d bytes with ds %d", len(wqe), ds)
	}
}

func (h *checkingHandler) CQArm(_ sim.Time, uar uint32, _ [8]byte) {
	h.calls++
	h.uarOK(uar)
}

func FuzzMMIO(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		cfg, hcfg := fuzzConfig(data[0])
		data = data[1:]
		eng := sim.NewEngine()
		link := pcie.NewLink(pcie.Gen3x8())
		h := &checkingHandler{t: t, cfg: cfg}
		ctr := &trace.Counters{}
		rec := trace.NewRecorder()
		dev := New(env.Env{Eng: eng, Rec: rec, Ctr: ctr}, link, h, cfg)
		b := host.New(eng, rec, ctr, 0, dev, hcfg) // the MMIO surface: a host CPU in front of BAR0
		stored := 0
		for len(data) > 0 {
			op := data[0] % fzOps
			data = data[1:]
			switch op {
			case fzStore64:
				if len(data) < 10 {
					return
				}
				b.Store64(fuzzOff(&cfg, binary.LittleEndian.Uint16(data)), binary.LittleEndian.Uint64(data[2:]))
				data = data[10:]
				stored += 8
			case fzStore32:
				if len(data) < 6 {
					return
				}
				b.Store32(fuzzOff(&cfg, binary.LittleEndian.Uint16(data)), binary.LittleEndian.Uint32(data[2:]))
				data = data[6:]
				stored += 4
			case fzLoad32:
				if len(data) < 2 {
					return
				}
				b.Load32(fuzzOff(&cfg, binary.LittleEndian.Uint16(data)))
				data = data[2:]
			case fzFlush:
				b.Flush()
			case fzAdvance:
				if len(data) < 1 {
					return
				}
				eng.Advance(sim.Duration(data[0]) * 20 * sim.Nanosecond)
				data = data[1:]
			}
			// The CPU never emits more bytes than it stored.
			if got := link.Totals().HostMWr.PayloadBytes; got > stored {
				t.Fatalf("%d bytes emitted for %d stored", got, stored)
			}
		}
		b.Flush()
		eng.Advance(10 * sim.Microsecond)
		if got := link.Totals().HostMWr.PayloadBytes; got > stored {
			t.Fatalf("%d bytes emitted for %d stored", got, stored)
		}
		handled := ctr.Get("bar_doorbell") + ctr.Get("bar_blueflame") + ctr.Get("bar_cq_arm")
		if handled != uint64(h.calls) {
			t.Fatalf("handler saw %d calls, counters say %d", h.calls, handled)
		}
	})
}

// fuzzOps encodes ops for seeds.
type fuzzEnc []byte

func (e fuzzEnc) store64(o uint16, v uint64) fuzzEnc {
	e = append(e, fzStore64)
	e = binary.LittleEndian.AppendUint16(e, o)
	return binary.LittleEndian.AppendUint64(e, v)
}

func (e fuzzEnc) store32(o uint16, v uint32) fuzzEnc {
	e = append(e, fzStore32)
	e = binary.LittleEndian.AppendUint16(e, o)
	return binary.LittleEndian.AppendUint32(e, v)
}

func (e fuzzEnc) load32(o uint16) fuzzEnc {
	return binary.LittleEndian.AppendUint16(append(e, fzLoad32), o)
}

func (e fuzzEnc) flush() fuzzEnc         { return append(e, fzFlush) }
func (e fuzzEnc) advance(n byte) fuzzEnc { return append(e, fzAdvance, n) }
func uarOff(page, rel uint16) uint16     { return 0x8000 | page<<12 | rel }
func (e fuzzEnc) bf(o uint16, w []byte) fuzzEnc {
	for i := 0; i < len(w); i += 8 {
		e = e.store64(o+uint16(i), binary.LittleEndian.Uint64(w[i:]))
	}
	return e
}

// fuzzSeeds are the inputs of testdata/fuzz/FuzzMMIO (regenerate them with
// go test -run TestFuzzSeedsMatchCorpus -update-corpus).
func fuzzSeeds() [][]byte {
	bf := uarOff(0, 0x800)
	return [][]byte{
		// 64 B BlueFlame post + fence, then the other buffer, 512 B bfregs.
		fuzzEnc{0}.bf(bf, wqe(0x11, 0, 4)).flush().bf(bf+256, wqe(0x11, 1, 3)).flush().advance(50),
		// 128 B and 256 B posts on bfreg 1 with 256 B bfregs, no fences.
		fuzzEnc{1}.bf(uarOff(1, 0x900), wqe(0x12, 0, 8)).advance(100).bf(uarOff(1, 0x900), wqe(0x12, 2, 8)),
		// doorbells and a CQ arm, eviction with one WC line.
		fuzzEnc{0}.store64(bf, 0x0a000000_00000100).store64(uarOff(2, 0x20), 0x77000000_42000010).store64(uarOff(3, 0xa00), 5).flush().advance(255),
		// no-BlueFlame doorbell slots, uncached UARs.
		fuzzEnc{2 | 0x20}.store64(uarOff(0, 0x900), 1).store64(uarOff(0, 0xf00), 2).store64(uarOff(0, 0x800), 3),
		// init segment bring-up and bad accesses.
		fuzzEnc{0}.load32(0x4).store32(0x10, 0).store32(0x14, 0x00300012).load32(0x14).load32(0x1fc).advance(100).load32(0x1fc).
			store32(0x18, 0x01000000).store64(0x0, 1).load32(0x3).store32(0x1fe, 1).load32(0x2100).load32(uarOff(5, 0x800)),
		// torn BF: first line only, then a new WQE; a line without ctrl.
		fuzzEnc{3}.bf(bf, wqe(0x13, 0, 8)[:64]).flush().bf(bf, wqe(0x13, 2, 4)).flush().bf(bf+64, wqe(0x13, 3, 8)[64:]).flush().advance(200),
	}
}

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzMMIO from fuzzSeeds")

// TestFuzzSeedsMatchCorpus keeps the committed seed corpus equal to
// fuzzSeeds, in the go test fuzz v1 file format.
func TestFuzzSeedsMatchCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzMMIO")
	for i, s := range fuzzSeeds() {
		name := filepath.Join(dir, fmt.Sprintf("seed-%02d", i))
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if *updateCorpus {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(name, []byte(want), 0o644))
		}
		got, err := os.ReadFile(name)
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	}
}
