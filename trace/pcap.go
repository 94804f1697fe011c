package trace

// pcap of wire frames. Files are written in classic pcap format with
// nanosecond timestamps (magic 0xa1b23c4d, link type Ethernet) through
// gopacket's pure-Go pcapgo (never gopacket/pcap, which needs cgo). A frame's
// timestamp is the Unix epoch plus its virtual time, truncated to the
// nanosecond, so the same simulation always writes the same bytes. The reader
// accepts classic pcap (µs or ns) and pcapng.

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softnic/softnic/sim"
)

// PcapSnaplen is the snapshot length written in the file header; longer
// frames are truncated in the file (their original length is kept).
const PcapSnaplen = 262144

// FrameTap receives every frame a link carries, stamped with virtual time.
// *PcapWriter implements it.
type FrameTap interface {
	WriteFrame(t sim.Time, frame []byte) error
}

// PcapWriter writes Ethernet frames to a pcap file with nanosecond
// timestamps taken from virtual time. It is not safe for concurrent use (a
// simulation is single-threaded).
type PcapWriter struct {
	w *pcapgo.Writer
}

// NewPcapWriter writes the pcap file header to w and returns the writer.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(PcapSnaplen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("trace: pcap header: %w", err)
	}
	return &PcapWriter{w: pw}, nil
}

// ErrNegativeTime is returned for a frame stamped before time zero.
var ErrNegativeTime = errors.New("trace: negative virtual time")

// PcapTimestamp converts virtual time to the timestamp stored in the file:
// the Unix epoch plus t, truncated to the nanosecond.
func PcapTimestamp(t sim.Time) time.Time {
	return time.Unix(0, int64(t)/int64(sim.Nanosecond)).UTC()
}

// WriteFrame appends one frame captured at virtual time t.
func (p *PcapWriter) WriteFrame(t sim.Time, frame []byte) error {
	if t < 0 {
		return ErrNegativeTime
	}
	data := frame
	if len(data) > PcapSnaplen {
		data = data[:PcapSnaplen]
	}
	ci := gopacket.CaptureInfo{
		Timestamp:     PcapTimestamp(t),
		CaptureLength: len(data),
		Length:        len(frame),
	}
	if err := p.w.WritePacket(ci, data); err != nil {
		return fmt.Errorf("trace: pcap write: %w", err)
	}
	return nil
}

// PcapOrder writes frames to a PcapWriter in time order when they are
// handed over ahead of their time. A link tap sees a frame when it is
// queued, stamped with the time its transmission starts, which may come
// after that of a frame the other end queues later (a batch's frames queue
// back to back, the ACKs the other way start between them): written as
// they came, the capture went back in time. A frame waits until the clock,
// given with each, has reached its time: every frame handed over later
// starts then or after. Flush writes the rest at the end.
type PcapOrder struct {
	w   *PcapWriter
	q   orderedFrames
	seq uint64
}

// NewPcapOrder orders the frames written to w.
func NewPcapOrder(w *PcapWriter) *PcapOrder { return &PcapOrder{w: w} }

// WriteFrame takes a frame whose transmission starts at t (now or later;
// the frame is copied), then writes every frame due by now, in time order
// (frames of one time in the order they came).
func (o *PcapOrder) WriteFrame(now, t sim.Time, frame []byte) error {
	heap.Push(&o.q, orderedFrame{t: t, seq: o.seq, frame: append([]byte(nil), frame...)})
	o.seq++
	return o.write(now)
}

// Flush writes every frame still waiting.
func (o *PcapOrder) Flush() error { return o.write(math.MaxInt64) }

func (o *PcapOrder) write(upTo sim.Time) error {
	for len(o.q) > 0 && o.q[0].t <= upTo {
		f := heap.Pop(&o.q).(orderedFrame)
		if err := o.w.WriteFrame(f.t, f.frame); err != nil {
			return err
		}
	}
	return nil
}

type orderedFrame struct {
	t     sim.Time
	seq   uint64
	frame []byte
}

// orderedFrames is a min-heap by time, then arrival.
type orderedFrames []orderedFrame

