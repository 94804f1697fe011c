package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
)

func init() {
	register("trace", "trace one post_send end to end through two emulated NICs", runTrace)
}

type traceOpts struct {
	op, profile, pcap, chrome, faults string
	size, mtu, batch                  int
	inline, noBF, json, hex, counters bool
}

// stageJSON is one line of the walk in --json output.
type stageJSON struct {
	Name      string  `json:"name"`
	Component string  `json:"component"`
	Node      int     `json:"node"`
	StartNS   float64 `json:"start_ns"`
	EndNS     float64 `json:"end_ns"`
	Bytes     int     `json:"bytes"`
	TLPs      int     `json:"tlps"`
	Detail    string  `json:"detail,omitempty"`
}

// wqeJSON describes one posted WQE in --json output.
type wqeJSON struct {
	WQEHex   string `json:"wqe_hex"`
	Opcode   uint8  `json:"opcode"`
	WQEIndex uint16 `json:"wqe_index"`
	QPN      uint32 `json:"qpn"`
	DS       uint8  `json:"ds"`
	FMCESE   uint8  `json:"fm_ce_se"`
	RAddr    uint64 `json:"raddr"`
	RKey     uint32 `json:"rkey"`
	LKey     uint32 `json:"lkey"`
	LAddr    uint64 `json:"laddr"`
	Length   uint32 `json:"length"`
}

type traceJSON struct {
	Profile  string            `json:"profile"`
	Op       string            `json:"op"`
	Size     int               `json:"size"`
	MTU      int               `json:"mtu"`
	Path     string            `json:"path"`
	Batch    int               `json:"batch"`
	Stages   []stageJSON       `json:"stages"`
	TotalNS  float64           `json:"total_ns"`
	WQEs     []wqeJSON         `json:"wqes"`
	Warnings []stageJSON       `json:"warnings"`
	Counters map[string]uint64 `json:"counters"`
	DataOK   bool              `json:"data_ok"`
	// AllCounters (with --counters): every non-zero counter by owner,
	// "node0", "node1" (the devices) and "wire" (the link).
	AllCounters map[string]map[string]uint64 `json:"all_counters,omitempty"`
	// Faults (with --faults): the plan in words.
	Faults string `json:"faults,omitempty"`
}

var traceOps = map[string]provider.WROpcode{
	"send": provider.WRSend, "send_imm": provider.WRSendImm, "write": provider.WRRDMAWrite,
	"write_imm": provider.WRRDMAWriteImm, "read": provider.WRRDMARead,
}

func runTrace(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o traceOpts
	fs.StringVar(&o.op, "op", "write", "operation: send|send_imm|write|write_imm|read")
	fs.IntVar(&o.size, "size", 64, "message size in bytes")
	fs.IntVar(&o.mtu, "mtu", 1024, "path MTU (256..4096)")
	fs.IntVar(&o.batch, "batch", 1, "post a list of N WQEs with one doorbell")
	fs.BoolVar(&o.inline, "inline", false, "send the payload inline in the WQE")
	fs.BoolVar(&o.noBF, "no-bf", false, "ring the 8-byte doorbell instead of BlueFlame")
	fs.BoolVar(&o.json, "json", false, "print the walk as one JSON object")
	fs.BoolVar(&o.hex, "hexdump", false, "print each WQE and CQE as annotated hex")
	fs.StringVar(&o.pcap, "pcap", "", "write every wire frame to this pcap file")
	fs.StringVar(&o.chrome, "chrome-trace", "", "write Chrome trace JSON (opens in Perfetto) to this file")
	fs.StringVar(&o.profile, "profile", "", "device profile JSON (default: built-in cx5-gen3x16)")
	fs.StringVar(&o.faults, "faults", "", "fault plan JSON applied to the simulated wire (see softnic faults --explain)")
	fs.BoolVar(&o.counters, "counters", false, "after the walk, print every non-zero counter of both devices and the wire")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softnic trace: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := doTrace(o, stdout); err != nil {
		fmt.Fprintln(stderr, "softnic trace:", err)
		return 1
	}
	return 0
}

