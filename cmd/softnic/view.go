package main

// softnic view: a walk saved with `trace --json` (or two, compared) as one
// self-contained HTML page; `trace --html FILE` writes the same page.

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/trace"
)

func init() {
	register("view", "render walks saved with `trace --json` as a self-contained HTML page", runView)
}

// viewUsage is softnic view's usage line; viewHelp its --help text,
// before the flags.
const (
	viewUsage = "usage: softnic view WALK.json [--compare OTHER.json] [-o FILE]"
	viewHelp  = viewUsage + `

Renders a walk saved with softnic trace --json as one self-contained HTML
page (docs/teaching.md); --compare puts a second walk under it on the same
time scale, with the difference per stage.

Flags:
`
)

func runView(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("view", flag.ContinueOnError)
	compare := fs.String("compare", "", "a second walk JSON to show beside the first, with the difference per stage")
	outFile := fs.String("o", "-", "write the HTML to this file (- for stdout)")
	pos, code, ok := parseCommand(fs, viewHelp, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, viewUsage)
		return 2
	}
	files := []string{pos[0]}
	if *compare != "" {
		files = append(files, *compare)
	}
	if len(files) == 2 && files[0] == "-" && files[1] == "-" {
		fmt.Fprintln(stderr, "softnic view: the walk and --compare cannot both be - (stdin holds one)")
		return 2
	}
	var walks []traceJSON
	for _, f := range files {
		j, err := readWalk(f)
		if err != nil {
			fmt.Fprintln(stderr, "softnic view:", err)
			return 1
		}
		if len(j.Stages) == 0 {
			fmt.Fprintf(stderr, "softnic view: %s: no stages (is it `softnic trace --json` output?)\n", f)
			return 1
		}
		walks = append(walks, j)
	}
	if err := writeWalkHTML(*outFile, stdout, walks...); err != nil {
		fmt.Fprintln(stderr, "softnic view:", err)
		return 1
	}
	return 0
}

// maxWalkJSON bounds what readWalk reads (a variable: the tests shrink it).
var maxWalkJSON int64 = 4 << 30

// readWalk decodes the walk JSON in file ("-": stdin) as it reads it, so
// that input which is not JSON (/dev/zero, a capture named by mistake)
// is refused at its first bytes instead of read whole into memory first
// (view /dev/zero read until the runtime ran out of memory). As
// json.Unmarshal did, anything but white space after the object is an
// error.
//
// At most maxWalkJSON bytes are read: white space is JSON too, and an
// endless stream of it must end in an error. trace --json writes at most
// 2^16 packets with the bytes of at most 4·2^16+4096 frames of at most
// 4096 bytes of payload (hex: about 2.2 GB, under a plan that makes the
// walk resend).
func readWalk(file string) (traceJSON, error) {
	var j traceJSON
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return j, err
		}
		defer f.Close()
		r = f
	}
	lr := &io.LimitedReader{R: r, N: maxWalkJSON + 1}
	dec := json.NewDecoder(lr)
	err := dec.Decode(&j)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the walk's JSON object")
		}
	}
	switch {
	case lr.N <= 0:
		return j, fmt.Errorf("%s: more than %d bytes, larger than any walk trace --json writes", file, maxWalkJSON)
	case err == io.EOF, errors.Is(err, io.ErrUnexpectedEOF):
		return j, fmt.Errorf("%s: unexpected end of JSON input", file)
	case err != nil:
		return j, fmt.Errorf("%s: %w", file, err)
	}
	return j, nil
}

