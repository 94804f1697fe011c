package main

// The bytes of the walk the HTML detail panel shows beyond the WQE and the
// CQE: the doorbell record, the PCIe TLP headers the model implies, and the
// RoCE frames captured on the link, each as annotated hex lines.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/softnic/softnic/roce"
)

// annotateDBR is the doorbell record's send counter: DBR[1], big endian
// (the low 16 bits are the SQ's cur_post).
func annotateDBR(dbr []byte) string {
	if len(dbr) < 4 {
		return ""
	}
	return fmt.Sprintf("  DBR[1]  %s  send counter = %d (sq cur_post, big-endian)\n", hexLine(dbr[:4]), binary.BigEndian.Uint32(dbr)&0xffff)
}

// TLP kinds annotateTLP builds.
const (
	tlpMWr  = "MWr"
	tlpMRd  = "MRd"
	tlpCplD = "CplD"
)

// annotateTLP is the header of one PCIe TLP as the model implies it: a
// 4-DW header with a 64-bit address for MWr / MRd (the emulator charges
// pcie.Spec.HdrMWr / HdrMRd bytes for it), a 3-DW header for CplD, for n
// bytes at addr. The emulator does not serialise TLPs; requester and
// completer IDs (bus/device/function) are not modelled and shown as 0.
func annotateTLP(kind string, addr uint64, n int, tag uint8) string {
	if n <= 0 {
		n = 4
	}
	dw := (int(addr&3) + n + 3) / 4
	firstBE := byte(0xf<<(addr&3)) & 0xf
	lastBE := byte(0)
	if dw > 1 {
		end := (int(addr&3) + n) & 3
		lastBE = 0xf
		if end != 0 {
			lastBE = byte(1<<end) - 1
		}
	} else if e := (int(addr&3) + n) & 3; e != 0 {
		firstBE &= byte(1<<e) - 1
	}
	l := uint32(dw) & 0x3ff // 0 means 1024 DW
	var h []byte
	var s strings.Builder
	switch kind {
	case tlpCplD:
		h = make([]byte, 12)
		h[0] = 0x4a // Fmt 010 (3 DW, data), Type 01010 (Cpl)
		binary.BigEndian.PutUint16(h[2:], uint16(l))
		binary.BigEndian.PutUint16(h[6:], uint16(n&0xfff)) // status 000 SC, BCM 0, byte count
		h[10] = tag
		h[11] = byte(addr & 0x7f)
		fmt.Fprintf(&s, "  DW0  %s  Fmt 010 Type 01010 = CplD (3-DW header, with data), TC 0, Length %d DW\n", hexLine(h[0:4]), dw)
		fmt.Fprintf(&s, "  DW1  %s  completer ID 0000, status SC, BCM 0, byte count %d\n", hexLine(h[4:8]), n&0xfff)
		fmt.Fprintf(&s, "  DW2  %s  requester ID 0000, tag %d, lower address %#02x\n", hexLine(h[8:12]), tag, addr&0x7f)
		return s.String()
	case tlpMRd:
		h = make([]byte, 16)
		h[0] = 0x20 // Fmt 001 (4 DW, no data), Type 00000
	default:
		h = make([]byte, 16)
		h[0] = 0x60 // Fmt 011 (4 DW, data), Type 00000
	}
	binary.BigEndian.PutUint16(h[2:], uint16(l))
	h[6] = tag
	h[7] = lastBE<<4 | firstBE
	binary.BigEndian.PutUint64(h[8:], addr&^3)
	what := "MWr (4-DW header, 64-bit address, with data)"
	fmtBits := "011"
	if kind == tlpMRd {
		what, fmtBits = "MRd (4-DW header, 64-bit address, no data)", "001"
	}
	fmt.Fprintf(&s, "  DW0  %s  Fmt %s Type 00000 = %s, TC 0, Length %d DW\n", hexLine(h[0:4]), fmtBits, what, dw)
	tagNote := fmt.Sprintf("tag %d", tag)
	if kind == tlpMWr {
		tagNote = "tag 0 (posted: unused)"
	}
	fmt.Fprintf(&s, "  DW1  %s  requester ID 0000, %s, last BE %04b, first BE %04b\n", hexLine(h[4:8]), tagNote, lastBE, firstBE)
	fmt.Fprintf(&s, "  DW2  %s  address[63:32] %#08x\n", hexLine(h[8:12]), addr>>32)
	fmt.Fprintf(&s, "  DW3  %s  address[31:2]  %#08x (address %#x)\n", hexLine(h[12:16]), uint32(addr)&^3, addr)
	return s.String()
}

// tlpNote is the HexNote of a stage showing implied TLP headers.
const tlpNote = "as the model implies it (the emulator does not serialise TLPs): "

