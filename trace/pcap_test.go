package trace

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

func TestPcapWriterDeterministic(t *testing.T) {
	frames := []struct {
		t    sim.Time
		data []byte
	}{
		{0, []byte{1, 2, 3}},
		{sim.Time(1500), []byte{4}}, // 1.5 ns → 1 ns
		{sim.Time(sim.Second + 3*sim.Nanosecond + 999), []byte{5, 6}}, // 1 s + 3 ns
	}
	write := func() []byte {
		var buf bytes.Buffer
		w, err := NewPcapWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			if err := w.WriteFrame(f.t, f.data); err != nil {
				t.Fatal(err)
			}
		}
		return buf.Bytes()
	}
	a, b := write(), write()
	if !bytes.Equal(a, b) {
		t.Fatal("two runs wrote different files")
	}
	// File header: nanosecond magic (little endian), v2.4, snaplen 262144,
	// link type 1; then the first record: ts 0 s 0 ns, caplen 3, len 3.
	//
	//	4d3cb2a1 0200 0400 00000000 00000000 00000400 01000000
	//	00000000 00000000 03000000 03000000 010203
	const head = "4d3cb2a1020004000000000000000000000004000100000000000000000000000300000003000000010203"
	if got := hex.EncodeToString(a[:len(head)/2]); got != head {
		t.Fatalf("header\n got %s\nwant %s", got, head)
	}

	r, err := NewPcapReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("link type %v", r.LinkType())
	}
	wantNS := []int64{0, 1, int64(time.Second) + 3}
	for i, w := range frames {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if f.Timestamp.UnixNano() != wantNS[i] || !bytes.Equal(f.Data, w.data) || f.OrigLen != len(w.data) {
			t.Fatalf("frame %d: %+v", i, f)
		}
		if vt, ok := f.VirtualTime(); !ok || vt != sim.Time(wantNS[i]*1000) {
			t.Fatalf("frame %d: virtual time %v %v", i, vt, ok)
		}
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("after last frame: %v", err)
	}
}

func TestPcapWriterErrors(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewPcapWriter(&buf)
	if err := w.WriteFrame(-1, []byte{1}); !errors.Is(err, ErrNegativeTime) {
		t.Fatalf("negative time: %v", err)
	}
	big := make([]byte, PcapSnaplen+10)
	if err := w.WriteFrame(1, big); err != nil {
		t.Fatal(err)
	}
	r, _ := NewPcapReader(&buf)
	f, err := r.ReadFrame()
	if err != nil || len(f.Data) != PcapSnaplen || f.OrigLen != len(big) {
		t.Fatalf("truncated frame: %d/%d %v", len(f.Data), f.OrigLen, err)
	}
}

func TestPcapWriterNoAlloc(t *testing.T) {
	w, _ := NewPcapWriter(io.Discard)
	frame := make([]byte, 64)
	if n := testing.AllocsPerRun(100, func() { _ = w.WriteFrame(12345, frame) }); n != 0 {
		t.Fatalf("%v allocs per WriteFrame", n)
	}
}

func TestPcapReaderFormats(t *testing.T) {
	ts := time.Unix(1700000000, 123456789).UTC()
	data := []byte{0xde, 0xad, 0xbe, 0xef}
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: 4, Length: 4}

	var micro bytes.Buffer
	mw := pcapgo.NewWriter(&micro)
	_ = mw.WriteFileHeader(65535, layers.LinkTypeEthernet)
	_ = mw.WritePacket(ci, data)

	var ng bytes.Buffer
	nw, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	_ = nw.WritePacket(ci, data)
	_ = nw.Flush()

	tests := []struct {
		name   string
		in     []byte
		wantTS time.Time
	}{
		{"pcap microseconds", micro.Bytes(), ts.Truncate(time.Microsecond)},
		{"pcapng", ng.Bytes(), ts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewPcapReader(bytes.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if !f.Timestamp.Equal(tc.wantTS) || !bytes.Equal(f.Data, data) || f.LinkType != layers.LinkTypeEthernet {
				t.Fatalf("got %+v", f)
			}
			if _, ok := f.VirtualTime(); ok {
				t.Fatal("a 2023 timestamp should not fit virtual time")
			}
			if _, err := r.ReadFrame(); err != io.EOF {
				t.Fatalf("want EOF, got %v", err)
			}
		})
	}
	if _, err := NewPcapReader(bytes.NewReader([]byte("hello world"))); !errors.Is(err, ErrUnknownFormat) {
		t.Fatalf("garbage: %v", err)
	}
	if _, err := NewPcapReader(bytes.NewReader(nil)); err == nil {
		t.Fatal("empty input accepted")
	}
}