func (h orderedFrames) Len() int { return len(h) }
func (h orderedFrames) Less(i, j int) bool {
	return h[i].t < h[j].t || h[i].t == h[j].t && h[i].seq < h[j].seq
}
func (h orderedFrames) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *orderedFrames) Push(x any)   { *h = append(*h, x.(orderedFrame)) }
func (h *orderedFrames) Pop() any {
	old := *h
	f := old[len(old)-1]
	*h = old[:len(old)-1]
	return f
}

// PcapFrame is one frame read from a capture file.
type PcapFrame struct {
	Timestamp time.Time
	Data      []byte // owned by the caller
	OrigLen   int    // length on the wire (>= len(Data))
	LinkType  layers.LinkType
	// Link is the link type number as the file has it. gopacket's
	// LinkType is a uint8 and keeps only the low byte of the numbers past
	// 255: LINKTYPE_LINUX_SLL2 (276, what tcpdump -i any writes) reads as
	// 20.
	Link uint16
}

// VirtualTime returns the frame's timestamp as virtual time (the inverse of
// PcapTimestamp), and false when it does not fit (real-world captures far
// from the epoch).
func (f PcapFrame) VirtualTime() (sim.Time, bool) {
	ns := f.Timestamp.UnixNano()
	if ns < 0 || ns > math.MaxInt64/int64(sim.Nanosecond) {
		return 0, false
	}
	return sim.Time(ns * int64(sim.Nanosecond)), true
}

// PcapReader reads frames from a classic pcap or a pcapng file.
type PcapReader struct {
	pcap *pcapgo.Reader
	ng   *pcapgo.NgReader
	trk  *recordTracker
	br   *bufio.Reader // between trk and the parser

	link    uint16 // classic pcap: the file header's link type number
	section int    // pcapng: the parser's section, counted from 0
}

// ErrTruncated is returned (wrapped) when the capture ends in the middle of
// a pcap record or a pcapng block: the file was cut, it is not complete.
var ErrTruncated = errors.New("trace: capture truncated")

// ErrMalformed is returned (wrapped) for a record or block whose lengths
// contradict each other or go past what a capture holds: a pcapng packet
// block whose captured length does not fit in the block, a block length
// that is not a multiple of 4 or too short for the block's fields, an
// option running past its block, a packet captured longer than
// maxCaptureLength or than its original length (pcapgo's classic reader
// refuses that one too, with an error of its own). pcapgo would read such
// a packet's bytes out of the blocks after it, and it allocates the length
// a header claims before it reads a byte of it.
var ErrMalformed = errors.New("trace: capture malformed")

// maxCaptureLength bounds the captured length of a classic pcap record or
// a pcapng packet block, whatever the file header's or the interface's snap
// length says (either may be 0xffffffff, a pcapng interface's 0 is
// "unlimited"): libpcap's MAXIMUM_SNAPLEN, 262144, past which libpcap
// refuses a record too (it allows more for a few link types, D-Bus and
// USBPcap among them; this reader does not). pcapgo allocates a packet's
// captured length before reading it: unbounded, a 40-byte file made it
// allocate 4 GiB. It is the writer's PcapSnaplen, so every file written
// here reads back.
const maxCaptureLength = PcapSnaplen

// recordTracker follows the record (pcap) or block (pcapng) structure of
// the bytes read through it, so that the end of the input can be told to
// fall on a boundary or inside a record (pcapgo reports an input cut
// inside a pcapng block, or right after a pcap record header, as a plain
// io.EOF), and checks every header, and the options of the pcapng blocks
// pcapgo parses, before passing on its last byte. From a malformed one on
// nothing is passed on, reads fail with the error (bad): pcapgo, which
// reads only through the tracker, never gets a length that would have it
// allocate more than a packet may hold or read past its block. The frames
// before it still read.
type recordTracker struct {
	r      io.Reader
	ng     bool
	big    bool     // byte order of the lengths (pcap: the file's; pcapng: the section's)
	skip   uint64   // bytes left in the current record or block
	hdr    [28]byte // the header being read
	hdrN   int
	need   int  // how many bytes of the header to collect
	inHdr  bool // reading the classic file header
	offset int64
	start  int64 // where the current header (or option) began
	bad    error // the first malformed record, block or option, if any
	// The option list of a pcapng block whose options pcapgo reads
	// (section header, interface description, interface statistics):
	// optHdr collects an option's code and length, optSkip counts its
	// value and padding down.
	opts    bool
	optHdr  [4]byte
	optN    int
	optSkip uint64
	// ifaces holds, per pcapng section, each interface description
	// block, in order (an interface's index).
	ifaces   [][]ngIface
	snap0    uint32  // the snap length of the section's first interface
	blockTyp uint32  // the type of the block whose options are read
	tsresAt  bool    // the next value byte is an interface's if_tsresol
	blockLen uint32  // the current pcapng block's length, which its last 4 bytes repeat
	trail    [4]byte // those 4 bytes, as they are read
}

