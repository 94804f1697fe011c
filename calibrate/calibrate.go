package calibrate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
)

// Kind says how a row is held: a model identity (the equation itself,
// 0.5%) or a measurement of the model against a published measurement
// (10%), or a band (within 10% of its edges).
type Kind int

// Row kinds.
const (
	Identity Kind = iota
	Measurement
	Band
)

// Tolerances, as the issue sets them.
const (
	IdentityTol    = 0.005
	MeasurementTol = 0.10
)

// Row is one anchor: the published figure, softnic's, and the error.
type Row struct {
	Quantity string
	Ref      float64 // the published value (Band: low edge)
	RefHigh  float64 // Band: high edge
	Model    float64
	Unit     string
	Source   string // timing.md section
	Kind     Kind
}

// Err is the relative error (Band: 0 inside the band, else the distance
// to the nearer edge over that edge).
func (r Row) Err() float64 {
	switch r.Kind {
	case Band:
		switch {
		case r.Model < r.Ref:
			return (r.Model - r.Ref) / r.Ref
		case r.Model > r.RefHigh:
			return (r.Model - r.RefHigh) / r.RefHigh
		}
		return 0
	}
	return (r.Model - r.Ref) / r.Ref
}

// Tol is the row's tolerance.
func (r Row) Tol() float64 {
	if r.Kind == Identity {
		return IdentityTol
	}
	return MeasurementTol
}

// OK reports whether the row is within its tolerance.
func (r Row) OK() bool { return math.Abs(r.Err()) <= r.Tol() }

// Table is one anchor's rows for one profile.
type Table struct {
	Anchor  string
	Profile string
	Note    string
	Rows    []Row
}

// pcieRef are timing.md §1.3's model outputs per link: R_raw, R_tlp,
// 64 B write, 64 B read, 256 B write, 256 B read (Gb/s).
var pcieRef = map[[2]int][6]float64{
	{3, 8}:  {63.02, 57.88, 42.1, 44.1, 52.9, 53.7},
	{3, 16}: {126.0, 113.7, 82.7, 86.6, 104.0, 105.5},
	{4, 16}: {252.1, 227.4, 165.4, 173.3, 207.9, 210.9},
	{5, 16}: {504.1, 454.8, 330.8, 346.5, 415.8, 421.8},
}

// kaliaMMIO is timing.md §3.1's WC MMIO 64 B line rate (M lines/s) per
// link: the paper's figure for Gen3 x16, derived for the others.
var kaliaMMIO = map[[2]int]struct {
	v   float64
	src string
}{
	{3, 8}:  {87.5, "timing.md §3.1 (derived: half of Gen3 x16)"},
	{3, 16}: {175, "timing.md §3.1 (Kalia et al., paper)"},
	{4, 16}: {350, "timing.md §3.1 (derived)"},
	{5, 16}: {700, "timing.md §3.1 (derived)"},
}

// dmaReadRef is timing.md §2.1's DMA read medians (ns) by size.
var dmaReadRef = []struct {
	size int
	ns   float64
}{{8, 533}, {64, 546}, {256, 626}, {512, 706}, {1024, 853}, {1520, 986}, {2048, 1133}}

