package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// writeCapture writes a pcap with: WRITE ONLY, ACK, UD SEND, an IPv6 SEND
// ONLY, a non-RoCE frame, and (if bad) a WRITE ONLY with a corrupted ICRC.
func writeCapture(t *testing.T, bad bool) string {
	t.Helper()
	base := roce.FrameParams{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"),
		TTL: 64, SrcPort: roce.UDPSourcePort(0, 0x11, 0x12),
	}
	write := base
	write.BTH = roce.BTHFields{Opcode: roce.OpRCWriteOnly, PKey: 0xFFFF, DestQP: 0x12, AckReq: true, PSN: 100}
	write.RETH = roce.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 5}
	ack := base
	ack.SrcIP, ack.DstIP = base.DstIP, base.SrcIP
	ack.BTH = roce.BTHFields{Opcode: roce.OpRCAck, PKey: 0xFFFF, DestQP: 0x11, PSN: 100}
	ack.AETH = roce.AETHFields{Syndrome: roce.SyndromeACK, MSN: 1}
	ud := base
	ud.SrcPort = roce.QPSourcePort(0x22)
	ud.BTH = roce.BTHFields{Opcode: roce.OpUDSendOnlyImm, PKey: 0xFFFF, DestQP: 0x23, PSN: 7, SE: true}
	ud.DETH = roce.DETHFields{QKey: 0x11111111, SrcQP: 0x22}
	ud.Imm = 0xCAFEBABE
	v6 := base
	v6.SrcIP, v6.DstIP = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	v6.BTH = roce.BTHFields{Opcode: roce.OpRCSendOnly, PKey: 0xFFFF, DestQP: 0x12, AckReq: true, PSN: 101}

	path := filepath.Join(t.TempDir(), "cap.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := trace.NewPcapWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	add := func(at sim.Time, p *roce.FrameParams, payload string, corrupt bool) {
		n, err := roce.BuildFrame(buf, p, []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		if corrupt {
			buf[n-1] ^= 0xFF
		}
		if err := w.WriteFrame(at, buf[:n]); err != nil {
			t.Fatal(err)
		}
	}
	add(1000*sim.Time(sim.Nanosecond), &write, "hello", false)
	add(2000*sim.Time(sim.Nanosecond), &ack, "", false)
	add(3000*sim.Time(sim.Nanosecond), &ud, "datagram", false)
	add(4000*sim.Time(sim.Nanosecond), &v6, "six", false)
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	if err := w.WriteFrame(5000*sim.Time(sim.Nanosecond), arp); err != nil {
		t.Fatal(err)
	}
	if bad {
		add(6000*sim.Time(sim.Nanosecond), &write, "hello", true)
	}
	return path
}

func TestDecodeText(t *testing.T) {
	var out, errb bytes.Buffer
	code := runDecode([]string{writeCapture(t, false)}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	want := []string{
		"#1 0.000001000 10.0.0.1:49458 → 10.0.0.2:4791 RC_RDMA_WRITE_ONLY qp=0x000012 psn=0x000064 ack=1 pad=3 reth{va=0x1000 rkey=0x1234 len=5} len=5 icrc=ok",
		"#2 0.000002000 10.0.0.2:49458 → 10.0.0.1:4791 RC_ACKNOWLEDGE qp=0x000011 psn=0x000064 ack=0 aeth{ACK(1f) msn=1} len=0 icrc=ok",
		"#3 0.000003000 10.0.0.1:65320 → 10.0.0.2:4791 UD_SEND_ONLY_WITH_IMMEDIATE qp=0x000023 psn=0x000007 ack=0 se deth{qkey=0x11111111 srcqp=0x22} imm=0xcafebabe len=8 icrc=ok",
		"#4 0.000004000 [fd00::1]:49458 → [fd00::2]:4791 RC_SEND_ONLY qp=0x000012 psn=0x000065 ack=1 pad=1 len=3 icrc=ok",
		"5 frames: 4 roce (0 bad icrc, 0 malformed), 1 skipped",
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
}

func TestDecodeBadICRC(t *testing.T) {
	var out, errb bytes.Buffer
	code := runDecode([]string{writeCapture(t, true)}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	bad := lines[len(lines)-2]
	if !strings.HasPrefix(bad, "#6 ") || !strings.Contains(bad, "icrc=BAD (want ") {
		t.Fatalf("bad line %q", bad)
	}
	if last := lines[len(lines)-1]; last != "6 frames: 5 roce (1 bad icrc, 0 malformed), 1 skipped" {
		t.Fatalf("summary %q", last)
	}
}

func TestDecodeJSON(t *testing.T) {
	for _, order := range []string{"flag first", "flag after the file"} {
		t.Run(order, func(t *testing.T) {
			args := []string{"--json", writeCapture(t, true)}
			if order == "flag after the file" { // docs/cli.md: flags may follow positional words
				args[0], args[1] = args[1], args[0]
			}
			testDecodeJSON(t, args)
		})
	}
}

func testDecodeJSON(t *testing.T, args []string) {
	var out, errb bytes.Buffer
	code := runDecode(args, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	var frames []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		frames = append(frames, m)
	}
	if len(frames) != 5 {
		t.Fatalf("%d JSON lines", len(frames))
	}
	w := frames[0]
	if w["opcode"].(float64) != 0x0A || w["opcode_name"] != "RC_RDMA_WRITE_ONLY" || w["dest_qp"].(float64) != 0x12 ||
		w["psn"].(float64) != 100 || w["ack_req"] != true || w["payload_len"].(float64) != 5 || w["icrc_ok"] != true {
		t.Fatalf("frame 1: %v", w)
	}
	reth := w["reth"].(map[string]any)
	if reth["va"].(float64) != 0x1000 || reth["rkey"].(float64) != 0x1234 || reth["len"].(float64) != 5 {
		t.Fatalf("reth %v", reth)
	}
	if _, ok := w["aeth"]; ok {
		t.Fatal("absent AETH should be omitted")
	}
	if a := frames[1]["aeth"].(map[string]any); a["syndrome"].(float64) != 0x1F || a["msn"].(float64) != 1 {
		t.Fatalf("aeth %v", a)
	}
	if d := frames[2]["deth"].(map[string]any); d["qkey"].(float64) != 0x11111111 || d["src_qp"].(float64) != 0x22 {
		t.Fatalf("deth %v", d)
	}
	if frames[2]["imm"].(float64) != 0xCAFEBABE {
		t.Fatalf("imm %v", frames[2]["imm"])
	}
	b := frames[4]
	if b["frame"].(float64) != 6 || b["icrc_ok"] != false || b["icrc_want"] == nil || b["icrc_want"] == b["icrc"] {
		t.Fatalf("bad frame %v", b)
	}
	if !strings.Contains(errb.String(), "6 frames: 5 roce (1 bad icrc, 0 malformed), 1 skipped") {
		t.Fatalf("stderr %q", errb.String())
	}
}

func TestDecodeUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"no file", nil, 2},
		{"missing file", []string{"/nonexistent/x.pcap"}, 2},
		{"bad flag", []string{"--nope", "x"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := runDecode(tc.args, &out, &errb); code != tc.want {
				t.Fatalf("exit %d, want %d", code, tc.want)
			}
		})
	}
	notPcap := filepath.Join(t.TempDir(), "x")
	_ = os.WriteFile(notPcap, []byte("not a capture"), 0o644)
	var out, errb bytes.Buffer
	if code := runDecode([]string{notPcap}, &out, &errb); code != 2 {
		t.Fatalf("garbage file: exit %d", code)
	}
}
