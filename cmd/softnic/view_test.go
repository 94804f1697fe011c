package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"html"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"context"

	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

// walkHTML runs trace --html - with args and returns the page and the walk.
func walkHTML(t *testing.T, args ...string) (string, traceJSON) {
	t.Helper()
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(append([]string{"trace", "--html", "-"}, args...), &out, &errb), errb.String())
	return out.String(), runTraceJSON(t, args...)
}

// checkPage: well formed, nothing external, a lane per component and node
// of the walk, a box and an arrow per stage.
func checkPage(t *testing.T, page string, walks ...traceJSON) {
	t.Helper()
	require.True(t, strings.HasPrefix(page, "<!DOCTYPE html>"))
	require.Contains(t, page, `content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"`)
	require.NotRegexp(t, `(?i)(src|href)\s*=\s*["']?\s*(https?:)?//`, page)
	require.NotContains(t, page, "http://")
	require.NotContains(t, page, "https://")
	// Well formed: the SVG and tables parse as XML once the void/bool HTML bits are gone.
	for _, m := range regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(page, -1) {
		d := xml.NewDecoder(strings.NewReader(m))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			require.NoError(t, err, "svg is not well formed")
		}
	}
	require.Equal(t, len(walks), strings.Count(page, `<section class="walk"`))
	total := 0
	for _, j := range walks {
		total += len(j.Stages)
		for _, s := range j.Stages {
			id := trace.LaneID(trace.WalkStage{Name: s.Name, Component: s.Component, Node: s.Node})
			require.Contains(t, page, `class="lane" data-lane="`+id+`"`, "lane of %s", s.Name)
		}
	}
	require.Equal(t, total, strings.Count(page, `<path class="arrow"`), "an arrow per stage")
	require.Equal(t, total, strings.Count(page, `<g class="stage"`), "a box per stage")
}

func TestTraceHTML(t *testing.T) {
	page, j := walkHTML(t)
	checkPage(t, page, j)
	require.Contains(t, page, "mlx5_bf_copy")
	// The detail panel's bytes beyond WQE and CQE: the doorbell record, the
	// implied TLP header, the frames layer by layer.
	hexOf := func(name string, node int) []string {
		var out []string
		for _, m := range regexp.MustCompile(`(?s)<script type="application/json" class="stagedata"[^>]*>(.*?)</script>`).FindAllStringSubmatch(page, -1) {
			var st []trace.WalkStage
			require.NoError(t, json.Unmarshal([]byte(m[1]), &st))
			for _, s := range st {
				if s.Name == name && s.Node == node {
					out = append(out, s.Hex)
				}
			}
		}
		require.NotEmpty(t, out, "%s on node %d", name, node)
		return out
	}
	require.Contains(t, hexOf("dbr_update", 0)[0], "  DBR[1]  00000001  send counter = 1")
	tlp := hexOf("pcie_tlp", 0)[0]
	require.Regexp(t, `DW0  60000010  Fmt 011 Type 00000 = MWr .* Length 16 DW`, tlp)
	require.Contains(t, tlp, "last BE 1111, first BE 1111")
	require.Contains(t, hexOf("payload_dma", 0)[0], "MRd (4-DW header")
	require.Contains(t, hexOf("cqe_write", 0)[0], "Fmt 011 Type 00000 = MWr")
	var psn uint32
	for _, s := range j.Stages {
		if s.Name == "packetize" {
			require.NotNil(t, s.PSN)
			psn = *s.PSN
			require.NotEmpty(t, s.FrameHex)
		}
	}
	bth := fmt.Sprintf("AckReq 1, PSN 0x%06x", psn) // hex, as every identifier (docs/cli.md)
	for _, h := range append(hexOf("packetize", 0), hexOf("wire", 0)...) {
		require.Regexp(t, `BTH\n  \+02a  0a00ffff [0-9a-f ]+opcode RC_RDMA_WRITE_ONLY \(0x0a\).*`+bth, h)
		for _, l := range []string{"Ethernet", "IPv4", "total length 124", "UDP", "dst port 4791", "RETH", "DMA length 64", "payload (64 bytes)", " …", "ICRC", "(ok)"} {
			require.Contains(t, h, l)
		}
	}
	ack := fmt.Sprintf("AckReq 0, PSN 0x%06x", psn)
	for _, h := range append(hexOf("ack", 1), hexOf("wire", 1)...) {
		require.Regexp(t, `opcode RC_ACKNOWLEDGE \(0x11\).*`+ack, h)
		require.Contains(t, h, "AETH")
		require.Contains(t, h, "syndrome ACK")
	}
	// A post list of multi-packet messages: a row per WQE and per packet.
	page, j = walkHTML(t, "--batch", "3", "--size", "2048")
	checkPage(t, page, j)
	require.Equal(t, 3, strings.Count(page, "<td>WQE index "), "a row per WQE")
	require.GreaterOrEqual(t, strings.Count(page, `<tr class="packet"`), 6, "a row per packet")
}