// ngIface is what the tracker keeps of an interface description block.
type ngIface struct {
	link uint16 // the link type number, before pcapgo keeps its low byte
	// tsres is an if_tsresol pcapgo cannot scale (when raw is set):
	// binary 2^-n for n >= 30, where its integer factor loses the
	// fraction and from 64 on it divides by zero, decimal 10^-e for
	// e >= 20, past 64 bits, and 10^0 (whole seconds), which pcapgo
	// takes for the default 10^-6. The tracker passes such an option on
	// as 10^-9, so that pcapgo hands the raw count through in
	// nanoseconds, and ReadFrame scales the count exactly (scaleRaw).
	tsres uint8
	raw   bool
}

// sectionIfaces is how many interfaces the current section describes.
func (t *recordTracker) sectionIfaces() int {
	if len(t.ifaces) == 0 {
		return 0
	}
	return len(t.ifaces[len(t.ifaces)-1])
}

// iface is the interface with index i of section sec, or nil.
func (t *recordTracker) iface(sec, i int) *ngIface {
	if sec < 0 || sec >= len(t.ifaces) || i < 0 || i >= len(t.ifaces[sec]) {
		return nil
	}
	return &t.ifaces[sec][i]
}

// lastIface is the last interface read, or nil.
func (t *recordTracker) lastIface() *ngIface {
	n := len(t.ifaces)
	if n == 0 {
		return nil
	}
	return t.iface(n-1, len(t.ifaces[n-1])-1)
}

func (t *recordTracker) Read(p []byte) (int, error) {
	if t.bad != nil {
		return 0, t.bad
	}
	n, err := t.r.Read(p)
	if k := t.feed(p[:n]); t.bad != nil {
		return k, t.bad
	}
	return n, err
}

// feed follows b, the next bytes of the input, and returns how many of
// them may be passed on: all, or those before a malformed header or
// option (then t.bad is set).
func (t *recordTracker) feed(b []byte) int {
	base := t.offset
	for i := 0; i < len(b) && t.bad == nil; {
		switch {
		case t.skip > 0 && t.opts && t.optSkip == 0:
			if t.skip <= 4 { // the block's trailing copy of its length
				t.opts = false
				break
			}
			if t.optN == 0 {
				t.start = base + int64(i)
			}
			c := copy(t.optHdr[t.optN:], b[i:])
			t.optN += c
			t.skip -= uint64(c) // skip > 4 is a multiple of 4: the option header fits
			i += c
			if t.optN == len(t.optHdr) {
				t.option()
			}
		case t.skip > 0:
			if t.tsresAt {
				t.tsresAt = false
				if ifc := t.lastIface(); ifc != nil && unscalable(b[i]) {
					ifc.tsres, ifc.raw, b[i] = b[i], true, 9
				}
			}
			k := min(uint64(len(b)-i), t.skip)
			if t.opts {
				k = min(k, t.optSkip)
				t.optSkip -= k
			}
			if t.ng && t.skip-k < 4 {
				// This chunk reaches the block's last 4 bytes, which
				// repeat its length: keep the part of them it holds.
				j := t.skip - min(t.skip, 4) // where they start in the chunk (0: before it)
				copy(t.trail[4-(t.skip-j):], b[i+int(j):i+int(k)])
			}
			t.skip -= k
			i += int(k)
			if t.ng && t.skip == 0 {
				if l := t.order().Uint32(t.trail[:]); l != t.blockLen {
					t.fail("the block at byte %d is %d bytes long and ends saying %d", t.start, t.blockLen, l)
				}
			}
		default:
			if t.hdrN == 0 {
				t.start = base + int64(i)
				t.need = t.firstLen()
			}
			c := copy(t.hdr[t.hdrN:t.need], b[i:])
			t.hdrN += c
			i += c
			if t.hdrN == t.need {
				t.header()
			}
		}
	}
	n := int64(len(b))
	if t.bad != nil {
		n = max(t.start-base, 0)
	}
	t.offset += n
	return int(n)
}

