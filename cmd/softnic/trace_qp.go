package main

// The endpoints of `softnic trace` when testbed.ConnectRC cannot build them:
// UC and UD QPs, a responder whose receives come from an SRQ, and CQs on a
// completion channel (--events). RC without --srq or --events keeps
// testbed's connection, so its walk stays what it was.

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// grhArea is the 40-byte area a UD receive buffer starts with (RoCEv2 over
// IPv4: 20 zero bytes, then the IPv4 header of the packet).
const grhArea = 40

// traceQKey is the Q_Key of both UD QPs of the walk (ibv_ud_pingpong's).
const traceQKey = 0x11111111

// traceConn shapes the two endpoints.
type traceConn struct {
	typ              provider.QPType
	srq              bool // the responder (node 1) receives from an SRQ
	events           bool // CQs on a completion channel per host
	mtu, bufSize     int
	sqDepth, rqDepth int
	maxInline        int
}

// traceEP is one endpoint: testbed's, plus what the walk's variants add.
type traceEP struct {
	*testbed.Endpoint
	SRQ  *provider.SRQ // the responder's, with --srq
	AH   *provider.AH  // UD: the peer's address
	Chan *compChannel  // with --events: the channel of both CQs
}

// postRecv posts receives to the endpoint's SRQ, or else its QP.
func (e *traceEP) postRecv(wrs []provider.RecvWR) error {
	var err error
	if e.SRQ != nil {
		_, err = e.SRQ.PostRecv(wrs)
	} else {
		_, err = e.QP.PostRecv(wrs)
	}
	return err
}

// connectTrace creates, on each host, a PD, the CQs, a registered buffer
// and a QP of c.typ, and brings both QPs to RTS: RC and UC connected to
// each other, UD with an address handle for the peer. PSNs are testbed's
// (0x1000, 0x2000).
func connectTrace(w *testbed.World, c traceConn) ([2]*traceEP, error) {
	access := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead
	if c.typ == provider.QPTypeUC {
		access = provider.AccessLocalWrite | provider.AccessRemoteWrite
	}
	psn := [2]uint32{0x1000, 0x2000}
	var eps [2]*traceEP
	for i, h := range w.Hosts {
		e := &traceEP{Endpoint: &testbed.Endpoint{Host: h}}
		var err error
		if e.PD, err = h.Ctx.AllocPD(); err != nil {
			return eps, err
		}
		if c.events {
			if e.Chan, err = createCompChannel(h.Ctx); err != nil {
				return eps, err
			}
		}
		if e.SendCQ, err = createTraceCQ(h.Ctx, 256, e.Chan); err != nil {
			return eps, err
		}
		if e.RecvCQ, err = createTraceCQ(h.Ctx, 256, e.Chan); err != nil {
			return eps, err
		}
		if e.Buf, err = h.Ctx.AllocBuffer(c.bufSize, 4096); err != nil {
			return eps, err
		}
		if e.MR, err = e.PD.RegMR(e.Buf.Addr, uint64(c.bufSize), access); err != nil {
			return eps, err
		}
		if c.srq && i == 1 {
			if e.SRQ, err = e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: c.rqDepth, MaxSGE: 1}); err != nil {
				return eps, err
			}
		}
		e.QP, err = h.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: c.typ, SendCQ: e.SendCQ, RecvCQ: e.RecvCQ, SRQ: e.SRQ,
			Cap: provider.QPCap{MaxSendWR: c.sqDepth, MaxRecvWR: c.rqDepth, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: c.maxInline}})
		if err != nil {
			return eps, err
		}
		eps[i] = e
	}
	for i, e := range eps {
		peer := eps[1-i]
		pid := peer.Host.Dev.Identity()
		// As testbed.ConnectRC for RC; one QP after the other.
		a := provider.ConnectAttr{Peer: provider.Peer{QPN: peer.QP.QPN(), PSN: psn[1-i], GID: pid.IP.As16(), MAC: pid.MAC},
			PSN: psn[i], MTU: c.mtu, Access: access, QKey: traceQKey, SGIDIndex: 1, HopLimit: 64,
			MaxRdAtomic: 16, MaxDestRdAtomic: 16, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7}
		if err := e.QP.Connect(a); err != nil {
			return eps, err
		}
		if c.typ == provider.QPTypeUD {
			var err error
			if e.AH, err = e.PD.CreateAH(provider.AHAttr{DGID: pid.IP.As16(), DMAC: pid.MAC, Port: 1, SGIDIndex: 1, HopLimit: 64}); err != nil {
				return eps, err
			}
		}
	}
	return eps, nil
}