// TestPcapngMalformedBlock: a packet block whose captured length does not
// fit in it is an error at that block (pcapgo alone reads the packet's
// bytes out of the next blocks and, at the end of the file, reports a
// clean EOF).
func TestPcapngMalformedBlock(t *testing.T) {
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: 60, Length: 60}
	var ng bytes.Buffer
	nw, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_ = nw.WritePacket(ci, bytes.Repeat([]byte{byte(i)}, 60))
	}
	_ = nw.Flush()
	// The offsets of the packet blocks (little-endian section).
	var epbs []int
	for off := 0; off+8 <= ng.Len(); {
		b := ng.Bytes()[off:]
		if binary.LittleEndian.Uint32(b) == 6 {
			epbs = append(epbs, off)
		}
		off += int(binary.LittleEndian.Uint32(b[4:]))
	}
	if len(epbs) != 3 {
		t.Fatalf("%d packet blocks", len(epbs))
	}
	for _, tc := range []struct {
		name   string
		field  int // offset in the second packet block
		val    uint32
		frames int
		want   error
	}{
		{"sound", 0, 6, 3, nil},
		{"captured_length_past_the_block", 20, 5000, 1, ErrMalformed},
		{"captured_length_one_too_many", 20, 61, 1, ErrMalformed}, // the block holds 60
		{"captured_length_shorter", 20, 56, 3, nil},
		{"block_too_short_for_its_fields", 4, 28, 1, ErrMalformed},
		{"captured_past_original_length", 24, 59, 1, ErrMalformed}, // FuzzPcapReader found it
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Clone(ng.Bytes())
			binary.LittleEndian.PutUint32(in[epbs[1]+tc.field:], tc.val)
			r, err := NewPcapReader(bytes.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for {
				_, err = r.ReadFrame()
				if err != nil {
					break
				}
				n++
			}
			if n != tc.frames {
				t.Fatalf("%d frames before %v, want %d", n, err, tc.frames)
			}
			if tc.want == nil && err != io.EOF || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzPcapReader: any capture bytes are read to an end (io.EOF or an
// error) without a panic, in at most one frame per 16 bytes of input; every
// frame's bytes are bytes of the input, no more than its wire length says;
// the frames read before the end round-trip: written again to a classic
// pcap (when their link type and times fit one), they read back as the
// same frames, the same times and lengths, and then io.EOF.
func FuzzPcapReader(f *testing.F) {
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: 60, Length: 60}
	var pc, ng bytes.Buffer
	pw := pcapgo.NewWriter(&pc)
	_ = pw.WriteFileHeader(65535, layers.LinkTypeEthernet)
	nw, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		frame := bytes.Repeat([]byte{byte(i)}, 60)
		_ = pw.WritePacket(ci, frame)
		_ = nw.WritePacket(ci, frame)
	}
	_ = nw.Flush()
	f.Add(pc.Bytes())
	f.Add(ng.Bytes())
	bad := bytes.Clone(ng.Bytes())
	f.Add(bad[:len(bad)/2])
	f.Add([]byte("hello world"))
	// Interfaces whose if_tsresol pcapgo cannot scale (decode's golden).
	if b, err := os.ReadFile(filepath.Join("..", "cmd", "softnic", "testdata", "captures", "tsresol_fine.pcapng")); err == nil {
		f.Add(b)
	}
	readAll := func(in []byte) ([]PcapFrame, error) {
		r, err := NewPcapReader(bytes.NewReader(in))
		if err != nil {
			return nil, err
		}
		var frs []PcapFrame
		for {
			fr, err := r.ReadFrame()
			if err != nil {
				return frs, err
			}
			frs = append(frs, fr)
			if len(frs) > len(in)/16+1 {
				return frs, fmt.Errorf("%d frames from %d bytes", len(frs), len(in))
			}
		}
	}
	same := func(a, b PcapFrame) bool {
		return a.Timestamp.Equal(b.Timestamp) && bytes.Equal(a.Data, b.Data) && a.OrigLen == b.OrigLen && a.Link == b.Link
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		frs, end := readAll(in)
		if end == nil {
			t.Fatal("ReadFrame stopped without an error")
		}
		if strings.Contains(end.Error(), " frames from ") {
			t.Fatal(end)
		}
		for i, fr := range frs {
			if !bytes.Contains(in, fr.Data) {
				t.Fatalf("frame %d: %d bytes that are not in the input", i, len(fr.Data))
			}
			if fr.OrigLen < len(fr.Data) {
				t.Fatalf("frame %d: %d bytes captured of a %d-byte frame", i, len(fr.Data), fr.OrigLen)
			}
		}
		// Round trip through a classic pcap, where the frames fit one:
		// one link type within gopacket's uint8, times a 32-bit seconds
		// field holds.
		if len(frs) == 0 || frs[0].Link > 0xff {
			return
		}
		var out bytes.Buffer
		w := pcapgo.NewWriterNanos(&out)
		if err := w.WriteFileHeader(PcapSnaplen, layers.LinkType(frs[0].Link)); err != nil {
			t.Fatal(err)
		}
		for _, fr := range frs {
			if fr.Link != frs[0].Link || fr.Timestamp.Unix() < 0 || fr.Timestamp.Unix() > math.MaxUint32 ||
				len(fr.Data) > PcapSnaplen || fr.OrigLen > math.MaxUint32 {
				return
			}
			if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: fr.Timestamp, CaptureLength: len(fr.Data), Length: fr.OrigLen}, fr.Data); err != nil {
				t.Fatal(err)
			}
		}
		back, end3 := readAll(out.Bytes())
		if end3 != io.EOF || len(back) != len(frs) {
			t.Fatalf("round trip: %d frames and %v, want %d and EOF", len(back), end3, len(frs))
		}
		for i := range frs {
			if !same(frs[i], back[i]) {
				t.Fatalf("round trip: frame %d %+v, was %+v", i, back[i], frs[i])
			}
		}
	})
}

