package interop

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// linePeer drives one endpoint of the `softnic rdma` line protocol
// (docs/howto-interop.md): softnic rdma itself, or verbs_peer in the guest.
type linePeer struct {
	name  string
	w     io.Writer
	lines chan string // protocol lines, closed at EOF

	mu         sync.Mutex
	transcript strings.Builder // "> " commands and "< " replies, for failure messages
	late       []string        // LATE lines seen (completions of earlier commands' WRs)
}

// protocolWords start the lines a peer answers with; anything else it
// prints (log noise) goes to the transcript only.
var protocolWords = []string{"LOCAL ", "WC ", "LATE ", "ORIG ", "SUM ", "MR ", "ERR", "COUNTERS", "DUMP ", "EVENTS "}

func newLinePeer(name string, r io.Reader, w io.Writer) *linePeer {
	p := &linePeer{name: name, w: w, lines: make(chan string, 256)}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			p.note("< " + line)
			for _, w := range protocolWords {
				if strings.HasPrefix(line, w) {
					p.lines <- line
					break
				}
			}
		}
		close(p.lines)
	}()
	return p
}

func (p *linePeer) note(s string) {
	p.mu.Lock()
	p.transcript.WriteString(s + "\n")
	p.mu.Unlock()
}

// Transcript is everything said both ways so far.
func (p *linePeer) Transcript() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.transcript.String()
}

// send writes one command line.
func (p *linePeer) send(format string, args ...any) error {
	line := fmt.Sprintf(format, args...)
	p.note("> " + line)
	_, err := io.WriteString(p.w, line+"\n")
	return err
}

var errTimeout = errors.New("timed out")

// next returns the next protocol line.
func (p *linePeer) next(timeout time.Duration) (string, error) {
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("%s: end of output", p.name)
		}
		return line, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("%s: no reply: %w", p.name, errTimeout)
	}
}

// expect returns the fields of the next line, which must start with word.
func (p *linePeer) expect(word string, timeout time.Duration) ([]string, error) {
	line, err := p.next(timeout)
	if err != nil {
		return nil, err
	}
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != word {
		return nil, fmt.Errorf("%s: want %s, got %q", p.name, word, line)
	}
	return f, nil
}

// Numbers (docs/howto-interop.md): identifiers — QPN, PSN, GID, RKEY,
// Q_Key, addresses, wr_id, imm — are hex; sizes, counts, offsets and seeds
// are decimal, in commands and replies alike. The commands below format
// them so; replies are parsed with hexField and decField.

// hexField parses one hex field of a reply (an identifier; with or
// without 0x).
func hexField(f []string, i int) (uint64, error) {
	if i >= len(f) {
		return 0, fmt.Errorf("reply %q has no field %d", strings.Join(f, " "), i)
	}
	return strconv.ParseUint(strings.TrimPrefix(f[i], "0x"), 16, 64)
}

// decField parses one decimal field of a reply (a size, count or offset).
func decField(f []string, i int) (uint64, error) {
	if i >= len(f) {
		return 0, fmt.Errorf("reply %q has no field %d", strings.Join(f, " "), i)
	}
	return strconv.ParseUint(f[i], 10, 64)
}

// echoes reports whether fields i and i+1 of a reply are off and n in
// decimal (SUM and DUMP repeat the range they were asked for).
func echoes(f []string, i int, off, n uint64) bool {
	o, err1 := decField(f, i)
	l, err2 := decField(f, i+1)
	return err1 == nil && err2 == nil && o == off && l == n
}

// endpoint is what LOCAL announces: LOCAL <qpn> <psn> <gid>, and on a UD
// QP also <qkey>.
type endpoint struct {
	qpn, psn uint32
	gid      string
	qkey     uint32
	hasQKey  bool // a UD endpoint
}

func (p *linePeer) local(timeout time.Duration) (endpoint, error) {
	f, err := p.expect("LOCAL", timeout)
	if err != nil {
		return endpoint{}, err
	}
	return parseLocal(p.name, f)
}

// parseLocal parses the fields of a LOCAL line.
func parseLocal(name string, f []string) (endpoint, error) {
	qpn, err1 := hexField(f, 1)
	psn, err2 := hexField(f, 2)
	if err := errors.Join(err1, err2); err != nil || len(f) < 4 || len(f) > 5 || len(f[3]) != 32 {
		return endpoint{}, fmt.Errorf("%s: bad LOCAL line %q: %v", name, strings.Join(f, " "), err)
	}
	e := endpoint{qpn: uint32(qpn), psn: uint32(psn), gid: f[3]}
	if len(f) == 5 {
		q, err := hexField(f, 4)
		if err != nil || q > 0xffffffff {
			return endpoint{}, fmt.Errorf("%s: bad Q_Key in LOCAL line %q", name, strings.Join(f, " "))
		}
		e.qkey, e.hasQKey = uint32(q), true
	}
	return e, nil
}

