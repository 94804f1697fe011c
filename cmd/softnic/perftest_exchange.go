package main

// perftest's out-of-band exchange over TCP ("Data ex. method : Ethernet"),
// as Debian 12's perftest 4.5-0.17 (internal version 6.06) speaks it; facts
// in shared/reference/perftest.md, checked against stock perftest in the
// rxe guest (test/interop/perftest_test.go).
//
// Every exchange is lock-step and fixed-size: the client writes its n
// bytes, then reads the server's n; the server reads, then writes. A run is
// a sequence of such exchanges that both sides know from the test:
//   - the preamble: the version string (16 bytes, NUL-padded), the cycle
//     buffer size and the cache-line size (4 bytes each, network order,
//     both sides take the larger), the MTU as the decimal ibv_mtu enum in
//     a 2-byte string (both take the smaller);
//   - QP addresses ("keys"): one ASCII message of fixed size per exchange,
//     LID:out_reads:QPN:PSN:RKey:VAddr, the 16 GID bytes, SRQN (see
//     ptDest), exchanged several times as barriers;
//   - after a bandwidth test, the client's report (size, iterations, peak,
//     average, message rate, each 8 bytes big-endian);
//   - at the end, one more keys exchange, then each side writes "done\0".

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/softnic/softnic/provider"
)

// Message sizes: the keys with a GID (RoCE) and without (IB LIDs), the
// version string.
const (
	ptKeyMsgGID  = 108
	ptKeyMsg     = 59
	ptVersionLen = 16
	// ptVersion is the version softnic announces: the protocol it speaks
	// is that of perftest 6.06 (Debian 12's 4.5-0.17).
	ptVersion = "6.06"
	// ptMinVersion is the oldest peer whose exchange this one matches.
	ptMinVersion = 5.70
	ptDone       = "done\x00"
)

// ptDest is perftest's pingpong_dest as the keys message carries it.
type ptDest struct {
	LID      uint32
	OutReads uint32
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
	hasGID   bool
}

// encode formats d as the fixed-size keys message: with the GID (108
// bytes) or without (59), NUL-padded.
func (d ptDest) encode(withGID bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID&0xffff, d.OutReads&0xffff, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	n := ptKeyMsg
	if withGID {
		for _, g := range d.GID {
			fmt.Fprintf(&b, "%02x:", g)
		}
		fmt.Fprintf(&b, "%08x:", d.SRQN)
		n = ptKeyMsgGID
	} else {
		fmt.Fprintf(&b, "%08x", d.SRQN)
	}
	out := make([]byte, n)
	copy(out, b.String())
	return out
}

// decodePTDest parses a keys message of either form. It is strict about
// the shape (field count, hex digits, ranges) where perftest's own parser
// is lenient: a message softnic cannot read exactly is an error, not a
// guess.
func decodePTDest(msg []byte) (ptDest, error) {
	s := msg
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	text := string(s)
	f := strings.Split(text, ":")
	var d ptDest
	switch {
	case len(f) == 24 && f[23] == "":
		d.hasGID = true
		f = f[:23]
	case len(f) == 7:
	default:
		return d, fmt.Errorf("perftest keys %q: %d fields, want LID:OUT:QPN:PSN:RKEY:VADDR then 16 GID bytes and SRQN", clip(text), len(f))
	}
	hex := func(i, bits int) (uint64, error) {
		if f[i] == "" || len(f[i]) > 16 {
			return 0, fmt.Errorf("perftest keys %q: field %d %q is not hex", clip(text), i+1, f[i])
		}
		v, err := strconv.ParseUint(f[i], 16, bits)
		if err != nil {
			return 0, fmt.Errorf("perftest keys %q: field %d %q: not a %d-bit hex number", clip(text), i+1, f[i], bits)
		}
		return v, nil
	}
	widths := []int{16, 16, 24, 24, 32, 64}
	var v [6]uint64
	for i, w := range widths {
		var err error
		if v[i], err = hex(i, w); err != nil {
			return ptDest{}, err
		}
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint32(v[0]), uint32(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	last := 6
	if d.hasGID {
		for i := range d.GID {
			g, err := hex(6+i, 8)
			if err != nil {
				return ptDest{}, err
			}
			d.GID[i] = byte(g)
		}
		last = 22
	}
	srqn, err := hex(last, 32)
	if err != nil {
		return ptDest{}, err
	}
	d.SRQN = uint32(srqn)
	return d, nil
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// ptVersionMsg is the version exchange's message.
func ptVersionMsg() []byte {
	b := make([]byte, ptVersionLen)
	copy(b, ptVersion)
	return b
}

// parsePTVersion reads a version message as atof does: the leading number.
func parsePTVersion(b []byte) (float64, error) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	s := string(b)
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		end++
	}
	v, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0, fmt.Errorf("perftest version %q is not a number", s)
	}
	return v, nil
}

// ibvMTU is the ibv_mtu enum of an MTU in bytes (256 -> 1 ... 4096 -> 5).
// 0 for any other size. mlx5's MTU codes are the same enum.
func ibvMTU(bytes int) int { return int(provider.MTUFromBytes(bytes)) }

// ptReport is perftest's bw_report_data as the report exchange carries it.
type ptReport struct {
	Size    uint64
	Iters   uint64
	Peak    float64
	Avg     float64
	MsgRate float64
}