// TestTraceHTMLFlows: on a clean walk every stage belongs to a WQE (no
// "not tied to one WQE" group), each packet row sits under its WQE with
// the PSN of its stages, and a stage a post list shares counts in each
// WQE's row.
func TestTraceHTMLFlows(t *testing.T) {
	row := regexp.MustCompile(`(?s)<tr class="(flowhead|packet)"[^>]*><td>([^<]*)</td><td class="num">([^<]*)</td>.*?<td>([^<]*)</td></tr>`)
	for _, args := range [][]string{nil, {"--no-bf"}, {"--batch", "4"}, {"--op", "read", "--size", "3000"}, {"--op", "send", "--size", "3000"}} {
		page, j := walkHTML(t, args...)
		checkPage(t, page, j)
		require.NotContains(t, page, "not tied to one WQE", "%v: stages without a WQE", args)
		rows := row.FindAllStringSubmatch(page, -1)
		require.NotEmpty(t, rows)
		heads, packets := 0, 0
		for _, r := range rows {
			if r[1] == "flowhead" {
				heads++
				require.Contains(t, r[2], "WQE index ", "%v", args)
				continue
			}
			require.Greater(t, heads, 0, "%v: packet row %q before any WQE", args, r[2])
			packets++
			_, err := strconv.Atoi(r[4])
			require.NoError(t, err, "%v: packet row %q has PSN %q", args, r[2], r[4])
		}
		require.Equal(t, max(1, len(j.WQEs)), heads, "%v: a row per WQE", args)
		require.Greater(t, packets, 0)
		if len(args) == 2 && args[0] == "--batch" {
			// Each WQE's row counts the shared doorbell stages.
			var n []string
			for _, r := range rows {
				if r[1] == "flowhead" {
					n = append(n, r[3])
				}
			}
			shared := 0
			for _, s := range j.Stages {
				if len(s.Flows) > 0 {
					shared++
					require.Len(t, s.Flows, 3, "%s serves the other 3 WQEs", s.Name)
				}
			}
			require.GreaterOrEqual(t, shared, 5, "dbr_update, doorbell_mmio, wc_flush, pcie_tlp, doorbell_decode, wqe_fetch")
			own := map[uint64]int{}
			for _, s := range j.Stages {
				own[s.Flow]++
				for _, f := range s.Flows {
					own[f]++
				}
			}
			for k, q := range j.WQEs {
				require.Equal(t, strconv.Itoa(own[uint64(q.QPN)<<16|uint64(q.WQEIndex)]), n[k], "WQE %d's stages", k)
			}
		}
	}
}

func TestViewCompare(t *testing.T) {
	dir := t.TempDir()
	bf, db := filepath.Join(dir, "bf.json"), filepath.Join(dir, "db.json")
	for f, args := range map[string][]string{bf: {"trace", "--json"}, db: {"trace", "--json", "--no-bf"}} {
		var out bytes.Buffer
		require.Equal(t, 0, run(args, &out, os.Stderr))
		require.NoError(t, os.WriteFile(f, out.Bytes(), 0o644))
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"view", bf, "--compare", db}, &out, &errb), errb.String())
	var a, b traceJSON
	ab, _ := os.ReadFile(bf)
	bb, _ := os.ReadFile(db)
	require.NoError(t, json.Unmarshal(ab, &a))
	require.NoError(t, json.Unmarshal(bb, &b))
	page := out.String()
	checkPage(t, page, a, b)
	require.True(t, strings.Contains(page, `<tr class="diff" data-key="wqe_fetch#0" data-status="only in B">`), "doorbell's wqe_fetch only in B")
	require.True(t, strings.Contains(page, `<strong id="totaldelta">delta &#43;`), "total delta")
	require.Equal(t, 2, run([]string{"view"}, io.Discard, io.Discard))
}

