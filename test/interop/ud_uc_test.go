package interop

// UD and UC QPs, and an RC peer that sleeps on a completion channel: guest-
// only rows (rxe against rxe) and rows between softnic rdma and verbs_peer,
// each way. What real Linux 6.1 rxe does is in shared/reference/rocev2.md
// §1.5: a UD receive buffer starts with a 40-byte GRH area (20 zero bytes,
// then the IPv4 header as it was on the wire), byte_len counts it, the WC
// has IBV_WC_GRH and the sender's QPN in src_qp, a SEND with another Q_Key
// is dropped; UC lands WRITE and SEND with no ACK, and after a lost MIDDLE
// rxe drops the rest of the message and also the next SEND ONLY.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	// grhBytes is the GRH area at the start of a UD receive buffer.
	grhBytes = 40
	// The Q_Keys of the two UD peers: different, so that a sender that put
	// its own Q_Key in the DETH (instead of the peer's) is caught.
	qkeyA = 0x11111111
	qkeyB = 0x22220001
	// eventSettle is how long a check waits after `recv` before the peer
	// sends, so that the receiver is asleep on its channel by then.
	eventSettle = 500 * time.Millisecond
)

// udSizes are the UD SEND sizes: empty, padded, and up to rxe's active MTU
// (1024 on a 1500-byte Ethernet; a larger UD SEND is silently not sent).
var udSizes = []uint64{0, 1, 64, 1024}

// pad4 rounds a payload up to the BTH pad.
func pad4(n uint64) uint64 { return (n + 3) &^ 3 }

// checkGRH checks the 40-byte GRH area of a UD receive of an n-byte SEND
// from src to dst: 20 zero bytes, then the IPv4 header as it was on the
// wire — version 4 / IHL 5, total length of IPv4 + UDP + BTH + DETH +
// padded payload + ICRC, TTL 64 (both senders' AH hop limit), protocol 17
// (UDP), a valid header checksum, and the source and destination addresses.
// On rxe's loopback the frame never reaches the IP stack and the checksum is
// left 0: zeroCsumOK accepts that.
func checkGRH(grh []byte, src, dst string, n uint64, zeroCsumOK bool) error {
	if len(grh) != grhBytes {
		return fmt.Errorf("GRH area of %d bytes, want %d", len(grh), grhBytes)
	}
	for i, b := range grh[:20] {
		if b != 0 {
			return fmt.Errorf("GRH area byte %d is %#02x, want 20 zero bytes before the IPv4 header: % x", i, b, grh)
		}
	}
	h := grh[20:]
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	wantLen := 20 + 8 + 12 + 8 + pad4(n) + 4
	srcIP, dstIP := netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
	switch {
	case h[0] != 0x45:
		return fmt.Errorf("IPv4 header in the GRH area: version/IHL %#02x, want 0x45: % x", h[0], h)
	case uint64(binary.BigEndian.Uint16(h[2:])) != wantLen:
		return fmt.Errorf("IPv4 total length %d, want %d for a %d-byte UD SEND: % x", binary.BigEndian.Uint16(h[2:]), wantLen, n, h)
	case h[8] != 64:
		return fmt.Errorf("IPv4 TTL %d, want 64: % x", h[8], h)
	case h[9] != 17:
		return fmt.Errorf("IPv4 protocol %d, want 17 (UDP): % x", h[9], h)
	case sum != 0xffff && !(zeroCsumOK && h[10] == 0 && h[11] == 0):
		return fmt.Errorf("IPv4 header checksum does not verify (sum %#04x): % x", sum, h)
	case srcIP.String() != src || dstIP.String() != dst:
		return fmt.Errorf("IPv4 addresses %v → %v, want %s → %s: % x", srcIP, dstIP, src, dst, h)
	}
	return nil
}