// fail records the first malformed header or option, at t.start.
func (t *recordTracker) fail(format string, a ...any) {
	t.bad = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, a...)...)
}

// firstLen is how many bytes of a header to collect first.
func (t *recordTracker) firstLen() int {
	switch {
	case t.inHdr:
		return 4 // the magic; the rest of the file header is skipped by length
	case !t.ng:
		return 16 // ts_sec, ts_frac, incl_len, orig_len
	}
	return 8 // type, total length (a section header's needs its byte-order magic too)
}

// pcapng block types whose fixed fields pcapgo reads.
const (
	ngSectionHeader       = pcapngMagic
	ngInterface           = 1
	ngObsoletePacket      = 2
	ngSimplePacket        = 3
	ngInterfaceStatistics = 5
	ngEnhancedPacket      = 6
	ngByteOrderMagic      = 0x1a2b3c4d
)

// ngFixed gives, for a pcapng block type, the length of its header and
// fixed fields (all of them the tracker collects: pcapgo reads them before
// anything else of the block) and the least total length of a block of the
// type: those fields, and the trailing copy of the length. pcapgo takes
// the fields' length away from the block's without a check, and a block
// too short wraps around to 4 GiB.
func ngFixed(typ uint32) (fixed, least int) {
	switch typ {
	case ngSectionHeader:
		return 24, 28 // byte-order magic, version, section length
	case ngInterface:
		return 16, 20 // link type, reserved, snap length
	case ngInterfaceStatistics:
		return 20, 24 // interface, timestamp
	case ngEnhancedPacket, ngObsoletePacket:
		return 28, 32 // interface (and drops), timestamp, captured and original lengths
	case ngSimplePacket:
		return 12, 16 // original length
	}
	return 8, 12
}