// hexRows prints b 16 bytes a row, prefixed by its offset in the frame.
func hexRows(s *strings.Builder, off int, b []byte, note string) {
	for i := 0; i < len(b); i += 16 {
		n := ""
		if i == 0 {
			n = note
		}
		fmt.Fprintf(s, "  +%03x  %-39s  %s\n", off+i, hexLine(b[i:min(i+16, len(b))]), n)
	}
}

// annotateFrame is a RoCEv2 frame layer by layer: Ethernet, IPv4 (or
// IPv6), UDP, BTH, the extended headers the opcode carries, the first 32
// bytes of the payload and the ICRC.
func annotateFrame(f []byte) string {
	var p roce.Packet
	err := roce.ParseFrame(f, &p)
	var s strings.Builder
	if err != nil && (p.BTH == nil || p.Len > len(f) || p.IPHeader == nil) {
		fmt.Fprintf(&s, "  not a RoCEv2 frame (%v)\n", err)
		hexRows(&s, 0, f[:min(len(f), 64)], "")
		return s.String()
	}
	mac := macString
	fmt.Fprintf(&s, "Ethernet\n")
	hexRows(&s, 0, f[:roce.EthHeaderSize], fmt.Sprintf("dst %s src %s EtherType %#04x", mac(p.DstMAC), mac(p.SrcMAC), binary.BigEndian.Uint16(f[12:])))
	off := roce.EthHeaderSize
	ip := p.IPHeader
	if p.IPVersion == 4 {
		fl := binary.BigEndian.Uint16(ip[6:])
		flags := []string{}
		if fl&0x4000 != 0 {
			flags = append(flags, "DF")
		}
		if fl&0x2000 != 0 {
			flags = append(flags, "MF")
		}
		fmt.Fprintf(&s, "IPv4\n")
		fmt.Fprintf(&s, "  +%03x  %-39s  version %d IHL %d (%d B), TOS %#02x, total length %d\n", off, hexLine(ip[0:4]), ip[0]>>4, ip[0]&15, int(ip[0]&15)*4, ip[1], binary.BigEndian.Uint16(ip[2:]))
		fmt.Fprintf(&s, "  +%03x  %-39s  ID %#04x, flags [%s], fragment offset %d\n", off+4, hexLine(ip[4:8]), p.IPID, strings.Join(flags, " "), fl&0x1fff)
		fmt.Fprintf(&s, "  +%03x  %-39s  TTL %d, protocol %d (UDP), header checksum %#04x\n", off+8, hexLine(ip[8:12]), ip[8], ip[9], binary.BigEndian.Uint16(ip[10:]))
		fmt.Fprintf(&s, "  +%03x  %-39s  src %v dst %v\n", off+12, hexLine(ip[12:20]), p.SrcIP, p.DstIP)
	} else {
		fmt.Fprintf(&s, "IPv6\n")
		hexRows(&s, off, ip, fmt.Sprintf("traffic class %#02x, flow label %#x, hop limit %d, src %v dst %v", p.TOS, p.FlowLabel, p.TTL, p.SrcIP, p.DstIP))
	}
	off += len(ip)
	u := f[off : off+roce.UDPHeaderSize]
	fmt.Fprintf(&s, "UDP\n")
	fmt.Fprintf(&s, "  +%03x  %-39s  src port %d, dst port %d (RoCEv2), length %d, checksum %#04x\n", off, hexLine(u), p.SrcPort, p.DstPort,
		binary.BigEndian.Uint16(u[4:]), binary.BigEndian.Uint16(u[6:]))
	off += roce.UDPHeaderSize
	b := p.BTH
	fmt.Fprintf(&s, "BTH\n")
	fmt.Fprintf(&s, "  +%03x  %-39s  opcode %v (%#02x), SE %d M %d pad %d TVer %d, P_Key %#04x; dest QP %#06x; AckReq %d, PSN 0x%06x\n", off, hexLine(b),
		p.Opcode, uint8(p.Opcode), b01(b.SE()), b01(b.MigReq()), b.PadCnt(), b.TVer(), b.PKey(), b.DestQP(), b01(b.AckReq()), b.PSN())
	off += roce.BTHSize
	ext := func(name string, h []byte, note string) {
		if h == nil {
			return
		}
		fmt.Fprintf(&s, "%s\n", name)
		hexRows(&s, off, h, note)
		off += len(h)
	}
	if p.DETH != nil {
		ext("DETH", p.DETH, fmt.Sprintf("Q_Key %#x, src QP %#06x", p.DETH.QKey(), p.DETH.SrcQP()))
	}
	if p.RETH != nil {
		ext("RETH", p.RETH, fmt.Sprintf("VA %#x, R_Key %#x, DMA length %d", p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()))
	}
	if p.AtomicETH != nil {
		a := p.AtomicETH
		ext("AtomicETH", a, fmt.Sprintf("VA %#x, R_Key %#x, swap/add %#x, compare %#x", a.VA(), a.RKey(), a.SwapAdd(), a.Compare()))
	}
	if p.AETH != nil {
		ext("AETH", p.AETH, fmt.Sprintf("syndrome %v, MSN %d", p.AETH.Syndrome(), p.AETH.MSN()))
	}
	if p.AtomicAckETH != nil {
		ext("AtomicAckETH", p.AtomicAckETH, fmt.Sprintf("original data %#x", p.AtomicAckETH.OrigData()))
	}
	if p.ImmDt != nil {
		ext("ImmDt", p.ImmDt, fmt.Sprintf("immediate %#08x", p.ImmDt.Imm()))
	}
	if p.IETH != nil {
		ext("IETH", p.IETH, fmt.Sprintf("R_Key %#x", p.IETH.RKey()))
	}
	if n := len(p.Payload); n > 0 {
		fmt.Fprintf(&s, "payload (%d bytes", n)
		if p.Pad > 0 {
			fmt.Fprintf(&s, " + %d pad", p.Pad)
		}
		fmt.Fprintf(&s, ")\n")
		show := p.Payload[:min(n, 32)]
		for i := 0; i < len(show); i += 16 {
			more := ""
			if i+16 >= len(show) && n > 32 {
				more = " …"
			}
			fmt.Fprintf(&s, "  +%03x  %s%s\n", off+i, hexLine(show[i:min(i+16, len(show))]), more)
		}
		off += n
	}
	off += int(p.Pad)
	if off+roce.ICRCSize > len(f) {
		return s.String()
	}
	verdict := "ok"
	if !p.ICRCOK {
		verdict = "BAD, want " + wireICRC(p.ICRCWant)
	}
	fmt.Fprintf(&s, "ICRC\n  +%03x  %-39s  ICRC %s (%s)\n", off, hexLine(f[off:off+roce.ICRCSize]), wireICRC(p.ICRC), verdict)
	return s.String()
}