// checkSendUD: req SENDs n seeded bytes through its AH to rsp's UD QP. rsp's
// receive completes with byte_len n+40, the GRH flag and req's QPN as
// src_qp; its buffer holds the GRH area (checkGRH) and then the payload.
func checkSendUD(req, rsp *side, n uint64, seed uint32, loopback bool) error {
	if err := rsp.p.recv(1); err != nil {
		return err
	}
	if err := req.p.sendMsg(n, seed); err != nil {
		return err
	}
	if err := wantWC(req, "SEND", -1); err != nil {
		return err
	}
	if err := wantRecvUD(rsp, req, n); err != nil {
		return err
	}
	grh, err := rsp.p.dump(rsp.recvOff, grhBytes, opTimeout)
	if err != nil {
		return err
	}
	if err := checkGRH(grh, req.ip, rsp.ip, n, loopback); err != nil {
		return fmt.Errorf("%s: %w", rsp.name, err)
	}
	return wantSum(rsp, rsp.recvOff+grhBytes, n, seed)
}

// wantRecvUD reads rsp's receive completion of an n-byte UD SEND from req.
func wantRecvUD(rsp, req *side, n uint64) error {
	c, err := rsp.p.completion(opTimeout)
	if err != nil {
		return err
	}
	if c.status != "SUCCESS" || c.opcode != "RECV" || c.byteLen != n+grhBytes || !c.ud || !c.grh || c.srcQP != req.ep.qpn {
		return fmt.Errorf("%s: got %v, want SUCCESS RECV %d (payload + %d-byte GRH area) src_qp=%06x grh=1",
			rsp.name, c, n+grhBytes, grhBytes, req.ep.qpn)
	}
	return nil
}

// checkQKeyMismatch: req SENDs with a Q_Key that is not rsp's (dropped
// silently, no completion), then with the right one: rsp's first receive
// completion is the second message (told apart by its length).
func checkQKeyMismatch(req, rsp *side) error {
	const bad, good = 100, 64
	if err := rsp.p.recv(1); err != nil {
		return err
	}
	if err := req.p.sendQKey(bad, 0x9001, rsp.ep.qkey^0x00010000); err != nil {
		return err
	}
	if err := wantWC(req, "SEND", -1); err != nil {
		return fmt.Errorf("the SEND with the wrong Q_Key: %w", err)
	}
	if err := req.p.sendMsg(good, 0x9002); err != nil {
		return err
	}
	if err := wantWC(req, "SEND", -1); err != nil {
		return err
	}
	if err := wantRecvUD(rsp, req, good); err != nil {
		return fmt.Errorf("the SEND with the wrong Q_Key was not dropped? %w", err)
	}
	return wantSum(rsp, rsp.recvOff+grhBytes, good, 0x9002)
}

// refusedOn checks that a peer refuses the commands its QP type cannot run.
func refusedOn(s *side, qpType string, cmds ...string) error {
	for _, c := range cmds {
		if err := s.p.refused(c, "not supported on a "+qpType+" QP", opTimeout); err != nil {
			return err
		}
	}
	return nil
}

var (
	// notOnUD and notOnUC are commands of the protocol the QP type has no
	// operation for (arguments that would otherwise be valid).
	notOnUD = []string{"write 0 0 8 1", "read 0 0 8", "fadd 0 0 1", "cas 0 0 1 2"}
	notOnUC = []string{"read 0 0 8", "fadd 0 0 1", "cas 0 0 1 2"}
)