func (t *recordTracker) order() binary.ByteOrder {
	if t.big {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// header checks a header as far as collected (t.need bytes) and sets what
// comes next: more of the header, or the rest of the record or block.
func (t *recordTracker) header() {
	switch {
	case t.inHdr:
		m := binary.BigEndian.Uint32(t.hdr[:4])
		t.big = m == pcapMagicMicros || m == pcapMagicNanos
		t.inHdr = false
		t.hdrN, t.skip = 0, 20
	case !t.ng:
		incl, orig := t.order().Uint32(t.hdr[8:12]), t.order().Uint32(t.hdr[12:16])
		switch {
		case incl > maxCaptureLength:
			t.fail("the record at byte %d captures %d bytes, more than the %d a record may", t.start, incl, maxCaptureLength)
			return
		case incl > orig:
			t.fail("the record at byte %d captures %d bytes of a %d-byte frame", t.start, incl, orig)
			return
		}
		t.hdrN, t.skip = 0, uint64(incl)
	default:
		t.block()
	}
}

// block checks a pcapng block's header: its length once it is known (for
// a section header, with the byte-order magic after it), then the fixed
// fields of the block types that have lengths in them.
func (t *recordTracker) block() {
	shb := binary.BigEndian.Uint32(t.hdr[:4]) == ngSectionHeader // the same in either byte order
	first := 8
	if shb {
		first = 12
		if t.hdrN == 8 {
			t.need = first
			return
		}
	}
	typ := t.order().Uint32(t.hdr[:4])
	fixed, least := ngFixed(typ)
	if t.hdrN == first {
		if shb {
			switch {
			case binary.BigEndian.Uint32(t.hdr[8:12]) == ngByteOrderMagic:
				t.big = true
			case binary.LittleEndian.Uint32(t.hdr[8:12]) == ngByteOrderMagic:
				t.big = false
			default:
				t.fail("the section header at byte %d has no byte-order magic", t.start)
				return
			}
			t.ifaces = append(t.ifaces, nil)
			t.snap0 = 0
		}
		if l := t.order().Uint32(t.hdr[4:8]); l%4 != 0 || l < uint32(least) {
			t.fail("the block of type %#x at byte %d is %d bytes long: not a multiple of 4, or under the %d its fields take", typ, t.start, l, least)
			return
		}
		if fixed > t.hdrN {
			t.need = fixed
			return
		}
	}
	l := t.order().Uint32(t.hdr[4:8])
	switch typ {
	case ngInterface:
		if n := len(t.ifaces); n > 0 {
			if len(t.ifaces[n-1]) == 0 {
				t.snap0 = t.order().Uint32(t.hdr[12:16])
			}
			t.ifaces[n-1] = append(t.ifaces[n-1], ngIface{link: t.order().Uint16(t.hdr[8:10])})
		}
	case ngEnhancedPacket, ngObsoletePacket:
		// Block: type, length, 20 bytes of fields, the data padded to
		// 4 bytes, options, the length again.
		caplen, orig := t.order().Uint32(t.hdr[20:24]), t.order().Uint32(t.hdr[24:28])
		id := int(t.order().Uint32(t.hdr[8:12]))
		if typ == ngObsoletePacket {
			id = int(t.order().Uint16(t.hdr[8:10]))
		}
		if t.iface(len(t.ifaces)-1, id) == nil {
			// pcapgo refuses it too, with an error of its own.
			t.fail("the packet block at byte %d names interface %d, which its section does not describe (%d interfaces)", t.start, id, t.sectionIfaces())
			return
		}
		t.packet(uint64(caplen), l, 32)
		if t.bad == nil && caplen > orig {
			t.fail("the packet block at byte %d captures %d bytes of a %d-byte frame", t.start, caplen, orig)
		}
	case ngSimplePacket:
		// The data is the original length's, cut to the first
		// interface's snap length (0: none), as pcapgo reads it. It
		// needs an interface in the section (pcapgo refuses it too).
		if t.sectionIfaces() == 0 {
			t.fail("the simple packet block at byte %d is in a section that describes no interface", t.start)
			return
		}
		caplen := uint64(t.order().Uint32(t.hdr[8:12]))
		if t.snap0 != 0 {
			caplen = min(caplen, uint64(t.snap0))
		}
		t.packet(caplen, l, 16)
	}
	if t.bad != nil {
		return
	}
	t.hdrN = 0
	t.blockLen = l
	t.skip = uint64(l) - uint64(fixed)
	t.opts = typ == ngSectionHeader || typ == ngInterface || typ == ngInterfaceStatistics
	t.blockTyp = typ
}

// packet checks a packet block's captured length against the block's
// length l, of which the block's fixed part takes fixed bytes, and against
// maxCaptureLength.
func (t *recordTracker) packet(caplen uint64, l uint32, fixed uint64) {
	switch {
	case caplen > uint64(l)-fixed:
		t.fail("the packet block at byte %d captures %d bytes in a block of %d", t.start, caplen, l)
	case caplen > maxCaptureLength:
		t.fail("the packet block at byte %d captures %d bytes, more than the %d a packet may", t.start, caplen, maxCaptureLength)
	}
}

// option checks an option's header, collected in optHdr: its value, padded
// to 4 bytes, must leave the block's trailing length. The end-of-options
// option ends the list (pcapgo skips the rest of the block).
func (t *recordTracker) option() {
	t.optN = 0
	code, n := t.order().Uint16(t.optHdr[:2]), t.order().Uint16(t.optHdr[2:])
	if code == 0 {
		t.opts = false
		return
	}
	v := (uint64(n) + 3) &^ 3
	if v > t.skip || t.skip-v < 4 {
		t.fail("the option at byte %d holds %d bytes, past the end of its block", t.start, n)
		return
	}
	t.optSkip = v
	t.tsresAt = t.blockTyp == ngInterface && code == ngOptionTSResol && n >= 1
}

// ngOptionTSResol is the interface option if_tsresol.
const ngOptionTSResol = 9

// unscalable reports whether pcapgo cannot scale a timestamp of the
// if_tsresol v (see ngIface.tsres).
func unscalable(v uint8) bool {
	if v&0x80 != 0 {
		return v&0x7f >= 30
	}
	return v >= 20 || v == 0
}

// scaleRaw is the time of a timestamp of raw units of the if_tsresol res
// after offset seconds, truncated to the nanosecond as Wireshark does.
func scaleRaw(raw uint64, res uint8, offset uint64) time.Time {
	d := new(big.Int)
	if res&0x80 != 0 {
		d.Lsh(big.NewInt(1), uint(res&0x7f))
	} else {
		d.Exp(big.NewInt(10), big.NewInt(int64(res)), nil)
	}
	sec, frac := new(big.Int).QuoRem(new(big.Int).SetUint64(raw), d, new(big.Int))
	ns := frac.Mul(frac, big.NewInt(1e9)).Quo(frac, d)
	// if_tsoffset is added as pcapgo adds it, in 64 unsigned bits.
	return time.Unix(int64(sec.Uint64()+offset), ns.Int64()).UTC()
}

// rescale is ci's time for an interface whose if_tsresol res the tracker
// passed on as 10^-9 (passed; else ts as it is): pcapgo gave the raw count
// as nanoseconds after the interface's offset.
func rescale(ts time.Time, res uint8, passed bool, offset uint64) time.Time {
	if !passed {
		return ts
	}
	raw := (uint64(ts.Unix())-offset)*1e9 + uint64(ts.Nanosecond())
	return scaleRaw(raw, res, offset)
}

// atBoundary says whether the bytes read so far end on a record or block
// boundary (after the file header for classic pcap).
func (t *recordTracker) atBoundary() bool {
	return t.skip == 0 && t.hdrN == 0 && !t.inHdr
}

// guard runs a pcapgo call and turns a panic in it into ErrMalformed:
// pcapgo divides by a pcapng interface's timestamp resolution, among
// other things, without checking the bytes first, and a capture is input
// another party wrote (FuzzPcapReader found it).
func guard(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: pcapgo failed on it: %v", ErrMalformed, p)
		}
	}()
	return f()
}