// Profile computes every anchor's table for p.
func Profile(p profile.Profile) ([]Table, error) {
	s := p.Device.PCIe
	key := [2]int{s.Gen, s.Lanes}
	var ts []Table
	if ref, ok := pcieRef[key]; ok {
		t := Table{Anchor: "PCIe bandwidth equations", Profile: p.Name,
			Note: fmt.Sprintf("Gen%d x%d, MPS %d, MRRS %d; pcie-bench's equations (pcie.Spec) against its published outputs.", s.Gen, s.Lanes, s.MPS, s.MRRS)}
		vals := [6]float64{s.RawGbps(), s.TLPGbps(), s.WriteGoodput(64), s.ReadGoodput(64), s.WriteGoodput(256), s.ReadGoodput(256)}
		for i, q := range []string{"R_raw", "R_tlp", "64 B DMA write goodput", "64 B DMA read goodput", "256 B DMA write goodput", "256 B DMA read goodput"} {
			t.Rows = append(t.Rows, Row{Quantity: q, Ref: ref[i], Model: vals[i], Unit: "Gb/s", Source: "timing.md §1.3", Kind: Identity})
		}
		// The link model reaches the equations (2000 back-to-back reads).
		// Rate between the first and the last completion, so that one
		// read's latency is not counted as time on the link.
		l := pcie.NewLink(s)
		const n = 20000
		var first, last sim.Time
		for i := 0; i < n; i++ {
			d, _ := l.DeviceRead(0, uint64(i)*64, 64)
			if i == 0 {
				first = d
			}
			last = max(last, d)
		}
		t.Rows = append(t.Rows, Row{Quantity: "64 B DMA reads, 20000 back to back on pcie.Link", Ref: ref[3],
			Model: (n - 1) * 64 * 8 / (float64(last-first) / 1e3), Unit: "Gb/s", Source: "timing.md §1.3", Kind: Measurement})
		ts = append(ts, t)
	}
	{
		t := Table{Anchor: "DMA read latency against size", Profile: p.Name,
			Note: "One outstanding read, LLC-warm; the published medians are NFP-6000 on Gen3 x8 behind a Xeon E5-2620 v3 (the host terms are calibrated on them and reused for every profile)."}
		for _, r := range dmaReadRef {
			done, _ := pcie.NewLink(s).DeviceRead(0, 0x100000, r.size)
			t.Rows = append(t.Rows, Row{Quantity: fmt.Sprintf("%d B read", r.size), Ref: r.ns, Model: float64(done) / 1e3, Unit: "ns", Source: "timing.md §2.1", Kind: Measurement})
		}
		ts = append(ts, t)
	}
	if k, ok := kaliaMMIO[key]; ok {
		ks := s.WithHeaders(26, 26, 22)
		t := Table{Anchor: "Kalia et al.: MMIO line rate and doorbell-batching bounds", Profile: p.Name,
			Note: "Kalia's constants (request 26 B, completion 22 B, C_rc 128 B). The BlueFlame and doorbell-batch bounds are the published Connect-IB measurements (80 and 101.6 Mops on Gen3 x16) against the model's PCIe bound for the same traffic (2 WC lines per UD WQE; one 128 B slot read per WQE); shown for Gen3 x16 only."}
		t.Rows = append(t.Rows, Row{Quantity: "WC MMIO 64 B lines/s (equation)", Ref: k.v, Model: ks.KaliaMMIOLineRate(64) / 1e6, Unit: "M/s", Source: k.src, Kind: Identity})
		l := pcie.NewLink(ks)
		var arrive sim.Time
		for i := 0; i < 2000; i++ {
			a, _ := l.HostWrite(0, uint64(i)*64, 64)
			arrive = max(arrive, a)
		}
		lines := 2000 / ((float64(arrive) - float64(s.FlightLatency)) / 1e6)
		t.Rows = append(t.Rows, Row{Quantity: "WC MMIO 64 B lines/s, 2000 on pcie.Link (DLLPs counted)", Ref: k.v, Model: lines, Unit: "M/s", Source: k.src, Kind: Measurement})
		if key == [2]int{3, 16} {
			t.Rows = append(t.Rows,
				Row{Quantity: "useful DMA-read bandwidth (equation)", Ref: 13443, Model: ks.KaliaDMAReadRate(128) / 1e6, Unit: "MB/s", Source: "timing.md §3.1", Kind: Identity},
				Row{Quantity: "UD SEND by BlueFlame (2 lines per WQE): MMIO bound vs measured", Ref: 80, Model: ks.KaliaMMIOLineRate(64) / 2 / 1e6, Unit: "Mops", Source: "timing.md §3.3", Kind: Measurement},
				Row{Quantity: "UD SEND by doorbell batches of 16 (128 B slots): DMA-read bound vs measured", Ref: 101.6, Model: ks.KaliaDMAReadRate(128) / 128 / 1e6, Unit: "Mops", Source: "timing.md §3.3", Kind: Measurement},
			)
		}
		ts = append(ts, t)
	}
	lat, err := latency(p)
	if err != nil {
		return nil, err
	}
	ts = append(ts, lat)
	return ts, nil
}

