package main

// softnic decode: read a pcap/pcapng capture, parse every RoCEv2 frame with
// the strict roce parser and check its ICRC (Wireshark displays the ICRC but
// never validates it; this command does).
//
// Text output, one line per frame:
//
//	#N TIME SRC:PORT → DST:PORT OPCODE qp=0xQPN psn=0xPSN ack=0|1 [se] [pad=N] [HEADERS] len=PAYLOAD icrc=ok|BAD (want W, got G)
//
// TIME is the capture timestamp as seconds.nanoseconds since the Unix epoch
// (softnic trace's captures start at the epoch at the post, so this is the
// walk's virtual time: a frame's TIME is its wire stage's start_ns), or
// "-" for a frame without one (a pcapng simple packet block).
// ICRC values are printed as the four wire bytes read big-endian, the way
// Wireshark's infiniband.invariant.crc shows them.
//
// With --json each frame is one JSON object on its own line (keys: frame,
// time, src, dst, src_port, opcode, opcode_name, dest_qp, psn, ack_req, se,
// migreq, pad, pkey, fecn, becn, reth{va,rkey,len}, aeth{syndrome,msn},
// atomic{va,rkey,swap_add,compare}, atomic_ack, imm, ieth, deth{qkey,src_qp},
// feth{placement_type,selectivity}, payload_len, icrc, icrc_ok, icrc_want).
// Headers the opcode does not carry are omitted, not null; icrc_want appears
// only when the ICRC is bad. A malformed RoCEv2 frame prints {"frame": N,
// "error": "..."}. The summary goes to stdout in text mode and to stderr with
// --json, so stdout stays pure JSON lines.
//
// Link types: Ethernet (with or without 802.1Q/802.1ad tags), Linux cooked
// (SLL and SLL2) and raw IP. Frames that are not RoCEv2 (not a UDP datagram to port
// 4791, other EtherTypes or link types) are skipped and counted; RoCEv1
// (EtherType 0x8915) among them is counted in the summary as not read. A datagram
// to 4791 that the strict parser refuses (IPv4 options, a bad IPv4 header
// checksum, an IP fragment, IPv6 extension headers, a frame cut by the
// capture's snap length) is RoCEv2 softnic cannot check: it is MALFORMED,
// with the reason, never skipped. Exit status: 0 when every RoCEv2 frame
// parsed with a good ICRC, 1 when any had a bad ICRC or was malformed, 2 on
// usage or file errors. A capture that ends inside a record (pcap) or a
// block (pcapng) is such an error: the frames before the cut are printed,
// the summary ends in ", TRUNCATED" and an error line on stderr says where
// the input stopped.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/trace"
)

func init() {
	register("decode", "decode and check a RoCEv2 capture (pcap/pcapng)", runDecode)
}

type decodeSummary struct {
	frames, roce, badICRC, malformed, skipped int
	rocev1                                    int // of the skipped
}

// etherTypeRoCEv1 is RoCE over Ethernet without IP/UDP (the GRH follows
// the Ethernet header): decode does not read it, and says so.
const etherTypeRoCEv1 = 0x8915

const decodeHelp = "usage: softnic decode [--json] FILE   (FILE: pcap or pcapng; - for stdin)\n"