// writeWalkHTML writes the page for one or two walks to file ("-": out).
func writeWalkHTML(file string, out io.Writer, walks ...traceJSON) error {
	hw := make([]trace.Walk, len(walks))
	for i, j := range walks {
		hw[i] = htmlWalk(j)
	}
	if file == "-" {
		return trace.WriteHTML(out, hw...)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := trace.WriteHTML(f, hw...); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// htmlWalk turns a --json walk into the HTML view's model, attaching the
// bytes the walk carries to the stages that moved them: each WQE to its
// wqe_build (and to the wqe_fetch that read it), the BlueFlame copy and
// the doorbell store (both come from the WQE), each CQE to its cqe_write
// and poll.
func htmlWalk(j traceJSON) trace.Walk {
	w := trace.Walk{Title: fmt.Sprintf("%s %d B x%d, %s path, MTU %d", strings.ToUpper(j.Op), j.Size, max(j.Batch, 1), j.Path, j.MTU),
		Path: j.Path, TotalNS: j.TotalNS}
	for _, x := range j.Warnings {
		w.Warnings = append(w.Warnings, x.WalkStage)
	}
	if j.Error != "" {
		w.Title += ", FAILED: " + j.Error
	}
	if j.DroppedEvents > 0 {
		w.Title += fmt.Sprintf(", the first %d events dropped: the stages are the walk's tail", j.DroppedEvents)
	}
	ud := strings.HasPrefix(j.Op, "ud_")
	wqes := make([][]byte, len(j.WQEs))
	for i, q := range j.WQEs {
		wqes[i], _ = hex.DecodeString(q.WQEHex)
	}
	var cqes [][]byte
	for _, c := range j.CQEHex {
		b, _ := hex.DecodeString(c)
		cqes = append(cqes, b)
	}
	// The WQE a stage belongs to: by flow (qpn<<16 | wqe index), else by
	// occurrence.
	byIndex := map[uint16]int{}
	for i, q := range j.WQEs {
		byIndex[q.WQEIndex] = i
	}
	wqeOf := func(s stageJSON, k int) int {
		if s.Flow != 0 {
			if i, ok := byIndex[uint16(s.Flow&0xffff)]; ok {
				return i
			}
		}
		if k < len(wqes) {
			return k
		}
		return -1
	}
	seen := map[string]int{}
	for _, s := range j.Stages {
		k := seen[s.Name]
		seen[s.Name]++
		ws := trace.WalkStage{Name: s.Name, Component: s.Component, Node: s.Node, StartNS: s.StartNS, EndNS: s.EndNS,
			Bytes: s.Bytes, TLPs: s.TLPs, QPN: s.QPN, Flow: s.Flow, Flows: s.Flows, PSN: s.PSN, Detail: s.Detail}
		switch s.Name {
		case "wqe_build":
			if i := wqeOf(s, k); i >= 0 && len(wqes[i]) >= mlx5.CtrlSegSize {
				ws.Hex = annotateWQE(wqes[i], ud)
				ws.HexNote = fmt.Sprintf("WQE %d (wqe_index %d) as written into the SQ ring (same as trace --hexdump):", i, j.WQEs[i].WQEIndex)
			}
		case "wqe_fetch":
			var b strings.Builder
			for i, q := range wqes {
				if len(q) >= mlx5.CtrlSegSize && s.Node == 0 {
					fmt.Fprintf(&b, "WQE %d (wqe_index %d):\n%s", i, j.WQEs[i].WQEIndex, annotateWQE(q, ud))
				}
			}
			ws.Hex, ws.HexNote = b.String(), "The WQEBBs the fetch engine read from the SQ ring:"
		case "bf_mmio":
			if i := wqeOf(s, k); i >= 0 && len(wqes[i]) > 0 {
				var b strings.Builder
				for off := 0; off < len(wqes[i]); off += 16 {
					fmt.Fprintf(&b, "  +%02x  %s\n", off, hexLine(wqes[i][off:min(off+16, len(wqes[i]))]))
				}
				ws.Hex, ws.HexNote = b.String(), "BlueFlame copies the WQE itself into the BF buffer in 64-byte write-combined stores (bytes from the WQE):"
			}
		case "doorbell_mmio":
			i := wqeOf(s, k)
			// A post list rings once, with the last WQE's control segment.
			if i >= 0 && s.Flow == 0 && len(wqes) > 1 {
				i = len(wqes) - 1
			}
			if i >= 0 && len(wqes[i]) >= 8 {
				ws.Hex = fmt.Sprintf("  UAR+0x800  %s  first 8 bytes of WQE %d's ctrl segment\n", hexLine(wqes[i][:8]), i)
				ws.HexNote = "The doorbell is one 8-byte store of the control segment's first 8 bytes (bytes from the WQE):"
			}
		case "cqe_write", "poll":
			if k < len(cqes) && len(cqes[k]) == mlx5.CQE64Size && s.Node == 0 {
				ws.Hex = annotateCQE(cqes[k])
				ws.HexNote = fmt.Sprintf("Requester CQE %d (same as trace --hexdump):", k)
			}
			if s.Name == "cqe_write" && s.TLPAddr != nil {
				ws.Hex += fmt.Sprintf("\nPCIe MWr TLP header carrying it to host IOVA %#x, %s\n%s", *s.TLPAddr, tlpNote, annotateTLP(tlpMWr, *s.TLPAddr, mlx5.CQE64Size, 0))
			}
		case "dbr_update":
			if b, err := hex.DecodeString(j.DBRHex); err == nil && len(b) == 4 && s.Node == 0 {
				ws.Hex = annotateDBR(b)
				ws.HexNote = "The doorbell record's send counter, DBR[1], as the provider left it in host memory (same as trace --hexdump):"
			}
		case "pcie_tlp":
			if s.TLPAddr != nil && s.Node == 0 {
				n, what := 8, "the 8-byte doorbell"
				if j.Path == "blueflame" {
					if i := wqeOf(s, k); i >= 0 {
						n, what = (len(wqes[i])+63)/64*64, "the BlueFlame copy"
					}
				}
				tlps := max(s.TLPs, 1)
				per := (n + tlps - 1) / tlps
				var b strings.Builder
				for t := 0; t < tlps && t < 4; t++ {
					a := *s.TLPAddr + uint64(t*per)
					fmt.Fprintf(&b, "MWr %d of %d: %d bytes to BAR0+%#x\n%s", t+1, tlps, min(per, n-t*per), a, annotateTLP(tlpMWr, a, min(per, n-t*per), 0))
				}
				ws.Hex = b.String()
				ws.HexNote = fmt.Sprintf("PCIe TLP header of %s (address: BAR0 offset of the bfreg buffer), %s", what, tlpNote)
			}
		case "payload_dma":
			if i := wqeOf(s, k); i >= 0 && s.Node == 0 && j.Op != "read" && j.WQEs[i].Length > 0 {
				q := j.WQEs[i]
				ws.Hex = fmt.Sprintf("MRd (device → host), %d bytes at host IOVA %#x\n%s", q.Length, q.LAddr, annotateTLP(tlpMRd, q.LAddr, int(q.Length), 0)) +
					fmt.Sprintf("CplD (host → device), first completion\n%s", annotateTLP(tlpCplD, q.LAddr, int(q.Length), 0))
				ws.HexNote = "PCIe TLP headers of the payload read (address from the WQE's data segment), " + tlpNote
			}
		case "packetize", "ack", "wire":
			if f, err := hex.DecodeString(s.FrameHex); err == nil && len(f) > 0 {
				ws.Hex = annotateFrame(f)
				ws.HexNote = fmt.Sprintf("The RoCEv2 frame (%d bytes, as the link tap captured it), layer by layer:", len(f))
			}
		}
		if s.Name == "wqe_fetch" && s.TLPAddr != nil && s.Node == 0 && ws.Hex != "" {
			n := 0
			for _, q := range wqes {
				n += (len(q) + 63) / 64 * 64
			}
			ws.Hex += fmt.Sprintf("\nPCIe MRd TLP header of the fetch, %d bytes at host IOVA %#x, %s\n%s", n, *s.TLPAddr, tlpNote, annotateTLP(tlpMRd, *s.TLPAddr, n, 0))
		}
		w.Stages = append(w.Stages, ws)
	}
	return w
}
