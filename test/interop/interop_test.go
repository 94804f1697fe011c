package interop

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/freeport"
)

// Message sizes for WRITE, READ and SEND: empty (rxe skips the rkey check),
// padded (1: PadCnt 3; 8191: 8 packets, PadCnt 1), below, at and just
// above the path MTU, and several MTUs.
var sizes = []uint64{0, 1, 64, 1024, 1025, 4096, 8191}

// pingpongSizes for ibv_rc_pingpong (which cannot register an empty buffer).
var pingpongSizes = []uint64{64, 1024, 4096}

const (
	pathMTU = 1024
	// Offsets in the responder's MR that write and read checks use; both lie
	// below the receive area (verbs_peer: the MR's second half).
	writeOff   = 64 << 10
	scratchOff = 128 << 10
	// atomicOff is the 8-byte word the atomics work on (8-byte aligned).
	atomicOff = 192 << 10
	// fetchAddend is what FETCH_ADD adds: every byte differs, so a byte
	// order mistake shows.
	fetchAddend = 0x1122334455667788
	// How long one command may take: rxe under TCG answers in milliseconds,
	// but a lost frame costs a retransmission timeout (verbs_peer: ~270 ms
	// times 6 retries).
	opTimeout = 15 * time.Second
)

// TestInterop boots the Soft-RoCE guest once and runs every interop check
// against it, then logs the matrix (operation × direction × size × result).
func TestInterop(t *testing.T) {
	if os.Getenv("SOFTNIC_INTEROP") != "1" {
		t.Skip("set SOFTNIC_INTEROP=1 to run the Linux Soft-RoCE interop test (builds and boots a qemu guest)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	t0 := time.Now()
	img, buildLog, err := buildGuest(ctx, guestCacheDir())
	require.NoError(t, err, buildLog)
	t.Logf("guest %s built or found in %v", img.kernelVersion, time.Since(t0).Round(time.Millisecond))

	t1 := time.Now()
	g, err := bootGuest(img, guestOptions{img: img, channels: 2, neigh: true}, 90*time.Second)
	require.NoError(t, err)
	defer g.shutdown()
	t.Logf("guest up in %v: %s", time.Since(t1).Round(time.Millisecond), g.ready)

	m := &matrix{}
	defer func() { t.Log("interop matrix:\n" + m.String()) }()

	t.Run("loopback", func(t *testing.T) { testLoopback(t, g, m) })
	t.Run("loopback_pingpong", func(t *testing.T) { testLoopbackPingpong(t, g, m) })
	t.Run("loopback_ud", func(t *testing.T) { testLoopbackUD(t, g, m) })
	t.Run("loopback_uc", func(t *testing.T) { testLoopbackUC(t, g, m) })
	t.Run("loopback_events", func(t *testing.T) { testLoopbackEvents(t, g, m) })

	// Captures and the softnic binary go to a temporary directory, or to
	// SOFTNIC_INTEROP_ARTIFACTS to keep them for inspection.
	dir := os.Getenv("SOFTNIC_INTEROP_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else {
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	bin, err := buildSoftnic(ctx, dir)
	require.NoError(t, err)
	for _, sub := range []string{"rdma", "rc_pingpong"} {
		require.True(t, softnicHas(bin, sub), "softnic has no %q command yet", sub)
	}
	before := parseCounters(g.counters())
	t.Run("rdma", func(t *testing.T) { testRdma(t, g, bin, dir, m) })
	t.Run("rc_pingpong", func(t *testing.T) { testPingpong(t, g, bin, dir, m) })
	t.Run("rdma_errors", func(t *testing.T) { testRdmaErrors(t, g, bin, dir, m) })
	t.Run("rdma_atomics", func(t *testing.T) { testRdmaAtomics(t, g, bin, dir, m) })
	t.Run("rdma_faults", func(t *testing.T) { testRdmaFaults(t, g, bin, dir, m) })
	t.Run("rdma_ud", func(t *testing.T) { testRdmaUD(t, g, bin, dir, m) })
	t.Run("rdma_uc", func(t *testing.T) { testRdmaUC(t, g, bin, dir, m) })
	t.Run("rdma_uc_loss", func(t *testing.T) { testRdmaUCLoss(t, g, bin, dir, m) })
	t.Run("rdma_events", func(t *testing.T) { testRdmaEvents(t, g, bin, dir, m) })
	// What rxe counted while it talked to softnic: drops and retries show
	// up here (out_of_seq_request, duplicate_request, rcvd_seq_err,
	// completer_retry_err, retry_exceeded_err, ...).
	t.Logf("rxe0 hw_counters changed while talking to softnic:\n%s", parseCounters(g.counters()).delta(before))
	t.Logf("whole interop run: %v", time.Since(t0).Round(time.Millisecond))
}

// testLoopbackPingpong runs ibv_rc_pingpong against itself inside the guest
// (the console's background jobs, the listen probe, the summary parsing).
func testLoopbackPingpong(t *testing.T, g *guest, m *matrix) {
	n := pingpongSizes[len(pingpongSizes)-1]
	job, err := g.bg(guestPingpong(n, guestTCPPort, ""))
	require.NoError(t, err)
	require.True(t, g.listening(guestTCPPort, opTimeout), "guest ibv_rc_pingpong never listened on :%d", guestTCPPort)
	cout, ccode, err := g.run(60*time.Second, guestPingpong(n, guestTCPPort, "127.0.0.1"))
	require.NoError(t, err)
	sout, scode, err := g.wait(job, 60*time.Second)
	require.NoError(t, err)
	err = errors.Join(pingpongDone("client", cout), pingpongDone("server", sout))
	if ccode != 0 || scode != 0 {
		err = errors.Join(err, fmt.Errorf("exit codes client %d server %d", ccode, scode))
	}
	m.add("ibv_rc_pingpong", "rxe→rxe (guest loopback)", int64(n), err, "")
	require.NoError(t, err, "client:\n%s\nserver:\n%s", cout, sout)
}

// matrix collects one row per check.
type matrix struct {
	rows []matrixRow
}

type matrixRow struct {
	op, dir, size, result, rxe string
}

// noSize marks a row that has no message size.
const noSize = -1

// add records one check. rxe names the rxe0 counters other than plain
// traffic that moved during it (what rxe rejected or retried, and why).
func (m *matrix) add(op, dir string, size int64, err error, rxe string) {
	r := matrixRow{op: op, dir: dir, size: fmt.Sprint(size), result: "ok", rxe: rxe}
	if size == noSize {
		r.size = "-"
	}
	if err != nil {
		r.result = "FAIL: " + firstLine(err.Error())
	}
	m.rows = append(m.rows, r)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func (m *matrix) String() string {
	var b bytes.Buffer
	w := [4]int{len("operation"), len("direction"), len("size"), len("result")}
	for _, r := range m.rows {
		w[0], w[1], w[2], w[3] = max(w[0], len(r.op)), max(w[1], len(r.dir)), max(w[2], len(r.size)), max(w[3], len(r.result))
	}
	fmt.Fprintf(&b, "%-*s  %-*s  %*s  %-*s  %s\n", w[0], "operation", w[1], "direction", w[2], "size", w[3], "result", "rxe0 counters besides traffic")
	for _, r := range m.rows {
		fmt.Fprintf(&b, "%-*s  %-*s  %*s  %-*s  %s\n", w[0], r.op, w[1], r.dir, w[2], r.size, w[3], r.result, r.rxe)
	}
	return b.String()
}

// side is one connected endpoint of an RC, UC or UD pair driven by the
// line protocol.
type side struct {
	name    string
	p       *linePeer
	mr      mrInfo
	recvOff uint64   // where its receives land in its MR
	ep      endpoint // what its LOCAL line said
	ip      string   // its IPv4 address
}

// connect exchanges LOCAL/REMOTE between a and b (each must already have
// printed LOCAL, given here) and reads both MRs.
func connect(a, b *side, la, lb endpoint) error {
	a.ep, b.ep = la, lb
	if err := a.p.remote(lb); err != nil {
		return err
	}
	if err := b.p.remote(la); err != nil {
		return err
	}
	var err error
	if a.mr, err = a.p.mr(opTimeout); err != nil {
		return err
	}
	if b.mr, err = b.p.mr(opTimeout); err != nil {
		return err
	}
	return nil
}

// wantWC reads one completion and checks its status and opcode (and, for
// receives, its length).
func wantWC(s *side, opcode string, byteLen int64) error {
	c, err := s.p.completion(opTimeout)
	if err != nil {
		return err
	}
	if c.status != "SUCCESS" || c.opcode != opcode || (byteLen >= 0 && c.byteLen != uint64(byteLen)) {
		want := fmt.Sprintf("SUCCESS %s", opcode)
		if byteLen >= 0 {
			want += fmt.Sprintf(" %d", byteLen)
		}
		return fmt.Errorf("%s: got %v, want %s", s.name, c, want)
	}
	return nil
}

// wantSum checks the crc32 of s's MR range against the seed generator.
func wantSum(s *side, off, n uint64, seed uint32) error {
	got, err := s.p.sum(off, n, opTimeout)
	if err != nil {
		return err
	}
	if want := seedCRC(seed, int(n)); got != want {
		return fmt.Errorf("%s: crc32 of MR[%#x, +%d) = %08x, want %08x (seed %#x)", s.name, off, n, got, want, seed)
	}
	return nil
}

// checkWrite: req RDMA-WRITEs n seeded bytes into rsp's MR; rsp's bytes
// must match.
func checkWrite(req, rsp *side, n uint64, seed uint32) error {
	if err := req.p.write(rsp.mr.addr+writeOff, rsp.mr.rkey, n, seed); err != nil {
		return err
	}
	if err := wantWC(req, "RDMA_WRITE", -1); err != nil {
		return err
	}
	if err := wantSum(req, 0, n, seed); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	return wantSum(rsp, writeOff, n, seed)
}

// checkRead: req RDMA-READs n bytes of rsp's MR. The source range is first
// filled by a WRITE with seed, then req's own buffer is overwritten by a
// WRITE with another seed, so the READ must bring the first seed's bytes
// back.
func checkRead(req, rsp *side, n uint64, seed uint32) error {
	if err := checkWrite(req, rsp, n, seed); err != nil {
		return fmt.Errorf("preparing the source: %w", err)
	}
	if err := req.p.write(rsp.mr.addr+scratchOff, rsp.mr.rkey, n, ^seed); err != nil {
		return err
	}
	if err := wantWC(req, "RDMA_WRITE", -1); err != nil {
		return fmt.Errorf("preparing the sink: %w", err)
	}
	if err := req.p.read(rsp.mr.addr+writeOff, rsp.mr.rkey, n); err != nil {
		return err
	}
	if err := wantWC(req, "RDMA_READ", -1); err != nil {
		return err
	}
	return wantSum(req, 0, n, seed)
}

// checkSend: req SENDs n seeded bytes; rsp's receive completes with n bytes
// that match.
func checkSend(req, rsp *side, n uint64, seed uint32) error {
	if err := rsp.p.recv(1); err != nil {
		return err
	}
	if err := req.p.sendMsg(n, seed); err != nil {
		return err
	}
	if err := wantWC(req, "SEND", -1); err != nil {
		return err
	}
	if err := wantWC(rsp, "RECV", int64(n)); err != nil {
		return err
	}
	return wantSum(rsp, rsp.recvOff, n, seed)
}

// seedWord is the 8-byte word `write RADDR RKEY 8 SEED` puts at RADDR, as
// the atomics read it: a little-endian uint64 (both stacks run on x86 and
// operate on the remote word in host order, as rxe_resp.c does).
func seedWord(seed uint32) uint64 {
	return binary.LittleEndian.Uint64(seedBytes(seed, 8))
}

// wantWord checks that rsp's MR holds v (little-endian) at off.
func wantWord(s *side, off, v uint64) error {
	got, err := s.p.sum(off, 8, opTimeout)
	if err != nil {
		return err
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	if want := crc32.ChecksumIEEE(b[:]); got != want {
		return fmt.Errorf("%s: MR[%#x, +8) does not hold %#016x (crc32 %08x, want %08x)", s.name, off, v, got, want)
	}
	return nil
}

// wantAtomic reads an atomic's WC (SUCCESS, opcode, 8 bytes) and its ORIG
// line, which must be orig.
func wantAtomic(s *side, opcode string, orig uint64) error {
	if err := wantWC(s, opcode, 8); err != nil {
		return err
	}
	got, err := s.p.orig(opTimeout)
	if err != nil {
		return err
	}
	if got != orig {
		return fmt.Errorf("%s: %s returned ORIG %#016x, want %#016x", s.name, opcode, got, orig)
	}
	return nil
}

// seedAtomicWord has req WRITE the seed's 8 bytes into rsp's atomic word.
func seedAtomicWord(req, rsp *side, seed uint32) (uint64, error) {
	if err := req.p.write(rsp.mr.addr+atomicOff, rsp.mr.rkey, 8, seed); err != nil {
		return 0, err
	}
	if err := wantWC(req, "RDMA_WRITE", -1); err != nil {
		return 0, fmt.Errorf("seeding the atomic word: %w", err)
	}
	return seedWord(seed), nil
}

// checkFetchAdd: req FETCH_ADDs fetchAddend to a seeded word of rsp's MR:
// ORIG is the seeded value; a second FETCH_ADD of 0 returns the sum, which
// rsp's memory holds.
func checkFetchAdd(req, rsp *side, seed uint32) error {
	v0, err := seedAtomicWord(req, rsp, seed)
	if err != nil {
		return err
	}
	raddr := rsp.mr.addr + atomicOff
	if err := req.p.fetchAdd(raddr, rsp.mr.rkey, fetchAddend); err != nil {
		return err
	}
	if err := wantAtomic(req, "FETCH_ADD", v0); err != nil {
		return err
	}
	v1 := v0 + fetchAddend
	if err := req.p.fetchAdd(raddr, rsp.mr.rkey, 0); err != nil {
		return err
	}
	if err := wantAtomic(req, "FETCH_ADD", v1); err != nil {
		return fmt.Errorf("reading the sum back: %w", err)
	}
	return wantWord(rsp, atomicOff, v1)
}

// checkCmpSwap: req CMP_SWAPs a seeded word of rsp's MR, with the right
// compare value (match: the word becomes the swap value) or a wrong one
// (the word stays). ORIG is the seeded value either way.
func checkCmpSwap(req, rsp *side, seed uint32, match bool) error {
	v0, err := seedAtomicWord(req, rsp, seed)
	if err != nil {
		return err
	}
	swap := ^v0 ^ fetchAddend
	compare, want := v0, swap
	if !match {
		compare, want = v0^1, v0
	}
	if err := req.p.cmpSwap(rsp.mr.addr+atomicOff, rsp.mr.rkey, compare, swap); err != nil {
		return err
	}
	if err := wantAtomic(req, "COMP_SWAP", v0); err != nil {
		return err
	}
	return wantWord(rsp, atomicOff, want)
}

// atomicChecks are the atomic rows: name, check.
var atomicChecks = []struct {
	op    string
	check func(req, rsp *side, seed uint32) error
}{
	{"FETCH_ADD", checkFetchAdd},
	{"CMP_SWAP (swap)", func(req, rsp *side, seed uint32) error { return checkCmpSwap(req, rsp, seed, true) }},
	{"CMP_SWAP (compare fails)", func(req, rsp *side, seed uint32) error { return checkCmpSwap(req, rsp, seed, false) }},
}

// verbsPeer starts verbs_peer in the guest on serial channel ch.
func verbsPeer(g *guest, ch int, args string) (*side, func() string, error) {
	conn, err := g.openChannel(ch)
	if err != nil {
		return nil, nil, err
	}
	tty := fmt.Sprintf("/dev/ttyS%d", ch)
	log := fmt.Sprintf("/tmp/peer%d.log", ch)
	// stty on the channel itself, then the peer with it as stdin and stdout.
	shell := fmt.Sprintf("(stty raw -echo && exec verbs_peer %s) <%s >%s 2>%s & echo $! >/tmp/peer%d.pid",
		args, tty, tty, log, ch)
	if _, err := g.mustRun(opTimeout, shell); err != nil {
		conn.Close()
		return nil, nil, err
	}
	name := fmt.Sprintf("verbs_peer(ttyS%d)", ch)
	s := &side{name: name, p: newLinePeer(name, conn, conn)}
	stop := func() string {
		_ = s.p.quit()
		out, _, _ := g.run(opTimeout, fmt.Sprintf("sleep 0.2; kill $(cat /tmp/peer%d.pid) 2>/dev/null; cat %s", ch, log))
		conn.Close()
		return out
	}
	return s, stop, nil
}

// loopbackDir labels the guest-only rows.
const loopbackDir = "rxe→rxe (guest loopback)"

// loopbackPair starts two verbs_peers in the guest (serial channels 1 and
// 2, extra flags argsA and argsB each) and connects them over rxe0: the C
// peer and the serial harness on their own, without softnic. Both stop when
// the test ends, logging what they said if it failed.
func loopbackPair(t *testing.T, g *guest, argsA, argsB string) (a, b *side) {
	args := fmt.Sprintf("--remote-ip %s --mtu %d", guestIP, pathMTU)
	a, stopA, err := verbsPeer(g, 1, args+" "+argsA)
	require.NoError(t, err)
	b, stopB, err := verbsPeer(g, 2, args+" "+argsB)
	if err != nil {
		stopA()
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		logs := []string{stopA(), stopB()}
		if t.Failed() {
			t.Logf("peer stderr:\n%s\ntranscripts:\n%s\n%s\nrxe0 counters:\n%s",
				strings.Join(logs, "\n"), a.p.Transcript(), b.p.Transcript(), g.counters())
		}
	})
	la, err := a.p.local(opTimeout)
	require.NoError(t, err)
	lb, err := b.p.local(opTimeout)
	require.NoError(t, err)
	a.recvOff, b.recvOff = 512<<10, 512<<10
	a.ip, b.ip = guestIP, guestIP
	require.NoError(t, connect(a, b, la, lb))
	return a, b
}

// testLoopback runs two RC verbs_peers against each other over rxe0 inside
// the guest.
func testLoopback(t *testing.T, g *guest, m *matrix) {
	const dir = loopbackDir
	a, b := loopbackPair(t, g, "", "")

	seed := uint32(0x1000)
	for _, n := range sizes {
		seed++
		for _, c := range []struct {
			op    string
			check func(req, rsp *side, n uint64, seed uint32) error
		}{{"RDMA_WRITE", checkWrite}, {"RDMA_READ", checkRead}, {"SEND", checkSend}} {
			t.Run(fmt.Sprintf("%s/%d", c.op, n), func(t *testing.T) {
				err := c.check(a, b, n, seed)
				m.add(c.op, dir, int64(n), err, "")
				require.NoError(t, err)
			})
		}
	}
	for _, c := range atomicChecks {
		seed++
		t.Run(c.op, func(t *testing.T) {
			err := c.check(a, b, seed)
			m.add(c.op, dir, 8, err, "")
			require.NoError(t, err)
		})
	}
}

// pingpongIters keeps each ibv_rc_pingpong run short under TCG.
const pingpongIters = 10

// guestPingpong is ibv_rc_pingpong's command line in the guest (rxe0, the
// RoCEv2 IPv4 GID, our path MTU).
func guestPingpong(size uint64, port int, host string) string {
	s := fmt.Sprintf("ibv_rc_pingpong -d rxe0 -i 1 -g 1 -m %d -s %d -n %d -p %d", pathMTU, size, pingpongIters, port)
	if host != "" {
		s += " " + host
	}
	return s
}

// softnicPingpong is softnic rc_pingpong's command line on the guest's link.
func softnicPingpong(g *guest, pcap string, size uint64, port int, host string, flags ...string) []string {
	args := append([]string{"rc_pingpong"}, wireArgs(g, pcap)...)
	args = append(args, "-g", "1", "-m", fmt.Sprint(pathMTU), "-s", fmt.Sprint(size),
		"-n", fmt.Sprint(pingpongIters), "-p", fmt.Sprint(port))
	args = append(args, flags...)
	if host != "" {
		args = append(args, host)
	}
	return args
}

// pingpongDone checks that a pingpong side printed its summary lines.
func pingpongDone(who, out string) error {
	if !strings.Contains(out, "iters in") || !strings.Contains(out, "bytes in") {
		return fmt.Errorf("%s printed no summary:\n%s", who, out)
	}
	return nil
}

// runPingpong runs one ibv_rc_pingpong exchange between the guest (in
// guestRole) and softnic rc_pingpong.
func runPingpong(g *guest, bin, dir, guestRole string, size uint64) (diag string, err error) {
	return runPingpongWith(g, bin, dir, guestRole, size, "ibv_rc_pingpong", guestPingpong)
}

// runPingpongWith is runPingpong with the guest's side given: its name and
// its command line for a size, a TCP port and (client) the server's host.
func runPingpongWith(g *guest, bin, dir, guestRole string, size uint64, guestName string,
	guestCmd func(size uint64, port int, host string) string) (diag string, err error) {
	return runPingpongFlags(g, bin, dir, guestRole, size, guestName, guestCmd)
}

// runPingpongFlags is runPingpongWith with flags for softnic rc_pingpong.
// With -c (--chk) on both sides, the server — whichever it is — must
// print no "invalid data in page" line (ibv_rc_pingpong prints one for
// each page whose first byte is not the client's mark, and still exits 0).
func runPingpongFlags(g *guest, bin, dir, guestRole string, size uint64, guestName string,
	guestCmd func(size uint64, port int, host string) string, snFlags ...string) (diag string, err error) {
	pcap := filepath.Join(dir, fmt.Sprintf("pingpong-%s%s-guest-%s-%d.pcap", strings.ReplaceAll(guestName, " ", "_"), strings.Join(snFlags, ""), guestRole, size))
	var sn *proc
	var guestOut string
	var guestCode int
	defer func() {
		if err == nil {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "guest %s (exit %d):\n%s\n", guestName, guestCode, guestOut)
		if sn != nil {
			fmt.Fprintf(&b, "softnic rc_pingpong stdout:\n%s\nstderr:\n%s\n", sn.stdout.String(), sn.stderr.String())
		}
		text, _ := decodePcap(bin, pcap)
		fmt.Fprintf(&b, "softnic decode %s:\n%s\n", filepath.Base(pcap), tailLines(text, 60))
		diag = b.String()
	}()

	switch guestRole {
	case "server":
		job, err := g.bg(guestCmd(size, guestTCPPort, ""))
		if err != nil {
			return "", err
		}
		// Through slirp a connect succeeds even before the guest listens:
		// wait until it does.
		if !g.listening(guestTCPPort, opTimeout) {
			guestOut, guestCode, _ = g.wait(job, opTimeout)
			return "", fmt.Errorf("guest %s never listened on :%d", guestName, guestTCPPort)
		}
		for attempt := 1; ; attempt++ {
			sn, err = startProc(bin, softnicPingpong(g, pcap, size, g.hostFwd, "127.0.0.1", snFlags...), nil, nil)
			if err != nil {
				return "", err
			}
			snErr := sn.wait(60 * time.Second)
			if snErr == nil {
				break
			}
			// A handshake that slirp accepted but the guest never saw
			// leaves the guest server waiting: try again a few times.
			select {
			case <-job.done:
			default:
				if attempt < 3 {
					time.Sleep(500 * time.Millisecond)
					continue
				}
			}
			guestOut, guestCode, _ = g.wait(job, opTimeout)
			return "", fmt.Errorf("softnic rc_pingpong (client): %w", snErr)
		}
		guestOut, guestCode, err = g.wait(job, 60*time.Second)
		if err != nil {
			return "", err
		}
	case "client":
		port, err := freeport.TCP()
		if err != nil {
			return "", err
		}
		if sn, err = startProc(bin, softnicPingpong(g, pcap, size, port, "", snFlags...), nil, nil); err != nil {
			return "", err
		}
		defer func() { _ = sn.wait(opTimeout) }()
		for deadline := time.Now().Add(opTimeout); !tcpListening(port); {
			select {
			case <-sn.done:
				return "", fmt.Errorf("softnic rc_pingpong (server) exited before listening: %v", sn.err)
			default:
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("softnic rc_pingpong (server) never listened on :%d", port)
			}
			time.Sleep(50 * time.Millisecond)
		}
		guestOut, guestCode, err = g.run(60*time.Second, guestCmd(size, port, slirpHost))
		if err != nil {
			return "", err
		}
		if err := sn.wait(60 * time.Second); err != nil {
			return "", fmt.Errorf("softnic rc_pingpong (server): %w", err)
		}
	}
	if guestCode != 0 {
		return "", fmt.Errorf("guest %s exited %d", guestName, guestCode)
	}
	if err := errors.Join(pingpongDone("guest "+guestName, guestOut),
		pingpongDone("softnic rc_pingpong", sn.stdout.String())); err != nil {
		return "", err
	}
	for _, o := range []struct{ who, out string }{{"guest " + guestName, guestOut}, {"softnic rc_pingpong", sn.stdout.String()}} {
		if strings.Contains(o.out, "invalid data in page") {
			return "", fmt.Errorf("%s found the received buffer invalid:\n%s", o.who, o.out)
		}
	}
	if text, ok := decodePcap(bin, pcap); !ok {
		return "", fmt.Errorf("softnic decode found bad frames:\n%s", tailLines(text, 40))
	}
	// On success: the guest's summary ("N iters in S seconds = U usec/iter").
	for line := range strings.SplitSeq(guestOut, "\n") {
		if strings.Contains(line, "iters in") {
			return strings.TrimSpace(line), nil
		}
	}
	return "", nil
}

func testPingpong(t *testing.T, g *guest, bin, dir string, m *matrix) {
	for _, role := range []string{"server", "client"} {
		dirLabel := "rxe server, softnic client"
		if role == "client" {
			dirLabel = "softnic server, rxe client"
		}
		for _, n := range pingpongSizes {
			t.Run(fmt.Sprintf("guest_%s/%d", role, n), func(t *testing.T) {
				before := parseCounters(g.counters())
				diag, err := runPingpong(g, bin, dir, role, n)
				after := parseCounters(g.counters())
				m.add("ibv_rc_pingpong", dirLabel, int64(n), err, after.unusual(before))
				if err != nil {
					t.Fatalf("%v\n%s\nrxe0 counters changed:\n%s", err, diag, after.delta(before))
				}
			})
		}
		// --chk: the client marks the first byte of each page, the
		// server checks the marks after the run; three pages, the last
		// one partial.
		n := uint64(pingpongChkSize)
		t.Run(fmt.Sprintf("chk/guest_%s/%d", role, n), func(t *testing.T) {
			before := parseCounters(g.counters())
			guestChk := func(size uint64, port int, host string) string {
				return strings.Replace(guestPingpong(size, port, host), "ibv_rc_pingpong ", "ibv_rc_pingpong --chk ", 1)
			}
			diag, err := runPingpongFlags(g, bin, dir, role, n, "ibv_rc_pingpong --chk", guestChk, "-c")
			after := parseCounters(g.counters())
			m.add("ibv_rc_pingpong --chk", dirLabel, int64(n), err, after.unusual(before))
			if err != nil {
				t.Fatalf("%v\n%s\nrxe0 counters changed:\n%s", err, diag, after.delta(before))
			}
		})
	}
}

// pingpongChkSize is the message of the --chk runs: more than two pages
// of 4 KiB (the guest's and the host's page size), so that a mark other
// than the first page's is checked.
const pingpongChkSize = 2*4096 + 100

// session is softnic rdma connected to verbs_peer in the guest.
type session struct {
	t      *testing.T
	m      *matrix
	g      *guest
	bin    string
	pcap   string
	r      *rdmaProc
	sn, v  *side
	stopV  func() string
	before counterSet
}

// openSession starts softnic rdma (capturing to pcap) and verbs_peer on
// serial channel 1; connect() then joins them. beforePeer runs once softnic
// is on the wire and before verbs_peer resolves it (the ARP check).
func openSession(t *testing.T, m *matrix, g *guest, bin, pcap string, beforePeer func()) *session {
	return openSessionOpts(t, m, g, bin, pcap, sessionOpts{beforePeer: beforePeer})
}

// openSessionArgs is openSession with extra flags for softnic rdma.
func openSessionArgs(t *testing.T, m *matrix, g *guest, bin, pcap string, beforePeer func(), extra ...string) *session {
	return openSessionOpts(t, m, g, bin, pcap, sessionOpts{beforePeer: beforePeer, softnicArgs: extra})
}

// sessionOpts shape a session: extra flags for each peer (the QP type, a
// Q_Key, --faults, --events) and the ARP check's hook.
type sessionOpts struct {
	beforePeer  func()
	softnicArgs []string // softnic rdma
	peerArgs    string   // verbs_peer
}

// openSessionOpts is openSession with sessionOpts.
func openSessionOpts(t *testing.T, m *matrix, g *guest, bin, pcap string, o sessionOpts) *session {
	beforePeer := o.beforePeer
	s := &session{t: t, m: m, g: g, bin: bin, pcap: pcap, before: parseCounters(g.counters())}
	args := append(wireArgs(g, pcap), "--remote-ip", guestIP, "--mtu", fmt.Sprint(pathMTU))
	args = append(args, o.softnicArgs...)
	var err error
	s.r, err = startRdma(bin, args)
	require.NoError(t, err)
	s.sn = s.r.side
	t.Cleanup(s.close)
	ls, err := s.sn.p.local(opTimeout)
	require.NoError(t, err, "softnic rdma stderr:\n%s", s.r.stderr.String())
	if beforePeer != nil {
		beforePeer()
	}
	s.v, s.stopV, err = verbsPeer(g, 1, fmt.Sprintf("--remote-ip %s --mtu %d %s", softnicIP, pathMTU, o.peerArgs))
	require.NoError(t, err)
	lv, err := s.v.p.local(opTimeout)
	require.NoError(t, err)
	s.sn.ip, s.v.ip = softnicIP, guestIP
	require.NoError(t, connect(s.sn, s.v, ls, lv))
	s.v.recvOff = s.v.mr.size / 2
	s.sn.recvOff = s.sn.mr.size / 2 // docs/howto-interop.md: receives land in the MR's second half
	return s
}

// close ends both peers. It logs the counters of both stacks, and on
// failure everything needed to name the frame: both transcripts, both
// stderrs and softnic's decode of the capture.
func (s *session) close() {
	stopErr := s.r.stop()
	var peerLog string
	if s.stopV != nil {
		peerLog = s.stopV()
	}
	text, ok := decodePcap(s.bin, s.pcap)
	s.t.Logf("rxe0 counters during %s:\n%s", filepath.Base(s.pcap), parseCounters(s.g.counters()).delta(s.before))
	s.t.Logf("softnic rdma %s", lastLineWith(s.r.stderr.String(), "counters:"))
	var icrcErr error
	if !ok {
		icrcErr = fmt.Errorf("softnic decode found bad or malformed frames in %s", s.pcap)
		s.t.Error(icrcErr)
	}
	s.m.add("ICRC+parse of all frames", filepath.Base(s.pcap), noSize, icrcErr, "")
	if ran, tsharkErr := tsharkCheck(s.pcap); ran {
		s.m.add("tshark dissects all frames", filepath.Base(s.pcap), noSize, tsharkErr, "")
		if tsharkErr != nil {
			s.t.Error(tsharkErr)
		}
	}
	if s.t.Failed() || stopErr != nil {
		s.t.Errorf("softnic rdma exit: %v\nsoftnic stderr:\n%s\nsoftnic transcript:\n%s\nverbs_peer stderr:\n%s\nverbs_peer transcript:\n%s\nsoftnic decode %s:\n%s",
			stopErr, s.r.stderr.String(), s.sn.p.Transcript(), peerLog, transcript(s.v), filepath.Base(s.pcap), tailLines(text, 80))
	}
}

// row runs one check of the session and records it in the matrix. A
// failure names the frames the check put on the wire (softnic decode of
// the capture from where the check began) and what rxe counted.
func (s *session) row(t *testing.T, m *matrix, op, dir string, size int64, check func() error) {
	t.Helper()
	from := pcapFrames(s.pcap) + 1
	before := parseCounters(s.g.counters())
	err := check()
	after := parseCounters(s.g.counters())
	m.add(op, dir, size, err, after.unusual(before))
	if err != nil {
		t.Fatalf("%v\nframes of this check (softnic decode %s #%d..):\n%s\nrxe0 counters changed:\n%s\nsoftnic counters: %s",
			err, filepath.Base(s.pcap), from, decodeFrames(s.bin, s.pcap, from, pcapFrames(s.pcap)),
			after.delta(before), s.softnicCounters())
	}
}

// softnicCounters asks softnic rdma for its counters (the `counters`
// command) without disturbing the exchange.
func (s *session) softnicCounters() string {
	if err := s.sn.p.send("counters"); err != nil {
		return err.Error()
	}
	// Skip what an unfinished command may still print.
	for range 8 {
		line, err := s.sn.p.next(opTimeout)
		if err != nil {
			return err.Error()
		}
		if strings.HasPrefix(line, "COUNTERS") {
			return line
		}
	}
	return "(no COUNTERS line)"
}

// testRdma connects softnic rdma to verbs_peer in the guest and runs WRITE,
// READ and SEND in both directions.
func testRdma(t *testing.T, g *guest, bin, dir string, m *matrix) {
	// rxe resolves softnic's MAC by ARP in modify_qp(RTR): take away the
	// permanent entry for this session and check softnic answers.
	_, err := g.mustRun(opTimeout, fmt.Sprintf("/usr/bin/ip neigh del %s dev eth0", softnicIP))
	require.NoError(t, err)
	permanent := fmt.Sprintf("/usr/bin/ip neigh replace %s lladdr %s dev eth0 nud permanent", softnicIP, softnicMAC)
	defer func() { _, _, _ = g.run(opTimeout, permanent) }()

	s := openSession(t, m, g, bin, filepath.Join(dir, "rdma.pcap"), func() {
		out, code, err := g.run(opTimeout, fmt.Sprintf("arping -c 1 -w 3 -I eth0 %s", softnicIP))
		if err == nil && (code != 0 || !strings.Contains(strings.ToLower(out), softnicMAC)) {
			err = fmt.Errorf("arping %s: exit %d: %s", softnicIP, code, out)
		}
		m.add("ARP who-has softnic", "rxe ⇒ softnic", noSize, err, "")
		if err != nil {
			t.Errorf("softnic does not answer ARP: %v", err)
			_, _, _ = g.run(opTimeout, permanent)
		}
	})
	sn, v := s.sn, s.v

	seed := uint32(0x5000)
	pairs := []struct {
		dir      string
		req, rsp *side
	}{{"softnic ⇒ rxe", sn, v}, {"rxe ⇒ softnic", v, sn}}
	for _, n := range sizes {
		for _, c := range []struct {
			op    string
			check func(req, rsp *side, n uint64, seed uint32) error
		}{{"RDMA_WRITE", checkWrite}, {"RDMA_READ", checkRead}, {"SEND", checkSend}} {
			for _, pr := range pairs {
				seed++
				who := "rxe_requester"
				if pr.req == sn {
					who = "softnic_requester"
				}
				name := fmt.Sprintf("%s/%s/%d", c.op, who, n)
				t.Run(name, func(t *testing.T) {
					s.row(t, m, c.op, pr.dir, int64(n), func() error { return c.check(pr.req, pr.rsp, n, seed) })
				})
			}
		}
	}
}

// testRdmaErrors checks the remote access error path both ways: a WRITE
// with a wrong rkey must be NAKed (remote access error), complete with
// REM_ACCESS_ERR at the requester and leave the target untouched. Each
// direction needs its own session: the error moves both QPs to Error.
func testRdmaErrors(t *testing.T, g *guest, bin, dir string, m *matrix) {
	const n = 64
	for _, c := range []struct {
		name, dir  string
		softnicReq bool
	}{{"softnic_requester", "softnic ⇒ rxe", true}, {"rxe_requester", "rxe ⇒ softnic", false}} {
		t.Run(c.name, func(t *testing.T) {
			s := openSession(t, m, g, bin, filepath.Join(dir, "rdma-bad-rkey-"+c.name+".pcap"), nil)
			req, rsp := s.v, s.sn
			if c.softnicReq {
				req, rsp = s.sn, s.v
			}
			s.row(t, m, "RDMA_WRITE bad rkey → NAK", c.dir, n, func() error {
				// Another key byte, same MR index: the responder finds the
				// MR but the key does not match.
				if err := req.p.write(rsp.mr.addr+writeOff, rsp.mr.rkey^0x80, n, 0x77); err != nil {
					return err
				}
				got, err := req.p.completion(opTimeout)
				if err != nil {
					return err
				}
				if got.status != "REM_ACCESS_ERR" {
					return fmt.Errorf("%s: got %v, want status REM_ACCESS_ERR", req.name, got)
				}
				sum, err := rsp.p.sum(writeOff, n, opTimeout)
				if err != nil {
					return err
				}
				if want := crc32.ChecksumIEEE(make([]byte, n)); sum != want {
					return fmt.Errorf("%s: target range changed by a refused WRITE (crc32 %08x, want %08x)", rsp.name, sum, want)
				}
				return nil
			})
		})
	}
}

// testRdmaAtomics runs FETCH_ADD and CMP_SWAP (a swap and a failing
// compare) between softnic rdma and verbs_peer, each side as requester.
// Each direction has its own session: an atomic the other side does not
// support moves both QPs to Error.
func testRdmaAtomics(t *testing.T, g *guest, bin, dir string, m *matrix) {
	for _, c := range []struct {
		name, dir  string
		softnicReq bool
	}{{"softnic_requester", "softnic ⇒ rxe", true}, {"rxe_requester", "rxe ⇒ softnic", false}} {
		t.Run(c.name, func(t *testing.T) {
			s := openSession(t, m, g, bin, filepath.Join(dir, "rdma-atomics-"+c.name+".pcap"), nil)
			req, rsp := s.v, s.sn
			if c.softnicReq {
				req, rsp = s.sn, s.v
			}
			seed := uint32(0x7000)
			for _, a := range atomicChecks {
				seed++
				t.Run(a.op, func(t *testing.T) {
					s.row(t, m, a.op, c.dir, 8, func() error { return a.check(req, rsp, seed) })
				})
			}
		})
	}
}

// testRdmaFaults has softnic lose one frame at its real wire (--faults)
// in the middle of a multi-packet WRITE, each way: as requester softnic
// drops its own WRITE MIDDLE packet (rxe NAKs the sequence error, softnic
// goes back N); as responder it drops rxe's (softnic NAKs, rxe resends).
// The data must arrive intact all the same.
func testRdmaFaults(t *testing.T, g *guest, bin, dir string, m *matrix) {
	const n = 4096
	for _, c := range []struct {
		name, dir, plan string
		softnicReq      bool
	}{
		{"softnic_requester", "softnic ⇒ rxe, softnic drops its WRITE MIDDLE", `{"seed": 1, "rules": [{"point": "wire.tx",
			"action": "drop", "nth": 1, "match": {"opcode": "RC_RDMA_WRITE_MIDDLE"}}]}`, true},
		{"rxe_requester", "rxe ⇒ softnic, softnic drops rxe's WRITE MIDDLE", `{"seed": 1, "rules": [{"point": "wire.rx",
			"action": "drop", "nth": 1, "match": {"opcode": "RC_RDMA_WRITE_MIDDLE"}}]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := filepath.Join(dir, "faults-"+c.name+".json")
			require.NoError(t, os.WriteFile(plan, []byte(c.plan), 0o644))
			s := openSessionArgs(t, m, g, bin, filepath.Join(dir, "rdma-faults-"+c.name+".pcap"), nil,
				"--faults", plan)
			req, rsp := s.v, s.sn
			if c.softnicReq {
				req, rsp = s.sn, s.v
			}
			s.row(t, m, "RDMA_WRITE, one frame lost", c.dir, n, func() error {
				if err := checkWrite(req, rsp, n, 0x8001); err != nil {
					return err
				}
				line := s.softnicCounters()
				if !strings.Contains(line, "fault_rule0_fired=1") {
					return fmt.Errorf("softnic's fault rule did not fire: %s", line)
				}
				return nil
			})
		})
	}
}

func transcript(s *side) string {
	if s == nil {
		return ""
	}
	return s.p.Transcript()
}

// lastLineWith returns the last line of s that contains sub.
func lastLineWith(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return "(no " + sub + " line)"
}