// ptConn is the TCP connection of one run.
type ptConn struct {
	c      net.Conn
	client bool
	// read blocks for one message; the real-wire mode routes it through
	// the NIC's pump so that the NIC keeps answering (ARP, frames) while
	// the command waits on TCP.
	read    func(n int, timeout time.Duration) ([]byte, error)
	timeout time.Duration
	remVer  float64
	step    int // exchanges done, for errors
}

// xchg is one lock-step exchange of len(my) bytes.
func (p *ptConn) xchg(what string, my []byte, timeout time.Duration) ([]byte, error) {
	p.step++
	if timeout == 0 {
		timeout = p.timeout
	}
	fail := func(err error) ([]byte, error) {
		return nil, fmt.Errorf("perftest exchange %d (%s, %d bytes): %w", p.step, what, len(my), err)
	}
	if p.client {
		if _, err := p.c.Write(my); err != nil {
			return fail(err)
		}
	}
	rem, err := p.read(len(my), timeout)
	if err != nil {
		return fail(err)
	}
	if !p.client {
		if _, err := p.c.Write(my); err != nil {
			return fail(err)
		}
	}
	return rem, nil
}

// preamble is exchange_versions, check_sys_data and check_mtu. It returns
// the remote cycle buffer and the MTU both sides settle on.
func (p *ptConn) preamble(cycleBuf, mtu int) (int, int, error) {
	rv, err := p.xchg("version", ptVersionMsg(), 0)
	if err != nil {
		return 0, 0, err
	}
	if p.remVer, err = parsePTVersion(rv); err != nil {
		return 0, 0, err
	}
	if p.remVer < ptMinVersion {
		return 0, 0, fmt.Errorf("the peer's perftest version %v is older than %v: its exchange differs", p.remVer, ptMinVersion)
	}
	var be [4]byte
	binary.BigEndian.PutUint32(be[:], uint32(cycleBuf))
	rc, err := p.xchg("cycle buffer", be[:], 0)
	if err != nil {
		return 0, 0, err
	}
	remCycle := int(binary.BigEndian.Uint32(rc))
	binary.BigEndian.PutUint32(be[:], 64)
	if _, err := p.xchg("cache line size", be[:], 0); err != nil {
		return 0, 0, err
	}
	m := []byte{byte('0' + ibvMTU(mtu)), 0}
	rm, err := p.xchg("mtu", m, 0)
	if err != nil {
		return 0, 0, err
	}
	rem := 0
	if rm[0] >= '1' && rm[0] <= '5' {
		rem = 128 << (rm[0] - '0')
	}
	if rem != 0 && rem < mtu {
		mtu = rem
	}
	return max(remCycle, cycleBuf), mtu, nil
}

// keys exchanges QP addresses.
func (p *ptConn) keys(what string, my ptDest, timeout time.Duration) (ptDest, error) {
	b, err := p.xchg("keys: "+what, my.encode(true), timeout)
	if err != nil {
		return ptDest{}, err
	}
	d, err := decodePTDest(b)
	if err != nil {
		return ptDest{}, fmt.Errorf("perftest exchange %d (keys: %s): %w", p.step, what, err)
	}
	return d, nil
}

// reports is xchg_bw_reports: five exchanges, big-endian.
func (p *ptConn) reports(my ptReport) (ptReport, error) {
	var r ptReport
	u64 := func(what string, v uint64, size int) (uint64, error) {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, v)
		if size == 4 {
			binary.BigEndian.PutUint32(b, uint32(v))
			b = b[:4]
		}
		got, err := p.xchg("report "+what, b, 0)
		if err != nil {
			return 0, err
		}
		if size == 4 {
			return uint64(binary.BigEndian.Uint32(got)), nil
		}
		return binary.BigEndian.Uint64(got), nil
	}
	var err error
	if r.Size, err = u64("size", my.Size, 8); err != nil {
		return r, err
	}
	isz := 8
	if p.remVer < 5.33 {
		isz = 4
	}
	if r.Iters, err = u64("iterations", my.Iters, isz); err != nil {
		return r, err
	}
	for _, f := range []struct {
		what string
		mine float64
		dst  *float64
	}{{"bw_peak", my.Peak, &r.Peak}, {"bw_avg", my.Avg, &r.Avg}, {"msgRate", my.MsgRate, &r.MsgRate}} {
		v, err := u64(f.what, math.Float64bits(f.mine), 8)
		if err != nil {
			return r, err
		}
		*f.dst = math.Float64frombits(v)
	}
	return r, nil
}

// close is ctx_close_connection: one more keys exchange, then "done".
// The peer's "done" is read if it comes soon (so that it is not reset by
// an early close), and not required.
func (p *ptConn) close(my ptDest, timeout time.Duration) error {
	if _, err := p.keys("close", my, timeout); err != nil {
		return err
	}
	if _, err := p.c.Write([]byte(ptDone)); err != nil {
		return fmt.Errorf("perftest exchange: writing done: %w", err)
	}
	_, _ = p.read(len(ptDone), 2*time.Second)
	return nil
}

// errPTShort is returned for a connection closed in the middle of a
// message.
var errPTShort = errors.New("the peer closed the connection")
