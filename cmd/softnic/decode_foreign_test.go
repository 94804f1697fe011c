package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/trace"
)

// foreignCaptures are captures written by scapy, editcap and mergecap, not
// by softnic (testdata/captures/gen.py regenerates them), with decode's
// exit status and output (want nil: the output is the golden file
// testdata/captures/FILE.txt; go test ./cmd/softnic -run
// TestDecodeForeignCaptures -update rewrites it). Every RoCEv2 frame in them is one RC SEND ONLY
// to QP 0x11; TestDecodeForeignCapturesTshark checks that tshark sees the
// same frames.
var foreignCaptures = []struct {
	name, file string
	code       int
	want       []string
	// tsharkNone: tshark dissects no RoCE in the file, though decode
	// counts a frame (an IP fragment: tshark waits for the rest).
	tsharkNone bool
	// tsharkTime: tshark's times of the file's frames, where they are not
	// the exact ones decode prints (nil: the same).
	tsharkTime []string
}{
	{"pcapng with three link types (mergecap)", "mixed_linktypes.pcapng", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#2 1700000001.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000002 ack=0 len=16 icrc=ok",
		"#3 1700000002.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000003 ack=0 len=16 icrc=ok",
		"3 frames: 3 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	{"802.1Q VLAN tag", "vlan.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	{"802.1ad QinQ tags", "qinq.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	// LINKTYPE_LINUX_SLL2 is 276: past the uint8 of gopacket's LinkType.
	{"Linux SLL2 (tcpdump -i any)", "sll2.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	{"Linux SLL2 in a pcapng (editcap)", "sll2.pcapng", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	{"Linux SLL2 in a big-endian pcap", "sll2_bigendian.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	{"two pcapng sections, interface 0 Ethernet then SLL2", "two_sections.pcapng", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#2 1700000001.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000002 ack=0 len=16 icrc=ok",
		"#3 1700000002.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000003 ack=0 len=16 icrc=ok",
		"#4 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"4 frames: 4 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	{"a record longer than the header's snap length", "snaplen_header_only.pcap", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_RDMA_WRITE_ONLY qp=0x000011 psn=0x000001 ack=0 reth{va=0x1000 rkey=0x22 len=1024} len=1024 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	{"pcapng timestamp resolutions 2^-10, µs, ns, ms", "tsresol.pcapng", 0, []string{
		"#1 1700000000.500000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#2 1700000001.000250000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#3 1700000002.123456789 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#4 1700000003.007000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"4 frames: 4 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	// pcapgo's own scaling loses these (from 2^-30), divides by zero (from
	// 2^-64) or wraps (past 10^-19): the tracker hands the raw count
	// through and decode scales it exactly. tshark has 2^-30 right and the
	// rest not: 2^-40 as 5.015118976 where (5·2^40 + 2^38)/2^40 is 5.25,
	// 10^-20 as 0 where 12345678901234567890·10^-20 is .123456789, and
	// 10^-127 as 1.
	{"pcapng timestamp resolutions 2^-30, 2^-40, 2^-127, 10^-20, 10^-127", "tsresol_fine.pcapng", 0, []string{
		"#1 1700000004.500000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#2 5.250000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#3 0.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#4 0.123456789 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#5 0.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"5 frames: 5 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, []string{"1700000004.500000000", "5.015118976", "0.000000000", "0.000000000", "1.000000000"}},
	// if_tsresol 0 is 10^0, whole seconds, as tshark reads it (pcapgo took
	// it for its default, microseconds: 0.001 for 1000 units); 2^64-1
	// units wrap to -1 s in tshark's signed 64-bit seconds too.
	{"pcapng timestamp resolution 10^0", "tsresol_seconds.pcapng", 0, []string{
		"#1 1700000005.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#2 -1.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"2 frames: 2 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, nil},
	// A simple packet block has no timestamp (tshark: no time_epoch): its
	// time is "-", not the zero time.Time (-62135596800).
	{"pcapng simple packet block, no timestamp", "simple_packet_block.pcapng", 0, []string{
		"#1 - 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"1 frames: 1 roce (0 bad icrc, 0 malformed), 0 skipped",
	}, false, []string{""}},
	// RoCEv2 that softnic refuses is said to be refused, and why; it is
	// not counted as a frame that is not RoCE.
	{"IPv4 options", "ipv4_options.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: roce: parse IPv4 at offset 14: bad length: IPv4 options are not supported",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}, false, nil},
	{"bad IPv4 header checksum", "ipv4_bad_checksum.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: roce: parse IPv4 at offset 24: bad checksum",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}, false, nil},
	{"IPv4 first fragment", "ipv4_first_fragment.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: UDP to port 4791, but an IP fragment (RoCEv2 sets DF): roce: parse IPv4 at offset 20: not a RoCEv2 packet: IP fragment",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}, true, nil},
	{"IPv6 hop-by-hop header", "ipv6_hop_by_hop.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: UDP to port 4791, but IPv6 extension headers are not supported: roce: parse IPv6 at offset 20: not a RoCEv2 packet: next header is not UDP",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}, false, nil},
	{"cut by a 64-byte snap length", "snaplen64.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: captured 64 of its 122 bytes (the capture's snap length): roce: parse IPv4 at offset 16: truncated: total length beyond the frame",
		"1 frames: 1 roce (0 bad icrc, 1 malformed), 0 skipped",
	}, false, nil},
	{"every opcode, every AETH syndrome class", "every_opcode.pcap", 0, nil, false, nil},
	{"opcodes softnic does not read", "unknown_opcodes.pcap", 1, []string{
		"#1 1700000000.000000000 MALFORMED: roce: parse BTH at offset 42: bad opcode: 0xa4 is XRC, not supported (softnic reads RC, UC, UD and CNP)",
		"#2 1700000001.000000000 MALFORMED: roce: parse BTH at offset 42: bad opcode: 0x15 is no RC opcode",
		"#3 1700000002.000000000 MALFORMED: roce: parse BTH at offset 42: bad opcode: 0x40 is RD, not supported (softnic reads RC, UC, UD and CNP)",
		"3 frames: 3 roce (0 bad icrc, 3 malformed), 0 skipped",
	}, false, nil},
	{"RoCEv1 is counted as not read", "rocev1.pcap", 0, []string{
		"1 frames: 0 roce (0 bad icrc, 0 malformed), 1 skipped (1 RoCEv1, EtherType 0x8915: not read, decode reads RoCEv2)",
	}, false, nil},
	{"UDP to 4792 is not RoCEv2", "udp_4792.pcap", 0, []string{
		"1 frames: 0 roce (0 bad icrc, 0 malformed), 1 skipped",
	}, false, nil},
}

func TestDecodeForeignCaptures(t *testing.T) {
	for _, tc := range foreignCaptures {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runDecode([]string{filepath.Join("testdata", "captures", tc.file)}, &out, &errb)
			got := strings.TrimRight(out.String(), "\n")
			want := strings.Join(tc.want, "\n")
			if tc.want == nil {
				golden := filepath.Join("testdata", "captures", tc.file+".txt")
				if *update {
					if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want = strings.TrimRight(string(mustRead(t, golden)), "\n")
			}
			if got != want || code != tc.code {
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

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeForeignCapturesTshark checks decode against Wireshark's
// infiniband dissector on the same files: the frames decode counts as
// RoCEv2 (decoded or MALFORMED) are the frames tshark dissects as RoCE in
// UDP to 4791 (RoCEv1 is RoCE to tshark, and not RoCEv2), and
// where decode reads one, tshark reads the same time, opcode, flags, QP,
// PSN, DMA length and AETH.
// (tshark does not check the ICRC, nor refuse IPv4 options or a cut frame.)
func TestDecodeForeignCapturesTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	for _, tc := range foreignCaptures {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", "captures", tc.file)
			args := []string{"-r", path, "-Y", "udp.dstport == 4791 && infiniband", "-T", "fields",
				"-e", "frame.number", "-e", "frame.time_epoch", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.se", "-e", "infiniband.bth.a",
				"-e", "infiniband.bth.padcnt", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
				"-e", "infiniband.reth.dmalen", "-e", "infiniband.aeth.syndrome", "-e", "infiniband.aeth.msn"}
			for _, d := range []string{"rpcordma", "smc", "smb_direct", "nvme-rdma", "lnet", "iser"} {
				args = append(args, "--disable-protocol", d)
			}
			cmd := exec.Command(tshark, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			ts, err := cmd.Output()
			if err != nil {
				t.Fatalf("tshark: %v\n%s", err, stderr.String())
			}
			var out, errb bytes.Buffer
			runDecode([]string{"--json", path}, &out, &errb)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if l == "" {
					continue
				}
				var f struct {
					Frame  int     `json:"frame"`
					Time   string  `json:"time"`
					Opcode uint8   `json:"opcode"`
					SE     bool    `json:"se"`
					AckReq bool    `json:"ack_req"`
					Pad    uint8   `json:"pad"`
					DestQP *uint32 `json:"dest_qp"`
					PSN    uint32  `json:"psn"`
					RETH   *struct {
						Len uint32 `json:"len"`
					} `json:"reth"`
					AETH *struct {
						Syndrome uint8  `json:"syndrome"`
						MSN      uint32 `json:"msn"`
					} `json:"aeth"`
				}
				if err := json.Unmarshal([]byte(l), &f); err != nil {
					t.Fatalf("decode line %q: %v", l, err)
				}
				if f.DestQP == nil { // MALFORMED: the frame number only
					got = append(got, fmt.Sprint(f.Frame))
					continue
				}
				line := fmt.Sprintf("%d\t%s\t%d\t%d\t%d\t%d\t0x%06x\t%d\t", f.Frame, f.Time, f.Opcode, b01(f.SE), b01(f.AckReq), f.Pad, *f.DestQP, f.PSN)
				if f.RETH != nil {
					line += fmt.Sprint(f.RETH.Len)
				}
				if f.AETH != nil {
					line += fmt.Sprintf("\t%d\t%d", f.AETH.Syndrome, f.AETH.MSN)
				} else {
					line += "\t\t"
				}
				got = append(got, strings.TrimRight(line, "\t"))
			}
			want := strings.Split(strings.TrimRight(string(ts), "\n"), "\n")
			for i := range want {
				want[i] = strings.TrimRight(want[i], "\t")
			}
			if len(want) == 1 && want[0] == "" {
				want = nil
			}
			if tc.tsharkNone {
				if want != nil {
					t.Fatalf("tshark now dissects it:\n%s", ts)
				}
				return
			}
			if len(got) != len(want) {
				t.Fatalf("decode:\n%s\ntshark:\n%s", strings.Join(got, "\n"), ts)
			}
			if tc.tsharkTime != nil {
				if len(tc.tsharkTime) != len(want) {
					t.Fatalf("%d tshark times for %d frames", len(tc.tsharkTime), len(want))
				}
				for i := range want { // tshark's time where decode's is exact
					f := strings.Split(want[i], "\t")
					if f[1] != tc.tsharkTime[i] {
						t.Errorf("frame line %d: tshark's time is now %s, not %s: is it exact?", i, f[1], tc.tsharkTime[i])
					}
					g := strings.Split(got[i], "\t")
					g[1] = f[1]
					got[i] = strings.Join(g, "\t")
				}
			}
			for i := range got {
				if !strings.Contains(got[i], "\t") && strings.SplitN(want[i], "\t", 2)[0] == got[i] {
					continue // MALFORMED here, dissected there: same frame
				}
				if got[i] != want[i] {
					t.Errorf("frame line %d: decode %q, tshark %q", i, got[i], want[i])
				}
			}
		})
	}
}

// FuzzParseCaptured: decode's link and IP walk (captureIP, udpToRoCE)
// never panics, on any link type decode reads, and a frame it takes for
// RoCEv2 is one the parser either reads or refuses with a reason.
func FuzzParseCaptured(f *testing.F) {
	for _, tc := range foreignCaptures {
		r, err := trace.NewPcapReader(bytes.NewReader(mustRead(f, filepath.Join("testdata", "captures", tc.file))))
		if err != nil {
			f.Fatal(err)
		}
		for {
			fr, err := r.ReadFrame()
			if err != nil {
				break
			}
			f.Add(fr.Link, fr.Data)
		}
	}
	f.Fuzz(func(t *testing.T, link uint16, data []byte) {
		var pkt roce.Packet
		ok, err := parseCaptured(trace.PcapFrame{Data: data, OrigLen: len(data), Link: link}, &pkt)
		if ok && err == nil && pkt.BTH == nil {
			t.Fatal("taken for RoCEv2 and read, without a BTH")
		}
	})
}