// udRows runs the UD checks between a and b, each way (loopback: both in
// the guest).
func udRows(t *testing.T, a, b *side, dirAB, dirBA string, loopback bool, row func(t *testing.T, op, dir string, size int64, check func() error)) {
	seed := uint32(0x3000)
	for _, n := range udSizes {
		for _, pr := range []struct {
			dir      string
			req, rsp *side
		}{{dirAB, a, b}, {dirBA, b, a}} {
			seed++
			t.Run(fmt.Sprintf("SEND/%s/%d", pr.req.name, n), func(t *testing.T) {
				row(t, "UD SEND (GRH, src_qp)", pr.dir, int64(n), func() error { return checkSendUD(pr.req, pr.rsp, n, seed, loopback) })
			})
		}
	}
	for _, pr := range []struct {
		dir      string
		req, rsp *side
	}{{dirAB, a, b}, {dirBA, b, a}} {
		t.Run("qkey_mismatch/"+pr.req.name, func(t *testing.T) {
			row(t, "UD SEND wrong Q_Key → dropped", pr.dir, 100, func() error { return checkQKeyMismatch(pr.req, pr.rsp) })
		})
	}
	t.Run("refused", func(t *testing.T) {
		row(t, "UD write/read/fadd/cas → ERR", "both peers", noSize, func() error {
			if err := refusedOn(a, "UD", notOnUD...); err != nil {
				return err
			}
			return refusedOn(b, "UD", notOnUD...)
		})
	})
}