func runDecode(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, "print one JSON object per frame")
	pos, code, ok := parseCommand(fs, decodeHelp, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		printUsage(fs, decodeHelp, stderr)
		return 2
	}
	in := stdin
	if name := pos[0]; name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "softnic decode:", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	r, err := trace.NewPcapReader(in)
	if err != nil {
		fmt.Fprintln(stderr, "softnic decode:", err)
		return 2
	}

	var (
		s   decodeSummary
		pkt roce.Packet
		enc = json.NewEncoder(stdout)
	)
	for {
		fr, err := r.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			tail := ""
			switch {
			case errors.Is(err, trace.ErrTruncated):
				tail = ", TRUNCATED"
			case errors.Is(err, trace.ErrMalformed):
				tail = ", MALFORMED"
			}
			if tail != "" {
				// What was read is shown, but the capture is not
				// complete or not sound: say so and fail.
				s.printSummary(*jsonOut, stdout, stderr, tail)
				fmt.Fprintf(stderr, "softnic decode: after frame %d: %v\n", s.frames, err)
				return 2
			}
			fmt.Fprintln(stderr, "softnic decode:", err)
			return 2
		}
		s.frames++
		ok, perr := parseCaptured(fr, &pkt)
		if !ok {
			s.skipped++
			if _, et, _ := captureIP(fr.Link, fr.Data); et == etherTypeRoCEv1 {
				s.rocev1++
			}
			continue
		}
		s.roce++
		ts := frameTime(fr.Timestamp)
		switch {
		case perr == nil:
		case errors.Is(perr, roce.ErrBadICRC):
			s.badICRC++
		default:
			s.malformed++
			if *jsonOut {
				_ = enc.Encode(map[string]any{"frame": s.frames, "time": ts, "error": perr.Error()})
			} else {
				fmt.Fprintf(stdout, "#%d %s MALFORMED: %v\n", s.frames, ts, perr)
			}
			continue
		}
		if *jsonOut {
			_ = enc.Encode(frameJSON(s.frames, ts, &pkt))
		} else {
			fmt.Fprintln(stdout, frameText(s.frames, ts, &pkt))
		}
	}
	s.printSummary(*jsonOut, stdout, stderr, "")
	if s.badICRC > 0 || s.malformed > 0 {
		return 1
	}
	return 0
}

// frameTime is a frame's time as seconds since the epoch, or "-" for a
// frame that has none: a pcapng simple packet block carries no timestamp
// (tshark shows no frame.time_epoch), and the zero time.Time it reads as
// is not a time the capture gave.
func frameTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// printSummary prints the closing line: on stdout in text mode, on stderr
// with --json.
func (s decodeSummary) printSummary(jsonOut bool, stdout, stderr io.Writer, note string) {
	if s.rocev1 > 0 {
		note = fmt.Sprintf(" (%d RoCEv1, EtherType 0x8915: not read, decode reads RoCEv2)", s.rocev1) + note
	}
	sum := fmt.Sprintf("%d frames: %d roce (%d bad icrc, %d malformed), %d skipped%s",
		s.frames, s.roce, s.badICRC, s.malformed, s.skipped, note)
	if jsonOut {
		fmt.Fprintln(stderr, sum)
	} else {
		fmt.Fprintln(stdout, sum)
	}
}