// remote tells the peer the other side's QPN and PSN; for a UD peer also
// its GID (the AH's destination) and Q_Key: REMOTE <qpn> <psn> <gid> <qkey>.
func (p *linePeer) remote(e endpoint) error {
	return p.send("%s", remoteLine(e))
}

func remoteLine(e endpoint) string {
	if e.hasQKey {
		return fmt.Sprintf("REMOTE %x %x %s %x", e.qpn, e.psn, e.gid, e.qkey)
	}
	return fmt.Sprintf("REMOTE %x %x", e.qpn, e.psn)
}

// mrInfo is the reply to `mr`.
type mrInfo struct {
	addr uint64
	rkey uint32
	size uint64
}

func (p *linePeer) mr(timeout time.Duration) (mrInfo, error) {
	if err := p.send("mr"); err != nil {
		return mrInfo{}, err
	}
	f, err := p.expect("MR", timeout)
	if err != nil {
		return mrInfo{}, err
	}
	addr, err1 := hexField(f, 1)
	rkey, err2 := hexField(f, 2)
	size, err3 := decField(f, 3)
	if err := errors.Join(err1, err2, err3); err != nil {
		return mrInfo{}, fmt.Errorf("%s: bad MR line: %w", p.name, err)
	}
	return mrInfo{addr: addr, rkey: uint32(rkey), size: size}, nil
}

// wc is one work completion line: WC <wr_id> <status> <opcode> <byte_len>
// <imm>, and for a receive on a UD QP also src_qp=<qpn> grh=<0|1>.
type wc struct {
	wrID           uint64
	status, opcode string
	byteLen        uint64
	imm            uint64
	ud             bool // the UD form: srcQP and grh are set
	srcQP          uint32
	grh            bool
}

func (w wc) String() string {
	s := fmt.Sprintf("WC %x %s %s %d %x", w.wrID, w.status, w.opcode, w.byteLen, w.imm)
	if w.ud {
		g := 0
		if w.grh {
			g = 1
		}
		s += fmt.Sprintf(" src_qp=%06x grh=%d", w.srcQP, g)
	}
	return s
}

// parseWC parses the fields of a WC line (without a LATE prefix).
func parseWC(f []string) (wc, error) {
	if (len(f) != 6 && len(f) != 8) || f[0] != "WC" {
		return wc{}, fmt.Errorf("want WC <wr_id> <status> <opcode> <byte_len> <imm> [src_qp=<qpn> grh=<0|1>], got %q", strings.Join(f, " "))
	}
	id, err1 := hexField(f, 1)
	n, err2 := strconv.ParseUint(f[4], 10, 64)
	imm, err3 := hexField(f, 5)
	if err := errors.Join(err1, err2, err3); err != nil {
		return wc{}, fmt.Errorf("bad WC line %q: %w", strings.Join(f, " "), err)
	}
	w := wc{wrID: id, status: f[2], opcode: f[3], byteLen: n, imm: imm}
	if len(f) == 8 {
		src, ok1 := strings.CutPrefix(f[6], "src_qp=")
		grh, ok2 := strings.CutPrefix(f[7], "grh=")
		q, err := strconv.ParseUint(src, 16, 24)
		if !ok1 || !ok2 || err != nil || (grh != "0" && grh != "1") {
			return wc{}, fmt.Errorf("bad UD fields in WC line %q", strings.Join(f, " "))
		}
		w.ud, w.srcQP, w.grh = true, uint32(q), grh == "1"
	}
	return w, nil
}

// completion reads the completion of the command just sent (an ERR line is
// an error). LATE lines — completions of an earlier command's WR — are
// kept aside (Late), never taken for this command's.
func (p *linePeer) completion(timeout time.Duration) (wc, error) {
	deadline := time.Now().Add(timeout)
	for {
		line, err := p.next(time.Until(deadline))
		if err != nil {
			return wc{}, err
		}
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "LATE" {
			p.mu.Lock()
			p.late = append(p.late, line)
			p.mu.Unlock()
			continue
		}
		w, err := parseWC(f)
		if err != nil {
			return wc{}, fmt.Errorf("%s: %w", p.name, err)
		}
		return w, nil
	}
}

// Late returns the LATE lines seen so far.
func (p *linePeer) Late() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.late...)
}