func doTrace(o traceOpts, stdout io.Writer) error {
	wrOp, ok := traceOps[o.op]
	if !ok {
		return fmt.Errorf("unknown --op %q", o.op)
	}
	if o.size < 0 || o.size > 1<<30 {
		return fmt.Errorf("--size %d out of range", o.size)
	}
	if o.batch < 1 || o.batch > 256 {
		return fmt.Errorf("--batch %d out of range 1..256", o.batch)
	}
	if mlx5.MTUFromBytes(o.mtu) == 0 {
		return fmt.Errorf("--mtu %d is not one of 256, 512, 1024, 2048, 4096", o.mtu)
	}
	cfg := testbed.DefaultConfig()
	var err error
	if o.profile != "" {
		var b []byte
		b, err = os.ReadFile(o.profile)
		if err != nil {
			return err
		}
		if cfg.Device, err = device.ParseSpec(b); err != nil {
			return err
		}
	}
	if cfg.Faults, err = loadFaults(o.faults); err != nil {
		return err
	}
	cfg.Trace = true
	if need := 2*o.size*o.batch + (8 << 20); need > cfg.MemSize {
		cfg.MemSize = need
	}
	w, err := testbed.New(cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	var pcapOut *os.File
	if o.pcap != "" {
		if pcapOut, err = os.Create(o.pcap); err != nil {
			return err
		}
		defer pcapOut.Close()
		pw, err := trace.NewPcapWriter(pcapOut)
		if err != nil {
			return err
		}
		w.Link.AddTap(func(t sim.Time, f []byte) { _ = pw.WriteFrame(t, f) })
	}
	bufSize := o.size*o.batch + 4096
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: o.mtu, BufSize: bufSize, SQDepth: o.batch + 8, RQDepth: o.batch + 8, MaxInline: 512})
	if err != nil {
		return err
	}
	req, rsp := eps[0], eps[1]
	fill(req.Buf.Bytes[:o.size*o.batch], 1)
	fill(rsp.Buf.Bytes[:o.size*o.batch], 101)
	consumesRecv := wrOp == provider.WRSend || wrOp == provider.WRSendImm || wrOp == provider.WRRDMAWriteImm
	if consumesRecv {
		rwrs := make([]provider.RecvWR, o.batch)
		for i := range rwrs {
			rwrs[i] = provider.RecvWR{WRID: uint64(1000 + i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i*o.size), uint32(o.size))}}
		}
		if _, err := rsp.QP.PostRecv(rwrs); err != nil {
			return err
		}
	}
	w.Settle(0)
	w.Rec.Reset()
	req.QP.SetBlueFlame(!o.noBF)
	wrs := make([]provider.SendWR, o.batch)
	for i := range wrs {
		wr := provider.SendWR{WRID: uint64(i + 1), Opcode: wrOp, Flags: provider.SendSignaled, Imm: 0x1234abcd,
			RemoteAddr: rsp.MR.Addr + uint64(i*o.size), RKey: rsp.MR.RKey}
		if o.size > 0 {
			wr.SGL = []provider.SGE{req.MR.SGE(uint64(i*o.size), uint32(o.size))}
		}
		if o.inline {
			wr.Flags |= provider.SendInline
		}
		wrs[i] = wr
	}
	first := req.QP.SQProducer()
	t0 := w.Eng.Now()
	if _, err := req.QP.PostSend(wrs); err != nil {
		return err
	}
	wcs, err := testbed.Wait(req.SendCQ, o.batch)
	if err != nil {
		return fmt.Errorf("waiting for the requester CQE: %w", err)
	}
	total := w.Eng.Now().Sub(t0)
	for _, wc := range wcs {
		if wc.Status != provider.WCSuccess {
			if o.counters && !o.json {
				// What went wrong is in the counters (a fault plan that
				// outlasts the retries, say): show them anyway.
				w.Settle(0)
				fmt.Fprintln(stdout, "counters (non-zero):")
				writeCounterLines(stdout, worldCounters(w))
			}
			return fmt.Errorf("WR %d completed with %v", wc.WRID, wc.Status)
		}
	}
	if consumesRecv {
		if _, err := testbed.Wait(rsp.RecvCQ, o.batch); err != nil {
			return fmt.Errorf("waiting for the responder CQE: %w", err)
		}
	}
	w.Settle(0)
	n := o.size * o.batch
	dataOK := bytes.Equal(req.Buf.Bytes[:n], rsp.Buf.Bytes[:n])

	events := append([]trace.Event(nil), w.Rec.Events()...)
	sort.SliceStable(events, func(i, j int) bool {
		if events[i].Start != events[j].Start {
			return events[i].Start < events[j].Start
		}
		return stageRank(events[i].Name) < stageRank(events[j].Name)
	})
	var stages, warns []stageJSON
	for _, e := range events {
		if e.Component == "dma" && (e.Name == "dma_read" || e.Name == "dma_write") {
			continue // the DMA engine's own record of a transfer a named stage already shows
		}
		s := stageJSON{Name: e.Name, Component: e.Component, Node: e.Node, StartNS: e.Start.Sub(t0).NS(), EndNS: e.End.Sub(t0).NS(),
			Bytes: e.Bytes, TLPs: e.TLPs, Detail: e.Detail}
		if e.Level == trace.Warn {
			warns = append(warns, s)
		} else {
			stages = append(stages, s)
		}
	}
	var wqes []wqeJSON
	idx := first
	for i := 0; i < o.batch; i++ {
		b, err := req.QP.WQE(idx)
		if err != nil {
			return err
		}
		wqes = append(wqes, describeWQE(b))
		idx += uint16(mlx5.WQEBBs(int(mlx5.CtrlSeg(b).DS())))
	}
	if o.chrome != "" {
		f, err := os.Create(o.chrome)
		if err != nil {
			return err
		}
		if err := trace.WriteChrome(f, events); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	path := "blueflame"
	if o.noBF || o.batch > 1 {
		path = "doorbell"
	}
	var all map[string]map[string]uint64
	if o.counters {
		all = worldCounters(w)
	}
	explained := ""
	if cfg.Faults != nil {
		explained = cfg.Faults.Explain()
	}
	if o.json {
		ctr := w.Hosts[0].Dev.Counters().Snapshot()
		for k, v := range w.Hosts[1].Dev.Counters().Snapshot() {
			ctr["peer."+k] = v
		}
		out := traceJSON{Profile: cfg.Device.Name, Op: o.op, Size: o.size, MTU: o.mtu, Path: path, Batch: o.batch,
			Stages: stages, TotalNS: total.NS(), WQEs: wqes, Warnings: warns, Counters: ctr, DataOK: dataOK,
			AllCounters: all, Faults: explained}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(stdout, "softnic trace: %s %d B x%d, %s path, MTU %d, profile %s\n", strings.ToUpper(o.op), o.size, o.batch, path, o.mtu, cfg.Device.Name)
	if explained != "" {
		fmt.Fprintf(stdout, "fault plan %s:\n", o.faults)
		for _, l := range strings.Split(strings.TrimRight(explained, "\n"), "\n") {
			fmt.Fprintf(stdout, "  %s\n", l)
		}
	}
	fmt.Fprintf(stdout, "%3s  %-14s %-9s %4s %12s %12s %10s %7s %5s\n", "#", "stage", "component", "node", "start_ns", "end_ns", "dur_ns", "bytes", "tlps")
	for i, s := range stages {
		fmt.Fprintf(stdout, "%3d  %-14s %-9s %4d %12.3f %12.3f %10.3f %7d %5d\n", i+1, s.Name, s.Component, s.Node, s.StartNS, s.EndNS, s.EndNS-s.StartNS, s.Bytes, s.TLPs)
	}
	for _, s := range warns {
		fmt.Fprintf(stdout, "WARN %s %s node %d @%.3f ns: %s\n", s.Component, s.Name, s.Node, s.StartNS, s.Detail)
	}
	verdict := "data verified"
	if !dataOK {
		verdict = "DATA MISMATCH"
	}
	fmt.Fprintf(stdout, "total post → CQE: %.3f ns (%s, %d bytes)\n", total.NS(), verdict, n)
	if o.hex {
		for i, b := range wqes {
			raw, _ := hex.DecodeString(b.WQEHex)
			fmt.Fprintf(stdout, "\nWQE %d (wqe_index %d):\n%s", i, b.WQEIndex, annotateWQE(raw))
		}
		for i := 0; i < o.batch; i++ {
			fmt.Fprintf(stdout, "\nrequester CQE %d:\n%s", i, annotateCQE(req.SendCQ.CQE(uint32(i))))
		}
	}
	if all != nil {
		fmt.Fprintln(stdout, "\ncounters (non-zero):")
		writeCounterLines(stdout, all)
	}
	if !dataOK {
		return errors.New("data mismatch between requester and responder buffers")
	}
	return nil
}

// worldCounters is every non-zero counter of the world by owner: "node0"
// and "node1" (each device's hw counters: its engines and transport) and
// "wire" (the link, fault actions included).
func worldCounters(w *testbed.World) map[string]map[string]uint64 {
	nonZero := func(m map[string]uint64) map[string]uint64 {
		out := map[string]uint64{}
		for k, v := range m {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	all := map[string]map[string]uint64{"wire": nonZero(w.Wire.Snapshot())}
	for i, h := range w.Hosts {
		if h != nil && (i == 0 || h != w.Hosts[0]) {
			all[fmt.Sprintf("node%d", h.Node)] = nonZero(h.Dev.HWCounters())
		}
	}
	return all
}

// writeCounterLines prints "<owner> <name> <value>" lines, sorted by owner
// then name.
func writeCounterLines(out io.Writer, all map[string]map[string]uint64) {
	owners := make([]string, 0, len(all))
	for o := range all {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		names := make([]string, 0, len(all[o]))
		for n := range all[o] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(out, "%s %s %d\n", o, n, all[o][n])
		}
	}
}

// fill writes a deterministic pattern.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
}

func describeWQE(b []byte) wqeJSON {
	c := mlx5.CtrlSeg(b)
	j := wqeJSON{WQEHex: hex.EncodeToString(b), Opcode: uint8(c.Opcode()), WQEIndex: c.WQEIndex(), QPN: c.QPN(), DS: c.DS(), FMCESE: c.FMCESE()}
	segs := b[mlx5.CtrlSegSize:]
	switch c.Opcode() {
	case mlx5.OpRDMAWrite, mlx5.OpRDMAWriteImm, mlx5.OpRDMARead:
		if len(segs) >= mlx5.RaddrSegSize {
			r := mlx5.RaddrSeg(segs)
			j.RAddr, j.RKey = r.RAddr(), r.RKey()
			segs = segs[mlx5.RaddrSegSize:]
		}
	}
	if len(segs) >= mlx5.DataSegSize && !mlx5.IsInline(mlx5.DataSeg(segs).ByteCount()) {
		d := mlx5.DataSeg(segs)
		j.LKey, j.LAddr, j.Length = d.LKey(), d.Addr(), d.ByteCount()
	}
	return j
}

func hexLine(b []byte) string {
	var s strings.Builder
	for i, x := range b {
		if i > 0 && i%4 == 0 {
			s.WriteByte(' ')
		}
		fmt.Fprintf(&s, "%02x", x)
	}
	return s.String()
}

func annotateWQE(b []byte) string {
	var s strings.Builder
	c := mlx5.CtrlSeg(b)
	f := c.Fields()
	fmt.Fprintf(&s, "  ctrl   %s  opcode %v(%#x) wqe_index %d qpn %#x ds %d fm_ce_se %#02x imm %#x\n",
		hexLine(b[:16]), f.Opcode, uint8(f.Opcode), f.WQEIndex, f.QPN, f.DS, f.FMCESE, f.Imm)
	segs := b[16:]
	if f.Opcode == mlx5.OpRDMAWrite || f.Opcode == mlx5.OpRDMAWriteImm || f.Opcode == mlx5.OpRDMARead {
		r := mlx5.RaddrSeg(segs)
		fmt.Fprintf(&s, "  raddr  %s  raddr %#x rkey %#x\n", hexLine(segs[:16]), r.RAddr(), r.RKey())
		segs = segs[16:]
	}
	for len(segs) >= 16 {
		h := mlx5.DataSeg(segs).ByteCount()
		if mlx5.IsInline(h) {
			n := int(mlx5.InlineSeg(segs).Len())
			sz := mlx5.InlineSegSize(n)
			if sz > len(segs) {
				sz = len(segs)
			}
			fmt.Fprintf(&s, "  inline %s  %d bytes inline\n", hexLine(segs[:4]), n)
			for off := 4; off < sz; off += 16 {
				end := min(off+16, sz)
				fmt.Fprintf(&s, "         %s\n", hexLine(segs[off:end]))
			}
			segs = segs[sz:]
			continue
		}
		d := mlx5.DataSeg(segs)
		fmt.Fprintf(&s, "  data   %s  byte_count %d lkey %#x addr %#x\n", hexLine(segs[:16]), d.ByteCount(), d.LKey(), d.Addr())
		segs = segs[16:]
	}
	return s.String()
}

func annotateCQE(b []byte) string {
	var s strings.Builder
	c := mlx5.CQE64(b)
	for off := 0; off < 64; off += 16 {
		fmt.Fprintf(&s, "  +%02x  %s\n", off, hexLine(b[off:off+16]))
	}
	f := c.Fields()
	fmt.Fprintf(&s, "  op_own %#02x: opcode %v owner %v se %v; wqe_counter %d qpn %#x wqe_opcode %#x byte_cnt %d",
		c.OpOwn(), f.Opcode, f.Owner, f.SE, f.WQECounter, f.QPN, f.WQEOpcode, f.ByteCnt)
	if c.IsError() {
		fmt.Fprintf(&s, " syndrome %v vendor %#x", f.Syndrome, f.VendorErrSynd)
	}
	s.WriteByte('\n')
	return s.String()
}

// walkOrder is the order of the stages of one post_send (DESIGN.md §2); it
// breaks ties between stages that start at the same instant.
var walkOrder = []string{"wqe_build", "dbr_update", "bf_mmio", "doorbell_mmio", "wc_flush", "pcie_tlp", "wqe_fetch",
	"payload_dma", "packetize", "wire", "responder", "ack", "ack_rx", "cqe_write", "poll"}

func stageRank(name string) int {
	for i, n := range walkOrder {
		if n == name {
			return i
		}
	}
	return len(walkOrder)
}