// Magic numbers of the supported formats.
const (
	pcapMagicMicros = 0xa1b2c3d4
	pcapMagicNanos  = 0xa1b23c4d
	pcapngMagic     = 0x0a0d0d0a
)

// ErrUnknownFormat is returned for input that is neither pcap nor pcapng.
var ErrUnknownFormat = errors.New("trace: not a pcap or pcapng file")

// NewPcapReader sniffs the format from the first four bytes and reads the
// file header.
func NewPcapReader(r io.Reader) (*PcapReader, error) {
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, fmt.Errorf("trace: reading capture magic: %w", err)
	}
	be, le := binary.BigEndian.Uint32(magic[:]), binary.LittleEndian.Uint32(magic[:])
	trk := &recordTracker{r: io.MultiReader(bytes.NewReader(magic[:]), r)}
	br := bufio.NewReader(trk)
	switch {
	case be == pcapngMagic:
		trk.ng = true
		var ng *pcapgo.NgReader
		// Every interface's packets, whatever its link type (ReadFrame
		// takes each packet's from its interface): pcapgo's default, as
		// libpcap's, silently skips packets of interfaces whose link
		// type is not the first's (a mergecap of an Ethernet and a
		// tcpdump -i any capture lost the latter).
		pr := &PcapReader{trk: trk, br: br}
		opts := pcapgo.DefaultNgReaderOptions
		opts.WantMixedLinkType = true
		opts.SectionEndCallback = func([]pcapgo.NgInterface, pcapgo.NgSectionInfo) { pr.section++ }
		err := guard(func() (err error) { ng, err = pcapgo.NewNgReader(br, opts); return err })
		if err != nil {
			return nil, fmt.Errorf("trace: pcapng: %w", err)
		}
		pr.ng = ng
		return pr, nil
	case be == pcapMagicMicros || le == pcapMagicMicros || be == pcapMagicNanos || le == pcapMagicNanos:
		trk.inHdr = true
		// The link type number, before pcapgo keeps its low byte; the
		// upper 16 bits are FCS information (pcap's LinkType field).
		//
		// pcapgo is given maxCaptureLength (libpcap's 262144) for the
		// snap length, whatever the header says: pcapgo refuses any
		// record longer than the header's snap length, where libpcap
		// and Wireshark read such a record (scapy's
		// wrpcap(snaplen=128) writes the number and does not cut); and
		// it allocates a record's length before reading it, so that a
		// header's 0xffffffff let 40 bytes claim 4 GiB. A record past
		// 262144 is refused, as libpcap refuses it (the tracker refuses
		// it first, as malformed).
		var link uint16
		var in io.Reader = br
		if h, err := br.Peek(24); err == nil {
			var order binary.ByteOrder = binary.LittleEndian
			if be == pcapMagicMicros || be == pcapMagicNanos {
				order = binary.BigEndian
			}
			link = uint16(order.Uint32(h[20:]))
			hdr := append([]byte(nil), h...)
			order.PutUint32(hdr[16:], maxCaptureLength)
			_, _ = br.Discard(len(hdr))
			in = io.MultiReader(bytes.NewReader(hdr), br)
		}
		var p *pcapgo.Reader
		err := guard(func() (err error) { p, err = pcapgo.NewReader(in); return err })
		if err != nil {
			return nil, fmt.Errorf("trace: pcap: %w", err)
		}
		return &PcapReader{pcap: p, trk: trk, br: br, link: link}, nil
	}
	return nil, ErrUnknownFormat
}