// orig reads the ORIG line an atomic prints after its successful WC.
func (p *linePeer) orig(timeout time.Duration) (uint64, error) {
	f, err := p.expect("ORIG", timeout)
	if err != nil {
		return 0, err
	}
	if len(f) != 2 || !strings.HasPrefix(f[1], "0x") || len(f[1]) != 18 {
		return 0, fmt.Errorf("%s: want ORIG 0x<16 hex digits>, got %q", p.name, strings.Join(f, " "))
	}
	return hexField(f, 1)
}

// sum asks for the crc32 of the peer's MR range [off, off+n).
func (p *linePeer) sum(off, n uint64, timeout time.Duration) (uint32, error) {
	if err := p.send("sum %d %d", off, n); err != nil {
		return 0, err
	}
	f, err := p.expect("SUM", timeout)
	if err != nil {
		return 0, err
	}
	c, err := hexField(f, len(f)-1)
	if err != nil || len(f) != 4 || !echoes(f, 1, off, n) {
		return 0, fmt.Errorf("%s: bad SUM line %q (want SUM %d %d <crc>)", p.name, strings.Join(f, " "), off, n)
	}
	return uint32(c), nil
}

// dump returns the bytes of the peer's MR range [off, off+n) (n <= 4096).
func (p *linePeer) dump(off, n uint64, timeout time.Duration) ([]byte, error) {
	if err := p.send("dump %d %d", off, n); err != nil {
		return nil, err
	}
	f, err := p.expect("DUMP", timeout)
	if err != nil {
		return nil, err
	}
	if len(f) != 4 || !echoes(f, 1, off, n) {
		return nil, fmt.Errorf("%s: bad DUMP line %q (want DUMP %d %d <hex>)", p.name, strings.Join(f, " "), off, n)
	}
	if f[3] == "-" {
		f[3] = ""
	}
	b, err := hex.DecodeString(f[3])
	if err != nil || uint64(len(b)) != n {
		return nil, fmt.Errorf("%s: bad DUMP line %q (want %d bytes)", p.name, strings.Join(f, " "), n)
	}
	return b, nil
}

// cqEvents is what verbs_peer's `events` reports: CQ events received and
// acked, and how often a wait went to sleep on the completion channel.
type cqEvents struct{ events, acked, sleeps uint64 }

func (p *linePeer) events(timeout time.Duration) (cqEvents, error) {
	if err := p.send("events"); err != nil {
		return cqEvents{}, err
	}
	f, err := p.expect("EVENTS", timeout)
	if err != nil {
		return cqEvents{}, err
	}
	e, err1 := decField(f, 1)
	a, err2 := decField(f, 2)
	s, err3 := decField(f, 3)
	if err := errors.Join(err1, err2, err3); err != nil || len(f) != 4 {
		return cqEvents{}, fmt.Errorf("%s: bad EVENTS line %q", p.name, strings.Join(f, " "))
	}
	return cqEvents{events: e, acked: a, sleeps: s}, nil
}

// refused sends a command the peer must refuse; the reply must be an ERR
// line containing want.
func (p *linePeer) refused(cmd, want string, timeout time.Duration) error {
	if err := p.send("%s", cmd); err != nil {
		return err
	}
	line, err := p.next(timeout)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "ERR") || !strings.Contains(line, want) {
		return fmt.Errorf("%s: %q answered %q, want ERR … %s", p.name, cmd, line, want)
	}
	return nil
}

// Commands whose completions the caller reads with completion().
func (p *linePeer) write(raddr uint64, rkey uint32, n uint64, seed uint32) error {
	return p.send("write %x %x %d %d", raddr, rkey, n, seed)
}

func (p *linePeer) read(raddr uint64, rkey uint32, n uint64) error {
	return p.send("read %x %x %d", raddr, rkey, n)
}

func (p *linePeer) sendMsg(n uint64, seed uint32) error { return p.send("send %d %d", n, seed) }

// sendQKey is a UD SEND with an explicit DETH Q_Key.
func (p *linePeer) sendQKey(n uint64, seed, qkey uint32) error {
	return p.send("send %d %d %x", n, seed, qkey)
}

func (p *linePeer) fetchAdd(raddr uint64, rkey uint32, add uint64) error {
	return p.send("fadd %x %x %d", raddr, rkey, add)
}

func (p *linePeer) cmpSwap(raddr uint64, rkey uint32, compare, swap uint64) error {
	return p.send("cas %x %x %d %d", raddr, rkey, compare, swap)
}

func (p *linePeer) recv(n int) error { return p.send("recv %d", n) }

func (p *linePeer) quit() error { return p.send("quit") }