// latency is the end-to-end anchors: the perftest 2 B RC half round trip
// (ib_write_lat and ib_send_lat style ping-pongs in virtual time) and the
// BlueFlame saving on one 64 B WRITE.
func latency(p profile.Profile) (Table, error) {
	t := Table{Anchor: "End to end: perftest 2 B RC half round trip, BlueFlame saving", Profile: p.Name,
		Note: "Two NICs of this profile back to back in virtual time. write_lat: each side polls the last byte of its buffer, as ib_write_lat; send_lat: each side polls its receive CQ and keeps 16 receives posted, as ib_send_lat does with its rx_depth; 2 B inline, 1000 iterations, mean half round trip. The band is the published EDR/HDR-class figure (timing.md §4.1); a row passes within 10% of its edges."}
	wl, err := pingPong(p, false, 1000)
	if err != nil {
		return t, err
	}
	sl, err := pingPong(p, true, 1000)
	if err != nil {
		return t, err
	}
	bf, err := postToCQE(p, true)
	if err != nil {
		return t, err
	}
	db, err := postToCQE(p, false)
	if err != nil {
		return t, err
	}
	t.Rows = append(t.Rows,
		Row{Quantity: "ib_write_lat 2 B RC half RTT", Ref: 0.8, RefHigh: 1.0, Model: wl, Unit: "µs", Source: "timing.md §4.1, §7 check 7", Kind: Band},
		Row{Quantity: "ib_send_lat 2 B RC half RTT", Ref: 0.8, RefHigh: 1.0, Model: sl, Unit: "µs", Source: "timing.md §4.1", Kind: Band},
		Row{Quantity: "BlueFlame saving, 64 B WRITE post → CQE (doorbell − BlueFlame)", Ref: 0.4, RefHigh: 1.0, Model: (db - bf) / 1e3, Unit: "µs", Source: "timing.md §5.1, §7 check 7", Kind: Band},
	)
	return t, nil
}

var errStuck = errors.New("calibrate: the simulation went idle")

func world(p profile.Profile) (*testbed.World, [2]*testbed.Endpoint, error) {
	return worldOf(p, 1024, 4096)
}

// worldOf is two NICs of p back to back with an RC pair at mtu, each
// side a buf-byte buffer.
func worldOf(p profile.Profile, mtu, buf int) (*testbed.World, [2]*testbed.Endpoint, error) {
	cfg := testbed.DefaultConfig()
	cfg.Device, cfg.Host, cfg.Wire = p.Device, p.Host(), p.Wire
	if need := 2*buf + (8 << 20); need > cfg.MemSize {
		cfg.MemSize = need
	}
	w, err := testbed.New(cfg)
	if err != nil {
		return nil, [2]*testbed.Endpoint{}, err
	}
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: mtu, BufSize: buf, MaxInline: 64})
	if err != nil {
		w.Close()
		return nil, eps, err
	}
	w.Settle(0)
	return w, eps, nil
}

// pingPong runs iters round trips of 2-byte inline messages and returns
// the mean half round trip in µs.
func pingPong(p profile.Profile, send bool, iters int) (float64, error) {
	w, eps, err := world(p)
	if err != nil {
		return 0, err
	}
	defer w.Close()
	wcs := make([]provider.WC, 16)
	drain := func(cq *provider.CQ) error {
		for {
			n, err := cq.Poll(wcs)
			if err != nil || n == 0 {
				return err
			}
			for _, wc := range wcs[:n] {
				if wc.Status != provider.WCSuccess {
					return fmt.Errorf("calibrate: completion %v", wc.Status)
				}
			}
		}
	}
	recv := func(e *testbed.Endpoint) error {
		_, err := e.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{e.MR.SGE(1024, 1024)}}})
		return err
	}
	if send {
		// perftest keeps a queue of receives posted (rx_depth) and
		// reposts one per completion; 16 here.
		for _, e := range eps {
			for k := 0; k < 16; k++ {
				if err := recv(e); err != nil {
					return 0, err
				}
			}
		}
	}
	// The time counted is from each post to the peer seeing the message:
	// a poll of an empty CQ advances the simulation to the next event,
	// so reaping the sender's completions in between must not count.
	var total sim.Duration
	for i := 0; i < iters; i++ {
		for side := 0; side < 2; side++ {
			me, peer := eps[side], eps[1-side]
			start := w.Eng.Now()
			seq := byte(2*i + side + 1)
			me.Buf.Bytes[1] = seq
			wr := provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled | provider.SendInline,
				SGL: []provider.SGE{me.MR.SGE(0, 2)}, RemoteAddr: peer.MR.Addr, RKey: peer.MR.RKey}
			if send {
				wr.Opcode, wr.RemoteAddr, wr.RKey = provider.WRSend, 0, 0
			}
			if _, err := me.QP.PostSend([]provider.SendWR{wr}); err != nil {
				return 0, err
			}
			// The peer spins: on the last byte of its buffer, or its CQ.
			for steps := 0; ; steps++ {
				if send {
					n, err := peer.RecvCQ.Poll(wcs[:1])
					if err != nil {
						return 0, err
					}
					if n == 1 {
						if wcs[0].Status != provider.WCSuccess {
							return 0, fmt.Errorf("calibrate: receive %v", wcs[0].Status)
						}
						if err := recv(peer); err != nil {
							return 0, err
						}
						break
					}
					if w.Eng.Pending() == 0 || steps > 1<<20 {
						return 0, errStuck
					}
					continue // Poll of an empty CQ advances the simulation
				}
				if peer.Buf.Bytes[1] == seq {
					break
				}
				if !w.Eng.Step() || steps > 1<<20 {
					return 0, errStuck
				}
			}
			total += w.Eng.Now().Sub(start)
			if err := drain(me.SendCQ); err != nil {
				return 0, err
			}
		}
	}
	return float64(total) / float64(2*iters) / 1e6, nil
}