// parseCaptured parses one captured frame by link type. ok is false when the
// frame is not RoCEv2 at all (to be skipped): not IP on a link type decode
// reads, or not a UDP datagram to port 4791. Otherwise err is the parser's
// verdict (nil, ErrBadICRC with pkt filled, or another parse error): a
// datagram to 4791 the strict parser refuses (IPv4 options, a bad IPv4
// header checksum, IPv6 extension headers, a frame cut by the capture's snap
// length) is RoCEv2 that softnic cannot check, and says why, instead of
// being counted as not RoCE.
func parseCaptured(fr trace.PcapFrame, pkt *roce.Packet) (ok bool, err error) {
	ip, et, ok := captureIP(fr.Link, fr.Data)
	if !ok || !udpToRoCE(fr.Data[ip:]) {
		return false, nil
	}
	switch {
	case fr.Link == linkTypeEthernet:
		err = roce.ParseFrame(fr.Data, pkt) // VLAN tags included
	case et != 0 && (et == roce.EtherTypeIPv4) != (fr.Data[ip]>>4 == 4):
		*pkt = roce.Packet{}
		err = &roce.ParseError{Layer: roce.LayerIP, Offset: ip, Err: roce.ErrBadVersion, Detail: "IP version does not match EtherType"}
	default:
		// Raw IP or cooked: the parser's offsets count from the IP
		// header; decode's from the frame.
		err = roce.ParseIP(fr.Data[ip:], pkt)
		var pe *roce.ParseError
		if errors.As(err, &pe) {
			pe.Offset += ip
		}
	}
	if err != nil && !errors.Is(err, roce.ErrBadICRC) {
		var pe *roce.ParseError
		if errors.Is(err, roce.ErrBadOpcode) && errors.As(err, &pe) && pe.Offset < len(fr.Data) {
			// The parser's detail is static: name the byte (the BTH's
			// first) and its transport here.
			op := roce.Opcode(fr.Data[pe.Offset])
			switch tr := op.Transport(); tr {
			case roce.TransportRC, roce.TransportUC, roce.TransportUD, roce.TransportCNP:
				err = fmt.Errorf("%w: 0x%02x is no %v opcode", err, uint8(op), tr)
			default:
				err = fmt.Errorf("%w: 0x%02x is %v, not supported (softnic reads RC, UC, UD and CNP)", err, uint8(op), tr)
			}
		}
		if errors.Is(err, roce.ErrNotRoCE) {
			// udpToRoCE found the UDP header behind what the parser
			// stops at: a first fragment or IPv6 extension headers.
			what := "an IP fragment (RoCEv2 sets DF)"
			if fr.Data[ip]>>4 == 6 {
				what = "IPv6 extension headers are not supported"
			}
			err = fmt.Errorf("UDP to port 4791, but %s: %w", what, err)
		}
		if fr.OrigLen > len(fr.Data) {
			err = fmt.Errorf("captured %d of its %d bytes (the capture's snap length): %w", len(fr.Data), fr.OrigLen, err)
		}
	}
	return true, err
}

// The link types decode reads, as numbers: gopacket's layers.LinkType is a
// uint8 and cannot name SLL2 (trace.PcapFrame.Link).
const (
	linkTypeEthernet   = uint16(layers.LinkTypeEthernet)
	linkTypeOpenBSDRaw = 12 // raw IP on OpenBSD-style DLT
	linkTypeRaw        = uint16(layers.LinkTypeRaw)
	linkTypeLinuxSLL   = uint16(layers.LinkTypeLinuxSLL)
	linkTypeIPv4       = uint16(layers.LinkTypeIPv4)
	linkTypeIPv6       = uint16(layers.LinkTypeIPv6)
	linkTypeLinuxSLL2  = 276 // tcpdump -i any with libpcap >= 1.10
)

// captureIP finds the IP header in a captured frame: its offset, and the
// EtherType or protocol that announced it (0 for raw IP). ok is false when
// the frame does not carry IPv4 or IPv6 as far as the link header says (et
// is still the EtherType the link header names, RoCEv1's say).
// Ethernet frames may carry 802.1Q and QinQ tags, which roce.SkipVLAN
// skips as roce.ParseFrame does.
func captureIP(link uint16, d []byte) (ip int, et uint16, ok bool) {
	switch link {
	case linkTypeEthernet:
		if ip, et, _ = roce.SkipVLAN(d); ip == 0 {
			return 0, 0, false // shorter than an Ethernet header
		}
	case linkTypeLinuxSLL: // 16-byte cooked header, protocol at 14
		if len(d) < 16 {
			return 0, 0, false
		}
		ip, et = 16, binary.BigEndian.Uint16(d[14:])
	case linkTypeLinuxSLL2: // 20-byte cooked header, protocol at 0
		if len(d) < 20 {
			return 0, 0, false
		}
		ip, et = 20, binary.BigEndian.Uint16(d[0:])
	case linkTypeRaw, linkTypeIPv4, linkTypeIPv6, linkTypeOpenBSDRaw:
		return 0, 0, true
	default:
		return 0, 0, false
	}
	return ip, et, (et == roce.EtherTypeIPv4 || et == roce.EtherTypeIPv6) && len(d) > ip
}