// TestHTMLChromium loads the pages from disk in headless Chromium and
// checks the DOM: the self-check (lanes, a box and an arrow per stage, no
// JS errors), the WQE hex panel against --hexdump, and the comparison.
func TestHTMLChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not on PATH")
	}
	dir := t.TempDir()
	bfHTML, cmpHTML := filepath.Join(dir, "bf.html"), filepath.Join(dir, "cmp.html")
	bf, db := filepath.Join(dir, "bf.json"), filepath.Join(dir, "db.json")
	require.Equal(t, 0, run([]string{"trace", "--html", bfHTML}, io.Discard, os.Stderr))
	for f, args := range map[string][]string{bf: {"trace", "--json"}, db: {"trace", "--json", "--no-bf"}} {
		var out bytes.Buffer
		require.Equal(t, 0, run(args, &out, os.Stderr))
		require.NoError(t, os.WriteFile(f, out.Bytes(), 0o644))
	}
	require.Equal(t, 0, run([]string{"view", bf, "--compare", db, "-o", cmpHTML}, io.Discard, os.Stderr))
	dump := func(url string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, chromium, "--headless", "--disable-gpu", "--no-sandbox", "--user-data-dir="+filepath.Join(dir, "profile"),
			"--dump-dom", url)
		out, err := cmd.Output()
		require.NoError(t, err)
		return string(out)
	}
	status := regexp.MustCompile(`<div id="selfcheck" data-status="(\w+)">([^<]*)</div>`)
	hexRe := regexp.MustCompile(`(?s)<pre id="hex">(.*?)</pre>`)

	dom := dump("file://" + bfHTML + "#select=wqe_build")
	m := status.FindStringSubmatch(dom)
	require.NotNil(t, m, "no self-check in the DOM")
	require.Equal(t, "ok", m[1], m[2])
	require.Contains(t, dom, `<ul id="jserrors"></ul>`, "JS errors")
	require.Contains(t, m[2], "wire")
	var txt bytes.Buffer
	require.Equal(t, 0, run([]string{"trace", "--hexdump"}, &txt, os.Stderr))
	want := regexp.MustCompile(`(?s)WQE 0 \(wqe_index 0\):\n(.*?)\n\n`).FindStringSubmatch(txt.String())
	require.NotNil(t, want)
	h := hexRe.FindStringSubmatch(dom)
	require.NotNil(t, h)
	got := html.UnescapeString(h[1])
	for _, l := range strings.Split(want[1], "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "ctrl") || strings.HasPrefix(strings.TrimSpace(l), "raddr") || strings.HasPrefix(strings.TrimSpace(l), "data") {
			require.Contains(t, got, l, "hex panel differs from --hexdump")
		}
	}

	dom = dump("file://" + bfHTML + "#select=packetize")
	require.Contains(t, dom, `data-selected="0:`)
	h = hexRe.FindStringSubmatch(dom)
	require.NotNil(t, h)
	got = html.UnescapeString(h[1])
	require.Contains(t, got, "BTH")
	require.Contains(t, got, "opcode RC_RDMA_WRITE_ONLY")
	require.Contains(t, dom, `<ul id="jserrors"></ul>`)

	dom = dump("file://" + cmpHTML + "#select=wqe_fetch&w=1")
	m = status.FindStringSubmatch(dom)
	require.NotNil(t, m)
	require.Equal(t, "ok", m[1], m[2])
	require.Contains(t, dom, `data-selected="1:`, "wqe_fetch of walk B selected")
	require.Contains(t, dom, `data-key="wqe_fetch#0" data-status="only in B"`)
	require.Contains(t, dom, `<ul id="jserrors"></ul>`)
}