// postToCQE is one 64 B WRITE's post → CQE time in ns, by BlueFlame or
// by doorbell.
func postToCQE(p profile.Profile, bf bool) (float64, error) {
	d, err := WriteTime(p, 64, 1024, bf)
	return float64(d) / 1e3, err
}

// WriteTime is the virtual post → CQE time of one RDMA WRITE of size bytes
// at path MTU mtu between two NICs of p, by BlueFlame or by doorbell.
func WriteTime(p profile.Profile, size, mtu int, bf bool) (sim.Duration, error) {
	w, eps, err := worldOf(p, mtu, max(size, 4096))
	if err != nil {
		return 0, err
	}
	defer w.Close()
	req, rsp := eps[0], eps[1]
	req.QP.SetBlueFlame(bf)
	start := w.Eng.Now()
	if _, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, uint32(size))}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}}); err != nil {
		return 0, err
	}
	wcs, err := testbed.Wait(req.SendCQ, 1)
	if err != nil {
		return 0, err
	}
	if wcs[0].Status != provider.WCSuccess {
		return 0, fmt.Errorf("calibrate: WRITE %v", wcs[0].Status)
	}
	return w.Eng.Now().Sub(start), nil
}

// WriteGbps is the goodput of one 1 MiB-class WRITE (WriteTime) in Gb/s.
func WriteGbps(p profile.Profile, size, mtu int) (float64, error) {
	d, err := WriteTime(p, size, mtu, true)
	if err != nil {
		return 0, err
	}
	return float64(size) * 8 / (float64(d) / float64(sim.Second)) / 1e9, nil
}

// MTUs are the path MTUs of the MTU sweep.
var MTUs = []int{256, 512, 1024, 2048, 4096}

// mtuSweep is a 1 MiB WRITE's goodput at each MTU on p.
func mtuSweep(p profile.Profile) ([]float64, error) {
	var g []float64
	for _, mtu := range MTUs {
		v, err := WriteGbps(p, 1<<20, mtu)
		if err != nil {
			return nil, err
		}
		g = append(g, v)
	}
	return g, nil
}

// All computes every profile's tables.
func All() ([]Table, error) {
	var all []Table
	for _, p := range profile.All() {
		ts, err := Profile(p)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", p.Name, err)
		}
		all = append(all, ts...)
	}
	return all, nil
}