// checkWriteUC: req RDMA-WRITEs n seeded bytes over UC. Nothing
// acknowledges it, so the requester's completion says only that it was
// sent: the responder's bytes are awaited.
func checkWriteUC(req, rsp *side, n uint64, seed uint32) error {
	if err := req.p.write(rsp.mr.addr+writeOff, rsp.mr.rkey, n, seed); err != nil {
		return err
	}
	if err := wantWC(req, "RDMA_WRITE", -1); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := wantSum(rsp, writeOff, n, seed)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ucRows runs the UC checks between a and b, each way: WRITE and SEND at
// every size, and the commands UC refuses.
func ucRows(t *testing.T, a, b *side, dirAB, dirBA string, row func(t *testing.T, op, dir string, size int64, check func() error)) {
	seed := uint32(0x4000)
	for _, n := range sizes {
		for _, c := range []struct {
			op    string
			check func(req, rsp *side, n uint64, seed uint32) error
		}{{"UC RDMA_WRITE", checkWriteUC}, {"UC SEND", checkSend}} {
			for _, pr := range []struct {
				dir      string
				req, rsp *side
			}{{dirAB, a, b}, {dirBA, b, a}} {
				seed++
				t.Run(fmt.Sprintf("%s/%s/%d", c.op, pr.req.name, n), func(t *testing.T) {
					row(t, c.op, pr.dir, int64(n), func() error { return c.check(pr.req, pr.rsp, n, seed) })
				})
			}
		}
	}
	t.Run("refused", func(t *testing.T) {
		row(t, "UC read/fadd/cas → ERR", "both peers", noSize, func() error {
			if err := refusedOn(a, "UC", notOnUC...); err != nil {
				return err
			}
			return refusedOn(b, "UC", notOnUC...)
		})
	})
}

// plainRow is a row for the guest-only checks.
func plainRow(m *matrix) func(t *testing.T, op, dir string, size int64, check func() error) {
	return func(t *testing.T, op, dir string, size int64, check func() error) {
		t.Helper()
		err := check()
		m.add(op, dir, size, err, "")
		require.NoError(t, err)
	}
}

func testLoopbackUD(t *testing.T, g *guest, m *matrix) {
	a, b := loopbackPair(t, g, fmt.Sprintf("-t ud --qkey %x", qkeyA), fmt.Sprintf("-t ud --qkey %x", qkeyB))
	udRows(t, a, b, loopbackDir, loopbackDir, true, plainRow(m))
}

func testLoopbackUC(t *testing.T, g *guest, m *matrix) {
	a, b := loopbackPair(t, g, "-t uc", "-t uc")
	ucRows(t, a, b, loopbackDir, loopbackDir, plainRow(m))
}

// checkEventSend: req SENDs n bytes to rsp, which sleeps on its completion
// channel (verbs_peer --events): rsp's CQ events rise, each acked, and so
// does the count of its sleeps — it was asleep when the completion came.
func checkEventSend(req, rsp *side, n uint64, seed uint32) error {
	evPeer := rsp
	before, err := evPeer.p.events(opTimeout)
	if err != nil {
		return err
	}
	if err := rsp.p.recv(1); err != nil {
		return err
	}
	time.Sleep(eventSettle) // the receiver is asleep by now
	if err := req.p.sendMsg(n, seed); err != nil {
		return err
	}
	if err := wantWC(req, "SEND", -1); err != nil {
		return err
	}
	if err := wantWC(rsp, "RECV", int64(n)); err != nil {
		return err
	}
	if err := wantSum(rsp, rsp.recvOff, n, seed); err != nil {
		return err
	}
	after, err := evPeer.p.events(opTimeout)
	if err != nil {
		return err
	}
	if after.events <= before.events || after.acked != after.events || after.sleeps <= before.sleeps {
		return fmt.Errorf("%s: CQ events %+v before, %+v after: want a wake-up by a CQ event, each acked", evPeer.name, before, after)
	}
	return nil
}

// eventRows: SENDs to ev, the verbs_peer --events server, which sleeps on
// its channel until the SEND's receive completion wakes it; then a SEND
// back and an RDMA WRITE to it (the server's own send completion, and a
// WRITE that completes nothing at the server, with the CQ armed). (A
// requester's own completion races its arm on a fast link, so only the
// server's receive is held to a wake-up.)
func eventRows(t *testing.T, other, ev *side, toEv, fromEv string, row func(t *testing.T, op, dir string, size int64, check func() error)) {
	seed := uint32(0x6000)
	for _, n := range []uint64{64, 4096} {
		seed++
		t.Run(fmt.Sprintf("server_receives/%d", n), func(t *testing.T) {
			row(t, "RC SEND, server asleep on its channel", toEv, int64(n), func() error { return checkEventSend(other, ev, n, seed) })
		})
		seed++
		t.Run(fmt.Sprintf("server_sends/%d", n), func(t *testing.T) {
			row(t, "RC SEND from the event-driven server", fromEv, int64(n), func() error { return checkSend(ev, other, n, seed) })
		})
		seed++
		t.Run(fmt.Sprintf("write_to_server/%d", n), func(t *testing.T) {
			row(t, "RC RDMA_WRITE to the event-driven server", toEv, int64(n), func() error { return checkWrite(other, ev, n, seed) })
		})
	}
}

func testLoopbackEvents(t *testing.T, g *guest, m *matrix) {
	a, b := loopbackPair(t, g, "", "--events")
	eventRows(t, a, b, loopbackDir, loopbackDir, plainRow(m))
}

// directions of the softnic rows.
const (
	snToRxe = "softnic ⇒ rxe"
	rxeToSn = "rxe ⇒ softnic"
)

// testRdmaUD: softnic rdma --qp-type ud against verbs_peer -t ud.
func testRdmaUD(t *testing.T, g *guest, bin, dir string, m *matrix) {
	s := openSessionOpts(t, m, g, bin, filepath.Join(dir, "rdma-ud.pcap"), sessionOpts{
		softnicArgs: []string{"--qp-type", "ud", "--qkey", fmt.Sprintf("%x", qkeyA)},
		peerArgs:    fmt.Sprintf("-t ud --qkey %x", qkeyB)})
	udRows(t, s.sn, s.v, snToRxe, rxeToSn, false, func(t *testing.T, op, dir string, size int64, check func() error) {
		s.row(t, m, op, dir, size, check)
	})
}

// testRdmaUC: softnic rdma --qp-type uc against verbs_peer -t uc.
func testRdmaUC(t *testing.T, g *guest, bin, dir string, m *matrix) {
	s := openSessionOpts(t, m, g, bin, filepath.Join(dir, "rdma-uc.pcap"), sessionOpts{
		softnicArgs: []string{"--qp-type", "uc"}, peerArgs: "-t uc"})
	ucRows(t, s.sn, s.v, snToRxe, rxeToSn, func(t *testing.T, op, dir string, size int64, check func() error) {
		s.row(t, m, op, dir, size, check)
	})
}

// testRdmaUCLoss loses the first SEND MIDDLE packet of a 4096-byte UC SEND
// at softnic's wire, each way, then sends a 64-byte and a 100-byte SEND
// ONLY. The responder drops the rest of the broken message. softnic, as
// the IB spec says, starts over at the next FIRST or ONLY: its first
// receive is the 64-byte message. rxe also drops the first whole SEND ONLY
// after the broken message (rocev2.md §1.5): its first receive is the
// 100-byte one.
func testRdmaUCLoss(t *testing.T, g *guest, bin, dir string, m *matrix) {
	for _, c := range []struct {
		name, dir, plan string
		softnicReq      bool
	}{
		{"softnic_requester", snToRxe + ", softnic drops its SEND MIDDLE", `{"seed": 1, "rules": [{"point": "wire.tx",
			"action": "drop", "nth": 1, "match": {"opcode": "UC_SEND_MIDDLE"}}]}`, true},
		{"rxe_requester", rxeToSn + ", softnic drops rxe's SEND MIDDLE", `{"seed": 1, "rules": [{"point": "wire.rx",
			"action": "drop", "nth": 1, "match": {"opcode": "UC_SEND_MIDDLE"}}]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := filepath.Join(dir, "faults-uc-"+c.name+".json")
			require.NoError(t, os.WriteFile(plan, []byte(c.plan), 0o644))
			s := openSessionOpts(t, m, g, bin, filepath.Join(dir, "rdma-uc-loss-"+c.name+".pcap"), sessionOpts{
				softnicArgs: []string{"--qp-type", "uc", "--faults", plan}, peerArgs: "-t uc"})
			req, rsp := s.v, s.sn
			if c.softnicReq {
				req, rsp = s.sn, s.v
			}
			op := "UC SEND, MIDDLE lost: next SEND ONLY arrives (spec)"
			if c.softnicReq {
				op = "UC SEND, MIDDLE lost: next SEND ONLY dropped too (rxe)"
			}
			s.row(t, m, op, c.dir, 4096, func() error {
				if err := rsp.p.recv(1); err != nil {
					return err
				}
				for _, msg := range []struct {
					n    uint64
					seed uint32
				}{{4096, 0xa001}, {64, 0xa002}, {100, 0xa003}} {
					if err := req.p.sendMsg(msg.n, msg.seed); err != nil {
						return err
					}
					if err := wantWC(req, "SEND", -1); err != nil {
						return err
					}
				}
				if !c.softnicReq {
					// softnic: the 64-byte SEND ONLY, then the 100-byte one
					// (which lands where the 64 bytes did: every receive
					// covers the same area, so only the last one's bytes can
					// be checked).
					if err := wantWC(rsp, "RECV", 64); err != nil {
						return fmt.Errorf("after the broken message: %w", err)
					}
					if err := rsp.p.recv(1); err != nil {
						return err
					}
				}
				if err := wantWC(rsp, "RECV", 100); err != nil {
					return fmt.Errorf("after the broken message: %w", err)
				}
				if err := wantSum(rsp, rsp.recvOff, 100, 0xa003); err != nil {
					return err
				}
				if line := s.softnicCounters(); !slices.Contains(strings.Fields(line), "fault_rule0_fired=1") {
					return fmt.Errorf("softnic's fault rule did not fire: %s", line)
				}
				return nil
			})
		})
	}
}

// testRdmaEvents: softnic rdma (RC) against verbs_peer --events, the rxe
// server that sleeps on its completion channel.
func testRdmaEvents(t *testing.T, g *guest, bin, dir string, m *matrix) {
	s := openSessionOpts(t, m, g, bin, filepath.Join(dir, "rdma-events.pcap"), sessionOpts{peerArgs: "--events"})
	eventRows(t, s.sn, s.v, snToRxe, rxeToSn, func(t *testing.T, op, dir string, size int64, check func() error) {
		s.row(t, m, op, dir, size, check)
	})
}