// udpToRoCE says whether the IP packet b carries a UDP header to port 4791,
// reading only the fields that takes: the IPv4 header length (options
// included), IPv6 extension headers (hop-by-hop, routing, fragment,
// destination options), and a first fragment (a later one has no UDP
// header). It does not check the packet: the parser does.
func udpToRoCE(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	var off int
	var proto byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < roce.IPv4HeaderSize || binary.BigEndian.Uint16(b[6:])&0x1FFF != 0 {
			return false
		}
		proto, off = b[9], int(b[0]&0x0F)*4
		if off < roce.IPv4HeaderSize {
			return false
		}
	case 6:
		if len(b) < roce.IPv6HeaderSize {
			return false
		}
		proto, off = b[6], roce.IPv6HeaderSize
		for proto == 0 || proto == 43 || proto == 44 || proto == 60 {
			if len(b) < off+4 || proto == 44 && binary.BigEndian.Uint16(b[off+2:])>>3 != 0 {
				return false
			}
			proto, off = b[off], off+(int(b[off+1])+1)*8
		}
	default:
		return false
	}
	return proto == 17 && len(b) >= off+4 && binary.BigEndian.Uint16(b[off+2:]) == roce.UDPPort
}

// wireICRC shows a CRC value as its four wire bytes read big-endian.
func wireICRC(v uint32) string { return fmt.Sprintf("%08x", bits.ReverseBytes32(v)) }

func b01(v bool) int {
	if v {
		return 1
	}
	return 0
}

func frameText(n int, ts string, p *roce.Packet) string {
	b := p.BTH
	s := fmt.Sprintf("#%d %s %s → %s %v qp=0x%06x psn=0x%06x ack=%d",
		n, ts, addrPort(p.SrcIP.String(), p.SrcPort, p.IPVersion), addrPort(p.DstIP.String(), p.DstPort, p.IPVersion),
		p.Opcode, b.DestQP(), b.PSN(), b01(b.AckReq()))
	if b.SE() {
		s += " se"
	}
	if p.Pad != 0 {
		s += fmt.Sprintf(" pad=%d", p.Pad)
	}
	if p.FETH != nil {
		s += fmt.Sprintf(" feth{plt=%d sel=%d}", p.FETH.PlacementType(), p.FETH.Selectivity())
	}
	if p.DETH != nil {
		s += fmt.Sprintf(" deth{qkey=%#x srcqp=%#x}", p.DETH.QKey(), p.DETH.SrcQP())
	}
	if p.RETH != nil {
		s += fmt.Sprintf(" reth{va=%#x rkey=%#x len=%d}", p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen())
	}
	if p.AtomicETH != nil {
		a := p.AtomicETH
		s += fmt.Sprintf(" atomic{va=%#x rkey=%#x swap_add=%#x compare=%#x}", a.VA(), a.RKey(), a.SwapAdd(), a.Compare())
	}
	if p.AETH != nil {
		s += fmt.Sprintf(" aeth{%v msn=%d}", p.AETH.Syndrome(), p.AETH.MSN())
	}
	if p.AtomicAckETH != nil {
		s += fmt.Sprintf(" atomic_ack{orig=%#x}", p.AtomicAckETH.OrigData())
	}
	if p.ImmDt != nil {
		s += fmt.Sprintf(" imm=%#08x", p.ImmDt.Imm())
	}
	if p.IETH != nil {
		s += fmt.Sprintf(" ieth{rkey=%#x}", p.IETH.RKey())
	}
	s += fmt.Sprintf(" len=%d icrc=", len(p.Payload))
	if p.ICRCOK {
		s += "ok"
	} else {
		s += fmt.Sprintf("BAD (want %s, got %s)", wireICRC(p.ICRCWant), wireICRC(p.ICRC))
	}
	return s
}

func addrPort(ip string, port uint16, ver uint8) string {
	if ver == 6 {
		return fmt.Sprintf("[%s]:%d", ip, port)
	}
	return fmt.Sprintf("%s:%d", ip, port)
}

type jsonRETH struct {
	VA   uint64 `json:"va"`
	RKey uint32 `json:"rkey"`
	Len  uint32 `json:"len"`
}

