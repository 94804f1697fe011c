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
// contradict each other: a pcapng packet block whose captured length does
// not fit in the block. pcapgo would read such a packet's bytes out of the
// blocks after it.
var ErrMalformed = errors.New("trace: capture malformed")

// recordTracker follows the record (pcap) or block (pcapng) structure of
// the bytes read through it, so that the end of the input can be told to
// fall on a boundary or inside a record. pcapgo reports an input cut
// inside a pcapng block, or right after a pcap record header, as a plain
// io.EOF.
type recordTracker struct {
	r      io.Reader
	ng     bool
	big    bool     // byte order of the lengths (pcap: the file's; pcapng: the section's)
	skip   uint64   // bytes left in the current record or block body
	hdr    [28]byte // the header being read
	hdrN   int
	inHdr  bool // reading the classic file header
	offset int64
	start  int64 // where the current header began
	bad    error // the first malformed block found, if any
	badAt  int64 // where it begins
	// links holds, per pcapng section, the link type number of each
	// interface description block, in order (an interface's index).
	links [][]uint16
}

func (t *recordTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.feed(p[:n])
	return n, err
}

func (t *recordTracker) feed(b []byte) {
	t.offset += int64(len(b))
	for len(b) > 0 {
		if t.skip > 0 {
			k := uint64(len(b))
			if k > t.skip {
				k = t.skip
			}
			t.skip -= k
			b = b[k:]
			continue
		}
		if t.hdrN == 0 {
			t.start = t.offset - int64(len(b))
		}
		need := t.headerLen()
		c := copy(t.hdr[t.hdrN:need], b)
		t.hdrN += c
		b = b[c:]
		if t.hdrN == t.headerLen() { // an SHB's header grows once its type is known
			t.endHeader()
		}
	}
}

// headerLen is how many bytes of the current header to collect.
func (t *recordTracker) headerLen() int {
	switch {
	case t.inHdr:
		return 4 // the rest of the file header is skipped by length
	case !t.ng:
		return 16 // ts_sec, ts_frac, incl_len, orig_len
	case t.hdrN >= 4 && binary.BigEndian.Uint32(t.hdr[:4]) == pcapngMagic:
		return 12 // type, total length, byte-order magic
	case t.hdrN >= 4 && (t.order().Uint32(t.hdr[:4]) == ngEnhancedPacket || t.order().Uint32(t.hdr[:4]) == ngObsoletePacket):
		return 28 // type, total length, and the packet's fixed fields up to its lengths
	case t.hdrN >= 4 && t.order().Uint32(t.hdr[:4]) == ngInterface:
		return 10 // type, total length, link type
	}
	return 8 // type, total length
}

// pcapng block types whose fixed fields carry a captured length.
const (
	ngInterface      = 1
	ngObsoletePacket = 2
	ngEnhancedPacket = 6
)

func (t *recordTracker) order() binary.ByteOrder {
	if t.big {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

func (t *recordTracker) endHeader() {
	n := t.hdrN
	t.hdrN = 0
	switch {
	case t.inHdr:
		m := binary.BigEndian.Uint32(t.hdr[:4])
		t.big = m == pcapMagicMicros || m == pcapMagicNanos
		t.inHdr = false
		t.skip = 20
	case !t.ng:
		t.skip = uint64(t.order().Uint32(t.hdr[8:12]))
	default:
		switch {
		case binary.BigEndian.Uint32(t.hdr[:4]) == pcapngMagic:
			t.big = binary.BigEndian.Uint32(t.hdr[8:12]) == 0x1a2b3c4d
			t.links = append(t.links, nil)
		case n == 10 && len(t.links) > 0:
			last := len(t.links) - 1
			t.links[last] = append(t.links[last], t.order().Uint16(t.hdr[8:10]))
		}
		l := uint64(t.order().Uint32(t.hdr[4:8]))
		if n == 28 && t.bad == nil {
			// Block: type, length, 20 bytes of fields, the data padded
			// to 4 bytes, options, the length again.
			if caplen := uint64(t.order().Uint32(t.hdr[20:24])); l < 32 || caplen > l-32 {
				t.bad = fmt.Errorf("%w: the packet block at byte %d captures %d bytes in a block of %d", ErrMalformed, t.start, caplen, l)
				t.badAt = t.start
			}
		}
		if l > uint64(n) {
			t.skip = l - uint64(n)
		}
	}
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
		// The snap length is raised to at least libpcap's 262144 for
		// pcapgo, which refuses any record longer than the header's
		// snap length: libpcap and Wireshark read such a record (scapy's
		// wrpcap(snaplen=128) writes the number and does not cut), and a
		// record past 262144 is still refused, as libpcap refuses it.
		var link uint16
		var in io.Reader = br
		if h, err := br.Peek(24); err == nil {
			var order binary.ByteOrder = binary.LittleEndian
			if be == pcapMagicMicros || be == pcapMagicNanos {
				order = binary.BigEndian
			}
			link = uint16(order.Uint32(h[20:]))
			hdr := append([]byte(nil), h...)
			order.PutUint32(hdr[16:], max(order.Uint32(hdr[16:]), PcapSnaplen))
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
			if ifc, ierr := r.ng.Interface(ci.InterfaceIndex); ierr == nil {
				lt = ifc.LinkType
				ci.Timestamp = binaryResolution(ci.Timestamp, ifc.TimestampResolution)
			}
			link = uint16(lt)
			if s := r.trk.links; r.section < len(s) && ci.InterfaceIndex < len(s[r.section]) {
				link = s[r.section][ci.InterfaceIndex]
			}
		}
	} else {
		err = guard(func() (err error) { data, ci, err = r.pcap.ReadPacketData(); return err })
		lt, link = r.pcap.LinkType(), r.link
	}
	if t := r.trk; t.bad != nil && t.offset-int64(r.br.Buffered()) > t.badAt {
		// The parser has read into the bad block (its bytes came from
		// the tracker, which is ahead of it by what bufio holds).
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