// A walk JSON is input: view refuses or renders a hand-edited or cut one,
// it never panics (a short last WQE, stages whose bytes are missing or
// malformed, absurd TLP counts).
func TestViewHostileWalk(t *testing.T) {
	dir := t.TempDir()
	tlp := `, "tlp_addr": 4096`
	stages := []string{`{"name": "doorbell_mmio", "node": 0}`, `{"name": "bf_mmio", "node": 0}`,
		`{"name": "wqe_build", "node": 0}`, `{"name": "wqe_fetch", "node": 0` + tlp + `}`,
		`{"name": "pcie_tlp", "node": 0, "tlps": 1000000` + tlp + `}`, `{"name": "pcie_tlp", "node": 0, "tlps": -3` + tlp + `}`,
		`{"name": "payload_dma", "node": 0}`, `{"name": "cqe_write", "node": 0` + tlp + `}`, `{"name": "poll", "node": 0}`,
		`{"name": "dbr_update", "node": 0}`, `{"name": "wire", "node": 0, "frame_hex": "00ff"}`,
		`{"name": "packetize", "node": 0, "flow": 4294967295}`}
	for i, wqes := range []string{`[{"wqe_hex": "0011223344556677"}, {"wqe_hex": ""}]`, `[{"wqe_hex": "zz", "length": 4000000000}]`, `[]`,
		`[{"wqe_hex": "00000008000000000000000000000000"}]`, `[{"wqe_hex": "0000000800000000000000000000000000000000"}]`} {
		for _, path := range []string{"doorbell", "blueflame"} {
			f := filepath.Join(dir, fmt.Sprintf("w%d%s.json", i, path))
			doc := fmt.Sprintf(`{"op": "write", "path": %q, "stages": [%s], "wqes": %s, "cqe_hex": ["00"], "dbr_hex": "0001"}`, path, strings.Join(stages, ", "), wqes)
			require.NoError(t, os.WriteFile(f, []byte(doc), 0o644))
			var out, errb bytes.Buffer
			require.Equal(t, 0, run([]string{"view", f}, &out, &errb), "%s: %s", doc, errb.String())
			require.Contains(t, out.String(), "doorbell_mmio")
		}
	}
}

// endlessInput is /dev/zero or `yes ' '` as view's stdin: b for ever,
// until 64 MiB have been read (then an error, so that a reader that takes
// it all ends too), counting what was read.
type endlessInput struct {
	b    byte
	read int
}

func (e *endlessInput) Read(p []byte) (int, error) {
	if e.read >= 64<<20 {
		return 0, errors.New("endlessInput: 64 MiB read")
	}
	for i := range p {
		p[i] = e.b
	}
	e.read += len(p)
	return len(p), nil
}

// view refuses input that is not a walk at its first bytes, and reads at
// most maxWalkJSON of a stream that stays valid JSON (white space): view
// /dev/zero used to read until the runtime ran out of memory.
func TestViewEndlessInput(t *testing.T) {
	defer func(old int64) { maxWalkJSON = old }(maxWalkJSON)
	maxWalkJSON = 1 << 20
	for _, c := range []struct {
		name    string
		b       byte
		err     string
		maxRead int
	}{
		{"NUL bytes (/dev/zero)", 0, `-: invalid character '\x00' looking for beginning of value`, 64 << 10},
		{"letters", 'x', "-: invalid character 'x' looking for beginning of value", 64 << 10},
		{"open brackets", '[', "-: invalid character '[' exceeded max depth", 64 << 10},
		{"white space", ' ', "-: more than 1048576 bytes, larger than any walk trace --json writes", 2 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &endlessInput{b: c.b}
			old := stdin
			stdin = in
			defer func() { stdin = old }()
			var out, errb bytes.Buffer
			require.Equal(t, 1, run([]string{"view", "-"}, &out, &errb))
			require.Contains(t, errb.String(), c.err)
			require.LessOrEqual(t, in.read, c.maxRead, "bytes read")
			require.Empty(t, out.String())
		})
	}
}