// checkGRHArea checks a UD receive's GRH area: 20 zero bytes, then the
// IPv4 header of the packet (version 4, IHL 5, protocol 17, a valid
// checksum) from src to dst. It returns what is wrong, or "".
func checkGRHArea(b []byte, src, dst netip.Addr) string {
	if len(b) < grhArea {
		return fmt.Sprintf("GRH area of %d bytes", len(b))
	}
	for i, x := range b[:20] {
		if x != 0 {
			return fmt.Sprintf("GRH area byte %d is %#02x, not one of 20 zero bytes", i, x)
		}
	}
	h := b[20:grhArea]
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	s, d := netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
	switch {
	case h[0] != 0x45:
		return fmt.Sprintf("IPv4 header in the GRH area starts %#02x, not 0x45", h[0])
	case h[9] != 17:
		return fmt.Sprintf("IPv4 protocol %d in the GRH area, not 17 (UDP)", h[9])
	case sum != 0xffff:
		return "the IPv4 header checksum in the GRH area does not verify"
	case s != src || d != dst:
		return fmt.Sprintf("IPv4 addresses %v → %v in the GRH area, not %v → %v", s, d, src, dst)
	}
	return ""
}

// describeGRH is the text walk's picture of a UD receive buffer: the GRH
// area (the zeros, the IPv4 header decoded) and the first payload bytes.
func describeGRH(b []byte, payload int) string {
	if len(b) < grhArea {
		return ""
	}
	h := b[20:grhArea]
	show := min(payload, 16)
	return fmt.Sprintf("  +0x00  %s  GRH area: 20 zero bytes\n"+
		"  +0x14  %s  IPv4 header: version/IHL %#02x, total length %d, TTL %d, protocol %d, %v → %v\n"+
		"  +0x28  %-44s  payload (%d bytes)\n",
		hexLine(b[:20]), hexLine(h), h[0], binary.BigEndian.Uint16(h[2:]), h[8], h[9],
		netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20])),
		hexLine(b[grhArea:grhArea+show])+map[bool]string{true: " …", false: ""}[payload > show], payload)
}

// armedCQ is a CQ armed before the post (--events).
type armedCQ struct {
	node int
	cq   *provider.CQ
	ch   *compChannel
}

// eventLatencies finds, for each armed CQ, its walk in the stages: the
// node's first cq_arm, the eqe_write after it and the event after that.
// A CQ whose walk is incomplete is left out.
func eventLatencies(armed []armedCQ, stages []stageJSON) []eventJSON {
	var out []eventJSON
	used := map[int]bool{}
	find := func(name string, node int, from float64) int {
		for i, s := range stages {
			if s.Name == name && s.Node == node && s.StartNS >= from && !used[i] {
				return i
			}
		}
		return -1
	}
	for _, a := range armed {
		arm := find("cq_arm", a.node, -1e18)
		if arm < 0 {
			continue
		}
		eqe := find("eqe_write", a.node, stages[arm].StartNS)
		if eqe < 0 {
			continue
		}
		ev := find("event", a.node, stages[eqe].StartNS)
		if ev < 0 {
			continue
		}
		used[arm], used[eqe], used[ev] = true, true, true
		e := eventJSON{Node: a.node, CQN: a.cq.CQN(), ArmNS: stages[arm].StartNS, EQENS: stages[eqe].StartNS,
			EventNS: stages[ev].EndNS, LatencyNS: stages[ev].EndNS - stages[arm].StartNS}
		// The provider's ReqNotify that rang the arm, and the interrupt
		// between the EQE and the event, when the trace has them.
		if rn := find("req_notify", a.node, -1e18); rn >= 0 && stages[rn].StartNS <= e.ArmNS {
			used[rn] = true
			v := stages[rn].StartNS
			e.ReqNotifyNS = &v
		}
		if mi := find("msix", a.node, e.EQENS); mi >= 0 && stages[mi].StartNS <= stages[ev].StartNS {
			used[mi] = true
			v := stages[mi].StartNS
			e.MSIXNS = &v
		}
		out = append(out, e)
	}
	return out
}

// rwcsFlags is the wc_flags of the completion of wrID.
func rwcsFlags(wcs []provider.WC, wrID uint64) provider.WCFlags {
	for _, wc := range wcs {
		if wc.WRID == wrID {
			return wc.Flags
		}
	}
	return 0
}