// capturedFrame is one frame the link tap saw during the walk.
type capturedFrame struct {
	src   netip.Addr
	psn   uint32
	frame []byte
}

type frameKey struct {
	src netip.Addr
	psn uint32
}

// frameLog keeps the frames of a walk for --json and --html: all of them
// up to max, then the most recent max (a ring), as the recorder keeps a
// resending walk's tail.
type frameLog struct {
	max     int
	frames  []capturedFrame
	next    int // once full: the oldest frame, overwritten next
	dropped int // frames overwritten
	// byKey and cursor are built by the first lookup: the frames of each
	// (source, PSN) in order, and per stage name how many of them earlier
	// stages took.
	byKey  map[frameKey][]int
	cursor map[cursorKey]int
	// sent counts the frames of each (source, PSN) the walk sent, kept or
	// overwritten: the first sent-kept of them are gone, and the stages
	// that sent those show no frame rather than a later copy's bytes.
	sent map[frameKey]int
}

type cursorKey struct {
	name string
	frameKey
}

func newFrameLog(n int) *frameLog {
	return &frameLog{max: max(n, 1), sent: map[frameKey]int{}}
}

func (l *frameLog) add(f capturedFrame) {
	l.sent[frameKey{f.src, f.psn}]++
	if len(l.frames) < l.max {
		l.frames = append(l.frames, f)
		return
	}
	l.frames[l.next] = f
	l.next = (l.next + 1) % len(l.frames)
	l.dropped++
}

// frameFor is the frame ip sent with psn that the next stage of this name
// shows: the Nth stage of a name takes the Nth copy sent (a frame sent
// again matches its next wire stage), nil when that copy was let go (an
// overwritten copy, not the next one kept: the stage would show a later
// resend's bytes) or never seen.
func (l *frameLog) frameFor(name string, ip netip.Addr, psn uint32) []byte {
	if l.byKey == nil {
		l.byKey, l.cursor = map[frameKey][]int{}, map[cursorKey]int{}
		for j := range l.frames { // oldest first
			i := (l.next + j) % len(l.frames)
			k := frameKey{l.frames[i].src, l.frames[i].psn}
			l.byKey[k] = append(l.byKey[k], i)
		}
	}
	k := frameKey{ip, psn}
	c, idx := cursorKey{name, k}, l.byKey[k]
	i := l.cursor[c]
	l.cursor[c] = i + 1
	i -= l.sent[k] - len(idx) // the copies overwritten before the kept ones
	if i < 0 || i >= len(idx) {
		return nil
	}
	return l.frames[idx[i]].frame
}