// binaryResolution corrects pcapgo's time for an interface whose timestamp
// resolution is binary, 2^-n s: pcapgo scales the fraction of the second by
// 10^9/2^n truncated to an integer (2^-10: 976562, so 512/1024 s read as
// .499999744), where Wireshark scales it exactly (.500000000). For n < 30
// the fraction is recovered exactly from pcapgo's nanoseconds and scaled
// again, truncating as Wireshark does; finer binary resolutions (pcapgo
// divides there, losing the fraction's low bits) are left as pcapgo has them.
func binaryResolution(ts time.Time, res pcapgo.NgResolution) time.Time {
	n := res.Exponent()
	if !res.Binary() || n == 0 || n >= 30 {
		return ts
	}
	mask := uint64(1) << n
	up := uint64(1e9) / mask
	frac := uint64(ts.Nanosecond()) / up
	return time.Unix(ts.Unix(), int64(frac*1e9/mask)).UTC()
}

// LinkType is the link type of the file (pcapng: of its first interface,
// known once it has been read, before the first frame; each PcapFrame
// carries the link type of its own interface).
func (r *PcapReader) LinkType() layers.LinkType {
	if r.ng != nil {
		if ifc, err := r.ng.Interface(0); err == nil {
			return ifc.LinkType
		}
		return r.ng.LinkType()
	}
	return r.pcap.LinkType()
}

// ReadFrame returns the next frame, or io.EOF after the last one.
func (r *PcapReader) ReadFrame() (PcapFrame, error) {
	var (
		data []byte
		ci   gopacket.CaptureInfo
		err  error
		lt   layers.LinkType
		link uint16
	)
	if r.ng != nil {
		err = guard(func() (err error) { data, ci, err = r.ng.ReadPacketData(); return err })
		if err == nil {
			lt = r.ng.LinkType()
			t := r.trk.iface(r.section, ci.InterfaceIndex)
			if ifc, ierr := r.ng.Interface(ci.InterfaceIndex); ierr == nil {
				lt = ifc.LinkType
				ci.Timestamp = binaryResolution(ci.Timestamp, ifc.TimestampResolution)
				if t != nil {
					ci.Timestamp = rescale(ci.Timestamp, t.tsres, t.raw, ifc.TimestampOffset)
				}
			}
			link = uint16(lt)
			if t != nil {
				link = t.link
			}
		}
	} else {
		err = guard(func() (err error) { data, ci, err = r.pcap.ReadPacketData(); return err })
		lt, link = r.pcap.LinkType(), r.link
	}
	if t := r.trk; t.bad != nil && errors.Is(err, t.bad) {
		// The parser has read up to the malformed record or block
		// (the tracker passes on the bytes before it, then fails).
		return PcapFrame{}, t.bad
	}
	if err != nil {
		if errors.Is(err, io.EOF) && r.trk.atBoundary() {
			return PcapFrame{}, io.EOF
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return PcapFrame{}, fmt.Errorf("%w: the input ends inside a record or block, at byte %d", ErrTruncated, r.trk.offset)
		}
		return PcapFrame{}, fmt.Errorf("trace: reading capture: %w", err)
	}
	return PcapFrame{Timestamp: ci.Timestamp, Data: data, OrigLen: ci.Length, LinkType: lt, Link: link}, nil
}