type jsonAETH struct {
	Syndrome uint8  `json:"syndrome"`
	MSN      uint32 `json:"msn"`
}

type jsonAtomic struct {
	VA      uint64 `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd uint64 `json:"swap_add"`
	Compare uint64 `json:"compare"`
}

type jsonDETH struct {
	QKey  uint32 `json:"qkey"`
	SrcQP uint32 `json:"src_qp"`
}

type jsonFETH struct {
	PlacementType uint8 `json:"placement_type"`
	Selectivity   uint8 `json:"selectivity"`
}

// jsonFrame is one --json line. Absent headers are omitted.
type jsonFrame struct {
	Frame      int         `json:"frame"`
	Time       string      `json:"time"`
	Src        string      `json:"src"`
	Dst        string      `json:"dst"`
	SrcPort    uint16      `json:"src_port"`
	Opcode     uint8       `json:"opcode"`
	OpcodeName string      `json:"opcode_name"`
	DestQP     uint32      `json:"dest_qp"`
	PSN        uint32      `json:"psn"`
	AckReq     bool        `json:"ack_req"`
	SE         bool        `json:"se"`
	MigReq     bool        `json:"migreq"`
	Pad        uint8       `json:"pad"`
	PKey       uint16      `json:"pkey"`
	FECN       bool        `json:"fecn"`
	BECN       bool        `json:"becn"`
	FETH       *jsonFETH   `json:"feth,omitempty"`
	DETH       *jsonDETH   `json:"deth,omitempty"`
	RETH       *jsonRETH   `json:"reth,omitempty"`
	Atomic     *jsonAtomic `json:"atomic,omitempty"`
	AETH       *jsonAETH   `json:"aeth,omitempty"`
	AtomicAck  *uint64     `json:"atomic_ack,omitempty"`
	Imm        *uint32     `json:"imm,omitempty"`
	IETH       *uint32     `json:"ieth,omitempty"`
	PayloadLen int         `json:"payload_len"`
	ICRC       string      `json:"icrc"`
	ICRCOK     bool        `json:"icrc_ok"`
	ICRCWant   string      `json:"icrc_want,omitempty"`
}

func frameJSON(n int, ts string, p *roce.Packet) *jsonFrame {
	b := p.BTH
	j := &jsonFrame{
		Frame: n, Time: ts, Src: p.SrcIP.String(), Dst: p.DstIP.String(), SrcPort: p.SrcPort,
		Opcode: uint8(p.Opcode), OpcodeName: p.Opcode.String(),
		DestQP: b.DestQP(), PSN: uint32(b.PSN()), AckReq: b.AckReq(), SE: b.SE(), MigReq: b.MigReq(),
		Pad: p.Pad, PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(),
		PayloadLen: len(p.Payload), ICRC: wireICRC(p.ICRC), ICRCOK: p.ICRCOK,
	}
	if !p.ICRCOK {
		j.ICRCWant = wireICRC(p.ICRCWant)
	}
	if p.FETH != nil {
		j.FETH = &jsonFETH{p.FETH.PlacementType(), p.FETH.Selectivity()}
	}
	if p.DETH != nil {
		j.DETH = &jsonDETH{p.DETH.QKey(), p.DETH.SrcQP()}
	}
	if p.RETH != nil {
		j.RETH = &jsonRETH{p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()}
	}
	if p.AtomicETH != nil {
		a := p.AtomicETH
		j.Atomic = &jsonAtomic{a.VA(), a.RKey(), a.SwapAdd(), a.Compare()}
	}
	if p.AETH != nil {
		j.AETH = &jsonAETH{uint8(p.AETH.Syndrome()), p.AETH.MSN()}
	}
	if p.AtomicAckETH != nil {
		v := p.AtomicAckETH.OrigData()
		j.AtomicAck = &v
	}
	if p.ImmDt != nil {
		v := p.ImmDt.Imm()
		j.Imm = &v
	}
	if p.IETH != nil {
		v := p.IETH.RKey()
		j.IETH = &v
	}
	return j
}