// Markdown renders docs/calibration.md (it measures the MTU sweep of the
// default profile too).
func Markdown(w io.Writer, ts []Table) error {
	g, err := mtuSweep(profile.Default())
	if err != nil {
		return fmt.Errorf("calibrate: MTU sweep: %w", err)
	}
	sweep := make([]string, len(g))
	for i, v := range g {
		sweep[i] = fmt.Sprintf("%.1f", v)
	}
	fmt.Fprintln(w, "# Calibration: model against the published anchors")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Generated by `go run ./cmd/softnic calibrate -o docs/calibration.md`; do not edit by hand.")
	fmt.Fprintln(w, "The references cite `reference/timing.md` (the shared reference beside DESIGN.md). Every figure is")
	fmt.Fprintln(w, "virtual time or an equation, so the table is the same on every machine; `calibrate/calibrate_test.go`")
	fmt.Fprintln(w, "holds the tolerances (model identities 0.5%, measurements 10%, bands within 10% of their edges) and")
	fmt.Fprintln(w, "checks that this file is what the generator writes.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Profiles: "+strings.Join(profile.Names(), ", ")+" (`softnic profiles`).")
	cur := ""
	for _, t := range ts {
		if t.Profile != cur {
			cur = t.Profile
			p, _ := profile.Get(cur)
			fmt.Fprintf(w, "\n## Profile %s\n\n%s.\n", cur, p.Description)
		}
		fmt.Fprintf(w, "\n### %s\n\n%s\n\n", t.Anchor, t.Note)
		fmt.Fprintln(w, "| quantity | published | softnic | error | tolerance | source |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, r := range t.Rows {
			ref := fmtNum(r.Ref)
			if r.Kind == Band {
				ref = fmtNum(r.Ref) + "–" + fmtNum(r.RefHigh)
			}
			mark := ""
			if !r.OK() {
				mark = " **outside**"
			}
			fmt.Fprintf(w, "| %s | %s %s | %s | %+.2f %%%s | %s | %s |\n", r.Quantity, ref, r.Unit, fmtNum(r.Model), 100*r.Err(), mark, tolName(r), r.Source)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Also held by tests (not repeated per profile)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "- `pcie/spec_test.go` TestCheckValues: every §1.3 cell for Gen3 x8..Gen5 x16, ≥ 512 B rows, 64 B read +")
	fmt.Fprintln(w, "  write per direction (33.1 Gb/s); TestKaliaIdentities: 10 × 65 B WQEs cost 1800 B by MMIO and 1534 B by")
	fmt.Fprintln(w, "  doorbell + DMA (exact, on `pcie.Link` totals); TestCacheLineSawTooth: the 63/64/65 B and 128/129 B steps.")
	fmt.Fprintf(w, "- `test/mtu_throughput_test.go`: a 1 MiB WRITE's goodput never falls as the MTU grows (MTU 256..4096:\n")
	fmt.Fprintf(w, "  %s Gb/s on %s, post → CQE). The anomaly the model had (MTU 4096 at 75.9 Gb/s, below MTU 1024's\n", strings.Join(sweep, ", "), profile.DefaultName)
	fmt.Fprintln(w, "  91.1 at b152fe6) came from the responder holding each packet until its data landed and from 32 read tags × 512 B")
	fmt.Fprintln(w, "  requests (16 KiB of payload reads in flight, four 4 KiB packets streaming at the host's per-line rate);")
	fmt.Fprintln(w, "  ConnectX profiles now keep 256 reads outstanding (PCIe Extended Tags), pciebench-gen3x8 keeps 32.")
	fmt.Fprintln(w, "- `test/prefetch_test.go`: with the receive WQE read ahead, a 2 B SEND ping-pong costs what a WRITE-with-")
	fmt.Fprintln(w, "  immediate ping-pong costs (ib_send_lat ≈ ib_write_lat on a CX-5, timing.md §4.1).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Not yet calibrated")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "- Message rates of the NIC itself: each QP's packetizer builds one packet at a time (packetize 40")
	fmt.Fprintln(w, "  cycles at 1 GHz: 25 Mpps a QP; `softnic perf write_bw -s 64 -q 8` gives 35.3 Mpps, bound by the one")
	fmt.Fprintln(w, "  posting thread's 28 ns a WQE), where a ConnectX spreads QPs over parallel processing units")
	fmt.Fprintln(w, "  (timing.md §3.3: 80-122 Mops on Connect-IB). The Kalia rows above compare the PCIe bounds only.")
	fmt.Fprintln(w, "  One QP at MTU 256 is packetizer-bound too: `write_bw -s 65536 -m 256` 51.1 Gb/s (4 QPs: 75.6).")
	fmt.Fprintln(w, "- Receives: a QP reads up to sixty-four receive WQEs ahead (device/recvq.go; no public figure for")
	fmt.Fprintln(w, "  how many a ConnectX reads): `softnic perf send_bw -s 64` gives 18.5 Mpps on cx5-gen3x16 (write_bw")
	fmt.Fprintln(w, "  -s 64: 20.0; with one WQE ahead it gave 1.84, with sixteen 15.7), send_bw -s 4096 runs at line")
	fmt.Fprintln(w, "  rate on one QP. UD send_bw -s 64 gives 24.2 Mpps and, 2 B..4 KiB, receives every datagram (with")
	fmt.Fprintln(w, "  sixteen ahead, and the receive pipeline held until each datagram's writes landed, the receiver fell")
	fmt.Fprintln(w, "  behind and dropped them: 1063 of 2000 received at 2 B). Nothing paces a UD sender to its receiver:")
	fmt.Fprintln(w, "  a datagram lost on the way ends the run as ib_send_bw's server ends it, with the client's row and")
	fmt.Fprintln(w, "  the count the server received.")
	fmt.Fprintln(w, "- Per-stage NIC costs (core cycles) are assumptions chosen for the latency band (timing.md §5.2).")
	fmt.Fprintln(w, "- Gen4 and Gen5 profiles reuse the Gen3 host latency terms (no cited measurement).")
	return nil
}

func tolName(r Row) string {
	switch r.Kind {
	case Identity:
		return "0.5 % (identity)"
	case Band:
		return "10 % of the band"
	}
	return "10 %"
}

func fmtNum(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.1f", v)
	case v >= 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
