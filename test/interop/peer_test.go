package interop

import (
	"bufio"
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
var protocolWords = []string{"LOCAL ", "WC ", "LATE ", "ORIG ", "SUM ", "MR ", "ERR", "COUNTERS"}

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

// hexField parses one hex number of a reply (with or without 0x).
func hexField(f []string, i int) (uint64, error) {
	if i >= len(f) {
		return 0, fmt.Errorf("reply %q has no field %d", strings.Join(f, " "), i)
	}
	return strconv.ParseUint(strings.TrimPrefix(f[i], "0x"), 16, 64)
}

// endpoint is what LOCAL announces.
type endpoint struct {
	qpn, psn uint32
	gid      string
}

func (p *linePeer) local(timeout time.Duration) (endpoint, error) {
	f, err := p.expect("LOCAL", timeout)
	if err != nil {
		return endpoint{}, err
	}
	qpn, err1 := hexField(f, 1)
	psn, err2 := hexField(f, 2)
	if err := errors.Join(err1, err2); err != nil || len(f) < 4 {
		return endpoint{}, fmt.Errorf("%s: bad LOCAL line %q: %v", p.name, strings.Join(f, " "), err)
	}
	return endpoint{qpn: uint32(qpn), psn: uint32(psn), gid: f[3]}, nil
}

// remote tells the peer the other side's QPN and PSN.
func (p *linePeer) remote(e endpoint) error {
	return p.send("REMOTE %x %x", e.qpn, e.psn)
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
	size, err3 := hexField(f, 3)
	if err := errors.Join(err1, err2, err3); err != nil {
		return mrInfo{}, fmt.Errorf("%s: bad MR line: %w", p.name, err)
	}
	return mrInfo{addr: addr, rkey: uint32(rkey), size: size}, nil
}

// wc is one work completion line: WC <wr_id> <status> <opcode> <byte_len> <imm>.
type wc struct {
	wrID           uint64
	status, opcode string
	byteLen        uint64
	imm            uint64
}

func (w wc) String() string {
	return fmt.Sprintf("WC %x %s %s %d %x", w.wrID, w.status, w.opcode, w.byteLen, w.imm)
}

// parseWC parses the fields of a WC line (without a LATE prefix).
func parseWC(f []string) (wc, error) {
	if len(f) != 6 || f[0] != "WC" {
		return wc{}, fmt.Errorf("want WC <wr_id> <status> <opcode> <byte_len> <imm>, got %q", strings.Join(f, " "))
	}
	id, err1 := hexField(f, 1)
	n, err2 := strconv.ParseUint(f[4], 10, 64)
	imm, err3 := hexField(f, 5)
	if err := errors.Join(err1, err2, err3); err != nil {
		return wc{}, fmt.Errorf("bad WC line %q: %w", strings.Join(f, " "), err)
	}
	return wc{wrID: id, status: f[2], opcode: f[3], byteLen: n, imm: imm}, nil
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
	if err := p.send("sum %x %x", off, n); err != nil {
		return 0, err
	}
	f, err := p.expect("SUM", timeout)
	if err != nil {
		return 0, err
	}
	c, err := hexField(f, len(f)-1)
	if err != nil || len(f) != 4 {
		return 0, fmt.Errorf("%s: bad SUM line %q", p.name, strings.Join(f, " "))
	}
	return uint32(c), nil
}

// Commands whose completions the caller reads with completion().
func (p *linePeer) write(raddr uint64, rkey uint32, n uint64, seed uint32) error {
	return p.send("write %x %x %x %x", raddr, rkey, n, seed)
}

func (p *linePeer) read(raddr uint64, rkey uint32, n uint64) error {
	return p.send("read %x %x %x", raddr, rkey, n)
}

func (p *linePeer) sendMsg(n uint64, seed uint32) error { return p.send("send %x %x", n, seed) }

func (p *linePeer) fetchAdd(raddr uint64, rkey uint32, add uint64) error {
	return p.send("fadd %x %x %x", raddr, rkey, add)
}

func (p *linePeer) cmpSwap(raddr uint64, rkey uint32, compare, swap uint64) error {
	return p.send("cas %x %x %x %x", raddr, rkey, compare, swap)
}

func (p *linePeer) recv(n int) error { return p.send("recv %x", n) }

func (p *linePeer) quit() error { return p.send("quit") }
