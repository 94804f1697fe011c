package roce

import (
	"bytes"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// tsharkFields are the dissector fields compared (rocev2.md §7).
var tsharkFields = []string{
	"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn",
	"infiniband.bth.a", "infiniband.bth.padcnt", "infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.immdt", "infiniband.invariant.crc",
}

// Heuristic sub-dissectors that would otherwise claim RDMA payloads.
var tsharkDisabled = []string{"rpcordma", "smc", "smb_direct", "nvme-rdma", "lnet", "iser",
	"infiniband.eoib", "infiniband_sdp", "fcoib"}

// tsharkExpect renders what tshark 4.0 should print for a frame built from p.
func tsharkExpect(p *FrameParams, payloadLen int, icrc uint32) string {
	info := p.BTH.Opcode.Info()
	f := make([]string, len(tsharkFields))
	f[0] = fmt.Sprint(uint8(p.BTH.Opcode))
	f[1] = fmt.Sprintf("0x%06x", p.BTH.DestQP)
	f[2] = fmt.Sprint(uint32(p.BTH.PSN))
	if info.Headers.Has(HdrRETH) {
		f[3] = fmt.Sprintf("0x%016x", p.RETH.VA)
		f[4] = fmt.Sprintf("0x%08x", p.RETH.RKey)
		f[5] = fmt.Sprint(p.RETH.DMALen)
	}
	if info.Headers.Has(HdrAETH) {
		f[6] = fmt.Sprint(uint8(p.AETH.Syndrome))
		f[7] = fmt.Sprint(p.AETH.MSN)
	}
	f[8] = fmt.Sprint(b2i(p.BTH.AckReq))
	f[9] = fmt.Sprint(PadLen(payloadLen))
	// tshark 4.0 quirks: Q_Key printed as 64 bits, source QP as 32 bits,
	// ImmDt as raw bytes and twice (it is added to the tree twice).
	if info.Headers.Has(HdrDETH) {
		f[10] = fmt.Sprintf("0x%016x", p.DETH.QKey)
		f[11] = fmt.Sprintf("0x%08x", p.DETH.SrcQP)
	}
	if info.Headers.Has(HdrImmDt) {
		f[12] = fmt.Sprintf("%08x,%08x", p.Imm, p.Imm)
	}
	f[13] = fmt.Sprintf("0x%08x", bits.ReverseBytes32(icrc)) // wire bytes, big-endian
	return strings.Join(f, "\t")
}

func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	type tc struct {
		name    string
		mod     func(p *FrameParams)
		payload int
	}
	cases := []tc{
		{"write only", func(p *FrameParams) {}, 64},
		{"write only pad", func(p *FrameParams) { p.RETH.DMALen = 13 }, 13},
		{"write first", func(p *FrameParams) { p.BTH.Opcode = OpRCWriteFirst; p.BTH.AckReq = false; p.RETH.DMALen = 4096 }, 1024},
		{"read request", func(p *FrameParams) { p.BTH.Opcode = OpRCReadRequest; p.RETH.DMALen = 3000 }, 0},
		{"read response first", func(p *FrameParams) {
			p.BTH.Opcode = OpRCReadResponseFirst
			p.BTH.AckReq = false
			p.AETH = AETHFields{Syndrome: SyndromeACK, MSN: 3}
		}, 1024},
		{"read response middle", func(p *FrameParams) { p.BTH.Opcode = OpRCReadResponseMiddle; p.BTH.AckReq = false }, 1024},
		{"read response last", func(p *FrameParams) {
			p.BTH.Opcode = OpRCReadResponseLast
			p.BTH.AckReq = false
			p.AETH = AETHFields{Syndrome: SyndromeACK, MSN: 3}
		}, 952},
		{"ack", func(p *FrameParams) {
			p.BTH.Opcode = OpRCAck
			p.BTH.AckReq = false
			p.AETH = AETHFields{Syndrome: SyndromeACK, MSN: 0xABCDEF}
		}, 0},
		{"nak psn seq", func(p *FrameParams) {
			p.BTH.Opcode = OpRCAck
			p.BTH.AckReq = false
			p.AETH = AETHFields{Syndrome: SyndromeNAKPSNSeq, MSN: 9}
		}, 0},
		{"rnr nak", func(p *FrameParams) {
			p.BTH.Opcode = OpRCAck
			p.BTH.AckReq = false
			p.AETH = AETHFields{Syndrome: RNRNAKSyndrome(12), MSN: 9}
		}, 0},
		{"send only imm", func(p *FrameParams) { p.BTH.Opcode = OpRCSendOnlyImm; p.Imm = 0x01020304 }, 7},
		{"ud send only", func(p *FrameParams) {
			p.BTH.Opcode = OpUDSendOnly
			p.BTH.AckReq = false
			p.SrcPort = QPSourcePort(0x22)
			p.DETH = DETHFields{QKey: 0x11111111, SrcQP: 0x22}
		}, 100},
		{"ipv6 write only", func(p *FrameParams) {
			p.SrcIP, p.DstIP = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
		}, 33},
		{"psn wrap", func(p *FrameParams) { p.BTH.Opcode = OpRCSendOnly; p.BTH.PSN = PSN(PSNMask) }, 1},
	}
	var file bytes.Buffer
	w := pcapgo.NewWriterNanos(&file)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	var want []string
	buf := make([]byte, 2048)
	for i, c := range cases {
		p := writeOnlyParams()
		p.BTH.DestQP = 0x100 + uint32(i)
		p.BTH.PSN = PSN(1000 + i)
		c.mod(&p)
		n, err := BuildFrame(buf, &p, make([]byte, c.payload))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var pkt Packet
		if err := ParseFrame(buf[:n], &pkt); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want = append(want, tsharkExpect(&p, c.payload, pkt.ICRC))
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(0, int64(i)*1000), CaptureLength: n, Length: n}, buf[:n]); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "softnic.pcap")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-r", path, "-T", "fields"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	for _, d := range tsharkDisabled {
		args = append(args, "--disable-protocol", d)
	}
	cmd := exec.Command(tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(got) != len(cases) {
		t.Fatalf("tshark printed %d lines, want %d:\n%s", len(got), len(cases), out)
	}
	for i := range cases {
		if got[i] != want[i] {
			t.Errorf("%s:\n tshark %q\n   want %q", cases[i].name, got[i], want[i])
		}
	}
	if os.Getenv("KEEP_PCAP") != "" {
		_ = os.WriteFile(os.Getenv("KEEP_PCAP"), file.Bytes(), 0o644)
	}
	if testing.Verbose() {
		t.Logf("tshark fields: %s\n%s", strings.Join(tsharkFields, " "), out)
	}
}