// TestPcapOrder: frames handed over ahead of their time (a link tap's
// queued frames) are written in time order, ties in the order they came,
// each as soon as the clock has reached it, the rest on Flush.
func TestPcapOrder(t *testing.T) {
	ns := func(n int64) sim.Time { return sim.Time(n * int64(sim.Nanosecond)) }
	var file bytes.Buffer
	pw, err := NewPcapWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	o := NewPcapOrder(pw)
	for _, f := range []struct {
		now, at int64
		b       byte
	}{
		{0, 10, 'a'}, {0, 20, 'b'}, // two frames queued back to back
		{5, 7, 'c'},   // the other end's, starting between
		{7, 20, 'd'},  // the same time as b, after it
		{12, 12, 'e'}, // a is due: written before e's turn
	} {
		if err := o.WriteFrame(ns(f.now), ns(f.at), []byte{f.b}); err != nil {
			t.Fatal(err)
		}
	}
	if n := countRecords(t, file.Bytes()); n != 3 { // c, a and e are due by 12 ns
		t.Fatalf("%d frames written before the clock reached the rest, want 3", n)
	}
	if err := o.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := NewPcapReader(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		fr, err := r.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%c", fr.Timestamp.UnixNano(), fr.Data[0]))
	}
	if want := "7:c 10:a 12:e 20:b 20:d"; strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}

func countRecords(t *testing.T, b []byte) int {
	t.Helper()
	r, err := NewPcapReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := r.ReadFrame(); err != nil {
			return n
		}
		n++
	}
}

// TestScaleRaw: a raw count of an if_tsresol pcapgo cannot scale, exactly
// and truncated to the nanosecond, offset added in 64 unsigned bits.
func TestScaleRaw(t *testing.T) {
	for _, c := range []struct {
		name   string
		raw    uint64
		res    uint8
		offset uint64
		want   string
	}{
		{"2^-30, half a second", 3<<30 | 1<<29, 0x9e, 0, "3.500000000"},
		{"2^-30, one unit (0.93 ns)", 1, 0x9e, 0, "0.000000000"},
		{"2^-30, two units (1.86 ns)", 2, 0x9e, 0, "0.000000001"},
		{"2^-64, every unit", math.MaxUint64, 0xc0, 0, "0.999999999"},
		{"2^-127", 1 << 63, 0xff, 0, "0.000000000"},
		{"10^-20", 12345678901234567890, 20, 0, "0.123456789"},
		{"10^-127", math.MaxUint64, 0x7f, 0, "0.000000000"},
		{"offset", 1 << 29, 0x9e, 1700000000, "1700000000.500000000"},
		// 10^0: whole seconds (tshark: 1000 units are 1000 s); pcapgo
		// took 0 for its default, microseconds.
		{"10^0, whole seconds", 1000, 0, 0, "1000.000000000"},
		// 2^64-1 s wraps to -1 s in 64 signed bits, as tshark shows it.
		{"10^0, every unit", math.MaxUint64, 0, 0, "-1.000000000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.True(t, unscalable(c.res))
			ts := scaleRaw(c.raw, c.res, c.offset)
			require.Equal(t, c.want, fmt.Sprintf("%d.%09d", ts.Unix(), ts.Nanosecond()))
		})
	}
	for _, r := range []uint8{1, 3, 6, 9, 19, 0x80, 0x8a, 0x9d} {
		require.False(t, unscalable(r), "%#x: pcapgo scales it", r)
	}
}

// TestPcapOneByteReads: the tracker checks headers, options and each
// pcapng block's trailing length across reads of any size; a capture read
// a byte at a time gives the frames, times and end it gives read whole.
func TestPcapOneByteReads(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "cmd", "softnic", "testdata", "captures", "*.pcap*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	read := func(r io.Reader) (frames []string, end error) {
		pr, err := NewPcapReader(r)
		if err != nil {
			return nil, err
		}
		for {
			fr, err := pr.ReadFrame()
			if err != nil {
				return frames, err
			}
			frames = append(frames, fmt.Sprintf("%d %x", fr.Timestamp.UnixNano(), fr.Data))
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		whole, wholeEnd := read(bytes.NewReader(b))
		bytewise, byteEnd := read(iotest.OneByteReader(bytes.NewReader(b)))
		require.Equal(t, whole, bytewise, f)
		require.Equal(t, fmt.Sprint(wholeEnd), fmt.Sprint(byteEnd), f)
	}
}
