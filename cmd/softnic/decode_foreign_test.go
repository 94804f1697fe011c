package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/trace"
)

// foreignCaptures are captures written by scapy, editcap and mergecap, not
// by softnic (testdata/captures/gen.py regenerates them), with decode's
// exit status and output. Every RoCEv2 frame in them is one RC SEND ONLY
// to QP 0x11; TestDecodeForeignCapturesTshark checks that tshark sees the
// same frames.
var foreignCaptures = []struct {
	name, file string
	code       int
	want       []string
}{
	{"pcapng with three link types (mergecap)", "mixed_linktypes.pcapng", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#2 1700000001.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000002 ack=0 len=16 icrc=ok",
		"#3 1700000002.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000003 ack=0 len=16 icrc=ok",
		"3 frames: 3 roce (0 bad icrc, 0 malformed), 0 skipped",
	}},
	{"802.1Q VLAN tag", "vlan.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}},
	{"802.1ad QinQ tags", "qinq.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}},
	// LINKTYPE_LINUX_SLL2 is 276: past the uint8 of gopacket's LinkType.
	{"Linux SLL2 (tcpdump -i any)", "sll2.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}},
	{"Linux SLL2 in a pcapng (editcap)", "sll2.pcapng", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}},
	{"Linux SLL2 in a big-endian pcap", "sll2_bigendian.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}},
	{"two pcapng sections, interface 0 Ethernet then SLL2", "two_sections.pcapng", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#2 1700000001.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000002 ack=0 len=16 icrc=ok",
		"#3 1700000002.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000003 ack=0 len=16 icrc=ok",
		"#4 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"4 frames: 4 roce (0 bad icrc, 0 malformed), 0 skipped",
	}},
	// RoCEv2 that softnic refuses is said to be refused, and why; it is
	// not counted as a frame that is not RoCE.
	{"IPv4 options", "ipv4_options.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: roce: parse IPv4 at offset 14: bad length: IPv4 options are not supported",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}},
	{"bad IPv4 header checksum", "ipv4_bad_checksum.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: roce: parse IPv4 at offset 24: bad checksum",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}},
	{"IPv4 first fragment", "ipv4_first_fragment.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: UDP to port 4791, but an IP fragment (RoCEv2 sets DF): roce: parse IPv4 at offset 20: not a RoCEv2 packet: IP fragment",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}},
	{"IPv6 hop-by-hop header", "ipv6_hop_by_hop.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: UDP to port 4791, but IPv6 extension headers are not supported: roce: parse IPv6 at offset 20: not a RoCEv2 packet: next header is not UDP",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}},
	{"cut by a 64-byte snap length", "snaplen64.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: captured 64 of its 122 bytes (the capture's snap length): roce: parse IPv4 at offset 16: truncated: total length beyond the frame",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}},
	{"UDP to 4792 is not RoCEv2", "udp_4792.pcap", 0, []string{
		"1 frames: 0 roce (0 bad icrc, 0 malformed), 1 skipped",
	}},
}

func TestDecodeForeignCaptures(t *testing.T) {
	for _, tc := range foreignCaptures {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runDecode([]string{filepath.Join("testdata", "captures", tc.file)}, &out, &errb)
			got := strings.TrimRight(out.String(), "\n")
			if want := strings.Join(tc.want, "\n"); got != want || code != tc.code {
				t.Fatalf("exit %d (want %d), output:\n%s\nwant:\n%s\nstderr: %s", code, tc.code, got, want, errb.String())
			}
		})
	}
}

// TestDecodeCutFrames cuts a RoCEv2 frame behind a VLAN tag at every byte,
// as a snap length does (orig_len the whole frame): cut before the UDP
// destination port it cannot be told from other traffic and is skipped;
// from there on it is RoCEv2 that cannot be checked, and says how much of
// it was captured; whole, it decodes.
func TestDecodeCutFrames(t *testing.T) {
	r, err := trace.NewPcapReader(bytes.NewReader(mustRead(t, filepath.Join("testdata", "captures", "vlan.pcap"))))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	const port = 14 + 4 + 20 + 4 // Ethernet, 802.1Q tag, IPv4, UDP ports
	for n := 0; n <= len(fr.Data); n++ {
		cut := fr
		cut.Data = fr.Data[:n]
		var pkt roce.Packet
		ok, err := parseCaptured(cut, &pkt)
		switch {
		case n < port:
			if ok {
				t.Errorf("cut at %d: taken for RoCEv2 (%v)", n, err)
			}
		case n < len(fr.Data):
			want := fmt.Sprintf("captured %d of its %d bytes", n, len(fr.Data))
			if !ok || err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("cut at %d: ok %v, err %v; want %q", n, ok, err, want)
			}
		default:
			if !ok || err != nil {
				t.Errorf("whole frame: ok %v, err %v", ok, err)
			}
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
